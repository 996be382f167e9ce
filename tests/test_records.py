"""netkafka.record._batch: RecordBatch v2 batches, checked by decoders that are not ours.

Every batch is read back by kafka-python's DefaultRecordBatch (pure Python) and
aiokafka's Cython DefaultRecordBatch, CRC included, and compared byte for byte with
tests/reference_encoder.py (compressed batches: their decompressed records region).
"""
import array
import contextlib
import ctypes
import gc
import random
import struct
import subprocess
import sys
import threading
import time

import pytest
from aiokafka.record._crecords.default_records import DefaultRecordBatch as AiokafkaBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch

import raw_produce
import reference_encoder as ref
from netkafka.errors import BatchStateError, BufferPoolExhausted
from netkafka.record import _batch
from netkafka.record._batch import RecordBatchBuilder
from netkafka.record._columns import BinaryColumn, Rows
from netkafka.record._compression import Compressor
from netkafka.record._pool import BufferPool
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {name: i for i, name in enumerate(CODECS)}
HEADER_BYTES = 61
MAX_INT64 = 2**63 - 1
# Big enough for the random batches below (at most 12 records of two 1 MiB fields).
BIG_BATCH_BYTES = 32 << 20
BIG_REQUEST_BYTES = 64 << 20
SHARED_COMPRESSORS = {name: Compressor(name) for name in CODECS}
DECOMPRESS = {
    "gzip": kafka_codec.gzip_decode,
    "snappy": kafka_codec.snappy_decode,
    "lz4": kafka_codec.lz4_decode,
    "zstd": kafka_codec.zstd_decode,
}


@pytest.fixture(scope="module")
def big_pool():
    return BufferPool(BIG_BATCH_BYTES, 8 * BIG_BATCH_BYTES)


def new_builder(pool, batch_size_bytes=None, max_request_size_bytes=None, compression=None, **kw):
    batch_size_bytes = batch_size_bytes or pool.buffer_size_bytes
    return RecordBatchBuilder(pool.try_acquire(), batch_size_bytes,
                              max_request_size_bytes or max(batch_size_bytes, BIG_REQUEST_BYTES),
                              compression, **kw)


def finish(builder):
    """Acknowledge and release a sealed builder (views must be gone)."""
    builder.mark_acknowledged()
    builder.release()


@contextlib.contextmanager
def batch_in(pool, **kw):
    """A builder given back to the pool however the test ends, so that one failing
    example does not starve the next ones of pool memory."""
    builder = new_builder(pool, **kw)
    try:
        yield builder
    finally:
        if builder.state in ("open", "sealed"):
            builder.mark_failed()
        if builder.state == "done":
            builder.release()


def sealed_bytes(builder):
    view = builder.seal()
    try:
        return bytes(view)
    finally:
        view.release()


def decode_kafka_python(data):
    """(header fields, records) as kafka-python reads them; asserts the CRC."""
    batch = KafkaPythonBatch(data)
    assert batch.validate_crc(), "kafka-python: CRC32C mismatch"
    header = {
        "base_offset": batch.base_offset, "magic": batch.magic,
        "codec": batch.compression_type, "timestamp_type": batch.timestamp_type,
        "transactional": batch.is_transactional, "control": batch.is_control_batch,
        "last_offset_delta": batch.last_offset_delta,
        "first_timestamp": batch.first_timestamp, "max_timestamp": batch.max_timestamp,
        "producer_id": batch.producer_id, "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence, "records_count": batch.records_count,
        "size": batch.size_in_bytes, "leader_epoch": batch.leader_epoch,
    }
    records = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    return header, records


def decode_aiokafka(data):
    """Records as aiokafka's Cython decoder reads them; asserts the CRC."""
    batch = AiokafkaBatch(data)
    assert batch.validate_crc(), "aiokafka: CRC32C mismatch"
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]


def expected_records(records):
    """What a decoder must give back for (key, value, headers, timestamp) records."""
    out = []
    for i, (key, value, headers, ts) in enumerate(records):
        headers = [(k.decode() if isinstance(k, bytes) else k, v) for k, v in (headers or [])]
        out.append((i, ts, None if key is None else bytes(key),
                    None if value is None else bytes(value), headers))
    return out


def check_batch(data, records, codec="none", sealed_codec=None, attributes=0, producer_id=-1,
                producer_epoch=-1, base_sequence=-1):
    """Everything about one sealed batch, through both decoders and the oracle."""
    header, decoded = decode_kafka_python(data)
    assert decoded == expected_records(records)
    assert decode_aiokafka(data) == expected_records(records)
    timestamps = [r[3] for r in records]
    sealed_codec = CODEC_IDS[codec] if sealed_codec is None else sealed_codec
    assert header == {
        "base_offset": 0, "magic": 2, "codec": sealed_codec,
        "timestamp_type": 1 if attributes & 0x08 else 0,
        "transactional": bool(attributes & 0x10), "control": bool(attributes & 0x20),
        "last_offset_delta": len(records) - 1,
        "first_timestamp": timestamps[0], "max_timestamp": max(timestamps),
        "producer_id": producer_id, "producer_epoch": producer_epoch,
        "base_sequence": base_sequence, "records_count": len(records),
        "size": len(data), "leader_epoch": -1,
    }
    expected = ref.encode_batch(records, attributes=attributes | sealed_codec,
                                producer_id=producer_id, producer_epoch=producer_epoch,
                                base_sequence=base_sequence,
                                payload=None if sealed_codec == 0 else data[HEADER_BYTES:])
    assert data == expected, "header or CRC differs from the reference encoder"
    if sealed_codec:
        plain = DECOMPRESS[CODECS[sealed_codec]](data[HEADER_BYTES:])
        assert plain == ref.encode_records(records), "decompressed records differ from the oracle"


# -- hypothesis strategies ---------------------------------------------------------------

def blob(size, seed, compressible):
    if compressible:
        return (b"netkafka %d " % seed * (size // 10 + 1))[:size]
    return random.Random(seed).randbytes(size)


# Sizes around the varint length boundaries (zigzag: 63/64, 8191/8192) and up to 1 MiB.
payloads = st.one_of(
    st.none(),
    st.binary(max_size=80),
    st.builds(blob, st.sampled_from([0, 63, 64, 8191, 8192, 65536, 1 << 20]),
              st.integers(0, 10_000), st.booleans()),
)
header_keys = st.one_of(st.text(max_size=12), st.text(max_size=6).map(str.encode))
headers_st = st.one_of(
    st.none(),
    st.lists(st.tuples(header_keys, st.one_of(st.none(), st.binary(max_size=40))), max_size=4),
)
timestamps = st.one_of(st.integers(0, MAX_INT64), st.integers(1_600_000_000_000, 1_900_000_000_000))
records_st = st.lists(st.tuples(payloads, payloads, headers_st, timestamps), min_size=1, max_size=12)
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.data_too_large])


@SLOW
@given(records=records_st, codec=st.sampled_from(CODECS), shared=st.booleans())
def test_random_batches_decode_in_independent_readers(big_pool, records, codec, shared):
    compression = SHARED_COMPRESSORS[codec] if shared else codec
    with batch_in(big_pool, compression=compression) as builder:
        for i, (key, value, headers, ts) in enumerate(records):
            assert builder.append(key, value, headers, ts) == i
        data = sealed_bytes(builder)
        assert builder.size_bytes == len(data)
        check_batch(data, records, codec, sealed_codec=builder.sealed_codec)
        if builder.sealed_codec == 0 and codec != "none":
            # Sent uncompressed only when compression would not have saved a byte.
            compressed = SHARED_COMPRESSORS[codec].compress(ref.encode_records(records))
            assert len(compressed) >= len(data) - HEADER_BYTES
    assert big_pool.in_use_bytes == 0


@SLOW
@given(records=st.lists(st.tuples(payloads, payloads, headers_st, st.integers(0, MAX_INT64)),
                        min_size=1, max_size=12),
       key_kind=st.sampled_from([bytes, bytearray, memoryview]))
def test_bulk_list_append_equals_per_record_append(big_pool, records, key_kind):
    keys = [None if k is None else key_kind(k) for k, _, _, _ in records]
    values = [v for _, v, _, _ in records]
    headers = [h for _, _, h, _ in records]
    stamps = [t for _, _, _, t in records]
    with batch_in(big_pool) as one, batch_in(big_pool) as bulk:
        for key, value, h, ts in zip(keys, values, headers, stamps):
            one.append(key, value, h, ts)
        assert bulk.append_many(values, keys, headers, stamps) == len(records)
        assert sealed_bytes(bulk) == sealed_bytes(one)
        check_batch(sealed_bytes(bulk), list(zip(keys, values, headers, stamps)))


def column_buffers(items, offset_type):
    """Arrow-layout (data, offsets, validity) of a list of bytes/None."""
    data = b"".join(x for x in items if x is not None)
    offsets = array.array(offset_type, [0])
    validity = bytearray((len(items) + 7) // 8)
    for i, x in enumerate(items):
        offsets.append(offsets[-1] + (0 if x is None else len(x)))
        if x is not None:
            validity[i // 8] |= 1 << (i % 8)
    return data, offsets, bytes(validity)


@SLOW
@given(records=st.lists(st.tuples(payloads, payloads, st.integers(0, MAX_INT64)),
                        min_size=1, max_size=12),
       offset_type=st.sampled_from(["i", "q"]))
def test_column_append_equals_per_record_append(big_pool, records, offset_type):
    keys = [k for k, _, _ in records]
    values = [v for _, v, _ in records]
    stamps = array.array("q", [t for _, _, t in records])
    with batch_in(big_pool) as one, batch_in(big_pool) as columns:
        for key, value, ts in zip(keys, values, stamps):
            one.append(key, value, None, ts)
        appended = columns.append_column(BinaryColumn(*column_buffers(values, offset_type)),
                                         BinaryColumn(*column_buffers(keys, offset_type)), stamps)
        assert appended == len(records)
        assert sealed_bytes(columns) == sealed_bytes(one)


# -- bulk paths: filling batch after batch -------------------------------------------------

def test_append_many_stops_when_full_and_continues_in_the_next_batch():
    pool = BufferPool(4096, 1 << 20)
    values = [b"value-%05d" % i * 10 for i in range(500)]
    keys = [b"k%d" % i for i in range(500)]
    stamps = list(range(1000, 1500))
    batches, start = [], 0
    while start < len(values):
        builder = RecordBatchBuilder(pool.try_acquire(), 4096, 1 << 20)
        count = builder.append_many(values, keys, None, stamps, start=start)
        assert count == builder.record_count > 0
        assert builder.is_full or start + count == len(values)
        assert builder.size_bytes <= 4096
        batches.append((sealed_bytes(builder), start, count))
        finish(builder)
        start += count
    assert len(batches) > 5
    for data, first, count in batches:
        records = [(keys[i], values[i], None, stamps[i]) for i in range(first, first + count)]
        check_batch(data, records)


def test_append_column_stops_when_full_and_continues():
    pool = BufferPool(4096, 1 << 20)
    values = [None if i % 7 == 0 else b"v" * (i % 50) for i in range(400)]
    column = BinaryColumn(*column_buffers(values, "i"))
    now_before = int(time.time() * 1000)
    start, seen = 0, []
    while start < len(values):
        builder = RecordBatchBuilder(pool.try_acquire(), 4096, 1 << 20)
        count = builder.append_column(column, start=start)
        data = sealed_bytes(builder)
        header, decoded = decode_kafka_python(data)
        seen += [value for _, _, _, value, _ in decoded]
        # timestamps_ms=None: one clock reading for the call, now.
        assert header["first_timestamp"] == header["max_timestamp"] >= now_before
        finish(builder)
        start += count
    assert seen == values


def test_pyarrow_binary_and_string_arrays_as_columns(big_pool):
    pa = pytest.importorskip("pyarrow")
    values = [b"alpha", None, b"", b"\xff" * 300]
    keys = ["k1", "k\u00e9", None, ""]
    arrays = [
        (pa.array(values, pa.binary()), pa.array(keys, pa.string())),
        (pa.array(values, pa.large_binary()), pa.array(keys, pa.large_string())),
        # A slice: the arrays' offset must be honoured in offsets and validity bits.
        (pa.array([b"x"] * 3 + values, pa.binary()).slice(3),
         pa.array(["y"] * 3 + keys, pa.string()).slice(3)),
    ]
    expected = [(None if k is None else k.encode(), v, None, 7) for k, v in zip(keys, values)]
    for value_array, key_array in arrays:
        builder = new_builder(big_pool)
        assert builder.append_column(value_array, key_array, array.array("q", [7] * 4)) == 4
        check_batch(sealed_bytes(builder), expected)
        finish(builder)
    with pytest.raises(TypeError, match="not a binary column"):
        BinaryColumn.from_arrow(pa.array([1, 2]))
    with pytest.raises(TypeError, match="ChunkedArray"):
        BinaryColumn.from_arrow(pa.chunked_array([values]))


def test_columns_in_a_garbage_cycle_give_the_callers_buffers_back():
    # A BinaryColumn or Rows reachable only from a reference cycle (held by an object
    # of the caller's that is in one) is freed by the collector.  Its tp_clear dropped
    # the held buffers' owners without releasing them: the caller's array stayed
    # locked for good ("cannot resize an array that is exporting buffers").
    timestamps = array.array("q", [1, 2])
    data, offsets = bytearray(b"ab"), array.array("i", [0, 1, 2])
    for make in (lambda: Rows([b"a", b"b"], timestamps_ms=timestamps),
                 lambda: BinaryColumn(data, offsets)):
        cycle = [make()]
        cycle.append(cycle)
        del cycle
        gc.collect()
    timestamps.append(3)
    data.append(ord("c"))
    offsets.append(3)
    assert (list(timestamps), bytes(data), list(offsets)) == ([1, 2, 3], b"abc", [0, 1, 2, 3])


# Buffers held by a Rows or a column made cyclic garbage by a caught exception: the
# frame, made for the traceback after them, is cleared after the buffers' owners.
_HELD_BUFFERS_CYCLE = """
import gc
from array import array
{imports}
from netkafka import BinaryColumn
from netkafka.record._columns import Rows

def send():
    held = {held}
    try:
        1 / 0
    except ZeroDivisionError as caught:
        error = caught  # error -> traceback -> this frame -> error

gc.disable()
send()
gc.collect()
"""


@pytest.mark.parametrize("held", [
    'Rows([b"a", b"b"], timestamps_ms=pyarrow.array([1, 2], pyarrow.timestamp("us")))',
    'Rows([b"a", b"b"], timestamps_ms=memoryview(bytes(16)).cast("q"))',
    'Rows([b"a", b"b"], timestamps_ms=memoryview(array("q", [1, 2])))',
    'BinaryColumn(memoryview(b"abc"), memoryview(array("i", [0, 1, 2, 3])), '
    'memoryview(b"\\x07"))',
], ids=["arrow-timestamps", "cast-memoryview-timestamps", "memoryview-timestamps",
        "memoryview-column"])
def test_held_buffers_in_a_garbage_cycle_are_collected_silently(held):
    # Held through a memoryview (pyarrow's timestamps cast by netkafka, or the caller's
    # own), which the collector cleared first while the Rows or column still held it:
    # "Exception ignored in tp_clear of memoryview" (BufferError), then a crash.  In a
    # process of its own: it crashed.
    imports = ""
    if "pyarrow." in held:  # not in the core subset's environments (make test-versions)
        pytest.importorskip("pyarrow")
        imports = "import pyarrow"
    script = _HELD_BUFFERS_CYCLE.replace("{imports}", imports).replace("{held}", held)
    done = subprocess.run([sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


def test_column_validation_names_the_problem(big_pool):
    with pytest.raises(ValueError, match="offset_width_bytes"):
        BinaryColumn(b"abc", b"\0" * 8)
    with pytest.raises(ValueError, match="needs 5 offsets"):
        BinaryColumn(b"abc", array.array("i", [0, 1, 2]), length=4)
    # first + length past the Py_ssize_t range must not wrap past the check (it
    # did: the column was accepted and reading a row read outside offsets).
    with pytest.raises(ValueError, match="needs 9223372036854775809 offsets"):
        BinaryColumn(b"a", array.array("i", [0, 1]), length=2**62, first=2**62)
    with pytest.raises(ValueError, match="needs 4 offsets"):
        BinaryColumn(b"a", array.array("i", [0, 1]), length=0, first=3)
    with pytest.raises(ValueError, match="validity has 8 bits"):
        BinaryColumn(b"a" * 9, array.array("i", range(10)), b"\xff")
    with pytest.raises(TypeError, match="int32 or int64"):
        BinaryColumn(b"abc", array.array("d", [0.0, 1.0]))
    builder = new_builder(big_pool)
    # Offsets past the data, and decreasing offsets: refused, not read.
    with pytest.raises(ValueError, match=r"values\[1\]: offsets 2..9 are not a range"):
        builder.append_column(BinaryColumn(b"abc", array.array("i", [0, 2, 9])))
    with pytest.raises(ValueError, match=r"keys\[0\]: offsets 2..1"):
        builder.append_column(BinaryColumn(b"abc", array.array("i", [0, 1])),
                              BinaryColumn(b"abc", array.array("q", [2, 1])))
    with pytest.raises(ValueError, match="keys has 2 elements, values has 1"):
        builder.append_column(BinaryColumn(b"abc", array.array("i", [0, 1])),
                              BinaryColumn(b"abc", array.array("i", [0, 1, 2])))
    with pytest.raises(TypeError, match="int64"):
        builder.append_column(BinaryColumn(b"a", array.array("i", [0, 1])),
                              timestamps_ms=array.array("i", [1]))
    with pytest.raises(ValueError, match="negative"):
        builder.append_column(BinaryColumn(b"a", array.array("i", [0, 1])),
                              timestamps_ms=array.array("q", [-5]))
    with pytest.raises(TypeError, match="BinaryColumn"):
        builder.append_column([b"a"])
    # The first, valid record of the offending calls went in before the error.
    assert builder.record_count == 1
    builder.mark_failed()
    builder.release()


def test_append_many_validates_its_arguments(big_pool):
    builder = new_builder(big_pool)
    with pytest.raises(TypeError, match="values must be a list or tuple"):
        builder.append_many(iter([b"a"]))
    with pytest.raises(ValueError, match="keys has 1 elements, values has 2"):
        builder.append_many([b"a", b"b"], [b"k"])
    with pytest.raises(ValueError, match="start=3 is outside 0..2"):
        builder.append_many([b"a", b"b"], start=3)
    with pytest.raises(TypeError, match=r"values\[1\] must be bytes"):
        builder.append_many([b"a", "text"])
    with pytest.raises(TypeError, match=r"keys\[0\] must be bytes"):
        builder.append_many((b"a",), (3,))
    with pytest.raises(ValueError, match=r"timestamps_ms\[0\]=-2 is negative"):
        builder.append_many([b"a"], timestamps_ms=[-2])
    assert builder.append_many((b"x", None), headers=[None, [("h", None)]],
                               timestamps_ms=(5, None)) == 2
    builder.mark_failed()
    builder.release()


# -- batch header fields ------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS)
def test_producer_state_transactional_and_timestamp_type_in_header(big_pool, codec):
    records = [(b"key", b"compressible " * 20, [("trace", b"1")], 1_700_000_000_000 + i)
               for i in range(20)]
    builder = new_builder(big_pool, compression=codec, transactional=True,
                          timestamp_type=_batch.TIMESTAMP_LOG_APPEND_TIME)
    for key, value, headers, ts in records:
        builder.append(key, value, headers, ts)
    builder.set_producer_state(123456789012, 7, 2_000_000_000)
    assert builder.is_transactional
    data = sealed_bytes(builder)
    assert builder.sealed_codec == CODEC_IDS[codec]
    batch = KafkaPythonBatch(data)
    assert batch.validate_crc()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (123456789012, 7, 2_000_000_000)
    assert batch.is_transactional and batch.timestamp_type == 1 and not batch.is_control_batch
    assert batch.compression_type == CODEC_IDS[codec]
    with pytest.raises(BatchStateError, match="sealed"):
        builder.set_producer_state(1, 1, 1)
    finish(builder)


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("codec", CODECS)
def test_rewrite_producer_state_of_a_sealed_batch(big_pool, codec, size):
    rng = random.Random(7)
    if size == "large":
        # ~200 KB of random bytes: sealed uncompressed, CRC with the GIL released.
        records = [(b"k%d" % i, rng.randbytes(10_000), None, 1_700_000_000_000 + i)
                   for i in range(20)]
    else:
        records = [(None if i % 4 == 0 else b"key-%d" % i, b"compressible %d " % i * 9,
                    [("h", b"%d" % i)] if i % 3 == 0 else None, 1_700_000_000_000 - i)
                   for i in range(50)]
    builder = new_builder(big_pool, compression=codec)
    for key, value, headers, ts in records:
        builder.append(key, value, headers, ts)
    builder.set_producer_state(1000, 3, 40)
    with pytest.raises(BatchStateError, match="open"):
        builder.rewrite_producer_state(1, 1, 1)
    view = builder.seal()  # alive across the rewrite, as the sender's view is
    before = bytes(view)
    builder.rewrite_producer_state(123456789012, 32767, 2**31 - 1)
    after = bytes(view)
    assert (builder.producer_id, builder.producer_epoch, builder.base_sequence) == \
        (123456789012, 32767, 2**31 - 1)
    check_batch(after, records, codec=codec, sealed_codec=builder.sealed_codec,
                producer_id=123456789012, producer_epoch=32767, base_sequence=2**31 - 1)
    # Only the producer fields (43..57) and the CRC (17..21) changed: the records,
    # compressed or not, were neither re-encoded nor re-compressed.
    assert after[:17] == before[:17] and after[21:43] == before[21:43]
    assert after[57:] == before[57:] and after[17:21] != before[17:21]
    view.release()
    finish(builder)
    with pytest.raises(BatchStateError, match="released"):
        builder.rewrite_producer_state(1, 1, 1)


def test_rewritten_batch_is_taken_by_the_broker_under_a_new_epoch(kafka_broker, topic_name):
    """Kafka's rules for an idempotent producer, on batches re-stamped in place: a
    gap in the sequence is refused, a new epoch must start at sequence 0, an older
    epoch is fenced."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    pool = BufferPool(1 << 20, 4 << 20)
    producer_id = random.Random().randrange(1 << 40, 1 << 50)
    first = RecordBatchBuilder(pool.try_acquire(), 1 << 20, 1 << 20, "zstd")
    second = RecordBatchBuilder(pool.try_acquire(), 1 << 20, 1 << 20, "lz4")
    for i in range(10):
        first.append(b"k", b"first %d " % i * 20, None, 1_700_000_000_000 + i)
        second.append(None, b"second %d " % i * 20, [("n", b"%d" % i)], 1_700_000_000_100 + i)
    first.set_producer_state(producer_id, 0, 0)
    second.set_producer_state(producer_id, 0, 15)  # 10 expected: a gap
    first_view, second_view = first.seal(), second.seal()
    try:
        assert raw_produce.produce(kafka_broker.bootstrap, topic_name, 0, first_view) == 0
        with pytest.raises(RuntimeError, match="error code 45"):  # OUT_OF_ORDER_SEQUENCE_NUMBER
            raw_produce.produce(kafka_broker.bootstrap, topic_name, 0, second_view)
        second.rewrite_producer_state(producer_id, 1, 5)
        with pytest.raises(RuntimeError, match="error code 45"):  # a new epoch starts at 0
            raw_produce.produce(kafka_broker.bootstrap, topic_name, 0, second_view)
        second.rewrite_producer_state(producer_id, 1, 0)
        assert raw_produce.produce(kafka_broker.bootstrap, topic_name, 0, second_view) == 10
        with pytest.raises(RuntimeError, match="error code 47"):  # INVALID_PRODUCER_EPOCH
            raw_produce.produce(kafka_broker.bootstrap, topic_name, 0, first_view)
    finally:
        first_view.release()
        second_view.release()
    for builder in (first, second):
        finish(builder)
    got = read_topic(kafka_broker.bootstrap, topic_name, expected_count=20)
    assert [(r.offset, r.value) for r in got] == (
        [(i, b"first %d " % i * 20) for i in range(10)]
        + [(10 + i, b"second %d " % i * 20) for i in range(10)])
    assert pool.in_use_bytes == 0


def test_control_bit(big_pool):
    builder = new_builder(big_pool, control=True)
    builder.append(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", None, 5)
    data = sealed_bytes(builder)
    attributes, = struct.unpack_from(">h", data, 21)
    assert attributes == 0x20
    assert KafkaPythonBatch(data).is_control_batch
    finish(builder)


def test_default_timestamp_is_wall_clock_ms(big_pool):
    builder = new_builder(big_pool)
    before = int(time.time() * 1000)
    builder.append(None, b"a")
    builder.append_many([b"b", b"c"])
    after = int(time.time() * 1000)
    header, decoded = decode_kafka_python(sealed_bytes(builder))
    assert all(before <= ts <= after for _, ts, _, _, _ in decoded)
    assert builder.first_timestamp_ms == decoded[0][1]
    finish(builder)


def test_cached_clock_never_runs_early_or_late(big_pool):
    # "Now" comes from a reading reused while the tick counter says its millisecond
    # is still current: every record's timestamp must lie between wall-clock readings
    # taken just before and just after its append, across many millisecond boundaries.
    bounds = []
    builder = new_builder(big_pool)
    append = builder.append
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        before = time.time_ns() // 1_000_000
        append(None, b"")
        bounds.append((before, time.time_ns() // 1_000_000))
    _, decoded = decode_kafka_python(sealed_bytes(builder))
    stamps = [ts for _, ts, _, _, _ in decoded]
    assert len(stamps) == len(bounds) > 1000
    assert all(lo <= ts <= hi for ts, (lo, hi) in zip(stamps, bounds))
    assert len(set(stamps)) > 10, "the test must cross millisecond boundaries"
    finish(builder)


def test_append_returns_every_offset_delta_past_the_preallocated_ones(big_pool):
    # append() hands out preallocated ints for the first 16384 offsets, new ones after.
    builder = new_builder(big_pool)
    append = builder.append
    deltas = [append(None, b"", None, 3) for _ in range(20_000)]
    assert deltas == list(range(20_000))
    _, decoded = decode_kafka_python(sealed_bytes(builder))
    assert [offset for offset, *_ in decoded] == deltas
    finish(builder)


def test_timestamp_deltas_may_be_negative(big_pool):
    # Records need not come in timestamp order: deltas go below the first timestamp.
    records = [(None, b"a", None, 5_000), (None, b"b", None, 0), (None, b"c", None, MAX_INT64)]
    builder = new_builder(big_pool)
    for key, value, headers, ts in records:
        builder.append(key, value, headers, ts)
    assert (builder.first_timestamp_ms, builder.max_timestamp_ms) == (5_000, MAX_INT64)
    check_batch(sealed_bytes(builder), records)
    finish(builder)


# -- sizes and limits ----------------------------------------------------------------------

def record_bytes(offset_delta, value_len):
    return len(ref.encode_record(offset_delta, 0, None, b"x" * value_len, None))


def test_batch_fills_to_exactly_batch_size_and_refuses_one_byte_more():
    first = record_bytes(0, 100)
    second_value = 80
    batch_size = HEADER_BYTES + first + record_bytes(1, second_value)
    pool = BufferPool(batch_size, 4 * batch_size)
    builder = RecordBatchBuilder(pool.try_acquire(), batch_size, batch_size)
    assert builder.append(None, b"x" * 100, None, 1) == 0
    assert builder.remaining_bytes == record_bytes(1, second_value)
    assert not builder.is_full
    # One byte too many: refused, and nothing of it written.
    assert builder.append(None, b"x" * (second_value + 1), None, 1) == -1
    assert builder.is_full and builder.record_count == 1 and builder.size_bytes == HEADER_BYTES + first
    # Exactly the room left: taken (a refusal does not stop a record that fits).
    assert builder.append(None, b"x" * second_value, None, 1) == 1
    assert builder.size_bytes == batch_size and builder.remaining_bytes == 0
    assert builder.append(None, None, None, 1) == -1
    check_batch(sealed_bytes(builder), [(None, b"x" * 100, None, 1), (None, b"x" * second_value, None, 1)])
    finish(builder)


def test_first_record_larger_than_batch_size_is_taken_alone():
    pool = BufferPool(1024, 1 << 20)
    builder = RecordBatchBuilder(pool.try_acquire(), 1024, 100_000)
    big = bytes(range(256)) * 200  # 51200 bytes: larger than the 1024-byte buffer
    assert RecordBatchBuilder.size_upper_bound_bytes(b"k", big) >= HEADER_BYTES + 1 + len(big)
    assert builder.append(b"k", big, None, 9) == 0
    # The buffer was swapped for a one-off one counted against the pool.
    assert pool.in_use_bytes >= HEADER_BYTES + len(big)
    assert builder.is_full
    assert builder.append(None, b"", None, 9) == -1
    check_batch(sealed_bytes(builder), [(b"k", big, None, 9)])
    finish(builder)
    assert pool.in_use_bytes == 0


def test_record_over_max_request_size_is_refused_naming_sizes():
    pool = BufferPool(1024, 1 << 20)
    builder = RecordBatchBuilder(pool.try_acquire(), 1024, 4096)
    with pytest.raises(ValueError, match=r"the record is 4\d{3} bytes .* larger than "
                                         r"max_request_size=4096"):
        builder.append(None, b"x" * 4050, None, 1)
    assert builder.record_count == 0
    # The largest that fits max_request_size_bytes is taken.
    largest = 4096 - HEADER_BYTES - (record_bytes(0, 4020) - 4020)
    assert builder.append(None, b"x" * largest, None, 1) == 0
    assert builder.size_bytes == 4096
    finish_failed(builder)


def finish_failed(builder):
    builder.mark_failed()
    builder.release()


def test_oversized_first_record_with_no_room_in_the_pool_raises():
    pool = BufferPool(1024, 4096)
    held = [pool.try_acquire() for _ in range(3)]
    builder = RecordBatchBuilder(pool.try_acquire(), 1024, 1 << 20)
    with pytest.raises(BufferPoolExhausted, match="a 30\\d\\d-byte buffer .* 0 of 4096 bytes free"):
        builder.append(None, b"x" * 3000, None, 1)
    held.pop().release()
    with pytest.raises(BufferPoolExhausted):
        builder.append(None, b"x" * 3000, None, 1)  # still short: 1024 free, 3000+ asked
    for buf in held:
        buf.release()
    # Freed buffers are dropped from the cache to make room for the one-off.
    assert builder.append(None, b"x" * 3000, None, 1) == 0
    finish_failed(builder)
    assert pool.in_use_bytes == 0


def test_constructor_checks(big_pool):
    pool = BufferPool(1024, 4096)
    with pytest.raises(ValueError, match="a batch of up to 2048 bytes cannot start in a buffer of 1024"):
        RecordBatchBuilder(pool.try_acquire(), 2048, 4096)
    with pytest.raises(ValueError, match="max_request_size_bytes=512 must be at least"):
        RecordBatchBuilder(pool.try_acquire(), 1024, 512)
    with pytest.raises(ValueError, match="cannot hold the 61-byte batch header"):
        RecordBatchBuilder(pool.try_acquire(), 20, 512)
    with pytest.raises(ValueError, match="unknown compression codec 'brotli'"):
        RecordBatchBuilder(pool.try_acquire(), 1024, 4096, "brotli")
    with pytest.raises(ValueError, match="timestamp_type"):
        RecordBatchBuilder(pool.try_acquire(), 1024, 4096, timestamp_type=2)
    with pytest.raises(TypeError):
        RecordBatchBuilder(None, 1024, 4096)
    buf = pool.try_acquire()
    builder = RecordBatchBuilder(buf, 1024, 4096)
    with pytest.raises(BatchStateError, match="already belongs"):
        RecordBatchBuilder(buf, 1024, 4096)
    with pytest.raises(BatchStateError, match="release the builder"):
        buf.release()
    finish_failed(builder)
    del builder, buf
    gc.collect()
    assert pool.in_use_bytes == 0


@pytest.mark.parametrize("args, kwargs, message", [
    (("key", b"v"), {}, "key must be bytes, bytearray, memoryview or None, not str"),
    ((b"k", 42), {}, "value must be bytes, bytearray, memoryview or None, not int"),
    ((b"k", memoryview(b"abcd")[::2]), {}, "value must be a contiguous bytes-like object"),
    ((b"k", b"v", {"a": b"b"}), {}, "headers must be a list or tuple"),
    ((b"k", b"v", [("a", b"b", b"c")]), {}, r"headers\[0\] must be a \(key, value\) pair"),
    ((b"k", b"v", [(1, b"b")]), {}, r"headers\[0\] key must be str or bytes"),
    ((b"k", b"v", [("a", "b")]), {}, r"headers\[0\] value must be bytes or None"),
    ((b"k", b"v", None, 1.5), {}, "timestamp_ms must be an int"),
    ((b"k", b"v", None, True), {}, "timestamp_ms must be an int"),
    ((b"k", b"v"), {"timestamp_ms": -1}, "timestamp_ms=-1 is negative"),
    ((b"k", b"v"), {"timestamp_ms": 2**64}, "does not fit in 64 bits"),
])
def test_bad_arguments_raise_naming_them(big_pool, args, kwargs, message):
    builder = new_builder(big_pool)
    with pytest.raises((TypeError, ValueError), match=message):
        builder.append(*args, **kwargs)
    assert builder.record_count == 0 and builder.size_bytes == HEADER_BYTES
    finish_failed(builder)


def test_header_keys_must_be_utf8(big_pool):
    builder = new_builder(big_pool)
    with pytest.raises(ValueError, match=r"headers\[1\] key is not UTF-8"):
        builder.append(None, b"v", [("ok", None), (b"\xff\xfe", None)])
    with pytest.raises(ValueError, match=r"headers\[0\] key cannot be UTF-8 encoded"):
        builder.append(None, b"v", [("\ud800", None)])
    assert builder.record_count == 0
    builder.append(None, b"v", [(b"caf\xc3\xa9", None)], 1)
    check_batch(sealed_bytes(builder), [(None, b"v", [("caf\u00e9", None)], 1)])
    finish(builder)


# -- compression ---------------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS[1:])
def test_compressed_batch_gives_back_the_plain_buffer_at_seal(codec):
    pool = BufferPool(_batch.pool_buffer_size_bytes(1 << 16, codec), 1 << 20)
    builder = RecordBatchBuilder(pool.try_acquire(), 1 << 16, 1 << 20, codec)
    records = [(b"k%d" % i, b"the same words again and again " * 4, None, i) for i in range(300)]
    builder.append_many([v for _, v, _, _ in records], [k for k, _, _, _ in records],
                        timestamps_ms=[t for _, _, _, t in records])
    assert pool.in_use_bytes == pool.buffer_size_bytes
    data = sealed_bytes(builder)
    assert builder.sealed_codec == CODEC_IDS[codec] and len(data) < (1 << 16) // 4
    # Only the compressed copy is held now.
    assert pool.in_use_bytes == pool.buffer_size_bytes
    check_batch(data, records, codec)
    finish(builder)
    assert pool.in_use_bytes == 0


@pytest.mark.parametrize("codec", CODECS[1:])
def test_incompressible_records_are_sent_uncompressed(big_pool, codec):
    records = [(None, random.Random(i).randbytes(2000), None, i) for i in range(10)]
    builder = new_builder(big_pool, compression=codec)
    for key, value, headers, ts in records:
        builder.append(key, value, headers, ts)
    data = sealed_bytes(builder)
    assert builder.codec == CODEC_IDS[codec] and builder.sealed_codec == 0
    check_batch(data, records, sealed_codec=0)
    finish(builder)


def test_no_pool_room_for_the_compressed_copy_sends_uncompressed():
    pool = BufferPool(8192, 8192)
    builder = RecordBatchBuilder(pool.try_acquire(), 8192, 8192, "zstd")
    records = [(None, b"aaaa" * 100, None, i) for i in range(10)]
    for key, value, headers, ts in records:
        builder.append(key, value, headers, ts)
    data = sealed_bytes(builder)
    assert builder.sealed_codec == 0
    check_batch(data, records, sealed_codec=0)
    finish(builder)


# -- life cycle: export, acknowledgement, release ------------------------------------------

def test_release_waits_for_acknowledgement_and_for_views():
    pool = BufferPool(4096, 4096)
    builder = RecordBatchBuilder(pool.try_acquire(), 4096, 4096)
    builder.append(b"k", b"v", None, 1)
    with pytest.raises(BufferError, match="seal it first"):
        memoryview(builder)
    with pytest.raises(BatchStateError, match="open batch"):
        builder.release()
    view = builder.seal()
    assert view.readonly and builder.view_count == 1 and builder.state == "sealed"
    with pytest.raises(BatchStateError, match="cannot append to a sealed batch"):
        builder.append(b"k", b"v")
    with pytest.raises(BatchStateError, match="only after mark_acknowledged"):
        builder.release()
    again = builder.seal()  # a retry re-sends the same bytes
    assert again == view and builder.view_count == 2
    part = again[10:]  # slices share their parent's export
    again.release()
    builder.mark_acknowledged()
    with pytest.raises(BufferError, match="2 view"):
        builder.release()
    view.release()
    with pytest.raises(BufferError, match="1 view"):
        builder.release()
    assert pool.try_acquire() is None, "the batch's memory must still be held"
    part.release()
    builder.release()
    assert builder.state == "released"
    with pytest.raises(BatchStateError):
        builder.release()
    with pytest.raises(BatchStateError):
        builder.seal()
    assert pool.in_use_bytes == 0


def test_writable_export_is_refused():
    pool = BufferPool(4096, 4096)
    builder = RecordBatchBuilder(pool.try_acquire(), 4096, 4096)
    builder.append(b"k", b"v", None, 1)
    builder.seal().release()
    with pytest.raises((BufferError, TypeError), match="not writable"):
        ctypes.c_char.from_buffer(builder)
    assert builder.view_count == 0
    finish(builder)


def test_empty_batch_cannot_be_sealed_but_can_be_failed():
    pool = BufferPool(4096, 4096)
    builder = RecordBatchBuilder(pool.try_acquire(), 4096, 4096)
    with pytest.raises(ValueError, match="empty batch"):
        builder.seal()
    with pytest.raises(BatchStateError, match="cannot acknowledge"):
        builder.mark_acknowledged()
    builder.mark_failed()
    builder.release()
    assert pool.in_use_bytes == 0


def test_a_dropped_builder_gives_its_memory_back():
    pool = BufferPool(4096, 4096)
    builder = RecordBatchBuilder(pool.try_acquire(), 4096, 4096)
    builder.append(b"k", b"v", None, 1)
    builder.seal().release()
    assert pool.try_acquire() is None
    del builder
    assert pool.in_use_bytes == 0
    assert pool.try_acquire() is not None


# -- the pool ------------------------------------------------------------------------------

def test_pool_bounds_and_reuse():
    pool = BufferPool(1000, 3500)
    bufs = [pool.try_acquire() for _ in range(3)]
    assert all(b.capacity_bytes == 1000 and b.pooled for b in bufs)
    assert pool.try_acquire() is None
    assert pool.in_use_bytes == 3000 and pool.available_bytes == 500
    with pytest.raises(ValueError, match="bounded to 3500 bytes"):
        pool.try_acquire(4000)
    released = bufs.pop()
    released.release()
    assert released.released
    with pytest.raises(BatchStateError, match="already released"):
        released.release()
    one_off = pool.try_acquire(1500)
    assert one_off.capacity_bytes == 1500 and not one_off.pooled
    assert pool.try_acquire() is None
    one_off.release()
    for buf in bufs:
        buf.release()
    assert pool.in_use_bytes == 0


def test_blocked_acquire_wakes_on_release_and_times_out():
    pool = BufferPool(1000, 1000)
    held = pool.try_acquire()
    started = time.monotonic()
    assert pool.acquire(timeout_ms=50) is None
    assert time.monotonic() - started >= 0.045
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire(timeout_ms=10_000)))
    waiter.start()
    time.sleep(0.05)
    assert not got
    held.release()
    waiter.join(5)
    assert got and got[0] is not None and got[0].capacity_bytes == 1000
    got[0].release()


def test_pool_is_consistent_under_threads():
    pool = BufferPool(512, 512 * 6)
    errors = []

    def work(seed):
        rng = random.Random(seed)
        try:
            for _ in range(2000):
                buf = pool.try_acquire(rng.choice([0, 0, 0, 700]))
                if buf is not None:
                    assert pool.in_use_bytes <= pool.total_bytes
                    buf.release()
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert pool.in_use_bytes == 0


def test_pool_argument_checks():
    with pytest.raises(ValueError, match="buffer_size_bytes must be positive"):
        BufferPool(0, 10)
    with pytest.raises(ValueError, match="total_bytes \\(10\\) must be at least"):
        BufferPool(100, 10)


def test_crc_of_a_large_batch_with_the_gil_released_is_valid(big_pool):
    # Above 64 KiB the CRC is computed with the GIL released: same result.
    records = [(None, bytes([i]) * 4096, None, i) for i in range(256)]
    builder = new_builder(big_pool)
    builder.append_many([v for _, v, _, _ in records], timestamps_ms=[t for *_, t in records])
    data = sealed_bytes(builder)
    assert len(data) > 1 << 20
    check_batch(data, records)
    finish(builder)


# -- end to end: a real broker, read back by librdkafka ------------------------------------

def test_sealed_batches_of_every_codec_are_stored_and_read_back_intact(kafka_broker, topic_name):
    """Each codec's batch goes to the broker in a Produce request framed by hand (the
    protocol layer is not used here) and comes back through confluent-kafka's consumer,
    which checks the CRC32C; the broker also validates every batch before storing it."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    pool = BufferPool(_batch.pool_buffer_size_bytes(1 << 20, "snappy"), 16 << 20)
    base_ts = int(time.time() * 1000)
    rng = random.Random(5)
    written, sealed_codecs = [], []
    cases = [(codec, False) for codec in CODECS] + [("zstd", True), ("none", "large")]
    for codec, kind in cases:
        if kind == "large":
            # ~1 MB: the CRC runs with the GIL released.
            records = [(b"big-%d" % i, rng.randbytes(100_000), None, base_ts) for i in range(9)]
        elif kind:
            # Incompressible: sealed uncompressed although zstd was asked for.
            records = [(None, rng.randbytes(500), [("n", b"%d" % i)], base_ts + i) for i in range(20)]
        else:
            records = [
                (None if i % 5 == 0 else b"key-%d" % i,
                 None if i % 7 == 3 else b"" if i % 7 == 4 else b"%s value %d " % (codec.encode(), i) * 5,
                 [("\u00e9t\u00e9", b"h"), (b"trace", None)] if i % 3 == 0 else None,
                 base_ts - 1000 + (i * 37) % 2000)
                for i in range(200)
            ]
        builder = RecordBatchBuilder(pool.try_acquire(), 1 << 20, 1 << 20, codec)
        for key, value, headers, ts in records:
            assert builder.append(key, value, headers, ts) >= 0
        view = builder.seal()
        try:
            base_offset = raw_produce.produce(kafka_broker.bootstrap, topic_name, 0, view)
        finally:
            view.release()
        finish(builder)
        assert base_offset == len(written)
        written += records
        sealed_codecs.append(builder.sealed_codec)
    assert sealed_codecs == [0, 1, 2, 3, 4, 0, 0]
    got = read_topic(kafka_broker.bootstrap, topic_name, expected_count=len(written))
    assert [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms, r.timestamp_type)
            for r in got] == [
        (0, offset, key, value,
         [(k.decode() if isinstance(k, bytes) else k, v) for k, v in headers or []], ts, "create_time")
        for offset, (key, value, headers, ts) in enumerate(written)
    ]
    assert pool.in_use_bytes == 0


def test_typed_buffers_that_are_views_of_others(big_pool):
    # A cast memoryview exports its format only with its shape: timestamps and
    # offsets given that way are read in place like any other buffer.
    stamps = memoryview(array.array("q", [0, 5, 6, 0])).cast("B")[8:24].cast("q")
    offsets = memoryview(array.array("i", [9, 0, 1, 3])).cast("B")[4:].cast("i")
    builder = new_builder(big_pool)
    assert builder.append_column(BinaryColumn(b"abc", offsets), timestamps_ms=stamps) == 2
    check_batch(sealed_bytes(builder), [(None, b"a", None, 5), (None, b"bc", None, 6)])
    finish(builder)
