"""A batch the broker refuses for records it names (KIP-467's record_errors): each named
record fails with the broker's words on it, the others of the batch with a
RecordInInvalidBatchError, as the Java client's Sender fails them -- through send()'s
futures, produce()'s failures (flush()) and send_batch()'s rows, against the real
broker: one CreateTime too far ahead among good ones (INVALID_TIMESTAMP)."""
import time

import pytest

from netkafka import Producer, errors
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

AHEAD_MAX_MS = 60_000
RECORDS = 5
BAD = 2  # the index of the record whose timestamp is a day ahead


@pytest.fixture
def topic(kafka_broker, topic_name):
    # Kafka 4 refuses a CreateTime more than message.timestamp.after.max.ms ahead.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"message.timestamp.after.max.ms": str(AHEAD_MAX_MS)})
    return topic_name


def timestamps_ms():
    now_ms = int(time.time() * 1000)
    return [now_ms + (86_400_000 if i == BAD else 0) for i in range(RECORDS)]


def producer(kafka_broker):
    # A long linger: the records of each test go in one batch, sent by flush().
    return Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=60_000)


def check_errors(failures):
    """failures: each record's error, by index in the batch."""
    bad = failures[BAD]
    assert isinstance(bad, errors.InvalidTimestampError)  # the one named: its partition error
    assert f"record {BAD}: " in str(bad) and "out of range" in str(bad)  # the broker's words
    for index, error in enumerate(failures):
        if index != BAD:
            assert isinstance(error, errors.RecordInInvalidBatchError), (index, error)
            assert "part of a batch which had one or more invalid records" in str(error)


def test_send_futures_tell_the_named_record_its_error_and_the_others_theirs(
        kafka_broker, topic):
    with producer(kafka_broker) as p:
        futures = [p.send(topic, b"v%d" % i, partition=0, timestamp_ms=ts)
                   for i, ts in enumerate(timestamps_ms())]
        p.flush()
        check_errors([future.exception for future in futures])
    assert read_topic(kafka_broker.bootstrap, topic, 0, timeout_s=5) == []


def test_produce_failures_keep_each_records_error(kafka_broker, topic):
    with producer(kafka_broker) as p:
        for i, ts in enumerate(timestamps_ms()):
            p.produce(topic, b"v%d" % i, partition=0, timestamp_ms=ts)
        with pytest.raises(errors.UndeliveredRecordsError) as caught:
            p.flush()
    assert caught.value.failed_count == RECORDS
    # One error per kind: the bad record's own, and one for the four in its batch.
    kinds = {type(error): error for error in caught.value.first_errors}
    assert len(caught.value.first_errors) == len(kinds) == 2
    check_errors([kinds[errors.InvalidTimestampError] if i == BAD
                  else kinds[errors.RecordInInvalidBatchError] for i in range(RECORDS)])


def test_send_batch_rows_tell_the_named_row_its_error_and_the_others_theirs(
        kafka_broker, topic):
    with producer(kafka_broker) as p:
        result = p.send_batch(topic, [b"v%d" % i for i in range(RECORDS)],
                              partitions=[0] * RECORDS, timestamps_ms=timestamps_ms())
        p.flush()
        result.get(timeout=30)
    assert result.failed_count == RECORDS
    by_row = dict(result.errors)
    check_errors([by_row[i] for i in range(RECORDS)])
