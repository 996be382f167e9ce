"""Batches that start small and grow (issue 18, item 3): the pool's size classes, a batch
moving up a class while open, and what happens when the pool has no room to grow into.

Memory is charged for what batches hold: with 1 MiB batches and 32 MiB of buffer_memory,
200 partitions each with an open batch fit, where a whole batch_size per open batch
allowed 32.  The real-broker test sends keyed records over 200 partitions that way and
reads them back with confluent-kafka; the exhaustion test freezes the broker so that
growth and new batches meet a full pool under block, park and drop.
"""
import array
import gc
import sys
import threading
import time

import pytest

from netkafka import Producer
from netkafka.config import ProducerConfig
from netkafka.errors import (BackpressureTimeoutError, BatchStateError, KafkaTimeoutError,
                             RecordDroppedError)
from netkafka.producer import accumulator
from netkafka.producer.backoff import Block, Park
from netkafka.record._batch import BATCH_HEADER_BYTES, RecordBatchBuilder, pool_buffer_size_bytes
from netkafka.record._compression import Compressor
from netkafka.record._legacy import LegacyMessageSetBuilder
from netkafka.record._pool import BufferPool
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

from test_pooled_batch import decode
from test_records import check_batch, sealed_bytes

KiB = 1024
MiB = 1024 * KiB


def test_size_classes_double_from_the_smallest_to_the_buffer_size():
    pool = BufferPool(MiB, 32 * MiB, 16 * KiB)
    assert pool.size_classes == tuple(16 * KiB << i for i in range(7))
    odd = BufferPool(100_000, MiB, 16 * KiB)  # the largest class is the buffer size itself
    assert odd.size_classes == (16 * KiB, 32 * KiB, 64 * KiB, 100_000)
    assert BufferPool(4096, 8192).size_classes == (4096,)  # default: one class, as before
    assert [pool.capacity_for(n) for n in (0, 1, 16 * KiB, 16 * KiB + 1, MiB, MiB + 1)] == [
        16 * KiB, 16 * KiB, 16 * KiB, 32 * KiB, MiB, MiB + 1]
    with pytest.raises(ValueError, match="min_buffer_bytes=2000 must be positive and at most"):
        BufferPool(1000, 4000, 2000)
    with pytest.raises(ValueError, match="min_buffer_bytes=0 must be positive"):
        BufferPool(1000, 4000, 0)


def test_each_class_reuses_its_own_buffers_and_the_bound_counts_cached_ones():
    pool = BufferPool(64 * KiB, 128 * KiB, 16 * KiB)
    small = [pool.try_acquire() for _ in range(8)]  # 8 x 16 KiB: the whole bound
    assert all(b.capacity_bytes == 16 * KiB and b.pooled for b in small)
    assert pool.try_acquire() is None and pool.available_bytes == 0
    for buf in small:
        buf.release()
    assert pool.in_use_bytes == 0
    # The 16 KiB buffers are cached (128 KiB of them): a 64 KiB one needs some freed.
    large = [pool.try_acquire(40 * KiB), pool.try_acquire(64 * KiB)]
    assert [b.capacity_bytes for b in large] == [64 * KiB, 64 * KiB]
    assert pool.try_acquire() is None, "cached buffers must have been freed, not kept"
    large[0].release()
    again = pool.try_acquire(33 * KiB)
    assert again.capacity_bytes == 64 * KiB and pool.in_use_bytes == 128 * KiB
    for buf in (again, large[1]):
        buf.release()
    one_off = pool.try_acquire(100 * KiB)  # above the largest class: exact, not pooled
    assert one_off.capacity_bytes == 100 * KiB and not one_off.pooled
    one_off.release()
    assert pool.in_use_bytes == 0


def grown_builder(pool, batch_size_bytes, records):
    builder = RecordBatchBuilder(pool.try_acquire(), batch_size_bytes, 4 * batch_size_bytes)
    for key, value, headers, ts in records:
        if builder.append(key, value, headers, ts) < 0:
            break
    return builder


def test_a_batch_grows_a_class_at_a_time_and_keeps_its_records():
    pool = BufferPool(64 * KiB, MiB, 4 * KiB)
    records = [(b"k%d" % i, bytes([i % 251]) * 300, [("h", b"%d" % i)], 1_700_000_000_000 + i)
               for i in range(400)]
    builder = RecordBatchBuilder(pool.try_acquire(), 64 * KiB, MiB)
    held = []
    for i, (key, value, headers, ts) in enumerate(records):
        if builder.append(key, value, headers, ts) < 0:
            break
        # Only the buffer it is in now is charged: the smaller ones went back.
        held.append(pool.in_use_bytes)
    count = builder.record_count
    assert 150 < count < 400 and builder.is_full and builder.size_bytes <= 64 * KiB
    assert sorted(set(held)) == [4 * KiB, 8 * KiB, 16 * KiB, 32 * KiB, 64 * KiB]
    check_batch(sealed_bytes(builder), records[:count])
    builder.mark_acknowledged()
    builder.release()
    assert pool.in_use_bytes == 0


def test_a_batch_of_large_records_grows_once_not_a_class_at_a_time():
    # 128 KiB records in 1 MiB batches: each move copies the records so far, and a class
    # at a time (256 KiB -> 512 KiB -> 1 MiB) copied four of a batch's seven records.
    pool = BufferPool(MiB, 8 * MiB, 16 * KiB)
    records = [(None, bytes([i]) * (128 * KiB), [], 1_700_000_000_000 + i) for i in range(8)]
    builder = RecordBatchBuilder(pool.try_acquire(), MiB, 4 * MiB)
    held = []
    for key, value, headers, ts in records:
        if builder.append(key, value, headers, ts) < 0:
            break
        held.append(pool.in_use_bytes)
    assert held == [256 * KiB] + [MiB] * 6 and builder.is_full
    check_batch(sealed_bytes(builder), records[:7])
    builder.mark_acknowledged()
    builder.release()
    assert pool.in_use_bytes == 0


def test_bulk_columns_and_encoded_records_grow_too():
    pa = pytest.importorskip("pyarrow")
    pool = BufferPool(256 * KiB, MiB, 1 * KiB)
    values = [b"v%05d" % i * 20 for i in range(1500)]
    keys = [b"key-%d" % i for i in range(1500)]
    builder = RecordBatchBuilder(pool.try_acquire(), 256 * KiB, MiB)
    assert builder.append_many(values, keys, timestamps_ms=[5] * 1500) == 1500
    assert pool.in_use_bytes == 256 * KiB
    check_batch(sealed_bytes(builder), [(k, v, None, 5) for k, v in zip(keys, values)])
    builder.mark_acknowledged()
    builder.release()
    # An Arrow column, read in place: the same records through the same growth.
    builder = RecordBatchBuilder(pool.try_acquire(), 256 * KiB, MiB)
    assert builder.append_column(pa.array(values, pa.binary()), pa.array(keys, pa.binary()),
                                 array.array("q", [5] * 1500)) == 1500
    assert pool.in_use_bytes == 256 * KiB
    check_batch(sealed_bytes(builder), [(k, v, None, 5) for k, v in zip(keys, values)])
    builder.mark_acknowledged()
    builder.release()
    # append_encoded (the WAL's replay) copies records as they are, through growth.
    source = RecordBatchBuilder(pool.try_acquire(), 256 * KiB, MiB)
    assert source.append_many(values[:500], keys[:500], timestamps_ms=[7] * 500) == 500
    whole = bytes(source.seal())
    copy = RecordBatchBuilder(pool.try_acquire(), 256 * KiB, MiB)
    pos = BATCH_HEADER_BYTES
    while pos < len(whole):
        length, size = _varint(whole, pos)
        assert copy.append_encoded(whole[pos:pos + size + length], 7) >= 0
        pos += size + length
    assert copy.record_count == 500 and bytes(copy.seal()) == whole
    for batch in (source, copy):
        batch.mark_acknowledged()
        batch.release()
    assert pool.in_use_bytes == 0


def _varint(data, pos):
    # A record's zigzag varint length: (length, bytes of the varint).
    shift = value = 0
    start = pos
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value >> 1, pos - start
        shift += 7


def test_no_view_exists_while_a_batch_can_grow_and_a_sealed_one_never_moves():
    pool = BufferPool(64 * KiB, MiB, 1 * KiB)
    builder = RecordBatchBuilder(pool.try_acquire(), 64 * KiB, MiB)
    builder.append(None, b"x" * 500)
    with pytest.raises(BufferError, match="open batch exports no bytes"):
        memoryview(builder)  # what could be on its way to a socket does not exist yet
    view = builder.seal()
    before = bytes(view)
    with pytest.raises(BatchStateError, match="cannot append to a sealed batch"):
        builder.append(None, b"y" * 5000)  # would have needed a larger buffer
    assert bytes(view) == before and pool.in_use_bytes == 1 * KiB
    view.release()
    builder.mark_acknowledged()
    builder.release()


def test_a_batch_that_cannot_grow_is_full_and_goes_as_it_is():
    pool = BufferPool(64 * KiB, 64 * KiB, 16 * KiB)
    others = [pool.try_acquire() for _ in range(2)]  # 32 KiB taken: room for 32 KiB more
    builder = RecordBatchBuilder(pool.try_acquire(), 64 * KiB, MiB)  # 16 KiB of it
    records = [(None, b"r%04d" % i * 100, None, 9) for i in range(200)]
    taken = 0
    for _, value, _, ts in records:
        if builder.append(None, value, None, ts) < 0:
            break
        taken += 1
    # 16 KiB then 32 KiB is not possible (16 + 32 + 32 > 64): full at about 16 KiB.
    assert 0 < taken < 40 and builder.is_full and pool.in_use_bytes == 48 * KiB
    check_batch(sealed_bytes(builder), records[:taken])
    builder.mark_acknowledged()
    builder.release()
    for buf in others:
        buf.release()


def test_a_blocked_large_request_is_served_before_later_small_ones():
    # Each buffer given back went to whoever asked first after it, so a request for a
    # large buffer (a busy partition's batch, a record larger than a batch) waiting in
    # a full pool never saw room while small requests kept taking the freed buffers;
    # it timed out after max_block_ms.  The oldest blocked acquire is now served first.
    pool = BufferPool(KiB, 4 * KiB, 256)
    held = [pool.try_acquire() for _ in range(16)]
    assert pool.available_bytes == 0
    large = []
    waiter = threading.Thread(target=lambda: large.append(pool.acquire(2 * KiB)))
    waiter.start()
    refused = rounds = 0
    while not large and rounds < 1000:
        rounds += 1
        held.pop(0).release()
        small = pool.try_acquire()  # a later, smaller request
        if small is None:
            refused += 1
        else:
            held.append(small)
        time.sleep(0.001)  # lets the waiter run; nothing is timed
    if not large:
        for buf in held:  # unblocks the waiter, then fails
            buf.release()
        held = []
    waiter.join()
    assert large[0].capacity_bytes == 2 * KiB and rounds < 1000
    assert refused >= 8  # what the waiter needed was kept for it
    for buf in held + large:
        buf.release()
    assert pool.in_use_bytes == 0


def test_waiters_for_memory_are_served_in_arrival_order_whatever_their_strategy():
    # A park-mode send() polled the pool without joining its line of waiters: it took
    # memory whenever the oldest blocked waiter's buffer was left over, ahead of
    # block-mode sends waiting longer, and block-mode ones overtook it likewise.
    pool = BufferPool(KiB, 4 * KiB)
    held = [pool.try_acquire() for _ in range(4)]
    served = []

    def wait(name, strategy):
        room = accumulator._PoolRoom(pool, 0)
        strategy.wait_for_room(room, max_block_ms=30_000)
        served.append((name, room.buffer or pool.try_acquire()))

    strategies = [Block(), Park(park_us=100), Block(), Park(park_us=100)]
    waiters = [threading.Thread(target=wait, args=(f"{type(s).__name__}-{i}", s))
               for i, s in enumerate(strategies)]
    for waiter in waiters:
        waiter.start()
        time.sleep(0.2)  # in line before the next one comes
    for count in range(1, len(waiters) + 1):
        held.pop().release()
        deadline = time.monotonic() + 30
        while len(served) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # no second waiter may be served by one buffer
        assert len(served) == count
    for waiter in waiters:
        waiter.join()
    assert [name for name, _ in served] == ["Block-0", "Park-1", "Block-2", "Park-3"]
    for _, buf in served:
        buf.release()
    assert pool.in_use_bytes == 0


def test_a_waiter_giving_up_leaves_the_place_of_an_older_one_of_the_same_size():
    # Places were lists of their size, and deque.remove() compares by value: the
    # younger waiter timing out took the older one's place out of the line, and the
    # older one, no longer first, waited out its timeout beside a free buffer.
    pool = BufferPool(KiB, 4 * KiB)
    held = [pool.try_acquire() for _ in range(4)]
    older = []
    waiter = threading.Thread(target=lambda: older.append(pool.acquire(timeout_ms=10_000)))
    waiter.start()
    time.sleep(0.2)  # in line first
    assert pool.acquire(timeout_ms=100) is None
    held.pop().release()
    started = time.monotonic()
    waiter.join()
    assert older[0] is not None and time.monotonic() - started < 5
    for buf in held + older:
        buf.release()


def test_a_buffer_the_collector_frees_inside_the_pools_lock_does_not_deadlock_it():
    # A buffer forgotten in a reference cycle goes back when the cyclic collector runs,
    # on whatever thread allocates then -- a park-mode send() polling its place in line,
    # holding the pool's lock, say: the release, seeing a waiter asleep, took that lock
    # again and hung the thread, and every waiter behind it, for good.  Each trial moves
    # the collection one allocation on, through every allocation of the poll (which of
    # them falls inside the lock is the interpreter's business).
    threshold = 20
    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    try:
        for allocations in range(threshold + 5):
            pool = BufferPool(KiB, 3 * KiB)
            held = [pool.try_acquire(), pool.try_acquire()]
            holder = [pool.try_acquire()]
            sleeper = threading.Thread(target=pool.acquire, kwargs={"timeout_ms": 10_000},
                                       daemon=True)
            sleeper.start()  # asleep in line: a release notifies it
            time.sleep(0.05)
            place = pool.join_line(0)
            polled, counts = [], []  # counts: the collector's, for the message

            def poll():
                gc.disable()
                gc.set_threshold(threshold)
                gc.collect()
                cycle = [holder.pop()]  # the buffer's only holder from here on
                cycle.append(cycle)
                del cycle
                garbage = [[] for _ in range(allocations)]
                counts.append(gc.get_count())
                gc.enable()
                polled.append(pool.try_acquire(place=place))
                gc.disable()
                del garbage

            poller = threading.Thread(target=poll, daemon=True)
            poller.start()
            poller.join(10)
            assert not poller.is_alive(), f"deadlocked, the collector's counts at {counts}"
            assert polled == [None]  # the sleeper is ahead in line
            gc.collect()  # the cycle, if the poll did not: the sleeper's buffer
            sleeper.join(10)
            assert not sleeper.is_alive()
            pool.leave_line(place)
            for buf in held:
                buf.release()
            assert pool.in_use_bytes == 0
    finally:
        gc.set_threshold(*thresholds)
        if enabled:
            gc.enable()


def test_a_release_run_on_the_waiting_thread_before_it_sleeps_wakes_it():
    # The collector freeing a forgotten buffer on the waiting thread, between its failed
    # try and its sleep, notified a Condition nobody waited on yet: the waiter slept its
    # whole timeout beside a free buffer, and those behind it in line with it.  Where a
    # collection falls is the interpreter's business; a profile hook runs code on that
    # thread at every point it can be seen, and each trial releases one point later,
    # until the release comes only once acquire() timed out: every point was tried.
    # (Condition.wait() was such a point; the compiled wait shows none, and registers
    # its sleeper before it tries.)
    timeout_s = 2.0
    point = 0
    while True:
        pool = BufferPool(KiB, KiB)
        held = [pool.try_acquire()]
        events, started, released_after_s, got = [0], [time.monotonic()], [], []

        def run_on_the_waiter(frame, event, arg):
            events[0] += 1
            if events[0] > point and held:
                held.pop().release()
                released_after_s.append(time.monotonic() - started[0])

        def wait():
            sys.setprofile(run_on_the_waiter)
            try:
                buf = pool.acquire(timeout_ms=int(timeout_s * 1000))
            finally:
                sys.setprofile(None)
            got.append((buf, time.monotonic() - started[0]))

        waiter = threading.Thread(target=wait)
        waiter.start()
        waiter.join(30)
        [(buf, waited_s)] = got
        if not released_after_s or released_after_s[0] >= timeout_s / 2:
            for leftover in held + ([buf] if buf is not None else []):
                leftover.release()
            break
        assert buf is not None and waited_s < timeout_s / 2, (point, waited_s)
        buf.release()
        assert pool.in_use_bytes == 0
        point += 1


def test_a_first_record_larger_than_batch_size_gets_an_exact_buffer_and_the_batch_to_itself():
    pool = BufferPool(64 * KiB, MiB, 4 * KiB)
    builder = RecordBatchBuilder(pool.try_acquire(), 64 * KiB, 512 * KiB)
    assert builder.append(b"big", b"B" * (200 * KiB), None, 3) == 0
    assert pool.in_use_bytes > 200 * KiB and pool.in_use_bytes < 201 * KiB  # one-off
    assert builder.append(None, b"small", None, 3) == -1 and builder.is_full
    check_batch(sealed_bytes(builder), [(b"big", b"B" * (200 * KiB), None, 3)])
    builder.mark_acknowledged()
    builder.release()
    assert pool.in_use_bytes == 0


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_sets_grow_too(magic):
    pool = BufferPool(32 * KiB, MiB, 1 * KiB)
    builder = LegacyMessageSetBuilder(magic, pool.try_acquire(), 32 * KiB, MiB)
    records = [(b"k%d" % i, b"value-%d" % i * 30, None) for i in range(500)]
    count = 0
    for key, value, _ in records:
        if builder.append(key, value, None, None if magic == 0 else 1_600_000_000_000) < 0:
            break
        count += 1
    assert 50 < count < 500 and pool.in_use_bytes == 32 * KiB
    sealed = bytes(builder.seal())
    assert len(sealed) <= 32 * KiB
    assert all(value in sealed for _, value, _ in records[:count])
    builder.mark_acknowledged()
    builder.release()
    assert pool.in_use_bytes == 0


@pytest.mark.parametrize("fmt", ["v2", "v1", "v0"])
def test_batches_of_any_class_sealed_while_the_pool_is_full_compress_into_the_reserve(fmt):
    # The reserve is of the largest class (a full batch's copy may need all of it); a
    # batch of any class takes its copy back into its own buffer, so the reserve is
    # whole again for the next seal: a small batch sealed first, then a full one.
    gzip = 1
    compressor = Compressor(gzip)
    buffer_bytes = pool_buffer_size_bytes(64 * KiB, compressor)
    total_bytes = buffer_bytes + 64 * KiB + 8 * 16 * KiB  # the reserve, one full, 8 small
    pool = BufferPool(buffer_bytes, total_bytes, 16 * KiB, compression_reserve=True)
    assert pool.has_compression_reserve and pool.in_use_bytes == buffer_bytes

    def new_builder():
        if fmt == "v2":
            return RecordBatchBuilder(pool.try_acquire(), 64 * KiB, MiB, compressor)
        return LegacyMessageSetBuilder(int(fmt[1]), pool.try_acquire(), 64 * KiB, MiB,
                                       compressor)

    def fill(builder, limit):
        expected = []
        for i in range(limit):
            key, value = b"key-%d" % i, b"value %06d " % i * 20
            if builder.append(key, value) < 0:
                break
            expected.append((i, key, value))
        return expected

    large = new_builder()
    expected = {large: fill(large, 10_000)}
    assert large.is_full and pool.in_use_bytes == buffer_bytes + 64 * KiB
    small = [new_builder() for _ in range(8)]
    expected.update((builder, fill(builder, 20)) for builder in small)
    assert pool.available_bytes == 0 and pool.in_use_bytes == total_bytes
    order = [small[0], large] + small[1:]
    views = []
    # On another thread: a reserve not given back would make a later seal wait forever.
    sealer = threading.Thread(target=lambda: views.extend(b.seal() for b in order),
                              daemon=True)
    sealer.start()
    sealer.join(30)
    assert not sealer.is_alive() and len(views) == len(order), "a seal waited for the reserve"
    assert pool.reserve_lends == len(order)
    assert pool.in_use_bytes == total_bytes, "a copy took memory beyond the reserve"
    for builder, view in zip(order, views):
        assert builder.sealed_codec == gzip, "compressed although the pool was full"
        assert decode(view) == expected[builder]
        view.release()
        builder.mark_acknowledged()
        builder.release()
    assert pool.in_use_bytes == buffer_bytes, "only the reserve stays set aside"
    # Every class is whole: the largest and the smallest are handed out again.
    again = [pool.try_acquire(buffer_bytes), pool.try_acquire()]
    assert [buf.capacity_bytes for buf in again] == [buffer_bytes, 16 * KiB]
    for buf in again:
        buf.release()


def test_the_default_buffer_memory_holds_a_first_buffer_for_10_000_partitions():
    # Fewer, and keyed records over 10,000 partitions wait for memory at nearly every
    # record (bench/test_bench_scale.py: 1.03 records per batch with 16 KiB).
    assert ProducerConfig().buffer_memory // accumulator.FIRST_BUFFER_BYTES >= 10_000


# -- against a real broker ------------------------------------------------------------------

def test_keyed_records_over_200_partitions_with_1_mib_batches_and_32_mib(kafka_broker,
                                                                         topic_name):
    partitions, count = 200, 20_000
    create_topic(kafka_broker.bootstrap, topic_name, partitions=partitions)
    sent = [(b"key-%d" % (i % 4000), b"value-%d" % i + bytes(80)) for i in range(count)]
    with Producer(bootstrap_servers=kafka_broker.bootstrap, acks=1, batch_size=MiB,
                  buffer_memory=32 * MiB, linger_ms=5, max_block_ms=60_000) as producer:
        futures = [producer.send(topic_name, value, key=key) for key, value in sent]
        producer.flush(60)
        assert all(f.succeeded() for f in futures)
        used = {f.get(0).partition for f in futures}
        metrics = producer.metrics()["netkafka"]
    assert len(used) == partitions
    # At most one batch per partition in this run of 100 records each, give or take a
    # linger: not one batch per record as when every open batch took batch_size.
    assert metrics["batches_created"] < count / 4
    got = read_topic(kafka_broker.bootstrap, topic_name, count)
    assert sorted((r.key, r.value) for r in got) == sorted(sent)
    by_key = {}
    for r in got:
        by_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(p) == 1 for p in by_key.values()), "a key must stay on one partition"


@pytest.mark.parametrize("backoff, error", [("block", BackpressureTimeoutError),
                                            ("park", BackpressureTimeoutError),
                                            ("drop", RecordDroppedError)])
def test_growth_and_new_batches_meet_a_full_pool_under_each_backoff(kafka_broker, topic_name,
                                                                    backoff, error,
                                                                    monkeypatch):
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    # The counts below are for batches starting in 16 KiB, a quarter of the pool.
    monkeypatch.setattr(accumulator, "FIRST_BUFFER_BYTES", 16 * KiB)
    create_topic(kafka_broker.bootstrap, topic_name, partitions=8)
    producer = Producer(bootstrap_servers=kafka_broker.bootstrap, batch_size=64 * KiB,
                        buffer_memory=64 * KiB, max_block_ms=300, backoff=backoff,
                        linger_ms=60_000, request_timeout_ms=30_000,
                        delivery_timeout_ms=90_000)
    futures = []
    try:
        deadline = time.monotonic() + 30
        while True:  # max_block_ms is short: the new topic's metadata may take longer
            try:
                producer.send(topic_name, b"warm", partition=0)
                break
            except KafkaTimeoutError:
                if time.monotonic() > deadline:
                    raise
        producer.flush(30)  # connected, metadata known; linger would hold it a minute
        nodes[0].pause()  # nothing is acknowledged: batches keep their memory
        try:
            with pytest.raises(error, match=r"buffer pool \(\d+ of 65536 bytes free"):
                # Partitions 1-3 open a 16 KiB batch each, partition 0 the fourth: the
                # pool is full.  Partition 0's batch cannot grow to 32 KiB then, so it
                # goes as it is (its memory in flight) and its next batch must wait.
                for i in range(1000):
                    partition = 1 + i if i < 3 else 0
                    value = b"v%d" % i + bytes(900)
                    futures.append((partition, value,
                                    producer.send(topic_name, value, partition=partition)))
            if backoff == "drop":
                assert producer.metrics()["netkafka"]["records_dropped"] == 1
            assert 3 + 10 <= len(futures) <= 3 + 18  # about 16 KiB of ~920-byte records
        finally:
            nodes[0].resume()
        producer.flush(60)
        assert all(f.succeeded() for _, _, f in futures)
    finally:
        producer.close()
    got = read_topic(kafka_broker.bootstrap, topic_name, len(futures) + 1)
    assert sorted((r.partition, r.value) for r in got if r.value != b"warm") == sorted(
        (p, v) for p, v, _ in futures)


def test_a_busy_partitions_next_batch_waits_for_its_size_rather_than_starting_small(
        kafka_broker, topic_name):
    """A partition whose last batch filled 64 KiB starts its next one at 64 KiB: with only
    32 KiB free, the send waits for memory (here it times out, the broker being frozen)
    instead of opening a batch in a small first buffer that could not grow and would
    teach the partition small batches (8 threads on one producer were held at 190-430 KB
    batches of 1 MiB that way)."""
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    producer = Producer(bootstrap_servers=kafka_broker.bootstrap, batch_size=64 * KiB,
                        buffer_memory=96 * KiB, max_block_ms=300, linger_ms=60_000,
                        request_timeout_ms=30_000, delivery_timeout_ms=90_000)
    futures = []
    try:
        deadline = time.monotonic() + 30
        while True:  # max_block_ms is short: the new topic's metadata may take longer
            try:
                futures.append(producer.send(topic_name, b"warm"))
                break
            except KafkaTimeoutError:
                if time.monotonic() > deadline:
                    raise
        producer.flush(30)
        nodes[0].pause()  # nothing is acknowledged: the full batch keeps its 64 KiB
        try:
            value = bytes(1000)
            # The first batch starts in a first buffer, grows to 64 KiB and is full after ~64.
            with pytest.raises(BackpressureTimeoutError,
                               match=r"buffer pool \(32768 of 98304 bytes free"):
                for _ in range(200):
                    futures.append(producer.send(topic_name, value))
            assert 60 <= len(futures) - 1 <= 66
        finally:
            nodes[0].resume()
        producer.flush(60)
        assert all(f.succeeded() for f in futures)
    finally:
        producer.close()
    got = read_topic(kafka_broker.bootstrap, topic_name, len(futures))
    assert sorted(r.value for r in got) == sorted([b"warm"] + [bytes(1000)] * (len(futures) - 1))


def test_a_first_record_just_within_the_pool_waits_for_memory_while_the_pool_is_busy(
        kafka_broker, topic_name):
    """A record whose batch is the whole pool, sent while a batch in flight holds some of
    it, waits for memory as any other: the wait asked for the record's upper bound, up to
    21 bytes more than it takes, which no pool of that size could serve (a ValueError)."""
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    # 11 bytes of record overhead for a null key and this value, besides the header.
    value = bytes(64 * KiB - BATCH_HEADER_BYTES - 11)
    assert RecordBatchBuilder.size_upper_bound_bytes(None, value) > 64 * KiB
    producer = Producer(bootstrap_servers=kafka_broker.bootstrap, batch_size=16 * KiB,
                        buffer_memory=64 * KiB, max_block_ms=300,
                        request_timeout_ms=30_000, delivery_timeout_ms=90_000)
    try:
        deadline = time.monotonic() + 30
        while True:  # max_block_ms is short: the new topic's metadata may take longer
            try:
                producer.send(topic_name, b"warm").get(30)
                break
            except KafkaTimeoutError:
                if time.monotonic() > deadline:
                    raise
        nodes[0].pause()  # nothing is acknowledged: the batch in flight keeps its memory
        try:
            in_flight = producer.send(topic_name, bytes(10_000))
            with pytest.raises(BackpressureTimeoutError):
                producer.send(topic_name, value)
        finally:
            nodes[0].resume()
        in_flight.get(60)
        producer.send(topic_name, value).get(60)  # the pool idle: it fits
    finally:
        producer.close()
