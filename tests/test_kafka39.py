"""Legacy message sets (v0/v1) from Producer.send() / produce() on a real Kafka 3.9 broker.

An api_version below (0, 11) pins Produce v0..v2 and the legacy encoder (config.py's
legacy_produce, kafka-python's mapping).  Kafka 3.9 is the last line that takes those
requests; it stores what it takes as RecordBatch v2 (message.format.version is ignored
from 3.0), so the log itself cannot show the format that was sent.  The proof is in two
parts: what the broker took is read back by an independent reader (confluent-kafka), and
the bytes the producer handed to its sender -- the very buffers written to the socket --
are decoded by kafka-python's legacy reader, which names their magic and checks their
CRCs; the connection's Produce version is the one the broker agreed to in ApiVersions.

Kafka 4.x refuses Produce v0..v2: a legacy producer fails fast there, naming why.

The core producer tests (codecs, keys, acks, headers, idempotence) run against 3.9 as
well through test_producer.py's `core_broker` parametrization (conftest.py).
"""
import time
from collections import Counter

import kafka.record.memory_records as kafka_python_records
import pytest

from netkafka import Producer
from netkafka.config import ProducerConfig
from netkafka.errors import IncompatibleBrokerError
from netkafka.protocol.framing import ApiKey
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

LEGACY_CODECS = [None, "gzip", "snappy", "lz4"]
# api_version -> (Produce version, magic), kafka-python's mapping.
LEGACY_VERSIONS = {(0, 8, 2): (0, 0), (0, 9): (1, 0), (0, 10, 1): (2, 1)}
RECORDS = 500


@pytest.mark.parametrize("api_version, expected", [
    (None, (None, None, True)),
    ("auto", (None, None, True)),
    ((0, 11), ((0, 11), None, True)),
    ("2.8.0", ((2, 8, 0), None, True)),  # kafka-python's deprecated str form
    ((0, 10, 1), ((0, 10, 1), 1, False)),
    ("0.10", ((0, 10), 1, False)),
    ((0, 9), ((0, 9), 0, False)),
    ((0, 8, 2), ((0, 8, 2), 0, False)),
])
def test_api_version_values_and_what_they_pin(api_version, expected):
    config = ProducerConfig.from_kwargs({"api_version": api_version})
    assert (config.api_version, config.legacy_magic, config.enable_idempotence) == expected
    legacy = LEGACY_VERSIONS.get(config.api_version)
    assert config.connection_config().produce_version == (
        None if config.legacy_magic is None else legacy[0] if legacy else 2)


def legacy_producer(bootstrap, api_version, **options):
    options.setdefault("max_block_ms", 30000)
    return Producer(bootstrap_servers=bootstrap, api_version=api_version, **options)


def capture_sent_sets(producer):
    """The sealed bytes of every batch the accumulator hands the sender, copied as
    they go (a spy on the real sender: the batches still go to the broker)."""
    sent = []
    sender = producer._sender
    original = sender.send

    def send(topic, partition, batch, *args, **kwargs):
        sent.append(bytes(memoryview(batch)))
        return original(topic, partition, batch, *args, **kwargs)

    sender.send = send
    return sent


def magics_of(sets):
    """{magic} of every outer entry of the sets, by kafka-python's legacy reader,
    which also checks each entry's CRC (outer and inner)."""
    magics = set()
    for data in sets:
        batches = kafka_python_records.MemoryRecords(data)
        while (batch := batches.next_batch()) is not None:
            assert batch.validate_crc()
            magics.add(batch.magic)
            for record in batch:
                assert record.validate_crc()
    return magics


def produce_versions(producer):
    return {conn.api_versions[ApiKey.PRODUCE] for conn in producer._pool.connections()
            if conn.api_versions is not None}


@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c or "none")
@pytest.mark.parametrize("api_version", list(LEGACY_VERSIONS), ids=lambda v: ".".join(map(str, v)))
def test_legacy_sets_round_trip_on_kafka_3_9(kafka_broker_3_9, topic_name, api_version, codec):
    produce_version, magic = LEGACY_VERSIONS[api_version]
    bootstrap = kafka_broker_3_9.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    now_ms = int(time.time() * 1000)
    sent = []
    with legacy_producer(bootstrap, api_version, compression_type=codec, linger_ms=20,
                         batch_size=4096) as p:
        assert p.config.enable_idempotence is False  # the default gives way to legacy
        wire = capture_sent_sets(p)
        futures = []
        for i in range(RECORDS):
            # Never both None: send() and produce() refuse that, as kafka-python's send().
            key = None if i % 5 == 0 and i % 17 else f"key-{i}".encode()
            value = None if i % 17 == 0 else b"" if i % 13 == 0 else b"value %d " % i * (i % 40)
            timestamp_ms = now_ms - 1000 + i
            if i % 2:
                futures.append(p.send(topic_name, value=value, key=key,
                                      timestamp_ms=timestamp_ms))
            else:
                p.produce(topic_name, value=value, key=key, timestamp_ms=timestamp_ms)
            sent.append((key, value, timestamp_ms))
        p.flush()
        metadata = [f.get(0) for f in futures]
        assert produce_versions(p) == {produce_version}
    assert magics_of(wire) == {magic}
    records = read_topic(bootstrap, topic_name, len(sent))
    assert len(records) == len(sent)
    # v0 has no timestamp: the broker stores none (-1); v1 keeps the producer's.
    assert Counter((r.key, r.value, r.timestamp_ms) for r in records) == Counter(
        (key, value, timestamp_ms if magic else -1) for key, value, timestamp_ms in sent)
    by_position = {(r.partition, r.offset): r for r in records}
    for (key, value, timestamp_ms), meta in zip(sent[1::2], metadata):
        record = by_position[meta.partition, meta.offset]
        assert (record.key, record.value) == (key, value)
        assert meta.timestamp == (timestamp_ms if magic else -1)
        assert record.partition == meta.partition


def test_legacy_keyed_records_keep_the_default_partitioner(kafka_broker_3_9, topic_name):
    from test_producer import kafka_python_partition  # the same oracle as for v2
    partitions = 5
    create_topic(kafka_broker_3_9.bootstrap, topic_name, partitions=partitions)
    keys = [f"user-{i}".encode() for i in range(300)]
    with legacy_producer(kafka_broker_3_9.bootstrap, (0, 10)) as p:
        futures = [p.send(topic_name, key=key, value=b"v") for key in keys]
        p.flush()
        assert [f.get().partition for f in futures] == [
            kafka_python_partition(key, partitions) for key in keys]
    records = read_topic(kafka_broker_3_9.bootstrap, topic_name, len(keys))
    assert sorted((r.key, r.partition) for r in records) == sorted(
        (key, kafka_python_partition(key, partitions)) for key in keys)


@pytest.mark.parametrize("acks", [0, 1])
def test_legacy_acks_0_and_1(kafka_broker_3_9, topic_name, acks):
    create_topic(kafka_broker_3_9.bootstrap, topic_name)
    with legacy_producer(kafka_broker_3_9.bootstrap, (0, 10), acks=acks) as p:
        futures = [p.send(topic_name, b"%d" % i) for i in range(200)]
        p.flush()
        offsets = [f.get(0).offset for f in futures]
    assert offsets == ([-1] * 200 if acks == 0 else list(range(200)))
    records = read_topic(kafka_broker_3_9.bootstrap, topic_name, 200)
    assert [r.value for r in records] == [b"%d" % i for i in range(200)]


def test_headers_on_a_legacy_producer_raise_at_send(kafka_broker_3_9, topic_name):
    create_topic(kafka_broker_3_9.bootstrap, topic_name)
    with legacy_producer(kafka_broker_3_9.bootstrap, (0, 10)) as p:
        with pytest.raises(ValueError, match="message format v1 has no record headers"):
            p.send(topic_name, b"v", headers=[("h", b"x")])
        p.send(topic_name, b"after").get(30)  # the producer goes on
        # produce() raises it at once too: such a record can never be written.
        with pytest.raises(ValueError, match="message format v1 has no record headers"):
            p.produce(topic_name, b"v", headers=[("h", b"x")])
        p.flush()  # nothing counted against it
        with pytest.raises(NotImplementedError, match=r"send_batch\(\) writes RecordBatch v2"):
            p.send_batch(topic_name, [b"a", b"b"])
    assert [r.value for r in read_topic(kafka_broker_3_9.bootstrap, topic_name, 1)] == [b"after"]


def test_legacy_api_version_on_kafka_4_fails_fast(kafka_broker, topic_name):
    # 4.x lists Produce v0 in ApiVersions but closes the connection on a v0..v2
    # request: without the check in negotiate_versions this waited out max_block_ms
    # (metadata) or delivery_timeout_ms (retries) -- the bound below tells them apart.
    create_topic(kafka_broker.bootstrap, topic_name)
    max_block_ms = 60_000
    started = time.monotonic()
    with legacy_producer(kafka_broker.bootstrap, (0, 10), max_block_ms=max_block_ms) as p:
        with pytest.raises(IncompatibleBrokerError,
                           match=r"needs Produce v2 \(legacy message sets\), but the broker "
                                 r"is Kafka 4\.0 or newer \(it offers Produce v1[23]\)"):
            p.send(topic_name, b"v")
    assert time.monotonic() - started < max_block_ms / 1000 / 2
