"""Topic administration for the tests and the demo, through confluent-kafka's AdminClient.

Independent of netkafka on purpose: a test's topics exist because librdkafka made them, not
because netkafka's own protocol code believes so.  The same goes for broker_api_versions:
what a broker offers, as librdkafka heard it.
"""
import logging
import re
import time
from typing import Mapping, Optional, Sequence

from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient, ClusterMetadata, NewPartitions, NewTopic, OffsetSpec,
)

CREATE_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.05
# The KRaft controller refuses an operation of more than 10,000 records (POLICY_VIOLATION
# "Unable to perform excessively large batch operation"): a larger topic is created with
# this many partitions, then grown by this many at a time.
PARTITIONS_PER_REQUEST = 5000


def admin_client(bootstrap: str, client_config: Optional[Mapping[str, object]] = None) -> AdminClient:
    """An AdminClient of bootstrap; client_config: further settings (a secured listener's)."""
    return AdminClient({**(client_config or {}), "bootstrap.servers": bootstrap})


# librdkafka's "feature" debug lines list the broker's ApiVersions answer one key a line:
# "...:   ApiKey Produce (0) Versions 0..11".
_API_VERSION_LINE = re.compile(r"ApiKey (\w+) \((\d+)\) Versions (\d+)\.\.(\d+)")


def broker_api_versions(bootstrap: str, client_config: Optional[Mapping[str, object]] = None,
                        timeout_s: float = CREATE_TIMEOUT_S) -> dict[str, tuple[int, int]]:
    """The broker's ApiVersions answer as librdkafka logs it: {"Produce": (0, 11), ...}.

    Args:
        client_config: further client settings (a secured listener's).

    Raises:
        KafkaException: no broker answered within timeout_s.
        RuntimeError: the client connected but logged no ApiVersions answer.
    """
    lines = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    # A logger outside logging's tree: no other client's lines mix in, none of these leak out.
    logger = logging.Logger("netkafka.testing.api_versions", logging.DEBUG)
    logger.addHandler(_Collect())
    client = Producer({**(client_config or {}), "bootstrap.servers": bootstrap, "debug": "feature",
                       "logger": logger})
    client.list_topics(timeout=timeout_s)
    client.poll(0)  # hands over the log lines queued so far
    versions = {}
    for line in lines:
        match = _API_VERSION_LINE.search(line)
        if match:
            versions[match.group(1)] = (int(match.group(3)), int(match.group(4)))
    if not versions:
        raise RuntimeError(f"librdkafka logged no ApiVersions answer from {bootstrap}")
    return versions


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication_factor: int = 1,
                 config: Optional[Mapping[str, str]] = None,
                 timeout_s: float = CREATE_TIMEOUT_S,
                 client_config: Optional[Mapping[str, object]] = None) -> ClusterMetadata:
    """Create a topic and wait until every partition's leader accepts requests.

    A topic of more than PARTITIONS_PER_REQUEST partitions is made in steps of that many.

    Args:
        config: topic-level settings, e.g. {"min.insync.replicas": "2"}.
        client_config: further settings of the admin client (a secured listener's).

    Returns:
        The cluster metadata, holding the topic with its partitions, leaders and ISRs.

    Raises:
        confluent_kafka.KafkaException: the broker refused the topic (it exists already, bad
            settings, too few brokers for the replication factor, ...).
        TimeoutError: the partitions had no serving leader within timeout_s.
    """
    return create_topics(bootstrap, [name], partitions, replication_factor, config, timeout_s,
                         client_config)


def create_topics(bootstrap: str, names: Sequence[str], partitions: int = 1,
                  replication_factor: int = 1, config: Optional[Mapping[str, str]] = None,
                  timeout_s: float = CREATE_TIMEOUT_S,
                  client_config: Optional[Mapping[str, object]] = None) -> ClusterMetadata:
    """create_topic for several topics of the same shape, in one request per step (one
    request per topic made 1,000 topics take many minutes); returns the cluster metadata
    as the last topic's wait read it."""
    if not names:
        raise ValueError("create_topics: no topic names")
    admin = admin_client(bootstrap, client_config)
    first = min(partitions, PARTITIONS_PER_REQUEST)
    topics = [NewTopic(name, num_partitions=first, replication_factor=replication_factor,
                       config=dict(config or {})) for name in names]
    for future in admin.create_topics(topics, operation_timeout=timeout_s).values():
        future.result(timeout=timeout_s)
    for count in range(first + PARTITIONS_PER_REQUEST, partitions + PARTITIONS_PER_REQUEST,
                       PARTITIONS_PER_REQUEST):
        grown = [NewPartitions(name, min(count, partitions)) for name in names]
        for future in admin.create_partitions(grown, operation_timeout=timeout_s).values():
            future.result(timeout=timeout_s)
    for name in names:
        metadata = wait_for_leaders(admin, name, partitions, timeout_s)
        wait_for_serving_leaders(admin, name, partitions, timeout_s)
    return metadata


def wait_for_leaders(admin: AdminClient, name: str, partitions: int,
                     timeout_s: float = CREATE_TIMEOUT_S) -> ClusterMetadata:
    """Poll the metadata until `name` has `partitions` partitions, each with a leader."""
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = admin.list_topics(topic=name, timeout=timeout_s)
        topic = metadata.topics.get(name)
        if (topic is not None and topic.error is None and len(topic.partitions) == partitions
                and all(p.leader >= 0 and p.error is None for p in topic.partitions.values())):
            return metadata
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name!r} has no leader for all {partitions} partitions "
                               f"after {timeout_s:.0f} s (last metadata: {topic!r})")
        time.sleep(POLL_INTERVAL_S)


def wait_for_serving_leaders(admin: AdminClient, name: str, partitions: int,
                             timeout_s: float = CREATE_TIMEOUT_S) -> None:
    """Poll until every partition's leader answers a ListOffsets request.

    The metadata can name a leader before that broker has made its replica the
    leader; until then it answers writes with NOT_LEADER_OR_FOLLOWER, which an
    acks=0 producer never hears about, so its records would be lost to the test.
    ListOffsets is served by the leader replica only, so its success means the
    partition takes writes.
    """
    deadline = time.monotonic() + timeout_s
    pending = {TopicPartition(name, p) for p in range(partitions)}
    while True:
        answers = admin.list_offsets({tp: OffsetSpec.latest() for tp in pending},
                                     request_timeout=timeout_s)
        last_error = None
        for tp, future in answers.items():
            try:
                future.result()
            except KafkaException as exc:
                last_error = exc
            else:
                pending.discard(tp)
        if not pending:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name!r}: partitions {sorted(tp.partition for tp in pending)} "
                               f"not served by their leaders after {timeout_s:.0f} s "
                               f"(last error: {last_error})")
        time.sleep(POLL_INTERVAL_S)
