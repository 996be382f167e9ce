"""PooledBatch: the one life cycle RecordBatchBuilder (v2) and LegacyMessageSetBuilder
(v0/v1) share, driven through the same calls for every format.

The bytes are read back by kafka-python's MemoryRecords, which takes all three formats
(not netkafka's own decoder).
"""
import os
import sys
import threading

import kafka.record.memory_records as kafka_python_records
import pytest

from netkafka.errors import BatchStateError, BufferPoolExhausted
from netkafka.record._compression import Compressor
from netkafka.record._batch import RecordBatchBuilder
from netkafka.record._legacy import LegacyMessageSetBuilder
from netkafka.record._pool import BufferPool, PooledBatch

BUFFER_BYTES = 1 << 16
FORMATS = ["v2", "v1", "v0"]
GZIP = 1


def new_builder(fmt, pool, codec=GZIP):
    buffer = pool.try_acquire()
    assert buffer is not None
    compressor = Compressor(codec)
    if fmt == "v2":
        return RecordBatchBuilder(buffer, BUFFER_BYTES, 4 * BUFFER_BYTES, compressor)
    return LegacyMessageSetBuilder(int(fmt[1]), buffer, BUFFER_BYTES, 4 * BUFFER_BYTES,
                                   compressor)


def decode(data):
    """(offset, key, value) of every record, by kafka-python."""
    records = kafka_python_records.MemoryRecords(bytes(data))
    out = []
    while records.has_next():
        batch = records.next_batch()
        for record in batch:
            out.append((record.offset, record.key, record.value))
    return out


def fill(builder, count=20):
    """Appends compressible records; returns what a reader must see."""
    expected = []
    for i in range(count):
        key, value = b"key-%d" % i, b"value " * 50
        assert builder.append(key, value) == i
        expected.append((i, key, value))
    return expected


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_goes_through_one_life_cycle(fmt):
    pool = BufferPool(BUFFER_BYTES, 4 * BUFFER_BYTES)
    builder = new_builder(fmt, pool)
    assert isinstance(builder, PooledBatch)
    assert builder.state == "open" and not builder.is_sealed
    expected = fill(builder)
    view = PooledBatch.seal(builder)  # the base's seal(), as the accumulator calls it
    assert builder.state == "sealed" and builder.is_sealed
    assert builder.sealed_codec == GZIP, "compressing paid"
    assert view.readonly
    assert decode(view) == expected
    assert builder.view_count == 1
    with pytest.raises(BatchStateError, match="only after mark_acknowledged"):
        builder.release()
    with pytest.raises(BatchStateError, match="cannot append to a sealed"):
        builder.append(b"k", b"v")
    builder.mark_acknowledged()
    with pytest.raises(BatchStateError, match="cannot acknowledge a done"):
        builder.mark_acknowledged()
    with pytest.raises(BufferError, match="1 view"):
        builder.release()
    view.release()
    builder.release()
    assert builder.state == "released"
    assert pool.in_use_bytes == 0
    with pytest.raises(BatchStateError, match="cannot seal a released"):
        builder.seal()


@pytest.mark.parametrize("fmt", FORMATS)
def test_full_pool_at_seal_sends_uncompressed_and_never_waits(fmt):
    # Every buffer of the pool is held by an open batch: none could get memory for
    # its compressed copy by waiting.  Each seals at once, uncompressed, intact.
    pool = BufferPool(BUFFER_BYTES, 2 * BUFFER_BYTES)
    builders = [new_builder(fmt, pool), new_builder(fmt, pool)]
    assert pool.available_bytes == 0
    for builder in builders:
        expected = fill(builder)
        view = builder.seal()
        assert builder.codec == GZIP and builder.sealed_codec == 0
        assert decode(view) == expected
        assert pool.in_use_bytes == 2 * BUFFER_BYTES, "no copy was taken"
        view.release()
    for builder in builders:
        builder.mark_failed()
        builder.release()
    assert pool.in_use_bytes == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_full_pool_at_seal_compresses_into_the_reserve(fmt):
    # Every buffer but the reserve is held by an open batch: each seal borrows the
    # reserve for its copy, and its plain buffer becomes the reserve in turn.
    pool = BufferPool(BUFFER_BYTES, 3 * BUFFER_BYTES, compression_reserve=True)
    assert pool.has_compression_reserve and pool.in_use_bytes == BUFFER_BYTES
    builders = [new_builder(fmt, pool), new_builder(fmt, pool)]
    assert pool.available_bytes == 0
    views = []
    for lends, builder in enumerate(builders, 1):
        expected = fill(builder)
        views.append(builder.seal())
        assert builder.sealed_codec == GZIP, "compressed although the pool was full"
        assert decode(views[-1]) == expected
        assert pool.reserve_lends == lends
        assert pool.in_use_bytes == 3 * BUFFER_BYTES, "the plain buffer is the reserve now"
    for builder, view in zip(builders, views):
        view.release()
        builder.mark_acknowledged()
        builder.release()
    assert pool.in_use_bytes == BUFFER_BYTES, "only the reserve stays set aside"


def test_the_reserve_comes_back_when_compressing_does_not_pay():
    pool = BufferPool(BUFFER_BYTES, 3 * BUFFER_BYTES, compression_reserve=True)
    tiny, compressible = new_builder("v2", pool), new_builder("v2", pool)
    tiny.append(None, os.urandom(16))  # gzip's own header and trailer alone are longer
    tiny.seal()
    assert tiny.sealed_codec == 0 and pool.reserve_lends == 1
    expected = fill(compressible)
    # Sealed on another thread: were the reserve not back, this seal would wait for it.
    sealed = []
    sealer = threading.Thread(target=lambda: sealed.append(compressible.seal()), daemon=True)
    sealer.start()
    sealer.join(10)
    assert not sealer.is_alive(), "the reserve was not given back"
    assert compressible.sealed_codec == GZIP and decode(sealed[0]) == expected
    assert pool.reserve_lends == 2


def test_threads_sealing_at_once_take_turns_with_the_reserve():
    threads_count = 4
    pool = BufferPool(BUFFER_BYTES, (threads_count + 1) * BUFFER_BYTES,
                      compression_reserve=True)
    builders = [new_builder("v2", pool) for _ in range(threads_count)]
    assert pool.available_bytes == 0
    expected = [fill(builder, 100) for builder in builders]
    start = threading.Barrier(threads_count)
    views = [None] * threads_count

    def seal(i):
        start.wait()
        views[i] = builders[i].seal()

    threads = [threading.Thread(target=seal, args=(i,), daemon=True)
               for i in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a seal never got the reserve"
    for builder, view, records in zip(builders, views, expected):
        assert builder.sealed_codec == GZIP and decode(view) == records
        view.release()
        builder.mark_acknowledged()
        builder.release()
    assert pool.reserve_lends == threads_count
    assert pool.in_use_bytes == BUFFER_BYTES


def test_a_pool_of_one_buffer_has_no_reserve():
    # The reserve would leave no buffer for any batch: such a pool seals uncompressed
    # when full, as a pool without a reserve does.
    pool = BufferPool(BUFFER_BYTES, 2 * BUFFER_BYTES - 1, compression_reserve=True)
    assert not pool.has_compression_reserve and pool.in_use_bytes == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_compressed_copy_gives_the_plain_buffer_back_at_seal(fmt):
    pool = BufferPool(BUFFER_BYTES, 4 * BUFFER_BYTES)
    builder = new_builder(fmt, pool)
    expected = fill(builder)
    view = builder.seal()
    assert builder.sealed_codec == GZIP
    assert pool.in_use_bytes == BUFFER_BYTES, "only the compressed copy is held"
    assert decode(view) == expected
    view.release()
    builder.mark_acknowledged()
    builder.release()
    assert pool.in_use_bytes == 0


@pytest.mark.parametrize("fmt", FORMATS)
def test_oversized_first_record_without_pool_room_leaves_the_batch_usable(fmt):
    pool = BufferPool(BUFFER_BYTES, 3 * BUFFER_BYTES)
    builder = new_builder(fmt, pool)
    other = pool.try_acquire()  # BUFFER_BYTES left: less than the record needs
    with pytest.raises(BufferPoolExhausted, match="not available"):
        builder.append(None, b"x" * (3 * BUFFER_BYTES // 2))
    assert builder.record_count == 0 and builder.state == "open"
    assert pool.in_use_bytes == 2 * BUFFER_BYTES
    assert builder.append(b"k", b"v") == 0
    other.release()
    builder.mark_failed()
    builder.release()
    assert pool.in_use_bytes == 0


def test_a_claimed_buffer_cannot_be_released_or_reused_by_another_format():
    pool = BufferPool(BUFFER_BYTES, 4 * BUFFER_BYTES)
    buffer = pool.try_acquire()
    builder = RecordBatchBuilder(buffer, BUFFER_BYTES, BUFFER_BYTES)
    with pytest.raises(BatchStateError, match="release the builder"):
        buffer.release()
    with pytest.raises(BatchStateError, match="already belongs"):
        LegacyMessageSetBuilder(1, buffer, BUFFER_BYTES, BUFFER_BYTES)
    builder.mark_failed()
    builder.release()
    assert pool.in_use_bytes == 0


def test_the_base_alone_cannot_be_made():
    with pytest.raises(TypeError, match="construct one of those"):
        PooledBatch()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_batch_failed_before_sealing_exports_nothing(fmt):
    pool = BufferPool(BUFFER_BYTES, 4 * BUFFER_BYTES)
    builder = new_builder(fmt, pool)
    fill(builder, 3)
    builder.mark_failed()
    assert builder.state == "done"
    with pytest.raises(BufferError, match="seal it first"):
        memoryview(builder)
    builder.release()
    assert pool.in_use_bytes == 0


def test_a_python_subclass_of_the_base_fails_cleanly():
    class Bare(PooledBatch):
        pass

    bare = Bare()
    with pytest.raises(NotImplementedError):
        bare.seal()
    bare.mark_failed()
    with pytest.raises(BufferError, match="seal it first"):
        memoryview(bare)
    bare.release()
    assert bare.state == "released"


# -- values held, not copied (RecordBatchBuilder's hold_values_from_bytes) --------------

HOLD_FROM = 1024


def held_builder(pool, hold=HOLD_FROM, compression=None):
    return RecordBatchBuilder(pool.try_acquire(), BUFFER_BYTES, 4 * BUFFER_BYTES, compression,
                              hold_values_from_bytes=hold)


def append_mixed(builder, values):
    """A small first record (the batch starts in a small buffer and grows around the held
    places), then values with keys and headers."""
    builder.append(b"first", b"x", timestamp_ms=1000)
    for i, value in enumerate(values):
        builder.append(b"key-%d" % i, value, headers=[("n", b"%d" % i)], timestamp_ms=1001 + i)


def decoded_and_checked(data):
    records = kafka_python_records.MemoryRecords(bytes(data))
    batch = records.next_batch()
    assert batch.validate_crc()
    return [(r.key, r.value, r.headers) for r in batch]


def mixed_values():
    return [os.urandom(5000), bytearray(os.urandom(5000)), b"small",
            memoryview(os.urandom(3000)), os.urandom(HOLD_FROM), os.urandom(HOLD_FROM - 1)]


def test_held_values_go_out_as_themselves_with_the_bytes_a_copy_would_have():
    pool = BufferPool(BUFFER_BYTES, 16 * BUFFER_BYTES)
    values = mixed_values()
    copying, holding = held_builder(pool, hold=0), held_builder(pool)
    append_mixed(copying, values)
    append_mixed(holding, values)
    expected = bytes(copying.seal())
    raw = holding.seal(contiguous=False)
    assert raw.nbytes == len(expected) == holding.size_bytes
    segments = holding.segments()
    # Only bytes of at least HOLD_FROM are held: mutable and smaller values are copied.
    held = [part.obj for part in segments if part.obj is not holding]
    assert len(held) == 2 and held[0] is values[0] and held[1] is values[4]
    assert b"".join(segments) == expected
    assert decoded_and_checked(b"".join(segments))[1:] == [
        (b"key-%d" % i, bytes(v), [("n", b"%d" % i)]) for i, v in enumerate(values)]
    # A contiguous export writes the held values into their places first.
    assert bytes(holding) == expected
    assert isinstance(holding.segments(), memoryview)


def test_a_restamped_batch_checksums_its_held_values():
    pool = BufferPool(BUFFER_BYTES, 16 * BUFFER_BYTES)
    values = mixed_values()
    copying, holding = held_builder(pool, hold=0), held_builder(pool)
    for builder in (copying, holding):
        append_mixed(builder, values)
        builder.seal(contiguous=False)
        builder.rewrite_producer_state(7, 2, 40)
    assert b"".join(holding.segments()) == bytes(copying)
    decoded_and_checked(b"".join(holding.segments()))


def test_segments_keep_the_batch_and_release_lets_the_held_values_go():
    pool = BufferPool(BUFFER_BYTES, 16 * BUFFER_BYTES)
    value = os.urandom(4 * HOLD_FROM)
    references = sys.getrefcount(value)
    builder = held_builder(pool)
    builder.append(b"k", value)
    builder.seal(contiguous=False).release()
    segments = builder.segments()
    builder.mark_acknowledged()
    with pytest.raises(BufferError, match="view"):
        builder.release()
    del segments
    builder.release()
    assert sys.getrefcount(value) == references


def test_a_compressed_batch_holds_no_value():
    pool = BufferPool(BUFFER_BYTES, 16 * BUFFER_BYTES)
    builder = held_builder(pool, compression=Compressor(GZIP))
    value = b"compressible " * 1000
    builder.append(b"k", value)
    builder.seal(contiguous=False)
    segments = builder.segments()
    assert isinstance(segments, memoryview) and segments.obj is builder
    assert decoded_and_checked(segments) == [(b"k", value, [])]


def test_a_negative_hold_size_is_refused():
    pool = BufferPool(BUFFER_BYTES, 16 * BUFFER_BYTES)
    with pytest.raises(ValueError, match="hold_values_from_bytes must be >= 0"):
        held_builder(pool, hold=-1)


def test_a_bulk_append_holds_the_large_bytes_of_a_list():
    pool = BufferPool(BUFFER_BYTES, 16 * BUFFER_BYTES)
    values = mixed_values()
    copying, holding = held_builder(pool, hold=0), held_builder(pool)
    for builder in (copying, holding):
        assert builder.append_many(values, keys=[b"k"] * len(values),
                                   timestamps_ms=[1000] * len(values)) == len(values)
    expected = bytes(copying.seal())
    holding.seal(contiguous=False)
    segments = holding.segments()
    assert [part.obj for part in segments if part.obj is not holding] == [values[0], values[4]]
    assert b"".join(segments) == expected
    decoded_and_checked(expected)
