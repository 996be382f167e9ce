"""A producer inherited by a forked child (PySpark's worker daemon forks) delivers there.

The child runs its part and reports through a pipe, then leaves with os._exit (never
back into pytest).  The parent gives it a deadline: a child that hangs is killed and
the test fails, since hanging is the failure being tested for.
"""
import json
import os
import signal
import threading
import time

import pytest

from netkafka import Producer, ProducerClosedError, SentBeforeForkError, TransactionStateError
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

CHILD_DEADLINE_S = 60


def run_in_child(work):
    """Forks; the child runs work() -> JSON-able result.  Returns that result, or
    fails the test if the child raised or did not finish within CHILD_DEADLINE_S."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(read_end)
            try:
                outcome = {"result": work()}
                status = 0
            except BaseException as exc:  # noqa: BLE001 -- reported to the parent
                outcome = {"error": repr(exc)}
            with os.fdopen(write_end, "w") as pipe:
                json.dump(outcome, pipe)
        finally:
            os._exit(status)
    os.close(write_end)
    deadline = time.monotonic() + CHILD_DEADLINE_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_end)
            pytest.fail(f"the forked child hung for {CHILD_DEADLINE_S} s")
        time.sleep(0.05)
    with os.fdopen(read_end) as pipe:
        outcome = json.loads(pipe.read() or "{}")
    assert os.waitstatus_to_exitcode(status) == 0, outcome
    return outcome["result"]


def test_a_forked_child_delivers_and_the_parents_records_are_delivered_once(
        kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    with Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=60_000) as p:
        p.send(topic_name, b"parent-acked")
        p.flush()
        lingering = [p.send(topic_name, b"parent-lingering-%d" % i) for i in range(3)]

        def child():
            # The parent's lingering records are the parent's to deliver.
            inherited = []
            for future in lingering:
                try:
                    future.get(5)
                    inherited.append("delivered")
                except SentBeforeForkError as exc:
                    inherited.append(f"failed: {exc}")
            futures = [p.send(topic_name, b"child-%d" % i) for i in range(1000)]
            p.flush(30)
            offsets = [f.get(0).offset for f in futures]
            metrics = p.metrics()["netkafka"]
            p.close(10)
            return {"inherited": inherited, "offsets": offsets,
                    "producer_id": metrics.get("producer_id")}

        result = run_in_child(child)
        p.flush(30)
        assert all(f.succeeded() for f in lingering)  # the parent delivers its own
        parent_producer_id = p.metrics()["netkafka"]["producer_id"]
    assert result["inherited"] == [
        "failed: the record was sent in the parent process before os.fork(); the parent "
        "delivers it, this process's copy of its future cannot know the outcome"] * 3
    assert len(result["offsets"]) == 1000
    # The child numbers its batches under a producer id of its own.
    assert result["producer_id"] not in (None, -1, parent_producer_id)
    values = sorted(r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1004))
    assert values == sorted([b"parent-acked"] + [b"parent-lingering-%d" % i for i in range(3)]
                            + [b"child-%d" % i for i in range(1000)])


def test_a_child_that_never_uses_the_producer_closes_at_once(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    with Producer(bootstrap_servers=kafka_broker.bootstrap) as p:
        p.send(topic_name, b"warm").get(30)

        def child():
            started = time.monotonic()
            p.close()
            threads = [t.name for t in threading.enumerate() if t.name.startswith("netkafka")]
            # Closed before its own stack was started: records are refused, not sent
            # through the parent's stack nor started on one.
            refused = []
            for entry in (p.send, p.produce):
                try:
                    entry(topic_name, b"after close")
                    refused.append("accepted")
                except ProducerClosedError as exc:
                    refused.append(str(exc))
            return {"close_s": time.monotonic() - started, "threads": threads,
                    "refused": refused}

        result = run_in_child(child)
    assert result["close_s"] < 1 and result["threads"] == []
    # The message names no entry: produce() and send_batch() were told "send() after close()".
    assert result["refused"] == ["the producer is closed: it takes no more records"] * 2


def test_forking_while_threads_send_never_hangs_the_child(kafka_broker, topic_name):
    """Threads are inside send() (holding the accumulator's, the partitioner's and the
    buffer pool's locks) and the I/O thread completes batches when the fork happens;
    every child still delivers."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    stop = threading.Event()
    errors = []
    with Producer(bootstrap_servers=kafka_broker.bootstrap, batch_size=2048) as p:
        def keep_sending(tag):
            try:
                i = 0
                while not stop.is_set():
                    p.send(topic_name, b"%s-%d" % (tag, i))
                    i += 1
            except BaseException as exc:  # noqa: BLE001 -- reported below
                errors.append(exc)

        threads = [threading.Thread(target=keep_sending, args=(b"t%d" % n,)) for n in range(3)]
        for thread in threads:
            thread.start()
        try:
            for fork_index in range(5):
                time.sleep(0.05)

                def child():
                    futures = [p.send(topic_name, b"child-%d" % fork_index) for _ in range(50)]
                    p.flush(30)
                    return sum(f.succeeded() for f in futures)

                assert run_in_child(child) == 50
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        p.flush(60)
        metrics = p.metrics()["netkafka"]
    assert errors == []
    assert metrics["records_failed"] == 0
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name,
                                          metrics["records_acknowledged"] + 250)]
    for fork_index in range(5):
        assert values.count(b"child-%d" % fork_index) == 50
    assert len(values) == len(set(v for v in values if not v.startswith(b"child"))) + 250


def test_a_transactional_producer_refuses_a_forked_child(kafka_broker, topic_name):
    """Its own stack in the child would init_transactions() with the parent's id and fence
    the parent: every call in the child says so, and the parent's transaction commits."""
    create_topic(kafka_broker.bootstrap, topic_name)
    with Producer(bootstrap_servers=kafka_broker.bootstrap,
                  transactional_id=f"fork-{os.getpid()}-{time.monotonic_ns()}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, b"parent").get(30)

        def child():
            refusals = []
            for call in (lambda: producer.send(topic_name, b"child"), producer.commit_transaction,
                         producer.begin_transaction):
                try:
                    call()
                except TransactionStateError as exc:
                    refusals.append(str(exc))
            return refusals

        refusals = run_in_child(child)
        assert len(refusals) == 3
        assert all("cannot be used in a forked child" in text for text in refusals)
        producer.commit_transaction()
    committed = read_topic(kafka_broker.bootstrap, topic_name, 1,
                           isolation_level="read_committed")
    assert [r.value for r in committed] == [b"parent"]
