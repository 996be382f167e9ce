"""The high-rate paths against a real broker: send_batch() and produce().

What they wrote is read back by the independent reader (netkafka.testing.reader,
librdkafka underneath) and compared byte for byte with what the test handed over,
and with what the batch result / flush() / metrics() reported.
"""
import contextlib
import os
import resource
import threading
import time
import tracemalloc
from array import array

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from netkafka import BatchSendResult, Producer, Serializer, UndeliveredRecordsError
from netkafka.errors import (KafkaTimeoutError, ProducerClosedError, RecordTooLargeError,
                             SerializationError)
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic


def producer(bootstrap, **options):
    options.setdefault("max_block_ms", 30000)
    return Producer(bootstrap_servers=bootstrap, **options)


def kafka_python_partition(key, num_partitions):
    # kafka-python's DefaultPartitioner: (murmur2(key) & 0x7fffffff) % n, pure Python.
    return (kafka_python_murmur2(key) & 0x7FFFFFFF) % num_partitions


# ----------------------------------------------------------------------------------
# produce(): fire and forget


def test_produce_delivers_50k_records_in_order(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    count = 50_000
    with producer(kafka_broker.bootstrap, linger_ms=5, batch_size=1 << 18) as p:
        for i in range(count):
            assert p.produce(topic_name, b"value-%d" % i, key=b"k%d" % (i % 10)) is None
        p.flush()
        metrics = p.metrics()["netkafka"]
    records = read_topic(kafka_broker.bootstrap, topic_name, count)
    assert [r.value for r in records] == [b"value-%d" % i for i in range(count)]
    assert [r.key for r in records] == [b"k%d" % (i % 10) for i in range(count)]
    assert [r.offset for r in records] == list(range(count))
    assert metrics["records_acknowledged"] == count
    assert metrics["records_untracked_failed"] == 0


def test_produce_failures_are_raised_by_flush_with_their_count(kafka_broker, topic_name):
    # The broker refuses batches above the topic's max.message.bytes: a delivery
    # failure, learnt after produce() returned.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1,
                 config={"max.message.bytes": "2000"})
    with producer(kafka_broker.bootstrap, max_block_ms=1000, retries=0) as p:
        p.produce(topic_name, b"good")
        p.flush()
        for _ in range(3):
            p.produce(topic_name, b"x" * 5000)
        # Refused before reaching a batch: no such partition.
        p.produce(topic_name, b"v", partition=7)
        with pytest.raises(UndeliveredRecordsError) as raised:
            p.flush()
        assert raised.value.failed_count == 4
        # One error per failure met: the broker's refusal failed the 3-record batch.
        messages = sorted(str(error) for error in raised.value.first_errors)
        assert len(messages) == 2
        assert any("MESSAGE_TOO_LARGE" in m for m in messages), messages
        assert any("no partition 7" in m for m in messages), messages
        assert "4 records sent with produce() failed" in str(raised.value)
        assert p.metrics()["netkafka"]["records_untracked_failed"] == 4
        # The count starts again: nothing failed since.
        p.produce(topic_name, b"good again")
        p.flush()
        assert p.metrics()["netkafka"]["records_untracked_failed"] == 4
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert [r.value for r in records] == [b"good", b"good again"]


def test_produce_raises_type_errors_at_once(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    with producer(kafka_broker.bootstrap) as p:
        with pytest.raises(TypeError, match="topic must be a str"):
            p.produce(b"topic", b"v")
        with pytest.raises(TypeError, match="partition must be an int"):
            p.produce(topic_name, b"v", partition="0")
        p.flush()
        assert p.metrics()["netkafka"]["records_untracked_failed"] == 0


@pytest.mark.parametrize("interceptors", [(), "tracing"])
def test_produce_raises_a_record_too_large_for_any_request_at_once(kafka_broker, topic_name,
                                                                   interceptors):
    # confluent-kafka's produce() raises MSG_SIZE_TOO_LARGE at once; netkafka's counted
    # the record and told of it only at the next flush(), far from the call.  A record
    # no request can carry can never be written, like a wrong type: raised, as send()
    # raises it.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    acknowledged = []
    chain = [] if not interceptors else [_Acknowledged(acknowledged)]
    with producer(kafka_broker.bootstrap, max_request_size=10_000, batch_size=4096,
                  interceptors=chain) as p:
        with pytest.raises(RecordTooLargeError, match=r"larger than max_request_size"):
            p.produce(topic_name, b"y" * 10_001)
        p.produce(topic_name, b"fits")
        p.flush()
        assert p.metrics()["netkafka"]["records_untracked_failed"] == 0
    if interceptors:
        assert [type(error) for error in acknowledged] == [RecordTooLargeError, type(None)]
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"fits"]


class _Acknowledged:
    """An interceptor keeping the error of every on_acknowledgement (None: success)."""

    def __init__(self, errors):
        self.errors = errors

    def on_send(self, record):
        return record

    def on_acknowledgement(self, metadata, error):
        self.errors.append(error)


# ----------------------------------------------------------------------------------
# send_batch()


def _check_read_back(bootstrap, topic, result, sent):
    """sent: per row (key, value, headers, timestamp_ms or None).  Every row is read
    back byte-exact at the partition and offset the result reports."""
    partitions, offsets = result.partitions(), result.offsets()
    records = read_topic(bootstrap, topic, len(sent))
    assert len(records) == len(sent)
    by_position = {(r.partition, r.offset): r for r in records}
    for row, (key, value, headers, timestamp_ms) in enumerate(sent):
        record = by_position[partitions[row], offsets[row]]
        assert (record.key, record.value, record.headers or []) == (key, value, headers or [])
        if timestamp_ms is not None:
            assert record.timestamp_ms == timestamp_ms
    return records


def test_send_batch_of_lists_round_trips_byte_exact(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    count = 5000
    now_ms = int(time.time() * 1000)
    values = [None if i % 11 == 0 else b"" if i % 13 == 0 else os.urandom(i % 200)
              for i in range(count)]
    keys = [None if i % 3 == 0 else b"key-%d" % i for i in range(count)]
    headers = [None if i % 2 else [("h", b"%d" % i), ("null", None)] for i in range(count)]
    timestamps = [None if i % 5 == 0 else now_ms - count + i for i in range(count)]
    with producer(kafka_broker.bootstrap, linger_ms=5) as p:
        result = p.send_batch(topic_name, values, keys=keys, headers=headers,
                              timestamps_ms=timestamps)
        assert isinstance(result, BatchSendResult)
        assert result.get(30) is result
        assert result.failed_count == 0 and result.errors == []
    _check_read_back(kafka_broker.bootstrap, topic_name, result,
                     list(zip(keys, values, headers, timestamps)))
    # Keyed rows are where kafka-python's murmur2 (and send()) puts them.
    partitions = result.partitions()
    for row, key in enumerate(keys):
        if key is not None:
            assert partitions[row] == kafka_python_partition(key, 3)


def test_send_batch_keyed_rows_land_where_send_puts_them(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=5)
    keys = [b"user-%d" % (i * 7919) for i in range(500)]
    with producer(kafka_broker.bootstrap) as p:
        result = p.send_batch(topic_name, [b"v"] * len(keys), keys=keys).get(30)
        by_send = [p.send(topic_name, b"v", key=key) for key in keys]
        p.flush()
        assert list(result.partitions()) == [f.get(0).partition for f in by_send]


def test_send_batch_explicit_partitions_and_one_partition_for_all(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    values = [b"row-%d" % i for i in range(3000)]
    chosen = [(i * 7) % 3 for i in range(3000)]
    with producer(kafka_broker.bootstrap) as p:
        spread = p.send_batch(topic_name, values, partitions=chosen).get(30)
        assert list(spread.partitions()) == chosen
        single = p.send_batch(topic_name, values[:100], partitions=2).get(30)
        assert list(single.partitions()) == [2] * 100
    records = read_topic(kafka_broker.bootstrap, topic_name, 3100)
    assert len(records) == 3100
    # Offsets from the results equal the consumed ones, each partition in row order.
    found = {(r.partition, r.offset): r.value for r in records}
    for result, rows in ((spread, values), (single, values[:100])):
        for partition, offset, value in zip(result.partitions(), result.offsets(), rows):
            assert found[partition, offset] == value
    for partition in range(3):
        in_partition = [r.value for r in records if r.partition == partition
                        and r.value in set(v for v, c in zip(values, chosen) if c == partition)]
        expected = [v for v, c in zip(values, chosen) if c == partition]
        assert in_partition[:len(expected)] == expected


def test_send_batch_takes_numpy_integers_in_lists_as_ints(kafka_broker, topic_name):
    # A list built from a numpy or pandas column holds numpy integers; they were
    # refused ("partitions[0] must be an int or None, not int64") where send() and
    # kafka-python take any integer with __index__.  A bool stays refused.
    np = pytest.importorskip("numpy")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    base_ms = 1_700_000_000_000
    values = [b"n%d" % i for i in range(6)]
    stamps = [np.int64(base_ms + i) for i in range(5)] + [None]
    chosen = [np.int32(2), np.uint8(0), 1, None, np.int64(1), np.int16(2)]
    with producer(kafka_broker.bootstrap) as p:
        result = p.send_batch(topic_name, values, partitions=chosen,
                              timestamps_ms=stamps).get(30)
        assert result.failed_count == 0, result.errors
        assert list(result.partitions())[:3] + list(result.partitions())[4:] == [2, 0, 1, 1, 2]
        # One partition for every row, as send(partition=np.int64(1)) takes it.
        single = p.send_batch(topic_name, [b"single"], partitions=np.int64(1)).get(30)
        assert list(single.partitions()) == [1] and single.failed_count == 0
        with pytest.raises(TypeError, match="partitions must be None, an int"):
            p.send_batch(topic_name, [b"x"], partitions=np.True_)
        # The refusal names every form taken (it left out array('i') and pyarrow's).
        with pytest.raises(TypeError, match=r"^partitions must be None, an int, a list or tuple "
                                            r"of int or None, an array\('i'\) \(-1: the "
                                            r"partitioner's choice\) or a pyarrow integer "
                                            r"column, not ndarray$"):
            p.send_batch(topic_name, [b"x"], partitions=np.array([1]))
        for bad in (np.True_, True, np.float64(1.0)):
            with pytest.raises(TypeError, match=r"partitions\[0\] must be an int or None"):
                p.send_batch(topic_name, [b"x"], partitions=[bad])
            refused = p.send_batch(topic_name, [b"x"], timestamps_ms=[bad]).get(30)
            assert refused.failed_count == 1
            assert "timestamps_ms[0] must be an int" in str(refused.errors[0][1])
    records = read_topic(kafka_broker.bootstrap, topic_name, len(values) + 1)
    by_value = {r.value: r for r in records}
    assert len(records) == len(values) + 1 and by_value[b"single"].partition == 1
    for row, value in enumerate(values):
        assert by_value[value].partition == result.partitions()[row]
        if stamps[row] is not None:
            assert by_value[value].timestamp_ms == int(stamps[row])


def test_send_batch_copies_a_list_item_that_user_code_replaces_meanwhile(kafka_broker,
                                                                         topic_name):
    # Python code may run between reading a row's value out of the caller's list and
    # copying it into the batch: a headers list subclass's __len__ here, pool code
    # waking a blocked thread (threading.Condition) when the batch grows.  That code
    # may replace the item, freeing the bytes the encoder pointed at; the batch then
    # held whatever reused that memory.  The row is sent as one of the values it had.
    # Row 1: the first row of a batch is appended by send()'s path, which holds it.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    size = 400  # small objects: CPython reuses the freed block for the next one
    letters = [ord("A")]  # keys[1] and values[1] are always one letter `size` times
    keys = [None, bytes(letters) * size, None]
    values = [b"first", bytes(letters) * size, b"next"]
    fillers = []

    class Replacing(list):
        def __len__(self):
            # The old key's and value's only references dropped, their memory
            # reused at once.
            letters.append(ord("B") + len(letters) % 20)
            keys[1] = bytes(letters[-1:]) * size
            values[1] = bytes(letters[-1:]) * size
            fillers.extend(b"\xee" * size for _ in range(4))
            return super().__len__()

    with producer(kafka_broker.bootstrap, linger_ms=5) as p:
        result = p.send_batch(topic_name, values, keys=keys, partitions=0,
                              headers=[None, Replacing([("h", b"1")]), None]).get(30)
        assert result.failed_count == 0, result.errors
    records = read_topic(kafka_broker.bootstrap, topic_name, 3)
    for sent in (records[1].key, records[1].value):
        assert sent[0] in letters and sent == sent[:1] * size, sent[:16]
    assert (records[0].value, records[2].value) == (b"first", b"next")


def test_send_batch_unkeyed_rows_are_sticky_per_batch(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    values = [b"x" * 100 for _ in range(20_000)]
    with producer(kafka_broker.bootstrap, batch_size=16384) as p:
        result = p.send_batch(topic_name, values).get(30)
    partitions = result.partitions()
    # Runs of one partition as long as a batch, then the next partition.
    switches = sum(1 for a, b in zip(partitions, partitions[1:]) if a != b)
    assert 1 <= switches <= len(values) // 100
    records = _check_read_back(kafka_broker.bootstrap, topic_name, result,
                               [(None, v, None, None) for v in values])
    assert len({r.partition for r in records}) > 1


@pytest.mark.parametrize("kind", ["binary", "string", "large_binary"])
def test_send_batch_of_pyarrow_columns(kafka_broker, topic_name, kind):
    pa = pytest.importorskip("pyarrow")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    count = 3000
    now_ms = int(time.time() * 1000)
    texts = [None if i % 17 == 0 else "" if i % 19 == 0 else "välue-%d" % i
             for i in range(count)]
    key_texts = [None if i % 4 == 0 else "k%d" % i for i in range(count)]
    arrow_type = getattr(pa, kind)()
    as_bytes = (lambda t: t if t is None else t.encode())
    if kind == "string":
        values, keys = pa.array(texts, arrow_type), pa.array(key_texts, arrow_type)
    else:
        values = pa.array([as_bytes(t) for t in texts], arrow_type)
        keys = pa.array([as_bytes(t) for t in key_texts], arrow_type)
    # A slice: the arrays' offset must be honoured.
    values, keys = values.slice(1), keys.slice(1)
    timestamps = array("q", [now_ms - count + i for i in range(count - 1)])
    with producer(kafka_broker.bootstrap, linger_ms=5) as p:
        result = p.send_batch(topic_name, values, keys=keys, timestamps_ms=timestamps).get(30)
        assert result.failed_count == 0
    sent = [(as_bytes(k), as_bytes(v), None, ts)
            for k, v, ts in zip(key_texts[1:], texts[1:], timestamps)]
    _check_read_back(kafka_broker.bootstrap, topic_name, result, sent)
    partitions = result.partitions()
    for row, (key, _, _, _) in enumerate(sent):
        if key is not None:
            assert partitions[row] == kafka_python_partition(key, 3)


def test_send_batch_fails_only_the_oversize_row(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    values = [b"good-%d" % i for i in range(300)]
    values[150] = b"x" * 200_000
    values[151] = 12345  # not bytes-like: only this row fails too
    with producer(kafka_broker.bootstrap, max_request_size=100_000) as p:
        result = p.send_batch(topic_name, values).get(30)
        assert result.failed_count == 2
        (row_a, error_a), (row_b, error_b) = result.errors
        assert (row_a, row_b) == (150, 151)
        assert isinstance(error_a, ValueError) and "max_request_size" in str(error_a)
        assert isinstance(error_b, TypeError) and "value" in str(error_b)
        assert result.offsets()[150] == -1 and result.partitions()[151] == -1
    good = [v for i, v in enumerate(values) if i not in (150, 151)]
    records = read_topic(kafka_broker.bootstrap, topic_name, len(good))
    assert [r.value for r in records] == good
    offsets = result.offsets()
    assert [offsets[i] for i in range(300) if i not in (150, 151)] == [
        r.offset for r in records]


def test_send_batch_bad_key_fails_only_its_row_on_a_topic_of_many_partitions(
        kafka_broker, topic_name):
    # With more than one partition every key is hashed before a row is appended, and
    # a key that could not be read raised out of send_batch(): the whole call
    # refused, where on a one-partition topic that row alone failed.
    from netkafka import BinaryColumn
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    values = [b"v%d" % i for i in range(5)]
    keys = [b"k0", 5, b"k2", "k3", b"k4"]
    # Key 1 has offsets 2..99, key 2 offsets 99..4: outside the 6 bytes of data.
    column_keys = BinaryColumn(b"c0c1c2", array("i", [0, 2, 99, 4, 6]))
    with producer(kafka_broker.bootstrap) as p:
        by_list = p.send_batch(topic_name, values, keys=keys).get(30)
        by_column = p.send_batch(topic_name, values[:4], keys=column_keys).get(30)
    assert [row for row, _ in by_list.errors] == [1, 3]
    errors = dict(by_list.errors)
    assert isinstance(errors[1], TypeError) and "not int" in str(errors[1])
    assert isinstance(errors[3], TypeError) and "not str" in str(errors[3])
    assert [row for row, _ in by_column.errors] == [1, 2]
    assert all(isinstance(error, ValueError) and "offsets" in str(error)
               for _, error in by_column.errors)
    sent = {b"v0": b"k0", b"v2": b"k2", b"v4": b"k4"}
    partitions = by_list.partitions()
    assert [partitions[row] for row in (0, 2, 4)] == [
        kafka_python_partition(sent[values[row]], 3) for row in (0, 2, 4)]
    records = read_topic(kafka_broker.bootstrap, topic_name, 5)
    assert sorted((r.value, r.key) for r in records) == sorted(
        list(sent.items()) + [(b"v0", b"c0"), (b"v3", b"c2")])


def test_send_batch_bad_key_fails_only_its_row_with_a_partitioner_of_the_callers(
        kafka_broker, topic_name):
    # The caller's partitioner was handed each row's key as it was (5, "k3") or, from
    # a column with bad offsets, the read raised: either way out of send_batch(), the
    # whole call refused, where the default partitioner's path fails that row alone.
    from netkafka import BinaryColumn
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    asked = []

    def by_last_byte(key, all_partitions, available):
        asked.append(key)
        return all_partitions[key[-1] % len(all_partitions)]

    values = [b"v%d" % i for i in range(5)]
    keys = [b"k0", 5, b"k2", "k3", b"k4"]
    # Key 1 has offsets 2..99, key 2 offsets 99..4: outside the 6 bytes of data.
    column_keys = BinaryColumn(b"c0c1c2", array("i", [0, 2, 99, 4, 6]))
    with producer(kafka_broker.bootstrap, partitioner=by_last_byte) as p:
        by_list = p.send_batch(topic_name, values, keys=keys).get(30)
        by_column = p.send_batch(topic_name, values[:4], keys=column_keys).get(30)
    assert asked == [b"k0", b"k2", b"k4", b"c0", b"c2"]  # never a bad key
    assert [row for row, _ in by_list.errors] == [1, 3]
    errors = dict(by_list.errors)
    assert isinstance(errors[1], TypeError) and "keys[1]" in str(errors[1])
    assert isinstance(errors[3], TypeError) and "keys[3]" in str(errors[3])
    assert [row for row, _ in by_column.errors] == [1, 2]
    assert all(isinstance(error, ValueError) and "offsets" in str(error)
               for _, error in by_column.errors)
    records = read_topic(kafka_broker.bootstrap, topic_name, 5)
    assert sorted((r.value, r.key, r.partition) for r in records) == sorted(
        (value, key, key[-1] % 3) for value, key in
        [(b"v0", b"k0"), (b"v2", b"k2"), (b"v4", b"k4"), (b"v0", b"c0"), (b"v3", b"c2")])


def test_send_batch_leaves_the_callers_partitions_array_as_it_was(kafka_broker, topic_name):
    # With a partitioner of the caller's, the rows it placed were written into the
    # caller's own array('i') of partitions: its -1s overwritten.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    given = array("i", [0, -1, 1, -1])
    with producer(kafka_broker.bootstrap,
                  partitioner=lambda key, all_partitions, available: all_partitions[-1]) as p:
        result = p.send_batch(topic_name, [b"a", b"b", b"c", b"d"], partitions=given).get(30)
    assert list(result.partitions()) == [0, 2, 1, 2]
    assert given == array("i", [0, -1, 1, -1])
    records = read_topic(kafka_broker.bootstrap, topic_name, 4)
    assert sorted((r.partition, r.value) for r in records) == [
        (0, b"a"), (1, b"c"), (2, b"b"), (2, b"d")]


def test_send_batch_bad_rows_fail_without_opening_a_batch_each(kafka_broker, topic_name):
    # A row refused as the first of a batch went the per-record way: a batch opened
    # for it (a buffer taken, batches_created counted) and discarded, row after row
    # -- some 65 us a row, a minute for a million str values not encoded.  It is
    # now checked before a batch is opened, and the error names the row.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    count = 2000
    values = ["text %d" % i for i in range(count)]  # str: not encoded
    values[1000] = b"the one good row"
    with producer(kafka_broker.bootstrap) as p:
        before = p.metrics()["netkafka"]["batches_created"]
        result = p.send_batch(topic_name, values).get(30)
        created = p.metrics()["netkafka"]["batches_created"] - before
    assert result.failed_count == count - 1
    assert created == 1
    row, error = result.errors[0]
    assert row == 0 and isinstance(error, TypeError)
    assert "values[0] must be bytes, bytearray, memoryview or None, not str" in str(error)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [
        b"the one good row"]


def test_send_batch_many_bad_rows_keep_little_memory(kafka_broker, topic_name):
    # Each refused row's error was kept with its traceback, whose frames held some
    # 2 KB per row and cost the garbage collector: 200,000 str values not encoded
    # took 7.5 s and 450 MB.  The errors are kept without them (each names its row).
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    count = 5000
    values = ["text %d" % i for i in range(count)]  # str: not encoded
    with producer(kafka_broker.bootstrap) as p:
        p.send_batch(topic_name, [b"warm-up"]).get(30)
        tracemalloc.start()
        try:
            result = p.send_batch(topic_name, values).get(30)
            kept_bytes, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.failed_count == count
    assert kept_bytes < 1000 * count, f"{kept_bytes / count:.0f} bytes per refused row"
    row, error = result.errors[-1]
    assert row == count - 1 and "values[4999] must be bytes" in str(error)


def test_send_batch_to_a_partition_that_does_not_exist_fails_those_rows(
        kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    with producer(kafka_broker.bootstrap, max_block_ms=1000) as p:
        result = p.send_batch(topic_name, [b"a", b"b", b"c", b"d"],
                              partitions=[0, 9, 1, 9]).get(30)
        assert result.failed_count == 2
        assert [row for row, _ in result.errors] == [1, 3]
        assert all("no partition 9" in str(error) for _, error in result.errors)
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert sorted(r.value for r in records) == [b"a", b"c"]


@contextlib.contextmanager
def _address_space_limited(extra_bytes):
    """The process may map at most extra_bytes more while inside: an allocation far
    larger fails with MemoryError instead of taking the machine's memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as status:
        mapped_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (mapped_kib * 1024 + extra_bytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_send_batch_to_a_huge_partition_id_fails_that_row_alone(kafka_broker, topic_name):
    # The rows were grouped by partition with a counter per partition id up to the
    # largest given: 8 GB of them for partition 10**9, and for 2**31 - 1 a count
    # that overflowed, then writes outside the counters (a segfault).  Such a row is
    # one the topic has no partition for, refused alone like partition 9 above.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    huge = 2**31 - 1
    with producer(kafka_broker.bootstrap, max_block_ms=1000) as p:
        p.send_batch(topic_name, [b"warm-up"], partitions=0).get(30)  # metadata known
        with _address_space_limited(1 << 30):
            result = p.send_batch(topic_name, [b"a", b"b", b"c", b"d", b"e"],
                                  partitions=[1, huge, 0, 10**9, huge])
        result.get(30)
        assert [row for row, _ in result.errors] == [1, 3, 4]
        errors = dict(result.errors)
        assert all(f"no partition {huge}" in str(errors[row]) for row in (1, 4))
        assert "no partition 1000000000" in str(errors[3])
        assert list(result.partitions()) == [1, -1, 0, -1, -1]
    records = read_topic(kafka_broker.bootstrap, topic_name, 3)
    assert sorted(r.value for r in records) == [b"a", b"c", b"warm-up"]


def test_send_batch_applies_serializers(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    with producer(kafka_broker.bootstrap, value_serializer=lambda v: v.encode(),
                  key_serializer=lambda k: None if k is None else b"K" + k.encode()) as p:
        p.send_batch(topic_name, ["a", "b"], keys=["x", None]).get(30)
        with pytest.raises(TypeError, match="with a serializer set, values must be a list"):
            p.send_batch(topic_name, iter(["a"]))
        # The failing row is named (nothing of the call is sent).
        with pytest.raises(SerializationError, match=r"^send_batch\(\) row 1: value_serializer "
                                                     r".* failed on a int "):
            p.send_batch(topic_name, ["c", 2, "d"])
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert [(r.key, r.value) for r in records] == [(b"Kx", b"a"), (None, b"b")]


class _TaggingSerializer(Serializer):
    """kafka-python 3's form: sees each row's headers, and adds one to them."""

    def __init__(self):
        self.seen = []

    def serialize(self, topic, headers, data):
        self.seen.append(list(headers))
        headers.append(("encoding", b"utf-8"))
        return data.encode()


def test_send_batch_serializers_with_headers_by_column(kafka_broker, topic_name):
    # With a serializer set, headers={name: column} were read as per-row lists: the
    # dict's keys taken for rows ("headers has 1 rows, values 2"), or, with as many
    # names as rows, each name's letters for a row's headers (every row refused).
    # The serializer sees each row's headers, as send() shows it the row's list.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    serializer = _TaggingSerializer()
    with producer(kafka_broker.bootstrap, value_serializer=serializer) as p:
        result = p.send_batch(topic_name, ["a", "b"],
                              headers={"trace": [b"t0", None], b"source": (b"s0", b"s1")})
        assert result.get(30).failed_count == 0, result.errors
        with pytest.raises(ValueError, match=r"headers\['trace'\] has 1 elements, values has 2"):
            p.send_batch(topic_name, ["a", "b"], headers={"trace": [b"t0"]})
        with pytest.raises(TypeError, match="headers keys must be str or bytes"):
            p.send_batch(topic_name, ["a", "b"], headers={3: [b"t0", b"t1"]})
    assert serializer.seen == [[("trace", b"t0"), (b"source", b"s0")],
                               [("trace", None), (b"source", b"s1")]]
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert [(r.value, r.headers) for r in records] == [
        (b"a", [("trace", b"t0"), ("source", b"s0"), ("encoding", b"utf-8")]),
        (b"b", [("trace", None), ("source", b"s1"), ("encoding", b"utf-8")])]


def test_send_batch_without_metadata_raises_whether_rows_are_keyed_or_not(kafka_broker,
                                                                         topic_name):
    # No metadata within max_block_ms: keyed rows raised KafkaTimeoutError (placing
    # them needs the partition count) while rows without a key, or all sent to one
    # partition, came back as a result with every row refused.  Now every way raises,
    # as send() does and as send_batch() documents.
    missing = f"{topic_name}-missing"
    with producer(kafka_broker.bootstrap, max_block_ms=500,
                  allow_auto_create_topics=False) as p:
        calls = {
            "keyed": lambda: p.send_batch(missing, [b"a", b"b"], keys=[b"k", b"l"]),
            "unkeyed": lambda: p.send_batch(missing, [b"a", b"b"]),
            "one partition": lambda: p.send_batch(missing, [b"a", b"b"], partitions=0),
            "per-row partitions": lambda: p.send_batch(missing, [b"a", b"b"],
                                                       partitions=[0, 1]),
        }
        for name, call in calls.items():
            with pytest.raises(KafkaTimeoutError, match=f"'{missing}'"):
                call()
        # The producer is not poisoned by them.
        create_topic(kafka_broker.bootstrap, topic_name)
        result = p.send_batch(topic_name, [b"fine"]).get(30)
        assert result.failed_count == 0
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"fine"]


def test_send_batch_of_nothing_is_done_at_once(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    with producer(kafka_broker.bootstrap) as p:
        result = p.send_batch(topic_name, [])
        assert result.done and result.failed_count == 0 and result.record_count == 0


def test_send_batch_of_nothing_after_close_raises_as_with_rows(kafka_broker, topic_name):
    # An empty call returned a done result from a closed producer, where a call with
    # rows raises: a loop sending chunks learnt of the close only at a full one.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    p = producer(kafka_broker.bootstrap)
    p.close()
    for values in ([b"a"], []):
        with pytest.raises(ProducerClosedError, match="closed"):
            p.send_batch(topic_name, values)


class _ClosingHeaders(list):
    """A row's headers that close the producer when the encoder first reads them:
    a close() from another thread, landing between two partitions' appends."""

    def __init__(self, producer, pairs):
        super().__init__(pairs)
        self.producer = producer

    def __len__(self):
        producer, self.producer = self.producer, None
        if producer is not None:
            producer.close()
        return super().__len__()


def test_send_batch_closed_midway_reports_the_rows_that_went(kafka_broker, topic_name):
    # A close() once some rows were appended made send_batch() raise
    # ProducerClosedError: those rows were delivered (close() flushes them), but
    # the caller, left without the result, could not know which.  Now the result
    # comes back with them, and the rows left fail with the close's error.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    p = producer(kafka_broker.bootstrap)
    headers = [None, None, _ClosingHeaders(p, [("h", b"v")]), None]
    result = p.send_batch(topic_name, [b"a", b"b", b"c", b"d"], headers=headers,
                          partitions=[0, 0, 1, 1])
    result.get(30)
    assert [row for row, _ in result.errors] == [2, 3]
    assert all(isinstance(error, ProducerClosedError) for _, error in result.errors)
    assert list(result.partitions()) == [0, 0, -1, -1]
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert [(r.partition, r.offset, r.value) for r in records] == [
        (0, result.offsets()[0], b"a"), (0, result.offsets()[1], b"b")]


def test_send_batch_bad_arguments_raise_naming_them(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    with producer(kafka_broker.bootstrap) as p:
        cases = [
            (dict(values=b"abc"), TypeError, "values must be a list or tuple"),
            (dict(values=type("Rows", (list,), {})([b"a"])), TypeError,
             "values must be a list or tuple"),
            (dict(values=[b"a"], keys=[b"k", b"l"]), ValueError,
             "keys has 2 elements, values has 1"),
            (dict(values=[b"a"], headers=[("h", b"v")] * 2), ValueError,
             "headers has 2 elements"),
            (dict(values=[b"a"], headers={"h": b"v"}), TypeError,
             r"headers\['h'\] must be a list or tuple of bytes-like or None, a BinaryColumn"),
            (dict(values=[b"a"], headers={"h": [b"v", b"w"]}), ValueError,
             r"headers\['h'\] has 2 elements, values has 1"),
            (dict(values=[b"a"], headers={3: [b"v"]}), TypeError,
             "headers keys must be str or bytes"),
            (dict(values=[b"a"], headers=iter([None])), TypeError,
             "headers must be None, a list or tuple"),
            (dict(values=[b"a"], timestamps_ms=[1, 2]), ValueError,
             "timestamps_ms has 2 elements"),
            (dict(values=[b"a", b"b"], partitions=[0, "1"]), TypeError,
             r"partitions\[1\] must be an int or None"),
            (dict(values=[b"a", b"b"], partitions=[0]), ValueError,
             "partitions has 1 elements, values has 2"),
            (dict(values=[b"a"], partitions=-1), ValueError, "partitions=-1 is negative"),
            (dict(values=[b"a"], keys=b"k"), TypeError, "keys must be a list or tuple"),
            (dict(values=[b"a"], timestamps_ms=b"12345678"), TypeError, "buffer of int64"),
        ]
        for kwargs, error, message in cases:
            with pytest.raises(error, match=message):
                p.send_batch(topic_name, **kwargs)
        with pytest.raises(TypeError, match="topic must be a str"):
            p.send_batch(None, [b"a"])
        p.flush()
    # Nothing was sent by any of them.
    assert read_topic(kafka_broker.bootstrap, topic_name, 0) == []


def test_send_batch_takes_timestamps_as_a_pyarrow_column(kafka_broker, topic_name):
    # A table's timestamp column (any unit, with or without a time zone: the values
    # are UTC) or an integer column of milliseconds, as the values' are taken:
    # they were refused ("must be a contiguous buffer"), and a numpy datetime64
    # array raised numpy's own "cannot include dtype 'M' in a buffer".
    pa = pytest.importorskip("pyarrow")
    np = pytest.importorskip("numpy")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    base_ms = 1_700_000_000_000
    count = 10
    stamps_ms = [base_ms + 1000 * i + i for i in range(count)]
    in_units = {"s": [ms // 1000 for ms in stamps_ms], "ms": stamps_ms,
                "us": [ms * 1000 + 999 for ms in stamps_ms],
                "ns": [ms * 1_000_000 + 999_999 for ms in stamps_ms]}
    columns = {
        "timestamp[us, tz]": pa.array(in_units["us"], pa.timestamp("us", "Europe/Paris")),
        "timestamp[ns]": pa.array(in_units["ns"], pa.timestamp("ns")),
        "timestamp[s]": pa.array(in_units["s"], pa.timestamp("s")),
        # Sliced: the column's offset into its buffer is honoured.
        "timestamp[ms] sliced": pa.array([0, 0] + stamps_ms, pa.timestamp("ms")).slice(2),
        "int64 chunked": pa.chunked_array([stamps_ms[:3], stamps_ms[3:]], pa.int64()),
    }
    expected = {"timestamp[s]": [ms // 1000 * 1000 for ms in stamps_ms]}
    values = pa.array([b"v%d" % i for i in range(count)])
    with producer(kafka_broker.bootstrap, linger_ms=5) as p:
        for name, column in columns.items():
            result = p.send_batch(topic_name, values,
                                  headers={"column": [name.encode()] * count},
                                  timestamps_ms=column).get(30)
            assert result.failed_count == 0, (name, result.errors)
        with pytest.raises(ValueError, match="timestamps_ms has 1 null"):
            p.send_batch(topic_name, values,
                         timestamps_ms=pa.array([None] + stamps_ms[1:], pa.timestamp("ms")))
        with pytest.raises(TypeError, match="timestamps_ms: a pyarrow array of string"):
            p.send_batch(topic_name, values, timestamps_ms=pa.array(["x"] * count))
        with pytest.raises(ValueError, match="timestamps_ms has 9 elements, values has 10"):
            p.send_batch(topic_name, values, timestamps_ms=columns["int64 chunked"][1:])
        with pytest.raises(TypeError, match="timestamps_ms must be a contiguous buffer"):
            p.send_batch(topic_name, values,
                         timestamps_ms=np.array(stamps_ms, dtype="datetime64[ms]"))
        with pytest.raises(ValueError, match="timestamps_ms: .*out of bounds"):
            p.send_batch(topic_name, values, timestamps_ms=pa.array(
                [2**62] * count, pa.timestamp("s")))
        with pytest.raises(TypeError, match=r"timestamps_ms must be a buffer of int64"):
            p.send_batch(topic_name, values, timestamps_ms=pa.py_buffer(bytes(8 * count)))
    records = read_topic(kafka_broker.bootstrap, topic_name, count * len(columns))
    for name in columns:
        got = [(r.value, r.timestamp_ms) for r in records if r.headers[0][1] == name.encode()]
        assert got == list(zip(values.to_pylist(), expected.get(name, stamps_ms))), name


@pytest.mark.parametrize("unit, per_ms", [("us", 1000), ("ns", 1_000_000)])
def test_send_batch_refuses_arrow_instants_just_before_the_epoch(kafka_broker, topic_name,
                                                                 unit, per_ms):
    # An instant less than 1 ms before the epoch, in a finer unit, was truncated
    # toward zero into timestamp 0 and sent, while one 1 ms before was refused as
    # negative.  Now both are floored to their millisecond and refused alike.
    pa = pytest.importorskip("pyarrow")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    base_ms = 1_700_000_000_000
    stamps = pa.array([-1, -per_ms, -per_ms - 1, base_ms * per_ms + per_ms - 1, 0],
                      pa.timestamp(unit))
    values = [b"just-before", b"one-ms-before", b"past-one-ms", b"after", b"epoch"]
    with producer(kafka_broker.bootstrap) as p:
        result = p.send_batch(topic_name, values, timestamps_ms=stamps).get(30)
    assert [(row, str(error)) for row, error in result.errors] == [
        (0, "timestamps_ms[0]=-1 is negative; timestamps are milliseconds since the epoch"),
        (1, "timestamps_ms[1]=-1 is negative; timestamps are milliseconds since the epoch"),
        (2, "timestamps_ms[2]=-2 is negative; timestamps are milliseconds since the epoch")]
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert [(r.value, r.timestamp_ms) for r in records] == [(b"after", base_ms),
                                                            (b"epoch", 0)]


@pytest.mark.parametrize("kind", ["string_view", "binary_view", "fixed_size_binary",
                                  "dictionary", "chunked_dictionary"])
def test_send_batch_of_other_pyarrow_binary_types(kafka_broker, topic_name, kind):
    # Binary-like columns other than the four read in place -- views (what Polars
    # and DuckDB can hand over), fixed-size, dictionary-encoded (a pandas
    # categorical, a Parquet dictionary column) -- were refused as "not a binary
    # column".  They are converted once and sent byte for byte, nulls and all.
    pa = pytest.importorskip("pyarrow")
    if kind.endswith("_view") and not hasattr(pa, kind):
        pytest.skip(f"pyarrow {pa.__version__} has no {kind}")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    count = 300
    width = 14  # above the 12 bytes a view keeps inline; shorter ones too but fixed-size

    def item(i, tag):
        if kind == "fixed_size_binary" or i % 2:
            return b"%s%0*d" % (tag, width - 1, i % 40)
        return b"%s%d" % (tag, i % 40)

    items = [None if i % 7 == 3 else item(i, b"v") for i in range(count)]
    key_items = [None if i % 5 == 0 else item(i, b"k") for i in range(count)]

    def column(rows):
        if kind == "fixed_size_binary":
            return pa.array(rows, pa.binary(width))
        if kind.endswith("_view"):
            return pa.array(rows, getattr(pa, kind)())
        encoded = pa.array(rows, pa.binary()).dictionary_encode()
        if kind == "dictionary":
            return encoded.slice(3)  # sliced: its offset into the indices honoured
        return pa.chunked_array([encoded.slice(3, 100), encoded.slice(103)])

    values, keys = column(items), column(key_items)
    sent = list(zip(key_items, items))[3 if kind.endswith("dictionary") else 0:]
    with producer(kafka_broker.bootstrap, linger_ms=5) as p:
        result = p.send_batch(topic_name, values, keys=keys,
                              headers={"h": column(items)}).get(30)
        assert result.failed_count == 0, result.errors[:3]
    _check_read_back(kafka_broker.bootstrap, topic_name, result,
                     [(k, v, [("h", v)], None) for k, v in sent])
    partitions = result.partitions()
    for row, (key, _) in enumerate(sent):
        if key is not None:
            assert partitions[row] == kafka_python_partition(key, 3)


def test_send_batch_takes_partitions_as_a_pyarrow_column(kafka_broker, topic_name):
    # A table's partition column was refused ("partitions must be None, an int, or a
    # list or tuple"): now any integer type, Array or ChunkedArray, sliced or not,
    # a null leaving the row to the partitioner as None does in a list.
    pa = pytest.importorskip("pyarrow")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    chosen = [2, None, 0, 1, None, 2, 7]  # 7: the topic has no such partition
    keys = [b"k%d" % i for i in range(len(chosen))]
    values = [b"v%d" % i for i in range(len(chosen))]
    columns = [pa.array([0] + chosen, pa.int64()).slice(1),
               pa.chunked_array([chosen[:3], chosen[3:]], pa.uint8())]
    expected = [kafka_python_partition(k, 3) if c is None else c for k, c in zip(keys, chosen)]
    expected[6] = -1
    with producer(kafka_broker.bootstrap, max_block_ms=1000) as p:
        for column in columns:
            result = p.send_batch(topic_name, values, keys=keys, partitions=column).get(30)
            assert list(result.partitions()) == expected
            assert [row for row, _ in result.errors] == [6]
            assert "no partition 7" in str(result.errors[0][1])
        with pytest.raises(ValueError, match=r"partitions\[1\]=-2 is negative"):
            p.send_batch(topic_name, values[:2], partitions=pa.array([0, -2]))
        with pytest.raises(ValueError, match="partitions: .*not a partition id"):
            p.send_batch(topic_name, values[:2], partitions=pa.array([0, 2**40]))
        with pytest.raises(TypeError, match="partitions: a pyarrow array of double"):
            p.send_batch(topic_name, values[:2], partitions=pa.array([0.0, 1.0]))
        with pytest.raises(ValueError, match="partitions has 2 elements, values has 7"):
            p.send_batch(topic_name, values, partitions=pa.array([0, 1]))
    records = read_topic(kafka_broker.bootstrap, topic_name, 12)
    got = sorted((r.partition, r.key, r.value) for r in records)
    want = sorted([(partition, key, value)
                   for key, value, partition in zip(keys, values, expected) if partition >= 0] * 2)
    assert got == want


def test_send_batch_pyarrow_bad_arguments(kafka_broker, topic_name):
    pa = pytest.importorskip("pyarrow")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    with producer(kafka_broker.bootstrap) as p:
        values = pa.array([b"a", b"b"])
        with pytest.raises(ValueError, match="keys has 1 elements, values has 2"):
            p.send_batch(topic_name, values, keys=pa.array([b"k"]))
        with pytest.raises(ValueError, match="keys has 3 elements, values has 2"):
            p.send_batch(topic_name, values, keys=pa.chunked_array([[b"k"], [b"l", b"m"]]))
        with pytest.raises(TypeError, match="buffer of int64"):
            p.send_batch(topic_name, values, timestamps_ms=array("i", [1, 2]))
        with pytest.raises(ValueError, match="timestamps_ms has 3 elements, values has 2"):
            p.send_batch(topic_name, values, timestamps_ms=array("q", [1, 2, 3]))
        with pytest.raises(TypeError, match="keys: a pyarrow array of int64 is not a binary column"):
            p.send_batch(topic_name, values, keys=pa.array([1, 2]))
        with pytest.raises(TypeError, match="values: a pyarrow array of int64 is not a binary column"):
            p.send_batch(topic_name, pa.array([1, 2]))
        with pytest.raises(TypeError, match="values: a pyarrow array of int64 is not a binary column"):
            p.send_batch(topic_name, pa.chunked_array([[1, 2]]))
        with pytest.raises(TypeError, match=r"headers\['h'\]: a pyarrow array of double"):
            p.send_batch(topic_name, values, headers={"h": pa.array([1.5, 2.5])})
        p.flush()
    assert read_topic(kafka_broker.bootstrap, topic_name, 0) == []


def test_send_batch_from_threads_beside_send(kafka_broker, topic_name):
    # Other threads append to the same partitions between and during the bulk runs:
    # every row's reported offset must still be its own.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    results, futures = {}, {}

    def bulk(thread):
        values = [b"b%d-%d" % (thread, i) for i in range(4000)]
        keys = [None if i % 2 else b"k%d" % (i % 50) for i in range(4000)]
        results[thread] = (values, p.send_batch(topic_name, values, keys=keys))

    def single(thread):
        futures[thread] = [(b"s%d-%d" % (thread, i),
                            p.send(topic_name, b"s%d-%d" % (thread, i)))
                           for i in range(2000)]

    with producer(kafka_broker.bootstrap, batch_size=4096, linger_ms=2) as p:
        threads = ([threading.Thread(target=bulk, args=(t,)) for t in range(3)]
                   + [threading.Thread(target=single, args=(t,)) for t in range(2)])
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        p.flush()
        expected = {}
        for values, result in results.values():
            assert result.get(30).failed_count == 0
            expected.update(zip(zip(result.partitions(), result.offsets()), values))
        for pairs in futures.values():
            for value, future in pairs:
                meta = future.get(0)
                expected[meta.partition, meta.offset] = value
    records = read_topic(kafka_broker.bootstrap, topic_name, 3 * 4000 + 2 * 2000)
    assert len(expected) == len(records) == 3 * 4000 + 2 * 2000
    assert {(r.partition, r.offset): r.value for r in records} == expected


# ----------------------------------------------------------------------------------
# send_batch(): row order within a partition, for any mix of rows


def _rows_in_partition_order(records):
    """{partition: [row index, ...] in offset order}: each value starts with its row."""
    by_partition = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        by_partition.setdefault(record.partition, []).append(int(record.value.split(b"|")[0]))
    return by_partition


@pytest.mark.parametrize("with_explicit", [False, True])
def test_send_batch_mixed_rows_follow_row_order_in_each_partition(kafka_broker, topic_name,
                                                                  with_explicit):
    # Keyed, unkeyed (sticky) and explicitly placed rows interleaved in one call,
    # small batches so the sticky partition moves many times: in every partition
    # the records must come in row order, as if each row had gone through send().
    create_topic(kafka_broker.bootstrap, topic_name, partitions=4)
    count = 30_000
    keys, placed = [], []
    for i in range(count):
        kind = i % 3 if with_explicit else i % 2
        keys.append(b"key-%d" % (i % 97) if kind == 0 else None if kind == 1 else b"ignored")
        placed.append((i // 3) % 4 if kind == 2 else None)
    values = [b"%d|" % i + b"v" * (i % 50) for i in range(count)]
    with producer(kafka_broker.bootstrap, batch_size=4096, linger_ms=5) as p:
        result = p.send_batch(topic_name, values, keys=keys,
                              partitions=placed if with_explicit else None).get(60)
        assert result.failed_count == 0
    records = _check_read_back(kafka_broker.bootstrap, topic_name, result,
                               [(k, v, None, None) for k, v in zip(keys, values)])
    for partition, rows in _rows_in_partition_order(records).items():
        assert rows == sorted(rows), f"partition {partition} is out of row order"
    partitions = result.partitions()
    for row in range(count):
        if placed[row] is not None:
            assert partitions[row] == placed[row]
        elif keys[row] is not None:
            assert partitions[row] == kafka_python_partition(keys[row], 4)
    # The unkeyed rows are sticky: long runs on one partition, more than one used.
    unkeyed = [partitions[row] for row in range(count)
               if keys[row] is None and placed[row] is None]
    switches = sum(1 for a, b in zip(unkeyed, unkeyed[1:]) if a != b)
    assert len(set(unkeyed)) > 1
    assert switches <= len(unkeyed) // 20


def test_send_batch_unkeyed_rows_continue_sends_sticky_partition(kafka_broker, topic_name):
    # The plan starts from what send() left: its sticky partition and that
    # partition's open batch; a send() after the call goes on where it stopped.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    with producer(kafka_broker.bootstrap, batch_size=1 << 16, linger_ms=200) as p:
        before = p.send(topic_name, b"0|before")
        keys = [None if i % 2 else b"k%d" % i for i in range(200)]
        values = [b"%d|mid" % (i + 1) for i in range(200)]
        result = p.send_batch(topic_name, values, keys=keys)
        after = p.send(topic_name, b"201|after")
        p.flush()
        sticky = {result.get(10).partitions()[i] for i in range(1, 200, 2)}
        assert sticky == {before.get(10).partition} == {after.get(10).partition}
    records = read_topic(kafka_broker.bootstrap, topic_name, 202)
    for rows in _rows_in_partition_order(records).values():
        assert rows == sorted(rows)


# ----------------------------------------------------------------------------------
# send_batch(): every input kind, byte-exact through the broker

INPUT_KINDS = ["list", "tuple", "binary_column", "binary", "large_binary", "string",
               "large_string", "chunked", "chunked_large_string"]


def _items(kind, count, salt):
    """Per row bytes or None: text for the string kinds, any bytes otherwise."""
    textual = "string" in kind
    items = []
    for i in range(count):
        if i % 11 == 3:
            items.append(None)
        elif i % 13 == 5:
            items.append(b"")
        elif textual:
            items.append(("%s-välue-%d" % (salt, i) * (1 + i % 4)).encode())
        else:
            items.append(os.urandom(1 + (i * 7 + len(salt)) % 90))
    return items


def _as_kind(kind, items):
    if kind == "list":
        return list(items)
    if kind == "tuple":
        return tuple(items)
    if kind == "binary_column":
        # Any buffers + offsets: here a bytearray, int64 offsets and a bitmap.
        from netkafka import BinaryColumn
        offsets, validity = array("q", [0]), bytearray((len(items) + 7) // 8)
        for i, item in enumerate(items):
            offsets.append(offsets[-1] + (0 if item is None else len(item)))
            if item is not None:
                validity[i // 8] |= 1 << (i % 8)
        return BinaryColumn(bytearray(b"".join(x for x in items if x is not None)), offsets,
                            validity)
    pa = pytest.importorskip("pyarrow")
    arrow_type = {"binary": pa.binary(), "large_binary": pa.large_binary(),
                  "string": pa.string(), "large_string": pa.large_string(),
                  "chunked": pa.binary(), "chunked_large_string": pa.large_string()}[kind]
    if "string" in kind:
        items = [None if x is None else x.decode() for x in items]
    if kind.startswith("chunked"):
        # Uneven chunks, one of them a slice (an offset into its buffers).
        cut_a, cut_b = len(items) // 3, len(items) // 3 + 7
        middle = pa.array(["pad"] * 5 + items[cut_a:cut_b], arrow_type).slice(5)
        return pa.chunked_array([pa.array(items[:cut_a], arrow_type), middle,
                                 pa.array(items[cut_b:], arrow_type)], arrow_type)
    return pa.array(items, arrow_type)


@pytest.mark.parametrize("kind", INPUT_KINDS)
def test_send_batch_input_kinds_round_trip_byte_exact(kafka_broker, topic_name, kind):
    # Values, keys and header values all of one kind, with nulls: a null value is a
    # tombstone, a null key an unkeyed (sticky) row, a null header value a header
    # with a null value.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    count = 2000
    now_ms = int(time.time() * 1000)
    values = _items(kind, count, "v")
    keys = [None if i % 3 == 0 else k for i, k in enumerate(_items(kind, count, "k"))]
    trace, source = _items(kind, count, "t"), _items(kind, count, "s")
    timestamps = array("q", [now_ms - count + i for i in range(count)])
    with producer(kafka_broker.bootstrap, batch_size=8192, linger_ms=5) as p:
        result = p.send_batch(topic_name, _as_kind(kind, values), keys=_as_kind(kind, keys),
                              headers={"trace": _as_kind(kind, trace),
                                       b"source": _as_kind(kind, source)},
                              timestamps_ms=timestamps).get(30)
        assert result.failed_count == 0, result.errors[:3]
    sent = [(k, v, [("trace", t), ("source", s)], ts)
            for k, v, t, s, ts in zip(keys, values, trace, source, timestamps)]
    records = _check_read_back(kafka_broker.bootstrap, topic_name, result, sent)
    partitions = result.partitions()
    for row, key in enumerate(keys):
        if key is not None:
            assert partitions[row] == kafka_python_partition(key, 3)
    # Row order in each partition, keyed and unkeyed rows mixed.
    row_of = {(partitions[row], result.offsets()[row]): row for row in range(count)}
    for partition in range(3):
        rows = [row_of[r.partition, r.offset] for r in sorted(records, key=lambda r: r.offset)
                if r.partition == partition]
        assert rows == sorted(rows)


def test_send_batch_mixed_kinds_and_per_row_headers_with_pyarrow_values(kafka_broker,
                                                                        topic_name):
    pa = pytest.importorskip("pyarrow")
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    count = 500
    values = [None if i % 9 == 0 else b"value-%d" % i for i in range(count)]
    keys = [None if i % 4 == 0 else b"key-%d" % i for i in range(count)]
    headers = [None if i % 5 == 0 else [("row", b"%d" % i), ("null", None)]
               for i in range(count)]
    timestamps = [None if i % 2 else 1_700_000_000_000 + i for i in range(count)]
    with producer(kafka_broker.bootstrap, linger_ms=5) as p:
        # pyarrow values, list keys, per-row header lists, list timestamps.
        result = p.send_batch(topic_name, pa.array(values, pa.binary()), keys=keys,
                              headers=headers, timestamps_ms=timestamps).get(30)
        assert result.failed_count == 0
    _check_read_back(kafka_broker.bootstrap, topic_name, result,
                     list(zip(keys, values, headers, timestamps)))


def test_send_batch_bad_column_element_fails_only_its_row(kafka_broker, topic_name):
    from netkafka import BinaryColumn
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    # Row 2's offsets point past the data; row 4's header value is not bytes.
    values = BinaryColumn(b"aabbccdd", array("i", [0, 2, 4, 99, 6, 8]))
    header_values = [b"h0", b"h1", b"h2", b"h3", "text", b"h5"][:5]
    with producer(kafka_broker.bootstrap) as p:
        result = p.send_batch(topic_name, values, headers={"h": header_values}).get(30)
        assert [row for row, _ in result.errors] == [2, 3, 4]
        errors = dict(result.errors)
        assert isinstance(errors[2], ValueError) and "values[2]: offsets 4..99" in str(errors[2])
        assert isinstance(errors[3], ValueError) and "values[3]: offsets 99..6" in str(errors[3])
        assert isinstance(errors[4], TypeError)
        assert "headers['h'][4] must be bytes or None, not str" in str(errors[4])
    records = read_topic(kafka_broker.bootstrap, topic_name, 2)
    assert [(r.value, r.headers) for r in records] == [(b"aa", [("h", b"h0")]),
                                                       (b"bb", [("h", b"h1")])]
