"""Large and growing topics (issue 18 item 3, issue 14): partitions added to a topic in
use reach the producer's partitioner; a topic of 10,000 partitions works; a broker too
busy to answer Metadata in time is named as the reason when a send() times out.  Keyed
records are placed by kafka-python's murmur2 (an independent copy of the Java rule) and
read back by confluent-kafka.

The 10,000-partition send() that timed out ("not in the last metadata answer yet")
in bench/test_bench_scale.py: that benchmark made two such topics (one per client) on
the session's broker, whose 512 MiB heap holds about 10,000 partitions
(broker.BROKER_HEAP_PARTITIONS): the broker spent most of its time collecting garbage
(seen again in a re-run), too starved to answer the topic's Metadata requests in time
(inferred).  test_a_topic_of_many_partitions shows the client with 10,000
partitions on a broker whose heap holds them (make big-topic: creating them takes
90-210 s on one loaded broker); test_a_broker_too_slow_to_answer_metadata_is_named
reproduces the client's side in the suite, answers held back past request_timeout_ms.
"""
import os
import threading
import time

import pytest
from confluent_kafka.admin import NewPartitions
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from broker_proxy import MetadataProxy
from netkafka import Producer
from netkafka.errors import KafkaTimeoutError, NoSuchPartitionError
from netkafka.testing.admin import (
    admin_client, create_topic, wait_for_leaders, wait_for_serving_leaders,
)
from netkafka.testing.broker import (
    BROKER_HEAP_PARTITIONS, FAST_START_JVM_OPTIONS, Cluster, jvm_options_with_heap,
)
from netkafka.testing.reader import read_topic

WAIT_S = 60.0
KEYS = [b"key-%d" % i for i in range(64)]
# make big-topic sets it (10,000); 0 skips test_a_topic_of_many_partitions.
BIG_TOPIC_PARTITIONS = int(os.environ.get("NETKAFKA_BIG_TOPIC_PARTITIONS", "0"))
BIG_TOPIC_WAIT_S = 900.0
# 512 MiB per BROKER_HEAP_PARTITIONS, and as much again for headroom.
BIG_TOPIC_HEAP_MIB = 1024 * max(1, -(-BIG_TOPIC_PARTITIONS // BROKER_HEAP_PARTITIONS))


def java_partition(key, partitions):
    return (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


def grow(bootstrap, topic, partitions):
    """create_partitions to `partitions`, then waits until each one's leader serves."""
    admin = admin_client(bootstrap)
    for future in admin.create_partitions([NewPartitions(topic, partitions)],
                                          operation_timeout=WAIT_S).values():
        future.result(timeout=WAIT_S)
    wait_for_leaders(admin, topic, partitions, WAIT_S)
    wait_for_serving_leaders(admin, topic, partitions, WAIT_S)


def send_keyed(producer, topic, tag):
    """One record per key, value tag + key; returns {value: partition acknowledged}."""
    futures = {tag + key: producer.send(topic, tag + key, key) for key in KEYS}
    return {value: future.get(WAIT_S).partition for value, future in futures.items()}


def check_read_back(bootstrap, topic, placed, timeout_s=WAIT_S):
    """Every record acknowledged is in the log once, in the partition its ack named."""
    records = read_topic(bootstrap, topic, len(placed), timeout_s=timeout_s)
    assert sorted((r.value, r.partition) for r in records) == sorted(placed.items())


def test_partitions_added_to_a_live_topic_are_used_after_a_refresh(kafka_broker, topic_name):
    """create_partitions while the producer sends: after the next metadata refresh
    (metadata_max_age_ms) keyed records go where the Java client puts them with the
    new partition count, new partitions included."""
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0,
                  metadata_max_age_ms=500) as producer:
        placed = send_keyed(producer, topic_name, b"before-")
        assert placed == {b"before-" + k: java_partition(k, 2) for k in KEYS}
        grow(bootstrap, topic_name, 4)
        deadline = time.monotonic() + WAIT_S
        rounds = 0
        while True:  # the refresh comes within metadata_max_age_ms; sends go on meanwhile
            rounds += 1
            sent = send_keyed(producer, topic_name, b"round-%d-" % rounds)
            placed.update(sent)
            if max(sent.values()) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        after = send_keyed(producer, topic_name, b"after-")
        placed.update(after)
    assert after == {b"after-" + k: java_partition(k, 4) for k in KEYS}
    assert {2, 3} <= set(after.values())
    check_read_back(bootstrap, topic_name, placed)


def test_partitions_added_while_send_waits_for_the_topic_are_used(
        kafka_broker, topic_name, monkeypatch):
    """The race of a send() thread and the metadata listener: send() reads the topic's
    partitions (2), the topic grows to 4 and that answer is handled (the listener skips
    the topic, which the accumulator does not know yet), then send() gives the
    accumulator what it read.  The new partitions must still be used: they used to be
    ignored for good, later refreshes moving no leader."""
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0,
                  metadata_max_age_ms=500) as producer:
        metadata = producer._metadata
        wait_for_topic, on_metadata = metadata.wait_for_topic, producer.on_metadata
        grown = threading.Event()  # the listener has handled an answer with 4 partitions

        def on_metadata_then_tell(snapshot, moved):
            on_metadata(snapshot, moved)
            info = snapshot.topics.get(topic_name)
            if info is not None and len(info.partitions) == 4:
                grown.set()

        def wait_then_grow(topic, timeout_s):
            info = wait_for_topic(topic, timeout_s)
            assert len(info.partitions) == 2
            grow(bootstrap, topic_name, 4)
            metadata.request_update()
            assert grown.wait(WAIT_S), "no metadata answer with 4 partitions"
            return info  # what send() read before the partitions were added

        monkeypatch.setattr(metadata, "wait_for_topic", wait_then_grow)
        monkeypatch.setattr(producer, "on_metadata", on_metadata_then_tell)
        first = producer.send(topic_name, b"first", KEYS[0]).get(WAIT_S)
        placed = {b"first": first.partition}
        # Several refreshes (metadata_max_age_ms), each answer the same as the last.
        time.sleep(1.5)
        after = send_keyed(producer, topic_name, b"after-")
        placed.update(after)
    assert after == {b"after-" + k: java_partition(k, 4) for k in KEYS}
    check_read_back(bootstrap, topic_name, placed)


def test_a_record_for_a_partition_added_since_the_last_refresh_is_delivered(
        kafka_broker, topic_name):
    """A record sent to a partition added after the producer's last metadata answer: the
    producer asks again before refusing the partition, as the Java client's send() does,
    and delivers it.  It used to be refused at once (NoSuchPartitionError) until the next
    periodic refresh, metadata_max_age_ms later.  A partition the topic still does not
    have is refused after that one answer, not after max_block_ms."""
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=1)
    with Producer(bootstrap_servers=bootstrap, acks=1, metadata_max_age_ms=600000,
                  max_block_ms=30000) as producer:
        producer.send(topic_name, b"first", partition=0).get(WAIT_S)
        grow(bootstrap, topic_name, 2)
        assert producer.send(topic_name, b"new", partition=1).get(WAIT_S).partition == 1
        started = time.monotonic()
        with pytest.raises(NoSuchPartitionError, match="has no partition 2"):
            producer.send(topic_name, b"none", partition=2)
        assert time.monotonic() - started < 10
    check_read_back(bootstrap, topic_name, {b"first": 0, b"new": 1})


@pytest.fixture(scope="module")
def big_topic_broker(tmp_path_factory):
    """A broker of its own whose heap holds BIG_TOPIC_PARTITIONS partitions."""
    with Cluster(1, directory=tmp_path_factory.mktemp("kafka-big-topic"),
                 jvm_options=jvm_options_with_heap(FAST_START_JVM_OPTIONS,
                                                   BIG_TOPIC_HEAP_MIB)) as cluster:
        yield cluster


@pytest.mark.skipif(not BIG_TOPIC_PARTITIONS,
                    reason="slow: make big-topic (NETKAFKA_BIG_TOPIC_PARTITIONS=10000)")
def test_a_topic_of_many_partitions(big_topic_broker, topic_name):
    """A topic made in steps, as a large one must be (admin.PARTITIONS_PER_REQUEST): a
    fresh producer's first send() finds every partition, a record to each partition and
    keyed records land where they should, and all are read back."""
    bootstrap, partitions = big_topic_broker.bootstrap, BIG_TOPIC_PARTITIONS
    started = time.perf_counter()
    create_topic(bootstrap, topic_name, partitions, timeout_s=BIG_TOPIC_WAIT_S)
    print(f"{partitions} partitions made and serving in {time.perf_counter() - started:.0f} s")
    with Producer(bootstrap_servers=bootstrap, acks=1) as producer:
        futures = {b"p-%d" % p: producer.send(topic_name, b"p-%d" % p, partition=p)
                   for p in range(partitions)}
        placed = {value: future.get(WAIT_S).partition for value, future in futures.items()}
        keyed = send_keyed(producer, topic_name, b"keyed-")
    assert placed == {b"p-%d" % p: p for p in range(partitions)}
    assert keyed == {b"keyed-" + k: java_partition(k, partitions) for k in KEYS}
    # The reader takes over 60 s for 10,000 partitions on a loaded machine.
    check_read_back(bootstrap, topic_name, {**placed, **keyed}, BIG_TOPIC_WAIT_S)


def test_a_broker_too_slow_to_answer_metadata_is_named(kafka_broker, topic_name):
    """Metadata answers about the topic held back past request_timeout_ms (as from a
    broker collecting garbage): send() times out naming the timed-out request, not
    only "not in the last metadata answer yet"; once answers come in time again, the
    same producer sends to the topic."""
    create_topic(kafka_broker.bootstrap, topic_name)
    other = f"{topic_name}-other"
    create_topic(kafka_broker.bootstrap, other)
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    proxy = MetadataProxy((host, int(port)))
    held_s = 2.0  # beyond request_timeout_ms below

    def hold_back(fields):
        if any(topic.name == topic_name for topic in fields["topics"]):
            time.sleep(held_s)
        return fields

    try:
        with Producer(bootstrap_servers=proxy.bootstrap, acks=1, request_timeout_ms=1000,
                      max_block_ms=4000, retry_backoff_ms=100) as producer:
            producer.send(other, b"bootstrapped").get(WAIT_S)
            proxy.set_rewrite(hold_back)
            with pytest.raises(KafkaTimeoutError) as failure:
                producer.send(topic_name, b"lost")
            message = str(failure.value)
            assert "not in the last metadata answer yet; the last Metadata request " \
                   "failed:" in message
            assert "within request_timeout_ms=1000" in message
            proxy.set_rewrite(None)
            producer.send(topic_name, b"later").get(WAIT_S)
    finally:
        proxy.close()
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"later"]
