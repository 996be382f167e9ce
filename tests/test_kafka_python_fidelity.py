"""kafka-python 3's KafkaProducer surface on netkafka: every setting, its config dict,
Serializer and Partitioner objects (netkafka's and kafka-python's own), RecordMetadata's
fields, the error names, bootstrap_connected() and metrics(raw=...); and netkafka's
interceptors and compression_level -- against the real broker, read back by the
independent reader."""
import json
import logging
import re
import socket

import kafka
import kafka.errors
import pytest
from kafka.partitioner import StickyPartitioner as KafkaPythonStickyPartitioner
from kafka.producer.future import RecordMetadata as KafkaPythonRecordMetadata
from kafka.serializer import Serializer as KafkaPythonSerializer

import netkafka
from netkafka import KafkaProducer, ProducerRecord
from netkafka import errors
from netkafka.config import ProducerConfig
from netkafka.partitioner import Partitioner
from netkafka.testing.admin import admin_client, create_topic
from netkafka.testing.reader import read_topic


def producer(broker, **options):
    options.setdefault("max_block_ms", 30000)
    return KafkaProducer(bootstrap_servers=broker.bootstrap, **options)


@pytest.fixture
def topic(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    return topic_name


def test_every_kafka_python_setting_is_accepted_and_in_the_config_dict(kafka_broker, topic):
    defaults = dict(kafka.KafkaProducer.DEFAULT_CONFIG)
    # Its default network client is kafka-python's own class: refused (test below).
    defaults.pop("kafka_client")
    with KafkaProducer(**defaults | {"bootstrap_servers": kafka_broker.bootstrap}) as p:
        assert p.send(topic, b"v").get(30).offset == 0
        config = p.config
        assert set(kafka.KafkaProducer.DEFAULT_CONFIG) <= set(config)
        assert config["acks"] == -1 and config["linger_ms"] == 0
        assert dict(config)["client_id"].startswith("netkafka-producer-")
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic, 1)] == [b"v"]


@pytest.mark.parametrize("option", [{"kafka_client": object}, {"selector": object}])
def test_kafka_python_plumbing_is_refused_saying_why(option):
    with pytest.raises(errors.KafkaConfigurationError, match="does not apply to netkafka"):
        KafkaProducer(**option)


def test_unhonoured_values_are_refused_not_ignored():
    with pytest.raises(NotImplementedError, match="proxy_url='socks5://proxy:1080'"):
        KafkaProducer(proxy_url="socks5://proxy:1080")
    with pytest.raises(NotImplementedError, match="metric_reporters"):
        KafkaProducer(metric_reporters=[object])


def test_conflicting_settings_are_a_kafka_configuration_error_and_a_value_error():
    with pytest.raises(errors.KafkaConfigurationError) as info:
        KafkaProducer(enable_idempotence=True, acks=1)
    assert isinstance(info.value, ValueError)


def test_error_names_of_kafka_python():
    for name in errors.KAFKA_PYTHON_NAMES:
        assert hasattr(kafka.errors, name), name  # the name is kafka-python's
        assert issubclass(getattr(errors, name), errors.KafkaError)
    assert errors.MessageSizeTooLargeError.code == kafka.errors.MessageSizeTooLargeError.errno
    assert errors.BrokerResponseError is errors.BrokerError
    assert issubclass(errors.ProducerClosedError, errors.IllegalStateError)


def test_kafka_pythons_name_of_each_error_netkafka_raises_is_there():
    # `from kafka.errors import X` as `from netkafka.errors import X` failed for
    # CorruptRecordException (code 2, also CorruptRecordError there) and for
    # IncompatibleBrokerVersion, what kafka-python raises where netkafka raises
    # IncompatibleBrokerError (no API version both sides speak).
    for name, cls in vars(kafka.errors).items():
        code = getattr(cls, "errno", None)
        if isinstance(cls, type) and code in errors._CLASS_FOR_CODE:
            assert hasattr(errors, name), name
    assert errors.CorruptRecordException is errors.CorruptMessageError
    assert errors.IncompatibleBrokerVersion is errors.IncompatibleBrokerError
    assert {"CorruptRecordException", "IncompatibleBrokerVersion"} <= set(
        errors.KAFKA_PYTHON_NAMES)


def test_an_oversize_record_is_kafka_pythons_message_size_too_large_error(kafka_broker, topic):
    # kafka-python's send() raises MessageSizeTooLargeError for a record larger than
    # max_request_size; netkafka raised a bare ValueError, which a script's
    # `except KafkaError` (or `except MessageSizeTooLargeError`) let through.
    with producer(kafka_broker, max_request_size=10_000, batch_size=4096) as p:
        for attempt in (lambda: p.send(topic, b"x" * 10_001),
                        lambda: p.send(topic, b"x" * 10_001, partition=1)):
            with pytest.raises(errors.MessageSizeTooLargeError,
                               match=r"larger than max_request_size=10000") as info:
                attempt()
            assert isinstance(info.value, errors.KafkaError)
            assert isinstance(info.value, ValueError)  # as netkafka documents it
        result = p.send_batch(topic, [b"small", b"x" * 10_001])
        result.get(30)
        assert [(row, type(error)) for row, error in result.errors] == [
            (1, errors.RecordTooLargeError)]
        assert p.send(topic, b"after").get(30).offset >= 0
    # A broker's MESSAGE_TOO_LARGE is still MessageTooLargeError, not the client's class.
    assert type(errors.error_for_code(10)) is errors.MessageTooLargeError
    assert sorted(r.value for r in read_topic(kafka_broker.bootstrap, topic, 2)) == [
        b"after", b"small"]


def assert_too_large_everywhere(p, topic, size, match, attempts):
    """Each attempt raises RecordTooLargeError matching match at once, and
    send_batch() fails only its row of that size."""
    for attempt in attempts:
        with pytest.raises(errors.RecordTooLargeError, match=match):
            attempt()
    result = p.send_batch(topic, [b"small", b"x" * size])
    result.get(30)
    assert [(row, type(error)) for row, error in result.errors] == [
        (1, errors.RecordTooLargeError)]


def test_a_record_larger_than_buffer_memory_is_too_large_naming_it(kafka_broker, topic):
    # kafka-python's send() raises MessageSizeTooLargeError for a record larger than
    # buffer_memory too; netkafka raised the buffer pool's bare ValueError.
    size = 300 * 1024
    with producer(kafka_broker, buffer_memory=256 * 1024, batch_size=16384) as p:
        assert_too_large_everywhere(
            p, topic, size, r"larger than buffer_memory=262144",
            (lambda: p.send(topic, b"x" * size),
             lambda: p.send(topic, b"x" * size, partition=1)))
        assert p.send(topic, b"after").get(30).offset >= 0
        assert p.metrics()["netkafka"]["buffer_available_bytes"] == 256 * 1024
    assert sorted(r.value for r in read_topic(kafka_broker.bootstrap, topic, 2)) == [
        b"after", b"small"]


def test_a_record_larger_than_buffer_memory_less_the_compression_reserve_is_too_large(
        kafka_broker, topic):
    # With a codec one largest buffer of buffer_memory is set aside for compressed
    # copies; a record that fit buffer_memory but not beside it waited max_block_ms
    # on an idle producer, then raised BackpressureTimeoutError saying it had no room.
    size = 50_000
    with producer(kafka_broker, buffer_memory=65536, batch_size=16384,
                  compression_type="gzip", max_block_ms=2000) as p:
        bound = p.metrics()["netkafka"]["buffer_available_bytes"]
        assert bound < size < 65536
        assert_too_large_everywhere(
            p, topic, size, rf"larger than the {bound} bytes of buffer_memory=65536",
            (lambda: p.send(topic, b"x" * size),
             lambda: p.produce(topic, b"x" * size, partition=1)))
        assert p.send(topic, b"x" * (bound - 1000)).get(30).offset >= 0
        assert p.metrics()["netkafka"]["buffer_available_bytes"] == bound
    assert sorted(len(r.value) for r in read_topic(kafka_broker.bootstrap, topic, 2)) == [
        5, bound - 1000]


@pytest.mark.parametrize("backoff", ["block", "park"])
def test_no_buffer_memory_within_max_block_ms_is_kafka_pythons_timeout_error(
        kafka_broker, topic, backoff):
    # kafka-python's send() raises KafkaTimeoutError when it gets no buffer memory
    # within max_block_ms; netkafka's BackpressureTimeoutError was no KafkaTimeoutError,
    # so a script's `except KafkaTimeoutError` around send() let it through.
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    with producer(kafka_broker, batch_size=1024, buffer_memory=4096, max_block_ms=200,
                  backoff=backoff, request_timeout_ms=30000,
                  delivery_timeout_ms=60000) as p:
        p.send(topic, b"warm", partition=0).get(30)
        nodes[0].pause()  # nothing is acknowledged: batches keep their memory
        timed_out = None
        try:
            for _ in range(100):
                try:
                    p.send(topic, b"x" * 900, partition=0)
                except errors.KafkaTimeoutError as exc:
                    timed_out = exc
                    break
        finally:
            nodes[0].resume()
        assert isinstance(timed_out, errors.BackpressureTimeoutError)
        assert "buffer_memory" in str(timed_out)
        p.flush(30)


def test_a_str_enum_topic_and_a_numpy_partition_are_taken_as_kafka_python_takes_them(
        kafka_broker, topic):
    # kafka-python takes any str as the topic (a str Enum's member among them) and any
    # integer as the partition (numpy's, as a pandas column gives them); netkafka
    # refused both with a TypeError ("topic must be a str, not Topics").
    import enum
    import numpy

    Topics = enum.Enum("Topics", {"EVENTS": topic}, type=str)
    with producer(kafka_broker) as p:
        meta = p.send(Topics.EVENTS, b"enum", partition=numpy.int64(2)).get(30)
        assert (type(meta.topic), meta.topic, type(meta.partition), meta.partition) == (
            str, topic, int, 2)
        p.produce(Topics.EVENTS, b"produced", partition=numpy.int32(1))
        p.send_batch(Topics.EVENTS, [b"batch"], partitions=0).get(30)
        p.flush(30)
        for bad in (numpy.float64(1.0), numpy.bool_(True), True, "1"):
            with pytest.raises(TypeError, match=r"partition must be an int or None"):
                p.send(topic, b"x", partition=bad)
    placed = {(r.partition, r.value) for r in read_topic(kafka_broker.bootstrap, topic, 3)}
    assert placed == {(2, b"enum"), (1, b"produced"), (0, b"batch")}


def test_headers_in_kafka_pythons_shapes_subclasses_too(kafka_broker, topic):
    # kafka-python takes any list of tuples (isinstance); netkafka refused a list
    # subclass and a namedtuple pair ("headers[0] must be a (key, value) pair, not
    # Header").
    import collections

    Header = collections.namedtuple("Header", "key value")
    Headers = type("Headers", (list,), {})
    with producer(kafka_broker) as p:
        sent = [Headers([("a", b"1")]), [Header("b", b"2"), ("c", b"3")]]
        for headers in sent:
            meta = p.send(topic, b"v", headers=headers, partition=0).get(30)
            assert meta.serialized_header_size == sum(len(k) + len(v) for k, v in headers)
        with pytest.raises(TypeError, match=r"headers\[0\] must be a \(key, value\) pair"):
            p.send(topic, b"v", headers=[Header("k", b"v")._replace(value=b"v") + ("x",)])
    records = read_topic(kafka_broker.bootstrap, topic, 2)
    assert [list(r.headers) for r in records] == [[("a", b"1")], [("b", b"2"), ("c", b"3")]]


def test_record_metadata_fields_in_kafka_pythons_order(kafka_broker, topic):
    assert netkafka.RecordMetadata._fields == KafkaPythonRecordMetadata._fields
    with producer(kafka_broker) as p:
        meta = p.send(topic, b"value", key=b"k", headers=[("h", b"x")]).get(30)
    topic_, partition, topic_partition, offset, timestamp, checksum, k, v, h = meta
    assert (topic_, topic_partition, offset, checksum, k, v) == (
        topic, (topic, partition), 0, None, 1, 5)
    assert topic_partition == kafka.TopicPartition(topic, partition) and h == 2
    [record] = read_topic(kafka_broker.bootstrap, topic, 1)
    assert (record.partition, record.offset, record.timestamp_ms) == (partition, 0, timestamp)


class _SchemaIdSerializer(KafkaPythonSerializer):
    """kafka-python's interface: sees topic and headers and adds one."""

    def __init__(self):
        self.closed = False

    def serialize(self, topic, headers, data):
        headers.append(("schema", topic.encode()))
        return json.dumps(data).encode()

    def close(self):
        self.closed = True


def test_serializer_objects_see_topic_and_headers(kafka_broker, topic):
    serializer = _SchemaIdSerializer()
    with producer(kafka_broker, value_serializer=serializer,
                  key_serializer=netkafka.DefaultSerializer()) as p:
        p.send(topic, {"n": 1}, key="k1").get(30)
        p.send(topic, {"n": 2}, headers=[("a", b"b")]).get(30)
        result = p.send_batch(topic, [{"n": 3}], keys=["k3"])
        assert result.get(30) is None or result.failed_count == 0
    assert serializer.closed
    records = sorted(read_topic(kafka_broker.bootstrap, topic, 3),
                     key=lambda r: json.loads(r.value)["n"])
    assert [(r.key, json.loads(r.value), r.headers) for r in records] == [
        (b"k1", {"n": 1}, [("schema", topic.encode())]),
        (None, {"n": 2}, [("a", b"b"), ("schema", topic.encode())]),
        (b"k3", {"n": 3}, [("schema", topic.encode())]),
    ]



class _TopicPrefixSerializer:
    """kafka-python 2's Serializer interface, serialize(topic, value): kafka-python 3
    still calls it so (its fallback when the three-argument call is refused)."""

    def serialize(self, topic, value):
        return f"{topic}:{value}".encode()


def test_serializer_objects_of_kafka_python_2_see_topic_and_data(kafka_broker, topic):
    # netkafka called serialize(topic, headers, data) only: every send() failed with a
    # SerializationError where kafka-python 3 sends.
    with producer(kafka_broker, key_serializer=_TopicPrefixSerializer(),
                  value_serializer=_TopicPrefixSerializer()) as p:
        p.send(topic, "v1", key="k1", partition=0).get(30)
        p.send_batch(topic, ["v2"], keys=["k2"], partitions=0).get(30)
    assert [(r.key, r.value) for r in read_topic(kafka_broker.bootstrap, topic, 2)] == [
        (f"{topic}:k1".encode(), f"{topic}:v1".encode()),
        (f"{topic}:k2".encode(), f"{topic}:v2".encode())]


class _LastPartition(Partitioner):
    def __init__(self):
        self.calls = []

    def partition(self, topic, key, serialized_key, value, serialized_value, cluster):
        self.calls.append((topic, serialized_key))
        return max(cluster.partitions_for_topic(topic))


def test_partitioner_objects_kafka_pythons_own_and_subclassed(kafka_broker, topic):
    mine = _LastPartition()
    with producer(kafka_broker, partitioner=mine) as p:
        assert p.send(topic, b"v", key=b"k").get(30).partition == 2
    # Asked again when the record opens a batch (the accumulator's on_new_batch flow).
    assert set(mine.calls) == {(topic, b"k")}
    # kafka-python's own StickyPartitioner object, its on_new_batch hook included.
    with producer(kafka_broker, partitioner=KafkaPythonStickyPartitioner(),
                  batch_size=1024) as p:
        keyed = p.send(topic, b"v", key=b"foo").get(30)
        unkeyed = [p.send(topic, b"x" * 600) for _ in range(6)]
        p.flush()
    assert keyed.partition == (kafka.partitioner.murmur2(b"foo") & 0x7FFFFFFF) % 3
    assert len({f.get(0).partition for f in unkeyed}) > 1  # moved on batch by batch
    assert len(read_topic(kafka_broker.bootstrap, topic, 8)) == 8
    assert isinstance(netkafka.partitioner.StickyPartitioner(), Partitioner)


def test_bootstrap_connected_and_metrics_raw(kafka_broker, topic):
    with producer(kafka_broker) as p:
        p.send(topic, b"v").get(30)
        assert p.bootstrap_connected()
        raw = p.metrics(raw=True)
        assert raw[("producer-metrics", "record-send-total")] == 1
        assert p.metrics()["producer-metrics"]["record-send-total"] == 1
    with producer(kafka_broker, metrics_enabled=False) as p:
        assert p.metrics() is None


def test_auto_creation_off_is_honoured(kafka_broker, topic_name):
    with producer(kafka_broker, allow_auto_create_topics=False, max_block_ms=1500) as p:
        with pytest.raises(errors.KafkaTimeoutError):
            p.send(topic_name, b"v")


def test_receive_message_max_bytes_is_honoured(kafka_broker, topic, caplog):
    # Every broker answer is larger than 16 bytes: none is taken, so no metadata comes.
    caplog.set_level(logging.DEBUG, logger="netkafka")
    with producer(kafka_broker, receive_message_max_bytes=16, max_block_ms=1500) as p:
        with pytest.raises(errors.KafkaTimeoutError):
            p.send(topic, b"v")
    # The broker's ApiVersions answer is refused by its size, connection after connection.
    assert "negotiating_versions -> disconnected" in caplog.text


def test_socket_options_are_applied(kafka_broker, topic, monkeypatch):
    seen = []
    real_setsockopt = socket.socket.setsockopt

    class Recording(socket.socket):
        def setsockopt(self, *args):
            seen.append(args)
            return real_setsockopt(self, *args)

    monkeypatch.setattr(socket, "socket", Recording)
    option = (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    with producer(kafka_broker, socket_options=[option]) as p:
        p.send(topic, b"v").get(30)
    assert option in seen
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) not in seen  # replaced, as kafka-python


class _Tracing:
    def __init__(self):
        self.acknowledged = []

    def on_send(self, record):
        return record._replace(headers=(record.headers or []) + [("trace", b"t1")])

    def on_acknowledgement(self, metadata, exception):
        self.acknowledged.append((metadata.topic, metadata.offset, exception))


def test_interceptors_change_records_and_hear_every_outcome(kafka_broker, topic, caplog):
    tracing = _Tracing()

    class Broken:
        def on_send(self, record):
            raise RuntimeError("interceptor bug")

        def on_acknowledgement(self, metadata, exception):
            raise RuntimeError("interceptor bug")

    with producer(kafka_broker, interceptors=[Broken(), tracing]) as p:
        p.send(topic, b"a", partition=0).get(30)
        p.produce(topic, b"b", partition=0)
        p.flush()
        with pytest.raises(TypeError):
            p.send(topic, "not bytes")
        with pytest.raises(errors.KafkaConfigurationError, match="interceptors"):
            p.send_batch(topic, [b"c"])
    offsets = sorted(offset for _, offset, error in tracing.acknowledged if error is None)
    failed = [error for _, _, error in tracing.acknowledged if error is not None]
    assert offsets == [0, 1] and len(failed) == 1 and isinstance(failed[0], TypeError)
    assert "interceptor bug" in caplog.text
    records = read_topic(kafka_broker.bootstrap, topic, 2)
    assert sorted((r.value, tuple(r.headers)) for r in records) == [
        (b"a", (("trace", b"t1"),)), (b"b", (("trace", b"t1"),))]


def test_produce_failures_through_interceptors_still_reach_flush(kafka_broker, topic):
    tracing = _Tracing()
    with producer(kafka_broker, interceptors=[tracing]) as p:
        p.produce(topic, b"x", partition=7)  # the topic has 3: counted for flush()
        with pytest.raises(errors.UndeliveredRecordsError, match="no partition 7"):
            p.flush()
    assert len(tracing.acknowledged) == 1 and tracing.acknowledged[0][2] is not None


def test_producer_record_is_send_s_arguments():
    assert ProducerRecord._fields == ("topic", "value", "key", "headers", "partition",
                                      "timestamp_ms")


@pytest.mark.parametrize("codec, option, level", [
    ("gzip", "compression_level", 9), ("gzip", "compression_gzip_level", 1),
    ("gzip", "compression_gzip_level", -1), ("lz4", "compression_lz4_level", 1),
    ("lz4", "compression_lz4_level", 12), ("lz4", "compression_lz4_level", 17),
    ("zstd", "compression_level", 19), ("zstd", "compression_zstd_level", -5)])
def test_compression_levels_round_trip(kafka_broker, topic, codec, option, level):
    values = [b"record %d " % i * 20 for i in range(200)]
    with producer(kafka_broker, compression_type=codec, **{option: level}) as p:
        assert p.config.effective_compression_level == level
        for value in values:
            p.send(topic, value, partition=0)
        p.flush()
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic, 200)] == values


@pytest.mark.parametrize("codec, option, levels", [
    ("gzip", "compression_gzip_level", (-1, 1, 9)), ("lz4", "compression_lz4_level", (1, 17)),
    ("zstd", "compression_zstd_level", (-131072, 22))])
def test_compression_levels_take_the_java_clients_bounds(codec, option, levels):
    # Each per-codec level is checked whichever codec is chosen, as Java checks them.
    for level in levels:
        for settings in ({option: level}, {"compression_type": codec, "compression_level": level}):
            assert ProducerConfig(**settings).effective_compression_level in (None, level)


@pytest.mark.parametrize("codec, option, level, allowed", [
    ("gzip", "compression_gzip_level", 0, r"-1 \(zlib's default\) or 1 to 9"),
    ("gzip", "compression_gzip_level", 10, r"-1 \(zlib's default\) or 1 to 9"),
    ("lz4", "compression_lz4_level", 0, "1 to 17"), ("lz4", "compression_lz4_level", 18, "1 to 17"),
    ("zstd", "compression_zstd_level", -131073, "-131072 to 22"),
    ("zstd", "compression_zstd_level", 23, "-131072 to 22")])
def test_compression_levels_outside_the_java_clients_bounds_are_refused(codec, option, level,
                                                                        allowed):
    expected = rf"{codec} level {level} is out of range \({{}}={level}\): expected {allowed}"
    with pytest.raises(ValueError, match=expected.format(option)):
        ProducerConfig(**{option: level})
    with pytest.raises(ValueError, match=expected.format("compression_level")):
        KafkaProducer(compression_type=codec, compression_level=level)


def test_compression_level_checks():
    with pytest.raises(errors.KafkaConfigurationError, match="needs compression_type gzip"):
        KafkaProducer(compression_type="snappy", compression_level=1)
    with pytest.raises(errors.KafkaConfigurationError, match="disagree"):
        KafkaProducer(compression_type="lz4", compression_level=1, compression_lz4_level=2)


def test_batch_size_zero_sends_one_record_per_batch(kafka_broker, topic):
    # kafka-python: "a batch size of zero will disable batching entirely" (Java: one
    # record per batch); netkafka refused batch_size=0.
    values = [b"r%d" % i for i in range(5)]
    with producer(kafka_broker, batch_size=0, linger_ms=200, acks=1) as p:
        assert p.config["batch_size"] == 0
        futures = [p.send(topic, value, partition=0) for value in values]
        p.flush()
        assert [f.get(30).offset for f in futures] == [0, 1, 2, 3, 4]
        # Lingering 200 ms would have gathered them into one batch.
        assert p.metrics()["netkafka"]["batches_created"] == 5
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic, 5)] == values


def test_batch_size_above_max_request_size_is_taken_capped(kafka_broker, topic):
    # kafka-python and Java accept it (Java documents max.request.size as "effectively
    # a cap on the maximum uncompressed record batch size"); netkafka refused it.
    value = b"x" * 6000
    with producer(kafka_broker, batch_size=1 << 20, max_request_size=10_000,
                  linger_ms=200) as p:
        assert (p.config["batch_size"], p.config.batch_size_bytes) == (1 << 20, 10_000)
        futures = [p.send(topic, value, partition=0) for _ in range(3)]
        p.flush()
        assert [f.get(30).offset for f in futures] == [0, 1, 2]
        # Each batch stops at max_request_size: one 6000-byte record each.
        assert p.metrics()["netkafka"]["batches_created"] == 3
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic, 3)] == [value] * 3


def test_float_milliseconds_are_taken_as_kafka_python_takes_them(kafka_broker, topic):
    # kafka-python does arithmetic on its *_ms settings, so floats work there;
    # netkafka refused linger_ms=0.5 and request_timeout_ms=30000.0.
    with producer(kafka_broker, linger_ms=0.5, request_timeout_ms=30000.0,
                  delivery_timeout_ms=120000.0, retry_backoff_ms=99.2,
                  max_block_ms=30000.0) as p:
        config = p.config
        assert config["linger_ms"] == 0.5 and p._accumulator._linger_ns == 500_000
        # Used in whole ms below (the wire's int32): whole floats are their int, a
        # fraction rounds up, so no wait is shorter than asked.
        assert (config["request_timeout_ms"], config["retry_backoff_ms"]) == (30000, 100)
        assert type(config["request_timeout_ms"]) is int
        assert p.send(topic, b"v", partition=0).get(30).offset == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.5, True, "5"])
def test_bad_milliseconds_are_refused_naming_the_setting(value):
    with pytest.raises(ValueError, match=r"linger_ms must be an int or a finite float >= 0 "
                                         r"\(milliseconds\), got " + re.escape(repr(value))):
        KafkaProducer(linger_ms=value)


def test_futures_have_kafka_pythons_retriable_and_chain(kafka_broker, topic_name):
    # kafka-python's Future has retriable() and chain(future); netkafka's futures had
    # neither, so code written for kafka-python raised AttributeError.
    from kafka.future import Future as KafkaPythonFuture
    public = {name for name in dir(KafkaPythonFuture) if not name.startswith("_")}
    # success()/failure() complete a future: the producer's own business, not the user's.
    assert public - {"success", "failure", "error_on_callbacks"} <= set(dir(
        netkafka.FutureRecordMetadata))
    create_topic(kafka_broker.bootstrap, topic_name)
    with producer(kafka_broker, delivery_timeout_ms=3000, request_timeout_ms=2000,
                  allow_auto_create_topics=False) as p:
        p.send(topic_name, b"v", partition=0).get(30)
        # The topic gone from the broker but not from the producer's metadata: the
        # broker's UNKNOWN_TOPIC_OR_PARTITION, retriable, until delivery_timeout_ms.
        admin = admin_client(kafka_broker.bootstrap)
        admin.delete_topics([topic_name])[topic_name].result(30)
        failing = p.send(topic_name, b"v", partition=0)
        chained = KafkaPythonFuture()
        assert failing.chain(chained) is failing
        with pytest.raises(errors.KafkaError) as info:
            failing.get(30)
        assert info.value.retriable and failing.retriable()
        assert chained.failed() and chained.exception is info.value
    create_topic(kafka_broker.bootstrap, topic_name + "-ok")
    with producer(kafka_broker) as p:
        future = p.send(topic_name + "-ok", b"v")
        assert future.retriable() is False  # pending
        chained = KafkaPythonFuture()
        future.chain(chained)
        metadata = future.get(30)
        assert future.retriable() is False and chained.succeeded()
        assert chained.value == metadata
        # Chained after it is done: completed at once, as kafka-python does.
        late = KafkaPythonFuture()
        future.chain(late)
        assert late.value == metadata
        with pytest.raises(TypeError, match=r"chain\(\) needs a future with success\(value\) "
                                            r"and failure\(error\)"):
            future.chain(object())


def test_a_record_with_neither_key_nor_value_is_a_value_error_as_in_kafka_python(
        kafka_broker, topic):
    # kafka-python's send() refuses it ("Need at least one: key or value"); netkafka
    # wrote an empty record, so the caller's slip reached the topic unseen.
    # produce() takes it, as confluent-kafka's produce() does.
    with producer(kafka_broker, value_serializer=str.encode) as p:
        with pytest.raises(ValueError, match="needs a key or a value"):
            p.send(topic, partition=0)
        with pytest.raises(ValueError, match="needs a key or a value"):
            p.send(topic, None, None, [("h", b"v")], 0)
    with producer(kafka_broker) as p:  # no serializer: it would be given the None
        p.produce(topic, partition=0)
        p.send(topic, b"marker", partition=0).get(30)
    assert [(r.key, r.value) for r in read_topic(kafka_broker.bootstrap, topic, 2)] == [
        (None, None), (None, b"marker")]


class _FillingValue:
    """An interceptor whose on_send gives a record without a value one."""

    def on_send(self, record):
        return record if record.value is not None else record._replace(value=b"filled")

    def on_acknowledgement(self, metadata, exception):
        pass


def test_the_empty_record_check_comes_after_the_closed_check_and_the_interceptors(
        kafka_broker, topic):
    # kafka-python's send() says it is closed before it looks at key and value; netkafka
    # looked at them first, so a closed producer raised ValueError.  And the record
    # checked is the one interceptors hand on (on_send may replace it): netkafka refused
    # the caller's before on_send could give it a value.
    with producer(kafka_broker, interceptors=[_FillingValue()]) as p:
        assert p.send(topic, partition=0).get(30).partition == 0
    for closed in (p, producer(kafka_broker)):
        closed.close()
        with pytest.raises(errors.ProducerClosedError):
            closed.send(topic, partition=0)
    records = read_topic(kafka_broker.bootstrap, topic, 1)
    assert [(r.key, r.value) for r in records] == [(None, b"filled")]


def test_an_illegal_topic_name_is_kafka_pythons_value_error(kafka_broker, topic):
    # kafka-python's send() raises ValueError for a name against Kafka's rule (its
    # docstring says so); netkafka's InvalidTopicError was no ValueError, so a caller
    # catching that one let it through.
    with producer(kafka_broker) as p:
        for call in (lambda: p.send("my topic", b"x"), lambda: p.produce("my topic", b"x"),
                     lambda: p.partitions_for("a/b")):
            with pytest.raises(ValueError, match="is not a valid Kafka topic name") as info:
                call()
            assert isinstance(info.value, errors.InvalidTopicError)
            assert info.value.code == 17
        p.send(topic, b"fine", partition=0).get(30)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic, 1)] == [b"fine"]


def test_broker_errors_have_kafka_pythons_errno(kafka_broker, topic):
    # kafka-python's BrokerResponseError carries the code as errno ("[Error 10] ...");
    # netkafka's called it code only, so `except BrokerResponseError as e: e.errno`
    # raised AttributeError inside the handler.
    for name in errors.KAFKA_PYTHON_NAMES:
        ours, theirs = getattr(errors, name), getattr(kafka.errors, name)
        if issubclass(ours, errors.BrokerError) and theirs.errno is not None:
            assert ours.errno == theirs.errno == ours.code, name
    assert errors.error_for_code(52).errno == 52  # a code without a class of its own
    with producer(kafka_broker) as p:
        with pytest.raises(errors.BrokerResponseError) as info:
            p.send(topic, b"x" * 2_000_000)
    assert info.value.errno == kafka.errors.MessageSizeTooLargeError.errno
