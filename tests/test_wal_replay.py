"""Replay of a dead producer's write-ahead log, against the real broker.

A producer process is killed with its WAL in a chosen state (tests/wal_crash.py); a
new producer opened on the directory replays it; confluent-kafka reads the topic back:
every record exactly once, in each partition in send order, and the report and
on_replay say what happened to each.  The kill harness at random moments is
tests/test_wal_kill.py.
"""
import collections
import concurrent.futures
import os
import subprocess
import sys
import threading
import time

import pytest

from broker_proxy import DescribeProducersRefusingProxy, MetadataProxy
from netkafka import Producer, RecordMetadata
from netkafka.client.retry import RetryBackoff
from netkafka.errors import (
    KafkaConnectionError, KafkaTimeoutError, MessageTooLargeError, NoSuchPartitionError,
    NotLeaderOrFollowerError, TopicAuthorizationFailedError, UnknownTopicOrPartitionError,
)
from netkafka.producer.replay import Replay, _appended
from netkafka.producer.wal import Seal, WriteAheadLog
from netkafka.protocol.describe_producers import (
    API as DESCRIBE_PRODUCERS, PartitionProducers, ProducerState,
    decode_describe_producers_response, encode_describe_producers_request,
)
from netkafka.protocol.framing import ApiKey
from netkafka.protocol.metadata import MetadataResponse, PartitionMetadata, TopicMetadata
from netkafka.record._batch import BATCH_HEADER_BYTES, RecordBatchBuilder
from netkafka.record._pool import BufferPool
from netkafka.testing.admin import admin_client, create_topic
from netkafka.testing.reader import read_topic

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
COUNT = 300


def crash(moment, broker, topic, wal_dir, count=COUNT):
    done = subprocess.run([sys.executable, os.path.join(HERE, "wal_crash.py"), moment,
                           broker.bootstrap, topic, str(wal_dir), str(count)],
                          cwd=REPO, env=CHILD_ENV, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == -9, done.stderr  # SIGKILLed, as planned


class Heard:
    """on_replay's calls, by context."""

    def __init__(self):
        self.lock = threading.Lock()
        self.outcomes = {}

    def __call__(self, context, outcome):
        with self.lock:
            assert context not in self.outcomes, f"{context!r} heard twice"
            self.outcomes[context] = outcome


def replay(broker, wal_dir, heard=None, **settings):
    producer = Producer(bootstrap_servers=broker.bootstrap, wal_dir=str(wal_dir),
                        on_replay=heard, **settings)
    report = producer.replay(timeout=60)
    return producer, report


def replay_through(proxy, wal_dir, heard=None, **settings):
    """replay() with proxy as the broker: its report, the producer and proxy closed."""
    try:
        producer, report = replay(proxy, wal_dir, heard, **settings)
        producer.close()
    finally:
        proxy.close()
    return report


def _with(fields, **changes):
    """A copy of a decoded struct (a Metadata answer's topic or partition), changed."""
    return type(fields)(**{**{name: getattr(fields, name) for name in fields.fields}, **changes})


def assert_exactly_once_in_order(broker, topic, count=COUNT):
    records = read_topic(broker.bootstrap, topic, count)
    values = [r.value for r in records]
    assert len(values) == len(set(values)) == count, "lost or duplicated records"
    by_partition = collections.defaultdict(list)
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_partition[record.partition].append(int(record.value[1:]))
    for partition, numbers in by_partition.items():
        assert numbers == sorted(numbers), f"partition {partition} out of send order"
    return records


@pytest.mark.parametrize("moment, counted", [
    ("open", "reencoded"),
    ("acked", "deduplicated"),
    # Sealed, never sent, from sequence 0: the broker knows nothing of the id, as of
    # one it expired after writing them, so the stamp proves nothing.
    ("sealed", "possibly_duplicated"),
])
def test_a_dead_producers_records_are_replayed_exactly_once(kafka_broker, topic_name, tmp_path,
                                                            moment, counted):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    crash(moment, kafka_broker, topic_name, tmp_path)
    heard = Heard()
    producer, report = replay(kafka_broker, tmp_path, heard)
    try:
        assert report.records == COUNT and report.pending == 0
        # Appended already: the last five batches of each partition go again, and the
        # broker answers with their offsets once they are committed.
        resent = report.resent if counted == "deduplicated" else 0
        assert getattr(report, counted) + resent == COUNT, report
        assert report.failed == 0 and report.batches_not_byte_identical == 0
        # New records go behind the replayed ones.
        producer.send(topic_name, b"r%d" % COUNT, key=b"k0").get(60)
        wal = producer.metrics()["netkafka-wal"]
        assert wal[f"replay_{counted}"] + resent == COUNT
    finally:
        producer.close()
    records = assert_exactly_once_in_order(kafka_broker, topic_name, COUNT + 1)
    # on_replay: every record's context, with where it landed (a deduplicated batch's
    # offsets are the broker's secret; a resent one's come back in its answer).
    assert set(heard.outcomes) == {b"c%d" % i for i in range(COUNT)}
    where = {r.value: (r.partition, r.offset) for r in records}
    unknown = 0
    for context, outcome in heard.outcomes.items():
        assert isinstance(outcome, RecordMetadata)
        i = int(context[1:])
        assert (outcome.topic, outcome.partition) == (topic_name, where[b"r%d" % i][0])
        assert outcome.offset in (-1, where[b"r%d" % i][1])
        unknown += outcome.offset == -1
        assert (outcome.serialized_key_size, outcome.serialized_value_size) == (
            len(b"k%d" % (i % 7)), len(b"r%d" % i))
    assert unknown == (report.deduplicated if counted == "deduplicated" else 0)
    # Replayed and acknowledged: the next producer finds nothing.
    with WriteAheadLog(tmp_path) as log:
        assert log.recovery().batches == []


def test_acknowledged_batches_are_deduplicated_and_the_rest_sent_after_them(
        kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    crash("mixed", kafka_broker, topic_name, tmp_path)
    producer, report = replay(kafka_broker, tmp_path)
    try:
        # The acknowledged half's last five batches per partition go again.
        assert report.deduplicated + report.resent == COUNT, report
        assert report.resent >= COUNT - COUNT // 2, report
        assert report.possibly_duplicated == report.failed == report.pending == 0
    finally:
        producer.close()
    assert_exactly_once_in_order(kafka_broker, topic_name)


def test_of_many_acknowledged_batches_the_last_five_go_again_the_others_not(
        kafka_broker, topic_name, tmp_path):
    # The leader's DescribeProducers answer counts batches no follower has yet, and a
    # leader cut off from the controllers answers for a log its successor may lack:
    # the last five it has (which it keeps the offsets of) are resent, and answered
    # with their offsets once committed; those before them cannot be resent.
    count = 1000
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    crash("acked", kafka_broker, topic_name, tmp_path, count)
    with WriteAheadLog(tmp_path) as log:
        batches = log.recovery().batches
    assert len(batches) > 5
    last_five = sum(len(b.records) for b in batches[-5:])
    heard = Heard()
    producer, report = replay(kafka_broker, tmp_path, heard)
    try:
        assert (report.deduplicated, report.resent) == (count - last_five, last_five), report
        assert report.possibly_duplicated == report.failed == report.pending == 0
    finally:
        producer.close()
    records = assert_exactly_once_in_order(kafka_broker, topic_name, count)
    where = {r.value: r.offset for r in records}
    known = {context: outcome.offset for context, outcome in heard.outcomes.items()
             if outcome.offset >= 0}
    assert len(known) == last_five
    assert all(where[b"r" + context[1:]] == offset for context, offset in known.items())


def test_resent_batches_a_restarted_leader_has_are_in_the_log_though_it_refuses_them(
        failover_cluster, topic_name, tmp_path):
    # A leader that loaded its producer state from a snapshot (a clean restart) keeps
    # the offsets of the producer's last batch only, and refuses the sequences of the
    # four resent before it: taken for a hole, the partition started over and wrote
    # them again (counted possibly duplicated).  From the leader that said it has them,
    # the refusal means they are in the log.
    cluster, count = failover_cluster, 1000
    create_topic(cluster.bootstrap, topic_name, partitions=1, replication_factor=1)
    crash("acked", cluster, topic_name, tmp_path, count)
    topic = admin_client(cluster.bootstrap).list_topics(topic_name, timeout=30).topics
    cluster.node(topic[topic_name].partitions[0].leader).restart()
    producer, report = replay(cluster, tmp_path)
    try:
        assert report.records == report.deduplicated + report.resent == count, report
        assert report.possibly_duplicated == report.failed == report.pending == 0, report
    finally:
        producer.close()
    assert_exactly_once_in_order(cluster, topic_name, count)


def test_acknowledged_batches_are_deduplicated_though_their_leader_was_killed_before_the_replay(
        failover_cluster, topic_name, tmp_path):
    # Until the controller fences it, the metadata names the killed leader: taken for no
    # answer, the batches (from sequence 0) went at-least-once, and were written twice
    # (tests/test_wal_kill.py's broker restart, once).  Asked again, a new leader answers.
    cluster = failover_cluster
    create_topic(cluster.bootstrap, topic_name, partitions=1, replication_factor=3)
    crash("acked", cluster, topic_name, tmp_path)
    topic = admin_client(cluster.bootstrap).list_topics(topic_name, timeout=30).topics
    cluster.node(topic[topic_name].partitions[0].leader).kill()
    producer, report = replay(cluster, tmp_path)
    try:
        assert report.records == report.deduplicated + report.resent == COUNT, report
    finally:
        producer.close()
    assert_exactly_once_in_order(cluster, topic_name)


def test_a_split_batch_killed_after_a_part_was_acknowledged_is_replayed_exactly_once(
        kafka_broker, topic_name, tmp_path):
    # The batches exceed the topic's max.message.bytes and are split; the producer dies
    # as the first part is acknowledged, the batch's DONE entry not written (it waits
    # for every part).  The replay sends the batch whole under its old stamp, the
    # broker refuses it as too large, and it is split the same way: the broker drops
    # the part it has as a duplicate (its sequences), and takes the others.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3,
                 config={"max.message.bytes": "200"})
    crash("split", kafka_broker, topic_name, tmp_path)
    heard = Heard()
    producer, report = replay(kafka_broker, tmp_path, heard)
    try:
        assert report.records == COUNT and report.pending == 0, report
        # A partition none of whose parts was acknowledged starts at sequence 0 under
        # an id the broker does not know: possibly duplicated, as an expired one.
        assert report.failed == 0 and report.resent > 0, report
        assert report.resent + report.deduplicated + report.possibly_duplicated == COUNT
        assert report.batches_not_byte_identical == 0
        assert producer.metrics()["netkafka"]["sender_batches_split"] > 0
    finally:
        producer.close()
    records = assert_exactly_once_in_order(kafka_broker, topic_name)
    where = {r.value: (r.partition, r.offset) for r in records}
    assert set(heard.outcomes) == {b"c%d" % i for i in range(COUNT)}
    for context, outcome in heard.outcomes.items():
        assert (outcome.partition, outcome.offset) == where[b"r%d" % int(context[1:])]
    with WriteAheadLog(tmp_path) as log:
        assert log.recovery().batches == []


def test_a_split_batch_whose_parts_were_restamped_is_replayed_at_least_once(
        kafka_broker, topic_name, tmp_path):
    # Split down to a record too large alone, which failed: the partition started over
    # under a new epoch, and the parts behind it were re-stamped -- not in the WAL,
    # which kept the batch's old stamp.  The producer died as the first of them was
    # acknowledged.  The replay took the old stamp for the batch's (the broker knew
    # the producer id only at the new epoch, and the batch started at sequence 0) and
    # sent it under it: the broker refused the parts of the older epoch
    # (INVALID_PRODUCER_EPOCH), and on_replay was told that records in the topic
    # failed.  Now the batch has no stamp in the WAL once a part is re-stamped: replayed
    # at-least-once, each record is where on_replay says, duplicates counted.
    create_topic(kafka_broker.bootstrap, topic_name, config={"max.message.bytes": "200"})
    count = 20
    crash("restamped", kafka_broker, topic_name, tmp_path, count)
    heard = Heard()
    producer, report = replay(kafka_broker, tmp_path, heard)
    try:
        assert report.records == count and report.pending == 0, report
        assert producer.metrics()["netkafka"]["sender_batches_split"] > 0
    finally:
        producer.close()
    assert report.failed == 1, report  # the record too large
    too_large = heard.outcomes.pop(b"c%d" % (count // 2))
    assert isinstance(too_large, MessageTooLargeError), too_large
    assert all(isinstance(outcome, RecordMetadata) for outcome in heard.outcomes.values()), \
        heard.outcomes
    records = read_topic(kafka_broker.bootstrap, topic_name, count - 1)
    at = collections.defaultdict(set)
    for record in records:
        at[record.value].add(record.offset)
    assert set(at) == {b"r%d" % i for i in range(count) if i != count // 2}
    for context, outcome in heard.outcomes.items():
        assert outcome.offset in at[b"r" + context[1:]], (context, outcome, at)
    # Written twice: those acknowledged before the death, counted.
    assert len(records) - len(at) <= report.possibly_duplicated, report
    with WriteAheadLog(tmp_path) as log:
        assert log.recovery().batches == []


def test_a_replay_killed_before_it_finished_is_replayed_again(kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    crash("open", kafka_broker, topic_name, tmp_path)
    # The replaying producer dies as soon as it has handed everything over: its new
    # SEAL entries are in the log, their outcomes not.
    crash("sealed", kafka_broker, topic_name, tmp_path, count=0)
    producer, report = replay(kafka_broker, tmp_path)
    try:
        assert report.records == COUNT and report.failed == report.pending == 0
        # Never sent, from sequence 0: the broker does not know the id, as of an expired one.
        assert report.possibly_duplicated == COUNT
    finally:
        producer.close()
    assert_exactly_once_in_order(kafka_broker, topic_name)


# -- an expired producer id: at-least-once, counted ------------------------------------------

def encoded_records(values, first_timestamp_ms):
    """The records of a batch of values, each as the batch encodes it."""
    builder = RecordBatchBuilder(BufferPool(1 << 16, 1 << 16).acquire(), 1 << 16, 1 << 16)
    for i, value in enumerate(values):
        builder.append(None, value, None, first_timestamp_ms + i)
    sealed = bytes(builder.seal())
    records, pos = [], BATCH_HEADER_BYTES
    while pos < len(sealed):
        length, size = 0, 0
        shift = 0
        while True:  # the record's length varint (zigzag)
            byte = sealed[pos + size]
            length |= (byte & 0x7F) << shift
            size += 1
            shift += 7
            if byte < 0x80:
                break
        records.append(sealed[pos:pos + size + (length >> 1)])
        pos += size + (length >> 1)
    return records


def log_a_forgotten_stamp(wal_dir, topic, values, base_sequence=40, partition=0):
    """A sealed batch of a producer id the broker never issued: the broker knows nothing
    of it, as of an id it expired, so the stamp is no use."""
    with WriteAheadLog(wal_dir) as log:
        batch_id = log.open_batch()
        for i, record in enumerate(encoded_records(values, 1_700_000_000_000)):
            # Contexts c0, c1, ... (partition 0's), p1c0, ... (another's).
            log.append_record(batch_id, i, topic, partition, 1_700_000_000_000 + i, record,
                              (b"p%d" % partition if partition else b"") + b"c%d" % i)
        log.log_seal(batch_id, topic, partition, (1 << 40) + 12345, 3, base_sequence, 5, 0,
                     0, 0)


# From sequence 0 too: a broker that wrote the batch, then expired the id, would take
# it again under the old stamp as a new producer's first.
@pytest.mark.parametrize("base_sequence", [40, 0])
def test_a_producer_id_the_broker_forgot_falls_back_to_at_least_once_and_says_so(
        kafka_broker, topic_name, tmp_path, base_sequence):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    values = [b"r%d" % i for i in range(5)]
    log_a_forgotten_stamp(tmp_path, topic_name, values, base_sequence)
    heard = Heard()
    producer, report = replay(kafka_broker, tmp_path, heard)
    try:
        assert report.possibly_duplicated == 5 and report.records == 5, report
        assert producer.metrics()["netkafka-wal"]["replay_possibly_duplicated"] == 5
    finally:
        producer.close()
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 5)] == values
    assert sorted(heard.outcomes) == sorted(b"c%d" % i for i in range(5))


@pytest.mark.parametrize("base_sequence", [0, 40])
def test_a_batch_the_broker_was_not_asked_about_goes_under_its_stamp_at_least_once(
        kafka_broker, topic_name, tmp_path, base_sequence):
    # DescribeProducers gets no answer: the broker's idempotence would drop a batch it
    # has -- but not one under an id it expired, which takes any sequence.  Sent under
    # its old stamp, it was counted resent (exactly once) while perhaps written twice;
    # it still goes under that stamp (the broker drops it if it knows the id), counted
    # possibly duplicated.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    host, port = kafka_broker.bootstrap.split(",")[0].rsplit(":", 1)
    proxy = DescribeProducersRefusingProxy((host, int(port)))
    values = [b"r%d" % i for i in range(5)]
    log_a_forgotten_stamp(tmp_path, topic_name, values, base_sequence)
    heard = Heard()
    # The connection the request went on is left without an answer until
    # request_timeout_ms ends it; the question is asked again until max_block_ms.
    report = replay_through(proxy, tmp_path, heard, request_timeout_ms=2000, max_block_ms=6000)
    assert (report.records, report.possibly_duplicated, report.resent) == (5, 5, 0), report
    assert proxy.refused >= 2, proxy.refused
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 5)] == values
    assert all(isinstance(o, RecordMetadata) for o in heard.outcomes.values()), heard.outcomes
    assert sorted(heard.outcomes) == sorted(b"c%d" % i for i in range(5))


def test_a_replay_under_a_new_stamp_killed_before_it_finished_is_replayed_again(
        kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    values = [b"r%d" % i for i in range(5)]
    log_a_forgotten_stamp(tmp_path, topic_name, values)
    # The replaying producer seals the batch again under its own stamp, and dies as
    # soon as it has handed it over: the batch has two SEAL entries, no outcome.
    crash("sealed", kafka_broker, topic_name, tmp_path, count=0)
    heard = Heard()
    producer, report = replay(kafka_broker, tmp_path, heard)
    try:
        assert report.records == 5 and report.failed == report.pending == 0, report
    finally:
        producer.close()
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 5)] == values
    assert sorted(heard.outcomes) == sorted(b"c%d" % i for i in range(5))


def test_batches_of_a_partition_the_topic_no_longer_has_fail_alone_and_leave_the_log(
        kafka_broker, topic_name, tmp_path):
    # The topic was deleted and made again with fewer partitions: a dead producer's
    # batches for a partition gone can never be delivered.  Raised from the replay,
    # they failed every producer opened on the directory, for good.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    values = [b"r%d" % i for i in range(5)]
    with WriteAheadLog(tmp_path) as log:
        for partition in (2, 0):
            batch_id = log.open_batch()
            for i, record in enumerate(encoded_records(values, 1_700_000_000_000)):
                log.append_record(batch_id, i, topic_name, partition, 1_700_000_000_000 + i,
                                  record, b"p%d-%d" % (partition, i))
    heard = Heard()
    producer, report = replay(kafka_broker, tmp_path, heard)
    try:
        assert (report.records, report.reencoded, report.failed, report.pending) == (
            10, 5, 5, 0), report
    finally:
        producer.close()
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 5)] == values
    gone = [outcome for context, outcome in heard.outcomes.items() if context[:2] == b"p2"]
    assert len(gone) == 5 and all(isinstance(o, NoSuchPartitionError) for o in gone), gone
    with WriteAheadLog(tmp_path) as log:
        assert log.recovery().batches == []


def test_batches_of_a_topic_gone_fail_at_the_metadata_answer_not_a_timeout(
        kafka_broker, topic_name, tmp_path):
    # The topic was deleted (and the cluster creates none on demand): its batches, sealed
    # or not, can never be delivered.  They held up the constructor for max_block_ms
    # (DescribeProducers waiting for a leader, the sender for the topic's partitions),
    # and then it raised: every producer opened on the directory failed, for good.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    gone = topic_name + "-gone"
    values = [b"r%d" % i for i in range(5)]
    log_a_forgotten_stamp(tmp_path, gone, values)
    with WriteAheadLog(tmp_path) as log:
        for topic in (gone, topic_name):
            batch_id = log.open_batch()
            for i, record in enumerate(encoded_records(values, 1_700_000_000_000)):
                log.append_record(batch_id, i, topic, 0, 1_700_000_000_000 + i, record,
                                  (b"k%d" if topic == topic_name else b"g%d") % i)
    heard = Heard()
    started = time.monotonic()
    producer, report = replay(kafka_broker, tmp_path, heard, allow_auto_create_topics=False)
    try:
        assert time.monotonic() - started < 15
        assert (report.records, report.reencoded, report.failed, report.pending) == (
            15, 5, 10, 0), report
    finally:
        producer.close()
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 5)] == values
    failed = [outcome for context, outcome in heard.outcomes.items() if context[:1] != b"k"]
    assert len(failed) == 10, heard.outcomes
    for outcome in failed:
        assert isinstance(outcome, UnknownTopicOrPartitionError), outcome
        assert repr(gone) in str(outcome) and "UNKNOWN_TOPIC_OR_PARTITION" in str(outcome)
    with WriteAheadLog(tmp_path) as log:
        assert log.recovery().batches == []


def _lagging_once(broker, topic_name, lag):
    """A MetadataProxy before broker whose first answer about topic_name is lag(its
    topic fields), and the list it appends that rewritten topic to."""
    host, port = broker.bootstrap.split(",")[0].rsplit(":", 1)
    proxy = MetadataProxy((host, int(port)))
    lagging = []

    def once(fields):
        topics = []
        for topic in fields["topics"]:
            if topic.name == topic_name and not lagging:
                topic = lag(topic)
                lagging.append(topic)
            topics.append(topic)
        return {**fields, "topics": topics}

    proxy.set_rewrite(once)
    return proxy, lagging


def test_a_topic_one_answer_says_is_unknown_is_asked_again_before_its_batches_fail(
        kafka_broker, topic_name, tmp_path):
    # A broker not yet told of a topic created moments before the crash answers
    # UNKNOWN_TOPIC_OR_PARTITION: taken at its word, the batches failed and left the log.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    proxy, lagging = _lagging_once(kafka_broker, topic_name,
                                   lambda topic: _with(topic, error_code=3, partitions=[]))
    values = [b"r%d" % i for i in range(5)]
    log_a_forgotten_stamp(tmp_path, topic_name, values)
    report = replay_through(proxy, tmp_path, allow_auto_create_topics=False)
    assert (report.records, report.possibly_duplicated, report.failed) == (5, 5, 0), report
    assert lagging, "no answer was made to say the topic is unknown"
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 5)] == values


def test_a_partition_one_answer_lacks_is_asked_again_before_its_batches_fail(
        kafka_broker, topic_name, tmp_path):
    # A broker not yet told of partitions added moments before the crash answers with
    # the old count: taken at its word, partition 1's batches failed and left the log.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    proxy, lagging = _lagging_once(kafka_broker, topic_name, lambda topic: _with(
        topic, partitions=[p for p in topic.partitions if p.partition_index == 0]))
    values = [b"r%d" % i for i in range(5)]
    log_a_forgotten_stamp(tmp_path, topic_name, values, partition=1)
    report = replay_through(proxy, tmp_path)
    assert (report.records, report.possibly_duplicated, report.failed) == (5, 5, 0), report
    assert lagging, "no answer was made to lack the partition"
    assert [(r.partition, r.value) for r in read_topic(kafka_broker.bootstrap, topic_name,
                                                        5)] == [(1, v) for v in values]


def _leaderless(fields):
    """A MetadataProxy rewrite: every partition without a leader."""
    topics = []
    for topic in fields["topics"]:
        parts = [_with(part, error_code=5, leader_id=-1)  # LEADER_NOT_AVAILABLE
                 for part in topic.partitions]
        topics.append(_with(topic, partitions=parts))
    return {**fields, "topics": topics}


def test_leaderless_partitions_are_waited_for_max_block_ms_in_all_then_the_delivery_timeout(
        kafka_broker, topic_name, tmp_path):
    # A leader is waited for to ask it what it has of the batches' producer id (without
    # the answer, batches from sequence 0 go at-least-once): up to max_block_ms for all
    # the partitions, not for each, then the sender waits its delivery timeout.
    partitions = 3
    create_topic(kafka_broker.bootstrap, topic_name, partitions=partitions)
    host, port = kafka_broker.bootstrap.split(",")[0].rsplit(":", 1)
    proxy = MetadataProxy((host, int(port)))
    proxy.set_rewrite(_leaderless)
    for partition in range(partitions):
        log_a_forgotten_stamp(tmp_path, topic_name, [b"r%d" % i for i in range(5)],
                              partition=partition)
    heard = Heard()
    started = time.monotonic()
    try:
        producer = Producer(bootstrap_servers=proxy.bootstrap, wal_dir=str(tmp_path),
                            on_replay=heard, max_block_ms=3000, request_timeout_ms=2000,
                            delivery_timeout_ms=4000)
        try:
            constructed_s = time.monotonic() - started
            report = producer.replay(timeout=60)
            assert (report.records, report.failed, report.pending) == (15, 15, 0), report
        finally:
            producer.close()
    finally:
        proxy.close()
    # max_block_ms for each of the three would be 9 s at least.
    assert 3 <= constructed_s < 7.5, constructed_s
    assert len(heard.outcomes) == 15
    assert all(isinstance(o, KafkaTimeoutError) for o in heard.outcomes.values()), heard.outcomes


def test_append_encoded_rebuilds_a_batch_byte_identical():
    values = [b"a", b"", None, b"d" * 300]
    records = encoded_records(values, 1_700_000_000_000)
    original = RecordBatchBuilder(BufferPool(1 << 16, 1 << 16).acquire(), 1 << 16, 1 << 16)
    rebuilt = RecordBatchBuilder(BufferPool(1 << 16, 1 << 16).acquire(), 1 << 16, 1 << 16)
    for i, value in enumerate(values):
        original.append(None, value, None, 1_700_000_000_000 + i)
        assert rebuilt.append_encoded(records[i], 1_700_000_000_000 + i) == i
    for builder in (original, rebuilt):
        builder.set_producer_state(7, 1, 0)
    assert bytes(original.seal()) == bytes(rebuilt.seal())


def test_append_encoded_refuses_a_record_that_does_not_belong_there():
    records = encoded_records([b"a", b"b"], 1000)
    builder = RecordBatchBuilder(BufferPool(1 << 16, 1 << 16).acquire(), 1 << 16, 1 << 16)
    with pytest.raises(ValueError, match="offset delta 1 .* next record has 0"):
        builder.append_encoded(records[1], 1001)
    with pytest.raises(ValueError, match="not one encoded record"):
        builder.append_encoded(records[0] + b"x", 1000)
    builder.append_encoded(records[0], 1000)
    with pytest.raises(ValueError, match="timestamp delta 1; .* has 1 and 5"):
        builder.append_encoded(records[1], 1005)


@pytest.mark.parametrize("last, expected", [
    (-1, [False, False, False]),    # nothing from this producer id appended
    (99, [False, False, False]),    # the broker's last is the batch before the first
    (104, [True, False, False]),    # the first batch (100..104) is in
    (109, [True, True, False]),
    (117, [True, True, True]),
])
def test_which_sealed_batches_the_broker_has(last, expected):
    seals = [Seal(7, 0, base, count, 0, 0, 0) for base, count in ((100, 5), (105, 5), (110, 8))]
    assert [_appended(seal, last, 100) for seal in seals] == expected


def test_which_sealed_batches_the_broker_has_across_the_sequence_wrap():
    limit = 2**31
    seals = [Seal(7, 0, limit - 3, 5, 0, 0, 0), Seal(7, 0, 2, 4, 0, 0, 0)]
    assert [_appended(s, 1, limit - 3) for s in seals] == [True, False]
    assert [_appended(s, limit - 4, limit - 3) for s in seals] == [False, False]


@pytest.mark.parametrize("known, skipped, adopted_at, kind", [
    (69, 2, 20, "resent"),  # all seven appended: the last five go again
    (39, 0, 0, "resent"),  # four appended: all go again, the broker keeps them
    (-1, 0, 0, "resent"),  # none appended
    # Batches done in the log came after these: the broker's last five are not
    # these, which it would refuse as out of sequence.
    (89, 7, 70, "resent"),
    (64, 6, 60, "resent"),  # the last one's first part appended (split): not its five
    (None, 0, 0, "resent unasked"),  # no answer: under the stamp, at-least-once
])
def test_which_appended_batches_go_again(known, skipped, adopted_at, kind):
    sealed = [type("Batch", (), {"seal": Seal(7, 0, 10 * i, 10, 0, 0, 0)})()
              for i in range(7)]
    adopted = []
    idempotence = type("Idempotence", (), {"adopt": lambda self, *args: adopted.append(args)})()
    recovery = type("Recovery", (), {"record_count": 70})()
    replayer = Replay(recovery, accumulator=None, sender=None, idempotence=idempotence,
                      metadata=None, pool=None, wal=None, on_replay=None, max_block_ms=1000,
                      retry_backoff=RetryBackoff(10, 10), max_request_size=1 << 20)
    plan = replayer._plan(("alpha", 0), sealed, (7, 0), known)
    assert (plan[0], plan[1]) == (sealed[:skipped], kind)
    assert adopted == [("alpha", 0, 7, 0, adopted_at)]


class _Answering:
    """A metadata cache, pool and connection in one, whose DescribeProducers requests
    are answered in turn with `answers`: decoded PartitionProducers, or an exception
    the request fails with (the last answer repeats).  Its Metadata requests for
    partition alpha-0 are answered in turn with `leaders`, (leader, leader epoch)
    pairs (the last repeats); the cache knows epoch `known_epoch`."""

    def __init__(self, *answers, leaders=((0, 5),), known_epoch=5, topic_error=0):
        self.answers = list(answers)
        self.leaders = list(leaders)
        self.known_epoch = known_epoch
        self.topic_error = topic_error
        self.config = type("Config", (), {"client_id": "test"})()
        self.updates = 0  # metadata updates asked for

    def leader_for(self, topic, partition, timeout_s):
        return type("Broker", (), {"node_id": 0, "host": "127.0.0.1", "port": 9092})()

    def leader_epoch(self, topic, partition):
        return self.known_epoch

    def request_update(self):
        self.updates += 1

    def connection(self, node_id, host, port):
        return self

    def describe(self):
        return "node 0"

    def request(self, api_key, encode, decode):
        if api_key == ApiKey.METADATA:
            leader, epoch = self.leaders.pop(0) if len(self.leaders) > 1 else self.leaders[0]
            partitions = [] if self.topic_error else [
                PartitionMetadata(0, 0, leader, epoch, (0, 1), (0, 1), ())]
            answer = MetadataResponse(0, [], None, -1, [TopicMetadata(
                self.topic_error, "alpha", None, False, partitions)], 0)
        else:
            answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        future = concurrent.futures.Future()
        if isinstance(answer, Exception):
            future.set_exception(answer)
        else:
            future.set_result(answer)
        return future


class _CountedBackoff(RetryBackoff):
    """A RetryBackoff that keeps the retry numbers it was asked about."""

    def __init__(self, initial_ms, max_ms):
        super().__init__(initial_ms, max_ms)
        object.__setattr__(self, "asked", [])

    def ms(self, retries):
        self.asked.append(retries)
        return super().ms(retries)


def _last_sequence_answered(*answers, max_block_ms=1000, backoff=None, spent=False,
                            **metadata):
    fake = _Answering(*answers, **metadata)
    recovery = type("Recovery", (), {"record_count": 0})()
    replayer = Replay(recovery, accumulator=None, sender=None, idempotence=None, metadata=fake,
                      pool=fake, wal=None, on_replay=None, max_block_ms=max_block_ms,
                      retry_backoff=backoff or RetryBackoff(10, 10), max_request_size=1 << 20)
    # spent: the replay's budget went on other partitions' leaders already.
    deadline = time.monotonic() + (-1 if spent else max_block_ms / 1000)
    return replayer._last_sequences({("alpha", 0): (7, 0)}, deadline)[("alpha", 0)], fake.updates


def test_describe_producers_answer_of_another_partition_is_not_taken_for_the_one_asked():
    # The answer names partition 3, not the 0 asked about: its last sequence says nothing
    # of partition 0 (taken for it, sealed batches never appended would be deduplicated,
    # their records lost).  Not answered: the broker's idempotence decides.
    producers = (ProducerState(7, 0, 117, 0, -1, -1),)
    assert _last_sequence_answered(
        [PartitionProducers("alpha", 0, 0, None, producers)]) == (117, 0)
    assert _last_sequence_answered(
        [PartitionProducers("alpha", 3, 0, None, producers)]) == (None, 0)
    assert _last_sequence_answered(
        [PartitionProducers("beta", 0, 0, None, producers)]) == (None, 0)
    assert _last_sequence_answered([]) == (None, 0)


def test_describe_producers_is_asked_again_while_the_leader_restarts():
    # The leader the metadata named was down (connection refused), then no longer the
    # leader: taken for no answer, batches from sequence 0 went at-least-once and,
    # appended already, were written twice (tests/test_wal_kill.py's broker restart).
    producers = (ProducerState(7, 0, 117, 0, -1, -1),)
    answers = [KafkaConnectionError("connection refused"),
               [PartitionProducers("alpha", 0, NotLeaderOrFollowerError.code, None, ())],
               [PartitionProducers("alpha", 0, 0, None, producers)]]
    assert _last_sequence_answered(*answers) == (117, 2)


def test_describe_producers_is_taken_only_from_the_leader_throughout():
    # A broker answers DescribeProducers from its own replica, follower or not: a
    # restarted leader, a follower now, answered with batches its new leader never had
    # and it was about to cut (tests/test_wal_kill.py's broker restart lost one).  Its
    # Metadata answers around the question must name it the leader, at one epoch, no
    # older than the cache's; else it is asked again (the metadata updated first).
    producers = (ProducerState(7, 0, 117, 0, -1, -1),)
    answer = [PartitionProducers("alpha", 0, 0, None, producers)]
    assert _last_sequence_answered(answer, leaders=[(0, 5)]) == (117, 0)
    assert _last_sequence_answered(answer, leaders=[(0, 6)]) == (117, 0)
    # Another broker is the leader, then this one is: its second answer is taken.
    assert _last_sequence_answered(answer, leaders=[(1, 6), (1, 6), (0, 6)]) == (117, 1)
    # An election during the question; an epoch older than the one the cache knows
    # (the broker has not heard of an election yet); no leader at all.
    assert _last_sequence_answered(answer, leaders=[(0, 5), (0, 6), (0, 6)]) == (117, 1)
    assert _last_sequence_answered(answer, leaders=[(0, 4), (0, 4), (0, 5)]) == (117, 1)
    assert _last_sequence_answered(answer, leaders=[(-1, 6), (-1, 6), (0, 6)]) == (117, 1)
    # Never the leader within max_block_ms: no answer, the broker's idempotence decides.
    assert _last_sequence_answered(answer, leaders=[(1, 6)], max_block_ms=200)[0] is None
    # Not allowed to describe the topic: asked once (no metadata update for a retry).
    assert _last_sequence_answered(answer, topic_error=TopicAuthorizationFailedError.code,
                                   max_block_ms=5000) == (None, 0)


def test_a_real_follower_answers_describe_producers_and_replay_does_not_take_it(
        kafka_cluster, topic_name):
    # Kafka answers DescribeProducers from any replica: a follower's answer is no
    # error.  Asked of the follower the metadata wrongly names (stale after a restart),
    # replay refuses it; asked of the leader, it takes it.
    create_topic(kafka_cluster.bootstrap, topic_name, partitions=1, replication_factor=3)
    with Producer(bootstrap_servers=kafka_cluster.bootstrap, acks="all") as producer:
        producer.send(topic_name, b"v", partition=0).get(30)
        metadata, pool = producer._metadata, producer._pool
        leader = metadata.leader_for(topic_name, 0, 10)
        follower = next(b for b in metadata.snapshot().brokers.values()
                        if b.node_id != leader.node_id)
        conn = pool.connection(follower.node_id, follower.host, follower.port)
        [asked] = conn.request(
            DESCRIBE_PRODUCERS.key,
            lambda cid, version: encode_describe_producers_request(
                cid, "test", version, {topic_name: [0]}),
            decode_describe_producers_response).result(10)
        assert asked.error_code == 0 and len(asked.producers) == 1
        recovery = type("Recovery", (), {"record_count": 0})()
        replayer = Replay(recovery, accumulator=None, sender=None, idempotence=None,
                          metadata=metadata, pool=pool, wal=None, on_replay=None,
                          max_block_ms=10000, retry_backoff=RetryBackoff(10, 10),
                          max_request_size=1 << 20)
        key = (topic_name, 0)
        deadline = time.monotonic() + 10
        answer = replayer._describe_producers(leader, [key], deadline)[key]
        assert answer.producers == asked.producers
        refused = replayer._describe_producers(follower, [key], deadline)[key]
        assert isinstance(refused, NotLeaderOrFollowerError)
        assert f"names broker {leader.node_id}" in str(refused)


def test_describe_producers_asks_each_leader_once_for_all_its_partitions(kafka_broker,
                                                                        topic_name):
    # One question per partition, each between two Metadata answers of the whole topic,
    # cost a replay over thousands of partitions millions of partitions decoded.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    with Producer(bootstrap_servers=kafka_broker.bootstrap, acks="all") as producer:
        for partition in range(3):
            for i in range(partition + 1):
                producer.send(topic_name, b"v", partition=partition).get(30)
        recovery = type("Recovery", (), {"record_count": 0})()
        replayer = Replay(recovery, accumulator=None, sender=None, idempotence=None,
                          metadata=producer._metadata, pool=producer._pool, wal=None,
                          on_replay=None, max_block_ms=10000,
                          retry_backoff=RetryBackoff(10, 10), max_request_size=1 << 20)
        asked = []
        describe = replayer._describe_producers
        replayer._describe_producers = lambda broker, keys, deadline: (
            asked.append(keys) or describe(broker, keys, deadline))
        leader = producer._metadata.leader_for(topic_name, 0, 10)
        [state] = describe(leader, [(topic_name, 0)], time.monotonic() + 10)[
            (topic_name, 0)].producers
        stamp = (state.producer_id, state.producer_epoch)
        known = replayer._last_sequences({(topic_name, p): stamp for p in range(3)},
                                         time.monotonic() + 10)
    assert known == {(topic_name, p): p for p in range(3)}
    assert asked == [[(topic_name, p) for p in range(3)]]


def test_describe_producers_is_asked_again_only_within_max_block_ms_and_when_retriable():
    started = time.monotonic()
    backoff = _CountedBackoff(5, 80)  # retry_backoff_ms, retry_backoff_max_ms
    known, updates = _last_sequence_answered(KafkaConnectionError("refused"), max_block_ms=300,
                                             backoff=backoff)
    assert known is None and updates > 1
    assert time.monotonic() - started < 5
    # The wait grows with each retry in a row (KIP-580), as every other request's.
    assert backoff.asked == list(range(len(backoff.asked))) and len(backoff.asked) > 2
    # The budget spent on other partitions: a leader the cache knows is still asked, once.
    producers = (ProducerState(7, 0, 117, 0, -1, -1),)
    answer = [PartitionProducers("alpha", 0, 0, None, producers)]
    assert _last_sequence_answered(answer, spent=True) == (117, 0)
    assert _last_sequence_answered(KafkaConnectionError("refused"), answer, spent=True) == (
        None, 0)
    # Refused for good (not offered, not allowed): asked once.
    refused = [PartitionProducers("alpha", 0, TopicAuthorizationFailedError.code, None, ())]
    assert _last_sequence_answered(refused) == (None, 0)
