"""Cluster metadata: bootstrap, the cache and its refreshes, leaders, failover."""
import logging
import socket
import time

import pytest
from confluent_kafka import ElectionType, TopicPartition

from batch_helpers import as_read, io_stack, make_batch, new_buffer_pool, release_batches
from netkafka import Producer, errors
from netkafka.client import metadata as metadata_module
from netkafka.client.connection import ConnectionConfig
from netkafka.errors import KafkaTimeoutError
from netkafka.client.io_pool import IOPool
from netkafka.client.metadata import Metadata, parse_bootstrap_servers, request_metadata
from netkafka.testing.admin import admin_client, create_topic
from netkafka.testing.reader import read_topic


def dead_address():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def pool():
    pool = IOPool(ConnectionConfig(request_timeout_ms=10000, connect_timeout_ms=5000))
    yield pool
    pool.close()


def test_bootstrap_skips_a_dead_first_address(kafka_broker, pool):
    metadata = Metadata(pool, f"{dead_address()},{kafka_broker.bootstrap}")
    snapshot = metadata.wait_for_bootstrap(30)
    metadata.close()
    (broker,) = snapshot.brokers.values()
    assert f"{broker.host}:{broker.port}" == kafka_broker.bootstrap


def test_bootstrap_with_no_reachable_address_names_each_one(pool):
    first, second = dead_address(), dead_address()
    metadata = Metadata(pool, [first, second], retry_backoff_ms=50)
    with pytest.raises(KafkaTimeoutError) as failure:
        metadata.wait_for_bootstrap(1.0)
    metadata.close()
    message = str(failure.value)
    assert "no metadata from any bootstrap server within 1000 ms" in message
    assert f"{first}: cannot connect" in message and f"{second}: cannot connect" in message


@pytest.mark.parametrize("servers, message", [
    ("", "bootstrap_servers is empty"),
    ("127.0.0.1:http", "port 'http' is not a number"),
    ([42], "entry 42 is not 'host:port'"),
    ("127.0.0.1:70000", "is not 'host:port'"),
])
def test_bootstrap_servers_are_validated(servers, message):
    with pytest.raises(ValueError, match=message):
        parse_bootstrap_servers(servers)


def test_parse_bootstrap_servers_forms():
    assert parse_bootstrap_servers("a:1, b:2 ,[::1]:3,c") == [
        ("a", 1), ("b", 2), ("::1", 3), ("c", 9092)]
    assert parse_bootstrap_servers([("h", 5), "i:6"]) == [("h", 5), ("i", 6)]


def test_leader_of_every_partition(kafka_broker, pool, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    metadata = Metadata(pool, kafka_broker.bootstrap)
    try:
        info = metadata.wait_for_topic(topic_name, 30)
        leaders = [metadata.leader_for(topic_name, p, 5) for p in range(3)]
        with pytest.raises(errors.KafkaError, match=rf"{topic_name!r} has no partition 3 "
                                                    r"\(it has 3\)"):
            metadata.leader_for(topic_name, 3, 5)
    finally:
        metadata.close()
    assert sorted(info.partitions) == [0, 1, 2]
    assert info.topic_id is not None
    assert {f"{b.host}:{b.port}" for b in leaders} == {kafka_broker.bootstrap}


def test_unknown_topic_without_auto_creation_names_the_error(kafka_broker, pool, topic_name):
    metadata = Metadata(pool, kafka_broker.bootstrap, allow_auto_topic_creation=False)
    try:
        with pytest.raises(KafkaTimeoutError,
                           match=rf"topic {topic_name!r} not available in metadata after "
                                 r"1000 ms: broker says UNKNOWN_TOPIC_OR_PARTITION"):
            metadata.wait_for_topic(topic_name, 1.0)
    finally:
        metadata.close()


def test_unknown_topic_is_refreshed_until_it_exists(kafka_broker, pool, topic_name):
    """UNKNOWN_TOPIC_OR_PARTITION keeps the refresher asking (every retry_backoff_ms),
    so a topic created meanwhile shows up without waiting for metadata_max_age_ms."""
    metadata = Metadata(pool, kafka_broker.bootstrap, allow_auto_topic_creation=False,
                        metadata_max_age_ms=600000, retry_backoff_ms=100)
    try:
        with pytest.raises(KafkaTimeoutError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            metadata.wait_for_topic(topic_name, 0.5)
        create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
        info = metadata.wait_for_topic(topic_name, 30)
    finally:
        metadata.close()
    assert sorted(info.partitions) == [0, 1]


@pytest.mark.parametrize("retry_backoff_max_ms, fewest, most", [
    (40, 40, None),  # 5, 10, 20, then 40 ms: ~75 requests in 3 s
    (320, 6, 22),  # 5, 10, 20, then 40, 80, ... 320 ms (+-20%): ~15 in 3 s
])
def test_a_topic_that_stays_unknown_is_asked_for_less_and_less_often(
        kafka_broker, pool, topic_name, monkeypatch, retry_backoff_max_ms, fewest, most):
    """KIP-580: after the first quick tries, the wait before asking again for a topic the
    cluster keeps answering UNKNOWN_TOPIC_OR_PARTITION doubles up to
    retry_backoff_max_ms; it used to stay at retry_backoff_ms for as long as a send
    waited."""
    asked = []
    encode = metadata_module.encode_metadata_request

    def counting(correlation_id, client_id, version, topics, *rest):
        if topic_name in topics:
            asked.append(time.monotonic())
        return encode(correlation_id, client_id, version, topics, *rest)
    monkeypatch.setattr(metadata_module, "encode_metadata_request", counting)
    metadata = Metadata(pool, kafka_broker.bootstrap, allow_auto_topic_creation=False,
                        metadata_max_age_ms=600000, retry_backoff_ms=40,
                        retry_backoff_max_ms=retry_backoff_max_ms)
    try:
        with pytest.raises(KafkaTimeoutError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            metadata.wait_for_topic(topic_name, 3)
    finally:
        metadata.close()
    assert len(asked) >= fewest and (most is None or len(asked) <= most), len(asked)


def test_cache_is_refreshed_every_metadata_max_age_ms(kafka_broker, pool):
    metadata = Metadata(pool, kafka_broker.bootstrap, metadata_max_age_ms=200)
    try:
        metadata.wait_for_bootstrap(30)
        first = metadata.updates
        time.sleep(1.5)
        later = metadata.updates
    finally:
        metadata.close()
    assert 3 <= later - first <= 10  # about one per 200 ms, none in a tight loop


def test_broker_disconnect_triggers_a_refresh(kafka_broker, topic_name):
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started")
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    stack = io_stack(kafka_broker.bootstrap, metadata_max_age_ms=600000,
                     reconnect_backoff_max_ms=200)
    batches = [make_batch(buffers, f"restart-{i}", count=4) for i in range(2)]
    try:
        stack.sender.send(topic_name, 0, batches[0].view, 4).result(30)
        updates = stack.metadata.updates
        nodes[0].restart()
        # The leader's connection drops: the sender's retries and the metadata
        # refresh carry the next batch to the restarted broker.
        stack.sender.send(topic_name, 0, batches[1].view, 4).result(60)
        assert stack.metadata.updates > updates
    finally:
        stack.close()
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=8)
    assert as_read(read) == [tuple(w) for b in batches for w in b.records]
    release_batches(batches)


def test_connections_follow_the_partition_leader(failover_cluster, topic_name):
    """Leader stopped: the disconnect refreshes metadata and the batches go to the new
    leader.  Leadership moved back by an election: the stale leader answers
    NOT_LEADER_OR_FOLLOWER, metadata is refreshed and the batch is resent.  Nothing is
    lost or duplicated (read back by the independent reader)."""
    cluster = failover_cluster
    create_topic(cluster.bootstrap, topic_name, partitions=1, replication_factor=3)
    buffers = new_buffer_pool()
    stack = io_stack(cluster.bootstrap, metadata_max_age_ms=600000,
                     reconnect_backoff_max_ms=200,
                     sender_options={"acks": "all", "retry_backoff_ms": 100})
    batches = []

    def send(tag):
        batch = make_batch(buffers, tag, count=5)
        batches.append(batch)
        return stack.sender.send(topic_name, 0, batch.view, batch.record_count).result(60)

    try:
        send("before")
        first_leader = stack.metadata.leader_id(topic_name, 0)
        cluster.node(first_leader).stop()
        send("after-stop")
        second_leader = stack.metadata.leader_id(topic_name, 0)
        assert second_leader != first_leader

        cluster.node(first_leader).restart()
        # Bring the preferred (first) replica back as leader, behind our cache's back.
        admin = admin_client(cluster.bootstrap)
        partition = TopicPartition(topic_name, 0)
        deadline = time.monotonic() + 60
        while True:
            try:
                admin.elect_leaders(ElectionType.PREFERRED, [partition]).result(timeout=30)
            except Exception:  # noqa: BLE001 -- the restarted replica may not be in sync yet
                assert time.monotonic() < deadline, "preferred leader election never succeeded"
                time.sleep(0.5)
                continue
            topic = admin.list_topics(topic_name, timeout=10).topics[topic_name]
            if topic.partitions[0].leader == first_leader:
                break
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert stack.metadata.leader_id(topic_name, 0) == second_leader  # stale on purpose
        # Several batches at once: each meets NOT_LEADER_OR_FOLLOWER, is resent, and the
        # partition keeps their order.
        pending = []
        for i in range(6):
            batch = make_batch(buffers, f"after-election-{i}", count=5)
            batches.append(batch)
            pending.append(stack.sender.send(topic_name, 0, batch.view, batch.record_count))
        offsets = [f.result(60).base_offset for f in pending]
        assert offsets == sorted(offsets)
        assert stack.metadata.leader_id(topic_name, 0) == first_leader
        metrics = stack.sender.metrics()
    finally:
        stack.close()
    assert metrics["errors.NOT_LEADER_OR_FOLLOWER"] >= 1
    assert metrics["batches_acknowledged"] == 8
    read = read_topic(cluster.bootstrap, topic_name, expected_count=40)
    assert as_read(read) == [tuple(w) for b in batches for w in b.records]
    release_batches(batches)


def test_a_killed_leader_is_replaced_though_the_first_refresh_still_names_it(
        failover_cluster, topic_name):
    """SIGKILL, unlike a clean stop, moves no leadership at once: the controller fences the
    dead broker seconds later, so the refresh its dropped connection asks for still names it.
    The failed reconnects must ask again until the new leader shows; before they did, the
    batch waited for delivery_timeout_ms and failed (found by tests/test_chaos.py)."""
    cluster = failover_cluster
    metadata = create_topic(cluster.bootstrap, topic_name, partitions=1, replication_factor=3,
                            config={"min.insync.replicas": "2"})
    leader = metadata.topics[topic_name].partitions[0].leader
    # No other connection times out and asks for metadata meanwhile: only the leader's
    # connection fails.  metadata_max_age_ms stays far beyond the delivery timeout.
    with Producer(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000,
                  delivery_timeout_ms=60000, metadata_max_age_ms=300000,
                  reconnect_backoff_max_ms=500) as producer:
        producer.send(topic_name, b"before").get(30)
        cluster.node(leader).kill()
        after = producer.send(topic_name, b"after").get(55)
    assert after.offset == 1
    assert [r.value for r in read_topic(cluster.bootstrap, topic_name, expected_count=2)] == [
        b"before", b"after"]


def test_a_topic_with_a_leaderless_partition_takes_records_for_the_others(
        failover_cluster, topic_name):
    """One partition's only replica down (its leader -1): a producer meeting the topic
    then knows its partitions and sends to the others, as the Java client and
    kafka-python do.  It used to wait for every partition to have a leader: send() and
    partitions_for() failed after max_block_ms, however many partitions had one."""
    cluster = failover_cluster
    created = create_topic(cluster.bootstrap, topic_name, partitions=3, replication_factor=1)
    cluster.node(created.topics[topic_name].partitions[0].leader).stop()
    admin = admin_client(cluster.bootstrap)
    deadline = time.monotonic() + 60
    while admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions[0].leader >= 0:
        assert time.monotonic() < deadline, "partition 0 kept its leader"
        time.sleep(0.2)
    with Producer(bootstrap_servers=cluster.bootstrap, max_block_ms=20000) as producer:
        assert producer.partitions_for(topic_name) == {0, 1, 2}
        placed = [producer.send(topic_name, b"unkeyed-%d" % i).get(30).partition
                  for i in range(6)]
        assert 0 not in placed
        assert producer.send(topic_name, b"to-1", partition=1).get(30).partition == 1


def stop_partition_0s_leader(cluster, lost, producer, topic):
    """Stops node lost, partition 0's only replica, and waits (up to 60 s) until the
    producer's metadata names no leader for it."""
    cluster.node(lost).stop()
    metadata = producer._metadata
    deadline = time.monotonic() + 60
    while metadata.leader_id(topic, 0) is not None:
        assert time.monotonic() < deadline, "the producer still names partition 0's leader"
        metadata.request_update()
        time.sleep(0.2)


def test_a_record_for_a_leaderless_partition_waits_for_its_leader_and_holds_up_no_other(
        failover_cluster, topic_name):
    """A record sent to a partition that has lost its leader waits in the sender for a new
    one, up to delivery_timeout_ms, as in the Java client, and the records of other
    partitions go meanwhile.  Handing its batch over used to wait for the leader up to
    max_block_ms, on the linger thread, so every other partition's batch waited too; then
    it failed, though the leader came back well within its delivery timeout."""
    cluster = failover_cluster
    created = create_topic(cluster.bootstrap, topic_name, partitions=3, replication_factor=1)
    leaders = {p: part.leader for p, part in created.topics[topic_name].partitions.items()}
    lost = leaders[0]
    other = next(p for p, leader in leaders.items() if leader != lost)
    with Producer(bootstrap_servers=cluster.bootstrap, max_block_ms=5000,
                  delivery_timeout_ms=120000, request_timeout_ms=10000) as producer:
        for p in leaders:
            producer.send(topic_name, b"before", partition=p).get(30)
        stop_partition_0s_leader(cluster, lost, producer, topic_name)
        waiting = producer.send(topic_name, b"waits", partition=0)
        producer.send(topic_name, b"goes", partition=other).get(30)
        assert not waiting.is_done  # delivered while the leaderless one waits
        time.sleep(6)  # beyond max_block_ms
        assert not waiting.is_done
        cluster.node(lost).restart()
        assert waiting.get(90).partition == 0
    read = read_topic(cluster.bootstrap, topic_name, expected_count=len(leaders) + 2)
    assert [r.value for r in read if r.partition == 0] == [b"before", b"waits"]


def test_records_for_a_leaderless_partition_fill_one_batch_while_they_wait(
        failover_cluster, topic_name):
    """Records for a partition without a leader gather in its open batch until it is full,
    as in the Java client, rather than one small batch handed over per linger_ms: each
    of those held a pooled buffer for a few records until the leader came back, and a
    steady stream of them took all of buffer_memory within seconds."""
    cluster = failover_cluster
    created = create_topic(cluster.bootstrap, topic_name, partitions=1, replication_factor=1)
    lost = created.topics[topic_name].partitions[0].leader
    with Producer(bootstrap_servers=cluster.bootstrap, linger_ms=0, max_block_ms=5000,
                  delivery_timeout_ms=120000) as producer:
        producer.send(topic_name, b"before").get(30)
        stop_partition_0s_leader(cluster, lost, producer, topic_name)
        sent_before = producer.metrics()["netkafka"]["batches_sent"]
        values = [b"waits-%d" % i for i in range(50)]
        futures = []
        for value in values:
            futures.append(producer.send(topic_name, value))
            time.sleep(0.02)  # linger_ms=0: each record's batch is due at once
        assert producer.metrics()["netkafka"]["batches_sent"] - sent_before <= 1
        cluster.node(lost).restart()
        assert [f.get(90).offset for f in futures] == list(range(1, len(values) + 1))
    assert [r.value for r in read_topic(cluster.bootstrap, topic_name, len(values) + 1)] == [
        b"before"] + values


def test_one_request_in_flight_keeps_a_partitions_order_when_its_leader_moves(
        failover_cluster, topic_name):
    """max_in_flight_requests_per_connection=1 without idempotence: a partition's records
    keep their order even when its leader moves while a batch of it awaits its answer
    from the old leader (frozen here), as in the Java client, which mutes such a
    partition.  The next batch used to go to the new leader at once, and the first one,
    resent after its request timed out, landed behind it."""
    cluster = failover_cluster
    other = f"{topic_name}-other"
    created = create_topic(cluster.bootstrap, topic_name, partitions=1, replication_factor=3)
    old_leader = created.topics[topic_name].partitions[0].leader
    # A partition led elsewhere: sent to first, its connection is the one metadata asks
    # while the old leader is frozen (the first ready connection to a known broker).
    others = create_topic(cluster.bootstrap, other, partitions=3).topics[other].partitions
    elsewhere = next(p for p, part in others.items() if part.leader != old_leader)
    alive = ",".join(node.bootstrap for node in cluster.nodes if node.node_id != old_leader)
    admin = admin_client(alive)
    with Producer(bootstrap_servers=cluster.bootstrap, enable_idempotence=False, acks="all",
                  max_in_flight_requests_per_connection=1, request_timeout_ms=10000,
                  delivery_timeout_ms=120000, metadata_max_age_ms=600000) as producer:
        producer.send(other, b"warm-up", partition=elsewhere).get(30)
        producer.send(topic_name, b"before").get(30)
        cluster.node(old_leader).pause()
        first = producer.send(topic_name, b"first")  # unanswered: the leader is frozen
        deadline = time.monotonic() + 60
        while admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions[
                0].leader in (old_leader, -1):
            assert time.monotonic() < deadline, "the frozen leader was never replaced"
            time.sleep(0.2)
        metadata = producer._metadata
        while metadata.leader_id(topic_name, 0) in (old_leader, None):
            assert time.monotonic() < deadline, "the producer never saw the new leader"
            metadata.request_update()
            time.sleep(0.2)
        second = producer.send(topic_name, b"second")
        first.get(60)
        second.get(60)
    read = read_topic(alive, topic_name, expected_count=3)
    assert [r.value for r in read] == [b"before", b"first", b"second"]


@pytest.mark.parametrize("closed_first", ["metadata", "pool"])
def test_an_answer_arriving_during_close_is_dropped_quietly(kafka_broker, caplog,
                                                             closed_first):
    """A Metadata answer that lands while the producer closes (the cache closed, or the
    I/O pool already refusing connections) is dropped: no traceback in the log."""
    pool = IOPool(ConnectionConfig())
    metadata = Metadata(pool, kafka_broker.bootstrap)
    try:
        snapshot = metadata.wait_for_bootstrap(30)
        (broker,) = snapshot.brokers.values()
        conn = pool.connection(broker.node_id, broker.host, broker.port)  # followed on answer
        answer = request_metadata(conn, [])
        answer.result(30)
        caplog.set_level(logging.DEBUG)
        if closed_first == "metadata":
            metadata.close()
        pool.close()
        metadata._on_answer(conn, answer)  # as the I/O thread delivers it, late
    finally:
        metadata.close()
        pool.close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info] == []
    assert metadata.snapshot() is snapshot


def test_a_new_topic_does_not_wait_for_retry_backoff(kafka_broker, topic_name):
    """A new topic is asked for at once: with retry_backoff_ms far beyond max_block_ms,
    both a fresh producer's first send and a later send to another new topic resolve
    (each used to wait out retry_backoff_ms after the answer before it, so they timed
    out here)."""
    later = f"{topic_name}-later"
    for name in (topic_name, later):
        create_topic(kafka_broker.bootstrap, name)
    # Without idempotence: InitProducerId's retries wait retry_backoff_ms too.
    with Producer(bootstrap_servers=kafka_broker.bootstrap, retry_backoff_ms=60000,
                  max_block_ms=10000, acks=1, enable_idempotence=False) as producer:
        producer.send(topic_name, b"first").get(30)
        producer.send(later, b"later").get(30)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, later, 1)] == [b"later"]


def test_each_new_topic_is_asked_for_once_and_alone(kafka_broker, topic_name, monkeypatch):
    """As topics accumulate, the request for a new one names only what is new (so its
    cost stays flat), and a topic whose answer was usable is not asked for again."""
    names = [f"{topic_name}-{i:02d}" for i in range(30)]
    for name in names:
        create_topic(kafka_broker.bootstrap, name)
    asked = []  # the topics of each Metadata request, as encoded
    encode = metadata_module.encode_metadata_request

    def spying_encode(correlation_id, client_id, version, topics=None, *args):
        asked.append(list(topics))
        return encode(correlation_id, client_id, version, topics, *args)

    monkeypatch.setattr(metadata_module, "encode_metadata_request", spying_encode)
    with Producer(bootstrap_servers=kafka_broker.bootstrap) as producer:
        producer.send(names[0], b"x").get(30)
        bootstrap_requests = len(asked)  # 1, or 2 when the connection was ready first
        for name in names[1:]:
            producer.send(name, b"x").get(30)
    later = asked[bootstrap_requests:]
    assert later == [[name] for name in names[1:]]
    assert [t for request in asked[:bootstrap_requests] for t in request] == [names[0]]


def test_an_auto_created_topic_is_asked_again_before_retry_backoff(kafka_broker, topic_name):
    """The first answer about a topic the broker auto-creates finds it unusable; it is
    asked again after an eighth of retry_backoff_ms, then a quarter, ... -- not only
    after all of it: here retry_backoff_ms is beyond max_block_ms, and the send
    resolves (it used to time out)."""
    with Producer(bootstrap_servers=kafka_broker.bootstrap, retry_backoff_ms=16000,
                  max_block_ms=10000, acks=1, enable_idempotence=False) as producer:
        producer.send(topic_name, b"first").get(30)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"first"]
