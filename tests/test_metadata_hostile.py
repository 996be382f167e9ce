"""Values inside a well-formed Metadata answer are checked before use: each hostile
answer, served by a fake broker in front of the real one (tests/broker_proxy.py), is
refused with a ProtocolError naming what was wrong, logged, and the producer goes on with
its last good metadata; records sent meanwhile are read back from the real broker."""
import logging
import re
import time

import pytest

from broker_proxy import MetadataProxy
from netkafka import Producer
from netkafka.errors import KafkaTimeoutError
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

PARTITIONS = 2


def _broker(fields, **changes):
    (broker,) = fields["brokers"]
    return type(broker)(**{"node_id": broker.node_id, "host": broker.host,
                           "port": broker.port, "rack": broker.rack, **changes})


def _with_brokers(*make):
    def rewrite(fields):
        return {**fields, "brokers": [m(fields) for m in make]}
    return rewrite


def _with_partitions(change):
    """A rewrite of every topic's partition list: change(list) -> list, of
    kafka-python's partition objects."""
    def rewrite(fields):
        topics = []
        for topic in fields["topics"]:
            parts = change(list(topic.partitions))
            topics.append(type(topic)(**{**_fields_of(topic), "partitions": parts}))
        return {**fields, "topics": topics}
    return rewrite


def _with_partition(**changes):
    """Partition 1 of every topic changed."""
    def change(parts):
        parts[1] = type(parts[1])(**{**_fields_of(parts[1]), **changes})
        return parts
    return _with_partitions(change)


def _fields_of(obj):
    return {name: getattr(obj, name) for name in obj.fields}


def _twice(parts):
    return parts + [parts[0]]


def _topic_listed_twice(fields):
    return {**fields, "topics": fields["topics"] * 2}


def _another_topic_with_its_id(fields):
    """A second topic, other name, same topic id (Produce v13+ names topics by id)."""
    (topic,) = fields["topics"]
    other = type(topic)(**{**_fields_of(topic), "name": topic.name + "-other"})
    return {**fields, "topics": [topic, other]}


HOSTILE = {
    # What the issue found: an index that sized the accumulator's table (OOM at 2**31-1,
    # 763 MB and a record "delivered" to partition 50,000,000), a negative index (a
    # RecursionError in send()), no brokers (ValueError: min() arg is an empty sequence).
    "index-2**31-1": (_with_partition(partition_index=2**31 - 1),
                      r"partition 2147483647: the index is outside 0\.\.1"),
    "index-50M": (_with_partition(partition_index=50_000_000),
                  r"partition 50000000: the index is outside 0\.\.1"),
    "negative-index": (_with_partition(partition_index=-1),
                       r"partition -1: the index is outside 0\.\.1"),
    "no-brokers": (lambda fields: {**fields, "brokers": []}, r"the answer lists no brokers"),
    # Indexes that are not exactly 0..count-1.
    "duplicate-index": (_with_partition(partition_index=0), r"partition 0 is listed twice"),
    "missing-index": (_with_partition(partition_index=2),
                      r"partition 2: the index is outside 0\.\.1"),
    "extra-partition": (_with_partitions(_twice), r"partition 0 is listed twice"),
    # Ids and references.
    "unlisted-leader": (_with_partition(leader_id=7),
                        r"leader 7 is not among the listed brokers \[1\]"),
    "negative-leader": (_with_partition(leader_id=-2),
                        r"leader -2 is not among the listed brokers \[1\]"),
    "negative-epoch": (_with_partition(leader_epoch=-5), r"leader epoch -5 is negative"),
    "negative-replica": (_with_partition(replica_nodes=[1, -3]),
                         r"replicas \[1, -3\] holds a negative node id"),
    "negative-node-id": (_with_brokers(lambda f: _broker(f, node_id=-4)),
                         r"broker -4 has a negative node id"),
    "duplicate-broker": (_with_brokers(_broker, _broker), r"broker 1 is listed twice"),
    "topic-listed-twice": (_topic_listed_twice, r"topic '[^']+' is listed twice"),
    "shared-topic-id": (_another_topic_with_its_id,
                        r"topics '[^']+' and '[^']+-other' have the same topic id"),
    # Hosts and ports.
    "empty-host": (_with_brokers(lambda f: _broker(f, host="")),
                   r"broker 1 has host '', not a host name or address"),
    "control-char-host": (_with_brokers(lambda f: _broker(f, host="a\x00b")),
                          r"broker 1 has host 'a\\x00b', not a host name or address"),
    "port-0": (_with_brokers(lambda f: _broker(f, port=0)), r"broker 1 has port 0, outside"),
    "port-65536": (_with_brokers(lambda f: _broker(f, port=65536)),
                   r"broker 1 has port 65536, outside 1\.\.65535"),
    "negative-port": (_with_brokers(lambda f: _broker(f, port=-1)),
                      r"broker 1 has port -1, outside"),
}


@pytest.fixture
def proxy(kafka_broker):
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    proxy = MetadataProxy((host, int(port)))
    yield proxy
    proxy.close()


def _wait_for(condition, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize("rewrite, message", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_answer_is_refused_and_the_last_good_metadata_kept(
        kafka_broker, proxy, topic_name, caplog, rewrite, message):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=PARTITIONS)
    caplog.set_level(logging.WARNING, logger="netkafka.client.metadata")
    with Producer(bootstrap_servers=proxy.bootstrap, retry_backoff_ms=10) as producer:
        producer.send(topic_name, b"before", partition=1).get(30)
        good = producer._metadata.snapshot()
        proxy.set_rewrite(rewrite)
        producer._metadata.request_update()
        _wait_for(lambda: any("refused" in r.getMessage() for r in caplog.records))
        assert proxy.rewritten_count() >= 1
        # Still hostile: the record goes where the last good answer says.
        producer.send(topic_name, b"during", partition=1).get(30)
        assert producer._metadata.snapshot() is good
        proxy.set_rewrite(None)
    (record,) = [r for r in caplog.records if "refused" in r.getMessage()][:1]
    assert record.levelno == logging.WARNING
    text = record.getMessage()
    assert f"127.0.0.1:{proxy.port}" in text
    assert "keeps its last good answer" in text
    assert re.search(message, text), text
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=2)
    assert [(r.partition, r.value) for r in read] == [(1, b"before"), (1, b"during")]


def test_undecodable_host_is_refused_and_the_last_good_metadata_kept(
        kafka_broker, proxy, topic_name, caplog):
    """A host that is not UTF-8 fails the answer's decoding (the connection closes, as
    for any malformed answer); the cache keeps its last good answer all the same."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=PARTITIONS)
    caplog.set_level(logging.WARNING, logger="netkafka.client.metadata")
    with Producer(bootstrap_servers=proxy.bootstrap, retry_backoff_ms=10) as producer:
        producer.send(topic_name, b"before").get(30)
        good = producer._metadata.snapshot()
        proxy.set_rewrite(_with_brokers(lambda f: _broker(f, host="QQQQ")),
                          replace=(b"QQQQ", b"\xff\xfeQQ"))
        producer._metadata.request_update()
        _wait_for(lambda: any("not UTF-8" in r.getMessage() for r in caplog.records))
        assert producer._metadata.snapshot() is good
        proxy.set_rewrite(None)
        producer.send(topic_name, b"after").get(30)
    assert len(read_topic(kafka_broker.bootstrap, topic_name, expected_count=2)) == 2


def test_hostile_first_answer_fails_the_send_in_time_with_the_reason(proxy, topic_name):
    """With no good answer to fall back on, send() waits max_block_ms and then names
    what was wrong with each answer (it used to fail with ValueError: min() arg is an
    empty sequence)."""
    proxy.set_rewrite(lambda fields: {**fields, "brokers": []})
    with Producer(bootstrap_servers=proxy.bootstrap, max_block_ms=1500,
                  retry_backoff_ms=50) as producer:
        with pytest.raises(KafkaTimeoutError,
                           match=rf"{topic_name}.*127\.0\.0\.1:{proxy.port}.*Metadata answer "
                                 r"from .* refused: the answer lists no brokers"):
            producer.send(topic_name, b"x")
    assert proxy.rewritten_count() >= 2  # asked again, refused again


def test_an_answer_with_an_older_leader_epoch_keeps_the_newer_partition(
        kafka_broker, proxy, topic_name):
    """KIP-320: a broker that has not heard of the last leader election yet answers
    with the partition's old leader and an older leader epoch.  The cache keeps the
    partition it knows with the newer epoch, as the Java client does; it used to take
    whatever the last answer said (here: no leader, and the records waited)."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=PARTITIONS)
    proxy.set_rewrite(_with_partition(leader_epoch=5))
    with Producer(bootstrap_servers=proxy.bootstrap, retry_backoff_ms=10,
                  delivery_timeout_ms=10000, request_timeout_ms=5000) as producer:
        metadata = producer._metadata
        producer.send(topic_name, b"before", partition=1).get(30)
        leader = metadata.snapshot().topics[topic_name].partitions[1].leader
        assert metadata.snapshot().topics[topic_name].partitions[1].leader_epoch == 5

        def answered_with(rewrite):
            proxy.set_rewrite(rewrite)
            for _ in range(2):  # the second answer was asked for after the change
                updates = metadata.updates
                metadata.request_update()
                _wait_for(lambda: metadata.updates > updates)
            assert proxy.rewritten_count() >= 1
            return metadata.snapshot().topics[topic_name].partitions[1]

        stale = answered_with(_with_partition(leader_id=-1, leader_epoch=3))
        assert (stale.leader, stale.leader_epoch) == (leader, 5)
        producer.send(topic_name, b"during", partition=1).get(30)
        newer = answered_with(_with_partition(leader_epoch=7))
        assert (newer.leader, newer.leader_epoch) == (leader, 7)
        proxy.set_rewrite(None)
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=2)
    assert [(r.partition, r.value) for r in read] == [(1, b"before"), (1, b"during")]
