"""The offsets and consumer group of send_offsets_to_transaction(), in every client's
shapes (netkafka/producer/offsets.py): netkafka's and kafka-python's namedtuples,
confluent-kafka's TopicPartition objects, and the group metadata of real kafka-python
and confluent-kafka consumers -- one of them a member of a group on a real broker, so
that its generation and member id are the broker's."""
import struct
import time
import uuid

import confluent_kafka
import kafka
import pytest

import netkafka
from netkafka.producer.offsets import (ConsumerGroupMetadata, OffsetAndMetadata,
                                       PartitionOffset, TopicPartition,
                                       consumer_group_metadata, offsets_to_commit)
from netkafka.testing.admin import create_topic

JOIN_TIMEOUT_S = 60


def test_netkafka_exports_kafka_pythons_names():
    assert netkafka.TopicPartition is TopicPartition
    assert netkafka.OffsetAndMetadata is OffsetAndMetadata
    assert netkafka.ConsumerGroupMetadata is ConsumerGroupMetadata
    assert TopicPartition._fields == kafka.TopicPartition._fields
    assert OffsetAndMetadata._fields == kafka.OffsetAndMetadata._fields
    assert OffsetAndMetadata(5) == (5, "", -1)
    assert ConsumerGroupMetadata._fields == kafka.structs.ConsumerGroupMetadata._fields[:4]


def test_offsets_in_netkafkas_and_kafka_pythons_shapes():
    offsets = {
        TopicPartition("a", 0): OffsetAndMetadata(10, "meta", 3),
        kafka.TopicPartition("a", 1): kafka.OffsetAndMetadata(11, "", 4),
        ("b", 2): 12,  # a bare pair and a bare offset
        TopicPartition("b", 0): OffsetAndMetadata(0, None),
    }
    assert offsets_to_commit(offsets) == {
        "a": [PartitionOffset(0, 10, 3, "meta"), PartitionOffset(1, 11, 4, "")],
        "b": [PartitionOffset(2, 12, -1, ""), PartitionOffset(0, 0, -1, None)],
    }


def test_offsets_as_confluent_kafkas_topic_partitions():
    offsets = [confluent_kafka.TopicPartition("a", 0, 7),
               confluent_kafka.TopicPartition("a", 1, 8, metadata="m", leader_epoch=2)]
    assert offsets_to_commit(offsets) == {
        "a": [PartitionOffset(0, 7, -1, None), PartitionOffset(1, 8, 2, "m")]}


def test_no_offsets_is_nothing_to_commit():
    assert offsets_to_commit({}) == {}
    assert offsets_to_commit([]) == {}


@pytest.mark.parametrize("offsets, error, message", [
    ({"a": 1}, TypeError, "not a TopicPartition"),
    ({("a", 0, 1): 1}, TypeError, "not a \\(topic, partition\\) pair"),
    ({("", 0): 1}, ValueError, "non-empty str"),
    # Kafka's rule for names, as send(): asked about until max_block_ms ran out.
    ({("bad topic", 0): 1}, ValueError, "topic 'bad topic' is not a valid Kafka topic name"),
    ({("a", -1): 1}, ValueError, "partition must be an int from 0 to 2147483647"),
    ({("a", True): 1}, ValueError, "partition must be an int from 0 to 2147483647"),
    ({("a", 0): -5}, ValueError, "offset must be an int from 0 to 9223372036854775807"),
    ({("a", 0): 2**70}, ValueError, "offset must be an int from 0 to 9223372036854775807 "
                                    "\\(the next offset to read\\), got 1180591620717411303424"),
    ({("a", 0): 1.5}, TypeError, "nor an int"),
    ({("a", 0): OffsetAndMetadata(None)}, ValueError, "offset must be an int from 0"),
    ({("a", 0): OffsetAndMetadata(1, b"bytes")}, ValueError, "metadata must be a str"),
    ({("a", 0): OffsetAndMetadata(1, "", -2)}, ValueError, "leader epoch must be"),
    ([confluent_kafka.TopicPartition("a", 0)], ValueError, "offset must be an int from 0"),
    ([confluent_kafka.TopicPartition("a", 0, 1), confluent_kafka.TopicPartition("a", 0, 2)],
     ValueError, "name a-0 twice"),
    ({confluent_kafka.TopicPartition("a", 0): 1, ("a", 0): 2}, ValueError, "name a-0 twice"),
    ("a", TypeError, "must be a dict"),
])
def test_bad_offsets_are_named(offsets, error, message):
    with pytest.raises(error, match=message):
        offsets_to_commit(offsets)


def test_a_group_id_alone():
    assert consumer_group_metadata("g") == ConsumerGroupMetadata("g", -1, "", None)


def test_kafka_pythons_group_metadata():
    theirs = kafka.structs.ConsumerGroupMetadata("g", 3, "member-1", "instance-1")
    assert consumer_group_metadata(theirs) == ("g", 3, "member-1", "instance-1")


def test_group_metadata_of_a_consumer_without_a_group_is_refused():
    consumer = kafka.KafkaConsumer(bootstrap_servers="127.0.0.1:9", api_version=(2, 8))
    try:
        manual = consumer.group_metadata()
    finally:
        consumer.close()
    with pytest.raises(ValueError, match="no group id"):
        consumer_group_metadata(manual)


def test_confluent_kafkas_group_metadata_of_a_consumer_not_yet_joined():
    consumer = confluent_kafka.Consumer({"bootstrap.servers": "127.0.0.1:9",
                                         "group.id": "not-joined",
                                         "group.instance.id": "static-1"})
    try:
        serialized = consumer.consumer_group_metadata()
    finally:
        consumer.close()
    assert consumer_group_metadata(serialized) == ("not-joined", -1, "", "static-1")


def test_confluent_kafkas_group_metadata_of_a_member(kafka_broker, topic_name):
    """A consumer that joined a group on the broker: the parsed generation and member
    id are the ones the consumer itself reports."""
    create_topic(kafka_broker.bootstrap, topic_name)
    group = f"group-{uuid.uuid4().hex[:8]}"
    consumer = confluent_kafka.Consumer({"bootstrap.servers": kafka_broker.bootstrap,
                                         "group.id": group})
    try:
        consumer.subscribe([topic_name])
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer did not join its group"
            consumer.poll(0.2)
        parsed = consumer_group_metadata(consumer.consumer_group_metadata())
        member_id = consumer.memberid()
    finally:
        consumer.close()
    assert parsed.group_id == group
    assert parsed.generation_id >= 1
    assert parsed.member_id == member_id and member_id
    assert parsed.group_instance_id is None


def librdkafka_form(generation_id, *fields):
    return b"CGMDv2:" + struct.pack("=i", generation_id) + b"".join(fields)


@pytest.mark.parametrize("data, message", [
    (b"CGMDv1:" + bytes(12), "must start with"),
    (b"CGMDv2:\x01\x00", "too short"),
    (librdkafka_form(1, b"g\0", b"m"), "member id is not NUL-terminated"),
    (librdkafka_form(1, b"g\0", b"m\0"), "ends before its group instance id flag"),
    (librdkafka_form(1, b"g\0", b"m\0", b"\0", b"i"), "instance id is not NUL-terminated"),
    (librdkafka_form(1, b"g\0", b"m\0", b"\1", b"x"), "1 bytes after its last field"),
    (librdkafka_form(1, b"\xff\0", b"m\0", b"\1"), "group id is not UTF-8"),
    (librdkafka_form(-1, b"\0", b"\0", b"\1"), "no group id"),
])
def test_bad_librdkafka_group_metadata_is_named(data, message):
    with pytest.raises(ValueError, match=message):
        consumer_group_metadata(data)


@pytest.mark.parametrize("group, error, message", [
    ("", ValueError, "no group id"),
    (ConsumerGroupMetadata("g", 2, ""), ValueError, "generation 2 without a member id"),
    (ConsumerGroupMetadata("g", -2, ""), ValueError, "generation id must be an int >= -1"),
    (ConsumerGroupMetadata("g", 1, 5), ValueError, "member id must be a str"),
    (ConsumerGroupMetadata("g", 1, "m", 7), ValueError, "instance id must be a str or None"),
    (42, TypeError, "must be a group id"),
])
def test_bad_groups_are_named(group, error, message):
    with pytest.raises(error, match=message):
        consumer_group_metadata(group)
