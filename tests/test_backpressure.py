"""Watermarks and backoff strategies against a frozen (SIGSTOPped) broker: outbound bytes
stop at the high watermark, memory stays bounded, block raises after max_block_ms naming the
broker, park resumes after SIGCONT with nothing lost, drop counts exactly what it dropped."""
import collections
import queue
import threading
import time

import pytest

from batch_helpers import (as_read, io_stack, make_batch, new_buffer_pool, release_batches,
                           rss_bytes, wait_for)
from netkafka import Producer
from netkafka.producer.backoff import BackoffStrategy, Block, Drop, Park, backoff_strategy
from netkafka.errors import BackpressureTimeoutError, RecordDroppedError
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

HIGH_WATERMARK_BYTES = 64 * 1024
LOW_WATERMARK_BYTES = 32 * 1024
RECORDS_PER_BATCH = 8
VALUE_BYTES = 1000  # ~8 KiB batches: the high watermark is ~8 of them


@pytest.fixture
def node(kafka_broker):
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    return nodes[0]


def frozen_stack(bootstrap, topic, backoff, max_block_ms, **sender_options):
    stack = io_stack(bootstrap, high_watermark_bytes=HIGH_WATERMARK_BYTES,
                     low_watermark_bytes=LOW_WATERMARK_BYTES, request_timeout_ms=60000,
                     max_in_flight_requests_per_connection=2,
                     sender_options=dict(backoff=backoff, max_block_ms=max_block_ms,
                                         **sender_options))
    stack.metadata.wait_for_topic(topic, 30)
    return stack


def leader_connection(stack, topic):
    broker = stack.metadata.leader_for(topic, 0, 30)
    return stack.pool.connection(broker.node_id, broker.host, broker.port)


def test_block_raises_after_max_block_ms_naming_the_broker(kafka_broker, node, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    stack = frozen_stack(kafka_broker.bootstrap, topic_name, "block", max_block_ms=300)
    accepted, futures = [], []
    try:
        node.pause()
        try:
            with pytest.raises(BackpressureTimeoutError) as failure:
                for i in range(200):
                    batch = make_batch(buffers, f"block-{i}", RECORDS_PER_BATCH, VALUE_BYTES)
                    started = time.monotonic()
                    futures.append(stack.sender.send(topic_name, 0, batch.view,
                                                     batch.record_count))
                    accepted.append(batch)
            blocked_s = time.monotonic() - started
            conn = leader_connection(stack, topic_name)
            outbound, writable = conn.outbound_bytes, conn.writable
        finally:
            node.resume()
        results = [f.result(30) for f in futures]
        drained = (conn.outbound_bytes, conn.writable)
    finally:
        stack.close()

    message = str(failure.value)
    assert f"broker {conn.node_id} at {kafka_broker.bootstrap}" in message
    assert "no room for 300 ms (max_block_ms, backoff='block')" in message
    assert f"high watermark {HIGH_WATERMARK_BYTES}" in message
    assert blocked_s >= 0.29
    batch_bytes = accepted[0].view.nbytes
    assert not writable
    assert LOW_WATERMARK_BYTES < outbound <= HIGH_WATERMARK_BYTES + batch_bytes
    assert drained == (0, True)  # every byte counted in was counted out
    # Only what fits under the watermark (+ what the socket and max_in_flight took) got in.
    assert 0 < len(accepted) < 30
    assert [r.base_offset for r in results] == [i * RECORDS_PER_BATCH
                                                for i in range(len(accepted))]
    read = read_topic(kafka_broker.bootstrap, topic_name,
                      expected_count=len(accepted) * RECORDS_PER_BATCH)
    assert as_read(read) == [tuple(w) for b in accepted for w in b.records]
    release_batches(accepted)


def test_memory_stays_bounded_while_the_broker_is_frozen(kafka_broker, node, topic_name):
    """A caller pushing ~200 MB at a frozen broker: the connection takes up to its high
    watermark and refuses the rest (drop), so the process does not grow with the push."""
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool(total_bytes=8 * 1024 * 1024)
    stack = frozen_stack(kafka_broker.bootstrap, topic_name, "drop", max_block_ms=1000)
    payload = make_batch(buffers, "bulk", count=60, value_bytes=1000, with_headers=False)
    try:
        conn = leader_connection(stack, topic_name)
        rss_before = rss_bytes()
        node.pause()
        try:
            accepted = dropped = 0
            peak_outbound = 0
            for _ in range(3000):  # 3000 x ~60 KiB = ~180 MiB offered
                try:
                    stack.sender.send(topic_name, 0, payload.view, payload.record_count)
                    accepted += 1
                except RecordDroppedError:
                    dropped += 1
                peak_outbound = max(peak_outbound, conn.outbound_bytes)
            rss_growth = rss_bytes() - rss_before
        finally:
            node.resume()
        stack.sender.flush(30)
    finally:
        stack.close()
    assert accepted + dropped == 3000
    assert dropped > 2900
    assert peak_outbound <= HIGH_WATERMARK_BYTES + payload.view.nbytes
    assert rss_growth < 32 * 1024 * 1024, f"RSS grew {rss_growth / 2**20:.1f} MiB"
    release_batches([payload])


def test_park_resumes_after_sigcont_with_nothing_lost(kafka_broker, node, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    stack = frozen_stack(kafka_broker.bootstrap, topic_name, backoff_strategy("park", park_us=200),
                         max_block_ms=30000)
    batches = [make_batch(buffers, f"park-{i}", RECORDS_PER_BATCH, VALUE_BYTES)
               for i in range(40)]
    futures, errors_seen = [], []

    def producer():
        try:
            for batch in batches:
                futures.append(stack.sender.send(topic_name, 0, batch.view, batch.record_count))
        except Exception as exc:  # noqa: BLE001 -- reported by the assertion below
            errors_seen.append(exc)

    try:
        conn = leader_connection(stack, topic_name)
        node.pause()
        try:
            sending = threading.Thread(target=producer)
            sending.start()
            deadline = time.monotonic() + 10
            while conn.writable:
                assert time.monotonic() < deadline, "connection never became unwritable"
                time.sleep(0.01)
            time.sleep(0.5)
            parked_at = len(futures)
            assert sending.is_alive() and parked_at < len(batches)  # parked, not failed
            assert not conn.writable
        finally:
            node.resume()
        sending.join(30)
        assert not sending.is_alive()
        results = [f.result(30) for f in futures]
    finally:
        stack.close()
    assert errors_seen == []
    assert [r.base_offset for r in results] == [i * RECORDS_PER_BATCH for i in range(40)]
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=40 * RECORDS_PER_BATCH)
    assert as_read(read) == [tuple(w) for b in batches for w in b.records]
    release_batches(batches)


def test_drop_counts_exactly_the_records_it_dropped(kafka_broker, node, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    stack = frozen_stack(kafka_broker.bootstrap, topic_name, "drop", max_block_ms=1000)
    batches = [make_batch(buffers, f"drop-{i}", RECORDS_PER_BATCH if i % 2 else 3, VALUE_BYTES)
               for i in range(60)]
    kept, dropped = [], []
    try:
        node.pause()
        try:
            for batch in batches:
                try:
                    stack.sender.send(topic_name, 0, batch.view, batch.record_count)
                    kept.append(batch)
                except RecordDroppedError as exc:
                    assert "record dropped (backoff='drop'): no room in broker" in str(exc)
                    dropped.append(batch)
        finally:
            node.resume()
        stack.sender.flush(30)
        metrics = stack.sender.metrics()
        drained = (leader_connection(stack, topic_name).outbound_bytes,
                   leader_connection(stack, topic_name).writable)
    finally:
        stack.close()
    assert kept and dropped
    assert drained == (0, True)
    assert metrics["batches_dropped"] == len(dropped)
    assert metrics["records_dropped"] == sum(b.record_count for b in dropped)
    assert metrics["records_acknowledged"] == sum(b.record_count for b in kept)
    read = read_topic(kafka_broker.bootstrap, topic_name,
                      expected_count=sum(b.record_count for b in kept))
    assert as_read(read) == [tuple(w) for b in kept for w in b.records]
    release_batches(batches)


class _Refuse(BackoffStrategy):
    """A user strategy: gives the target a short chance, then refuses with its own error."""

    name = "refuse"

    def __init__(self):
        self.targets = []

    def wait_for_room(self, target, max_block_ms):
        self.targets.append(target.describe())
        if not target.wait_for_room(0.05):
            raise RuntimeError(f"refused: {target.describe()}")


def test_user_strategy_object_is_used(kafka_broker, node, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    strategy = _Refuse()
    stack = frozen_stack(kafka_broker.bootstrap, topic_name, strategy, max_block_ms=1000)
    batches = []
    try:
        node.pause()
        try:
            with pytest.raises(RuntimeError, match=r"refused: broker \d+ at "):
                for i in range(100):
                    batch = make_batch(buffers, f"user-{i}", RECORDS_PER_BATCH, VALUE_BYTES)
                    batches.append(batch)
                    stack.sender.send(topic_name, 0, batch.view, batch.record_count)
        finally:
            node.resume()
        stack.sender.flush(30)
    finally:
        stack.close()
    assert len(strategy.targets) == 1  # asked only once the connection was full
    assert kafka_broker.bootstrap in strategy.targets[0]
    release_batches(batches)


class _InTurn(BackoffStrategy):
    """block, once the test lets the caller go on: the target checked first (a place in
    the connection's line), the caller's arrival told to the test.  A caller named in
    impatient waits 1 ms only."""

    name = "in turn"

    def __init__(self, impatient=()):
        self.arrived = queue.Queue()  # the callers' thread names, as they checked
        self.impatient = impatient
        self._go = collections.defaultdict(threading.Event)  # name -> its go-ahead
        self._lock = threading.Lock()

    def go_ahead(self, name):
        self._event(name).set()

    def _event(self, name):
        with self._lock:
            return self._go[name]

    def wait_for_room(self, target, max_block_ms):
        target.has_room()
        name = threading.current_thread().name
        self.arrived.put(name)
        assert self._event(name).wait(30)
        Block().wait_for_room(target, 1 if name in self.impatient else max_block_ms)


def test_callers_waiting_for_a_full_connection_go_in_the_order_they_came(
        kafka_broker, node, topic_name):
    """Callers blocked on a connection above its high watermark were all woken by its
    drain and raced each other (and any send() that came meanwhile): a later one often
    went first.  They go in the order they came, whenever each gets to look; one that
    gives up (max_block_ms) leaves its place, and those behind it go on."""
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    names = [f"in-turn-{i}" for i in range(5)]
    strategy = _InTurn(impatient={names[2]})
    stack = frozen_stack(kafka_broker.bootstrap, topic_name, strategy, max_block_ms=60000)
    batches = {name: make_batch(buffers, name, RECORDS_PER_BATCH, VALUE_BYTES) for name in names}
    futures, failures, filling = {}, {}, []

    def send(name):
        batch = batches[name]
        try:
            futures[name] = stack.sender.send(topic_name, 0, batch.view, batch.record_count)
        except Exception as exc:  # noqa: BLE001 -- asserted below
            failures[name] = type(exc)  # not its traceback, which holds the batch's view

    try:
        conn = leader_connection(stack, topic_name)
        node.pause()
        try:
            while conn.writable:
                batch = make_batch(buffers, f"fill-{len(filling)}", RECORDS_PER_BATCH,
                                   VALUE_BYTES)
                filling.append(batch)
                stack.sender.send(topic_name, 0, batch.view, batch.record_count)
            threads = [threading.Thread(target=send, args=(name,), name=name) for name in names]
            for thread in threads:  # one after the other: each waits before the next comes
                thread.start()
                assert strategy.arrived.get(timeout=30) == thread.name
        finally:
            node.resume()
        wait_for(lambda: conn.writable, 30, "the connection's drain")
        for name in reversed(names):  # the last to come looks first
            strategy.go_ahead(name)
            time.sleep(0.2)
        for thread in threads:
            thread.join(30)
        assert not any(thread.is_alive() for thread in threads), "a caller never got its turn"
        offsets = {name: future.result(30).base_offset for name, future in futures.items()}
    finally:
        stack.close()
    assert sorted(offsets, key=offsets.get) == [names[0], names[1], names[3], names[4]]
    assert failures == {names[2]: BackpressureTimeoutError}
    release_batches(filling + list(batches.values()))


class _Gate:
    """A minimal Backpressured target: room toggled by a test thread."""

    def __init__(self):
        self._cond = threading.Condition()
        self._room = False

    def open(self):
        with self._cond:
            self._room = True
            self._cond.notify_all()

    def has_room(self):
        with self._cond:
            return self._room

    def wait_for_room(self, timeout_s):
        with self._cond:
            return self._cond.wait_for(lambda: self._room, timeout_s)

    def describe(self):
        return "the test gate"


@pytest.mark.parametrize("strategy", [Block(), Park(park_us=100)], ids=["block", "park"])
def test_waiting_strategies_go_on_as_soon_as_there_is_room(strategy):
    gate = _Gate()
    opener = threading.Timer(0.2, gate.open)
    opener.start()
    started = time.monotonic()
    strategy.wait_for_room(gate, max_block_ms=10000)
    waited_s = time.monotonic() - started
    opener.join()
    assert gate.has_room()
    assert 0.15 < waited_s < 9  # returned on room, long before max_block_ms


@pytest.mark.parametrize("strategy", [Block(), Park(park_us=100)], ids=["block", "park"])
def test_waiting_strategies_time_out_naming_the_target(strategy):
    with pytest.raises(BackpressureTimeoutError,
                       match=rf"no room for 50 ms \(max_block_ms, backoff='{strategy.name}'\) "
                             r"in the test gate"):
        strategy.wait_for_room(_Gate(), max_block_ms=50)


def test_drop_refuses_at_once():
    with pytest.raises(RecordDroppedError, match=r"no room in the test gate"):
        Drop().wait_for_room(_Gate(), max_block_ms=10000)


def test_backoff_setting_is_validated():
    assert isinstance(backoff_strategy("block"), Block)
    assert isinstance(backoff_strategy("drop"), Drop)
    assert backoff_strategy("park", park_us=5).park_us == 5
    user = _Refuse()
    assert backoff_strategy(user) is user
    with pytest.raises(ValueError, match=r"backoff must be 'block', 'drop', 'park' or an object "
                                         r"with a wait_for_room\(target, max_block_ms\) "
                                         r"method, got 'spin'"):
        backoff_strategy("spin")
    with pytest.raises(ValueError, match="wait_for_room"):
        backoff_strategy(42)
    with pytest.raises(ValueError, match="park_us must be a number > 0, got 0"):
        Park(park_us=0)


def test_a_frozen_brokers_partitions_take_memory_for_their_records_not_for_their_lingers(
        kafka_broker, node, topic_name):
    """Records trickling to a frozen broker's partition: each linger_ms used to seal a batch
    of a few records into a pooled buffer of its own, queued behind the ones before it, so
    that a silent broker took all of buffer_memory within seconds and then send() blocked for
    every partition (tests/test_chaos.py's black hole).  While the partition has batches
    queued, its open batch stays open and takes the records instead."""
    create_topic(kafka_broker.bootstrap, topic_name)
    records = 1500
    producer = Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=1, acks="all",
                        max_in_flight_requests_per_connection=1, request_timeout_ms=30000)
    try:
        producer.send(topic_name, b"first", partition=0).get(30)  # connected, metadata known
        created_before = producer.metrics()["netkafka"]["batches_created"]
        node.pause()
        try:
            futures = []
            lowest_available = None
            for n in range(records):  # one record a millisecond: 1.5 s, 1,500 lingers
                futures.append(producer.send(topic_name, b"%d" % n, partition=0))
                time.sleep(0.001)
                if n % 100 == 0:
                    available = producer.metrics()["netkafka"]["buffer_available_bytes"]
                    lowest_available = min(available, lowest_available or available)
        finally:
            node.resume()
        offsets = [future.get(60).offset for future in futures]
        stats = producer.metrics()["netkafka"]
    finally:
        producer.close()
    batches = stats["batches_created"] - created_before
    # Before: one batch per linger, about 1,000 (and as many 16 KiB buffers).  After: the one
    # in the request, one queued behind it, and the open one taking every record meanwhile.
    assert batches <= 10, f"{batches} batches for {records} records sent to a frozen broker"
    assert stats["buffer_total_bytes"] - lowest_available <= 10 * 16384
    assert offsets == sorted(offsets)
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=records + 1)
    assert [r.value for r in read] == [b"first"] + [b"%d" % n for n in range(records)]
