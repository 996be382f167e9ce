"""Transactions against real brokers, read back by confluent-kafka consumers with
isolation.level read_committed and read_uncommitted.

Every test runs with Transactions V2 (the 4.x broker finalizes transaction.version 2)
and with V1 (transaction_version=1 on the same broker: AddPartitionsToTxn,
AddOffsetsToTxn, Produce v11, EndTxn v4); the V1 tests on Kafka 3.9 run on the
session's 3.9 broker.  Records carry their transaction and index, so that "exactly
once and in order" is checked record by record, not counted.
"""
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import confluent_kafka
import kafka
import pytest

from netkafka import (OffsetAndMetadata, Producer, ProducerFencedError, TopicPartition,
                      TransactionAbortedError, TransactionAbortRequiredError,
                      TransactionStateError)
from netkafka.config import producer_keyword, setting_from_text
from netkafka.errors import (IllegalArgumentError, IllegalGenerationError,
                             InvalidProducerEpochError, InvalidTransactionTimeoutError,
                             InvalidTxnStateError, KafkaError, KafkaTimeoutError,
                             MessageTooLargeError, RecordTooLargeError)
from netkafka.producer.transactions import TransactionState
from netkafka.protocol.find_coordinator import TRANSACTION
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic
from batch_helpers import wait_for
from test_protocol_transactions import group_offsets

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTOCOLS = {"v2": None, "v1": 1}  # transaction_version
JOIN_TIMEOUT_S = 60


@pytest.fixture(params=list(PROTOCOLS))
def protocol(request):
    return request.param


def transactional(bootstrap, protocol, transactional_id=None, **settings):
    """A transactional producer speaking `protocol` ("v1" or "v2"), initialized."""
    producer = Producer(bootstrap_servers=bootstrap,
                        transactional_id=transactional_id or f"txn-{uuid.uuid4().hex[:10]}",
                        transaction_version=PROTOCOLS[protocol], **settings)
    producer.init_transactions()
    return producer


def uses(producer, protocol):
    """The producer's open (or last) transaction used `protocol`."""
    return producer._transaction.states.v2 == (protocol == "v2")


def values(records):
    return [r.value for r in records]


def by_partition(records):
    grouped = {}
    for r in records:
        grouped.setdefault(r.partition, []).append(r.value)
    return grouped


def test_committed_records_are_read_once_in_order_and_aborted_ones_never(kafka_broker,
                                                                          topic_name, protocol):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    sent = {p: [] for p in range(3)}
    with transactional(kafka_broker.bootstrap, protocol, linger_ms=5) as producer:
        for txn in range(4):
            producer.begin_transaction()
            assert uses(producer, protocol)
            batch = [(b"t%d-%03d" % (txn, i), i % 3) for i in range(300)]
            futures = [producer.send(topic_name, value, partition=p) for value, p in batch]
            if txn == 2:
                producer.flush()  # in the log, then aborted: read_uncommitted sees it
                producer.abort_transaction()
                assert all(f.get(0).offset >= 0 for f in futures)
                continue
            producer.commit_transaction()
            for (value, p), future in zip(batch, futures):
                assert future.get(0).partition == p
                sent[p].append(value)
    committed = read_topic(kafka_broker.bootstrap, topic_name, 900,
                           isolation_level="read_committed")
    assert by_partition(committed) == sent
    everything = read_topic(kafka_broker.bootstrap, topic_name, 1200)
    assert sorted(values(everything)) == sorted(
        b"t%d-%03d" % (txn, i) for txn in range(4) for i in range(300))


def test_an_abort_fails_what_it_did_not_send(kafka_broker, topic_name, protocol):
    create_topic(kafka_broker.bootstrap, topic_name)
    with transactional(kafka_broker.bootstrap, protocol, linger_ms=60000,
                       batch_size=1 << 20) as producer:
        producer.begin_transaction()
        futures = [producer.send(topic_name, b"never-%d" % i) for i in range(50)]
        producer.abort_transaction()
        for future in futures:
            with pytest.raises(TransactionAbortedError, match="was aborted before"):
                future.get(10)
        producer.begin_transaction()
        producer.send(topic_name, b"kept")
        producer.commit_transaction()
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1)) == [b"kept"]


def test_100000_records_in_20_transactions_over_4_partitions(kafka_broker, topic_name, protocol):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=4)
    with transactional(kafka_broker.bootstrap, protocol, linger_ms=5,
                       batch_size=256 * 1024) as producer:
        for txn in range(20):
            producer.begin_transaction()
            for i in range(5000):
                producer.produce(topic_name, b"%02d-%04d" % (txn, i), partition=i % 4)
            producer.commit_transaction()
        counts = producer.metrics()["netkafka"]
        assert counts["records_failed"] == 0 and counts["transactions_committed"] == 20
        if protocol == "v1":
            # Each partition added once per transaction, several in one request.
            assert counts["transaction_partitions_added"] == 20 * 4
            assert 20 <= counts["transaction_add_partitions_requests"] < 20 * 4
        else:  # the leaders add them
            assert counts["transaction_add_partitions_requests"] == 0
    committed = read_topic(kafka_broker.bootstrap, topic_name, 100_000,
                           isolation_level="read_committed")
    assert len(committed) == 100_000
    grouped = by_partition(committed)
    for p in range(4):
        assert grouped[p] == [b"%02d-%04d" % (txn, i) for txn in range(20)
                              for i in range(p, 5000, 4)]


def test_send_produce_and_send_batch_inside_one_transaction(kafka_broker, topic_name, protocol):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    with transactional(kafka_broker.bootstrap, protocol) as producer:
        producer.begin_transaction()
        future = producer.send(topic_name, b"send", partition=0)
        producer.produce(topic_name, b"produce", partition=0)
        result = producer.send_batch(topic_name, [b"batch-0", b"batch-1"], partitions=[0, 1])
        producer.commit_transaction()
        assert future.get(0).offset >= 0
        assert result.get(0) is result and result.failed_count == 0
    committed = read_topic(kafka_broker.bootstrap, topic_name, 4,
                           isolation_level="read_committed")
    assert by_partition(committed) == {0: [b"send", b"produce", b"batch-0"], 1: [b"batch-1"]}


def test_calls_in_the_wrong_state_are_refused(kafka_broker, topic_name, protocol):
    create_topic(kafka_broker.bootstrap, topic_name)
    plain = Producer(bootstrap_servers=kafka_broker.bootstrap)
    with plain:
        with pytest.raises(TransactionStateError, match="needs a transactional producer"):
            plain.begin_transaction()
    producer = Producer(bootstrap_servers=kafka_broker.bootstrap,
                        transactional_id=f"txn-{uuid.uuid4().hex[:10]}",
                        transaction_version=PROTOCOLS[protocol])
    with producer:
        for call in (lambda: producer.send(topic_name, b"x"),
                     lambda: producer.produce(topic_name, b"x"),
                     lambda: producer.send_batch(topic_name, [b"x"])):
            with pytest.raises(TransactionStateError, match=r"^a record before init_transactions"):
                call()
        with pytest.raises(TransactionStateError, match="before init_transactions"):
            producer.begin_transaction()
        producer.init_transactions()
        with pytest.raises(TransactionStateError, match=r"init_transactions\(\) called again"):
            producer.init_transactions()
        # Outside a transaction every way in refuses the record (produce() and
        # send_batch() raise too: it is the call, not one record, that is wrong).
        for call in (lambda: producer.send(topic_name, b"x"),
                     lambda: producer.produce(topic_name, b"x"),
                     lambda: producer.send_batch(topic_name, [b"x"]),
                     lambda: producer.send_batch(topic_name, []),
                     producer.commit_transaction, producer.abort_transaction,
                     lambda: producer.send_offsets_to_transaction({("t", 0): 1}, "g")):
            with pytest.raises(TransactionStateError, match="call begin_transaction"):
                call()
        producer.begin_transaction()
        with pytest.raises(TransactionStateError, match="while a transaction is open"):
            producer.begin_transaction()
        with pytest.raises(TypeError, match="takes the consumer group once"):
            producer.send_offsets_to_transaction({("t", 0): 1})
        producer.abort_transaction()
        assert producer._transaction.states.state == TransactionState.READY
    with pytest.raises(Exception, match="after close"):
        producer.begin_transaction()


def test_a_failed_record_fails_the_commit_and_an_abort_goes_on(kafka_broker, topic_name,
                                                               protocol):
    create_topic(kafka_broker.bootstrap, topic_name, config={"max.message.bytes": "2048"})
    with transactional(kafka_broker.bootstrap, protocol, batch_size=1024) as producer:
        producer.begin_transaction()
        small = producer.send(topic_name, b"small")
        too_large = producer.send(topic_name, b"x" * 4000)  # a batch the broker refuses
        with pytest.raises(TransactionAbortRequiredError) as raised:
            producer.commit_transaction()
        assert isinstance(raised.value.cause, MessageTooLargeError)
        with pytest.raises(MessageTooLargeError):
            too_large.get(0)
        with pytest.raises(TransactionAbortRequiredError):
            producer.send(topic_name, b"refused")
        producer.abort_transaction()
        # Sent with the refused batch or thrown away by the abort: either way done.
        assert small.is_done
        producer.begin_transaction()
        producer.send(topic_name, b"next")
        producer.commit_transaction()
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1,
                             isolation_level="read_committed")) == [b"next"]


def test_close_aborts_an_open_transaction(kafka_broker, topic_name, protocol):
    """As the Java client's close(): a transaction left open is aborted, not left to its
    coordinator until transaction_timeout_ms (ten minutes here), all that time stopping
    read_committed consumers of its partitions before its first record; what it had
    not sent fails instead of going out into it."""
    create_topic(kafka_broker.bootstrap, topic_name)
    producer = transactional(kafka_broker.bootstrap, protocol, transaction_timeout_ms=600_000,
                             linger_ms=60_000, batch_size=1 << 20)
    producer.begin_transaction()
    in_the_log = producer.send(topic_name, b"in the log")
    producer.flush()
    unsent = [producer.send(topic_name, b"unsent-%d" % i) for i in range(10)]
    producer.close()
    assert in_the_log.get(0).offset == 0
    for future in unsent:
        with pytest.raises(TransactionAbortedError, match="was aborted before"):
            future.get(0)
    with transactional(kafka_broker.bootstrap, protocol) as other:
        other.begin_transaction()
        other.send(topic_name, b"after")
        other.commit_transaction()
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1, timeout_s=30,
                             isolation_level="read_committed")) == [b"after"]
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 2)) == [b"in the log",
                                                                         b"after"]


def pausable_transactional(kafka_broker, topic_name, protocol, max_block_ms):
    """(the session broker's nodes, to pause, and a transactional producer on a new
    topic whose transaction stays open for 10 minutes)."""
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    create_topic(kafka_broker.bootstrap, topic_name)
    return nodes, transactional(kafka_broker.bootstrap, protocol,
                                transaction_timeout_ms=600_000, max_block_ms=max_block_ms)


def committing_on_another_thread(producer):
    """Starts producer.commit_transaction() on a thread of its own and waits until it
    commits (its records not acknowledged yet: the broker paused); returns (that thread,
    [its outcome once it ends: None, or the exception it raised])."""
    outcome = []

    def commit():
        try:
            outcome.append(producer.commit_transaction())
        except Exception as exc:  # noqa: BLE001 -- the test looks at it
            outcome.append(exc)

    committer = threading.Thread(target=commit)
    committer.start()
    states = producer._transaction.states
    wait_for(lambda: states.state == TransactionState.COMMITTING, 30,
             "the other thread's commit")
    return committer, outcome


def test_close_finishes_a_commit_that_ran_out_of_time(kafka_broker, topic_name, protocol):
    """A commit_transaction() that ran out of max_block_ms (the broker frozen meanwhile:
    its records not acknowledged yet) is finished by close(), as the Java client's
    close() finishes it, rather than left open until its coordinator aborts it after
    transaction_timeout_ms, read_committed consumers stopping before it until then."""
    nodes, producer = pausable_transactional(kafka_broker, topic_name, protocol, 2000)
    producer.begin_transaction()
    future = producer.send(topic_name, b"committed at close")
    nodes[0].pause()
    try:
        with pytest.raises(KafkaTimeoutError):
            producer.commit_transaction()
    finally:
        nodes[0].resume()
    assert producer._transaction.states.state == TransactionState.COMMITTING
    producer.close(30)
    assert future.get(0).offset == 0
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1, timeout_s=30,
                             isolation_level="read_committed")) == [b"committed at close"]


def test_a_record_and_close_while_another_thread_commits_are_told_so(kafka_broker, topic_name,
                                                                    protocol, caplog):
    """While another thread's commit_transaction() ran, a record sent was told "while
    the transaction commits (commit_transaction() did not finish: call it again)", and
    close() logged that the transaction was not ended and that its coordinator would
    abort it -- while that commit went on and committed.  Both name the running call
    now."""
    nodes, producer = pausable_transactional(kafka_broker, topic_name, protocol, 60_000)
    try:
        producer.begin_transaction()
        future = producer.send(topic_name, b"committed")
        nodes[0].pause()
        try:
            committer, outcome = committing_on_another_thread(producer)
            with pytest.raises(TransactionStateError,
                               match=r"a record while commit_transaction\(\) runs on another "
                                     r"thread: the transaction takes no more records"):
                producer.send(topic_name, b"refused")
            with caplog.at_level("INFO", logger="netkafka"):
                producer._transaction.end_for_close(0)  # close()'s first step
        finally:
            nodes[0].resume()
        committer.join(60)
        assert outcome == [None]  # committed, no exception
        messages = [r.getMessage() for r in caplog.records]
        assert not [m for m in messages if "coordinator aborts it" in m], messages
        assert [m for m in messages if "commit_transaction() runs on another thread at "
                                       "close()" in m], messages
        assert future.get(0).offset == 0
    finally:
        producer.close(30)
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1, timeout_s=30,
                             isolation_level="read_committed")) == [b"committed"]


def test_close_waits_for_a_commit_another_thread_runs(kafka_broker, topic_name, protocol):
    """close() while another thread's commit_transaction() waited for its records (the
    broker frozen) returned as soon as the records were delivered, shutting the I/O
    threads under the commit's EndTxn: the commit raised KafkaTimeoutError ("the
    producer closed"), although the coordinator committed the transaction.  As the
    Java client's close() lets a commit under way finish, close() now waits for it
    (within its timeout), and the commit succeeds."""
    nodes, producer = pausable_transactional(kafka_broker, topic_name, protocol, 60_000)
    producer.begin_transaction()
    future = producer.send(topic_name, b"committed")
    closer = threading.Thread(target=producer.close, args=(60,))
    nodes[0].pause()
    try:
        committer, outcome = committing_on_another_thread(producer)
        closer.start()
        wait_for(lambda: producer._closer is not None, 30, "close()")
    finally:
        nodes[0].resume()
    closer.join(JOIN_TIMEOUT_S)
    committer.join(JOIN_TIMEOUT_S)
    assert not closer.is_alive() and not committer.is_alive()
    assert outcome == [None]  # committed, no exception
    assert future.get(0).offset == 0
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1, timeout_s=30,
                             isolation_level="read_committed")) == [b"committed"]


@pytest.mark.parametrize("broker", ["kafka_broker", "kafka_broker_3_9"])
def test_an_abort_right_after_a_send_waits_for_its_partition_to_be_added(request, broker,
                                                                         topic_name):
    """V1: the transaction thread adds a batch's partition to the transaction
    (AddPartitionsToTxn) once the batch is handed to the sender.  An abort right then
    ends the transaction only after that is answered: an EndTxn(abort) reaching the
    coordinator first finds no transaction to abort and is refused (INVALID_TXN_STATE,
    which failed the producer for good).  After a commit the coordinator writes its
    markers for a while, answering CONCURRENT_TRANSACTIONS to both requests, whose
    retries then race."""
    bootstrap = request.getfixturevalue(broker).bootstrap
    create_topic(bootstrap, topic_name, partitions=4)
    with transactional(bootstrap, "v1") as producer:
        states = producer._transaction.states
        for i in range(50):
            producer.begin_transaction()
            producer.send(topic_name, b"committed-%02d" % i, partition=i % 4)
            producer.commit_transaction()
            producer.begin_transaction()
            aborted = producer.send(topic_name, b"aborted-%02d" % i, partition=(i + 1) % 4)
            deadline = time.monotonic() + 30
            while not states.partitions_enrolled:  # handed to the sender
                assert time.monotonic() < deadline, "the batch was never handed over"
                time.sleep(0.001)
            producer.abort_transaction()
            assert aborted.is_done
    committed = read_topic(bootstrap, topic_name, 50, isolation_level="read_committed")
    assert sorted(values(committed)) == [b"committed-%02d" % i for i in range(50)]


def test_a_row_send_batch_refuses_fails_the_transaction(kafka_broker, topic_name, protocol):
    """A row refused before reaching a batch (larger than max_request_size, of the wrong
    type) fails alone, the other rows going out: in a transaction that commit would
    lose it, so the transaction fails as with any failed record."""
    create_topic(kafka_broker.bootstrap, topic_name)
    with transactional(kafka_broker.bootstrap, protocol, max_request_size=10_000) as producer:
        for refused in (b"x" * 20_000, 7):
            producer.begin_transaction()
            result = producer.send_batch(topic_name, [b"row-0", refused, b"row-2"])
            with pytest.raises(TransactionAbortRequiredError) as raised:
                producer.commit_transaction()
            producer.abort_transaction()  # which waits for the rows' batches in flight
            assert raised.value.cause is dict(result.get(0).errors)[1]
        producer.begin_transaction()
        producer.send_batch(topic_name, [b"next"])
        producer.commit_transaction()
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1,
                             isolation_level="read_committed")) == [b"next"]


def test_a_zombie_is_fenced(kafka_broker, topic_name, protocol):
    create_topic(kafka_broker.bootstrap, topic_name)
    txn_id = f"zombie-{uuid.uuid4().hex[:10]}"
    zombie = transactional(kafka_broker.bootstrap, protocol, txn_id)
    try:
        zombie.begin_transaction()
        zombie.send(topic_name, b"zombie-1").get(30)
        with transactional(kafka_broker.bootstrap, protocol, txn_id) as successor:
            # The successor's init_transactions() aborted the zombie's transaction and
            # bumped the epoch: everything the zombie does now is refused.
            late = zombie.send(topic_name, b"zombie-2")
            with pytest.raises(InvalidProducerEpochError):
                late.get(30)
            with pytest.raises((ProducerFencedError, TransactionAbortRequiredError)):
                zombie.commit_transaction()
            if zombie._transaction.states.state != TransactionState.FATAL_ERROR:
                with pytest.raises(ProducerFencedError):
                    zombie.abort_transaction()
            for call in (zombie.begin_transaction, zombie.abort_transaction,
                         lambda: zombie.send(topic_name, b"zombie-3")):
                with pytest.raises(ProducerFencedError, match="failed for good earlier"):
                    call()
            successor.begin_transaction()
            successor.send(topic_name, b"successor")
            successor.commit_transaction()
    finally:
        zombie.close()
    committed = read_topic(kafka_broker.bootstrap, topic_name, 1, isolation_level="read_committed")
    assert values(committed) == [b"successor"]


# A producer process that leaves a transaction open: it flushes, says so, and waits
# to be killed.
CHILD = """
import sys, time
from netkafka import Producer
bootstrap, topic, transactional_id, version = sys.argv[1:5]
producer = Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                    transaction_version=None if version == "None" else int(version))
producer.init_transactions()
producer.begin_transaction()
for i in range(1000):
    producer.produce(topic, b"dead-%04d" % i, partition=i % 2)
producer.flush()
print("flushed", flush=True)
time.sleep(600)
"""


def test_a_killed_producers_transaction_is_aborted_by_the_next(kafka_broker, topic_name,
                                                                protocol):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    txn_id = f"killed-{uuid.uuid4().hex[:10]}"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, kafka_broker.bootstrap, topic_name, txn_id,
         str(PROTOCOLS[protocol])],
        cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "flushed"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    # In the log, in a transaction nobody will end: read_committed stops before it.
    assert len(read_topic(kafka_broker.bootstrap, topic_name, 1000)) == 1000
    assert read_topic(kafka_broker.bootstrap, topic_name,
                      isolation_level="read_committed") == []
    with transactional(kafka_broker.bootstrap, protocol, txn_id) as successor:
        successor.begin_transaction()
        for i in range(10):
            successor.send(topic_name, b"next-%d" % i, partition=i % 2)
        successor.commit_transaction()
    committed = read_topic(kafka_broker.bootstrap, topic_name, 10,
                           isolation_level="read_committed")
    assert sorted(values(committed)) == sorted(b"next-%d" % i for i in range(10))


def test_a_record_send_refuses_fails_the_transaction(kafka_broker, topic_name, protocol):
    """As the Java client's send(): a record refused by send(), produce() or
    send_batch() -- too large, no metadata within max_block_ms -- fails the
    transaction, which committed would lack it even if the caller let the exception
    go; a bad argument does not."""
    create_topic(kafka_broker.bootstrap, topic_name)
    missing = f"{topic_name}-missing"
    with transactional(kafka_broker.bootstrap, protocol, max_request_size=10_000,
                       max_block_ms=3000, allow_auto_create_topics=False) as producer:
        for refused, raises in (
                (lambda: producer.send(topic_name, b"x" * 20_000), RecordTooLargeError),
                (lambda: producer.produce(topic_name, b"x" * 20_000), RecordTooLargeError),
                (lambda: producer.send(missing, b"x"), KafkaTimeoutError),
                (lambda: producer.send_batch(missing, [b"x"], keys=[b"k"]), KafkaTimeoutError)):
            producer.begin_transaction()
            producer.send(topic_name, b"before")
            with pytest.raises(raises) as raised:
                refused()
            with pytest.raises(TransactionAbortRequiredError) as failed:
                producer.commit_transaction()
            assert failed.value.cause is raised.value
            producer.abort_transaction()
        # produce() counts what it does not raise: the transaction fails all the same.
        producer.begin_transaction()
        producer.produce(missing, b"x")
        with pytest.raises(TransactionAbortRequiredError) as failed:
            producer.commit_transaction()
        assert isinstance(failed.value.cause, KafkaTimeoutError)
        producer.abort_transaction()
        producer.begin_transaction()
        with pytest.raises(TypeError):
            producer.send(topic_name, 7)
        # A bad argument to produce() too: raised, not counted against the transaction.
        with pytest.raises(ValueError, match="timestamp_ms=-5 is negative"):
            producer.produce(topic_name, b"x", timestamp_ms=-5)
        with pytest.raises(ValueError, match="partition must be >= 0, got -1"):
            producer.produce(topic_name, b"x", partition=-1)
        producer.send(topic_name, b"next")
        producer.commit_transaction()
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1,
                             isolation_level="read_committed")) == [b"next"]


def test_a_record_for_a_partition_the_topic_lacks_fails_the_transaction(kafka_broker,
                                                                         topic_name, protocol):
    """send() to partition 7 of a 4-partition topic raised IllegalArgumentError and left
    the transaction as it was: a caller that let the exception go committed without
    the record.  As the Java client's send() (which fails such a record after
    max_block_ms, failing the transaction), the record fails the transaction now;
    produce() failed it already."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=4)
    with transactional(kafka_broker.bootstrap, protocol) as producer:
        for refused in (lambda: producer.send(topic_name, b"x", partition=7),
                        lambda: producer.produce(topic_name, b"x", partition=7)):
            producer.begin_transaction()
            producer.send(topic_name, b"before", partition=1)
            try:
                refused()
            except IllegalArgumentError as exc:  # send() raises it, produce() counts it
                assert "has no partition 7" in str(exc)
            with pytest.raises(TransactionAbortRequiredError, match="has no partition 7"):
                producer.commit_transaction()
            producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic_name, b"next", partition=1)
        producer.commit_transaction()
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1,
                             isolation_level="read_committed")) == [b"next"]


def consumed_by_a_member(bootstrap, topic, group, client, count):
    """A consumer of `client` ("confluent-kafka" or "kafka-python") that joined `group`
    and read `count` records of `topic`; returns (consumer, offsets to commit, group
    metadata) in that client's own shapes."""
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    if client == "confluent-kafka":
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                             "enable.auto.commit": False,
                                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        read = 0
        while read < count:
            assert time.monotonic() < deadline, "the consumer read too little"
            read += sum(1 for m in consumer.consume(count, 0.5) if m.error() is None)
        return (consumer, consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata())
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                   enable_auto_commit=False, auto_offset_reset="earliest")
    read = 0
    while read < count:
        assert time.monotonic() < deadline, "the consumer read too little"
        read += sum(len(batch) for batch in consumer.poll(500).values())
    offsets = {TopicPartition(tp.topic, tp.partition): OffsetAndMetadata(consumer.position(tp))
               for tp in consumer.assignment()}
    return consumer, offsets, consumer.group_metadata()


@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_offsets_are_committed_with_the_transaction_and_dropped_with_its_abort(
        kafka_broker, topic_name, protocol, client):
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(kafka_broker.bootstrap, source)
    create_topic(kafka_broker.bootstrap, sink)
    with Producer(bootstrap_servers=kafka_broker.bootstrap) as plain:
        for i in range(10):
            plain.send(source, b"in-%d" % i)
    group = f"group-{uuid.uuid4().hex[:8]}"
    consumer, offsets, group_metadata = consumed_by_a_member(
        kafka_broker.bootstrap, source, group, client, 10)
    try:
        with transactional(kafka_broker.bootstrap, protocol) as producer:
            for commit in (False, True):
                producer.begin_transaction()
                producer.send(sink, b"out-%s" % str(commit).encode())
                producer.send_offsets_to_transaction(offsets, group_metadata)
                if commit:
                    producer.commit_transaction()
                else:
                    producer.abort_transaction()
                    assert group_offsets(kafka_broker.bootstrap, group) == {}
            assert group_offsets(kafka_broker.bootstrap, group,
                                 until=bool) == {(source, 0): (10, "")}
    finally:
        consumer.close()
    assert values(read_topic(kafka_broker.bootstrap, sink, 1,
                             isolation_level="read_committed")) == [b"out-True"]


def test_no_commit_while_send_offsets_has_not_gone_through(kafka_broker, topic_name, protocol):
    """send_offsets_to_transaction() that ran out of max_block_ms leaves the transaction
    open, but it cannot commit until a call goes through: it would commit the records
    without (all) the offsets, and the input would be read and written again.  (The
    group coordinator refuses offsets of a topic that does not exist with a retriable
    UNKNOWN_TOPIC_OR_PARTITION, while taking those of the partitions it knows.)"""
    create_topic(kafka_broker.bootstrap, topic_name)
    group = f"group-{uuid.uuid4().hex[:8]}"
    with transactional(kafka_broker.bootstrap, protocol, max_block_ms=2000) as producer:
        producer.begin_transaction()
        producer.send(topic_name, b"aborted")
        offsets = {(topic_name, 0): 1, (f"{topic_name}-missing", 0): 5}
        for _ in range(2):  # called again, it goes on
            with pytest.raises(KafkaTimeoutError, match="TxnOffsetCommit"):
                producer.send_offsets_to_transaction(offsets, group)
            with pytest.raises(TransactionStateError,
                               match=r"send_offsets_to_transaction\(\) did not finish"):
                producer.commit_transaction()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic_name, b"committed")
        producer.send_offsets_to_transaction({(topic_name, 0): 2}, group)
        producer.commit_transaction()
    assert values(read_topic(kafka_broker.bootstrap, topic_name, 1,
                             isolation_level="read_committed")) == [b"committed"]
    assert group_offsets(kafka_broker.bootstrap, group, until=bool) == {(topic_name, 0): (2, "")}


def test_offsets_of_a_stale_member_are_refused(kafka_broker, topic_name, protocol):
    """KIP-447: offsets committed for a generation the group has left behind fail the
    transaction (IllegalGeneration), whatever the offsets."""
    create_topic(kafka_broker.bootstrap, topic_name)
    with Producer(bootstrap_servers=kafka_broker.bootstrap) as plain:
        plain.send(topic_name, b"in")
    group = f"group-{uuid.uuid4().hex[:8]}"
    consumer, offsets, metadata = consumed_by_a_member(
        kafka_broker.bootstrap, topic_name, group, "kafka-python", 1)
    try:
        stale = metadata._replace(generation_id=metadata.generation_id + 5)
        with transactional(kafka_broker.bootstrap, protocol) as producer:
            producer.begin_transaction()
            with pytest.raises(IllegalGenerationError):
                producer.send_offsets_to_transaction(offsets, group_metadata=stale)
            with pytest.raises(TransactionAbortRequiredError):
                producer.commit_transaction()
            producer.abort_transaction()
    finally:
        consumer.close()


def test_the_coordinator_aborts_a_transaction_open_past_its_timeout(kafka_broker, topic_name,
                                                                     protocol):
    """The broker checks every 10 s (transaction.abort.timed.out.transaction.cleanup
    .interval.ms) for transactions open longer than their transaction_timeout_ms, and
    aborts them under the next epoch: the late commit is refused as the Java client's
    is -- V1: the epoch is stale (PRODUCER_FENCED); V2: the last transaction of the
    epoch before ended in an abort, not a commit (INVALID_TXN_STATE).  Both are fatal."""
    create_topic(kafka_broker.bootstrap, topic_name)
    with transactional(kafka_broker.bootstrap, protocol, transaction_timeout_ms=1000) as producer:
        producer.begin_transaction()
        producer.send(topic_name, b"timed-out").get(30)
        time.sleep(12)
        with pytest.raises(ProducerFencedError if protocol == "v1" else InvalidTxnStateError):
            producer.commit_transaction()
        assert producer._transaction.states.state == TransactionState.FATAL_ERROR
    assert read_topic(kafka_broker.bootstrap, topic_name,
                      isolation_level="read_committed") == []


def test_a_transaction_timeout_beyond_the_brokers_is_refused(kafka_broker):
    with Producer(bootstrap_servers=kafka_broker.bootstrap, transactional_id="too-long",
                  transaction_timeout_ms=3_600_000) as producer:
        with pytest.raises(InvalidTransactionTimeoutError):
            producer.init_transactions()
        with pytest.raises(InvalidTransactionTimeoutError, match="failed for good"):
            producer.init_transactions()


def test_java_dotted_names_of_the_transaction_settings():
    assert producer_keyword("transactional.id") == "transactional_id"
    assert producer_keyword("transaction.timeout.ms") == "transaction_timeout_ms"
    assert setting_from_text("transaction_timeout_ms", "30000") == 30000
    assert setting_from_text("transactional_id", "tx-7") == "tx-7"


# --- Kafka 3.9: Transactions V1 only


def test_v1_on_kafka_3_9(kafka_broker_3_9, topic_name):
    create_topic(kafka_broker_3_9.bootstrap, topic_name, partitions=2)
    committed = []
    with transactional(kafka_broker_3_9.bootstrap, "v2") as producer:  # V2 asked, V1 had
        for txn, commit in enumerate((True, False, True)):
            producer.begin_transaction()
            assert uses(producer, "v1")
            batch = [b"%d-%03d" % (txn, i) for i in range(100)]
            for i, value in enumerate(batch):
                producer.send(topic_name, value, partition=i % 2)
            producer.flush()
            if commit:
                producer.commit_transaction()
                committed += batch
            else:
                producer.abort_transaction()
    assert sorted(values(read_topic(kafka_broker_3_9.bootstrap, topic_name, 200,
                                    isolation_level="read_committed"))) == sorted(committed)
    assert len(read_topic(kafka_broker_3_9.bootstrap, topic_name, 300)) == 300


def test_v1_offsets_on_kafka_3_9(kafka_broker_3_9, topic_name):
    create_topic(kafka_broker_3_9.bootstrap, topic_name)
    group = f"group-{uuid.uuid4().hex[:8]}"
    with transactional(kafka_broker_3_9.bootstrap, "v2") as producer:
        producer.begin_transaction()
        producer.send(topic_name, b"out")
        producer.send_offsets_to_transaction({TopicPartition(topic_name, 0): 7}, group)
        producer.commit_transaction()
    assert group_offsets(kafka_broker_3_9.bootstrap, group,
                         until=bool) == {(topic_name, 0): (7, "")}


def transaction_state(admin, transactional_id):
    """The transaction coordinator's state of transactional_id ("Ongoing", ...), as
    kafka-python's admin client reads it (DescribeTransactions)."""
    return admin.describe_transactions([transactional_id])[transactional_id].state


@pytest.mark.parametrize("unanswered", ["AddOffsetsToTxn", "AddPartitionsToTxn"])
def test_v1_an_abort_ends_what_an_unanswered_add_opened(kafka_broker_3_9, topic_name,
                                                         unanswered):
    """An AddOffsetsToTxn that got no answer within max_block_ms, or an
    AddPartitionsToTxn given up at delivery_timeout_ms (the broker frozen), that the
    coordinator took once it ran again, holds the transaction open there.  The abort
    must end it with EndTxn: skipped, a transaction the offsets opened stayed open until
    transaction_timeout_ms and the next one joined it; for partitions, the abort's
    InitProducerId found it ongoing, and the coordinator fenced the producer for good
    (ProducerFencedError, Kafka 3.9)."""
    nodes = getattr(kafka_broker_3_9, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    bootstrap = kafka_broker_3_9.bootstrap
    create_topic(bootstrap, topic_name)
    offsets = unanswered == "AddOffsetsToTxn"
    settings = {"max_block_ms": 2000} if offsets else {
        "max_block_ms": 3000, "request_timeout_ms": 1000, "delivery_timeout_ms": 2500,
        "linger_ms": 0}
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        with transactional(bootstrap, "v1", transaction_timeout_ms=600_000,
                           **settings) as producer:
            transactional_id = producer.config.transactional_id
            producer.partitions_for(topic_name)  # known before the freeze
            producer.begin_transaction()
            nodes[0].pause()
            try:
                if offsets:
                    with pytest.raises(KafkaTimeoutError, match="AddOffsetsToTxn"):
                        producer.send_offsets_to_transaction(
                            {(topic_name, 0): 1}, f"group-{uuid.uuid4().hex[:8]}")
                else:
                    future = producer.send(topic_name, b"aborted")
                    with pytest.raises(KafkaError):
                        future.get(30)  # failed with the AddPartitionsToTxn given up
            finally:
                nodes[0].resume()
            deadline = time.monotonic() + 30
            while transaction_state(admin, transactional_id) != "Ongoing":
                assert time.monotonic() < deadline, f"the coordinator never took {unanswered}"
                time.sleep(0.1)
            producer.abort_transaction()
            # Ended (Empty once the abort's InitProducerId bumped the epoch after it).
            assert transaction_state(admin, transactional_id) in ("PrepareAbort",
                                                                  "CompleteAbort", "Empty")
            producer.begin_transaction()
            producer.send(topic_name, b"next")
            producer.commit_transaction()
    finally:
        admin.close()
    assert values(read_topic(bootstrap, topic_name, 1,
                             isolation_level="read_committed")) == [b"next"]


def test_v1_an_abort_bumps_the_epoch_only_after_a_failure(kafka_broker_3_9, topic_name):
    """As the Java client's: a V1 abort asks InitProducerId for the next epoch only when
    the transaction failed (an abortable error) or left a hole in a partition's
    sequences; an abort of records all acknowledged ends with EndTxn alone, and the
    next transaction's batches follow them under the same epoch."""
    bootstrap = kafka_broker_3_9.bootstrap
    create_topic(bootstrap, topic_name)
    with transactional(bootstrap, "v1", max_request_size=10_000) as producer:
        producer_ids = producer._transaction._producer_ids
        producer_id, epoch = producer_ids.stamp()
        producer.begin_transaction()
        producer.send(topic_name, b"aborted").get(30)
        producer.abort_transaction()
        assert producer_ids.stamp() == (producer_id, epoch)
        producer.begin_transaction()
        producer.send(topic_name, b"committed-0")
        producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(RecordTooLargeError):
            producer.send(topic_name, b"x" * 20_000)
        producer.abort_transaction()
        assert producer_ids.stamp() == (producer_id, epoch + 1)
        producer.begin_transaction()
        producer.send(topic_name, b"committed-1")
        producer.commit_transaction()
    assert values(read_topic(bootstrap, topic_name, 2, isolation_level="read_committed")) == [
        b"committed-0", b"committed-1"]


# --- the 3-node cluster: the transaction coordinator's broker killed mid-transaction


def coordinator_node(producer):
    """The node id of the producer's transaction coordinator now."""
    transaction = producer._transaction
    return transaction._coordinators.find(TRANSACTION, transaction.transactional_id,
                                          time.monotonic() + 30).node_id


def test_the_coordinators_broker_killed_mid_transaction(failover_cluster, topic_name, protocol):
    """Killed with SIGKILL after the transaction's first records are in: the commit
    either succeeds (every record read_committed, once) or fails with an abortable
    error and is aborted (none of them); never part of them."""
    bootstrap = failover_cluster.bootstrap
    create_topic(bootstrap, topic_name, partitions=4, replication_factor=3,
                 config={"min.insync.replicas": "2"})
    with transactional(bootstrap, protocol, linger_ms=5, request_timeout_ms=10000,
                       delivery_timeout_ms=60000) as producer:
        producer.begin_transaction()
        first = [b"a-%04d" % i for i in range(2000)]
        for i, value in enumerate(first):
            producer.produce(topic_name, value, partition=i % 4)
        producer.flush()
        failover_cluster.node(coordinator_node(producer)).kill()
        second = [b"b-%04d" % i for i in range(2000)]
        for i, value in enumerate(second):
            producer.produce(topic_name, value, partition=i % 4)
        try:
            producer.commit_transaction()
            expected = sorted(first + second)
        except TransactionAbortRequiredError:
            producer.abort_transaction()
            expected = []
        # The producer goes on with the coordinator's successor.
        producer.begin_transaction()
        producer.send(topic_name, b"after", partition=0)
        producer.commit_transaction()
    committed = read_topic(bootstrap, topic_name, len(expected) + 1,
                           isolation_level="read_committed")
    assert sorted(values(committed)) == sorted(expected + [b"after"])


def test_close_waits_for_the_transaction_thread_no_longer_than_its_timeout(
        kafka_broker, topic_name, monkeypatch):
    """V1, the broker paused: the transaction thread is inside AddPartitionsToTxn when
    close(2) stops it.  close() waited 5 s for that thread whatever its own timeout
    (close(4) took 9 s); it now waits no longer than the time it has left, and the
    pool's close() ends the request.  (What is asserted is the wait asked for, not a
    duration.)"""
    nodes, producer = pausable_transactional(kafka_broker, topic_name, "v1", 20_000)
    producer.begin_transaction()
    producer.send(topic_name, b"never committed")
    thread = producer._transaction._thread
    join = thread.join
    waits = []

    def recording_join(timeout=None):
        waits.append(timeout)
        join(timeout)
    monkeypatch.setattr(thread, "join", recording_join)
    nodes[0].pause()
    try:
        producer.close(2)
    finally:
        nodes[0].resume()
    assert len(waits) == 1 and waits[0] is not None and waits[0] <= 2, waits
