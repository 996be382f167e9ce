"""Metadata: the cluster's brokers and, per topic asked for, its partitions
and their leaders (the client's metadata cache is built from it).

The decoder checks that the bytes are well formed; check_metadata_response()
checks that the values in them can be true before the cache routes records or
sizes a partition table by them.
"""
from dataclasses import dataclass

from netkafka.errors import ProtocolError

from netkafka.protocol.framing import (
    ZERO_UUID, ApiKey, ApiSpec, Node, check_node_address, finish_request, response_reader,
    start_request,
)

API = ApiSpec(ApiKey.METADATA, min_version=0, max_version=13, flexible_version=9)


def encode_metadata_request(correlation_id, client_id, version, topics=None,
                            allow_auto_topic_creation=False):
    """Encodes a Metadata request (v0..v13) as a complete frame.

    Args:
        correlation_id, client_id, version: as for every request.
        topics: topic names to describe, or None for all topics.  v0 cannot ask
            for no topics (its empty list means all).
        allow_auto_topic_creation: let the broker create missing topics, if its
            auto.create.topics.enable allows (v4+; older versions always may).
    """
    w = start_request(API, version, correlation_id, client_id)
    if version == 0:
        if topics is not None and not topics:
            raise ValueError("Metadata v0 cannot ask for no topics (an empty list means all)")
        topics = topics or []
    if topics is None:
        w.array_length(None)
    else:
        w.array_length(len(topics))
        for name in topics:
            if version >= 10:
                w.uuid(ZERO_UUID)  # by name, not by id
            w.string(name)
            w.tagged_fields()
    if version >= 4:
        w.boolean(allow_auto_topic_creation)
    if 8 <= version <= 10:
        w.boolean(False)  # include cluster authorized operations
    if version >= 8:
        w.boolean(False)  # include topic authorized operations
    w.tagged_fields()
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition as a Metadata response describes it."""

    error_code: int
    partition: int
    leader: int  # broker id of the leader, -1 if none
    leader_epoch: int  # -1 before v7
    replicas: tuple  # broker ids hosting the partition
    isr: tuple  # broker ids in sync with the leader
    offline_replicas: tuple  # broker ids of offline replicas; () before v5


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic as a Metadata response describes it."""

    error_code: int
    name: object  # str; None only for a topic asked for by id (v12+)
    topic_id: object  # uuid.UUID from v10; None before, or if the broker gave none
    is_internal: bool
    partitions: list  # PartitionMetadata


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    """A decoded Metadata response."""

    throttle_time_ms: int
    brokers: list  # Node
    cluster_id: object  # str or None (v2+)
    controller_id: int  # -1 if unknown or before v1
    topics: list  # TopicMetadata
    error_code: int  # top-level error (v13+), else 0


def decode_metadata_response(data, version):
    """Decodes a Metadata response (data: after the correlation id)."""
    r = response_reader(API, data, version)
    flexible = r.flexible
    # Each length/count field is 1 byte compact, else 2 (strings) or 4 (arrays).
    string_min, array_min, tags_min = (1, 1, 1) if flexible else (2, 4, 0)
    throttle_time_ms = r.int32() if version >= 3 else 0

    broker_min = 4 + string_min + 4 + (string_min if version >= 1 else 0) + tags_min
    brokers = []
    for _ in range(r.required_array_length(broker_min, "brokers")):
        node_id = r.int32()
        host = r.string()
        port = r.int32()
        rack = r.nullable_string() if version >= 1 else None
        if flexible:
            r.skip_tagged_fields()
        brokers.append(Node(node_id, host, port, rack))
    cluster_id = r.nullable_string() if version >= 2 else None
    controller_id = r.int32() if version >= 1 else -1

    partition_min = (2 + 4 + 4 + (4 if version >= 7 else 0)
                     + array_min * (3 if version >= 5 else 2) + tags_min)
    topic_min = (2 + string_min + (16 if version >= 10 else 0) + (1 if version >= 1 else 0)
                 + array_min + (4 if version >= 8 else 0) + tags_min)
    topics = []
    for _ in range(r.required_array_length(topic_min, "topics")):
        error_code = r.int16()
        name = r.nullable_string() if version >= 12 else r.string()
        topic_id = r.uuid() if version >= 10 else None
        if topic_id == ZERO_UUID:
            topic_id = None  # Kafka's "no id"
        is_internal = r.boolean() if version >= 1 else False
        partitions = []
        for _ in range(r.required_array_length(partition_min, "partitions")):
            partitions.append(PartitionMetadata(
                error_code=r.int16(),
                partition=r.int32(),
                leader=r.int32(),
                leader_epoch=r.int32() if version >= 7 else -1,
                replicas=tuple(r.int32_array()),
                isr=tuple(r.int32_array()),
                offline_replicas=tuple(r.int32_array()) if version >= 5 else (),
            ))
            if flexible:
                r.skip_tagged_fields()
        if version >= 8:
            r.int32()  # topic authorized operations: not asked for
        if flexible:
            r.skip_tagged_fields()
        topics.append(TopicMetadata(error_code, name, topic_id, is_internal, partitions))
    if 8 <= version <= 10:
        r.int32()  # cluster authorized operations: not asked for
    error_code = r.int16() if version >= 13 else 0
    if flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return MetadataResponse(throttle_time_ms, brokers, cluster_id, controller_id, topics,
                            error_code)


def check_metadata_response(response):
    """Raises ProtocolError naming the first value of a decoded Metadata answer
    that no broker sends: an empty or inconsistent broker list, a host or port
    that cannot be connected to, a topic without a name or listed twice, two topics
    with one topic id, partition indexes that are not exactly 0..count-1, a leader
    (other than -1: none) that is not a listed broker, a negative node id or epoch.
    Afterwards a topic's partition count bounds every index in it, so nothing is
    sized by an index.
    """
    if not response.brokers:
        raise ProtocolError("the answer lists no brokers")
    node_ids = set()
    for broker in response.brokers:
        _check_broker(broker, node_ids)
        node_ids.add(broker.node_id)
    if response.controller_id < -1:
        raise ProtocolError(f"controller id {response.controller_id} is negative")
    names = set()
    ids = {}  # topic id -> the topic that has it
    for topic in response.topics:
        if not topic.name:
            raise ProtocolError(f"a topic has no name ({topic.name!r})")
        if topic.name in names:
            raise ProtocolError(f"topic {topic.name!r} is listed twice")
        names.add(topic.name)
        if topic.topic_id is not None:
            # Produce v13+ names topics by id: with one id for two topics, records of
            # one would be written to the other.
            other = ids.setdefault(topic.topic_id, topic.name)
            if other != topic.name:
                raise ProtocolError(f"topics {other!r} and {topic.name!r} have the same "
                                    f"topic id {topic.topic_id}")
        _check_partitions(topic, node_ids)


def _check_broker(broker, node_ids):
    check_node_address(broker.node_id, broker.host, broker.port)
    if broker.node_id in node_ids:
        raise ProtocolError(f"broker {broker.node_id} is listed twice")


def _check_partitions(topic, node_ids):
    count = len(topic.partitions)
    seen = set()
    for p in topic.partitions:
        where = f"topic {topic.name!r} partition {p.partition}"
        if not 0 <= p.partition < count:
            raise ProtocolError(f"{where}: the index is outside 0..{count - 1} (the answer "
                                f"lists {count} partitions of the topic)")
        if p.partition in seen:
            raise ProtocolError(f"{where} is listed twice")
        seen.add(p.partition)
        if p.leader != -1 and p.leader not in node_ids:
            raise ProtocolError(f"{where}: leader {p.leader} is not among the listed "
                                f"brokers {sorted(node_ids)} (-1 would mean no leader)")
        if p.leader_epoch < -1:
            raise ProtocolError(f"{where}: leader epoch {p.leader_epoch} is negative")
        for field in ("replicas", "isr", "offline_replicas"):
            if any(node < 0 for node in getattr(p, field)):
                raise ProtocolError(f"{where}: {field} {list(getattr(p, field))} holds a "
                                    "negative node id")
