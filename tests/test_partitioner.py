"""Partitioners: murmur2 bit-identical to Java's, and the unkeyed strategies' contracts.

The oracles are independent of netkafka: kafka-python's pure-Python murmur2 and its
DefaultPartitioner (fed a real kafka-python ClusterMetadata), and the hash values
Apache Kafka's UtilsTest and librdkafka's rdmurmur2 unit test pin.
"""
import collections
import threading

import pytest
from confluent_kafka import Producer as ConfluentProducer
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.cluster import ClusterMetadata
from kafka.partitioner.default import DefaultPartitioner as KafkaPythonDefaultPartitioner
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kafka.protocol.metadata.metadata import MetadataResponse

from netkafka.producer import _partitioner
from netkafka.producer.partitioner import (
    BrokerAwarePartitioner,
    CallablePartitioner,
    DefaultPartitioner,
    Partitioner,
    RoundRobinPartitioner,
    default_partition,
    make_partitioner,
    murmur2,
)
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

# Apache Kafka, clients/.../common/utils/UtilsTest.testMurmur2: Java's signed results.
JAVA_UTILS_TEST_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka, src/rdmurmur2.c unittest_murmur2 (java_murmur2_results): the 32 bits.
LIBRDKAFKA_VECTORS = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x4A62B377,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0xE0E4E09E,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
    b"": 0x106E08D9,
}

PARTITION_COUNTS = [1, 2, 3, 6, 7, 16, 100, 1000]


def test_native_module_is_loaded():
    import importlib.machinery

    assert isinstance(_partitioner.__loader__, importlib.machinery.ExtensionFileLoader)
    assert murmur2 is _partitioner.murmur2


# ---------------------------------------------------------------------------- murmur2


@pytest.mark.parametrize("key, expected", sorted(JAVA_UTILS_TEST_VECTORS.items()))
def test_murmur2_matches_kafka_utils_test(key, expected):
    assert murmur2(key) == expected


@pytest.mark.parametrize("key, expected_bits", sorted(LIBRDKAFKA_VECTORS.items()))
def test_murmur2_matches_librdkafka_vectors(key, expected_bits):
    assert murmur2(key) & 0xFFFFFFFF == expected_bits


def test_murmur2_returns_java_signed_int():
    # Java returns an int: the 32 bits read as two's complement.
    for key in list(JAVA_UTILS_TEST_VECTORS) + list(LIBRDKAFKA_VECTORS):
        h = murmur2(key)
        assert -(2**31) <= h < 2**31
        assert h == kafka_python_murmur2(key) - (2**32 if kafka_python_murmur2(key) >= 2**31 else 0)


@given(st.binary(max_size=100))
@settings(max_examples=600)
def test_murmur2_equals_kafka_python_on_random_bytes(data):
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


@given(st.lists(st.integers(0x80, 0xFF), max_size=100).map(bytes))
@settings(max_examples=300)
def test_murmur2_equals_kafka_python_on_high_bytes(data):
    # Bytes >= 0x80 are negative Java bytes: Java masks them with 0xff, in the blocks
    # and in the tail, so they must count as unsigned here too.
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


@pytest.mark.parametrize("length", range(0, 101))
def test_murmur2_every_length_and_tail(length):
    # Every tail size (length % 4) at every length 0..100, with high tail bytes.
    data = bytes((0xFF - 7 * i) & 0xFF for i in range(length))
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_murmur2_tail_bytes_are_unsigned():
    # With sign extension a 0xff tail byte would flip bits 8..31 too; pin the
    # difference so a signed tail cannot pass.
    assert murmur2(b"\xff") & 0xFFFFFFFF == kafka_python_murmur2(b"\xff")
    assert murmur2(b"\xff") != murmur2(b"\x7f")
    assert murmur2(b"\x00\x00\x00\x00\xff\xfe\xfd") & 0xFFFFFFFF == kafka_python_murmur2(
        b"\x00\x00\x00\x00\xff\xfe\xfd")


@given(st.binary(max_size=64))
def test_murmur2_accepts_any_contiguous_buffer(data):
    expected = murmur2(data)
    assert murmur2(bytearray(data)) == expected
    assert murmur2(memoryview(data)) == expected
    # An unaligned slice of a larger buffer hashes like the same bytes alone.
    assert murmur2(memoryview(b"x" + data)[1:]) == expected


@pytest.mark.parametrize("bad", ["21", None, 21, [1, 2]])
def test_murmur2_rejects_non_bytes_naming_the_problem(bad):
    with pytest.raises(TypeError, match=f"key must be bytes-like.*{type(bad).__name__}"):
        murmur2(bad)


def test_murmur2_rejects_non_contiguous_buffer():
    with pytest.raises(BufferError):
        murmur2(memoryview(b"abcdef")[::2])


# ---------------------------------------------------------------- keyed placement


def kafka_python_cluster(topic, num_partitions, leaders=None):
    """A real kafka-python ClusterMetadata holding one topic, as a broker would describe it."""
    leaders = leaders or {p: 1 for p in range(num_partitions)}
    response_topic = MetadataResponse.MetadataResponseTopic
    response_partition = response_topic.MetadataResponsePartition
    version = 1
    brokers = sorted(set(leaders.values()))
    response = MetadataResponse(
        version=version,
        throttle_time_ms=0,
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=b, host="127.0.0.1", port=9092 + b, rack=None, version=version)
            for b in brokers
        ],
        controller_id=brokers[0],
        topics=[response_topic(
            version=version, error_code=0, name=topic, is_internal=False,
            partitions=[
                response_partition(
                    version=version, error_code=0, partition_index=p, leader_id=leaders[p],
                    replica_nodes=[leaders[p]], isr_nodes=[leaders[p]])
                for p in range(num_partitions)
            ])],
    )
    cluster = ClusterMetadata()
    cluster.update_metadata(response)
    assert cluster.partitions_for_topic(topic) == set(range(num_partitions))
    return cluster


CLUSTERS = {n: kafka_python_cluster("t", n) for n in PARTITION_COUNTS}


@pytest.mark.parametrize("num_partitions", PARTITION_COUNTS)
@given(key=st.binary(max_size=40))
@settings(max_examples=60)
def test_default_partition_equals_kafka_python_default_partitioner(num_partitions, key):
    cluster = CLUSTERS[num_partitions]
    expected = KafkaPythonDefaultPartitioner().partition("t", None, key, None, None, cluster)
    assert default_partition(key, num_partitions) == expected
    ours = DefaultPartitioner().partition("t", key, range(num_partitions), range(num_partitions))
    assert ours == expected


def test_default_partition_clears_the_sign_bit_not_abs():
    # murmur2(b"21") is negative; Java's toPositive masks the sign bit, which gives a
    # different partition than abs() would for 7 partitions.
    h = JAVA_UTILS_TEST_VECTORS[b"21"]
    assert (h & 0x7FFFFFFF) % 7 != abs(h) % 7
    assert default_partition(b"21", 7) == (h & 0x7FFFFFFF) % 7


@pytest.mark.parametrize("num_partitions", [0, -1, 2**31])
def test_default_partition_rejects_bad_partition_count(num_partitions):
    with pytest.raises(ValueError, match="num_partitions"):
        default_partition(b"k", num_partitions)


@pytest.mark.parametrize("make", [
    DefaultPartitioner,
    lambda: BrokerAwarePartitioner(lambda topic: {p: p % 2 for p in range(9)}),
])
def test_keyed_records_ignore_stickiness_and_availability(make):
    partitioner = make()
    for i in range(200):
        key = b"key-%d" % i
        # Java places keyed records on all partitions, available or not.
        assert partitioner.partition("t", key, range(9), [1]) == default_partition(key, 9)
        partitioner.on_new_batch("t", default_partition(key, 9))


@pytest.mark.parametrize("partitioner", [DefaultPartitioner(), RoundRobinPartitioner()])
def test_topic_without_partitions_is_a_clear_error(partitioner):
    with pytest.raises(ValueError, match="topic 'empty' has no partitions"):
        partitioner.partition("empty", None, [], [])


# ---------------------------------------------------------------- sticky (default)


def test_sticky_stays_until_new_batch_then_moves():
    partitioner = DefaultPartitioner()
    partitions = list(range(6))
    first = partitioner.partition("t", None, partitions, partitions)
    assert all(partitioner.partition("t", None, partitions, partitions) == first for _ in range(1000))
    partitioner.on_new_batch("t", first)
    second = partitioner.partition("t", None, partitions, partitions)
    assert second != first
    assert all(partitioner.partition("t", None, partitions, partitions) == second for _ in range(1000))


def test_sticky_ignores_stale_new_batch_of_another_partition():
    # Several threads may report the same full batch; only the first moves it.
    partitioner = DefaultPartitioner()
    partitions = list(range(6))
    current = partitioner.partition("t", None, partitions, partitions)
    partitioner.on_new_batch("t", (current + 1) % 6)
    partitioner.on_new_batch("other-topic", current)
    assert partitioner.partition("t", None, partitions, partitions) == current


def test_sticky_spreads_over_partitions_over_time():
    partitioner = DefaultPartitioner()
    partitions = list(range(6))
    counts = collections.Counter()
    previous = None
    for _ in range(600):
        p = partitioner.partition("t", None, partitions, partitions)
        assert p != previous
        counts[p] += 1
        partitioner.on_new_batch("t", p)
        previous = p
    assert set(counts) == set(partitions)
    # Uniform choice among the other 5 gives each ~100 batches; 40 is far in the tail.
    assert min(counts.values()) >= 40, counts


def test_sticky_prefers_available_partitions():
    partitioner = DefaultPartitioner()
    seen = set()
    for _ in range(200):
        p = partitioner.partition("t", None, range(8), [2, 5, 7])
        seen.add(p)
        partitioner.on_new_batch("t", p)
    assert seen == {2, 5, 7}


def test_sticky_with_one_available_partition_stays_there():
    partitioner = DefaultPartitioner()
    for _ in range(20):
        assert partitioner.partition("t", None, range(4), [3]) == 3
        partitioner.on_new_batch("t", 3)


def test_sticky_falls_back_to_all_partitions_when_none_available():
    partitioner = DefaultPartitioner()
    seen = set()
    for _ in range(200):
        p = partitioner.partition("t", None, range(4), [])
        seen.add(p)
        partitioner.on_new_batch("t", p)
    assert seen == {0, 1, 2, 3}


def test_sticky_state_is_per_topic():
    partitioner = DefaultPartitioner()
    a = partitioner.partition("a", None, range(50), range(50))
    b = partitioner.partition("b", None, range(50), range(50))
    partitioner.on_new_batch("a", a)
    assert partitioner.partition("b", None, range(50), range(50)) == b
    assert partitioner.partition("a", None, range(50), range(50)) != a


def test_sticky_repicks_when_topic_has_fewer_partitions():
    partitioner = DefaultPartitioner()
    sticky = partitioner.partition("t", None, range(1000), [999])
    assert sticky == 999
    # The topic was recreated with 3 partitions: 999 no longer exists.
    assert partitioner.partition("t", None, range(3), range(3)) in range(3)


# ---------------------------------------------------------------- round robin


def test_round_robin_cycles_over_available_partitions_ignoring_keys():
    partitioner = RoundRobinPartitioner()
    got = [partitioner.partition("t", b"same-key", range(6), [0, 2, 4]) for _ in range(9)]
    assert got == [0, 2, 4] * 3
    got = [partitioner.partition("u", None, range(3), []) for _ in range(7)]
    assert got == [0, 1, 2, 0, 1, 2, 0]


def test_round_robin_reissues_the_partition_given_back_on_new_batch():
    # The accumulator gives the partition back and asks again for the same record:
    # that record keeps its turn, so no partition is skipped (KAFKA-9965).
    partitioner = RoundRobinPartitioner()
    assert partitioner.partition("t", None, range(3), range(3)) == 0
    p = partitioner.partition("t", None, range(3), range(3))
    assert p == 1
    partitioner.on_new_batch("t", p)
    assert partitioner.partition("t", None, range(3), range(3)) == 1
    assert [partitioner.partition("t", None, range(3), range(3)) for _ in range(4)] == [2, 0, 1, 2]


# ---------------------------------------------------------------- custom callable


def test_callable_partitioner_result_is_used():
    seen = []

    def last_available(key_bytes, all_partitions, available_partitions):
        seen.append((key_bytes, list(all_partitions), list(available_partitions)))
        return available_partitions[-1]

    partitioner = make_partitioner(last_available)
    assert isinstance(partitioner, CallablePartitioner)
    assert partitioner.partition("t", b"k", [0, 1, 2], [0, 1]) == 1
    assert seen == [(b"k", [0, 1, 2], [0, 1])]


def test_callable_partitioner_accepts_index_types():
    class PartitionNumber:
        def __index__(self):
            return 2

    partitioner = CallablePartitioner(lambda key, all_p, avail: PartitionNumber())
    assert partitioner.partition("t", None, [0, 1, 2], [0, 1, 2]) == 2


@pytest.mark.parametrize("result", ["1", 1.0, None, True, [1]])
def test_callable_partitioner_non_int_result_names_the_partitioner(result):
    def my_partitioner(key_bytes, all_partitions, available_partitions):
        return result

    partitioner = CallablePartitioner(my_partitioner)
    with pytest.raises(TypeError, match=r"partitioner .*my_partitioner returned .* for topic 't'"):
        partitioner.partition("t", b"k", [0, 1, 2], [0, 1, 2])


@pytest.mark.parametrize("result", [3, -1, 1000])
def test_callable_partitioner_unknown_partition_names_the_partitioner(result):
    def my_partitioner(key_bytes, all_partitions, available_partitions):
        return result

    partitioner = CallablePartitioner(my_partitioner)
    with pytest.raises(ValueError, match=rf"my_partitioner returned partition {result} .*\[0, 1, 2\]"):
        partitioner.partition("t", b"k", [0, 1, 2], [0, 1, 2])


def test_callable_partitioner_exception_propagates():
    def broken(key_bytes, all_partitions, available_partitions):
        raise KeyError("no route")

    with pytest.raises(KeyError, match="no route"):
        CallablePartitioner(broken).partition("t", b"k", [0], [0])


def test_callable_partitioner_must_be_callable():
    with pytest.raises(TypeError, match="must be callable"):
        CallablePartitioner(42)


# ---------------------------------------------------------------- broker aware

# Partition -> leader broker: broker 1 leads 0, 2, 5; broker 2 leads 1, 4; broker 3 leads 3.
LEADERS = {0: 1, 1: 2, 2: 1, 3: 3, 4: 2, 5: 1}


def batches_of(partitioner, topic, count, records_per_batch, all_partitions, available):
    """The partition of each of `count` batches, after checking each batch kept to one."""
    order = []
    for _ in range(count):
        batch = {partitioner.partition(topic, None, all_partitions, available)
                 for _ in range(records_per_batch)}
        assert len(batch) == 1
        (p,) = batch
        order.append(p)
        partitioner.on_new_batch(topic, p)
    return order


def assert_follows_cycle(order, cycle):
    """Each batch's partition is the one after the previous batch's in `cycle`."""
    for previous, current in zip(order, order[1:]):
        assert current == cycle[(cycle.index(previous) + 1) % len(cycle)], (order, cycle)


def test_broker_aware_keeps_consecutive_batches_on_one_broker():
    partitioner = BrokerAwarePartitioner(lambda topic: LEADERS)
    order = batches_of(partitioner, "t", 18, 5, range(6), range(6))
    # From a random start, broker 1's partitions back to back, then broker 2's, then 3's.
    assert_follows_cycle(order, [0, 2, 5, 1, 4, 3])
    assert set(order) == set(range(6))


def test_broker_aware_skips_unavailable_partitions():
    partitioner = BrokerAwarePartitioner(lambda topic: LEADERS)
    order = batches_of(partitioner, "t", 10, 3, range(6), [0, 1, 3, 4, 5])
    assert_follows_cycle(order, [0, 5, 1, 4, 3])


def test_broker_aware_follows_leader_changes():
    leaders = dict(LEADERS)
    partitioner = BrokerAwarePartitioner(lambda topic: leaders)
    before = batches_of(partitioner, "t", 4, 3, range(6), range(6))
    leaders[5] = 2  # broker 2 takes over partition 5: it now runs with broker 2's
    after = batches_of(partitioner, "t", 12, 3, range(6), range(6))
    assert_follows_cycle(before[-1:] + after, [0, 2, 1, 4, 5, 3])


def test_broker_aware_groups_partitions_without_known_leader():
    partitioner = BrokerAwarePartitioner(lambda topic: {0: 7, 2: 7})
    order = batches_of(partitioner, "t", 8, 2, range(4), range(4))
    # Unknown leaders sort as broker -1, ahead of broker 7.
    assert_follows_cycle(order, [1, 3, 0, 2])


def test_broker_aware_requires_a_leader_source():
    with pytest.raises(TypeError, match="leaders_for"):
        BrokerAwarePartitioner({0: 1})
    with pytest.raises(ValueError, match="broker_aware.*leaders_for"):
        make_partitioner("broker_aware")


# ---------------------------------------------------------------- by name


@pytest.mark.parametrize("name, cls", [
    ("default", DefaultPartitioner),
    ("murmur2", DefaultPartitioner),
    ("round_robin", RoundRobinPartitioner),
])
def test_make_partitioner_by_name(name, cls):
    assert type(make_partitioner(name)) is cls


def test_make_partitioner_broker_aware_and_instances():
    assert type(make_partitioner("broker_aware", leaders_for=lambda t: {})) is BrokerAwarePartitioner
    instance = RoundRobinPartitioner()
    assert make_partitioner(instance) is instance
    assert type(make_partitioner()) is DefaultPartitioner


@pytest.mark.parametrize("bad", ["sticky", "Default", "", 42, None])
def test_make_partitioner_rejects_unknown_values(bad):
    with pytest.raises(ValueError, match="partitioner.*'default'.*'round_robin'"):
        make_partitioner(bad)


def test_partitioner_base_requires_partition():
    with pytest.raises(NotImplementedError):
        Partitioner().partition("t", None, [0], [0])


# ---------------------------------------------------------------- threads


THREADS = 8
CALLS_PER_THREAD = 4000


def run_threads(work):
    errors = []
    barrier = threading.Barrier(THREADS)

    def body(index):
        try:
            barrier.wait()
            work(index)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize("make", [
    DefaultPartitioner,
    lambda: BrokerAwarePartitioner(lambda topic: LEADERS),
])
def test_sticky_partitioners_from_eight_threads(make):
    partitioner = make()
    results = [[] for _ in range(THREADS)]

    def work(index):
        out = results[index]
        for i in range(CALLS_PER_THREAD):
            key = None if i % 3 else b"key-%d" % i
            p = partitioner.partition("t", key, range(6), range(6))
            out.append(p)
            if i % 50 == 0:
                partitioner.on_new_batch("t", p)

    run_threads(work)
    flat = [p for out in results for p in out]
    assert len(flat) == THREADS * CALLS_PER_THREAD
    assert set(flat) <= set(range(6))
    assert len(set(flat)) == 6


def test_round_robin_from_eight_threads_gives_every_partition_its_exact_share():
    # A lost or duplicated counter update under contention would unbalance this.
    partitioner = RoundRobinPartitioner()
    results = [collections.Counter() for _ in range(THREADS)]

    def work(index):
        for _ in range(CALLS_PER_THREAD):
            results[index][partitioner.partition("t", None, range(7), range(7))] += 1

    run_threads(work)
    total = sum(results, collections.Counter())
    assert sum(total.values()) == THREADS * CALLS_PER_THREAD
    assert max(total.values()) - min(total.values()) <= 1


def test_murmur2_from_eight_threads():
    keys = [b"key-%d" % i for i in range(500)]
    expected = [kafka_python_murmur2(k) for k in keys]

    def work(index):
        for _ in range(CALLS_PER_THREAD // 500):
            assert [murmur2(k) & 0xFFFFFFFF for k in keys] == expected

    run_threads(work)


# ---------------------------------------------------------------- against a broker

BROKER_TOPIC_PARTITIONS = 12


def test_keyed_records_land_where_default_partition_predicts(kafka_broker, topic_name):
    # librdkafka's 'murmur2_random' partitioner is the Java client's placement for keyed
    # records; the broker and an independent reader say where each record went.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=BROKER_TOPIC_PARTITIONS)
    keys = [b"user-%d" % i for i in range(300)]
    keys += [bytes((0xFF - 11 * i - n) & 0xFF for i in range(n)) for n in range(1, 41)]
    keys += list(JAVA_UTILS_TEST_VECTORS) + [k for k in LIBRDKAFKA_VECTORS if k]
    delivery_errors = []
    producer = ConfluentProducer({
        "bootstrap.servers": kafka_broker.bootstrap,
        "partitioner": "murmur2_random",
        "linger.ms": 5,
    })
    for index, key in enumerate(keys):
        producer.produce(topic_name, key=key, value=b"%d" % index,
                         on_delivery=lambda err, msg: err and delivery_errors.append(err))
    assert producer.flush(30) == 0
    assert delivery_errors == []

    records = read_topic(kafka_broker.bootstrap, topic_name, expected_count=len(keys))
    assert sorted(int(r.value) for r in records) == list(range(len(keys)))
    for record in records:
        assert record.key == keys[int(record.value)]
        assert record.partition == default_partition(record.key, BROKER_TOPIC_PARTITIONS), record
    assert {r.partition for r in records} == set(range(BROKER_TOPIC_PARTITIONS))
