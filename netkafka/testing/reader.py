"""The independent reader: what a topic holds, as confluent-kafka's Consumer decodes it.

Everything netkafka writes is checked through here, so that a bug cannot hide by being
symmetric in netkafka's encoder and a decoder of its own.  librdkafka also verifies every
batch's CRC32C (check.crcs).
"""
import time
import uuid
from typing import Mapping, NamedTuple, Optional

from confluent_kafka import (OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME,
                             Consumer, KafkaError, KafkaException, TopicPartition)

READ_TIMEOUT_S = 60.0
# Records handed over per consume() call: large batches keep a million-record read to seconds.
CONSUME_BATCH = 10_000
CONSUME_WAIT_S = 0.2

TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: "create_time", TIMESTAMP_LOG_APPEND_TIME: "log_append_time"}


class Record(NamedTuple):
    """One record as read back from the broker."""

    partition: int
    offset: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: list[tuple[str, Optional[bytes]]]  # in the order written; [] when none
    timestamp_ms: int
    timestamp_type: str  # "create_time" or "log_append_time"


def read_topic(bootstrap: str, topic: str, expected_count: Optional[int] = None,
               timeout_s: float = READ_TIMEOUT_S,
               client_config: Optional[Mapping[str, object]] = None,
               isolation_level: str = "read_uncommitted",
               start_offsets: Optional[Mapping[int, int]] = None) -> list[Record]:
    """Read every partition of `topic` from its first offset (or from start_offsets).

    Reading stops once every partition has reached its end and, if expected_count is given,
    at least that many records have arrived (more are returned too, so duplicates show).

    Args:
        client_config: further consumer settings, e.g. a secured listener's security ones
            (SecuredBroker.client_config); bootstrap wins over one given in them.
        isolation_level: "read_uncommitted" (the default): every data record in the log,
            whether or not a transaction committed it; "read_committed": the records of
            committed transactions and those written outside any, up to the last stable
            offset (a partition's end is there while a transaction is open).
        start_offsets: partition -> the offset to read it from (end_offsets() taken
            earlier: only what was written since); the partitions not in it are read
            from their first offset.

    Returns:
        The records, in order of arrival: offset order within each partition.

    Raises:
        KafkaException: the topic does not exist, or the consumer met an error (a corrupt
            batch among them).
        TimeoutError: the stop condition was not met within timeout_s.
    """
    consumer = Consumer({
        **(client_config or {}),
        "bootstrap.servers": bootstrap,
        # Required by the client even though partitions are assigned, not subscribed.
        "group.id": f"netkafka-reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "check.crcs": True,
        # A position past the log's end or before its start is an error, not a silent jump
        # to the end (librdkafka's default) that reads as a partition with fewer records.
        "auto.offset.reset": "error",
        "isolation.level": isolation_level,
    })
    try:
        partitions = _partitions(consumer, topic, timeout_s)
        starts = start_offsets or {}
        consumer.assign([TopicPartition(topic, p, starts.get(p, OFFSET_BEGINNING))
                         for p in partitions])
        return _read_assigned(consumer, topic, set(partitions), expected_count, timeout_s)
    finally:
        consumer.close()


def end_offsets(bootstrap: str, topic: str, timeout_s: float = READ_TIMEOUT_S,
                client_config: Optional[Mapping[str, object]] = None) -> dict[int, int]:
    """Each partition of `topic` -> the offset its next record will have; {} when the
    topic does not exist (yet)."""
    consumer = Consumer({**(client_config or {}), "bootstrap.servers": bootstrap,
                         "group.id": f"netkafka-reader-{uuid.uuid4().hex}"})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        if metadata.error is not None:
            if metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return {}
            raise KafkaException(metadata.error)
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s,
                                                  cached=False)[1]
                for p in sorted(metadata.partitions)}
    finally:
        consumer.close()


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    return sorted(metadata.partitions)


def _read_assigned(consumer: Consumer, topic: str, partitions: set, expected_count: Optional[int],
                   timeout_s: float) -> list[Record]:
    records = []
    at_end = set()  # partitions whose last record so far has been read
    deadline = time.monotonic() + timeout_s
    while True:
        for message in consumer.consume(num_messages=CONSUME_BATCH, timeout=CONSUME_WAIT_S):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
                at_end.add(message.partition())
                continue
            at_end.discard(message.partition())
            timestamp_type, timestamp_ms = message.timestamp()
            records.append(Record(
                message.partition(), message.offset(), message.key(), message.value(),
                message.headers() or [], timestamp_ms, TIMESTAMP_TYPES[timestamp_type],
            ))
        if at_end == partitions and (expected_count is None or len(records) >= expected_count):
            return records
        if time.monotonic() > deadline:
            wanted = "the end of every partition" if expected_count is None else f"{expected_count} records"
            raise TimeoutError(f"read {len(records)} records from {topic!r} in {timeout_s:.0f} s, "
                               f"waiting for {wanted} (at the end: partitions {sorted(at_end)} "
                               f"of {sorted(partitions)})")
