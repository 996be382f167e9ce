"""A topic changed under a producer that uses it.  Deleted and re-created with fewer
partitions: the producer follows the new topic's partitions (keyed records placed by the
new count, as the Java client), not the old count.  Deleted: a record sent by the old
metadata fails at its delivery timeout saying what the broker answered, and not that it
may be in the log."""
import time

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from batch_helpers import wait_for
from test_wal_replay import encoded_records
from broker_proxy import ProduceDroppingProxy
from netkafka import Producer
from netkafka.client import metadata as metadata_module
from netkafka.producer.wal import WriteAheadLog
from netkafka.errors import (
    IllegalArgumentError, KafkaTimeoutError, RecordSpooledError, UnknownTopicIdError,
    UnknownTopicOrPartitionError,
)
from netkafka.testing.admin import admin_client, create_topic
from netkafka.testing.reader import read_topic

WAIT_S = 60.0
KEYS = [b"key-%d" % i for i in range(32)]


def java_partition(key, partitions):
    return (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


def delete_topic(bootstrap, topic):
    admin = admin_client(bootstrap)
    admin.delete_topics([topic], operation_timeout=WAIT_S)[topic].result(WAIT_S)
    deadline = time.monotonic() + WAIT_S
    while topic in admin.list_topics(timeout=WAIT_S).topics:  # deletion is asynchronous
        assert time.monotonic() < deadline, f"{topic} still listed after delete"
        time.sleep(0.1)


def test_a_topic_recreated_with_fewer_partitions_is_followed(kafka_broker, topic_name):
    """Deleted and re-created with 2 partitions instead of 4 between two refreshes (the
    same broker leads every partition, before and after): keyed records go by the new
    count, and every one is written."""
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=4)
    with Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0,
                  allow_auto_create_topics=False, delivery_timeout_ms=5000,
                  request_timeout_ms=4000, metadata_max_age_ms=600000) as producer:
        before = {k: producer.send(topic_name, b"before", k).get(WAIT_S).partition for k in KEYS}
        assert set(before.values()) == {0, 1, 2, 3}
        old_id = producer._metadata.topic_id(topic_name)
        delete_topic(bootstrap, topic_name)
        create_topic(bootstrap, topic_name, partitions=2)
        # A full refresh (no partition changed leader: the broker leads all) finds the
        # new topic.
        producer._metadata.request_update()
        deadline = time.monotonic() + WAIT_S
        while producer._metadata.topic_id(topic_name) == old_id:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        futures = {k: producer.send(topic_name, b"after", k) for k in KEYS}
        placed = {}
        failed = {}
        for k, f in futures.items():
            try:
                placed[k] = f.get(WAIT_S).partition
            except Exception as exc:
                failed[k] = exc
        assert not failed, failed
        assert placed == {k: java_partition(k, 2) for k in KEYS}
        # A partition that is gone, named: refused as one never seen is.
        try:
            gone = producer.send(topic_name, b"gone", partition=3)
            outcome = gone.get(WAIT_S)
        except Exception as exc:
            outcome = exc
        assert isinstance(outcome, IllegalArgumentError), outcome
    records = read_topic(bootstrap, topic_name, len(KEYS), timeout_s=WAIT_S)
    assert sorted(r.key for r in records) == sorted(KEYS)


def failure_after_deletion(bootstrap, topic):
    """A record sent to topic after it was deleted behind the producer's back (its
    metadata still names the old topic): the exception it fails with.  The broker
    refuses the attempt (UNKNOWN_TOPIC_ID by id, Produce v13+; UNKNOWN_TOPIC_OR_PARTITION
    by name); then it waits for a leader until delivery_timeout_ms."""
    create_topic(bootstrap, topic, partitions=1)
    with Producer(bootstrap_servers=bootstrap, linger_ms=0, allow_auto_create_topics=False,
                  delivery_timeout_ms=3000, request_timeout_ms=2000,
                  metadata_max_age_ms=600000) as producer:
        producer.send(topic, b"before").get(WAIT_S)
        delete_topic(bootstrap, topic)
        with pytest.raises(KafkaTimeoutError) as failed:
            producer.send(topic, b"after").get(WAIT_S)
    return failed.value


def test_a_record_refused_for_an_unknown_topic_id_is_not_said_to_be_in_the_log(
        kafka_broker, topic_name):
    """The broker refused the records before writing them: the failure must not say
    they may be in the log (an application would look for duplicates, or count them
    delivered)."""
    failure = failure_after_deletion(kafka_broker.bootstrap, topic_name)
    assert "may be in the log" not in str(failure)


def test_a_record_that_expires_waiting_for_a_leader_names_its_last_refusal(
        kafka_broker, topic_name):
    """Refused, then parked until delivery_timeout_ms for want of a leader: its failure
    says what the attempt met (the topic is gone), not only that time ran out."""
    failure = failure_after_deletion(kafka_broker.bootstrap, topic_name)
    assert isinstance(failure.__cause__, (UnknownTopicIdError, UnknownTopicOrPartitionError))
    assert type(failure.__cause__).__name__ in str(failure)


def test_a_record_for_a_deleted_topic_holds_up_no_other_topic_and_goes_once_it_is_back(
        kafka_broker, topic_name):
    """A record sent to a topic the metadata already knows to be deleted waits in the
    sender, up to delivery_timeout_ms, as in the Java client (its topic may come back:
    here it is created again), and the records of other topics go meanwhile.  Handing
    its batch over used to wait for the topic up to max_block_ms on the linger thread,
    holding up every other topic's batches, and then failed it."""
    bootstrap = kafka_broker.bootstrap
    other = f"{topic_name}-other"
    create_topic(bootstrap, topic_name)
    create_topic(bootstrap, other)
    with Producer(bootstrap_servers=bootstrap, allow_auto_create_topics=False,
                  max_block_ms=5000, delivery_timeout_ms=120000,
                  metadata_max_age_ms=600000) as producer:
        producer.send(topic_name, b"before").get(WAIT_S)
        producer.send(other, b"before").get(WAIT_S)
        delete_topic(bootstrap, topic_name)
        metadata = producer._metadata
        wait_for(lambda: metadata.request_update() or metadata.snapshot().topics[
            topic_name].error_code != 0, WAIT_S, "the producer's metadata of the deletion")
        waiting = producer.send(topic_name, b"waits")
        producer.send(other, b"goes").get(WAIT_S)
        assert not waiting.is_done  # delivered while the other waits
        time.sleep(6)  # beyond max_block_ms
        assert not waiting.is_done
        create_topic(bootstrap, topic_name)
        assert waiting.get(WAIT_S).offset == 0
    assert [r.value for r in read_topic(bootstrap, topic_name, 1)] == [b"waits"]


@pytest.fixture
def names_topic(topic_name, monkeypatch):
    """next_requests(count): whether each of the next count Metadata requests framed
    names topic_name."""
    names_it = []  # per Metadata request framed: whether it names the topic
    encode = metadata_module.encode_metadata_request

    def counting(correlation_id, client_id, version, topics, *rest):
        names_it.append(topic_name in topics)
        return encode(correlation_id, client_id, version, topics, *rest)
    monkeypatch.setattr(metadata_module, "encode_metadata_request", counting)

    def next_requests(count):
        start = len(names_it)
        deadline = time.monotonic() + WAIT_S
        while len(names_it) < start + count:
            assert time.monotonic() < deadline, "no periodic Metadata requests"
            time.sleep(0.05)
        return names_it[start:start + count]
    return next_requests


def assert_no_longer_asked_for(next_requests):
    """Within 1.25 times metadata_max_idle_ms (5 s) and a refresh, Metadata requests
    stop naming the topic."""
    deadline = time.monotonic() + 20
    while any(next_requests(3)):
        assert time.monotonic() < deadline, "an idle topic is still asked for"


def test_a_topic_idle_for_metadata_max_idle_ms_is_no_longer_asked_for_nor_recreated(
        kafka_broker, topic_name, names_topic):
    """metadata_max_idle_ms (the Java producer's metadata.max.idle.ms, at its 5000 ms
    minimum): a topic sent nothing for that long leaves the producer's Metadata requests,
    so a refresh after someone deleted it does not create it again (auto-creation on);
    the next send() asks for it as a first one does, and is delivered.  A topic used
    once used to stay in every request for the producer's lifetime."""
    bootstrap = kafka_broker.bootstrap
    with pytest.raises(ValueError, match="metadata_max_idle_ms .* >= 5000"):
        Producer(bootstrap_servers=bootstrap, metadata_max_idle_ms=4999)  # Java's minimum
    next_requests = names_topic
    admin = admin_client(bootstrap)
    with Producer(bootstrap_servers=bootstrap, acks=1, allow_auto_create_topics=True,
                  metadata_max_idle_ms=5000, metadata_max_age_ms=300) as producer:
        assert producer.send(topic_name, b"first").get(WAIT_S).offset == 0
        assert any(next_requests(3))  # still in use: refreshes name it
        # Idle from now: the requests stop naming it.  Before, they named it for ever.
        assert_no_longer_asked_for(next_requests)
        delete_topic(bootstrap, topic_name)
        assert not any(next_requests(5))
        assert topic_name not in admin.list_topics(timeout=WAIT_S).topics
        # Sent to again: asked for, created anew (offset 0 again) and delivered.
        assert producer.send(topic_name, b"again").get(WAIT_S).offset == 0
        assert all(next_requests(3))
    records = read_topic(bootstrap, topic_name, 1, timeout_s=WAIT_S)
    assert [r.value for r in records] == [b"again"]


def test_a_spooled_batch_being_sent_again_keeps_its_topic_asked_for(
        kafka_broker, topic_name, names_topic, tmp_path):
    """A batch whose delivery timed out, spooled (on_delivery_timeout='spool') and handed
    to the sender again, is in no table of the accumulator: its topic went idle after
    metadata_max_idle_ms and was no longer asked for, so a leader's move left the batch
    with no leader until its next delivery timeout.  A batch in the sender keeps its
    topic asked for; the topic goes once the batch is delivered."""
    create_topic(kafka_broker.bootstrap, topic_name)
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    proxy = ProduceDroppingProxy((host, int(port)))
    try:
        with Producer(bootstrap_servers=proxy.bootstrap, wal_dir=str(tmp_path),
                      on_delivery_timeout="spool", request_timeout_ms=1000,
                      delivery_timeout_ms=8000, retry_backoff_ms=100, max_block_ms=5000,
                      metadata_max_idle_ms=5000, metadata_max_age_ms=300) as producer:
            proxy.set_dropping(True)  # Produce requests unanswered: sent again and again
            with pytest.raises(RecordSpooledError):
                producer.send(topic_name, b"spooled").get(WAIT_S)
            # 8 s after the batch opened, the spool's copy is in the sender for 8 s more:
            # the topic idle, and 1.25 times metadata_max_idle_ms past.
            time.sleep(4)
            assert all(names_topic(3))
            proxy.set_dropping(False)
            wait_for(lambda: producer.metrics()["netkafka"]["records_spool_delivered"] == 1,
                     WAIT_S, "the spooled record's delivery")
            assert_no_longer_asked_for(names_topic)
    finally:
        proxy.close()
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1,
                                        timeout_s=WAIT_S)] == [b"spooled"]


def test_a_topic_only_asked_about_with_partitions_for_goes_idle_too(
        kafka_broker, topic_name, names_topic):
    """A topic only asked about with partitions_for() (never sent to) stayed in every
    Metadata request for the producer's lifetime; as the Java client's, it goes after
    metadata_max_idle_ms with no partitions_for(), and is asked for again at the next."""
    create_topic(kafka_broker.bootstrap, topic_name)
    with Producer(bootstrap_servers=kafka_broker.bootstrap, metadata_max_idle_ms=5000,
                  metadata_max_age_ms=300) as producer:
        partitions = producer.partitions_for(topic_name)
        for _ in range(8):  # past 1.25 times metadata_max_idle_ms, asked about each second
            time.sleep(1)
            assert producer.partitions_for(topic_name) == partitions
        assert all(names_topic(3))
        assert_no_longer_asked_for(names_topic)
        assert producer.partitions_for(topic_name) == partitions
        assert all(names_topic(3))


def test_a_topic_only_replayed_from_the_wal_goes_idle_too(
        kafka_broker, topic_name, names_topic, tmp_path):
    """A batch replayed from the write-ahead log for a topic this producer sends nothing
    else to is in no table of the accumulator: the sender asked for its topic, which then
    stayed in every Metadata request for the producer's lifetime (as one of a spooled
    batch whose table went just before the sender took it).  It goes metadata_max_idle_ms
    after the batch is delivered."""
    create_topic(kafka_broker.bootstrap, topic_name)
    with WriteAheadLog(tmp_path) as log:  # a batch whose producer died before sealing it
        batch_id = log.open_batch()
        (record,) = encoded_records([b"replayed"], 1_700_000_000_000)
        log.append_record(batch_id, 0, topic_name, 0, 1_700_000_000_000, record)
    with Producer(bootstrap_servers=kafka_broker.bootstrap, wal_dir=str(tmp_path),
                  metadata_max_idle_ms=5000, metadata_max_age_ms=300) as producer:
        report = producer.replay(timeout=WAIT_S)
        assert (report.records, report.reencoded, report.pending) == (1, 1, 0), report
        assert all(names_topic(3))
        assert_no_longer_asked_for(names_topic)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1,
                                        timeout_s=WAIT_S)] == [b"replayed"]
