"""Producer.metrics() against a real broker: kafka-python's groups and names, with
values that agree with what the run did (records acknowledged, batches sent, bytes
on the wire) and with kafka-python's own KafkaProducer.metrics() names."""
import random
import time

import pytest
from kafka import KafkaProducer as KafkaPythonProducer

from netkafka import Producer
from netkafka.producer._metrics import SAMPLES, WINDOW_NS, Stat
from netkafka.producer.metrics import ProducerMetrics
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

# Names netkafka gives beyond kafka-python's: the Java client's cumulative counts and
# buffer gauges.
JAVA_ONLY = {"record-send-total", "record-error-total", "record-retry-total",
             "buffer-total-bytes", "buffer-available-bytes", "request-total",
             "batch-split-total"}


def _node_groups(groups):
    return {name: values for name, values in groups.items()
            if name.startswith("producer-node-metrics.node-")}


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_metrics_agree_with_a_real_produce_run(kafka_broker, topic_name, compression):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    count = 20_000
    started = time.monotonic()
    with Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, batch_size=16384,
                  compression_type=compression) as p:
        futures = [p.send(topic_name, b"value-%06d " % i * 4, key=b"k%d" % (i % 100))
                   for i in range(count)]
        p.flush(60)
        assert all(f.succeeded() for f in futures)
        groups = p.metrics()
    elapsed_s = time.monotonic() - started
    assert len(read_topic(kafka_broker.bootstrap, topic_name, count)) == count
    own = groups["netkafka"]
    producer = groups["producer-metrics"]
    topic = groups[f"producer-topic-metrics.{topic_name}"]
    assert own["records_acknowledged"] == count
    assert producer["record-send-total"] == topic["record-send-total"] == count
    assert producer["record-error-total"] == topic["record-error-total"] == 0
    assert producer["record-retry-total"] == 0
    # Rates: the records over kafka-python's window (at least 30 s, or the run).
    assert count / (30 + elapsed_s) <= producer["record-send-rate"] <= count / 30
    assert producer["record-send-rate"] == pytest.approx(topic["record-send-rate"])
    assert producer["byte-rate"] == pytest.approx(own["bytes_sent"] / 30, rel=0.5)
    # Batches: the sealed bytes the accumulator handed over.
    assert producer["batch-size-avg"] == pytest.approx(own["bytes_sent"] / own["batches_sent"])
    assert producer["batch-size-avg"] <= producer["batch-size-max"] <= 16384
    if compression is None:
        assert producer["compression-rate-avg"] == topic["compression-rate"] == 1.0
    else:
        assert 0 < producer["compression-rate-avg"] < 0.5  # repetitive values
    assert 0 <= producer["record-queue-time-avg"] <= producer["record-queue-time-max"]
    # Requests: every record went in exactly one (no retries), to the one broker.
    (node,) = _node_groups(groups).values()
    assert producer["records-per-request-avg"] * node["request-total"] == pytest.approx(count)
    assert producer["request-rate"] == pytest.approx(node["request-rate"])
    assert 0 < producer["request-latency-avg"] <= producer["request-latency-max"]
    assert node["request-latency-max"] == producer["request-latency-max"]
    assert producer["throttle-time-max"] == 0
    assert 0 < producer["buffer-available-bytes"] <= producer["buffer-total-bytes"]


def test_metrics_count_refused_records_as_errors(kafka_broker, topic_name):
    # The broker refuses batches above the topic's max.message.bytes (not retriable).
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1,
                 config={"max.message.bytes": "2000"})
    with Producer(bootstrap_servers=kafka_broker.bootstrap, retries=0) as p:
        good = p.send(topic_name, b"ok")
        p.flush(30)
        bad = [p.send(topic_name, b"x" * 5000) for _ in range(3)]
        p.flush(30)
        groups = p.metrics()
    assert good.succeeded() and all(f.failed() for f in bad)
    producer = groups["producer-metrics"]
    assert producer["record-error-total"] == groups["netkafka"]["records_failed"] == 3
    assert groups[f"producer-topic-metrics.{topic_name}"]["record-error-total"] == 3
    assert producer["record-send-total"] == 4  # handed to the broker, refused there
    assert producer["record-error-rate"] > 0


def test_metric_names_are_kafka_pythons(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    reference = KafkaPythonProducer(bootstrap_servers=kafka_broker.bootstrap)
    try:
        reference.send(topic_name, b"v").get(30)
        theirs = reference.metrics()
    finally:
        reference.close()
    with Producer(bootstrap_servers=kafka_broker.bootstrap) as p:
        p.send(topic_name, b"v").get(30)
        ours = p.metrics()
    for group in ("producer-metrics", f"producer-topic-metrics.{topic_name}"):
        assert set(ours[group]) - JAVA_ONLY <= set(theirs[group]), group
    (node,) = _node_groups(ours)  # named by the broker's id, as kafka-python names it
    assert set(ours[node]) - JAVA_ONLY <= set(theirs[node])
    # The core of kafka-python's producer group is there.
    assert {"record-send-rate", "record-error-rate", "record-retry-rate", "byte-rate",
            "batch-size-avg", "batch-size-max", "compression-rate-avg",
            "record-queue-time-avg", "record-queue-time-max", "records-per-request-avg",
            "request-rate", "request-latency-avg", "request-latency-max",
            "throttle-time-avg", "throttle-time-max"} <= set(ours["producer-metrics"])


class _ReferenceStat:
    """The window as metrics.py documents it, written plainly: every sample a list
    [start_ns, events, sum, max], the last SAMPLES kept."""

    def __init__(self):
        self.samples, self.count_total, self.sum_total = [], 0, 0

    def add(self, value, now_ns):
        self.count_total += 1
        self.sum_total += value
        if not self.samples or now_ns - self.samples[-1][0] >= WINDOW_NS:
            self.samples = (self.samples + [[now_ns, 0, 0, float("-inf")]])[-SAMPLES:]
        sample = self.samples[-1]
        sample[1] += 1
        sample[2] += value
        sample[3] = max(sample[3], value)

    def _live(self, now_ns):
        return [s for s in self.samples if now_ns - s[0] < SAMPLES * WINDOW_NS]

    def avg(self, now_ns):
        live = self._live(now_ns)
        events = sum(s[1] for s in live)
        return sum(s[2] for s in live) / events if events else 0.0

    def max(self, now_ns):
        return max((s[3] for s in self._live(now_ns)), default=float("-inf"))

    def rate(self, now_ns, events=False):
        live = self._live(now_ns)
        if not live:
            return 0.0
        elapsed_ns = now_ns - live[0][0]
        elapsed_ns += max(0, SAMPLES - 1 - elapsed_ns // WINDOW_NS) * WINDOW_NS
        return sum(s[1] if events else s[2] for s in live) / (elapsed_ns / 1e9)


def test_stat_window_rolls_and_expires_samples():
    w, t0 = WINDOW_NS, 10 * WINDOW_NS
    stat = Stat(True)
    assert (stat.avg(t0), stat.max(t0), stat.rate(t0), stat.sum_total) == (
        0.0, float("-inf"), 0.0, 0)
    stat.add(10, t0)
    stat.add(30, t0 + w // 2)  # the same sample
    assert (stat.avg(t0 + w // 2), stat.max(t0 + w // 2)) == (20.0, 30.0)
    # Half a window elapsed, counted as one and a half (one full sample at least).
    assert stat.rate(t0 + w // 2) == pytest.approx(40 / (1.5 * w / 1e9))
    assert stat.rate(t0 + w // 2, events=True) == pytest.approx(2 / (1.5 * w / 1e9))
    stat.add(5, t0 + w)  # a window after the first sample began: a new one
    assert (stat.avg(t0 + w), stat.max(t0 + w)) == (15.0, 30.0)
    stat.add(7, t0 + 2 * w + 1)  # a third sample: the first drops out
    assert (stat.avg(t0 + 2 * w + 1), stat.max(t0 + 2 * w + 1)) == (6.0, 7.0)
    # Two windows after the second began, only the third is live.
    assert (stat.avg(t0 + 3 * w), stat.max(t0 + 3 * w)) == (7.0, 7.0)
    assert stat.rate(t0 + 3 * w) == pytest.approx(7 / ((2 * w - 1) / 1e9))
    later = t0 + 5 * w
    assert (stat.avg(later), stat.max(later), stat.rate(later)) == (0.0, float("-inf"), 0.0)
    assert (stat.count_total, stat.sum_total) == (4, 52)
    assert isinstance(stat.sum_total, int) and isinstance(Stat().sum_total, float)


def test_stat_agrees_with_the_plain_window_on_random_events():
    rng = random.Random(20261127)
    for _ in range(200):
        native, reference = Stat(), _ReferenceStat()
        now_ns = rng.randrange(WINDOW_NS * 4)
        for _ in range(rng.randrange(1, 30)):
            now_ns += rng.choice([0, 1, WINDOW_NS // 3, WINDOW_NS - 1, WINDOW_NS,
                                  2 * WINDOW_NS, rng.randrange(3 * WINDOW_NS)])
            value = rng.uniform(-5, 100)
            native.add(value, now_ns)
            reference.add(value, now_ns)
            for probe_ns in (now_ns, now_ns + rng.randrange(3 * WINDOW_NS)):
                assert native.avg(probe_ns) == pytest.approx(reference.avg(probe_ns))
                assert native.max(probe_ns) == reference.max(probe_ns)
                for events in (False, True):
                    assert native.rate(probe_ns, events) == pytest.approx(
                        reference.rate(probe_ns, events))
        assert native.count_total == reference.count_total
        assert native.sum_total == pytest.approx(reference.sum_total)


def test_recorded_statistics_are_copies_and_scopes_appear_with_their_first_event():
    metrics = ProducerMetrics()
    assert set(metrics.groups()) == {"producer-metrics"}
    metrics.batch_sent("a", 3, 300, 150, 2.0)
    snapshot = metrics.stats()
    metrics.batch_sent("a", 5, 500, 500, 4.0)
    metrics.batch_failed("b", 2)
    metrics.request_sent(7, 8)
    metrics.response(7, 1.5, 0)
    assert snapshot[("topic", "a"), "records"].sum_total == 3  # taken before the second
    groups = metrics.groups()
    assert set(groups) == {"producer-metrics", "producer-topic-metrics.a",
                           "producer-topic-metrics.b", "producer-node-metrics.node-7"}
    producer = groups["producer-metrics"]
    assert (producer["record-send-total"], producer["record-error-total"]) == (8, 2)
    assert producer["batch-size-avg"] == 325.0 and producer["batch-size-max"] == 500.0
    assert producer["compression-rate-avg"] == 0.75
    assert producer["record-queue-time-max"] == 4.0
    assert groups["producer-topic-metrics.b"]["record-error-total"] == 2
    assert groups["producer-topic-metrics.b"]["record-send-total"] == 0
    assert groups["producer-node-metrics.node-7"]["request-total"] == 1
    assert producer["records-per-request-avg"] == 8.0
