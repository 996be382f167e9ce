"""The I/O thread pool: ownership by broker id, wake-ups, no busy waiting, clean shutdown."""
import logging
import threading
import time

import pytest

from batch_helpers import io_threads_alive
from netkafka.client.connection import READY, ConnectionConfig
from netkafka.errors import KafkaConnectionError
from netkafka.client.io_pool import IOPool
from netkafka.client.metadata import parse_bootstrap_servers, request_metadata


def address(kafka_broker):
    return parse_bootstrap_servers(kafka_broker.bootstrap)[0]


def test_idle_pool_uses_no_cpu_and_wakes_for_new_work(kafka_broker):
    host, port = address(kafka_broker)
    pool = IOPool(ConnectionConfig(), io_threads=2)
    try:
        connections = [pool.connection(node_id, host, port) for node_id in (0, 1)]
        for conn in connections:
            request_metadata(conn, []).result(10)
        time.sleep(0.2)  # let the answers' aftermath settle
        cpu_before = time.process_time()
        time.sleep(1.0)
        idle_cpu_s = time.process_time() - cpu_before
        # The threads sleep in select() with no timeout: only a wake-up ends it, so
        # this answer proves the wake-up channel works.
        assert request_metadata(connections[0], []).result(10).brokers
    finally:
        pool.close()
    # A polling loop would burn a good share of a core; an idle pool burns ~nothing.
    assert idle_cpu_s < 0.05, f"idle pool used {idle_cpu_s:.3f} s of CPU in 1 s"


def test_close_joins_every_thread(kafka_broker):
    host, port = address(kafka_broker)
    before = set(io_threads_alive())
    pool = IOPool(ConnectionConfig(), io_threads=3)
    assert len(set(io_threads_alive()) - before) == 3
    request_metadata(pool.connection(1, host, port), []).result(10)
    pool.close(timeout_s=5)
    assert set(io_threads_alive()) == before
    with pytest.raises(KafkaConnectionError, match="closed"):
        pool.connection(2, host, port)


def test_close_fails_pending_requests_of_a_frozen_broker(kafka_broker):
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started")
    host, port = address(kafka_broker)
    before = set(io_threads_alive())
    pool = IOPool(ConnectionConfig(request_timeout_ms=60000))
    conn = pool.connection(1, host, port)
    request_metadata(conn, []).result(10)
    nodes[0].pause()
    try:
        pending = [request_metadata(conn, []) for _ in range(3)]
        time.sleep(0.2)
        assert not any(f.done() for f in pending)
        pool.close(timeout_s=5)
    finally:
        nodes[0].resume()
    for future in pending:
        with pytest.raises(KafkaConnectionError, match="I/O threads are shut down"):
            future.result(0)
    assert set(io_threads_alive()) == before


def test_connections_are_owned_by_the_thread_of_their_broker_id(kafka_broker):
    host, port = address(kafka_broker)
    pool = IOPool(ConnectionConfig(), io_threads=3)
    ran_on = {}
    try:
        futures = []
        for node_id in range(6):
            conn = pool.connection(node_id, host, port)
            future = request_metadata(conn, [])
            future.add_done_callback(
                lambda f, n=node_id: ran_on.setdefault(n, threading.current_thread().name))
            futures.append(future)
        for future in futures:
            future.result(10)
        threads = {n: pool.thread_for(n).index for n in range(6)}
    finally:
        pool.close()
    assert threads == {n: n % 3 for n in range(6)}
    assert ran_on == {n: f"netkafka-io-{n % 3}" for n in range(6)}


def test_wakeups_are_coalesced(kafka_broker):
    """While the I/O thread is busy, a thousand hand-overs write one wake-up byte."""
    host, port = address(kafka_broker)
    pool = IOPool(ConnectionConfig(max_in_flight_requests_per_connection=50))
    try:
        conn = pool.connection(1, host, port)
        request_metadata(conn, []).result(10)
        thread = pool.thread_for(1)
        busy, release = threading.Event(), threading.Event()
        thread.call_soon(lambda: (busy.set(), release.wait(10)))
        assert busy.wait(10)
        before = thread.wakeups_written
        futures = []
        futures_lock = threading.Lock()

        def submit_many():
            mine = [request_metadata(conn, []) for _ in range(250)]
            with futures_lock:
                futures.extend(mine)

        submitters = [threading.Thread(target=submit_many) for _ in range(4)]
        for t in submitters:
            t.start()
        for t in submitters:
            t.join()
        written = thread.wakeups_written - before
        release.set()
        assert all(f.result(20).brokers for f in futures)
        assert len(futures) == 1000
    finally:
        pool.close()
    assert written <= 1


def test_an_idle_connection_is_left_alone_while_another_works(kafka_broker):
    """The thread services the connections that were woken, had socket events or are due,
    not every connection it owns each time it wakes; a woken idle one is serviced."""
    host, port = address(kafka_broker)
    pool = IOPool(ConnectionConfig(), io_threads=1)
    try:
        busy, idle = pool.connection(0, host, port), pool.connection(1, host, port)
        for conn in (busy, idle):
            request_metadata(conn, []).result(10)
        time.sleep(0.2)  # let the answers' aftermath settle
        serviced = []
        service = idle.io_service
        idle.io_service = lambda now_ns: (serviced.append(now_ns), service(now_ns))
        for _ in range(50):  # each one wakes the thread
            assert request_metadata(busy, []).result(10).brokers
        assert serviced == []
        assert request_metadata(idle, []).result(10).brokers
        assert serviced
    finally:
        pool.close()


def test_timers_run_on_their_thread():
    pool = IOPool(io_threads=2)
    fired = []
    done = threading.Event()
    try:
        started = time.monotonic()
        pool.thread_for(1).call_later(
            100, lambda: (fired.append((threading.current_thread().name,
                                        time.monotonic() - started)), done.set()))
        assert done.wait(5)
    finally:
        pool.close()
    (name, after_s), = fired
    assert name == "netkafka-io-1"
    assert after_s >= 0.09


def test_a_deadline_weeks_away_does_not_stop_the_thread():
    # select() takes at most about 24.8 days (epoll counts int milliseconds): a
    # re-authentication due after a long SessionLifetimeMs, or any deadline that far,
    # must not be handed to it whole, or the thread dies with OverflowError.
    pool = IOPool()
    try:
        thread = pool.thread_for(0)
        thread.call_later(30 * 24 * 3600 * 1000, lambda: None)
        time.sleep(0.2)  # the thread sleeps with that timer first in line
        ran = threading.Event()
        thread.call_soon(ran.set)
        assert ran.wait(5)
    finally:
        pool.close()


def test_a_failing_callback_does_not_stop_the_thread(kafka_broker, caplog):
    host, port = address(kafka_broker)
    pool = IOPool()
    try:
        conn = pool.connection(1, host, port)
        boom = request_metadata(conn, [])
        boom.add_done_callback(lambda f: 1 / 0)
        boom.result(10)
        with caplog.at_level(logging.ERROR):
            # concurrent.futures logs the callback's exception; the thread goes on.
            assert request_metadata(conn, []).result(10).brokers
        assert conn.state == READY
    finally:
        pool.close()


def test_io_threads_is_validated():
    with pytest.raises(ValueError, match="io_threads must be an int >= 1, got 0"):
        IOPool(io_threads=0)
