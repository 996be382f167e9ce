"""The recording side of Producer.metrics() (metrics.py names and reads what is here).

Native because it runs for every batch on the thread that hands it over and for every
Produce request and answer on an I/O thread: as Python, a batch's statistics cost 3.6 us,
a request's and its answer's 1.5 us each, 5-7% of the client's CPU per record at
kafka-python's defaults (16 KiB batches, linger 0), where a batch holds ~140 records of
100 B, and more where batches hold few (many partitions).

Windows as kafka-python's (and Java's) defaults: a statistic covers its last SAMPLES
samples of WINDOW_NS each; a sample starts with the first event WINDOW_NS or more after
the current one started.  Each statistic has its all-time count and sum beside them.

Threads: recorded from the caller's threads, the linger thread and the I/O threads,
read by metrics(); every Stat of a StatsRecorder is guarded by the recorder's mutex
(a pthread mutex, taken for a few additions), and stats() hands out copies.
"""
cimport cython
from libc.stdint cimport int64_t

from netkafka.producer._mutex cimport Mutex

import time

cdef enum:
    _SAMPLES = 2  # samples kept: kafka-python's samples (Stat.add() shifts by one)

WINDOW_NS = 30 * 1_000_000_000  # a sample's span: kafka-python's time_window_ms
SAMPLES = _SAMPLES

cdef int64_t _WINDOW_NS = WINDOW_NS
cdef double _NO_MAX = float("-inf")

# What a statistic adds up: integral counts print as ints (record-send-total), the rest
# (rates, latencies) as floats.
cdef enum:
    _INTEGRAL = 1
    _REAL = 0


@cython.final
cdef class Stat:
    """One quantity over the sliding window: its current sample and the one before,
    and its all-time count and sum."""

    cdef readonly int64_t count_total
    cdef double _sum_total
    cdef bint _integral
    cdef int _samples  # 0, 1 (current only) or 2 (previous and current)
    # Each sample, oldest first: start (ns), events, sum, max.
    cdef int64_t _start[_SAMPLES]
    cdef int64_t _events[_SAMPLES]
    cdef double _sum[_SAMPLES]
    cdef double _max[_SAMPLES]

    def __cinit__(self, bint integral=False):
        self._integral = integral

    @property
    def sum_total(self):
        return int(self._sum_total) if self._integral else self._sum_total

    cpdef void add(self, double value, int64_t now_ns) noexcept:
        """Counts value as an event at now_ns (monotonic, not decreasing)."""
        cdef int current
        self.count_total += 1
        self._sum_total += value
        if self._samples == 0 or now_ns - self._start[self._samples - 1] >= _WINDOW_NS:
            if self._samples == _SAMPLES:  # the previous one drops out
                self._start[0], self._events[0] = self._start[1], self._events[1]
                self._sum[0], self._max[0] = self._sum[1], self._max[1]
            else:
                self._samples += 1
            current = self._samples - 1
            self._start[current], self._events[current] = now_ns, 0
            self._sum[current], self._max[current] = 0.0, _NO_MAX
        current = self._samples - 1
        self._events[current] += 1
        self._sum[current] += value
        if value > self._max[current]:
            self._max[current] = value

    cdef int _first_live(self, int64_t now_ns) noexcept:
        """The index of the oldest sample still in the window (self._samples: none)."""
        cdef int i
        for i in range(self._samples):
            if now_ns - self._start[i] < _SAMPLES * _WINDOW_NS:
                return i
        return self._samples

    def avg(self, int64_t now_ns):
        """The mean of the window's values, 0.0 without any."""
        cdef int64_t events = 0
        cdef double total = 0.0
        cdef int i
        for i in range(self._first_live(now_ns), self._samples):
            events += self._events[i]
            total += self._sum[i]
        return total / events if events else 0.0

    def max(self, int64_t now_ns):
        """The largest of the window's values, -inf without any."""
        cdef double largest = _NO_MAX
        cdef int i
        for i in range(self._first_live(now_ns), self._samples):
            if self._max[i] > largest:
                largest = self._max[i]
        return largest

    def rate(self, int64_t now_ns, bint events=False):
        """Sum (events=True: events) per second over the window, the window counted
        as at least one full sample plus the current one (kafka-python's Rate)."""
        cdef int first = self._first_live(now_ns)
        cdef int i
        cdef int64_t elapsed_ns, full_samples
        cdef double total = 0.0
        if first == self._samples:
            return 0.0
        elapsed_ns = now_ns - self._start[first]
        full_samples = elapsed_ns // _WINDOW_NS
        if full_samples < _SAMPLES - 1:
            elapsed_ns += (_SAMPLES - 1 - full_samples) * _WINDOW_NS
        for i in range(first, self._samples):
            total += self._events[i] if events else self._sum[i]
        return total / (elapsed_ns / 1e9)

    cdef Stat copy(self):
        cdef Stat other = Stat.__new__(Stat, self._integral)
        other.count_total, other._sum_total = self.count_total, self._sum_total
        other._samples = self._samples
        other._start, other._events = self._start, self._events
        other._sum, other._max = self._sum, self._max
        return other


cdef Stat _register(dict stats, object scope, str quantity, bint integral):
    """A new Stat, entered in stats as (scope, quantity)."""
    cdef Stat stat = Stat(integral)
    stats[scope, quantity] = stat
    return stat


@cython.final
cdef class _TopicStats:
    """A topic's statistics, entered in a recorder's stats when made."""

    cdef Stat records, bytes, compression_rate, errors, retries

    def __cinit__(self, dict stats, str topic):
        cdef tuple scope = ("topic", topic)
        self.records = _register(stats, scope, "records", _INTEGRAL)
        self.bytes = _register(stats, scope, "bytes", _INTEGRAL)
        self.compression_rate = _register(stats, scope, "compression-rate", _REAL)
        self.errors = _register(stats, scope, "errors", _INTEGRAL)
        self.retries = _register(stats, scope, "retries", _INTEGRAL)


@cython.final
cdef class _NodeStats:
    """A broker's statistics, entered in a recorder's stats when made."""

    cdef Stat requests, request_latency

    def __cinit__(self, dict stats, object node_id):
        cdef tuple scope = ("node", node_id)
        self.requests = _register(stats, scope, "requests", _INTEGRAL)
        self.request_latency = _register(stats, scope, "request-latency", _REAL)


cdef class StatsRecorder:
    """Records the producer's statistics (what metrics.py documents); thread-safe.

    Scopes: None (the producer), ("topic", name), ("node", id); a topic's or a node's
    statistics exist from its first event on (metrics() lists the scopes that have
    any)."""

    cdef Mutex _mutex
    # Everything below is guarded by _mutex.  _stats: (scope, quantity) -> Stat, every
    # statistic; _topics and _nodes, and the producer's own below, the same Stats by
    # scope, for the recording methods.
    cdef dict _stats
    cdef dict _topics  # topic -> _TopicStats
    cdef dict _nodes   # node id -> _NodeStats
    cdef Stat _records, _bytes, _compression_rate, _queue_time, _errors, _retries
    cdef Stat _records_per_request, _requests, _request_latency, _throttle_time

    def __cinit__(self):
        self._mutex = Mutex()
        self._stats = {}
        self._topics = {}
        self._nodes = {}
        self._records = _register(self._stats, None, "records", _INTEGRAL)
        self._bytes = _register(self._stats, None, "bytes", _INTEGRAL)
        self._compression_rate = _register(self._stats, None, "compression-rate", _REAL)
        # batch-size is the bytes of each batch: the same values as "bytes".
        self._stats[None, "batch-size"] = self._bytes
        self._queue_time = _register(self._stats, None, "queue-time", _REAL)
        self._errors = _register(self._stats, None, "errors", _INTEGRAL)
        self._retries = _register(self._stats, None, "retries", _INTEGRAL)
        self._records_per_request = _register(self._stats, None, "records-per-request", _INTEGRAL)
        self._requests = _register(self._stats, None, "requests", _INTEGRAL)
        self._request_latency = _register(self._stats, None, "request-latency", _REAL)
        self._throttle_time = _register(self._stats, None, "throttle-time", _REAL)

    cdef _TopicStats _topic_locked(self, str topic):
        cdef _TopicStats stats = self._topics.get(topic)
        if stats is None:
            stats = self._topics[topic] = _TopicStats(self._stats, topic)
        return stats

    cdef _NodeStats _node_locked(self, object node_id):
        cdef _NodeStats stats = self._nodes.get(node_id)
        if stats is None:
            stats = self._nodes[node_id] = _NodeStats(self._stats, node_id)
        return stats

    # -- recording ----------------------------------------------------------------------

    def batch_sent(self, str topic, int64_t records, int64_t uncompressed_bytes,
                   int64_t sealed_bytes, double queue_time_ms):
        """A sealed batch handed to the sender (the accumulator's draining thread)."""
        cdef int64_t now_ns = time.monotonic_ns()
        cdef double compression_rate = (<double>sealed_bytes / uncompressed_bytes
                                        if uncompressed_bytes else 1.0)
        cdef _TopicStats stats
        self._mutex.take()
        try:
            stats = self._topic_locked(topic)
            self._records.add(records, now_ns)
            stats.records.add(records, now_ns)
            self._bytes.add(sealed_bytes, now_ns)
            stats.bytes.add(sealed_bytes, now_ns)
            self._compression_rate.add(compression_rate, now_ns)
            stats.compression_rate.add(compression_rate, now_ns)
            self._queue_time.add(queue_time_ms, now_ns)
        finally:
            self._mutex.give()

    def batch_failed(self, str topic, int64_t records):
        """A batch completed with an error: its records failed."""
        self._add_for_topic(topic, records, True)

    def batch_retried(self, str topic, int64_t records):
        """A batch queued again to be resent (the sender)."""
        self._add_for_topic(topic, records, False)

    cdef void _add_for_topic(self, str topic, int64_t records, bint failed) except *:
        """records to the producer's and topic's errors (failed) or retries."""
        cdef int64_t now_ns = time.monotonic_ns()
        cdef _TopicStats stats
        self._mutex.take()
        try:
            stats = self._topic_locked(topic)
            (self._errors if failed else self._retries).add(records, now_ns)
            (stats.errors if failed else stats.retries).add(records, now_ns)
        finally:
            self._mutex.give()

    def request_sent(self, node_id, int64_t records):
        """A Produce request of `records` records built for node_id (an I/O thread)."""
        cdef int64_t now_ns = time.monotonic_ns()
        self._mutex.take()
        try:
            self._records_per_request.add(records, now_ns)
            self._requests.add(1, now_ns)
            self._node_locked(node_id).requests.add(1, now_ns)
        finally:
            self._mutex.give()

    def response(self, node_id, double latency_ms, double throttle_time_ms):
        """The answer to a Produce request (an I/O thread)."""
        cdef int64_t now_ns = time.monotonic_ns()
        self._mutex.take()
        try:
            self._request_latency.add(latency_ms, now_ns)
            self._node_locked(node_id).request_latency.add(latency_ms, now_ns)
            self._throttle_time.add(throttle_time_ms, now_ns)
        finally:
            self._mutex.give()

    # -- reading ------------------------------------------------------------------------

    def stats(self):
        """{(scope, quantity): Stat}: a copy of every statistic, taken under the mutex."""
        cdef dict copies = {}
        cdef Stat stat
        self._mutex.take()
        try:
            for key, stat in self._stats.items():
                copies[key] = stat.copy()
        finally:
            self._mutex.give()
        return copies
