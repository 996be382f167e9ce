"""A consumer group's committed offsets, read from its group coordinator (OffsetFetch).

A transactional producer commits offsets with send_offsets_to_transaction(); reading
them back is how a writer learns whether a transaction it may have committed before
(in a process that died) did commit: netkafka.spark's commit markers.  The read asks
for stable offsets (require_stable, OffsetFetch v7+): while a transaction holding
offsets of these partitions is open, the coordinator answers UNSTABLE_OFFSET_COMMIT
and the read waits it out instead of returning what was committed before it.

Retriable answers (the coordinator loading, moved, an open transaction) and lost
connections are asked again after a backoff until the caller's deadline
(retry.ask_until; Coordinators.request() forgets a coordinator that moved).

Threads: blocks, so callers' threads only, never an I/O thread.  Nothing here keeps
state (the Coordinators cache is its own).
"""
from netkafka import errors
from netkafka.client.retry import ask_until
from netkafka.protocol.find_coordinator import GROUP
from netkafka.protocol.framing import ApiKey
from netkafka.protocol.offset_fetch import (
    NO_OFFSET, decode_offset_fetch_response, encode_offset_fetch_request,
)


def fetch_committed_offsets(coordinators, group_id, partitions, deadline, retry_backoff):
    """The stable committed offsets of group_id's partitions.

    Args:
        coordinators: a client.coordinator.Coordinators.
        group_id: the consumer group.
        partitions: iterable of (topic, partition).
        deadline: time.monotonic() by which to have the answer.
        retry_backoff: the RetryBackoff before asking again after a retriable answer.

    Returns:
        {(topic, partition): offset, or None if the group has none committed}.

    Raises:
        KafkaTimeoutError: only retriable answers (or none) before deadline; the last
            one named.
        BrokerError: refused for good (e.g. GROUP_AUTHORIZATION_FAILED), named.
    """
    by_topic = {}
    asked = set()
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
        asked.add((topic, partition))
    what = f"OffsetFetch of group {group_id!r}"

    def attempt(remaining_s):
        return coordinators.request(
            GROUP, group_id, deadline, remaining_s, what, ApiKey.OFFSET_FETCH,
            lambda cid, client_id, version: encode_offset_fetch_request(
                cid, client_id, version, group_id, by_topic, require_stable=True),
            decode_offset_fetch_response,
            lambda response, where: _error(response, asked, where))

    response = ask_until(deadline, f"{what}: no answer in time", attempt,
                         retry_backoff, last_error_after="; ")
    # Only the partitions asked: others in the answer are none of the caller's.
    answered = response.partitions
    return {key: (None if answered[key].offset == NO_OFFSET else answered[key].offset)
            for key in asked}


def _error(response, asked, where):
    """The answer's error to act on (the group's, else that of a partition of asked:
    one that is not retriable first), or None; an answer missing a partition asked
    for is a ProtocolError."""
    if response.error_code:
        return errors.error_for_code(response.error_code, where)
    missing = asked - response.partitions.keys()
    if missing:
        return errors.ProtocolError(f"{where}: no answer for {sorted(missing)}")
    failed = [errors.error_for_code(entry.error_code, f"{where}: {topic}-{partition}")
              for (topic, partition), entry in sorted(response.partitions.items())
              if entry.error_code and (topic, partition) in asked]
    failed.sort(key=lambda error: error.retriable)
    return failed[0] if failed else None
