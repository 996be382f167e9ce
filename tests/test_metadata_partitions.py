"""Topics that grow: partitions added to a topic in use reach the producer's partitioner
(issue 18 item 3, issue 14).  Keyed records are placed by kafka-python's murmur2 (an
independent copy of the Java rule) and read back by confluent-kafka."""
import threading
import time

from confluent_kafka.admin import NewPartitions
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from netkafka import Producer
from netkafka.testing.admin import (
    admin_client, create_topic, wait_for_leaders, wait_for_serving_leaders,
)
from netkafka.testing.reader import read_topic

WAIT_S = 60.0
KEYS = [b"key-%d" % i for i in range(64)]


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


def check_read_back(bootstrap, topic, placed):
    """Every record acknowledged is in the log once, in the partition its ack named."""
    records = read_topic(bootstrap, topic, len(placed))
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
