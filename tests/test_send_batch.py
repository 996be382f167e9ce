"""The high-rate paths against a real broker: send_batch() and produce().

What they wrote is read back by the independent reader (netkafka.testing.reader,
librdkafka underneath) and compared byte for byte with what the test handed over,
and with what the batch result / flush() / metrics() reported.
"""
import pytest

from netkafka import Producer
from netkafka.accumulator import UndeliveredRecordsError
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic


def producer(bootstrap, **options):
    options.setdefault("max_block_ms", 30000)
    return Producer(bootstrap_servers=bootstrap, **options)


# ----------------------------------------------------------------------------------
# produce(): fire and forget


def test_produce_delivers_50k_records_in_order(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    count = 50_000
    with producer(kafka_broker.bootstrap, linger_ms=5, batch_size=1 << 18) as p:
        for i in range(count):
            assert p.produce(topic_name, b"value-%d" % i, key=b"k%d" % (i % 10)) is None
        p.flush()
        metrics = p.metrics()
    records = read_topic(kafka_broker.bootstrap, topic_name, count)
    assert [r.value for r in records] == [b"value-%d" % i for i in range(count)]
    assert [r.key for r in records] == [b"k%d" % (i % 10) for i in range(count)]
    assert [r.offset for r in records] == list(range(count))
    assert metrics["records_acknowledged"] == count
    assert metrics["records_untracked_failed"] == 0


def test_produce_failures_are_raised_by_flush_with_their_count(kafka_broker, topic_name):
    # The broker refuses batches above the topic's max.message.bytes: a delivery
    # failure, learnt after produce() returned.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1,
                 config={"max.message.bytes": "2000"})
    with producer(kafka_broker.bootstrap, max_block_ms=1000, retries=0) as p:
        p.produce(topic_name, b"good")
        p.flush()
        for _ in range(3):
            p.produce(topic_name, b"x" * 5000)
        # Refused before reaching a batch: no such partition, larger than
        # max_request_size.
        p.produce(topic_name, b"v", partition=7)
        p.produce(topic_name, b"y" * (2 << 20))
        with pytest.raises(UndeliveredRecordsError) as raised:
            p.flush()
        assert raised.value.failed_count == 5
        # One error per failure met: the broker's refusal failed the 3-record batch.
        messages = sorted(str(error) for error in raised.value.first_errors)
        assert len(messages) == 3
        assert any("MESSAGE_TOO_LARGE" in m for m in messages), messages
        assert any("no partition 7" in m for m in messages), messages
        assert any("larger than max_request_size" in m for m in messages), messages
        assert "5 records sent with produce() failed" in str(raised.value)
        assert p.metrics()["records_untracked_failed"] == 5
        # The count starts again: nothing failed since.
        p.produce(topic_name, b"good again")
        p.flush()
        assert p.metrics()["records_untracked_failed"] == 5
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert [r.value for r in records] == [b"good", b"good again"]


def test_produce_raises_type_errors_at_once(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    with producer(kafka_broker.bootstrap) as p:
        with pytest.raises(TypeError, match="topic must be a str"):
            p.produce(b"topic", b"v")
        with pytest.raises(TypeError, match="partition must be an int"):
            p.produce(topic_name, b"v", partition="0")
        p.flush()
        assert p.metrics()["records_untracked_failed"] == 0
