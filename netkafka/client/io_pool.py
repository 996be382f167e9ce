"""The I/O thread pool: ``io_threads`` threads, each with its own selector.

Each broker connection belongs to exactly one thread (chosen by broker id), and
only that thread touches its socket.  Other threads hand work over through the
connection's (or the thread's) lock-guarded queue and then wake the thread
through a socketpair, so new work is picked up at once.  Wake-ups are
coalesced: one byte is written per batch of hand-overs, not one per request.

An idle thread sleeps in select() with no timeout, or with the time to its next
deadline (a request timeout, a reconnect backoff, an idle close, a timer), so
an idle producer uses no CPU.

A wake-up names the connection it is for (BrokerConnection.wakeup), and an
iteration of the loop services only the connections that need it: those whose
socket had events, those woken, and those whose deadline has come -- every
one after a wake-up for the whole thread, a task or a timer (which may touch
any).  An idle connection (to another broker, the bootstrap one) then costs
nothing per request, not a lock-taking look at it every time the thread wakes.
Sound because every hand-over to a connection wakes it (the thread would sleep
through it otherwise), and everything else that changes what a connection must
do happens in its own servicing, after which its deadline is asked again.
"""
import heapq
import itertools
import logging
import selectors
import socket
import threading
import time

from netkafka._validate import check_int
from netkafka.client.connection import BrokerConnection, ConnectionConfig
from netkafka.client.own_threads import mark_own_thread
from netkafka.errors import KafkaConnectionError, KafkaTimeoutError

_log = logging.getLogger("netkafka.client.io_pool")

# The longest sleep handed to select(): epoll counts int milliseconds (about 24.8 days
# at most) and raises OverflowError beyond, which would end the thread.  A deadline
# further away (a re-authentication after a broker's long SessionLifetimeMs, a huge
# configured timeout) is reached by waking once a day to look again.
_MAX_SELECT_S = 86400.0


class IOThread:
    """One I/O thread: a selector, its connections, its timers."""

    def __init__(self, index):
        self.index = index  # immutable
        # Owned by this thread once started (connections register their
        # sockets in it from this thread only).
        self.selector = selectors.DefaultSelector()
        self._wake_recv, self._wake_send = socket.socketpair()  # immutable
        self._wake_recv.setblocking(False)
        self._wake_send.setblocking(False)
        self.selector.register(self._wake_recv, selectors.EVENT_READ, None)

        self._lock = threading.Lock()
        self._tasks = []  # guarded by _lock: callables to run on this thread
        self._wake_pending = False  # guarded by _lock: a wake byte is unread
        self._wakeups_written = 0  # guarded by _lock: wake bytes written so far
        self._stopping = False  # guarded by _lock
        self._connections = []  # guarded by _lock (added from any thread; read by this one)
        self._woken = set()  # guarded by _lock: connections woken since the loop took them
        self._woken_all = False  # guarded by _lock: a wake-up for the whole thread came
        self._due_ns = {}  # owned by this thread: {connection: io_next_deadline_ns() or None}

        self._timers = []  # owned by this thread: heap of (deadline_ns, seq, fn)
        self._timer_seq = itertools.count()  # owned by this thread
        self._thread = threading.Thread(
            target=self._run, name=f"netkafka-io-{index}", daemon=True)

    def start(self):
        self._thread.start()

    def is_current(self):
        return threading.current_thread() is self._thread

    def add_connection(self, conn):
        """Any thread: this thread services conn from now on."""
        with self._lock:
            self._connections.append(conn)
        self.wakeup()

    def call_soon(self, fn):
        """Any thread: runs fn() on this thread soon."""
        with self._lock:
            if self._stopping:
                return False
            self._tasks.append(fn)
        self.wakeup()
        return True

    def call_later(self, delay_ms, fn):
        """Any thread: runs fn() on this thread after delay_ms (no cancel:
        callbacks check whether they are still wanted)."""
        deadline_ns = time.monotonic_ns() + int(delay_ms * 1_000_000)
        if self.is_current():
            heapq.heappush(self._timers, (deadline_ns, next(self._timer_seq), fn))
            return True
        return self.call_soon(
            lambda: heapq.heappush(self._timers, (deadline_ns, next(self._timer_seq), fn)))

    def wakeup(self, conn=None):
        """Any thread: makes select() return, and the loop then service conn (None:
        every connection).  Coalesced: no byte is written while one is still unread."""
        with self._lock:
            if conn is None:
                self._woken_all = True
            else:
                self._woken.add(conn)
            if self._wake_pending:
                return
            self._wake_pending = True
            self._wakeups_written += 1
        try:
            self._wake_send.send(b"\0")
        except (BlockingIOError, InterruptedError):
            pass  # the pair is full, so the thread is certain to wake
        except OSError:
            pass  # closed during shutdown: the thread is gone or going

    @property
    def wakeups_written(self):
        """Wake bytes written so far (fewer than wakeup() calls: coalesced)."""
        with self._lock:
            return self._wakeups_written

    def stop(self, timeout_s):
        """Asks the thread to close its connections and exit; joins it.
        Returns True if it exited within timeout_s."""
        with self._lock:
            self._stopping = True
        self.wakeup()
        if self._thread.ident is not None and not self.is_current():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def abandon_after_fork(self):
        """In a forked child only: the thread did not survive the fork; closes this
        process's copies of its selector and wake-up sockets, taking no lock."""
        self.selector.close()
        self._wake_recv.close()
        self._wake_send.close()

    # ------------------------------------------------------------------
    # This thread only.

    def _run(self):
        mark_own_thread()
        try:
            while True:
                timeout_s = self._timeout_s()
                evented = []
                for key, mask in self.selector.select(timeout_s):
                    conn = key.data
                    if conn is None:
                        self._drain_wakeup()
                    else:
                        conn.io_on_events(mask, time.monotonic_ns())
                        evented.append(conn)
                with self._lock:
                    tasks, self._tasks = self._tasks, []
                    stopping = self._stopping
                    connections = list(self._connections)
                    woken, self._woken = self._woken, set()
                    everyone, self._woken_all = self._woken_all or bool(tasks), False
                for fn in tasks:
                    self._run_callback(fn)
                if stopping:
                    break
                now_ns = time.monotonic_ns()
                while self._timers and self._timers[0][0] <= now_ns:
                    self._run_callback(heapq.heappop(self._timers)[2])
                    everyone = True
                woken.update(evented)
                due_ns = self._due_ns
                for conn in connections:
                    due = due_ns.get(conn, 0)
                    if everyone or conn in woken or (due is not None and due <= now_ns):
                        conn.io_service(now_ns)
                        due_ns[conn] = conn.io_next_deadline_ns()
        except BaseException:
            _log.exception("I/O thread %d failed", self.index)
            raise
        finally:
            self._shutdown()

    def _timeout_s(self):
        deadline = self._timers[0][0] if self._timers else None
        with self._lock:
            if self._tasks or self._stopping:
                return 0
        for d in self._due_ns.values():  # as of each connection's last servicing
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        if deadline is None:
            return None  # nothing scheduled: sleep until woken
        return min(_MAX_SELECT_S, max(0.0, (deadline - time.monotonic_ns()) / 1e9))

    def _drain_wakeup(self):
        # Read every byte first, then clear the flag: a wake-up that comes
        # after the clear writes a new byte, so none is lost.
        try:
            while self._wake_recv.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        with self._lock:
            self._wake_pending = False

    def _run_callback(self, fn):
        try:
            fn()
        except Exception:  # noqa: BLE001 -- a task's bug must not stop the thread
            _log.exception("task on I/O thread %d raised", self.index)

    def _shutdown(self):
        with self._lock:
            connections, self._connections = self._connections, []
            self._stopping = True
            tasks, self._tasks = self._tasks, []
        closed = KafkaConnectionError("the producer's I/O threads are shut down")
        for conn in connections:
            conn.io_close(closed)
        for fn in tasks:  # hand-overs that raced the stop still run (they fail fast)
            self._run_callback(fn)
        self._timers.clear()
        self.selector.close()
        self._wake_recv.close()
        with self._lock:
            self._wake_pending = True  # no more wake bytes into a closed pair
        self._wake_send.close()


class IOPool:
    """``io_threads`` I/O threads and the broker connections they own.

    Connections are created on demand, one per node id, and assigned to thread
    ``abs(node_id) % io_threads``; bootstrap addresses get negative node ids.
    """

    def __init__(self, config=None, io_threads=1):
        check_int("io_threads", io_threads, 1)
        self.config = config if config is not None else ConnectionConfig()  # immutable
        self._lock = threading.Lock()
        self._connections = {}  # guarded by _lock: node_id -> BrokerConnection
        self._request_source = None  # guarded by _lock: given to every connection
        self._listeners = []  # guarded by _lock: on_ready / on_failure observers
        self._closed = False  # guarded by _lock
        self._threads = [IOThread(i) for i in range(io_threads)]  # immutable list
        for thread in self._threads:
            thread.start()

    @property
    def io_threads(self):
        return len(self._threads)

    def on_io_thread(self):
        """True when called from one of this pool's I/O threads (a callback)."""
        return any(thread.is_current() for thread in self._threads)

    def thread_for(self, node_id):
        return self._threads[abs(node_id) % len(self._threads)]

    def set_request_source(self, source):
        """The producer's sender: asked by each connection for Produce requests."""
        with self._lock:
            self._request_source = source
            for conn in self._connections.values():
                conn.set_request_source(source)

    def add_listener(self, listener):
        """listener.on_ready(conn) / on_failure(conn, error, was_ready): called on
        the I/O thread."""
        with self._lock:
            self._listeners.append(listener)

    def connection(self, node_id, host=None, port=None):
        """The connection to node_id, created on first use (host and port are
        needed then); a changed address makes it reconnect."""
        conn, created = self._get_or_create(node_id, host, port)
        if not created and host is not None:
            conn.update_address(host, port)
        return conn

    def open_connection(self, node_id, host, port):
        """As connection(), but an existing connection keeps its address: the
        sender's lookup for every batch, one lock round trip (metadata moves a
        connection when its broker moves, see Metadata._on_answer)."""
        return self._get_or_create(node_id, host, port)[0]

    def _get_or_create(self, node_id, host, port):
        with self._lock:
            if self._closed:
                raise KafkaConnectionError("the producer's I/O pool is closed")
            conn = self._connections.get(node_id)
            if conn is not None:
                return conn, False
            if host is None:
                raise KeyError(f"no connection to node {node_id} and no address given")
            conn = BrokerConnection(
                node_id, host, port, self.config, self.thread_for(node_id),
                request_source=self._request_source, listener=_Listeners(self))
            self._connections[node_id] = conn
        self.thread_for(node_id).add_connection(conn)
        return conn, True

    def get(self, node_id):
        """The existing connection to node_id, or None."""
        with self._lock:
            return self._connections.get(node_id)

    def connections(self):
        with self._lock:
            return list(self._connections.values())

    def listeners(self):
        with self._lock:
            return list(self._listeners)

    def close(self, timeout_s=5.0):
        """Stops every I/O thread (pending requests fail with a connection
        error) and joins them.  Raises if a thread is still alive after
        timeout_s: a thread left behind is a bug, not something to hide."""
        with self._lock:
            self._closed = True
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.stop(0)
        alive = [t.index for t in self._threads
                 if not t.stop(max(0.0, deadline - time.monotonic()))]
        if alive:
            raise KafkaTimeoutError(
                f"I/O threads {alive} did not stop within {timeout_s} s")

    @property
    def closed(self):
        with self._lock:
            return self._closed

    def abandon_after_fork(self):
        """In a forked child only: this pool's threads did not survive the fork and
        its sockets are the parent's connections.  Closes this process's copies of
        every file descriptor (no shutdown, no I/O: the parent's connections carry
        on) and marks the pool closed.  Takes no lock: one held by a parent thread
        at the fork stays held here forever, so the pool must not be used again."""
        self._closed = True
        for thread in self._threads:
            thread.abandon_after_fork()
        for conn in self._connections.values():
            conn.abandon_after_fork()


class _Listeners:
    """Fans a connection's events out to the pool's listeners."""

    __slots__ = ("_pool",)

    def __init__(self, pool):
        self._pool = pool

    def on_ready(self, conn):
        for listener in self._pool.listeners():
            try:
                listener.on_ready(conn)
            except Exception:  # noqa: BLE001 -- an observer's bug must not stop I/O
                _log.exception("on_ready listener %r raised", listener)

    def on_failure(self, conn, error, was_ready):
        for listener in self._pool.listeners():
            try:
                listener.on_failure(conn, error, was_ready)
            except Exception:  # noqa: BLE001
                _log.exception("on_failure listener %r raised", listener)
