"""The consumer offsets a transaction commits, and the consumer group they belong to.

send_offsets_to_transaction() takes them in the shapes Python's Kafka clients hand out:

    offsets   {TopicPartition: OffsetAndMetadata} -- netkafka's names below, kafka-python's,
              or any (topic, partition) pair mapped to an OffsetAndMetadata of either client
              or to a plain int; or confluent-kafka's list of TopicPartition objects, each
              carrying its .offset (what Consumer.position() returns).
    group     the group id (str); or the group's metadata, which adds the consumer's
              generation and member id so that the broker fences a consumer that has left
              the group meanwhile (KIP-447): a ConsumerGroupMetadata (netkafka's or
              kafka-python's KafkaConsumer.group_metadata()), or confluent-kafka's
              Consumer.consumer_group_metadata() -- librdkafka's serialized form, bytes:

                  "CGMDv2:" | generation id int32 (the writer's byte order) |
                  group id NUL | member id NUL | int8 1 if no instance id |
                  [group instance id NUL]

The offset committed for a partition is the next one to read: the offset of the last
record processed plus one, as with every Kafka client.  Everything is validated here, on
the caller's thread, so that a bad argument fails before a request goes out, naming the
entry at fault.  Nothing here keeps state.
"""
import struct
from collections import namedtuple
from typing import NamedTuple

# kafka-python's TopicPartition (topic, partition): RecordMetadata's, the same name.
from netkafka.producer._futures import TopicPartition  # noqa: F401 -- offsets' keys
from netkafka.client.metadata import check_topic_name
from netkafka.protocol.framing import wire_string

OffsetAndMetadata = namedtuple("OffsetAndMetadata", ["offset", "metadata", "leader_epoch"],
                               defaults=("", -1))
OffsetAndMetadata.__doc__ = """An offset to commit: kafka-python's OffsetAndMetadata (same fields).

Args:
    offset (int): the next offset to read (the last processed record's offset + 1).
    metadata (str): kept with the offset by the group coordinator. Default ''.
    leader_epoch (int): the partition leader's epoch of the last record read, or -1
        (unknown, the default): lets a consumer resuming there detect log truncation.
"""

ConsumerGroupMetadata = namedtuple(
    "ConsumerGroupMetadata", ["group_id", "generation_id", "member_id", "group_instance_id"],
    defaults=(-1, "", None))
ConsumerGroupMetadata.__doc__ = """A consumer's group membership, for the broker's fencing
of offsets committed on behalf of a member that has left the group (KIP-447); the first
four fields of kafka-python's ConsumerGroupMetadata.

Args:
    group_id (str): the consumer group.
    generation_id (int): the group generation the consumer is a member of; -1 (the
        default) to commit without the check.
    member_id (str): the member id the group coordinator gave the consumer; '' (the
        default) without the check.
    group_instance_id (str or None): the static member's instance id (group.instance.id).
"""

# librdkafka's serialized consumer group metadata (rdkafka_cgrp.c): its magic, then
# the generation id copied from memory -- in the byte order of the machine that wrote
# it, which is this one (the bytes come from a consumer in this process).
_LIBRDKAFKA_MAGIC = b"CGMDv2:"
_NATIVE_INT32 = struct.Struct("=i")

_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1
_INT64_MAX = 2**63 - 1


class PartitionOffset(NamedTuple):
    """One partition's offset to commit, validated (what TxnOffsetCommit carries)."""

    partition: int
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: object  # str or None


def offsets_to_commit(offsets):
    """offsets, in any of the shapes of the module's docstring, as {topic: [PartitionOffset]}
    (partitions in the order given).  Empty in, empty out.

    Raises:
        TypeError: offsets, or an entry of it, is of a kind none of the clients uses
            (the entry is named).
        ValueError: an entry's topic, partition, offset, leader epoch or metadata is out
            of range, or a partition is given twice (named).
    """
    if isinstance(offsets, dict):
        entries = ((key, value) for key, value in offsets.items())
    elif isinstance(offsets, (list, tuple)):
        # confluent-kafka: TopicPartition objects carrying their offsets.
        entries = ((item, item) for item in offsets)
    else:
        raise TypeError(f"offsets must be a dict {{TopicPartition: OffsetAndMetadata}} or a "
                        f"list of confluent-kafka TopicPartition objects with offsets, not "
                        f"{type(offsets).__name__}")
    by_topic = {}
    seen = set()
    for key, value in entries:
        topic, partition = _topic_partition(key)
        offset, metadata, leader_epoch = _offset_and_metadata(key, value)
        if (topic, partition) in seen:
            raise ValueError(f"offsets name {topic}-{partition} twice")
        seen.add((topic, partition))
        by_topic.setdefault(topic, []).append(
            PartitionOffset(partition, offset, leader_epoch, metadata))
    return by_topic


def _topic_partition(key):
    if isinstance(key, tuple) and not hasattr(key, "topic"):
        if len(key) != 2:
            raise TypeError(f"offsets key {key!r} is not a (topic, partition) pair")
        topic, partition = key
    else:
        try:
            topic, partition = key.topic, key.partition
        except AttributeError:
            raise TypeError(f"offsets key {key!r} ({type(key).__name__}) is not a "
                            f"TopicPartition: it has no topic and partition") from None
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"offsets key {key!r}: the topic must be a non-empty str")
    # Kafka's rule, as send() checks it: a name every broker refuses was asked about
    # until max_block_ms ran out, and the transaction could not commit meanwhile.
    check_topic_name(topic)
    if isinstance(partition, bool) or not isinstance(partition, int) \
            or not 0 <= partition <= _INT32_MAX:
        raise ValueError(f"offsets key {key!r}: the partition must be an int from 0 to "
                         f"{_INT32_MAX}")
    return topic, partition


def _offset_and_metadata(key, value):
    """(offset, metadata, leader_epoch) of an offsets value: an int, or an object with
    .offset (kafka-python 2.0's OffsetAndMetadata has no leader_epoch; confluent-kafka's
    TopicPartition says None for an unknown one)."""
    if isinstance(value, int) and not isinstance(value, bool):
        offset, metadata, leader_epoch = value, "", -1
    else:
        try:
            offset = value.offset
        except AttributeError:
            raise TypeError(f"offsets[{key!r}] = {value!r}: not an OffsetAndMetadata "
                            f"(no offset) nor an int") from None
        metadata = getattr(value, "metadata", "")
        leader_epoch = getattr(value, "leader_epoch", -1)
    where = f"offsets[{key!r}]"
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= _INT64_MAX:
        # confluent-kafka's logical offsets (OFFSET_INVALID, OFFSET_END, ...) are negative.
        raise ValueError(f"{where}: the offset must be an int from 0 to {_INT64_MAX} (the "
                         f"next offset to read), got {offset!r}")
    if metadata is not None and not isinstance(metadata, str):
        raise ValueError(f"{where}: the metadata must be a str or None, got {metadata!r}")
    if metadata is not None:
        wire_string(f"{where}: the metadata", metadata)
    if leader_epoch is None:
        leader_epoch = -1
    if isinstance(leader_epoch, bool) or not isinstance(leader_epoch, int) \
            or not -1 <= leader_epoch <= _INT32_MAX:
        raise ValueError(f"{where}: the leader epoch must be an int >= -1 or None, "
                         f"got {leader_epoch!r}")
    return offset, metadata, leader_epoch


def consumer_group_metadata(group):
    """group, in any of the shapes of the module's docstring, as a ConsumerGroupMetadata.

    Raises:
        TypeError: not a group id, group metadata, or librdkafka's serialized form.
        ValueError: an empty group id (a consumer without a group has no offsets to
            commit), a field out of range, or bytes that do not parse (named).
    """
    if isinstance(group, str):
        metadata = ConsumerGroupMetadata(group)
    elif isinstance(group, (bytes, bytearray, memoryview)):
        metadata = _from_librdkafka(bytes(group))
    elif hasattr(group, "group_id"):
        metadata = ConsumerGroupMetadata(
            group.group_id, getattr(group, "generation_id", -1), getattr(group, "member_id", ""),
            getattr(group, "group_instance_id", None))
    else:
        raise TypeError(f"the consumer group must be a group id (str), a ConsumerGroupMetadata "
                        f"(netkafka's or kafka-python's) or confluent-kafka's "
                        f"consumer_group_metadata(), not {type(group).__name__}")
    group_id, generation_id, member_id, instance_id = metadata
    if not isinstance(group_id, str) or not group_id:
        raise ValueError(f"consumer group {group!r}: no group id (a consumer without a "
                         f"group.id has no group offsets to commit)")
    wire_string("the consumer group id", group_id)
    if isinstance(generation_id, bool) or not isinstance(generation_id, int) \
            or not -1 <= generation_id <= _INT32_MAX:
        raise ValueError(f"consumer group {group_id!r}: the generation id must be an int "
                         f">= -1, got {generation_id!r}")
    if not isinstance(member_id, str):
        raise ValueError(f"consumer group {group_id!r}: the member id must be a str, got "
                         f"{member_id!r}")
    wire_string(f"consumer group {group_id!r}: the member id", member_id)
    if generation_id >= 0 and not member_id:
        raise ValueError(f"consumer group {group_id!r}: generation {generation_id} without a "
                         f"member id (a member of a generation has one)")
    if instance_id is not None and not isinstance(instance_id, str):
        raise ValueError(f"consumer group {group_id!r}: the group instance id must be a str "
                         f"or None, got {instance_id!r}")
    if instance_id is not None:
        wire_string(f"consumer group {group_id!r}: the group instance id", instance_id)
    return metadata


def _from_librdkafka(data):
    what = "confluent-kafka's consumer group metadata"
    if not data.startswith(_LIBRDKAFKA_MAGIC):
        raise ValueError(f"{what} must start with {_LIBRDKAFKA_MAGIC!r} (librdkafka's "
                         f"serialized form), got {data[:16]!r}")
    at = len(_LIBRDKAFKA_MAGIC)
    if len(data) < at + _NATIVE_INT32.size + 3:
        raise ValueError(f"{what} is {len(data)} bytes: too short")
    (generation_id,) = _NATIVE_INT32.unpack_from(data, at)
    at += _NATIVE_INT32.size
    group_id, at = _c_string(data, at, what, "group id")
    member_id, at = _c_string(data, at, what, "member id")
    if at >= len(data):
        raise ValueError(f"{what} ends before its group instance id flag")
    no_instance_id = data[at]
    at += 1
    instance_id = None
    if not no_instance_id:
        instance_id, at = _c_string(data, at, what, "group instance id")
    if at != len(data):
        raise ValueError(f"{what} has {len(data) - at} bytes after its last field")
    return ConsumerGroupMetadata(group_id, generation_id, member_id, instance_id)


def _c_string(data, at, what, field):
    end = data.find(b"\0", at)
    if end < 0:
        raise ValueError(f"{what}: its {field} is not NUL-terminated")
    try:
        return data[at:end].decode("utf-8"), end + 1
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what}: its {field} is not UTF-8 ({exc})") from None

