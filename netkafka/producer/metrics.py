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
record-error-total, record-retry-total, request-total, and batch-split-total: batches
refused as too large and split, from the sender's count).

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

Recording is native (_metrics.pyx, StatsRecorder): it runs for every batch and every
Produce request.  Threads: recorded from the caller's threads, the linger thread and the
I/O threads; read by metrics() from copies the recorder hands out under its mutex.
"""
import time

from netkafka.producer._metrics import StatsRecorder


class ProducerMetrics(StatsRecorder):
    """The statistics behind Producer.metrics(); thread-safe.  Recorded through
    StatsRecorder's methods: batch_sent(), batch_failed(), batch_retried(),
    request_sent(), response()."""

    def groups(self):
        """{group: {name: value}}: the producer's group, and each topic's and
        broker's that has recorded something."""
        now_ns = time.monotonic_ns()
        scopes = {None: {}}
        for (scope, quantity), stat in self.stats().items():
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
    """kafka-python's names for a scope's statistics (StatsRecorder makes every one of
    a scope's at once)."""
    out = {}
    stat = stats.__getitem__

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
