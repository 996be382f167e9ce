"""Producer.metrics(): kafka-python's KafkaProducer.metrics(), from netkafka's counts.

metrics() returns {group: {name: value}} with kafka-python's group and metric names:

    producer-metrics                      the producer as a whole
    producer-topic-metrics.<topic>        per topic
    producer-node-metrics.node-<id>       per broker
    netkafka                              netkafka's own counters (records dropped,
                                          backpressure, buffers, idempotence, ...)

Only what netkafka measures is there; a kafka-python name netkafka has no honest value
for is absent rather than made up (record-size-*, requests-in-flight,
metadata-age, waiting-threads, bufferpool-wait-ratio).  Besides kafka-python's rates,
the Java client's cumulative counts are given (record-send-total,
record-error-total, record-retry-total, request-total).

Windows as kafka-python's (and Java's) defaults: a statistic covers the last two
samples of 30 s each; a rate divides its sum by the time they cover, counted as at
least one full window (so a rate does not jump on the first event); an average or
maximum with no event in the window is 0.0 or -inf, as kafka-python's.

What is recorded where, always per batch or per request, never per record:

    a batch handed to the sender (accumulator)  record-send, byte, batch-size,
                                                compression-rate, record-queue-time
    a batch completed with an error             record-error
    a batch resent (sender)                     record-retry
    a Produce request built (sender)            request, records-per-request
    its answer (sender)                         request-latency, throttle-time (Produce)

Threads: recorded from the caller's threads, the linger thread and the I/O threads;
every statistic is guarded by ProducerMetrics._lock, held for a few additions.
"""
import threading
import time

_WINDOW_NS = 30 * 1_000_000_000  # a sample's span: kafka-python's time_window_ms
_SAMPLES = 2                      # samples kept: kafka-python's samples


class _Stat:
    """One quantity over the sliding window, and its all-time count and sum;
    ProducerMetrics._record_locked() adds to it.

    Guarded by the owning ProducerMetrics' lock."""

    __slots__ = ("samples", "count_total", "sum_total")

    def __init__(self):
        self.samples = []  # [start_ns, events, sum, max], oldest first
        self.count_total = 0
        self.sum_total = 0

    def _live(self, now_ns):
        return [s for s in self.samples if now_ns - s[0] < _SAMPLES * _WINDOW_NS]

    def avg(self, now_ns):
        live = self._live(now_ns)
        events = sum(s[1] for s in live)
        return sum(s[2] for s in live) / events if events else 0.0

    def max(self, now_ns):
        return float(max((s[3] for s in self._live(now_ns)), default=float("-inf")))

    def rate(self, now_ns, events=False):
        """Sum (events=True: events) per second over the window, the window counted
        as at least one full sample plus the current one (kafka-python's Rate)."""
        live = self._live(now_ns)
        if not live:
            return 0.0
        elapsed_ns = now_ns - live[0][0]
        full_samples = elapsed_ns // _WINDOW_NS
        if full_samples < _SAMPLES - 1:
            elapsed_ns += (_SAMPLES - 1 - full_samples) * _WINDOW_NS
        return sum(s[1] if events else s[2] for s in live) / (elapsed_ns / 1e9)


class ProducerMetrics:
    """The statistics behind Producer.metrics(); thread-safe (see the module)."""

    def __init__(self):
        self._lock = threading.Lock()
        # Guarded by _lock: (scope, quantity) -> _Stat; scope is None (the
        # producer), ("topic", name) or ("node", id).
        self._stats = {}

    def _record_locked(self, entries, now_ns):
        """With _lock held: records each (scope, quantity, value) of entries.  One
        call for all of an event's statistics, their updates inline: this runs for
        every batch and every Produce request (a call per statistic was six Python
        calls per request on the I/O thread)."""
        for scope, quantity, value in entries:
            stat = self._stats.get((scope, quantity))
            if stat is None:
                stat = self._stats[scope, quantity] = _Stat()
            stat.count_total += 1
            stat.sum_total += value
            samples = stat.samples
            if not samples or now_ns - samples[-1][0] >= _WINDOW_NS:
                samples.append([now_ns, 0, 0, float("-inf")])
                del samples[:-_SAMPLES]
            sample = samples[-1]
            sample[1] += 1
            sample[2] += value
            if value > sample[3]:
                sample[3] = value

    # -- recording ----------------------------------------------------------------------

    def batch_sent(self, topic, records, uncompressed_bytes, sealed_bytes, queue_time_ms):
        """A sealed batch handed to the sender (the accumulator's draining thread)."""
        now_ns = time.monotonic_ns()
        compression_rate = sealed_bytes / uncompressed_bytes if uncompressed_bytes else 1.0
        scope = ("topic", topic)
        with self._lock:
            self._record_locked((
                (None, "records", records), (scope, "records", records),
                (None, "bytes", sealed_bytes), (scope, "bytes", sealed_bytes),
                (None, "compression-rate", compression_rate),
                (scope, "compression-rate", compression_rate),
                (None, "batch-size", sealed_bytes), (None, "queue-time", queue_time_ms)),
                now_ns)

    def batch_failed(self, topic, records):
        """A batch completed with an error: its records failed."""
        self._record_for_topic("errors", topic, records)

    def batch_retried(self, topic, records):
        """A batch queued again to be resent (the sender)."""
        self._record_for_topic("retries", topic, records)

    def request_sent(self, node_id, records):
        """A Produce request of `records` records built for node_id (an I/O thread)."""
        now_ns = time.monotonic_ns()
        with self._lock:
            self._record_locked(((None, "records-per-request", records),
                                 (None, "requests", 1), (("node", node_id), "requests", 1)),
                                now_ns)

    def response(self, node_id, latency_ms, throttle_time_ms):
        """The answer to a Produce request (an I/O thread)."""
        now_ns = time.monotonic_ns()
        with self._lock:
            self._record_locked(((None, "request-latency", latency_ms),
                                 (("node", node_id), "request-latency", latency_ms),
                                 (None, "throttle-time", throttle_time_ms)), now_ns)

    def _record_for_topic(self, quantity, topic, value):
        now_ns = time.monotonic_ns()
        with self._lock:
            self._record_locked(((None, quantity, value), (("topic", topic), quantity, value)),
                                now_ns)

    # -- reading ------------------------------------------------------------------------

    def groups(self):
        """{group: {name: value}}: the producer's group, and each topic's and
        broker's that has recorded something."""
        now_ns = time.monotonic_ns()
        with self._lock:
            scopes = {None: {}}
            for (scope, quantity), stat in self._stats.items():
                scopes.setdefault(scope, {})[quantity] = stat
            return {_group_name(scope): _named(scope, stats, now_ns)
                    for scope, stats in scopes.items()}


def _group_name(scope):
    if scope is None:
        return "producer-metrics"
    kind, name = scope
    if kind == "topic":
        return f"producer-topic-metrics.{name}"
    return f"producer-node-metrics.node-{name}"


def _named(scope, stats, now_ns):
    """kafka-python's names for a scope's statistics (called with the lock held)."""
    out = {}

    def stat(quantity):
        return stats.get(quantity) or _Stat()

    if scope is None or scope[0] == "topic":
        out["record-send-rate"] = stat("records").rate(now_ns)
        out["record-send-total"] = stat("records").sum_total
        out["byte-rate"] = stat("bytes").rate(now_ns)
        out["record-error-rate"] = stat("errors").rate(now_ns)
        out["record-error-total"] = stat("errors").sum_total
        out["record-retry-rate"] = stat("retries").rate(now_ns)
        out["record-retry-total"] = stat("retries").sum_total
    if scope is None:
        out["compression-rate-avg"] = stat("compression-rate").avg(now_ns)
        out["batch-size-avg"] = stat("batch-size").avg(now_ns)
        out["batch-size-max"] = stat("batch-size").max(now_ns)
        out["record-queue-time-avg"] = stat("queue-time").avg(now_ns)
        out["record-queue-time-max"] = stat("queue-time").max(now_ns)
        out["records-per-request-avg"] = stat("records-per-request").avg(now_ns)
        out["request-rate"] = stat("requests").rate(now_ns, events=True)
        out["request-latency-avg"] = stat("request-latency").avg(now_ns)
        out["request-latency-max"] = stat("request-latency").max(now_ns)
        out["throttle-time-avg"] = stat("throttle-time").avg(now_ns)
        out["throttle-time-max"] = stat("throttle-time").max(now_ns)
    elif scope[0] == "topic":
        out["compression-rate"] = stat("compression-rate").avg(now_ns)
    else:
        out["request-rate"] = stat("requests").rate(now_ns, events=True)
        out["request-total"] = stat("requests").count_total
        out["request-latency-avg"] = stat("request-latency").avg(now_ns)
        out["request-latency-max"] = stat("request-latency").max(now_ns)
    return out
