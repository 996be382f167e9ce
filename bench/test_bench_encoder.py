"""Record encoding: netkafka's RecordBatchBuilder vs aiokafka's and kafka-python's builders.

Parameters: 1,000,000 records of a 16-byte key and a 100-byte JSON-like value (1,000
distinct pairs, cycled), timestamps taken from the clock (None), no headers, batches of
batch_size 1 MiB, each batch sealed (compressed, CRC) and its memory released or dropped;
uncompressed, snappy and zstd (default levels).  Peers in each group:

    netkafka per-record   builder.append(key, value), one Python call per record
    netkafka bulk list    builder.append_many(values, keys, start=i) per batch
    netkafka bulk column  builder.append_column(BinaryColumn(values), BinaryColumn(keys))
    aiokafka              aiokafka.record._crecords DefaultRecordBatchBuilder (Cython)
    kafka-python          kafka.record.default_records.DefaultRecordBatchBuilder

Same loop for every per-record peer: one call per record until the builder says it is
full, then seal (CRC, compression) and a new batch.  The peers' APIs differ only where
their builders do: aiokafka and kafka-python take the offset and headers as arguments
(the caller counts offsets; headers are one empty list made once, as aiokafka's own
producer passes its default), netkafka counts offsets itself and takes its pool buffer.

extra_info: Mrec/s from the minimum time, and x_aiokafka, the ratio to the aiokafka
builder of the same group (its test runs first in each group).  The machine is shared:
compare minimum times, and run twice.  The uncompressed targets are also measured
interleaved (test_interleaved_with_aiokafka): an aiokafka round before every netkafka
round, so that both minimums come from the same stretch of machine load.

    .venv/bin/python -m pytest bench/test_bench_encoder.py --benchmark-only \\
        --benchmark-columns=min,median,rounds
"""
import array
import importlib.machinery
import random
import time

import pytest
from aiokafka.record._crecords import default_records as aiokafka_crecords
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder

from netkafka.record._batch import RecordBatchBuilder, pool_buffer_size_bytes
from netkafka.record._columns import BinaryColumn
from netkafka.record._pool import BufferPool

RECORD_COUNT = 1_000_000
DISTINCT = 1_000
KEY_BYTES = 16
VALUE_BYTES = 100
BATCH_SIZE_BYTES = 1 << 20
MAX_REQUEST_SIZE_BYTES = 1 << 20
# Minimum of several rounds, the same for netkafka and aiokafka: the machine is shared,
# and a quiet round is what counts.
ROUNDS = 15
SLOW_PEER_ROUNDS = 3  # kafka-python takes seconds per round
CODECS = {"none": 0, "snappy": 2, "zstd": 4}
NO_HEADERS = []  # never mutated by the builders: shared by every append
WORDS = ("click view purchase login logout search add_to_cart checkout signup share "
         "home products cart account settings help about blog news promo").split()


def make_pairs():
    rnd = random.Random(1)
    keys, values = [], []
    for i in range(DISTINCT):
        keys.append(b"user-%011d" % rnd.randrange(10**11))
        values.append((b'{"event":"%s","page":"/%s/%d","amount":%d.%02d,"session":"%08x"}' % (
            rnd.choice(WORDS).encode(), rnd.choice(WORDS).encode(), rnd.randrange(10000),
            rnd.randrange(1000), rnd.randrange(100), rnd.getrandbits(32))).ljust(VALUE_BYTES)[:VALUE_BYTES])
    assert {len(k) for k in keys} == {KEY_BYTES} and {len(v) for v in values} == {VALUE_BYTES}
    return ([keys[i % DISTINCT] for i in range(RECORD_COUNT)],
            [values[i % DISTINCT] for i in range(RECORD_COUNT)])


KEYS, VALUES = make_pairs()


def column(items):
    offsets = array.array("q", [0])
    for item in items:
        offsets.append(offsets[-1] + len(item))
    return BinaryColumn(b"".join(items), offsets)


RESULTS_S = {}  # group -> the aiokafka builder's minimum time


def measure(benchmark, codec, encode, rounds):
    """Run encode() (which returns the record count) rounds times; note Mrec/s and the
    ratio to aiokafka's builder."""
    assert benchmark.pedantic(encode, rounds=rounds, iterations=1) == RECORD_COUNT
    if benchmark.stats is None:
        return
    best_s = benchmark.stats.stats.min
    benchmark.extra_info["Mrec/s"] = round(RECORD_COUNT / best_s / 1e6, 2)
    if codec in RESULTS_S:
        benchmark.extra_info["x_aiokafka"] = round(RESULTS_S[codec] / best_s, 2)


def new_pool(codec):
    buffer_size = pool_buffer_size_bytes(BATCH_SIZE_BYTES, codec)
    return BufferPool(buffer_size, 4 * buffer_size)


def finish(builder):
    view = builder.seal()
    view.release()
    builder.mark_acknowledged()
    builder.release()


def netkafka_per_record(codec):
    pool = new_pool(codec)
    keys, values = KEYS, VALUES

    def encode():
        i = 0
        while i < RECORD_COUNT:
            builder = RecordBatchBuilder(pool.try_acquire(), BATCH_SIZE_BYTES, MAX_REQUEST_SIZE_BYTES,
                                         codec)
            append = builder.append
            while i < RECORD_COUNT and append(keys[i], values[i]) >= 0:
                i += 1
            finish(builder)
        return i
    return encode


def netkafka_bulk(codec, append_rows):
    # append_rows(builder, start) appends from row `start` on and returns how many fit.
    pool = new_pool(codec)

    def encode():
        i = 0
        while i < RECORD_COUNT:
            builder = RecordBatchBuilder(pool.try_acquire(), BATCH_SIZE_BYTES, MAX_REQUEST_SIZE_BYTES,
                                         codec)
            i += append_rows(builder, i)
            finish(builder)
        return i
    return encode


def netkafka_bulk_list(codec):
    return netkafka_bulk(codec, lambda builder, start: builder.append_many(VALUES, KEYS, start=start))


def netkafka_bulk_column(codec):
    keys, values = column(KEYS), column(VALUES)
    return netkafka_bulk(codec, lambda builder, start: builder.append_column(values, keys, start=start))


def aiokafka_builder(codec):
    builder_class = aiokafka_crecords.DefaultRecordBatchBuilder
    # The Cython builder, not aiokafka's pure-Python fallback.
    assert isinstance(aiokafka_crecords.__loader__, importlib.machinery.ExtensionFileLoader)
    codec_id = CODECS[codec]
    keys, values = KEYS, VALUES

    def encode():
        i = 0
        while i < RECORD_COUNT:
            builder = builder_class(2, codec_id, 0, -1, -1, -1, BATCH_SIZE_BYTES)
            append = builder.append
            offset = 0
            while i < RECORD_COUNT and append(offset, None, keys[i], values[i], NO_HEADERS) is not None:
                i += 1
                offset += 1
            builder.build()
        return i
    return encode


def kafka_python_builder(codec):
    codec_id = CODECS[codec]
    keys, values = KEYS, VALUES

    def encode():
        i = 0
        while i < RECORD_COUNT:
            builder = KafkaPythonBuilder(2, codec_id, False, -1, -1, -1, BATCH_SIZE_BYTES)
            append = builder.append
            offset = 0
            while i < RECORD_COUNT and append(offset, None, keys[i], values[i], NO_HEADERS) is not None:
                i += 1
                offset += 1
            builder.build()
        return i
    return encode


# aiokafka first: the others report their ratio to it.
PEERS = [
    ("aiokafka", aiokafka_builder),
    ("netkafka_per_record", netkafka_per_record),
    ("netkafka_bulk_list", netkafka_bulk_list),
    ("netkafka_bulk_column", netkafka_bulk_column),
    ("kafka_python", kafka_python_builder),
]


@pytest.mark.parametrize("peer", [name for name, _ in PEERS])
@pytest.mark.parametrize("codec", list(CODECS))
def test_encode_1m_records(benchmark, codec, peer):
    benchmark.group = f"encode 1M records (16 B key, 100 B value, 1 MiB batches), {codec}"
    encode = dict(PEERS)[peer](codec)
    measure(benchmark, codec, encode, SLOW_PEER_ROUNDS if peer == "kafka_python" else ROUNDS)
    if peer == "aiokafka" and benchmark.stats is not None:
        RESULTS_S[codec] = benchmark.stats.stats.min


@pytest.mark.parametrize("peer", ["netkafka_per_record", "netkafka_bulk_list",
                                  "netkafka_bulk_column"])
def test_interleaved_with_aiokafka(benchmark, peer):
    """Uncompressed, each netkafka round right after an aiokafka round (timed in
    pedantic's setup); x_aiokafka = aiokafka's minimum / netkafka's minimum, over the
    same number of rounds."""
    benchmark.group = "interleaved with aiokafka rounds, none"
    aiokafka_encode, ours = aiokafka_builder("none"), dict(PEERS)[peer]("none")
    aiokafka_s = []

    def run_aiokafka_first():
        start = time.perf_counter()
        assert aiokafka_encode() == RECORD_COUNT
        aiokafka_s.append(time.perf_counter() - start)

    assert benchmark.pedantic(ours, setup=run_aiokafka_first, rounds=ROUNDS,
                              iterations=1) == RECORD_COUNT
    if benchmark.stats is None:
        return
    best_s = benchmark.stats.stats.min
    benchmark.extra_info["Mrec/s"] = round(RECORD_COUNT / best_s / 1e6, 2)
    benchmark.extra_info["aiokafka_min_ms"] = round(min(aiokafka_s) * 1e3, 1)
    benchmark.extra_info["x_aiokafka"] = round(min(aiokafka_s) / best_s, 2)
