"""Producer.metrics() against a real broker: kafka-python's groups and names, with
values that agree with what the run did (records acknowledged, batches sent, bytes
on the wire) and with kafka-python's own KafkaProducer.metrics() names."""
import time

import pytest
from kafka import KafkaProducer as KafkaPythonProducer

from netkafka import Producer
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

# Names netkafka gives beyond kafka-python's: the Java client's cumulative counts and
# buffer gauges.
JAVA_ONLY = {"record-send-total", "record-error-total", "record-retry-total",
             "buffer-total-bytes", "buffer-available-bytes", "request-total"}


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
