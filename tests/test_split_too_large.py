"""A batch the broker refuses as MESSAGE_TOO_LARGE is split and its records sent again
in parts (netkafka/producer/split.py), as kafka-python 3 and the Java client do; a
single record too large still fails.  Checked against a real broker and read back by
an independent consumer (netkafka.testing.reader)."""
import random
import threading
import types
import uuid

import pytest

from batch_helpers import wait_for
from broker_proxy import ProduceAnswerProxy, ProduceDroppingProxy
from netkafka import Producer, RecordMetadata
from netkafka.errors import (KafkaError, KafkaTimeoutError, MessageTooLargeError,
                             RecordSpooledError)
from netkafka.producer.sender import ProduceResult, _SplitOutcome
from netkafka.producer.split import split_in_halves
from netkafka.record._batch import RecordBatchBuilder
from netkafka.record._compression import Compressor
from netkafka.record._crc import crc32c
from netkafka.record._pool import BufferPool
from netkafka.record.reader import read_batch
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic
from netkafka.testing.segments import stored_batches

# The topic's max.message.bytes: a batch of 100-byte records holds some 8 within it.
LIMIT_BYTES = 1000
CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def producer(bootstrap, **options):
    options.setdefault("max_block_ms", 30000)
    return Producer(bootstrap_servers=bootstrap, **options)


def values(count, tag=b"v"):
    return [tag + b"-%05d-" % i + b"x" * 90 for i in range(count)]


def assert_read_back(bootstrap, topic, sent, offsets):
    """Every record once, in order, at the offset its future said."""
    records = read_topic(bootstrap, topic, len(sent))
    assert [r.value for r in records] == sent
    assert [r.offset for r in records] == offsets


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_batch_refused_as_too_large_is_split_until_its_parts_fit(
        kafka_broker, topic_name, idempotent):
    # It failed whole with MESSAGE_TOO_LARGE: 200 records lost for a setting.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(200)
    options = {} if idempotent else {"enable_idempotence": False, "acks": 1}
    with producer(kafka_broker.bootstrap, linger_ms=60_000, **options) as p:
        futures = [p.send(topic_name, value, partition=0) for value in sent]
        p.flush(60)
        metadata = [future.get(0) for future in futures]
        groups = p.metrics()
        metrics = groups["netkafka"]
    offsets = [m.offset for m in metadata]
    assert offsets == list(range(200))
    assert groups["producer-metrics"]["batch-split-total"] == metrics["sender_batches_split"]
    # One 200-record batch, halved until its parts of at most 8 records fit: 31 splits.
    assert metrics["sender_batches_split"] >= 15
    assert metrics["records_acknowledged"] == 200
    assert metrics["records_failed"] == 0
    assert_read_back(kafka_broker.bootstrap, topic_name, sent, offsets)


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_batch_of_held_large_values_refused_as_too_large_is_split(kafka_broker, topic_name,
                                                                   idempotent):
    # Values of 64 KiB and more are held by their batch, which goes out in segments; a
    # split reads the records whole.  Six of 100 KiB fill one batch; the topic takes two.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(250_000)})
    sent = [bytes([65 + i]) * 100_000 for i in range(6)]
    options = {} if idempotent else {"enable_idempotence": False, "acks": 1}
    with producer(kafka_broker.bootstrap, linger_ms=60_000, batch_size=1 << 20,
                  **options) as p:
        futures = [p.send(topic_name, value, partition=0) for value in sent]
        p.flush(60)
        offsets = [future.get(0).offset for future in futures]
        assert p.metrics()["netkafka"]["sender_batches_split"] >= 1
    assert offsets == list(range(6))
    assert_read_back(kafka_broker.bootstrap, topic_name, sent, offsets)


def test_split_batches_keep_order_behind_several_in_flight(kafka_broker, topic_name):
    # Idempotent, acks=all, five requests in flight: batches behind a refused one are
    # refused too (too large, or out of sequence: the broker still expects the
    # refused batch's sequence); they wait for its parts, and nothing is written
    # twice or out of order.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = {0: values(3000, b"p0"), 1: values(3000, b"p1")}
    futures = {0: [], 1: []}
    with producer(kafka_broker.bootstrap, linger_ms=2, batch_size=4096,
                  max_in_flight_requests_per_connection=5) as p:
        def send(partition):
            for value in sent[partition]:
                futures[partition].append(p.send(topic_name, value, partition=partition))
        threads = [threading.Thread(target=send, args=(n,)) for n in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        p.flush(120)
        metrics = p.metrics()["netkafka"]
    assert metrics["sender_batches_split"] > 0
    assert metrics["producer_epoch_bumps"] == 0
    records = read_topic(kafka_broker.bootstrap, topic_name, 6000)
    for partition in (0, 1):
        offsets = [future.get(0).offset for future in futures[partition]]
        assert offsets == list(range(3000))
        mine = [r for r in records if r.partition == partition]
        assert [r.value for r in mine] == sent[partition]
        assert [r.offset for r in mine] == offsets


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_batch_is_read_back_and_split(kafka_broker, topic_name, codec):
    # Its records are decompressed and the parts compressed again with its codec.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    # Half random, half zeros: every batch compresses (or it would go uncompressed)
    # and stays too large compressed.
    sent = [random.Random(i).randbytes(50) + bytes(50) for i in range(300)]
    with producer(kafka_broker.bootstrap, linger_ms=60_000, compression_type=codec) as p:
        futures = [p.send(topic_name, value, partition=0, key=b"%d" % i,
                          headers=[("n", b"%d" % i)], timestamp_ms=1_700_000_000_000 + i)
                   for i, value in enumerate(sent)]
        p.flush(60)
        metadata = [future.get(0) for future in futures]
        metrics = p.metrics()["netkafka"]
    assert metrics["sender_batches_split"] > 0
    assert metrics["producer_epoch_bumps"] == 0
    offsets = [m.offset for m in metadata]
    assert offsets == list(range(300))
    records = read_topic(kafka_broker.bootstrap, topic_name, 300)
    assert [r.value for r in records] == sent
    assert [r.offset for r in records] == offsets
    assert [r.key for r in records] == [b"%d" % i for i in range(300)]
    assert [r.headers for r in records] == [[("n", b"%d" % i)] for i in range(300)]
    assert [r.timestamp_ms for r in records] == [1_700_000_000_000 + i for i in range(300)]
    assert [m.timestamp for m in metadata] == [1_700_000_000_000 + i for i in range(300)]
    stored = stored_batches(kafka_broker.nodes[0].data_dir, topic_name)
    assert {batch.codec for batch in stored} == {CODECS[codec]}


@pytest.mark.parametrize("codec, level", [("gzip", 1), ("zstd", 19)])
def test_the_parts_of_a_compressed_batch_take_the_producers_compression_level(
        kafka_broker, topic_name, codec, level):
    # They were compressed at the codec's default level.  The stored batches' sizes
    # are those of their records compressed at the producer's level.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    words = [b"alpha", b"beta", b"gamma", b"delta", b"epsilon", b"zeta", b"eta", b"theta"]
    sent = [b" ".join(random.Random(i).choices(words, k=40)) for i in range(200)]
    with producer(kafka_broker.bootstrap, linger_ms=60_000, compression_type=codec,
                  compression_level=level) as p:
        for value in sent:
            p.send(topic_name, value, partition=0, timestamp_ms=1_700_000_000_000)
        p.flush(60)
        assert p.metrics()["netkafka"]["records_acknowledged"] == 200
        assert p.metrics()["netkafka"]["sender_batches_split"] > 0
    records = read_topic(kafka_broker.bootstrap, topic_name, 200)
    assert [r.value for r in records] == sent
    stored = stored_batches(kafka_broker.nodes[0].data_dir, topic_name)
    assert {batch.codec for batch in stored} == {CODECS[codec]}

    def sizes(compression):
        """Each stored batch's size had its records been compressed so."""
        found, start = [], 0
        for batch in stored:
            builder = RecordBatchBuilder(BufferPool(1 << 16, 1 << 17).acquire(1 << 16),
                                         1 << 16, 1 << 16, compression)
            for record in records[start:start + batch.record_count]:
                builder.append(None, record.value, None, record.timestamp_ms)
            found.append(builder.seal().nbytes)
            start += batch.record_count
        return found

    assert [batch.size_bytes for batch in stored] == sizes(Compressor(codec, level))
    assert sizes(Compressor(codec, level)) != sizes(codec)  # the level shows


def test_a_single_record_too_large_fails_alone_with_the_hint(kafka_broker, topic_name):
    # Its batch is split down to it: the others are delivered, it fails saying why.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(20)
    with producer(kafka_broker.bootstrap, linger_ms=60_000) as p:
        before = [p.send(topic_name, value, partition=0) for value in sent[:10]]
        alone = p.send(topic_name, b"y" * 2000, partition=0)
        after = [p.send(topic_name, value, partition=0) for value in sent[10:]]
        callbacks = []
        alone.add_errback(callbacks.append)
        p.flush(60)
        metrics = p.metrics()["netkafka"]
        with pytest.raises(MessageTooLargeError,
                           match=r"\(a \d+-byte batch of one record: the record is larger "
                                 r"than the topic's max.message.bytes"):
            alone.get(0)
        assert alone.failed() and not alone.succeeded()
        assert callbacks == [alone.exception]
        offsets = [future.get(0).offset for future in before + after]
    assert offsets == list(range(20))
    assert metrics["records_failed"] == 1
    assert metrics["records_acknowledged"] == 20
    assert_read_back(kafka_broker.bootstrap, topic_name, sent, offsets)


def test_produce_records_of_a_split_batch_count_only_the_failed_one(kafka_broker, topic_name):
    # produce() (no futures): flush() raises for the one record too large, and counts
    # only it; the others are in the topic.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(30)
    with producer(kafka_broker.bootstrap, linger_ms=60_000) as p:
        for value in sent[:15]:
            p.produce(topic_name, value, partition=0)
        p.produce(topic_name, b"y" * 2000, partition=0)
        for value in sent[15:]:
            p.produce(topic_name, value, partition=0)
        with pytest.raises(Exception, match="MESSAGE_TOO_LARGE") as raised:
            p.flush(60)
        assert raised.value.failed_count == 1
    assert_read_back(kafka_broker.bootstrap, topic_name, sent, list(range(30)))


def test_produce_records_of_a_split_batch_count_only_if_they_failed(kafka_broker, topic_name):
    # produce() and send() records in one batch, the one too large sent with a future:
    # flush() counted min(produce() records, records failed) as failed produce()
    # records -- one, which was the send() record.  Then a produce() record too large
    # among send() records: it alone counts.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(30)
    with producer(kafka_broker.bootstrap, linger_ms=60_000) as p:
        for value in sent[:15]:
            p.produce(topic_name, value, partition=0)
        alone = p.send(topic_name, b"y" * 2000, partition=0)
        for value in sent[15:]:
            p.produce(topic_name, value, partition=0)
        p.flush(60)  # no produce() record failed
        with pytest.raises(MessageTooLargeError):
            alone.get(0)
        futures = [p.send(topic_name, value, partition=0) for value in sent[:15]]
        p.produce(topic_name, b"y" * 2000, partition=0)
        futures += [p.send(topic_name, value, partition=0) for value in sent[15:]]
        with pytest.raises(Exception, match="MESSAGE_TOO_LARGE") as raised:
            p.flush(60)
        assert raised.value.failed_count == 1
        assert [future.get(0).offset for future in futures] == list(range(30, 60))
        metrics = p.metrics()["netkafka"]
        assert metrics["records_untracked_failed"] == 1
        assert metrics["records_failed"] == 2
    assert_read_back(kafka_broker.bootstrap, topic_name, sent + sent, list(range(60)))


def test_send_batch_offsets_of_a_split_batch(kafka_broker, topic_name):
    # Row 40 is too large alone: it fails, and the rows after it are one offset
    # nearer the batch's first than their place in it.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    rows = values(100)
    rows[40] = b"y" * 2000
    with producer(kafka_broker.bootstrap, linger_ms=60_000) as p:
        result = p.send_batch(topic_name, rows, partitions=[0] * 100)
        p.flush(60)
        result.get(0)
        assert result.failed_count == 1
        assert [(row, type(error)) for row, error in result.errors] == [
            (40, MessageTooLargeError)]
        expected = list(range(40)) + [-1] + list(range(40, 99))
        assert list(result.offsets()) == expected
    assert_read_back(kafka_broker.bootstrap, topic_name, rows[:40] + rows[41:],
                     list(range(99)))


def test_a_legacy_message_set_refused_as_too_large_fails_with_the_hint(
        kafka_broker_3_9, topic_name):
    # Message sets v0/v1 (api_version below (0, 11)) are not read back: the batch
    # fails whole, saying which setting makes batches fit.
    create_topic(kafka_broker_3_9.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    with producer(kafka_broker_3_9.bootstrap, api_version=(0, 10), linger_ms=60_000) as p:
        futures = [p.send(topic_name, value, partition=0) for value in values(50)]
        p.flush(60)
        with pytest.raises(MessageTooLargeError,
                           match=rf"{topic_name}-0 .*\(a \d+-byte batch of 50 records: set "
                                 r"batch_size below the topic's max.message.bytes"):
            futures[0].get(0)
        assert p.metrics()["netkafka"]["sender_batches_split"] == 0


def test_the_parts_of_a_split_batch_belong_to_its_transaction(kafka_broker, topic_name):
    # Committed: every record once and in order under read_committed; aborted: none.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(200)
    with producer(kafka_broker.bootstrap, linger_ms=60_000,
                  transactional_id=f"split-{uuid.uuid4().hex[:10]}") as p:
        p.init_transactions()
        p.begin_transaction()
        for value in values(100, b"aborted"):
            p.send(topic_name, value, partition=0)
        p.flush(60)
        p.abort_transaction()
        p.begin_transaction()
        futures = [p.send(topic_name, value, partition=0) for value in sent]
        p.commit_transaction()
        offsets = [future.get(0).offset for future in futures]
        assert p.metrics()["netkafka"]["sender_batches_split"] > 0
    records = read_topic(kafka_broker.bootstrap, topic_name, 200,
                         isolation_level="read_committed")
    assert [r.value for r in records] == sent
    assert [r.offset for r in records] == offsets


def test_a_first_batch_split_is_not_overtaken_by_a_smaller_one_behind_it(
        kafka_broker, topic_name):
    # A broker with no state of a producer id for a partition takes any sequence: a
    # small batch sent behind a first batch refused as too large was appended first,
    # and the split parts after it (out of sequence, the partition started over
    # under a new epoch): the records out of send order.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(43)
    with producer(kafka_broker.bootstrap, linger_ms=0, batch_size=4096) as p:
        # 36 records fill a 4 KiB batch, which goes; the last 7 follow in a batch of
        # their own (under 1000 bytes) while the first is in flight.
        futures = [p.send(topic_name, value, partition=0) for value in sent]
        p.flush(60)
        offsets = [future.get(0).offset for future in futures]
        metrics = p.metrics()["netkafka"]
    assert metrics["sender_batches_split"] > 0
    assert metrics["producer_epoch_bumps"] == 0
    assert offsets == list(range(43))
    assert_read_back(kafka_broker.bootstrap, topic_name, sent, offsets)


def test_the_parts_of_a_split_part_are_not_overtaken_by_its_sibling(kafka_broker, topic_name):
    # 17 records halve into 9, still too large, and 8, which fit.  The 9's halves were
    # queued behind the 8 (their batch's send order, which the parts share, was all
    # the queue knew): to a broker with no state of the producer id the 8 went first,
    # was appended, and the halves after it were refused out of sequence -- the
    # records out of send order, the partition started over under a new epoch.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(17)
    with producer(kafka_broker.bootstrap, linger_ms=60_000) as p:
        futures = [p.send(topic_name, value, partition=0) for value in sent]
        p.flush(60)
        offsets = [future.get(0).offset for future in futures]
        metrics = p.metrics()["netkafka"]
    assert metrics["sender_batches_split"] == 2
    assert metrics["producer_epoch_bumps"] == 0
    assert offsets == list(range(17))
    assert_read_back(kafka_broker.bootstrap, topic_name, sent, offsets)


# -- With a WAL and the spool (on_delivery_timeout='spool').

SPOOL = dict(request_timeout_ms=1000, delivery_timeout_ms=2000, retry_backoff_ms=100,
             max_block_ms=5000, on_delivery_timeout="spool")


def test_a_batch_refused_as_too_large_after_close_began_fails_as_closed(kafka_broker,
                                                                        topic_name):
    """The MESSAGE_TOO_LARGE answer of a batch comes after close() closed the sender,
    before it shut the I/O threads: the batch is not split (nothing is sent any more)
    and its records failed with the broker's MessageTooLargeError, as if they were too
    large -- split, they would have fit.  They fail now as any batch close() cut short,
    saying the sender closed before they were delivered."""
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    host, port = kafka_broker.bootstrap.split(",")[0].rsplit(":", 1)
    proxy = ProduceAnswerProxy((host, int(port)))
    answer_held, release = threading.Event(), threading.Event()

    def hold(data, version):  # the refusal, held until close() has closed the sender
        answer_held.set()
        release.wait(60)
        return data

    p = producer(proxy.bootstrap, linger_ms=60_000)
    try:
        futures = [p.send(topic_name, value, partition=0) for value in values(12)]
        metadata_close = p._metadata.close

        def after_the_sender_closed():  # close()'s next step once the sender is closed
            release.set()
            wait_for(lambda: all(f.is_done for f in futures), 30, "the refused batch")
            metadata_close()

        p._metadata.close = after_the_sender_closed
        with proxy.lock:
            proxy.rewrite_produce = hold
        try:
            p.flush(0)  # the batch goes out, its answer held
        except KafkaTimeoutError:
            pass
        assert answer_held.wait(30)
        closer = threading.Thread(target=p.close, args=(0,))
        closer.start()
        closer.join(60)
        assert not closer.is_alive()
    finally:
        release.set()
        p.close(0)
        proxy.close()
    for future in futures:
        with pytest.raises(KafkaError, match="the sender closed before") as failed:
            future.get(0)
        assert not isinstance(failed.value, MessageTooLargeError)


@pytest.fixture
def dropping_proxy(kafka_broker):
    """A proxy to the broker that leaves Produce requests unanswered on demand: the
    batches they carry time out."""
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    proxy = ProduceDroppingProxy((host, int(port)))
    yield proxy
    proxy.close()


def wal_producer(bootstrap, wal_dir, **options):
    # linger_ms: as long as delivery_timeout_ms allows; flush() sends each batch whole.
    return Producer(bootstrap_servers=bootstrap, wal_dir=str(wal_dir), linger_ms=1000,
                    **SPOOL, **options)


def test_a_split_batch_partly_timed_out_is_done_in_the_wal(
        kafka_broker, topic_name, tmp_path, dropping_proxy):
    # Its first part in, its second timed out: the second's records failed with the
    # timeout, yet the WAL kept the batch, and the next producer on the directory
    # replayed them -- records reported failed, delivered later.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(12)  # too large whole, two halves of 6 that fit
    with wal_producer(dropping_proxy.bootstrap, tmp_path) as p:
        # The whole batch (refused) and its first part pass; the second part does not.
        dropping_proxy.set_dropping(True, after=2)
        futures = [p.send(topic_name, value, partition=0) for value in sent]
        p.flush(30)
        assert [future.get(0).offset for future in futures[:6]] == list(range(6))
        for future in futures[6:]:
            with pytest.raises(KafkaTimeoutError) as caught:
                future.get(0)
            assert not isinstance(caught.value, RecordSpooledError)
        metrics = p.metrics()
        assert metrics["netkafka"]["sender_batches_split"] == 1
        assert metrics["netkafka"]["records_spooled"] == 0
        assert metrics["netkafka-wal"]["live_batches"] == 0
        dropping_proxy.set_dropping(False)
    with wal_producer(kafka_broker.bootstrap, tmp_path) as again:
        assert again.replay(30).records == 0
    assert_read_back(kafka_broker.bootstrap, topic_name, sent[:6], list(range(6)))


def send_spooled(p, topic, sent, contexts=False):
    """sent to partition 0 (each with its index as context, if contexts), flushed:
    every record is told it is spooled."""
    futures = [p.send(topic, value, partition=0,
                      **({"context": b"%d" % i} if contexts else {}))
               for i, value in enumerate(sent)]
    p.flush(30)
    for future in futures:
        with pytest.raises(RecordSpooledError):
            future.get(0)


def test_a_split_batch_whose_parts_all_timed_out_is_spooled(
        kafka_broker, topic_name, tmp_path, dropping_proxy):
    # Nothing of it in the topic: spooled as a batch sent whole is.  Its records
    # failed with the timeout (not RecordSpooledError), the WAL kept the batch, and
    # the next producer replayed it.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(12)
    with wal_producer(dropping_proxy.bootstrap, tmp_path) as p:
        dropping_proxy.set_dropping(True, after=1)  # the whole batch, refused
        send_spooled(p, topic_name, sent)
        assert p.metrics()["netkafka"]["records_spooled"] == 12
        dropping_proxy.set_dropping(False)
        wait_for(lambda: p.metrics()["netkafka"]["records_spool_delivered"] == 12, 60,
                 "the spooled records' delivery")
        metrics = p.metrics()
        assert metrics["netkafka"]["records_spool_failed"] == 0
        assert metrics["netkafka-wal"]["live_batches"] == 0
    # Once each: the proxy held the parts back, none reached the broker before the
    # spool's copy.
    records = read_topic(kafka_broker.bootstrap, topic_name, 12)
    assert [r.value for r in records] == sent


def test_a_replayed_batch_split_and_partly_timed_out_is_done_in_the_wal(
        kafka_broker, topic_name, tmp_path, dropping_proxy):
    # on_replay heard the second part's records fail, yet the WAL kept the batch: the
    # producer after replayed them again.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(12)
    first = wal_producer(dropping_proxy.bootstrap, tmp_path)
    try:
        dropping_proxy.set_dropping(True)
        send_spooled(first, topic_name, sent, contexts=True)
    finally:
        first.close(0)  # the spooled batch stays in the WAL
    heard = {}
    dropping_proxy.set_dropping(False)
    dropping_proxy.set_dropping(True, after=2)
    second = wal_producer(dropping_proxy.bootstrap, tmp_path,
                          on_replay=lambda context, outcome: heard.setdefault(context, outcome))
    try:
        report = second.replay(30)
        assert second.metrics()["netkafka-wal"]["live_batches"] == 0
    finally:
        dropping_proxy.set_dropping(False)
        second.close(10)
    assert (report.records, report.failed, report.spooled) == (12, 6, 0), report
    assert all(isinstance(heard[b"%d" % i], RecordMetadata) for i in range(6)), heard
    assert all(isinstance(heard[b"%d" % i], KafkaTimeoutError)
               and not isinstance(heard[b"%d" % i], RecordSpooledError)
               for i in range(6, 12)), heard
    with wal_producer(kafka_broker.bootstrap, tmp_path) as third:
        assert third.replay(30).records == 0
    assert_read_back(kafka_broker.bootstrap, topic_name, sent[:6], list(range(6)))


def test_a_spooled_batch_split_and_partly_timed_out_stays_for_the_next_producer(
        kafka_broker, topic_name, tmp_path, dropping_proxy):
    # Its records were told they are sent again.  Its first part in, its second
    # timed out: the spool cannot send the batch again without writing the first
    # part twice, and the WAL knows it whole, so it stays there for the next
    # producer -- counted as failed for good, it was not.
    create_topic(kafka_broker.bootstrap, topic_name,
                 config={"max.message.bytes": str(LIMIT_BYTES)})
    sent = values(12)
    with wal_producer(dropping_proxy.bootstrap, tmp_path) as p:
        dropping_proxy.set_dropping(True)
        send_spooled(p, topic_name, sent)
        # The spool's next resend: the whole batch (refused) and its first part pass.
        dropping_proxy.set_dropping(False)
        dropping_proxy.set_dropping(True, after=2)
        # Failed in the sender: the whole batch's first delivery timeout, then the part.
        wait_for(lambda: p.metrics()["netkafka"]["sender_batches_failed"] == 2, 60,
                 "the second part's delivery timeout")
        dropping_proxy.set_dropping(False)
    # Closed: the part's outcome has been handled (the I/O threads are stopped).
    metrics = p.metrics()["netkafka"]
    assert metrics["sender_batches_split"] == 1
    assert metrics["spool_batches"] == 0
    assert metrics["records_spool_failed"] == metrics["records_spool_delivered"] == 0
    with wal_producer(kafka_broker.bootstrap, tmp_path) as again:
        report = again.replay(30)
    assert (report.records, report.failed, report.pending) == (12, 0, 0), report
    # Replayed under its stamp: the broker dropped the first part it had.
    assert_read_back(kafka_broker.bootstrap, topic_name, sent, list(range(12)))


# -- Without a broker: the reader, the halves, the outcome of a split batch.

def sealed_batch(count, codec=None, producer_state=(7, 3, 100)):
    pool = BufferPool(1 << 16, 1 << 18)
    builder = RecordBatchBuilder(pool.acquire(1 << 16), 1 << 16, 1 << 16, codec)
    for i in range(count):
        builder.append(b"k%d" % i, values(1, b"%d" % i)[0] if i % 5 else None,
                       [("h", b"%d" % i), ("n", None)], 1_700_000_000_000 - i)
    builder.set_producer_state(*producer_state)
    return builder, builder.seal()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_the_halves_hold_the_records_with_their_share_of_the_sequences(codec):
    builder, view = sealed_batch(9, codec)
    whole = read_batch(view, 1 << 20)
    (first, first_view, start, count), (second, second_view, middle, rest) = \
        split_in_halves(view, 1 << 20)
    assert (start, count, middle, rest) == (0, 5, 5, 4)
    one, two = read_batch(first_view, 1 << 20), read_batch(second_view, 1 << 20)
    assert one.records + two.records == whole.records
    assert (one.producer_id, one.producer_epoch, one.base_sequence) == (7, 3, 100)
    assert (two.producer_id, two.producer_epoch, two.base_sequence) == (7, 3, 105)
    assert one.codec == two.codec == whole.codec == (CODECS[codec] if codec else 0)
    assert whole.records[1].headers == [(b"h", b"1"), (b"n", None)]
    assert whole.records[0].value is None and whole.records[3].timestamp_ms == (
        1_700_000_000_000 - 3)


def test_the_reader_refuses_bytes_that_do_not_agree():
    _, view = sealed_batch(4)
    data = bytes(view)
    with pytest.raises(ValueError, match="CRC32C"):
        read_batch(data[:-1] + bytes([data[-1] ^ 1]), 1 << 20)
    with pytest.raises(ValueError, match="batch length"):
        read_batch(data[:-1], 1 << 20)
    with pytest.raises(ValueError, match="not a RecordBatch v2"):
        read_batch(data[:16] + b"\x01" + data[17:], 1 << 20)
    # A record count the records do not agree with (the CRC made right again).
    forged = bytearray(data)
    forged[57:61] = (5).to_bytes(4, "big")
    forged[23:27] = (4).to_bytes(4, "big")
    forged[17:21] = crc32c(bytes(forged[21:])).to_bytes(4, "big")
    with pytest.raises(ValueError, match="past the batch|past its record|varint"):
        read_batch(bytes(forged), 1 << 20)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_the_reader_decompresses_no_more_than_its_bound(codec):
    _, view = sealed_batch(40, codec)
    assert read_batch(view, 1 << 20).record_count == 40
    with pytest.raises(ValueError, match="at most 1000 bytes|limit 1000|more than 1000"):
        read_batch(view, 1000)


def test_a_batch_whose_part_was_written_under_a_new_stamp_says_so():
    # The replay counts a batch written under another stamp than its own as possibly
    # duplicated: a part re-stamped (its partition started over) re-stamps the batch.
    builder, view = sealed_batch(6)
    heard = []
    item = types.SimpleNamespace(topic="t", partition=0, record_count=6,
                                 on_done=lambda result, error: heard.append((result, error)),
                                 sequenced=types.SimpleNamespace(batch=builder))
    outcome = _SplitOutcome(item, 2)
    (one, one_view, _, _), (two, two_view, middle, _) = split_in_halves(view, 1 << 20)
    two.rewrite_producer_state(7, 4, 0)
    outcome.part_done(1, middle, two, two_view, ProduceResult("t", 0, 50, -1, 3, ()), None)
    assert heard == []
    outcome.part_done(0, 0, one, one_view, ProduceResult("t", 0, 40, -1, 3, ()), None)
    [(result, error)] = heard
    assert error is None
    assert result.parts == ((0, 40, -1, None), (3, 50, -1, None))
    assert (builder.producer_id, builder.producer_epoch) == (7, 4)
