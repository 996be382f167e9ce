"""The sender's own contract: delivery timeout, close, bad input -- each a clear error."""
import re
import threading
import time

import pytest

from batch_helpers import (as_read, io_stack, make_batch, new_buffer_pool, release_batches,
                           wait_for)
from broker_proxy import (MetadataProxy, ProduceAnswerProxy, ProduceDroppingProxy,
                          one_partition_answer)
from netkafka import Producer, errors
from netkafka.errors import KafkaTimeoutError
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic


def frozen_leader_stack(kafka_broker, topic_name, warm_count=2, warm_created_ns=None,
                        **options):
    """The set-up of the tests that freeze the leader (SIGSTOP) with batches in flight
    and queued: (its nodes, a buffer pool, an io_stack with one request in flight at a
    time, the warm batch that was sent on it so that the connection is up first).
    warm_created_ns: the warm batch's creation time (default: when it is sent)."""
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    stack = io_stack(kafka_broker.bootstrap, max_in_flight_requests_per_connection=1,
                     **options)
    try:
        warm = stack.stamped_batch(buffers, topic_name, "warm", warm_count)
        stack.send(topic_name, warm, created_ns=warm_created_ns).result(30)
    except BaseException:
        stack.close()
        raise
    return nodes, buffers, stack, warm


@pytest.mark.parametrize("idempotent", [False, True])
def test_batches_fail_at_delivery_timeout_while_the_leader_is_frozen_in_flight_too(
        kafka_broker, topic_name, idempotent):
    """The leader frozen: the batch queued and the one in a request both fail at their
    delivery timeout, as the Java client's Sender fails in-flight batches
    (getExpiredInflightBatches) -- the one in flight used to wait for its answer, up to
    request_timeout_ms (here 30 s) more.  Its error says it may be in the log: the
    broker appends it from its socket once it runs again.  That late answer is
    ignored (counted once, failed), and the next batch goes out after it.  Idempotent,
    the partition's sequence does not go on past the batch of unknown fate (its
    sequences reused, the broker holding it or not): it starts over under the next
    epoch once that answer is in, and the next batch is delivered once, after it."""
    nodes, buffers, stack, warm = frozen_leader_stack(
        kafka_broker, topic_name, warm_count=4, request_timeout_ms=30000,
        idempotent=idempotent, sender_options={"delivery_timeout_ms": 1000})
    try:
        first, second = (stack.stamped_batch(buffers, topic_name, tag, 4)
                         for tag in ("first", "second"))
        nodes[0].pause()
        try:
            in_flight = stack.send(topic_name, first)
            queued = stack.send(topic_name, second)
            started = time.monotonic()
            with pytest.raises(KafkaTimeoutError,
                               match=rf"{topic_name}-0: batch of 4 records not delivered "
                                     r"within delivery_timeout_ms=1000 \(0 attempts\)"):
                queued.result(10)
            with pytest.raises(KafkaTimeoutError,
                               match=r"within delivery_timeout_ms=1000 \(1 attempts; .*"
                                     r"may be in the log"):
                in_flight.result(10)
            waited_s = time.monotonic() - started
        finally:
            nodes[0].resume()
        # Sent once the late answer is in (one request in flight at a time).
        third = stack.stamped_batch(buffers, topic_name, "third", 4)
        assert stack.send(topic_name, third).result(30).base_offset == 8
        metrics = stack.sender.metrics()
        if idempotent:
            assert stack.idempotence.metrics()["partitions_restarted"] == 1
    finally:
        stack.close()
    assert 0.8 <= waited_s < 9
    assert (metrics["batches_failed"], metrics["records_failed"]) == (2, 8)
    assert (metrics["batches_acknowledged"], metrics["batches_pending"]) == (2, 0)
    assert as_read(read_topic(kafka_broker.bootstrap, topic_name, 12)) == [
        tuple(w) for w in warm.records + first.records + third.records]
    release_batches([warm, first, second, third])


# A delivery timeout and a request timeout long enough for a loaded machine to keep to the
# order of events below: the delivery-timeout sweep the warm batch scheduled runs while the
# next batch is in flight, its request timing out only later.
SWEPT_IN_FLIGHT_DELIVERY_MS = 30000
SWEPT_IN_FLIGHT_REQUEST_MS = 20000


def test_a_batch_in_flight_during_the_sweep_still_fails_at_its_delivery_timeout(kafka_broker,
                                                                                topic_name):
    """The sweep runs while the only batch left is in flight (so not queued: nothing to
    sweep again for); its request to the frozen leader then times out and the batch is
    queued for a resend the leader's connection, not ready again, never asks for.  The
    batch still fails at its delivery timeout, while the leader is frozen -- before,
    it waited for the leader to come back (flush() with it)."""
    delivery_ns = SWEPT_IN_FLIGHT_DELIVERY_MS * 1_000_000
    nodes, buffers, stack, warm = frozen_leader_stack(
        kafka_broker, topic_name, warm_count=2,
        # Its sweep is due 10 s from now, long after it is acknowledged.
        warm_created_ns=time.monotonic_ns() - delivery_ns + 10_000_000_000,
        request_timeout_ms=SWEPT_IN_FLIGHT_REQUEST_MS,
        sender_options={"delivery_timeout_ms": SWEPT_IN_FLIGHT_DELIVERY_MS})
    batch = make_batch(buffers, "in-flight", count=3)
    outcome = threading.Event()
    try:
        nodes[0].pause()
        try:
            future = stack.sender.send(topic_name, 0, batch.view, 3)
            future.add_done_callback(lambda _: outcome.set())
            # Hang guard: its delivery timeout, and as long again.
            failed_while_frozen = outcome.wait(2 * SWEPT_IN_FLIGHT_DELIVERY_MS / 1000)
        finally:
            nodes[0].resume()
        assert failed_while_frozen, "the batch waited for the frozen leader"
        with pytest.raises(KafkaTimeoutError,
                           match=rf"{topic_name}-0: batch of 3 records not delivered "
                                 rf"within delivery_timeout_ms={SWEPT_IN_FLIGHT_DELIVERY_MS}"):
            future.result(0)
        metrics = stack.sender.metrics()
    finally:
        stack.close()
    assert metrics["batches_retried"] >= 1, "its request did not time out: test proves nothing"
    assert (metrics["batches_failed"], metrics["batches_pending"]) == (1, 0)
    # The frozen leader may have appended it from its socket buffer once it ran again.
    records = as_read(read_topic(kafka_broker.bootstrap, topic_name, 2))
    assert records[:2] == [tuple(w) for w in warm.records]
    release_batches([warm, batch])


def test_a_batch_timing_out_after_its_answer_was_lost_says_it_may_be_in_the_log(kafka_broker,
                                                                                  topic_name):
    """The broker appends the batch and its answer is lost; the connection made again
    is never answered either, so the batch waits, queued, until its delivery timeout.
    The error says its records may be in the log -- and they are -- not only that
    they were not delivered."""
    create_topic(kafka_broker.bootstrap, topic_name)
    host, port = kafka_broker.bootstrap.split(",")[0].rsplit(":", 1)
    proxy = MetadataProxy((host, int(port)))
    try:
        with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0,
                      delivery_timeout_ms=8000, request_timeout_ms=3000,
                      retry_backoff_ms=100, reconnect_backoff_max_ms=200,
                      max_block_ms=30000) as producer:
            producer.send(topic_name, b"warm", partition=0).get(30)
            proxy.set_swallowing(True)
            try:
                lost = producer.send(topic_name, b"answer-lost", partition=0)
                with pytest.raises(KafkaTimeoutError) as failed:
                    lost.get(60)
            finally:
                proxy.set_swallowing(False)
            metrics = producer.metrics()["netkafka"]
    finally:
        proxy.close()
    assert metrics["sender_batches_retried"] >= 1, "no request went unanswered"
    message = str(failed.value)
    assert "not delivered within delivery_timeout_ms=8000" in message, \
        "the batch did not wait queued for its delivery timeout: test proves nothing"
    assert "its records may be in the log" in message
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 2)] == [
        b"warm", b"answer-lost"]


def test_a_batch_failed_by_close_after_its_answer_was_lost_says_it_may_be_in_the_log(
        kafka_broker, topic_name):
    """As above, but close() ends the wait: the batch appended, its answer lost, queued
    for a resend the connection never asks for, fails saying its records may be in the
    log -- not only that the sender closed before it was delivered."""
    create_topic(kafka_broker.bootstrap, topic_name)
    host, port = kafka_broker.bootstrap.split(",")[0].rsplit(":", 1)
    proxy = MetadataProxy((host, int(port)))
    try:
        producer = Producer(bootstrap_servers=proxy.bootstrap, linger_ms=0,
                            delivery_timeout_ms=600000, request_timeout_ms=2000,
                            retry_backoff_ms=100, reconnect_backoff_max_ms=200,
                            max_block_ms=30000)
        try:
            producer.send(topic_name, b"warm", partition=0).get(30)
            proxy.set_swallowing(True)
            lost = producer.send(topic_name, b"answer-lost", partition=0)
            wait_for(lambda: producer.metrics()["netkafka"]["sender_batches_retried"] >= 1,
                     60, "the unanswered request's timeout")
        finally:
            producer.close(0)
            proxy.set_swallowing(False)
    finally:
        proxy.close()
    with pytest.raises(errors.KafkaError, match="the sender closed before") as failed:
        lost.get(0)
    assert "its records may be in the log" in str(failed.value)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 2)] == [
        b"warm", b"answer-lost"]


def test_batch_found_expired_by_its_connection_asking_for_work_fails_there(kafka_broker,
                                                                            topic_name):
    """The other place a queued batch expires: its connection's next_request().  The
    sweep's I/O thread (thread 0) is held meanwhile, so the sweep cannot be the one;
    the batch comes with a creation time past delivery_timeout_ms."""
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    stack = io_stack(kafka_broker.bootstrap, io_threads=2,
                     sender_options={"delivery_timeout_ms": 1000})
    warm, late = make_batch(buffers, "warm", count=2), make_batch(buffers, "late", count=3)
    holding, release = threading.Event(), threading.Event()
    try:
        stack.sender.send(topic_name, 0, warm.view, 2).result(30)
        sweeper = stack.pool.thread_for(0)
        if stack.pool.thread_for(stack.metadata.leader_id(topic_name, 0)) is sweeper:
            pytest.skip("the leader's connection shares the sweep's I/O thread")
        sweeper.call_soon(lambda: (holding.set(), release.wait(30)))
        assert holding.wait(10)
        try:
            created_ns = time.monotonic_ns() - 2_000_000_000
            expired = stack.sender.send(topic_name, 0, late.view, 3, created_ns=created_ns)
            with pytest.raises(KafkaTimeoutError,
                               match=rf"{topic_name}-0: batch of 3 records not delivered "
                                     r"within delivery_timeout_ms=1000 \(0 attempts\)"):
                expired.result(10)  # while the sweep's thread is held
        finally:
            release.set()
        metrics = stack.sender.metrics()
    finally:
        stack.close()
    assert (metrics["batches_failed"], metrics["records_failed"]) == (1, 3)
    assert (metrics["batches_pending"], metrics["batches_acknowledged"]) == (0, 1)
    assert as_read(read_topic(kafka_broker.bootstrap, topic_name, 2)) == [
        tuple(w) for w in warm.records]
    release_batches([warm, late])


def test_close_fails_what_is_left_and_refuses_new_batches(kafka_broker, topic_name):
    nodes, buffers, stack, warm = frozen_leader_stack(kafka_broker, topic_name)
    batches = [make_batch(buffers, f"close-{i}", count=2) for i in range(3)]
    try:
        nodes[0].pause()
        try:
            futures = [stack.sender.send(topic_name, 0, b.view, 2) for b in batches]
            stack.sender.close(timeout_s=0.2)
            with pytest.raises(errors.KafkaError, match="the sender is closed: batch not sent"):
                stack.sender.send(topic_name, 0, batches[0].view, 2)
            stack.metadata.close()
            stack.pool.close()
        finally:
            nodes[0].resume()
    finally:
        stack.close()
    outcomes = [f.exception(5) for f in futures]
    # The one in flight fails with the connection; the queued ones with the close.
    assert "I/O threads are shut down" in str(outcomes[0])
    for outcome in outcomes[1:]:
        assert f"the sender closed before {topic_name}-0 was delivered" in str(outcome)
    release_batches([warm] + batches)


def test_batches_queued_behind_their_partition_go_out_without_a_wake_up_each(
        kafka_broker, topic_name):
    """A batch queued behind another of its partition asks for no wake-up: the pump
    that takes the one ahead finds it.  None is left behind for want of one."""
    nodes, buffers, stack, warm = frozen_leader_stack(kafka_broker, topic_name)
    batches = [make_batch(buffers, f"behind-{i}", count=3) for i in range(8)]
    try:
        (conn,) = [c for c in stack.pool.connections() if c.node_id >= 0]
        wakeups = []
        conn.wakeup = lambda: (wakeups.append(1), type(conn).wakeup(conn))
        nodes[0].pause()  # the first batch stays in flight, the others queue behind it
        try:
            futures = [stack.sender.send(topic_name, 0, b.view, 3) for b in batches]
            asked = len(wakeups)
        finally:
            nodes[0].resume()
        offsets = [f.result(30).base_offset for f in futures]
    finally:
        stack.close()
    # One for the batch that went out, at most one more for the first queued (the
    # I/O thread may have taken the first before the second came).
    assert asked <= 2
    assert offsets == [2 + 3 * i for i in range(8)]
    assert as_read(read_topic(kafka_broker.bootstrap, topic_name, 26)) == [
        tuple(w) for b in [warm] + batches for w in b.records]
    release_batches([warm] + batches)


def test_bad_batches_are_refused_with_the_reason(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    buffers = new_buffer_pool()
    stack = io_stack(kafka_broker.bootstrap, sender_options={"max_request_size": 4096,
                                                             "max_block_ms": 5000})
    big = make_batch(buffers, "big", count=10, value_bytes=1000)
    small = make_batch(buffers, "small", count=1)
    try:
        with pytest.raises(errors.KafkaError,
                           match=rf"batch of {big.view.nbytes} bytes for {topic_name}-0 "
                                 r"exceeds max_request_size=4096"):
            stack.sender.send(topic_name, 0, big.view, 10)
        with pytest.raises(errors.KafkaError,
                           match=rf"topic '{topic_name}' has no partition 7 \(it has 2\)"):
            stack.sender.send(topic_name, 7, small.view, 1)
    finally:
        stack.close()
    release_batches([big, small])


@pytest.mark.parametrize("options, message", [
    ({"acks": 2}, r"acks must be 0, 1, 'all' or -1, got 2"),
    ({"retries": -1}, r"retries must be an int >= 0, got -1"),
    ({"delivery_timeout_ms": 0}, r"delivery_timeout_ms must be an int >= 1, got 0"),
    ({"backoff": "spin"}, r"backoff must be 'block', 'drop', 'park' or an object"),
])
def test_sender_options_are_validated(kafka_broker, options, message):
    with pytest.raises(ValueError, match=message):
        io_stack(kafka_broker.bootstrap, sender_options=options)


class _RequestSizes:
    """A Sender's stats object that keeps the record count of each request it sends."""

    def __init__(self):
        self.records = []

    def request_sent(self, node_id, records):
        self.records.append(records)

    def response(self, node_id, latency_ms, *args):
        pass

    def batch_retried(self, topic, records):
        pass


def test_batches_wait_open_for_the_request_after_the_broker_s_next_one(kafka_broker,
                                                                       topic_name):
    """Requests to a broker not keeping up (frozen, one request in flight at a time):
    batches whose linger_ms passes while another partition's batch is queued for the
    broker stay open, take their partitions' later records, and go with the request
    after the next one -- one batch per partition.  Handed over at linger_ms, each
    went out with its first record and a second batch, held behind it, took the rest:
    two per partition."""
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=6)
    producer = Producer(bootstrap_servers=kafka_broker.bootstrap, acks=1, linger_ms=5,
                        max_in_flight_requests_per_connection=1)
    sent = []

    def counter(name):
        return producer.metrics()["netkafka"][name]

    def requests_built():  # Produce requests, every broker's
        return sum(group.get("request-total", 0) for group in producer.metrics().values())

    try:
        producer.send(topic_name, b"warm", partition=0).get(30)
        created = counter("batches_created")
        nodes[0].pause()
        try:
            requests = requests_built()
            futures = [producer.send(topic_name, b"in flight", partition=0)]
            wait_for(lambda: requests_built() > requests, 10,
                     "the request to the frozen broker")
            handed_over = counter("batches_sent")
            futures.append(producer.send(topic_name, b"queued", partition=1))
            wait_for(lambda: counter("batches_sent") > handed_over, 10,
                     "partition 1's batch in the queue")
            sent += [(0, b"in flight"), (1, b"queued")]
            for round_ in range(5):
                for partition in range(2, 6):
                    value = b"round %d" % round_
                    futures.append(producer.send(topic_name, value, partition=partition))
                    sent.append((partition, value))
                time.sleep(0.05)  # past linger_ms every round
            batches = counter("batches_created") - created
        finally:
            nodes[0].resume()
        offsets = [f.get(30).offset for f in futures]
    finally:
        producer.close()
    assert batches == 6
    assert offsets[:2] == [1, 0] and offsets[2:] == [r for r in range(5) for _ in range(4)]
    read = read_topic(kafka_broker.bootstrap, topic_name, len(sent) + 1)
    assert [(r.partition, r.value) for r in sorted(read, key=lambda r: (r.partition, r.offset))
            if r.value != b"warm"] == sorted(sent, key=lambda s: s[0])


def test_a_request_carries_many_partitions_and_stops_at_the_first_that_does_not_fit(
        kafka_broker, topic_name):
    """Small batches of many partitions share a request; a request that is full stops
    at the first partition whose batch does not fit (it leads the next request) instead
    of scanning every queued partition for a smaller one.  Queued while the I/O thread
    is held: small batches of 3 records on partitions 0, 1, 3, 4, 5 and one of 20 on
    partition 2, max_request_size = the large one's bytes + a small one's."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=6)
    buffers = new_buffer_pool()
    counts = [3, 3, 20, 3, 3, 3]
    batches = [make_batch(buffers, f"p{p}", count) for p, count in enumerate(counts)]
    warm = make_batch(buffers, "warm", count=1)
    sizes = _RequestSizes()
    stack = io_stack(kafka_broker.bootstrap, max_in_flight_requests_per_connection=1,
                     sender_options={"stats": sizes, "max_request_size":
                                     batches[2].view.nbytes + batches[0].view.nbytes})
    holding, release = threading.Event(), threading.Event()
    try:
        stack.sender.send(topic_name, 0, warm.view, 1).result(30)
        stack.pool.thread_for(stack.metadata.leader_id(topic_name, 0)).call_soon(
            lambda: (holding.set(), release.wait(30)))
        assert holding.wait(10)
        try:
            futures = [stack.sender.send(topic_name, p, b.view, counts[p])
                       for p, b in enumerate(batches)]
        finally:
            release.set()
        offsets = [f.result(30).base_offset for f in futures]
    finally:
        stack.close()
    # The warm batch's; partitions 0 and 1 (2 would not fit); 2 and 3; 4 and 5.
    assert sizes.records == [1, 6, 23, 6]
    assert offsets == [1, 0, 0, 0, 0, 0]
    written = [tuple(w) for b in [warm] + batches for w in b.records]
    assert sorted(as_read(read_topic(kafka_broker.bootstrap, topic_name, len(written))),
                  key=repr) == sorted(written, key=repr)
    release_batches([warm] + batches)


def test_a_base_offset_leaving_no_room_for_the_batch_is_not_reported(kafka_broker, topic_name):
    # A broker answering a base offset so close to the int64 limit that the batch's
    # last records would lie past it: the records' offsets are not computed from it
    # (in native int64 arithmetic that overflowed), they are unknown (-1).
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    proxy = ProduceAnswerProxy((host, int(port)))
    try:
        with Producer(bootstrap_servers=proxy.bootstrap, linger_ms=100) as producer:
            producer.send(topic_name, b"warm").get(30)
            with proxy.lock:
                proxy.rewrite_produce = one_partition_answer(base_offset=2**63 - 2)
            futures = [producer.send(topic_name, b"v%d" % i) for i in range(5)]
            offsets = [f.get(30).offset for f in futures]
    finally:
        proxy.close()
    assert offsets == [-1] * 5
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 6)] == [
        b"warm"] + [b"v%d" % i for i in range(5)]


@pytest.mark.parametrize("retry_backoff_max_ms, fewest, most", [
    (20, 40, None),  # constant 20 ms: ~100 attempts in 3 s
    (640, 5, 12),  # 20, 40, ... 640, 640 ms (+-20%): ~9 attempts in 3 s
])
def test_resends_back_off_exponentially_up_to_retry_backoff_max_ms(
        kafka_broker, topic_name, retry_backoff_max_ms, fewest, most):
    """KIP-580: a batch the broker keeps refusing with a retriable error waits
    retry_backoff_ms, then twice that, ... up to retry_backoff_max_ms before each resend,
    as the Java client's does; it used to be sent again every retry_backoff_ms until
    its delivery timeout.  Every Produce answer says NOT_ENOUGH_REPLICAS (a proxy
    rewrites them: a one-node cluster never says it, as Kafka 4 caps
    min.insync.replicas at the replication factor)."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    host, port = kafka_broker.bootstrap.split(",")[0].rsplit(":", 1)
    proxy = ProduceAnswerProxy((host, int(port)))
    try:
        with Producer(bootstrap_servers=proxy.bootstrap, retry_backoff_ms=20,
                      retry_backoff_max_ms=retry_backoff_max_ms, request_timeout_ms=1000,
                      delivery_timeout_ms=3000) as producer:
            producer.send(topic_name, b"warm").get(30)
            with proxy.lock:
                proxy.rewrite_produce = one_partition_answer(
                    error_code=errors.NotEnoughReplicasError.code, base_offset=-1)
            with pytest.raises(KafkaTimeoutError) as caught:
                producer.send(topic_name, b"refused").get(30)
    finally:
        proxy.close()
    assert isinstance(caught.value.__cause__, errors.NotEnoughReplicasError)
    attempts = int(re.search(r"\((\d+) attempts", str(caught.value)).group(1))
    assert attempts >= fewest and (most is None or attempts <= most), str(caught.value)


@pytest.mark.parametrize("fault", ["unreadable answer", "unanswered, no retries"])
def test_a_record_failed_after_an_attempt_the_broker_may_have_appended_says_so(
        kafka_broker, topic_name, fault):
    """The README's promise: a record that failed after an attempt that went unanswered,
    or failed in a way that may follow an append, says its records may be in the log.
    A Produce answer that could not be read (the broker had appended: the record is
    there) failed with the decoder's words alone, naming no broker; a request left
    unanswered with retries=0 failed with the timeout alone."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    host, port = kafka_broker.bootstrap.split(",")[0].rsplit(":", 1)
    proxy = (ProduceAnswerProxy if fault == "unreadable answer"
             else ProduceDroppingProxy)((host, int(port)))
    try:
        with Producer(bootstrap_servers=proxy.bootstrap, retries=0, enable_idempotence=False,
                      acks=1, request_timeout_ms=1000, delivery_timeout_ms=5000) as producer:
            producer.send(topic_name, b"warm").get(30)
            if fault == "unreadable answer":
                with proxy.lock:
                    proxy.rewrite_produce = lambda data, version: b"\xff" * 3
            else:
                proxy.set_dropping(True)
            with pytest.raises(errors.KafkaError) as caught:
                producer.send(topic_name, b"failed").get(30)
            if fault != "unreadable answer":
                proxy.set_dropping(False)
    finally:
        proxy.close()
    message = str(caught.value)
    assert "its records may be in the log" in message, message
    if fault == "unreadable answer":
        assert isinstance(caught.value, errors.ProtocolError)
        assert isinstance(caught.value.__cause__, errors.ProtocolError)  # the decoder's
        assert f"127.0.0.1:{proxy.port}" in message and "answered Produce" in message
        values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 2)]
        assert values == [b"warm", b"failed"]  # failed, and in the log all the same
