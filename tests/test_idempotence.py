"""Idempotent recovery (KIP-360, as the Java producer): a batch that fails for good
leaves a hole in its partition's sequence; the batches sealed behind it are re-stamped
under the next epoch from sequence 0 and delivered, not failed with it.

Each test makes one batch fail for good on the real broker while later batches of the
same partition are sealed (queued or in flight), then reads the topic back with
confluent-kafka: every record whose future succeeded is there exactly once, at the
offset its future gave, in send order; the records sent after the failure are
delivered; the failed ones carry the error.
"""
import threading
import time

import pytest

from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch

from netkafka import KafkaTimeoutError, Producer
from netkafka.client.retry import RetryBackoff
from netkafka.record._batch import RecordBatchBuilder
from netkafka.record._pool import BufferPool
from netkafka.errors import (NO_ERROR, MessageTooLargeError, NotLeaderOrFollowerError,
                             OutOfOrderSequenceNumberError, ProtocolError,
                             UnknownProducerIdError)
from netkafka.producer.idempotence import (APPENDED, PASSED_OVER, RESTART, WAIT,
                                           ProducerIdManager)
from netkafka.producer.wal import WriteAheadLog
from netkafka.protocol.init_producer_id import InitProducerIdResponse
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic
from answering import AnsweringConnection
from test_delivery import session_node

# A topic refusing batches above this many bytes, and a record that makes one.
MAX_MESSAGE_BYTES = 2048
TOO_LARGE = b"x" * 4000


def check_topic(bootstrap, topic, delivered, failed=()):
    """delivered: [(value, future)] of one partition in send order, every future
    acknowledged; failed: values whose futures failed (a timed-out batch may still
    have been appended).  Every delivered record is in the log exactly once, in send
    order, at the offset its future gave; nothing is there twice.  Returns the log's
    values."""
    records = read_topic(bootstrap, topic, len(delivered))
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a record was written twice"
    failed = set(failed)
    assert [v for v in values if v not in failed] == [v for v, _ in delivered]
    placed = {(r.partition, r.offset): r.value for r in records}
    for value, future in delivered:
        metadata = future.get(0)
        assert placed[(metadata.partition, metadata.offset)] == value
    return values


def test_batches_behind_a_refused_batch_are_restamped_and_delivered(core_broker, topic_name):
    create_topic(core_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    with Producer(bootstrap_servers=core_broker.bootstrap, batch_size=1024,
                  linger_ms=0, max_in_flight_requests_per_connection=5) as p:
        first = p.send(topic_name, b"first")
        first.get(30)
        before = [(b"before-%03d" % i, p.send(topic_name, b"before-%03d" % i))
                  for i in range(100)]
        refused = p.send(topic_name, TOO_LARGE)  # a batch of its own: MESSAGE_TOO_LARGE
        after = [(b"after-%03d" % i, p.send(topic_name, b"after-%03d" % i))
                 for i in range(400)]
        p.flush(60)
        metrics = p.metrics()["netkafka"]
    with pytest.raises(MessageTooLargeError):
        refused.get(0)
    failed = [v for v, f in before + after if f.failed()]
    assert not failed, [f.exception for _, f in before + after if f.failed()][:3]
    # The hole was filled by starting over once, under the next epoch of the same id.
    assert metrics["partitions_restarted"] == 1 and metrics["producer_epoch_bumps"] == 1
    assert (metrics["producer_epoch"], metrics["producer_ids_fetched"]) == (1, 1)
    # Batches in flight behind the refused one came back refused for their sequence,
    # and were re-stamped with the queued ones.
    assert metrics.get("sender_errors.OUT_OF_ORDER_SEQUENCE_NUMBER", 0) > 0, \
        "no batch was in flight behind the refused one: test proves less than it says"
    check_topic(core_broker.bootstrap, topic_name, [(b"first", first)] + before + after)


EARLY = [b"early-%d" % i for i in range(5)]
LATE = [b"late-%d" % i for i in range(5)]


def send_across_a_freeze(kafka_broker, topic, idle_close):
    """"first" (acknowledged), then the broker is frozen: EARLY is sent, LATE 4 s
    later; EARLY fails at its delivery timeout, then the broker runs again and LATE
    is delivered (it has 4 s left for that).  idle_close: the producer's connection
    to the frozen broker closes first (idle), so that EARLY is never written.
    Returns ([(value, future)] of first and LATE, the producer's metrics)."""
    node = session_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic)
    with Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=0,
                  delivery_timeout_ms=6000, request_timeout_ms=2000,
                  connections_max_idle_ms=300 if idle_close else 540000,
                  retry_backoff_ms=100, reconnect_backoff_max_ms=200,
                  max_block_ms=30000) as p:
        first = p.send(topic, b"first")
        first.get(30)  # the producer id, and the partition's sequence 0
        node.pause()
        try:
            if idle_close:
                time.sleep(1.0)
            early = [p.send(topic, value) for value in EARLY]
            time.sleep(4.0)
            late = [(value, p.send(topic, value)) for value in LATE]
            for future in early:
                with pytest.raises(KafkaTimeoutError):
                    future.get(30)
        finally:
            node.resume()
        for _, future in late:
            future.get(30)
        return [(b"first", first)] + late, p.metrics()["netkafka"]


def test_sealed_batches_behind_a_batch_expired_unsent_are_delivered(kafka_broker, topic_name):
    """The first batch never goes out and expires; the batch sealed behind it,
    numbered after it, is re-stamped and delivered once the broker runs again."""
    delivered, metrics = send_across_a_freeze(kafka_broker, topic_name, idle_close=True)
    assert metrics["partitions_restarted"] == 1
    assert (metrics["producer_epoch"], metrics["producer_ids_fetched"]) == (1, 1)
    in_log = check_topic(kafka_broker.bootstrap, topic_name, delivered)
    assert in_log == [b"first"] + LATE  # EARLY never reached the broker


def test_batch_timed_out_in_flight_is_not_restamped_and_later_ones_are(kafka_broker,
                                                                      topic_name):
    """The first batch is written to the frozen broker and times out: whether the
    broker appended it is unknown, so it fails without being sent under a new stamp,
    while the batch behind it (never sent) is re-stamped.  Whatever the broker does
    with the first once it runs again, nothing is written twice or out of order."""
    delivered, metrics = send_across_a_freeze(kafka_broker, topic_name, idle_close=False)
    assert metrics["sender_batches_retried"] > 0, "no request timed out: test proves nothing"
    assert metrics["partitions_restarted"] == 1
    in_log = check_topic(kafka_broker.bootstrap, topic_name, delivered, failed=EARLY)
    # The frozen broker may append EARLY from its socket buffer when it runs again:
    # then before LATE, which fences it otherwise (a newer epoch).
    assert in_log in ([b"first"] + LATE, [b"first"] + EARLY + LATE)


def test_starting_over_past_the_last_epoch_takes_a_new_producer_id(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2,
                 config={"max.message.bytes": str(MAX_MESSAGE_BYTES)})
    with Producer(bootstrap_servers=kafka_broker.bootstrap, batch_size=1024, linger_ms=0) as p:
        p.send(topic_name, b"elsewhere", partition=1).get(30)
        first_id = p.metrics()["netkafka"]["producer_id"]
        # As if 32767 restarts had happened: partition 0 starts at the last epoch.
        manager = p._idempotence
        with manager._lock:
            manager._current = (first_id, 2**15 - 1)
        before = [(b"before-%03d" % i, p.send(topic_name, b"before-%03d" % i, partition=0))
                  for i in range(50)]
        refused = p.send(topic_name, TOO_LARGE, partition=0)
        after = [(b"after-%03d" % i, p.send(topic_name, b"after-%03d" % i, partition=0))
                 for i in range(200)]
        p.flush(60)
        metrics = p.metrics()["netkafka"]
    with pytest.raises(MessageTooLargeError):
        refused.get(0)
    assert all(f.succeeded() for _, f in before + after)
    assert metrics["producer_ids_fetched"] == 2 and metrics["producer_id"] != first_id
    assert metrics["producer_epoch"] == 0 and metrics["partitions_restarted"] == 1
    records = read_topic(kafka_broker.bootstrap, topic_name, 1 + len(before) + len(after))
    assert [r.value for r in records if r.partition == 0] == [v for v, _ in before + after]


# -- the rules, batch by batch (for answers a 4.x broker does not give, such as
# UNKNOWN_PRODUCER_ID): ProducerIdManager on real sealed batches, read back by
# kafka-python.

KEY = ("topic", 0)
PRODUCER_ID = 77


@pytest.fixture
def manager():
    manager = ProducerIdManager(pool=None, metadata=None, retry_backoff=RetryBackoff(100, 100),
                                max_block_ms=1000)
    with manager._lock:
        manager._current = (PRODUCER_ID, 0)  # as if InitProducerId had answered
        # As if a batch of the partition had been acknowledged under the id: the
        # broker holds its state there, and several batches may be in flight.
        manager._acknowledged_under[KEY] = PRODUCER_ID
    return manager


@pytest.fixture
def sealed():
    """sealed(manager, record_count): a batch numbered and taken by the Sender."""
    pool = BufferPool(4096, 64 * 4096)
    builders = []

    def make(manager, record_count, appended_on=None):
        builder = RecordBatchBuilder(pool.try_acquire(), 4096, 4096)
        for i in range(record_count):
            builder.append(None, b"value-%d" % i, None, 1_700_000_000_000)
        builder.set_producer_state(*manager.next_sequence(*KEY, record_count))
        builder.seal().release()
        builders.append(builder)
        return manager.track(*KEY, builder, record_count, appended_on=appended_on)

    yield make
    for builder in builders:
        builder.mark_failed()
        builder.release()
    assert pool.in_use_bytes == 0


def stamp_of(builder):
    batch = KafkaPythonBatch(bytes(memoryview(builder)))
    assert batch.validate_crc()
    return batch.producer_id, batch.producer_epoch, batch.base_sequence


def test_one_batch_in_flight_until_the_broker_holds_the_producer_ids_state(manager, sealed):
    # A broker with no state of the id for the partition takes any sequence: a batch
    # behind a first one refused for itself (too large) was appended before it.
    with manager._lock:
        manager._acknowledged_under.clear()
    a, b, c = sealed(manager, 1), sealed(manager, 1), sealed(manager, 1)
    assert manager.take(a)
    assert manager.take(b) is False
    assert manager.answered(a, NO_ERROR) is None
    assert manager.take(b)  # a is out of flight: b goes, alone still
    assert manager.take(c) is False
    assert manager.done(a, ok=True)  # the Sender wakes the partition's leader
    assert manager.take(c)
    assert manager.answered(b, NO_ERROR) is None and manager.answered(c, NO_ERROR) is None
    assert manager.done(b, ok=True) is False  # nothing held back any more
    manager.done(c, ok=True)


def test_unknown_producer_id_for_the_first_batch_starts_the_partition_over(manager, sealed):
    a, b, c = sealed(manager, 3), sealed(manager, 4), sealed(manager, 5)
    builders = [entry.batch for entry in (a, b, c)]
    assert [stamp_of(x) for x in builders] == [(77, 0, 0), (77, 0, 3), (77, 0, 7)]
    assert manager.take(a) and manager.take(b)
    assert manager.answered(b, UnknownProducerIdError.code) == WAIT  # a is still ahead of it
    assert manager.restamp([KEY]) == []  # nothing to start over yet
    assert manager.answered(a, UnknownProducerIdError.code) == RESTART  # first: the broker lost the producer
    assert manager.take(c) is False  # nothing goes out under the old stamp now
    assert manager.restamp([KEY]) == [KEY]
    assert [stamp_of(x) for x in builders] == [(77, 1, 0), (77, 1, 3), (77, 1, 7)]
    assert manager.next_sequence(*KEY, 1) == (77, 1, 12)
    assert manager.take(a)
    metrics = manager.metrics()
    assert (metrics["producer_epoch"], metrics["producer_epoch_bumps"],
            metrics["partitions_restarted"]) == (1, 1, 1)


def test_restart_waits_for_batches_in_flight_and_a_first_batch_of_unknown_fate(manager,
                                                                                sealed):
    a, b, c = sealed(manager, 1), sealed(manager, 1), sealed(manager, 1)
    builder_a, builder_b = a.batch, b.batch
    assert manager.take(a) and manager.take(b) and manager.take(c)
    assert manager.answered(c, MessageTooLargeError.code) is None  # not appended
    manager.done(c, ok=False)  # a hole at c
    assert manager.restamp([KEY]) == []  # a and b are in flight
    manager.answered(a, None)  # no answer: a and b may be in the log
    manager.answered(b, None)
    assert manager.restamp([KEY]) == []  # a's fate under the old stamp is unknown
    assert manager.take(b) is False and manager.take(a)  # a is resent, alone
    assert manager.answered(a, NO_ERROR) is None
    manager.done(a, ok=True)
    assert manager.restamp([KEY]) == []  # now b's fate is the unknown one
    assert stamp_of(builder_a) == (77, 0, 0)  # a was never re-stamped
    assert manager.take(b)
    assert manager.answered(b, OutOfOrderSequenceNumberError.code) == RESTART  # not in the log
    assert manager.restamp([KEY]) == [KEY]
    assert stamp_of(builder_b) == (77, 1, 0)


def test_a_batch_behind_a_definite_hole_needs_no_resend_to_be_restamped(manager, sealed):
    a, b, c = sealed(manager, 2), sealed(manager, 2), sealed(manager, 2)
    assert manager.take(a) and manager.take(b) and manager.take(c)
    manager.answered(b, None)  # b's answer lost
    assert manager.answered(a, MessageTooLargeError.code) is None
    manager.done(a, ok=False)  # a is not in the log, so b cannot be either
    manager.answered(c, None)  # nor c, whose answer was lost too
    assert manager.restamp([KEY]) == [KEY]
    assert (stamp_of(b.batch), stamp_of(c.batch)) == ((77, 1, 0), (77, 1, 2))
    # Under the new stamp nothing has been sent: when b then fails with its fate
    # unknown, c (never sent under it) is re-stamped at once, not resent first.
    assert manager.take(b) and manager.answered(b, None) is None
    manager.done(b, ok=False)
    assert manager.restamp([KEY]) == [KEY]
    assert stamp_of(c.batch) == (77, 2, 0)


@pytest.mark.parametrize("late", [False, True])
def test_restamps_are_on_disk_before_the_batches_can_go_out_under_always(tmp_path, late):
    # Lost in a machine crash, a RESTAMP leaves the batch's old stamp in the WAL, sent
    # again by the replay where the broker cannot deduplicate it.
    wal = WriteAheadLog(tmp_path, fsync="always", segment_bytes=64 * 1024,
                        max_bytes=1 << 20, max_record_bytes=1024)
    manager = ProducerIdManager(pool=None, metadata=None, retry_backoff=RetryBackoff(100, 100),
                                max_block_ms=1000, wal=wal)
    with manager._lock:
        manager._current = (PRODUCER_ID, 0)
    pool = BufferPool(4096, 4 * 4096)
    builders = []

    def logged_batch():
        builder = RecordBatchBuilder(pool.try_acquire(), 4096, 4096)
        builder.append(None, b"v", None, 1_700_000_000_000)
        builder.set_producer_state(*manager.next_sequence(*KEY, 1))
        view = builder.seal()
        wal_id = wal.open_batch()
        wal.append_record(wal_id, 0, *KEY, 1_700_000_000_000, b"v")
        wal.log_seal(wal_id, *KEY, *stamp_of(builder), 1, 0, 0, view.nbytes)
        view.release()
        builders.append(builder)
        return builder, wal_id

    try:
        builder, wal_id = logged_batch()
        first = manager.track(*KEY, builder, 1, wal_id)
        assert manager.take(first)
        assert manager.answered(first, OutOfOrderSequenceNumberError.code) == RESTART
        if late:  # numbered under the old stamp, restamped as the Sender takes it
            builder, wal_id = logged_batch()
            assert manager.restamp([KEY]) == [KEY]
            wal.sync()  # the first batch's RESTAMP: only the late one's is looked at
            assert stamp_of(builder) == (PRODUCER_ID, 0, 1)
            manager.track(*KEY, builder, 1, wal_id)
        else:
            assert manager.restamp([KEY]) == [KEY]
        assert stamp_of(builder)[1] == 1
        assert wal.metrics()["restamps_logged"] >= 1
        assert wal.appender.durable_position == wal.appender.position
    finally:
        for builder in builders:
            builder.mark_failed()
            builder.release()
        wal.close()


def test_a_first_batch_refused_after_a_later_one_was_acknowledged_is_in_the_log(manager,
                                                                                 sealed):
    a, b = sealed(manager, 1), sealed(manager, 1)
    assert manager.take(a) and manager.take(b)
    manager.answered(a, None)  # lost; b then appended behind it, so a was too
    assert manager.answered(b, NO_ERROR) is None
    manager.done(b, ok=True)
    assert manager.take(a)
    assert manager.answered(a, OutOfOrderSequenceNumberError.code) == APPENDED


def test_a_first_batch_no_attempt_of_which_was_written_is_passed_over_not_in_the_log(
        manager, sealed):
    # a refused before the append (its leader moved), b acknowledged by a broker that
    # held no state of the producer id (which takes any sequence): a is not in the log,
    # though b is.  Taken for appended, it was acknowledged and its records lost.
    a, b = sealed(manager, 1), sealed(manager, 1)
    assert manager.take(a) and manager.take(b)
    assert manager.answered(a, NotLeaderOrFollowerError.code) is None
    assert manager.answered(b, NO_ERROR) is None
    manager.done(b, ok=True)
    assert manager.take(a)
    assert manager.answered(a, OutOfOrderSequenceNumberError.code) == PASSED_OVER


def test_a_passed_over_batch_leaves_the_batches_behind_it_maybe_in_the_log(manager,
                                                                         sealed):
    # b appended without a by a broker holding no state of the id, c's answer lost (in
    # the log after b, most likely): a fails, and clearing c's flag on the rule that
    # nothing behind a batch the broker lacks can be in the log re-stamped c and wrote
    # it a second time.
    a, b, c = sealed(manager, 1), sealed(manager, 1), sealed(manager, 1)
    assert manager.take(a) and manager.take(b) and manager.take(c)
    assert manager.answered(a, NotLeaderOrFollowerError.code) is None
    assert manager.answered(b, NO_ERROR) is None
    manager.done(b, ok=True)
    assert manager.answered(c, None) is None
    assert manager.take(a)
    assert manager.answered(a, OutOfOrderSequenceNumberError.code) == PASSED_OVER
    manager.done(a, ok=False)
    assert c.maybe_appended
    assert manager.restamp([KEY]) == []  # c goes again under its stamp first


@pytest.mark.parametrize("node_id, verdict", [(3, APPENDED), (4, RESTART)])
def test_a_replayed_batch_its_leader_said_it_has_is_in_the_log_though_refused(
        manager, sealed, node_id, verdict):
    # Replay resends the last batches the leader said it has; after loading a snapshot
    # (a clean restart) a broker keeps the offsets of only the last one, and refuses
    # the others' sequences.  From that leader, the refusal means in the log; taken for
    # a hole, they were written again under a new stamp.  From another broker (the
    # leader moved), it may be a hole.
    entry = sealed(manager, 1, appended_on=3)
    assert manager.take(entry)
    assert manager.answered(entry, OutOfOrderSequenceNumberError.code, node_id=node_id) == verdict


def test_a_refusal_that_carries_the_appends_offset_may_be_in_the_log(manager, sealed):
    # A leader that steps down while an acks=all append waits for its replicas answers
    # NOT_LEADER_OR_FOLLOWER with the append's offset (Kafka's DelayedProduce): taken
    # for not appended, a failing at its delivery timeout let the partition start over
    # and b, in the log too, was written again under the new stamp.
    a, b = sealed(manager, 1), sealed(manager, 1)
    assert manager.take(a) and manager.take(b)
    assert manager.answered(a, NotLeaderOrFollowerError.code, written=True) is None
    assert manager.answered(b, NotLeaderOrFollowerError.code, written=True) is None
    assert a.maybe_appended and b.maybe_appended
    manager.done(a, ok=False)
    assert b.maybe_appended
    assert manager.restamp([KEY]) == []  # not before b's fate is known


def test_a_batch_does_not_overtake_an_earlier_one_waiting_to_be_sent(manager, sealed):
    # a..e refused by a leader that moved, queued again; f, queued for the new leader
    # while the metadata moved them, went first: wherever the broker held no state of
    # the id it was appended ahead of them.
    entries = [sealed(manager, 1) for _ in range(6)]
    for entry in entries[:5]:
        assert manager.take(entry)
    for entry in entries[:5]:
        assert manager.answered(entry, NotLeaderOrFollowerError.code) is None
    assert manager.take(entries[5]) is False
    for entry in entries[:5]:
        assert manager.take(entry)
    assert manager.take(entries[5])
    # Acknowledged and not yet done, a batch holds none back.
    assert manager.answered(entries[0], NO_ERROR) is None
    later = sealed(manager, 1)
    for entry in entries[1:]:
        assert manager.answered(entry, NO_ERROR) is None
    assert manager.take(later)


def test_sequences_of_a_batch_that_never_reached_the_sender_are_given_back(manager, sealed):
    sealed(manager, 3)
    producer_id, epoch, base = manager.next_sequence(*KEY, 4)
    assert base == 3
    manager.release_sequence(*KEY, producer_id, epoch, base, 4)
    assert manager.next_sequence(*KEY, 4) == (77, 0, 3)


def test_a_batch_numbered_before_its_partition_started_over_is_restamped_when_taken(
        manager, sealed):
    a = sealed(manager, 2)
    assert manager.take(a)
    assert manager.answered(a, OutOfOrderSequenceNumberError.code) == RESTART
    late = sealed(manager, 1)  # numbered (77, 0, 2) while the partition starts over
    assert manager.restamp([KEY]) == [KEY]
    assert (stamp_of(a.batch), stamp_of(late.batch)) == ((77, 1, 0), (77, 1, 2))
    pool = BufferPool(4096, 4096)
    builder = RecordBatchBuilder(pool.try_acquire(), 4096, 4096)
    builder.append(None, b"x", None, 1)
    builder.set_producer_state(77, 0, 3)  # numbered under the old stamp, sent after
    builder.seal().release()
    manager.track(*KEY, builder, 1)
    assert stamp_of(builder) == (77, 1, 3)
    builder.mark_failed()
    builder.release()


@pytest.mark.parametrize("producer_id, epoch", [(-1, -1), (-1, 0), (5, -1)])
def test_an_init_producer_id_answer_without_an_id_is_refused(producer_id, epoch):
    # No error code, yet no producer id: stamped on batches, -1 turns the broker's
    # sequence checks (and deduplication) off without a word.
    fake = AnsweringConnection(InitProducerIdResponse(0, 0, producer_id, epoch))
    manager = ProducerIdManager(pool=None, metadata=fake, retry_backoff=RetryBackoff(10, 10),
                                max_block_ms=1000)
    with pytest.raises(ProtocolError, match=f"node 0 answered no error but producer id "
                       f"{producer_id}, epoch {epoch}"):
        manager.next_sequence(*KEY, 1)
    fake.response = InitProducerIdResponse(0, 0, PRODUCER_ID, 0)
    assert manager.next_sequence(*KEY, 1) == (PRODUCER_ID, 0, 0)


FREEZE_PARTITIONS = 3
FREEZE_S = 10.0  # longer than the delivery timeout below: batches sealed early expire


def test_a_stream_across_a_freeze_longer_than_the_delivery_timeout(kafka_broker, topic_name):
    """Records flow to three partitions, five requests in flight, while the broker is
    frozen longer than delivery_timeout_ms and then runs again: batches expire queued
    and in flight, the partitions start over under new epochs, and the stream goes on.
    Read back: every acknowledged record once, at its offset, in send order within its
    partition; a failed record is in the log only if its error said it may be; and the
    last records, sent well after the freeze, are delivered."""
    node = session_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name, partitions=FREEZE_PARTITIONS)
    sent = []  # (partition, value, future) in send order
    stop = threading.Event()
    with Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, batch_size=1024,
                  delivery_timeout_ms=6000, request_timeout_ms=2000, retry_backoff_ms=100,
                  reconnect_backoff_max_ms=200, max_block_ms=60000,
                  max_in_flight_requests_per_connection=5) as p:
        def load():
            i = 0
            while not stop.is_set():
                partition = i % FREEZE_PARTITIONS
                value = b"v-%07d" % i
                sent.append((partition, value, p.send(topic_name, value, partition=partition)))
                i += 1
                time.sleep(0.002)

        sender = threading.Thread(target=load, daemon=True)
        sender.start()
        try:
            while len(sent) < 300:
                time.sleep(0.1)
            sent[299][2].get(30)  # the stream is flowing
            node.pause()
            try:
                time.sleep(FREEZE_S)
            finally:
                node.resume()
            resumed_at = len(sent)
            while len(sent) < resumed_at + 1500:
                time.sleep(0.1)
        finally:
            stop.set()
            sender.join(30)
        p.flush(120)
        metrics = p.metrics()["netkafka"]
    assert all(f.is_done for _, _, f in sent)
    failed = [(partition, value, f.exception) for partition, value, f in sent if f.failed()]
    assert failed, "nothing expired: the test proves less than it says"
    assert metrics["partitions_restarted"] >= 1
    # The stream goes on once the broker runs again: its last records were delivered
    # (those sent just after may still have met batches expiring).
    late = [f for _, _, f in sent[-500:]]
    assert all(f.succeeded() for f in late), [f.exception for f in late if f.failed()][:3]
    records = read_topic(kafka_broker.bootstrap, topic_name, sum(f.succeeded() for _, _, f in sent))
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a record was written twice"
    placed = {(r.partition, r.offset): r.value for r in records}
    in_log = set(values)
    for partition, value, future in sent:
        if future.succeeded():
            metadata = future.get(0)
            assert placed[(metadata.partition, metadata.offset)] == value
    maybe = {value for _, value, error in failed if "may be in the log" in str(error)}
    present_unsaid = [value for _, value, _ in failed if value in in_log and value not in maybe]
    assert not present_unsaid, (f"{len(present_unsaid)} records failed without saying they "
                                f"may be in the log, and are: {present_unsaid[:5]}; errors: "
                                f"{[str(e) for _, v, e in failed if v in present_unsaid][:3]}")
    for partition in range(FREEZE_PARTITIONS):
        logged = [r.value for r in records if r.partition == partition]
        assert logged == [v for part, v, _ in sent if part == partition and v in in_log]
