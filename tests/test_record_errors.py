"""A batch the broker refuses for records it names (KIP-467's record_errors): each named
record fails with the broker's words on it, the others of the batch with a
RecordInInvalidBatchError, as the Java client's Sender fails them -- through send()'s
futures, produce()'s failures (flush()) and send_batch()'s rows, against the real
broker (Kafka 4 and 3.9): one CreateTime too far ahead among good ones
(INVALID_TIMESTAMP); and through a proxy, such an answer with a retriable error or an
index outside the batch."""
import struct
import time

import pytest

from broker_proxy import ProduceAnswerProxy, one_partition_answer
from netkafka import Producer, errors
from netkafka.protocol.produce import decode_produce_response
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

AHEAD_MAX_MS = 60_000
RECORDS = 5
BAD = 2  # the index of the record whose timestamp is a day ahead


@pytest.fixture
def kafka_broker(core_broker):
    """Each test runs against Kafka 4 and 3.9 (both name the refused record)."""
    return core_broker


@pytest.fixture
def topic(kafka_broker, topic_name):
    # Kafka 3.6+ refuses a CreateTime more than message.timestamp.after.max.ms ahead.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"message.timestamp.after.max.ms": str(AHEAD_MAX_MS)})
    return topic_name


def timestamps_ms():
    now_ms = int(time.time() * 1000)
    return [now_ms + (86_400_000 if i == BAD else 0) for i in range(RECORDS)]


def producer(kafka_broker):
    # A long linger: the records of each test go in one batch, sent by flush().
    return Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=60_000)


def check_errors(failures, named_class=errors.InvalidTimestampError):
    """failures: each record's error, by index in the batch."""
    bad = failures[BAD]
    assert isinstance(bad, named_class)  # the one named: its partition error
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


def record_index_answer(index):
    """A ProduceAnswerProxy rewrite_produce for a refusal naming record BAD: it names
    record index instead (the message's place in the answer finds the index's)."""
    def rewrite(data, version):
        [part] = decode_produce_response(data, version).topics[0].partitions
        [(named, message)] = part.record_errors
        at = data.rfind(struct.pack(">i", named), 0, data.index(message.encode()))
        return data[:at] + struct.pack(">i", index) + data[at + 4:]
    return rewrite


def futures_through_proxy(kafka_broker, topic, rewrite, **config):
    """Each record's error, its batch's answer rewritten by rewrite."""
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    proxy = ProduceAnswerProxy((host, int(port)))
    try:
        with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=60_000,
                      **config) as p:
            with proxy.lock:
                proxy.rewrite_produce = rewrite
            futures = [p.send(topic, b"v%d" % i, partition=0, timestamp_ms=ts)
                       for i, ts in enumerate(timestamps_ms())]
            p.flush()
    finally:
        proxy.close()
    return [future.exception for future in futures]


def test_a_retriable_refusal_out_of_retries_tells_each_record_its_error(kafka_broker, topic):
    # The Java client's Sender fails a batch it may not retry with the answer's record
    # errors: they were told only when the error was not retriable.
    failures = futures_through_proxy(
        kafka_broker, topic, retries=0, enable_idempotence=False,
        rewrite=one_partition_answer(error_code=errors.NotEnoughReplicasError.code))
    check_errors(failures, named_class=errors.NotEnoughReplicasError)


def test_a_record_error_outside_the_batch_is_a_protocol_error(kafka_broker, topic):
    # It was skipped: the batch's good records failed, none of them named.
    failures = futures_through_proxy(kafka_broker, topic, rewrite=record_index_answer(RECORDS))
    for error in failures:
        assert isinstance(error, errors.ProtocolError), error
        assert f"refused record {RECORDS} of a batch of {RECORDS}" in str(error)
