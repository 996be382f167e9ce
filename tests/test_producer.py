"""netkafka.Producer against a real broker; what it wrote is read back by confluent-kafka.

Every check compares what the test handed to send() with what an independent reader
(netkafka.testing.reader, librdkafka underneath) finds in the topic, and with what
the futures reported: offsets, partitions, timestamps, sizes.
"""
import gc
import math
import os
import subprocess
import sys
import threading
import time
import traceback

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

import netkafka
from netkafka import (BackpressureTimeoutError, KafkaError, KafkaProducer, KafkaTimeoutError,
                      Producer, ProducerClosedError, RecordDroppedError, RecordMetadata,
                      SerializationError, UndeliveredRecordsError)
from netkafka.config import COMPRESSION_TYPES, producer_setting
from netkafka.errors import (IllegalArgumentError, KafkaConfigurationError,
                             MessageTooLargeError, SaslConfigError, SslConfigError)
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic
from netkafka.testing.segments import stored_batches

CODECS = [codec for codec in COMPRESSION_TYPES if codec != "none"]  # None stands for "none"


def producer(bootstrap, **options):
    options.setdefault("max_block_ms", 30000)
    return Producer(bootstrap_servers=bootstrap, **options)


def kafka_python_partition(key, num_partitions):
    # kafka-python's DefaultPartitioner: (murmur2(key) & 0x7fffffff) % n, in pure Python.
    return (kafka_python_murmur2(key) & 0x7FFFFFFF) % num_partitions


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_is_byte_exact_for_every_codec(core_broker, topic_name, codec):
    create_topic(core_broker.bootstrap, topic_name, partitions=3)
    now_ms = int(time.time() * 1000)
    sent = []
    with producer(core_broker.bootstrap, compression_type=codec, linger_ms=20) as p:
        futures = []
        for i in range(3000):
            # Never both None with the value's None below: send() refuses that record, as
            # kafka-python's does.
            key = None if i % 7 == 0 and i % 11 else f"key-{i}".encode()
            # Tombstones, empty values, random and compressible values.
            value = (None if i % 11 == 0 else b"" if i % 13 == 0
                     else os.urandom(i % 300) if i % 2 else b"abc" * (i % 200))
            headers = [] if i % 3 else [("h1", f"v{i}".encode()), ("empty", b""), ("null", None)]
            timestamp_ms = now_ms - 10_000 + i
            futures.append(p.send(topic_name, value=value, key=key, headers=headers,
                                  timestamp_ms=timestamp_ms))
            sent.append((key, value, headers, timestamp_ms))
        p.flush()
        metadata = [f.get(0) for f in futures]
    records = read_topic(core_broker.bootstrap, topic_name, len(sent))
    assert len(records) == len(sent)
    by_position = {(r.partition, r.offset): r for r in records}
    for (key, value, headers, timestamp_ms), meta in zip(sent, metadata):
        record = by_position[meta.partition, meta.offset]
        assert (record.key, record.value, record.headers, record.timestamp_ms) == (
            key, value, headers, timestamp_ms)
        assert record.timestamp_type == "create_time"
        assert meta.timestamp == timestamp_ms
        assert meta.serialized_key_size == (-1 if key is None else len(key))
        assert meta.serialized_value_size == (-1 if value is None else len(value))
        assert meta.serialized_header_size == (
            -1 if not headers else sum(len(k) + len(v or b"") for k, v in headers))


def test_batches_sealed_while_the_pool_is_full_reach_the_broker_compressed(kafka_broker,
                                                                          topic_name):
    # A producer faster than its broker keeps its buffer pool full; a batch sealed
    # then has no pool memory for its compressed copy and used to go out uncompressed
    # (the broker then took six times the bytes of these records).  The pool's
    # compression reserve takes the copy instead.  Two batch buffers beside the reserve
    # and one request in flight: nearly every seal meets a full pool.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    values = [bytes([65 + i % 26]) * 20 + os.urandom(8) + b"payload" * 10 for i in range(64)]
    count = 20_000
    with producer(kafka_broker.bootstrap, compression_type="lz4", batch_size=16384,
                  buffer_memory=4 * 16384, linger_ms=5,
                  max_in_flight_requests_per_connection=1) as p:
        pool = p._accumulator._pool
        assert pool.has_compression_reserve
        for i in range(count):
            p.send(topic_name, values[i % len(values)])
        p.flush()
        assert pool.reserve_lends > 0, "no seal met a full pool: the test proved nothing"
    records = read_topic(kafka_broker.bootstrap, topic_name, count)
    assert [r.value for r in records] == [values[i % len(values)] for i in range(count)]
    batches = stored_batches(kafka_broker.nodes[0].data_dir, topic_name)
    assert sum(batch.record_count for batch in batches) == count
    lz4 = 3
    assert [batch.codec for batch in batches] == [lz4] * len(batches)


def test_metadata_offsets_are_the_consumed_offsets_per_partition(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=4)
    with producer(kafka_broker.bootstrap) as p:
        futures = [p.send(topic_name, f"v{i}".encode()) for i in range(20000)]
        p.flush()
    assert all(f.is_done and f.succeeded() and not f.failed() for f in futures)
    metadata = [f.get() for f in futures]
    records = read_topic(kafka_broker.bootstrap, topic_name, len(futures))
    read = {(r.partition, r.offset): r.value for r in records}
    assert {(m.partition, m.offset): f"v{i}".encode()
            for i, m in enumerate(metadata)} == read
    # Sticky partitioning spread the unkeyed records over the partitions.
    assert len({m.partition for m in metadata}) > 1
    # Within a partition, offsets follow the send order, starting at 0 with no gap.
    for partition in {m.partition for m in metadata}:
        offsets = [m.offset for m in metadata if m.partition == partition]
        assert offsets == list(range(len(offsets)))


def test_keyed_records_land_where_kafka_python_murmur2_puts_them(core_broker, topic_name):
    partitions = 7
    create_topic(core_broker.bootstrap, topic_name, partitions=partitions)
    keys = [f"user-{i}".encode() for i in range(2000)] + [b"", b"\x00\xff" * 9]
    with producer(core_broker.bootstrap) as p:
        futures = [p.send(topic_name, key=key, value=b"v") for key in keys]
        p.flush()
        placed = [f.get().partition for f in futures]
    assert placed == [kafka_python_partition(key, partitions) for key in keys]
    records = read_topic(core_broker.bootstrap, topic_name, len(keys))
    assert sorted((r.key, r.partition) for r in records) == sorted(
        (key, kafka_python_partition(key, partitions)) for key in keys)


def test_unkeyed_records_keep_one_partition_per_batch_among_keyed_and_placed_ones(
        core_broker, topic_name):
    # The hot path keeps the sticky partition it was given until the batch there is
    # full (KIP-480): keyed records (murmur2) and records with a partition, sent in
    # between, neither move it nor land elsewhere than they should.
    partitions = 4
    create_topic(core_broker.bootstrap, topic_name, partitions=partitions)
    sent = []  # (kind, future, key, partition asked for)
    with producer(core_broker.bootstrap, batch_size=4096, linger_ms=2000) as p:
        for i in range(3000):
            if i % 7 == 3:
                key = b"key-%d" % i
                sent.append(("keyed", p.send(topic_name, b"k" * 100, key=key), key, None))
            elif i % 11 == 5:
                sent.append(("placed", p.send(topic_name, b"p" * 100, partition=i % 4),
                             None, i % 4))
            else:
                sent.append(("unkeyed", p.send(topic_name, b"u" * 100), None, None))
        p.flush()
        placed = [(kind, future.get(30), key, asked) for kind, future, key, asked in sent]
        batches = p.metrics()["netkafka"]["batches_created"]
    for kind, metadata, key, asked in placed:
        if kind == "keyed":
            assert metadata.partition == kafka_python_partition(key, partitions)
        elif kind == "placed":
            assert metadata.partition == asked
    runs = []  # [partition, records] of the unkeyed records, in send order
    for kind, metadata, _, _ in placed:
        if kind == "unkeyed":
            if runs and runs[-1][0] == metadata.partition:
                runs[-1][1] += 1
            else:
                runs.append([metadata.partition, 1])
    # A 4 KiB batch holds at most 35 of these records: about 2,000 unkeyed ones fill
    # dozens of batches, and the sticky partition moves only when one is full (a
    # run can be short: keyed and placed records fill batches too).
    assert 20 <= len(runs) <= batches
    assert {partition for partition, _ in runs} == set(range(partitions))


def test_round_robin_custom_and_broker_aware_partitioners(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    with producer(kafka_broker.bootstrap, partitioner="round_robin", linger_ms=50) as p:
        # Every record to the next partition, keyed or not (Java's RoundRobinPartitioner).
        futures = [p.send(topic_name, b"rr", key=None if i % 2 else b"k") for i in range(12)]
        assert [f.get(30).partition for f in futures] == [i % 3 for i in range(12)]
    seen = []

    def last_partition(key_bytes, all_partitions, available_partitions):
        seen.append((key_bytes, list(all_partitions), list(available_partitions)))
        return all_partitions[-1]

    with producer(kafka_broker.bootstrap, partitioner=last_partition) as p:
        assert p.send(topic_name, b"custom", key=b"key").get(30).partition == 2
    assert seen[0] == (b"key", [0, 1, 2], [0, 1, 2])
    with producer(kafka_broker.bootstrap, partitioner="broker_aware") as p:
        futures = [p.send(topic_name, b"ba-%d" % i) for i in range(1000)]
        p.flush()
        assert all(f.succeeded() for f in futures)
    with producer(kafka_broker.bootstrap, partitioner=lambda k, a, av: 7) as p:
        with pytest.raises(ValueError, match=r"returned partition 7 .*not one of its "
                                             r"partitions \[0, 1, 2\]"):
            p.send(topic_name, b"nowhere")
    assert len(read_topic(kafka_broker.bootstrap, topic_name, 1013)) == 1013


def test_explicit_partition_and_partitions_for(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    with producer(kafka_broker.bootstrap) as p:
        assert p.partitions_for(topic_name) == {0, 1, 2}
        metas = [p.send(topic_name, b"x", key=b"k", partition=i % 3).get(30) for i in range(6)]
        assert [m.partition for m in metas] == [0, 1, 2, 0, 1, 2]
        with pytest.raises(KafkaError, match=rf"topic '{topic_name}' has no partition 5"):
            p.send(topic_name, b"x", partition=5)
        # kafka-python's send() raises ValueError for it: a script's except clause
        # for that catches netkafka's too (it was a KafkaError only).
        with pytest.raises(ValueError, match=rf"topic '{topic_name}' has no partition 3"):
            p.send(topic_name, b"x", partition=3)
        with pytest.raises(TypeError, match="partition must be an int or None"):
            p.send(topic_name, b"x", partition="1")


def test_send_refuses_a_bad_partition_as_send_batch_does(kafka_broker, topic_name):
    """send()'s partition check repeated send_batch()'s rule in its own words ("not
    1.5" where send_batch() said "not float"); both now check by one rule."""
    np = pytest.importorskip("numpy")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    with producer(kafka_broker.bootstrap) as p:
        for bad in ("1", 1.5, True, np.True_, np.float64(1.0)):
            kind = type(bad).__name__
            with pytest.raises(TypeError) as single:
                p.send(topic_name, b"x", partition=bad)
            with pytest.raises(TypeError) as batch:
                p.send_batch(topic_name, [b"x"], partitions=[bad])
            assert str(single.value) == f"partition must be an int or None, not {kind}"
            assert str(batch.value) == f"partitions[0] must be an int or None, not {kind}"
        assert p.send(topic_name, b"numpy", partition=np.int64(1)).get(30).partition == 1
    records = read_topic(kafka_broker.bootstrap, topic_name, 1)
    assert [(r.value, r.partition) for r in records] == [(b"numpy", 1)]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_every_acks_setting_delivers(core_broker, topic_name, acks):
    create_topic(core_broker.bootstrap, topic_name)
    with producer(core_broker.bootstrap, acks=acks) as p:
        futures = [p.send(topic_name, f"{acks}-{i}".encode()) for i in range(5000)]
        p.flush()
        metadata = [f.get(0) for f in futures]
    if acks == 0:
        assert {m.offset for m in metadata} == {-1}  # the broker says nothing
    else:
        assert [m.offset for m in metadata] == list(range(5000))
    records = read_topic(core_broker.bootstrap, topic_name, 5000)
    assert [r.value for r in records] == [f"{acks}-{i}".encode() for i in range(5000)]


def test_linger_sends_a_small_batch_without_flush(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    with producer(kafka_broker.bootstrap, linger_ms=300) as p:
        started = time.monotonic()
        futures = [p.send(topic_name, f"small-{i}".encode()) for i in range(10)]
        time.sleep(0.1)
        assert not any(f.is_done for f in futures)  # still lingering
        metadata = [f.get(30) for f in futures]  # no flush: the linger timer sends it
        waited_s = time.monotonic() - started
        assert waited_s >= 0.3
        assert [m.offset for m in metadata] == list(range(10))
        assert p.metrics()["netkafka"]["batches_sent"] == 1
    records = read_topic(kafka_broker.bootstrap, topic_name, 10)
    assert [r.value for r in records] == [f"small-{i}".encode() for i in range(10)]


def test_a_linger_beyond_threadings_longest_wait_keeps_the_linger_thread(
        kafka_broker, topic_name, monkeypatch):
    # linger_ms=10**16 (accepted: delivery_timeout_ms above it) made the linger
    # thread's wait raise OverflowError, and the thread ended.
    create_topic(kafka_broker.bootstrap, topic_name)
    died = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    linger_ms = 10**16
    with producer(kafka_broker.bootstrap, linger_ms=linger_ms,
                  delivery_timeout_ms=linger_ms + 30_000) as p:
        future = p.send(topic_name, b"lingering")
        time.sleep(0.5)
        assert [t.name for t in netkafka_threads()].count("netkafka-linger") == 1
        assert died == []
        assert not future.is_done
        p.flush(10)
        assert future.get(0).offset == 0
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [
        b"lingering"]


def test_a_max_block_ms_beyond_what_a_wait_can_take_still_delivers(kafka_broker, topic_name):
    # max_block_ms=Long.MAX_VALUE (the Java client's "block without bound") raised
    # OverflowError out of the first send(): its metadata wait could not take it.
    create_topic(kafka_broker.bootstrap, topic_name)
    with Producer(bootstrap_servers=kafka_broker.bootstrap, max_block_ms=2**63 - 1) as p:
        assert p.config["max_block_ms"] == 2**31 - 1  # the value in use
        assert p.send(topic_name, b"delivered").get(30).offset == 0
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [
        b"delivered"]


def test_a_huge_retry_backoff_does_not_end_the_io_thread(monkeypatch):
    # retry_backoff_ms=10**16: after a failed Metadata request the I/O thread's
    # select() got a timeout epoll cannot take, raised OverflowError and the thread
    # ended -- the producer could never reach a broker again.
    died = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    with Producer(bootstrap_servers="127.0.0.1:9", max_block_ms=1500,
                  retry_backoff_ms=10**16) as p:
        with pytest.raises(KafkaTimeoutError, match="cannot connect"):
            p.send("topic", b"x")
        time.sleep(0.3)
        assert died == []
        assert [t.name for t in netkafka_threads()].count("netkafka-io-0") == 1


def test_a_record_that_fills_its_batch_alone_does_not_linger(kafka_broker, topic_name):
    # A batch with no room for another record goes at once, without the linger timer
    # (issue 18, large records: the timer woke for each such batch).  With a 60 s
    # linger, a lingering batch could not be acknowledged within get()'s 30 s.
    create_topic(kafka_broker.bootstrap, topic_name)
    big, exact = os.urandom(20_000), os.urandom(16_384)  # exact: batch_size itself
    with producer(kafka_broker.bootstrap, batch_size=16384, linger_ms=60_000) as p:
        metadata = [p.send(topic_name, value).get(30) for value in (big, exact)]
        small = p.send(topic_name, b"small")
        time.sleep(0.5)
        assert not small.is_done  # a batch with room still lingers
        assert p.metrics()["netkafka"]["batches_sent"] == 2
    assert [m.offset for m in metadata] == [0, 1]
    records = read_topic(kafka_broker.bootstrap, topic_name, 3)
    assert [r.value for r in records] == [big, exact, b"small"]


def test_eight_threads_sending_at_once_keep_their_order(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    per_thread = 5000
    errors = []
    with producer(kafka_broker.bootstrap, batch_size=4096) as p:
        def run(thread_index):
            try:
                for i in range(per_thread):
                    # Each thread's keys spread it over every partition.
                    p.send(topic_name, key=f"t{thread_index}-{i % 10}".encode(),
                           value=f"{thread_index}:{i}".encode())
            except BaseException as exc:  # noqa: BLE001 -- reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        p.flush()
        metrics = p.metrics()["netkafka"]
    assert errors == []
    assert metrics["records_acknowledged"] == 8 * per_thread
    records = read_topic(kafka_broker.bootstrap, topic_name, 8 * per_thread)
    assert len(records) == 8 * per_thread
    seen = set()
    last = {}  # (thread, partition) -> last index seen there
    for record in records:
        thread_index, i = map(int, record.value.split(b":"))
        assert (thread_index, i) not in seen
        seen.add((thread_index, i))
        position = (thread_index, record.partition)
        assert last.get(position, -1) < i, "a thread's records were reordered in a partition"
        last[position] = i


def test_callbacks_and_errbacks(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    results, failures = [], []
    with producer(kafka_broker.bootstrap) as p:
        future = p.send(topic_name, b"cb")
        future.add_callback(results.append).add_errback(failures.append)
        future.add_callback(lambda tag, meta, suffix="": results.append((tag, suffix)),
                            "tagged", suffix="!")
        p.flush()
        meta = future.get()
        # Registered after completion: runs at once, on this thread.
        future.add_callback(results.append)
    assert results == [meta, ("tagged", "!"), meta]
    assert failures == []
    assert isinstance(meta, RecordMetadata)
    assert (meta.topic, meta.partition, meta.offset) == (topic_name, 0, 0)
    assert meta.topic_partition == (topic_name, 0)
    assert future.value == meta and future.exception is None


def test_a_bad_timeout_to_get_is_a_type_error_and_delivery_goes_on(kafka_broker, topic_name):
    # get() with a timeout that is not a number used to raise with the batch's lock
    # held: the I/O thread completing the batch then waited for it forever, and
    # flush() and close() with it.
    create_topic(kafka_broker.bootstrap, topic_name)
    with producer(kafka_broker.bootstrap, linger_ms=60_000) as p:
        future = p.send(topic_name, b"pending")
        with pytest.raises(TypeError):
            future.get("soon")
        p.flush(10)
        assert future.get(0).offset == 0
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"pending"]


def test_flush_or_close_from_a_callback_is_refused_not_a_hang(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    seen = []

    def call(method):
        try:
            method()
            seen.append("returned")
        except KafkaError as exc:
            seen.append(str(exc))

    with producer(kafka_broker.bootstrap) as p:
        p.send(topic_name, b"a").add_callback(lambda meta: call(p.flush))
        p.send(topic_name, b"b").add_callback(lambda meta: call(p.close))
        p.flush(30)
    assert seen == [
        "flush() called from a callback: callbacks run on the I/O thread that delivers "
        "the records, so it would wait for itself forever",
        "close() called from a callback: callbacks run on the I/O thread that delivers "
        "the records, so it would wait for itself forever"]


@pytest.mark.parametrize("stop", [SystemExit(1), KeyboardInterrupt()], ids=repr)
def test_a_callback_raising_systemexit_does_not_stop_the_io_thread(kafka_broker, topic_name,
                                                                   stop, caplog):
    """It ended the I/O thread for good: records were taken but never delivered nor
    failed, and close() waited forever."""
    create_topic(kafka_broker.bootstrap, topic_name)

    def raise_it(meta):
        raise stop

    with producer(kafka_broker.bootstrap, request_timeout_ms=5000,
                  delivery_timeout_ms=10_000) as p:
        first = p.send(topic_name, b"first")
        first.add_callback(raise_it)
        first.add_callback(lambda meta: ran.append(meta.offset))  # the next still runs
        ran = []
        assert p.send(topic_name, b"after").get(30).offset == 1
        p.flush(30)
    assert ran == [0]
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [type(stop)]  # logged
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 2)] == [
        b"first", b"after"]


def test_get_of_a_pending_record_in_a_callback_is_refused_not_a_hang(kafka_broker,
                                                                     topic_name):
    """The I/O thread waited for itself: the record never completed, delivery_timeout_ms
    never came, and flush() timed out."""
    create_topic(kafka_broker.bootstrap, topic_name)
    seen = []

    def get_another(meta):
        for wait in (lambda: p.send(topic_name, b"inner").get(),
                     lambda: p.send_batch(topic_name, [b"batch"]).get()):
            try:
                wait()
                seen.append("returned")
            except KafkaError as exc:
                seen.append(str(exc))
        try:  # a poll does not wait: allowed
            p.send(topic_name, b"polled").get(0)
            seen.append("done at once")
        except KafkaTimeoutError:
            seen.append("polled")

    with producer(kafka_broker.bootstrap, request_timeout_ms=5000,
                  delivery_timeout_ms=10_000) as p:
        p.send(topic_name, b"outer").add_callback(get_another)
        p.flush(30)
        p.flush(30)  # the callback's records
    assert seen == [f"get() on the pending record for {topic_name}-0 in a callback: "
                    f"callbacks run on netkafka's own threads, which must not wait for a "
                    f"record (the thread that delivers it may be this one); chain or add a "
                    f"callback instead",
                    f"send_batch() result of 1 records to {topic_name!r} waited for in a "
                    f"callback: callbacks run on netkafka's own threads, which must not wait "
                    f"for records (the thread that delivers them may be this one); read it "
                    f"from another thread", "polled"]
    assert sorted(r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 4)) == [
        b"batch", b"inner", b"outer", b"polled"]


def test_flush_counts_a_batch_whose_callbacks_still_run(kafka_broker, topic_name):
    # It said "0 batches still not delivered" while it waited for one's callbacks.
    create_topic(kafka_broker.bootstrap, topic_name)
    running, release = threading.Event(), threading.Event()

    def slow(meta):
        running.set()
        release.wait(30)

    with producer(kafka_broker.bootstrap) as p:
        p.send(topic_name, b"a").add_callback(slow)
        assert running.wait(30)
        with pytest.raises(KafkaTimeoutError, match=r"^flush: 0 batches still not delivered "
                                                    r"after 0.2 s, 1 with callbacks still "
                                                    r"running$"):
            p.flush(0.2)
        release.set()
        p.flush(30)


def test_get_timeout_must_be_a_number(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    with producer(kafka_broker.bootstrap) as p:
        future = p.send(topic_name, b"a")
        with pytest.raises(TypeError, match=r"timeout must be a number of seconds or None, "
                                            r"got '1'"):
            future.get("1")
        assert future.get(30).offset == 0


def test_a_send_from_a_callback_into_a_full_buffer_pool_is_refused_at_once(
        kafka_broker, topic_name):
    # It waited for memory on the I/O thread, the one that gives memory back: every
    # record of that thread stalled for max_block_ms, then BackpressureTimeoutError.
    create_topic(kafka_broker.bootstrap, topic_name)
    outcome = []

    def send_until_refused(meta):
        futures = []
        try:
            while len(futures) < 100:  # 1 MB into 64 KiB
                futures.append(p.send(topic_name, b"v" * 10_000))
        except KafkaError as exc:
            outcome.append((type(exc), str(exc), futures))

    with producer(kafka_broker.bootstrap, buffer_memory=65536, max_block_ms=60_000) as p:
        p.send(topic_name, b"first").add_callback(send_until_refused)
        p.flush(30)
        assert p.send(topic_name, b"after").get(30).offset > 0
    [(kind, message, futures)] = outcome
    # What send() raises for a full pool elsewhere, the KafkaTimeoutError that code
    # written for kafka-python catches.
    assert kind is BackpressureTimeoutError
    assert message.startswith("no room in the producer's buffer pool (")
    assert message.endswith(
        " for a record sent from a callback: callbacks run on the I/O thread that makes "
        "room, so it would wait for itself; send it from another thread (or use "
        "backoff='drop')")
    assert 0 < len(futures) < 100 and all(f.succeeded() for f in futures)


def test_sends_from_a_callback_past_a_full_connection_are_delivered(kafka_broker, topic_name):
    # Each batch a callback's send() filled was handed over on the I/O thread, which
    # waited for its connection to drain below the high watermark -- the thread that
    # drains it: max_block_ms per batch, then the batch failed.
    create_topic(kafka_broker.bootstrap, topic_name)
    sent = []

    def send_many(meta):
        sent.extend(p.send(topic_name, b"v" * 10_000) for _ in range(20))

    with producer(kafka_broker.bootstrap, high_watermark_bytes=32768,
                  low_watermark_bytes=16384, max_block_ms=60_000) as p:
        p.send(topic_name, b"first").add_callback(send_many)
        p.flush(30)  # "first" and its callback
        p.flush(30)  # what the callback sent
        assert [f.get(0).offset for f in sent] == list(range(1, 21))


def test_a_send_from_a_callback_to_a_topic_not_known_yet_is_refused_at_once(
        kafka_broker, topic_name):
    # It waited for the topic's metadata on the I/O thread that had to fetch it:
    # every record of that thread stalled for max_block_ms, then it failed anyway.
    # partitions_for() likewise.
    create_topic(kafka_broker.bootstrap, topic_name)
    other = f"{topic_name}-other"
    create_topic(kafka_broker.bootstrap, other)
    seen = []

    def send_from_callback(meta):
        for attempt in (lambda: p.send(other, b"from a callback"),
                        lambda: p.partitions_for(other)):
            try:
                attempt()
                seen.append("answered")
            except KafkaError as exc:
                seen.append(str(exc))
        p.send(topic_name, b"known topic: taken")  # a topic known already still is
        seen.append(p.partitions_for(topic_name))

    with producer(kafka_broker.bootstrap, max_block_ms=20_000) as p:
        started = time.monotonic()
        p.send(topic_name, b"first").add_callback(send_from_callback)
        p.flush(30)
        assert p.send(topic_name, b"after").get(30).offset == 2
        assert time.monotonic() - started < 10
    assert seen == [f"a record for topic {other!r} sent from a callback before the topic's "
                    f"partitions are known: callbacks run on the I/O thread that would fetch "
                    f"them, so it would wait for itself; send the topic a first record (or call "
                    f"partitions_for()) from another thread",
                    f"partitions_for({other!r}) called from a callback before the topic's "
                    f"partitions are known: callbacks run on the I/O thread that would fetch "
                    f"them, so it would wait for itself; ask from another thread first", {0}]
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 3)] == [
        b"first", b"known topic: taken", b"after"]


def test_an_oversize_record_is_refused_naming_the_limit(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    with producer(kafka_broker.bootstrap, max_request_size=100_000, batch_size=16384) as p:
        with pytest.raises(ValueError, match=r"larger than max_request_size=100000"):
            p.send(topic_name, b"x" * 100_001)
        # A record above batch_size but within max_request_size gets a batch of its own.
        big = os.urandom(60_000)
        meta = p.send(topic_name, big).get(30)
        small = p.send(topic_name, b"after").get(30)
    assert (meta.offset, small.offset) == (0, 1)
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert [r.value for r in records] == [big, b"after"]


def netkafka_threads():
    return [t for t in threading.enumerate()
            if t.name.startswith(("netkafka-io-", "netkafka-linger"))]


def lingering_producer(kafka_broker, topic_name, **settings):
    """(the netkafka threads running before, a producer whose records linger 60 s) on a
    new topic: the close() tests' set-up."""
    create_topic(kafka_broker.bootstrap, topic_name)
    before = netkafka_threads()
    return before, producer(kafka_broker.bootstrap, linger_ms=60_000, **settings)


def test_send_after_close_raises_and_close_stops_every_thread(kafka_broker, topic_name):
    before, p = lingering_producer(kafka_broker, topic_name, io_threads=2)
    assert len(netkafka_threads()) == len(before) + 3
    pending = p.send(topic_name, b"before close")
    p.close()  # flushes: the lingering record goes out first
    assert pending.get(0).offset == 0
    with pytest.raises(ProducerClosedError, match="the producer is closed: it takes no more"):
        p.send(topic_name, b"after close")
    p.close()  # a second close does nothing
    assert netkafka_threads() == before
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [
        b"before close"]


def test_close_with_a_bad_timeout_leaves_the_producer_open_and_inf_waits_until_done(
        kafka_broker, topic_name):
    # close("soon") used to mark the producer closed before its timeout raised: its
    # threads kept running, the lingering record never got an outcome, and every later
    # close() returned at once.  math.inf (kafka-python's "no bound") raised
    # OverflowError from the wait, half-way through close(), likewise.
    before, p = lingering_producer(kafka_broker, topic_name)
    first = p.send(topic_name, b"first")
    # A negative one closed at once, as close(0); kafka-python's close() refuses it.
    for bad, error in (("soon", TypeError), (float("nan"), ValueError), (-1, ValueError)):
        with pytest.raises(error, match=r"close\(\) timeout must be a number of seconds"):
            p.close(bad)
    for bad, error in (("soon", TypeError), (-1, ValueError)):
        with pytest.raises(error, match=r"flush\(\) timeout must be a number of seconds"):
            p.flush(bad)
    assert not first.is_done
    flusher = threading.Timer(0.2, p.flush, args=(math.inf,))
    flusher.start()
    assert first.get(math.inf).offset == 0  # waited for while pending
    flusher.join()
    second = p.send(topic_name, b"second")
    p.close(math.inf)
    assert second.get(0).offset == 1
    assert netkafka_threads() == before
    with pytest.raises(ProducerClosedError):
        p.send(topic_name, b"after close")
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 2)] == [
        b"first", b"second"]


def test_after_close_partitions_for_and_committed_offsets_are_refused_at_once(
        kafka_broker, topic_name):
    # After close(), partitions_for() of a topic not known yet said KafkaTimeoutError
    # "after 30000 ms" at once, and committed_offsets() waited its whole timeout to
    # name a coordinator not found.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    p = producer(kafka_broker.bootstrap)
    p.send(topic_name, b"x").get(30)
    p.close()
    assert p.partitions_for(topic_name) == {0, 1}  # known: kafka-python answers too
    started = time.monotonic()
    with pytest.raises(ProducerClosedError, match=r"closed: the partitions of topic "
                                                  r"'never-asked-for' are not known"):
        p.partitions_for("never-asked-for")
    with pytest.raises(ProducerClosedError, match=r"committed_offsets\(\) after close\(\)"):
        p.committed_offsets("group", [(topic_name, 0)], timeout=20)
    assert time.monotonic() - started < 5


def test_close_ends_the_metadata_waits_of_send_produce_and_send_batch_saying_so(
        kafka_broker, topic_name):
    # Sends waiting for a topic's metadata when close() came returned at once with
    # KafkaTimeoutError "not available in metadata after 60000 ms"; nothing had waited
    # that long.  (Auto-creation off: the topic stays unknown.)
    missing = f"{topic_name}-missing"
    outcomes = {}

    def wait_in(name, call):
        try:
            call()
            outcomes[name] = "returned"
        except Exception as exc:  # noqa: BLE001 -- the outcome is what is checked
            outcomes[name] = exc

    p = producer(kafka_broker.bootstrap, max_block_ms=60_000, allow_auto_create_topics=False)
    waits = [threading.Thread(target=wait_in, args=(name, call)) for name, call in (
        ("send", lambda: p.send(missing, b"x")),
        ("produce", lambda: p.produce(missing, b"x")),
        ("send_batch", lambda: p.send_batch(missing, [b"x"])),
        ("partitions_for", lambda: p.partitions_for(missing)))]
    for wait in waits:
        wait.start()
    time.sleep(1)
    started = time.monotonic()
    p.close()
    for wait in waits:
        wait.join(10)
    assert time.monotonic() - started < 5
    assert sorted(outcomes) == ["partitions_for", "produce", "send", "send_batch"]
    for name, outcome in outcomes.items():
        assert isinstance(outcome, ProducerClosedError), (name, outcome)
        assert f"the partitions of topic '{missing}' are not known" in str(outcome)


def test_the_futures_of_a_failed_batch_raise_without_growing_its_traceback(
        kafka_broker, topic_name):
    # The records of a batch share an error object; each get() raised it as it was,
    # and the traceback grew by the caller's frames every time.
    # The broker refuses the whole batch for its first record, whose timestamp is older
    # than the topic takes: that record gets an error of its own (KIP-467), the other
    # 999 share one (a batch refused as too large is split now).
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"message.timestamp.before.max.ms": "3600000"})
    with producer(kafka_broker.bootstrap, linger_ms=60_000) as p:
        futures = [p.send(topic_name, b"x", timestamp_ms=1000)]
        futures += [p.send(topic_name, b"x") for _ in range(999)]
        p.flush(30)
    errors_seen = set()
    depths = set()
    for future in futures:
        with pytest.raises(KafkaError) as info:
            future.get(0)
        errors_seen.add(id(info.value))
        depths.add(len(traceback.extract_tb(info.value.__traceback__)))
    assert len(errors_seen) == 2
    assert max(depths) < 10


def test_a_record_the_broker_refuses_as_too_large_says_which_setting(
        kafka_broker, topic_name):
    # The broker says only MESSAGE_TOO_LARGE; the error named no size and no way out.
    # (A batch of several records is split and delivered: test_split_too_large.py.)
    create_topic(kafka_broker.bootstrap, topic_name, config={"max.message.bytes": "1000"})
    with producer(kafka_broker.bootstrap, linger_ms=60_000) as p:
        alone = p.send(topic_name, b"y" * 2000, partition=0)
        p.flush(30)
    with pytest.raises(MessageTooLargeError,
                       match=r"\(a \d+-byte batch of one record: the record is larger than "
                             r"the topic's max.message.bytes"):
        alone.get(0)


def test_close_with_zero_timeout_sends_nothing_more(kafka_broker, topic_name):
    """close(0) handed lingering batches over with a flush of no time, then stopped the
    I/O thread before their answers: records that had not gone out went, and were
    reported failed ("may be in the log") though written.  As the Java client's close(0):
    what had not gone out fails for certain, and is not written."""
    create_topic(kafka_broker.bootstrap, topic_name)
    p = producer(kafka_broker.bootstrap, linger_ms=60_000, batch_size=1_000_000)
    p.send(topic_name, b"warm")
    p.flush()
    futures = [p.send(topic_name, b"v%d" % i) for i in range(100)]
    p.close(timeout=0)
    assert all(isinstance(f.exception, ProducerClosedError) for f in futures)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"warm"]


def test_close_with_zero_timeout_leaves_no_record_without_an_outcome(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    p = producer(kafka_broker.bootstrap, linger_ms=60_000)
    p.send(topic_name, b"warm")
    p.flush()  # metadata and connection up
    futures = [p.send(topic_name, b"x" * 100) for _ in range(20000)]
    p.close(timeout=0)
    # However the race between delivery and the zero timeout goes, every record is
    # acknowledged or failed with an error: none is left pending, none is lost.
    assert all(f.is_done for f in futures)
    failed = [f for f in futures if f.failed()]
    assert all(isinstance(f.exception, KafkaError) for f in failed)
    metrics = p.metrics()["netkafka"]
    assert metrics["batches_incomplete"] == 0
    assert metrics["records_acknowledged"] + metrics["records_failed"] == 20001
    # Acknowledged records are in the topic where their futures say.  A request in
    # flight when the I/O threads stopped failed without an answer, so the broker may
    # hold some records whose futures failed -- never more than were sent.
    delivered = {(r.partition, r.offset) for r in read_topic(kafka_broker.bootstrap, topic_name)}
    acknowledged = {(m.partition, m.offset) for m in (f.get(0) for f in futures if f.succeeded())}
    assert acknowledged <= delivered
    assert len(delivered) <= 20001


def test_serializers_and_a_failing_one(kafka_broker, topic_name):
    import json
    create_topic(kafka_broker.bootstrap, topic_name)
    with producer(kafka_broker.bootstrap, key_serializer=str.encode,
                  value_serializer=lambda v: json.dumps(v).encode()) as p:
        meta = p.send(topic_name, {"a": 1}, key="k1").get(30)
        assert (meta.serialized_key_size, meta.serialized_value_size) == (2, 8)
        with pytest.raises(SerializationError,
                           match=r"value_serializer .*lambda.* failed on a set .*not JSON "
                                 r"serializable") as info:
            p.send(topic_name, {1, 2}, key="k2")
        assert isinstance(info.value.__cause__, TypeError)
        with pytest.raises(SerializationError, match=r"key_serializer .*encode.* failed on a "
                                                     r"NoneType"):
            p.send(topic_name, {"no": "key"})
    with producer(kafka_broker.bootstrap, value_serializer=lambda v: v.upper()) as p:
        with pytest.raises(SerializationError, match=r"returned a str .*must return bytes"):
            p.send(topic_name, "not bytes")
    records = read_topic(kafka_broker.bootstrap, topic_name, 1)
    assert [(r.key, r.value) for r in records] == [(b"k1", b'{"a": 1}')]


def test_bad_arguments_to_send_are_named(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    with producer(kafka_broker.bootstrap) as p:
        with pytest.raises(TypeError, match="value must be bytes.*not str"):
            p.send(topic_name, "text")
        with pytest.raises(TypeError, match="a record key must be bytes-like.*not int"):
            p.send(topic_name, b"v", key=5)
        with pytest.raises(TypeError, match=r"headers\[0\] must be a \(key, value\) pair"):
            p.send(topic_name, b"v", headers=["h"])
        with pytest.raises(ValueError, match="timestamp_ms=-5 is negative"):
            p.send(topic_name, b"v", timestamp_ms=-5)
        with pytest.raises(TypeError, match="topic must be a str"):
            p.send(b"topic", b"v")
        # Nothing half-written: the next record goes through as the first.
        assert p.send(topic_name, b"ok").get(30).offset == 0


def test_bad_arguments_to_produce_are_raised_at_once_as_send_raises_them(kafka_broker,
                                                                         topic_name):
    """produce() counted a bad timestamp, partition or serializer failure for the next
    flush() to raise (and in a transaction, failed the transaction with it): records that
    can never be written are raised by the call, as send() raises them."""
    create_topic(kafka_broker.bootstrap, topic_name)
    with producer(kafka_broker.bootstrap, value_serializer=lambda v: v.upper()) as p:
        with pytest.raises(ValueError, match="timestamp_ms=-5 is negative"):
            p.produce(topic_name, b"v", timestamp_ms=-5)
        with pytest.raises(ValueError, match="partition must be >= 0, got -1"):
            p.produce(topic_name, b"v", partition=-1)
        with pytest.raises(SerializationError, match="returned a str .*must return bytes"):
            p.produce(topic_name, "not bytes")
        p.produce(topic_name, b"ok")
        p.flush()  # none of them counted: no UndeliveredRecordsError
        assert p.metrics()["netkafka"]["records_untracked_failed"] == 0
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"OK"]


@pytest.mark.parametrize("options, error, message", [
    ({"no_such_option": 1}, TypeError, "unexpected keyword argument 'no_such_option'"),
    ({"acks": 2}, ValueError, r"acks must be 0, 1, 'all' or -1, got 2"),
    ({"compression_type": "brotli"}, ValueError,
     r"compression_type must be None, 'none', 'gzip', 'snappy', 'lz4' or 'zstd', got 'brotli'"),
    ({"batch_size": -1}, ValueError, r"batch_size must be an int >= 0, got -1"),
    ({"linger_ms": "5"}, ValueError,
     r"linger_ms must be an int or a finite float >= 0 \(milliseconds\), got '5'"),
    ({"request_timeout_ms": 2**31}, ValueError,
     r"request_timeout_ms must be an int or a finite float >= 1 and <= 2147483647 "
     r"\(milliseconds\), got 2147483648"),
    ({"buffer_memory": 1000}, ValueError, r"buffer_memory must be an int >= the largest batch "
                                          r"\(16384 bytes: batch_size, at most "
                                          r"max_request_size\)"),
    ({"max_request_size": 60}, ValueError, r"max_request_size must be an int >= 68 and "
                                           r"<= 2147483647, got 60"),
    ({"high_watermark_bytes": 10, "low_watermark_bytes": 20}, ValueError,
     r"high_watermark_bytes must be an int >= low_watermark_bytes \(20\), got 10"),
    ({"backoff": "spin"}, ValueError, r"backoff must be 'block', 'drop', 'park' or an object"),
    ({"partitioner": "nope"}, ValueError, r"partitioner must be 'default', 'murmur2', "
                                          r"'round_robin', 'broker_aware', a Partitioner, "
                                          r"an object with partition\(\) or a callable, "
                                          r"got 'nope'"),
    ({"io_threads": 0}, ValueError, r"io_threads must be an int >= 1, got 0"),
    ({"max_in_flight_requests_per_connection": "5"}, ValueError,
     r"max_in_flight_requests_per_connection must be an int >= 1, got '5'"),
    ({"enable_idempotence": True, "acks": 1}, ValueError,
     r"enable_idempotence=True needs acks='all'"),
    ({"linger.ms": 5, "linger_ms": 100}, TypeError,
     r"Producer\(\) got linger_ms twice, with different values: linger.ms=5 and linger_ms=100"),
    ({"delivery_timeout_ms": 1000}, KafkaConfigurationError,
     r"delivery_timeout_ms \(1000\) must be at least linger_ms \+ request_timeout_ms"),
    ({"value_serializer": "json"}, ValueError, r"value_serializer must be a Serializer"),
    ({"security_protocol": "TLS"}, SslConfigError, r"security_protocol='TLS' is not one of "
                                                   r"PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"sasl_mechanism": "PLAIN"}, SaslConfigError, r"sasl_mechanism is set but "
                                                   r"security_protocol='PLAINTEXT'"),
    ({"ssl_cafile": "/ca.pem"}, SslConfigError, r"ssl_cafile is set but "
                                                r"security_protocol='PLAINTEXT' does not use TLS"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}, netkafka.errors.SaslConfigError,
     r"sasl_mechanism='PLAIN' needs sasl_plain_username"),
    ({"api_version": "latest"}, ValueError,
     r"api_version must be None, 'auto' or a tuple of ints such as \(0, 10, 1\), got 'latest'"),
    ({"api_version": (0, -10)}, ValueError, r"api_version must be .*, got \(0, -10\)"),
    ({"api_version": (0, 10), "enable_idempotence": True}, ValueError,
     r"enable_idempotence=True needs RecordBatch v2 \(Kafka 0\.11\+\); api_version=\(0, 10\) "
     r"writes message format v1"),
    ({"api_version": (0, 9), "compression_type": "zstd"}, ValueError,
     r"compression_type='zstd' needs RecordBatch v2 \(Kafka 2\.1\+\); api_version=\(0, 9\) "
     r"writes message format v0"),
    ({"api_version": (0, 8, 1), "compression_type": "lz4"}, ValueError,
     r"compression_type='lz4' needs Kafka 0\.8\.2\+; api_version=\(0, 8, 1\)"),
    ({"transactional_id": ""}, ValueError, r"transactional_id must be None or a non-empty str"),
    ({"transactional_id": 7}, ValueError, r"transactional_id must be None or a non-empty str"),
    ({"transactional_id": "t" * 40000}, IllegalArgumentError,
     r"transactional_id 'tttt.*\(40000 characters\) cannot be sent: it is 40000 bytes in "
     r"UTF-8, and a Kafka string holds at most 32767"),
    ({"transactional_id": "tx-\udc80"}, IllegalArgumentError,
     r"transactional_id 'tx-\\udc80' cannot be sent: Kafka strings are UTF-8, and "
     r"'\\udc80' at index 3 has no UTF-8 form \(surrogates not allowed\)"),
    ({"client_id": "app-\ud800"}, IllegalArgumentError,
     r"client_id 'app-\\ud800' cannot be sent: Kafka strings are UTF-8"),
    ({"client_id": "\u20ac" * 11000}, IllegalArgumentError,
     r"client_id .* cannot be sent: it is 33000 bytes in UTF-8, and a Kafka string holds "
     r"at most 32767"),
    ({"transactional_id": "tx-1", "acks": 1}, ValueError, r"transactional_id needs acks='all'"),
    ({"transactional_id": "tx-1", "enable_idempotence": False}, ValueError,
     r"transactional_id needs enable_idempotence=True"),
    ({"transaction_timeout_ms": 0}, ValueError,
     r"transaction_timeout_ms must be an int or a finite float >= 1"),
    ({"transaction_version": 2}, ValueError, r"transaction_version must be None or 1, got 2"),
])
def test_bad_options_are_refused_naming_them(options, error, message):
    with pytest.raises(error, match=message):
        Producer(bootstrap_servers="127.0.0.1:9", **options)


def test_a_setting_under_both_its_names_with_one_value_is_taken():
    p = Producer(bootstrap_servers="127.0.0.1:9", **{"linger.ms": 5, "linger_ms": 5})
    try:
        assert p.config.linger_ms == 5
    finally:
        p.close()


def test_java_names_given_to_producer_take_javas_values_as_a_properties_file_does():
    """Producer(**{"security.protocol": "ssl"}) was refused where the same dict through
    netkafka.spark.producer_settings (and a properties file) was taken; the Java TLS
    store names got no hint of what they stand for."""
    p = Producer(**{"bootstrap.servers": "127.0.0.1:9", "security.protocol": "plaintext",
                    "linger.ms": "5", "enable.idempotence": "false", "ssl.truststore.type": "PEM"})
    try:
        assert (p.config.linger_ms, p.config.enable_idempotence) == (5, False)
    finally:
        p.close()
    with pytest.raises(SslConfigError, match="ssl_cafile is set but security_protocol="):
        Producer(**{"bootstrap.servers": "127.0.0.1:9", "ssl.truststore.location": "/ca.pem"})
    with pytest.raises(TypeError, match="got linger_ms twice, with different values: "
                                        "linger.ms=5 and linger_ms=6"):
        Producer(bootstrap_servers="127.0.0.1:9", **{"linger.ms": "5", "linger_ms": 6})


def test_an_empty_list_setting_given_as_text_is_the_empty_list():
    # Java's ConfigDef reads metric.reporters= as no reporter; as a Spark option or a
    # properties line it was refused as text.
    assert producer_setting("metric.reporters", "") == {"metric_reporters": ()}
    Producer(bootstrap_servers="127.0.0.1:9", **producer_setting("metric.reporters", " ")).close()


def test_kafka_python_defaults_and_aliases():
    p = KafkaProducer(bootstrap_servers="127.0.0.1:9", security_protocol="PLAINTEXT",
                      acks=1, retries=float("inf"), api_version=(2, 8, 0))
    try:
        assert KafkaProducer is Producer and netkafka.KafkaProducer is Producer
        assert p.config.acks == 1 and p.config.enable_idempotence is False
        assert p.config.retries == 2**31 - 1
        assert (p.config.batch_size, p.config.linger_ms, p.config.buffer_memory) == (
            16384, 0, 32 * 1024 * 1024)
    finally:
        p.close()
    # As the Java client: a setting idempotence cannot work with turns its default
    # off; asked for explicitly, it is an error (tested above).
    for conflict in ({"retries": 0}, {"max_in_flight_requests_per_connection": 10},
                     {"acks": 0}):
        other = Producer(bootstrap_servers="127.0.0.1:9", **conflict)
        try:
            assert other.config.enable_idempotence is False
        finally:
            other.close()
    defaults = Producer(bootstrap_servers="127.0.0.1:9")
    try:
        assert defaults.config.acks == -1 and defaults.config.enable_idempotence is True
    finally:
        defaults.close()


def test_unreachable_bootstrap_fails_within_max_block_ms(topic_name):
    with Producer(bootstrap_servers="127.0.0.1:9", max_block_ms=500) as p:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match=r"127\.0\.0\.1:9"):
            p.send(topic_name, b"v")
        assert time.monotonic() - started < 5


def test_unknown_topic_without_auto_creation_fails_within_max_block_ms(
        broker_without_auto_create, topic_name):
    with producer(broker_without_auto_create.bootstrap, max_block_ms=1500) as p:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError,
                           match=rf"topic '{topic_name}' not available in metadata after 1500 "
                                 r"ms: broker says UNKNOWN_TOPIC_OR_PARTITION"):
            p.send(topic_name, b"nowhere")
        assert 1.4 <= time.monotonic() - started < 6
        assert p.metrics()["netkafka"]["records_sent"] == 0


def test_full_buffer_memory_blocks_then_times_out_or_drops(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    for backoff, error in (("block", BackpressureTimeoutError), ("drop", RecordDroppedError)):
        p = producer(kafka_broker.bootstrap, batch_size=1024, buffer_memory=4096,
                     max_block_ms=300, backoff=backoff, linger_ms=0,
                     request_timeout_ms=30000, delivery_timeout_ms=60000)
        try:
            p.send(topic_name, b"warm").get(30)
            nodes[0].pause()  # nothing is acknowledged: batches keep their memory
            try:
                futures = []
                with pytest.raises(error, match=r"buffer pool \(\d+ of 4096 bytes free"):
                    for _ in range(100):
                        futures.append(p.send(topic_name, b"x" * 900))
                if backoff == "drop":
                    assert p.metrics()["netkafka"]["records_dropped"] == 1
            finally:
                nodes[0].resume()
            p.flush(30)
            assert all(f.succeeded() for f in futures) and len(futures) >= 3
        finally:
            p.close()


def test_a_script_written_for_kafka_python_runs_unchanged(kafka_broker, topic_name):
    # Only the import differs from a kafka-python script.
    import json

    from netkafka import KafkaProducer
    from netkafka import KafkaTimeoutError as ScriptTimeout

    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    kafka_producer = KafkaProducer(
        bootstrap_servers=[kafka_broker.bootstrap],
        client_id="legacy-script",
        value_serializer=lambda v: json.dumps(v).encode("utf-8"),
        key_serializer=lambda k: k.encode("utf-8") if k is not None else None,
        acks=1, retries=3, linger_ms=10, batch_size=32768,
        compression_type="gzip", max_in_flight_requests_per_connection=1,
        request_timeout_ms=20000, api_version=(2, 5, 0))
    delivered = []

    def on_send_success(record_metadata):
        delivered.append((record_metadata.topic, record_metadata.partition,
                          record_metadata.offset))

    def on_send_error(excp):
        raise AssertionError(f"send failed: {excp}")

    record_metadata = kafka_producer.send(topic_name, {"event": "start"}, key="a").get(timeout=10)
    assert record_metadata.topic == topic_name and record_metadata.offset == 0
    for i in range(100):
        kafka_producer.send(topic_name, key=str(i % 4), value={"n": i}).add_callback(
            on_send_success).add_errback(on_send_error)
    kafka_producer.flush()
    try:
        kafka_producer.send(topic_name, {"event": "end"}).get(timeout=10)
    except ScriptTimeout:
        raise AssertionError("timed out")
    kafka_producer.close()
    assert len(delivered) == 100
    records = read_topic(kafka_broker.bootstrap, topic_name, 102)
    values = sorted(json.loads(r.value).get("n", -1) for r in records)
    assert values == [-1, -1] + list(range(100))


def test_bool_timestamp_is_refused_naming_it(kafka_broker, topic_name):
    with Producer(bootstrap_servers=kafka_broker.bootstrap) as producer:
        with pytest.raises(TypeError, match="timestamp_ms must be an int"):
            producer.send(topic_name, b"v", timestamp_ms=True)


def dropped_after(kafka_broker, use):
    """Makes a producer (records lingering 60 s), returns (use(producer), the names of
    the netkafka threads it started still alive 10 s after it was dropped without
    close() and collected)."""
    before = set(threading.enumerate())
    p = producer(kafka_broker.bootstrap, linger_ms=60_000)
    used = use(p)
    del p
    gc.collect()
    started = [t for t in threading.enumerate()
               if t not in before and t.name.startswith("netkafka")]
    for thread in started:
        thread.join(10)
    return used, [t.name for t in started if t.is_alive()]


def test_a_producer_dropped_without_close_delivers_its_records_and_stops_its_threads(
        kafka_broker, topic_name):
    # As kafka-python's, a producer nobody refers to any more is closed.  Its own stack
    # kept it alive: every dropped producer left its I/O and linger threads and its
    # sockets running, and its lingering records unsent, until the interpreter exited.
    create_topic(kafka_broker.bootstrap, topic_name)
    future, alive = dropped_after(kafka_broker, lambda p: p.send(topic_name, b"dropped"))
    assert alive == []
    assert future.get(0).offset == 0


def test_a_producer_dropped_after_a_produce_failure_warns_instead_of_raising(
        kafka_broker, topic_name, monkeypatch, caplog):
    # Its close() raised UndeliveredRecordsError for the produce() record the broker
    # refused: on the close thread nobody catches, so a traceback, and no warning.
    create_topic(kafka_broker.bootstrap, topic_name, config={"max.message.bytes": "1000"})
    raised = []
    monkeypatch.setattr(threading, "excepthook", raised.append)
    _, alive = dropped_after(kafka_broker, lambda p: p.produce(topic_name, b"v" * 5000))
    assert alive == []
    assert [(hook.exc_type, hook.thread.name) for hook in raised] == []
    assert "closed once dropped without close(): 1 records failed undelivered" in caplog.text


UNCLOSED_AT_EXIT = """
import sys
from netkafka import Producer
p = Producer(bootstrap_servers=sys.argv[1], linger_ms=60_000)
for i in range(100):
    p.send(sys.argv[2], b"%d" % i)
if sys.argv[3] == "dropped":
    del p
"""


@pytest.mark.parametrize("how", ["kept", "dropped"])
def test_records_of_a_producer_never_closed_are_delivered_at_interpreter_exit(
        kafka_broker, topic_name, how):
    # Kept to the end, the exit hook closes it; dropped, its __del__ does, and the
    # exit waits for that close as it would for the hook.
    create_topic(kafka_broker.bootstrap, topic_name)
    root = os.path.dirname(os.path.dirname(netkafka.__file__))
    done = subprocess.run([sys.executable, "-c", UNCLOSED_AT_EXIT, kafka_broker.bootstrap,
                           topic_name, how], env={**os.environ, "PYTHONPATH": root},
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    records = read_topic(kafka_broker.bootstrap, topic_name, 100)
    assert sorted(int(r.value) for r in records) == list(range(100))


def test_a_close_racing_another_close_returns_only_once_the_producer_is_closed(
        kafka_broker, topic_name):
    # A second close() that returned while the first was still flushing let its
    # caller go on (or the interpreter exit) with records not yet done.
    create_topic(kafka_broker.bootstrap, topic_name)
    in_callback, release = threading.Event(), threading.Event()
    p = producer(kafka_broker.bootstrap)
    first = p.send(topic_name, b"first")
    first.add_callback(lambda meta: (in_callback.set(), release.wait()))
    assert in_callback.wait(30)  # the I/O thread is held: nothing else completes
    second = p.send(topic_name, b"second")
    closer = threading.Thread(target=p.close)
    closer.start()
    while True:  # until the first close() has begun
        try:
            p.send(topic_name, b"probe").add_errback(lambda exc: None)
        except ProducerClosedError:
            break
    seen = []

    def close_again():
        p.close()
        seen.append(second.is_done)

    again = threading.Thread(target=close_again)
    again.start()
    again.join(2)  # time for a close() that does not wait to return
    release.set()
    again.join()
    closer.join()
    assert seen == [True]
    assert second.get(0).offset >= 1


def test_flush_and_get_return_once_the_records_callbacks_have_run(kafka_broker, topic_name):
    # As in kafka-python and the Java client: a count kept by callbacks is complete
    # when flush() returns, and a record's own callbacks have run when get() returns.
    create_topic(kafka_broker.bootstrap, topic_name)
    ran = []

    def slow_callback(meta):
        time.sleep(0.5)  # widens the window in which flush() used to return
        ran.append(meta.offset)

    with producer(kafka_broker.bootstrap) as p:
        p.send(topic_name, b"a").add_callback(slow_callback)
        p.flush(30)
        assert ran == [0]
        future = p.send(topic_name, b"b")
        future.add_callback(slow_callback)
        # A callback may read its own future's outcome on the completing thread.
        future.add_callback(lambda meta: ran.append(future.get(0).offset))
        assert future.get(30).offset == 1
        assert ran == [0, 1, 1]


def test_close_after_a_produce_failure_stops_every_thread_then_raises_it(
        kafka_broker, topic_name):
    # close() raised the UndeliveredRecordsError of its flush half-way: the I/O thread,
    # metadata and buffers were never closed, and a second close() did nothing.
    before, p = lingering_producer(kafka_broker, topic_name)
    delivered = p.send(topic_name, b"delivered")
    p.produce(topic_name, b"refused", partition=7)  # the topic has one partition
    with pytest.raises(UndeliveredRecordsError, match="no partition 7") as raised:
        p.close()
    assert raised.value.failed_count == 1
    assert netkafka_threads() == before
    assert delivered.get(0).offset == 0
    p.close()  # closed: nothing left to raise
    with pytest.raises(ProducerClosedError):
        p.send(topic_name, b"after close")
