"""Strings that go on the wire are checked where the caller hands them over.

A string no request can carry (a lone surrogate has no UTF-8 form; a Kafka string
holds at most 32767 bytes) is refused by the call that was given it, naming the
argument, before anything keeps it.  Found before: a topic with a lone surrogate
joined the metadata's topic set, after which every Metadata request failed to
encode and no new topic ever resolved -- one bad send() poisoned the producer.

Each bad call below is followed by a send to a topic the producer has not met
yet, read back by the independent reader: the same producer still works.  The
settings (client_id, transactional_id) are refused at construction:
tests/test_producer.py's test_bad_options_are_refused_naming_them.
"""
import pytest

from netkafka import Producer
from netkafka.errors import IllegalArgumentError, InvalidTopicError
from netkafka.producer.offsets import (ConsumerGroupMetadata, OffsetAndMetadata,
                                       consumer_group_metadata, offsets_to_commit)
from netkafka.protocol.framing import STRING_MAX_BYTES, wire_string
from netkafka.testing.reader import read_topic

LONE_SURROGATE_TOPIC = "orders-\udc80"
# 3 bytes per character in UTF-8: 10923 characters are 32769 bytes.
OVERSIZE_TOPIC = "\u20ac" * (STRING_MAX_BYTES // 3 + 1)


def test_wire_string_encodes_and_refuses_naming_the_argument():
    assert wire_string("topic", "t\u00e9") == b"t\xc3\xa9"
    assert wire_string("topic", "x" * STRING_MAX_BYTES) == b"x" * STRING_MAX_BYTES
    with pytest.raises(IllegalArgumentError,
                       match=r"^topic 'orders-\\udc80' cannot be sent: Kafka strings are UTF-8, "
                             r"and '\\udc80' at index 7 has no UTF-8 form"):
        wire_string("topic", LONE_SURROGATE_TOPIC)
    with pytest.raises(IllegalArgumentError,
                       match=r"^topic '\u20ac+'\.\.\. \(10923 characters\) cannot be sent: it "
                             r"is 32769 bytes in UTF-8, and a Kafka string holds at most 32767$"):
        wire_string("topic", OVERSIZE_TOPIC)
    with pytest.raises(TypeError, match=r"^client_id must be a str, not bytes$"):
        wire_string("client_id", b"app")


def test_transactional_offsets_strings_are_checked_when_given():
    # send_offsets_to_transaction()'s arguments go in TxnOffsetCommit and
    # AddOffsetsToTxn: refused before any request is made.
    with pytest.raises(IllegalArgumentError, match=r"^the consumer group id 'g\\udc80' cannot"):
        consumer_group_metadata("g\udc80")
    with pytest.raises(IllegalArgumentError,
                       match=r"^consumer group 'g': the member id 'm\\ud800' cannot be sent"):
        consumer_group_metadata(ConsumerGroupMetadata("g", 1, "m\ud800"))
    with pytest.raises(IllegalArgumentError,
                       match=r"^consumer group 'g': the group instance id 'i\\ud800' cannot"):
        consumer_group_metadata(ConsumerGroupMetadata("g", 1, "m", "i\ud800"))
    # An offsets key's topic is held to Kafka's name rule, as send()'s is.
    with pytest.raises(InvalidTopicError,
                       match=r"topic 't\\udc80' is not a valid Kafka topic name"):
        offsets_to_commit({("t\udc80", 0): 5})
    with pytest.raises(IllegalArgumentError,
                       match=r"^offsets\[\('t', 0\)\]: the metadata 'm+'\.\.\. \(40000 "
                             r"characters\) cannot be sent: it is 40000 bytes"):
        offsets_to_commit({("t", 0): OffsetAndMetadata(5, "m" * 40000, -1)})


# (what the call is, the call on producer p with a good topic, the error, the message)
BAD_TOPIC = r"topic 'orders-\\udc80' is not a valid Kafka topic name: '\\udc80' is not allowed"

BAD_CALLS = [
    # A topic is held to Kafka's own name rule (metadata.check_topic_name), stricter than
    # what a request can carry: a lone surrogate or an oversize name never reaches it.
    ("send, lone surrogate topic", lambda p, topic: p.send(LONE_SURROGATE_TOPIC, b"v"),
     InvalidTopicError, BAD_TOPIC),
    ("send, oversize topic", lambda p, topic: p.send(OVERSIZE_TOPIC, b"v"),
     InvalidTopicError, r"topic .* is not a valid Kafka topic name: it has 10923 characters"),
    ("produce, lone surrogate topic", lambda p, topic: p.produce(LONE_SURROGATE_TOPIC, b"v"),
     InvalidTopicError, BAD_TOPIC),
    ("send_batch, lone surrogate topic",
     lambda p, topic: p.send_batch(LONE_SURROGATE_TOPIC, [b"a", b"b"]),
     InvalidTopicError, BAD_TOPIC),
    ("partitions_for, lone surrogate topic",
     lambda p, topic: p.partitions_for(LONE_SURROGATE_TOPIC),
     InvalidTopicError, BAD_TOPIC),
    ("send, lone surrogate header key",
     lambda p, topic: p.send(topic, b"v", headers=[("ok", b"1"), ("h\ud800", b"2")]),
     ValueError, r"^headers\[1\] key cannot be UTF-8 encoded"),
    ("send_batch, lone surrogate header column name",
     lambda p, topic: p.send_batch(topic, [b"a"], headers={"h\ud800": [b"1"]}),
     ValueError, r"^headers key 'h\\ud800' cannot be UTF-8 encoded"),
]


def test_no_bad_string_poisons_the_producer(kafka_broker, topic_name):
    with Producer(bootstrap_servers=kafka_broker.bootstrap, max_block_ms=30000) as p:
        for i, (what, call, error, message) in enumerate(BAD_CALLS):
            with pytest.raises(error, match=message):
                call(p, f"{topic_name}-headers")
            # A topic this producer has never met: it needs a fresh Metadata request,
            # the very thing a stored bad topic broke.
            good = f"{topic_name}-{i}"
            metadata = p.send(good, what.encode()).get(30)
            assert (metadata.topic, metadata.offset) == (good, 0), what
            assert [r.value for r in read_topic(kafka_broker.bootstrap, good, 1)] == [
                what.encode()]
        batch = p.send_batch(f"{topic_name}-batch", [b"x", b"y"]).get(30)
        assert batch.failed_count == 0
        assert list(batch.offsets()) == [0, 1]
