"""OffsetFetch: a consumer group's committed offsets, asked of its group coordinator.

netkafka reads one group's offsets of named partitions (v1..v7: one group per
request; v8+ batch groups and are not spoken).  From v7 (KIP-447) require_stable
makes the coordinator answer UNSTABLE_OFFSET_COMMIT, retriable, while a transaction
holding offsets of these partitions is still open, rather than the last stable
offset: what a task that must not redo a committed write needs (spark/datasource.py).
"""
from dataclasses import dataclass

from netkafka.protocol.framing import (
    ApiKey, ApiSpec, finish_request, response_reader, start_request,
)

# v0 read offsets kept in ZooKeeper; Kafka 4.0 removed it.
API = ApiSpec(ApiKey.OFFSET_FETCH, min_version=1, max_version=7, flexible_version=6)

# The first version that takes require_stable.
REQUIRE_STABLE_VERSION = 7
# No offset committed for the partition.
NO_OFFSET = -1


def encode_offset_fetch_request(correlation_id, client_id, version, group_id, partitions,
                                require_stable):
    """Encodes an OffsetFetch request (v1..v7) for one group as a complete frame.

    Args:
        correlation_id, client_id, version: as for every request.
        group_id: the consumer group.
        partitions: {topic: [partition index]}, at least one partition.
        require_stable: wait out open transactions' offsets (sent from v7; before
            it the coordinator answers the last stable offset).
    """
    if not partitions:
        raise ValueError("OffsetFetch needs at least one partition (netkafka never asks "
                         "for all of a group's offsets)")
    w = start_request(API, version, correlation_id, client_id)
    w.string(group_id)
    w.topic_partition_indexes(partitions)
    if version >= REQUIRE_STABLE_VERSION:
        w.boolean(require_stable)
    w.tagged_fields()
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class PartitionOffsetFetched:
    """One partition's committed offset as the coordinator answered it."""

    offset: int  # NO_OFFSET when none is committed
    leader_epoch: int  # -1 before v5 or when unknown
    metadata: object  # str or None
    error_code: int


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    """A decoded OffsetFetch response."""

    throttle_time_ms: int  # 0 before v3
    error_code: int  # the group's (v2+; 0 before)
    partitions: dict  # (topic, partition) -> PartitionOffsetFetched


def decode_offset_fetch_response(data, version):
    """Decodes an OffsetFetch response (data: after the correlation id)."""
    r = response_reader(API, data, version)
    flexible = r.flexible
    throttle_time_ms = r.int32() if version >= 3 else 0
    # A topic: name, partition count (and tagged fields); a partition: index, offset,
    # (leader epoch), metadata, error code (and tagged fields).
    topic_min = 3 if flexible else 6
    partition_min = 4 + 8 + (4 if version >= 5 else 0) + (1 if flexible else 2) + 2 + (
        1 if flexible else 0)
    partitions = {}
    for _ in range(r.required_array_length(topic_min, "topics")):
        topic = r.string()
        for _ in range(r.required_array_length(partition_min, "partitions")):
            index = r.int32()
            offset = r.int64()
            leader_epoch = r.int32() if version >= 5 else -1
            metadata = r.nullable_string()
            partitions[(topic, index)] = PartitionOffsetFetched(offset, leader_epoch, metadata,
                                                                r.int16())
            if flexible:
                r.skip_tagged_fields()
        if flexible:
            r.skip_tagged_fields()
    error_code = r.int16() if version >= 2 else 0
    if flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return OffsetFetchResponse(throttle_time_ms, error_code, partitions)
