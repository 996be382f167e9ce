"""Delivery guarantees against a broker that is killed, restarted or frozen.

Every record ends acknowledged (and then it is in the topic where its future says,
once, in send order within its partition) or failed with an error in its future.
The topic is read back by confluent-kafka, independent of netkafka.
"""
import threading
import time

import pytest

from netkafka import KafkaTimeoutError, Producer
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic


def session_node(kafka_broker):
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (kill, restart, SIGSTOP)")
    return nodes[0]


def test_idempotent_stream_across_a_broker_kill_and_restart_has_no_duplicate_and_no_gap(
        kafka_broker, topic_name):
    node = session_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    total = 30000
    futures = []
    sent_enough = threading.Event()
    with Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, batch_size=4096,
                  retry_backoff_ms=100, request_timeout_ms=5000, max_block_ms=60000,
                  reconnect_backoff_max_ms=200) as p:
        assert p.config.enable_idempotence and p.config.acks == -1  # the defaults

        def stream():
            for i in range(total):
                futures.append(p.send(topic_name, value=b"%08d" % i))
                if i == total // 3:
                    sent_enough.set()
                if i % 500 == 0:
                    time.sleep(0.01)  # spread the stream over the restart

        sender = threading.Thread(target=stream)
        sender.start()
        assert sent_enough.wait(60)
        node.kill()  # SIGKILL: answers of requests on the wire are lost
        node.restart()
        sender.join(120)
        assert not sender.is_alive()
        p.flush(120)
        groups = p.metrics()
        metrics = groups["netkafka"]
    assert all(f.succeeded() for f in futures), [f.exception for f in futures if f.failed()][:3]
    assert metrics["sender_batches_retried"] > 0, "the restart hit no batch: test proves nothing"
    # kafka-python's view of the same: every resent batch's records, none failed.
    retried = groups["producer-metrics"]["record-retry-total"]
    assert retried >= metrics["sender_batches_retried"]
    assert groups[f"producer-topic-metrics.{topic_name}"]["record-retry-total"] == retried
    assert groups["producer-metrics"]["record-error-total"] == 0
    records = read_topic(kafka_broker.bootstrap, topic_name, total)
    values = [r.value for r in records]
    assert len(values) == total and len(set(values)) == total  # no duplicate, no gap
    placed = {(m.partition, m.offset): b"%08d" % i
              for i, m in enumerate(f.get(0) for f in futures)}
    assert {(r.partition, r.offset): r.value for r in records} == placed
    for partition in range(3):
        in_log = [r.value for r in records if r.partition == partition]
        assert in_log == sorted(in_log), f"partition {partition} is out of send order"


def test_delivery_timeout_fails_records_and_the_partition_recovers(kafka_broker, topic_name):
    node = session_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name)
    with Producer(bootstrap_servers=kafka_broker.bootstrap, request_timeout_ms=1000,
                  delivery_timeout_ms=2500, retry_backoff_ms=100, max_block_ms=30000) as p:
        p.send(topic_name, b"before").get(30)
        node.pause()
        try:
            started = time.monotonic()
            frozen = [p.send(topic_name, b"frozen-%d" % i) for i in range(5)]
            for future in frozen:
                with pytest.raises(KafkaTimeoutError):
                    future.get(30)
            waited_s = time.monotonic() - started
        finally:
            node.resume()
        assert 2.0 <= waited_s < 15
        # The partition's sequence has a hole now: it starts over from sequence 0
        # under the next epoch of the same producer id, and delivers again.
        after = [p.send(topic_name, b"after-%d" % i) for i in range(5)]
        p.flush(60)
        assert all(f.succeeded() for f in after), [f.exception for f in after]
        metrics = p.metrics()["netkafka"]
    assert metrics["producer_ids_fetched"] == 1
    assert metrics["producer_epoch_bumps"] >= 1 and metrics["partitions_restarted"] >= 1
    assert metrics["records_failed"] >= 5
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name)]
    # A timed-out record's fate is unknown to the producer (the frozen broker may
    # append it once it runs again); every acknowledged one is there, once, in order.
    assert values[0] == b"before" and values[-5:] == [b"after-%d" % i for i in range(5)]
    assert len(values) == len(set(values))


def test_acks_1_request_timed_out_on_a_frozen_broker_is_resent_and_counted(kafka_broker,
                                                                          topic_name):
    """acks=1 without idempotence is at-least-once: a request that times out closes the
    connection and its batches go again, and the frozen broker may still append the
    first copy when it runs.  A copy in the log beyond the first needs a resend, and
    every resend is counted: the extra copies are at most the resent batches' records
    (record-retry-total), so a count of 0 retries means no duplicate."""
    node = session_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name)
    with Producer(bootstrap_servers=kafka_broker.bootstrap, acks=1, enable_idempotence=False,
                  request_timeout_ms=1000, delivery_timeout_ms=60000, retry_backoff_ms=100,
                  max_block_ms=30000, reconnect_backoff_max_ms=200) as p:
        p.send(topic_name, b"before").get(30)
        node.pause()
        try:
            frozen = [p.send(topic_name, b"frozen-%d" % i) for i in range(5)]
            deadline = time.monotonic() + 30
            while p.metrics()["netkafka"]["sender_batches_retried"] == 0:
                assert time.monotonic() < deadline, "no request timed out within 30 s"
                time.sleep(0.1)
        finally:
            node.resume()
        p.flush(60)
        assert all(f.succeeded() for f in frozen), [f.exception for f in frozen]
        groups = p.metrics()
    retried_records = groups["producer-metrics"]["record-retry-total"]
    assert retried_records >= 1
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 6)]
    sent = [b"before"] + [b"frozen-%d" % i for i in range(5)]
    assert set(values) == set(sent)
    assert 0 <= len(values) - len(sent) <= retried_records, (values, retried_records)
