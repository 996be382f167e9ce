"""Flat as the work grows (issue 18, items 3 and 4): the client's CPU per record as the
partitions, the topics and the sending threads multiply.

Partitions (test_partitions): keyed 100 B records spread uniformly (murmur2 of KEYS_PER_
PARTITION distinct keys per partition, cycled) over one topic of 4, 100, 1,000 and 10,000
partitions, and over 1,000 topics of 4 partitions (the topic cycles record by record).
netkafka send() beside confluent-kafka (error-only delivery reports) and the Java producer
(send() with an error-only callback, bench/KeyedProducer.java in a JVM kept for every
round: peers.JavaKeyedProducer; Kafka's ProducerPerformance sends null keys to one topic,
so it can neither spread records by key nor over 1,000 topics), rounds alternated
(bench/rounds.py), every client with the suite's settings (peers.Settings: acks=1, no
compression, linger 5 ms, batch BATCH_SIZE, see below) and the same records in the same
order.  The Java producer's CPU is its JVM's over the round (/proc, 10 ms ticks), its
start-up and JIT warm-up left in the warm-up round.  A row also carries
client_ns_ratio_to_4: its client CPU per record over the same client's in the 4-partition
row of this session (the target: <= 2 at 10,000 partitions).

Creating the topics is timed (create_seconds in the rows: a 10,000-partition topic on the
single test broker takes tens of seconds).

Batch size: NETKAFKA_BENCH_SCALE_BATCH_SIZE (default peers.BATCH_SIZE, 1 MiB).  A batch
starts in a 16 KiB buffer and grows (the pool's size classes), so buffer_memory bounds
the bytes batches hold, not the open batches; until the measurement below marked "size
classes", every open batch took batch_size and buffer_memory / batch_size open batches
(32 at the defaults) was the limit.  NETKAFKA_BENCH_SCALE_BUFFER_MEMORY (bytes; default
netkafka's, 32 MiB) sets netkafka's buffer_memory.

Threads (test_threads): 1, 2, 4 and 8 threads calling send() on one producer ("shared")
against a producer per thread ("per_thread"); a round sends THREAD_RECORDS records in all
(split between the threads) to a 4-partition topic of its own, then flushes.  One
benchmark, its rounds alternated across all eight contestants: as a test per thread count
the later counts met a broker slowed by the earlier ones' data (its CPU per record 2-3x),
which read as msgs/s falling with threads.  The target: aggregate msgs/s does not fall as
threads are added, CPU per record within 1.5x of one thread.  Rounds of 400,000 records
took 0.1-0.3 s, too short for msgs/s to mean anything under load: 2,000,000 now.  The
measurements: README, "Batch memory as partitions grow".

Memory per idle partition (test_idle_partition_memory): one record to each of
IDLE_PARTITIONS partitions, then flush: tracemalloc's and the RSS's growth per partition
while each holds an open batch, and what stays once they have all drained and their
linger deadlines have passed, with the allocation sites of that.  Pool buffers (batch_size
each while a batch is open, counted against buffer_memory) are C memory that tracemalloc
does not see; the RSS does, coarsely.  Measured (1,000 partitions, batch_size 16 KiB):
1,650 B traced per partition with an open batch, 881 B once drained, of which 839 B is
the partition's queue (PartitionQueue and its empty collections.deque, 760 B); RSS
4.6 KB per partition after the drain, mostly the pool's cached free buffers (bounded
by buffer_memory).

Measured (2 shared cores, load 5-14, 2 rounds; client ns per record, ratio to 4
partitions in brackets; netkafka / confluent-kafka):

    1 MiB batches, default buffer_memory (32 MiB), 50,000 records a round:
      4 partitions        246 / 1,103
      100 partitions   48,016 (196x) / 1,760 (1.6x)    netkafka at 3,956 msgs/s
      1,000 partitions 51,624 (210x) / 4,821 (4.4x)
      1,000 topics x 4 73,052 (298x) / 20,615 (18.7x)
    size classes (batches start at 16 KiB and grow), 1 MiB batches, 32 MiB, 50,000
    records a round, load 15-20:
      4 partitions        261 / 1,196
      100 partitions    1,070 (4.1x) / 1,642 (1.4x)
      1,000 partitions  3,121 (12x) / 4,921 (4.1x)
      1,000 topics x 4 21,901 (84x) / 21,155 (17.7x)
    1 MiB batches, buffer_memory 2 GiB (2,048 batches), 100,000 records a round:
      4 partitions        231 / 1,104
      100 partitions      427 (1.9x) / 1,645 (1.5x)
      1,000 partitions  2,652 (11.5x) / 2,490 (2.3x)
      1,000 topics x 4 11,088 (48x) / 11,298 (10.2x)

10,000 partitions: the clients of a layout write to the same topics (rounds alternate
anyway), each checked by the end offsets its own warm-up and rounds added, so a broker
holds a layout's partitions once.  When each client had a topic of its own, 20,000
partitions outgrew the session broker's 512 MiB heap (344 s of 660 s in full
collections) and then, on a 2 GiB broker, this machine's 20,000 file descriptors ("Too
many open files" at 17,176 partitions; FDS_PER_PARTITION).  A layout of
BROKER_HEAP_PARTITIONS or more runs on a broker of its own with a heap sized for it
(big_broker; not warmed up: both clients meet the same cold broker, rounds alternated).
Measured (300,000 records a round, 3 rounds, load 2.6-4.9; client ns per record, ratio
to 4 partitions, msgs/s, broker ns per record; netkafka / confluent-kafka):

    first buffers of 16 KiB:
      4 partitions         203        /    895
      1,000 partitions   1,688 (8.3x) /  2,017 (2.3x)   358k / 263k msgs/s
      10,000 partitions 47,873 (236x) / 33,519 (37x)    3.8k / 7.7k msgs/s,
                                                        broker 213 / 103 us
    first buffers of 2 KiB (accumulator.FIRST_BUFFER_BYTES):
      4 partitions         189        /    890
      1,000 partitions   1,095 (5.8x) /  2,325 (2.6x)   608k / 234k msgs/s
      10,000 partitions 54,531 (288x) / 35,253 (40x)    3.4k / 4.7k msgs/s,
                                                        broker 179 / 119 us
      another session, load 2.1-2.6:
      4 partitions         184        /    849
      1,000 topics x 4   1,701 (9.2x) / 11,803 (13.9x)  412k / 75k msgs/s
    A/B, two sessions back to back, FIRST_BUFFER_BYTES set before the session (netkafka
    only; 16 KiB, load 2.0-3.6 / 2 KiB, load 2.1-3.1):
      4 partitions          189        /    204
      1,000 partitions    1,471 (7.8x) /  1,176 (5.8x)
      10,000 partitions  47,032 (249x) / 43,582 (214x)
      1,000 topics x 4    3,832 (20x)  /  1,214 (6.0x)   (rounds 0.80-1.17 s of CPU
                                                          against 0.32-0.43 s)

At 10,000 partitions a round gives each partition 30 records, and the broker (one JVM
holding 10,000 partitions, on the client's two cores) takes 100-200 us of CPU per
record: each batch went out with about one record (netkafka: 580,148 batches for
600,000 records with 16 KiB first buffers), so the cost per record is the cost per
batch on both sides.  With buffer_memory 2 GiB, 12.3 records per batch and 4.4-5.3 us
per record (bench-like script, 2 rounds): buffer memory, held by batches queued behind
a slow broker, is what limits the fill.

Before the size classes every open batch held a buffer of batch_size from the pool:
with more partitions receiving records than buffer_memory / batch_size, nearly every
record waited for a batch to be acknowledged (linger, then a round trip) before it got
a buffer.  Apart from that wait, at 1,000 partitions a batch holds about one record, so the cost per
record is netkafka's cost per batch (about 2.5 us, as confluent-kafka's).

    .venv/bin/python -m pytest bench/test_bench_scale.py --benchmark-only -k "partitions"

NETKAFKA_BENCH_SCALE_RECORDS (default 300,000) sets the records of a round,
NETKAFKA_BENCH_ROUNDS (default 3) the measured rounds.
"""
import contextlib
import gc
import os
import resource
import threading
import time
import tracemalloc

import pytest

import peers
import rounds
from netkafka import Producer

from netkafka.testing.admin import admin_client, create_topics
from netkafka.testing.broker import (
    BROKER_HEAP_PARTITIONS, BROKER_JVM_OPTIONS, Cluster, jvm_options_with_heap,
)

RECORD_SIZE = 100
RECORDS = int(os.environ.get("NETKAFKA_BENCH_SCALE_RECORDS", "300000"))
ROUNDS = int(os.environ.get("NETKAFKA_BENCH_ROUNDS", "3"))
BATCH_SIZE = int(os.environ.get("NETKAFKA_BENCH_SCALE_BATCH_SIZE", str(peers.BATCH_SIZE)))
BUFFER_MEMORY = os.environ.get("NETKAFKA_BENCH_SCALE_BUFFER_MEMORY")  # None: the default
KEYS_PER_PARTITION = 4
# (topics, partitions per topic): one topic growing, then many topics.
LAYOUTS = {"1x4": (1, 4), "1x100": (1, 100), "1x1000": (1, 1000), "1x10000": (1, 10_000),
           "1000x4": (1000, 4)}
BASE_LAYOUT = "1x4"
CREATE_TIMEOUT_S = 600.0  # a 10,000-partition topic on one broker
# File descriptors a broker needs per partition, with room: ~1.2 seen (the .log of each
# partition's active segment, plus the broker's own).
FDS_PER_PARTITION = 1.5
# Each partition's offset and time indexes are sparse files the broker maps and writes
# through (segment.index.bytes, 10 MiB by default).  A fault on one reads ahead up to the
# device's read_ahead_kb (8 MiB on this VM) of it, zeros: 10,000 partitions made some
# 160 GB of such pages, the page cache could not hold them, and the broker spent its time
# faulting them back in (perf: filemap_fault -> ext4_mpage_readpages; JFR: 97% of its
# samples in OffsetIndex.append / TimeIndex.maybeAppend), 100-210 us of CPU per record
# for every client, so that batches held 1-4 records.  With 64 KiB indexes: 3-8 us,
# netkafka at 132-163k msgs/s instead of 4.8-7.3k, batches of 9-11 records (netkafka alone on
# the row's records, two runs).  So a layout's topics get indexes that take
# INDEX_FILES_BYTES in all (at most Kafka's default, at least MIN_INDEX_BYTES), and the
# rows measure the clients, not this machine's readahead (README, "Batch memory as
# partitions grow").  A segment rolls when its index is full, at an entry per 4 KiB of
# log: 64 KiB hold ~32 MiB, more than a run writes to one of 10,000 partitions, and the
# layouts with few partitions keep Kafka's default, so no row's segments roll more often.
INDEX_FILES_BYTES = 1 << 30
KAFKA_INDEX_BYTES = 10 * 1024 * 1024  # segment.index.bytes' default
MIN_INDEX_BYTES = 64 * 1024
THREADS = (1, 2, 4, 8)
THREAD_RECORDS = int(os.environ.get("NETKAFKA_BENCH_SCALE_THREAD_RECORDS", "2000000"))
THREAD_PARTITIONS = 4
IDLE_PARTITIONS = 1000
IDLE_BATCH_SIZE = 16384  # the default batch_size: what an idle partition's batch holds
# Longer than sending a record to each partition takes on a loaded machine, so every
# partition holds an open batch when it is measured.
IDLE_LINGER_MS = 2000
TOP_SITES = 8  # allocation sites reported for what an idle partition keeps

# client -> its client_ns_per_record in this session's BASE_LAYOUT row.
_BASE_NS = {}


def keyed_records(topics, partitions):
    """[(topic, key, value)]: RECORDS records, keys spread over every partition of every
    topic (distinct keys hash uniformly under murmur2), topics cycled record by record."""
    keys = [b"key-%d" % i for i in range(partitions * KEYS_PER_PARTITION)]
    values = peers.payloads(RECORD_SIZE)
    return [(topics[i % len(topics)], keys[i % len(keys)], values[i % len(values)])
            for i in range(RECORDS)]


class NetkafkaKeyed(peers.NetkafkaRunner):
    """netkafka send() with (topic, key, value) records."""

    def __init__(self, bootstrap, settings):
        # peers passes further Producer keywords as `security`; here, buffer_memory.
        super().__init__(bootstrap, settings, security=None if BUFFER_MEMORY is None
                         else {"buffer_memory": int(BUFFER_MEMORY)})

    def send_all(self, topic, records):
        send = self._producer.send
        for topic, key, value in records:
            send(topic, value, key)


class ConfluentKeyed(peers.ConfluentRunner):
    """confluent-kafka produce() with (topic, key, value) records, as peers polls."""

    def send_all(self, topic, records):
        produce, poll = self._producer.produce, self._producer.poll
        for start in range(0, len(records), peers.POLL_EVERY):
            for topic, key, value in records[start:start + peers.POLL_EVERY]:
                while True:
                    try:
                        produce(topic, value, key)
                        break
                    except BufferError:  # its queue is full: serve reports, try again
                        poll(peers.QUEUE_FULL_POLL_S)
            poll(0)


CLIENTS = {"netkafka-send": NetkafkaKeyed, "confluent-kafka-error_only": ConfluentKeyed}
JAVA = "java"  # the third contestant of test_partitions: peers.JavaKeyedProducer


def _delete_topics(bootstrap, names):
    """Deletes those of names that exist (creating them may have failed part way)."""
    admin = admin_client(bootstrap)
    existing = set(admin.list_topics(timeout=60).topics).intersection(names)
    if not existing:
        return
    for future in admin.delete_topics(sorted(existing), operation_timeout=60).values():
        future.result()


def index_config(partitions):
    """The topic config giving a layout of that many partitions (in all its topics)
    indexes of INDEX_FILES_BYTES in all: two per partition, each between
    MIN_INDEX_BYTES and Kafka's default."""
    size = INDEX_FILES_BYTES // (2 * partitions)
    return {"segment.index.bytes": str(max(MIN_INDEX_BYTES, min(KAFKA_INDEX_BYTES, size)))}


def _create_topics(bootstrap, names, partitions, stack, config=None):
    """Creates the topics (testing.admin.create_topics; config: their topic config), to
    be deleted when stack closes (the broker is the bench session's: left over, their
    partitions would take the next layouts' file descriptors); returns the seconds that
    took."""
    started = time.perf_counter()
    stack.callback(_delete_topics, bootstrap, names)
    create_topics(bootstrap, names, partitions, config=config, timeout_s=CREATE_TIMEOUT_S)
    return time.perf_counter() - started


class SharedTopicsContestant(rounds.Contestant):
    """A contestant writing to topics the other clients write to as well: held counts the
    records its warm-up and rounds added to them (the topics' end offsets after each
    minus before it, read outside the measured run), so each client's stored records are
    checked as if the topics were its own."""

    def __init__(self, run, records, broker_pids, runner, bootstrap, topics, client_pids=()):
        super().__init__(run, records, broker_pids, runner, client_pids)
        self.held = 0
        self._bootstrap = bootstrap
        self._topics = topics

    def warm_up(self):
        self._counted(super().warm_up)

    def round(self):
        return self._counted(super().round)

    def _counted(self, run):
        before = peers.acknowledged_records(self._bootstrap, *self._topics)
        result = run()
        self.held += peers.acknowledged_records(self._bootstrap, *self._topics) - before
        return result


@pytest.fixture(scope="module")
def big_broker(tmp_path_factory):
    """A broker whose heap holds every layout's partitions (512 MiB per
    BROKER_HEAP_PARTITIONS, and as much again for headroom), and its pids."""
    most = max(t * p for t, p in LAYOUTS.values())
    heap_mib = 1024 * -(-most // BROKER_HEAP_PARTITIONS)
    with Cluster(1, directory=tmp_path_factory.mktemp("kafka-big-broker"),
                 jvm_options=jvm_options_with_heap(BROKER_JVM_OPTIONS, heap_mib)) as cluster:
        yield cluster, rounds.broker_pids(cluster)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_partitions(benchmark, request, topic_name, layout, tmp_path):
    """Every client writes to the same topics, rounds alternated: a broker holds a
    layout's partitions once, not once per client (10,000 partitions need ~12,000 file
    descriptors; two clients' 20,000 partitions were more than this machine's limit)."""
    topic_count, partitions = LAYOUTS[layout]
    total = topic_count * partitions
    fds_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]  # the broker inherits it
    if total * FDS_PER_PARTITION > fds_limit:
        pytest.skip(f"{total} partitions on one broker need more file descriptors than "
                    f"this machine's limit of {fds_limit}")
    # The session broker also holds the other tests' topics: a layout as large as its
    # heap's share gets a broker of its own.
    if total >= BROKER_HEAP_PARTITIONS:
        kafka_broker, broker_pids = request.getfixturevalue("big_broker")
    else:
        kafka_broker = request.getfixturevalue("kafka_broker")
        broker_pids = request.getfixturevalue("broker_pids")
    bootstrap = kafka_broker.bootstrap
    settings = peers.Settings(RECORD_SIZE, "1", batch_size=BATCH_SIZE)
    benchmark.group = f"scale: {topic_count} topics x {partitions} partitions"
    with contextlib.ExitStack() as stack:
        names = [f"{topic_name}-{t}" for t in range(topic_count)]
        create_seconds = _create_topics(bootstrap, names, partitions, stack,
                                        index_config(total))
        records = keyed_records(names, partitions)
        contestants = {}
        for name, runner_class in CLIENTS.items():
            runner = runner_class(bootstrap, settings)
            stack.callback(runner.close)
            contestants[name] = SharedTopicsContestant(
                lambda runner=runner: runner.run(None, records), RECORDS, broker_pids,
                runner, bootstrap, names)
        java = peers.JavaKeyedProducer(bootstrap, settings, names,
                                       partitions * KEYS_PER_PARTITION, RECORDS, tmp_path)
        stack.callback(java.close)
        contestants[JAVA] = SharedTopicsContestant(java.run, RECORDS, broker_pids, java,
                                                   bootstrap, names, client_pids=(java.pid,))
        measured = benchmark.pedantic(rounds.alternate, args=(contestants, ROUNDS), rounds=1,
                                      iterations=1)
        rows = []
        for name, client_rounds in measured.items():
            row = {"suite": "scale_partitions", "client": name, "topics": topic_count,
                   "partitions_per_topic": partitions, "batch_size": BATCH_SIZE,
                   "netkafka_buffer_memory": BUFFER_MEMORY,
                   "create_seconds": round(create_seconds, 2),
                   **rounds.summary(client_rounds)}
            if layout == BASE_LAYOUT:
                _BASE_NS[name] = row["client_ns_per_record"]
            if name in _BASE_NS:
                row["client_ns_ratio_to_4"] = round(row["client_ns_per_record"]
                                                    / _BASE_NS[name], 2)
            rows.append(row)
        benchmark.extra_info.update({"suite": "scale_partitions", "clients": rows})
        for name, contestant in contestants.items():
            resent = _resent_records(contestant.runner)
            assert (contestant.records_sent <= contestant.held
                    <= contestant.records_sent + resent), (
                f"{name} added {contestant.held} records to the topics, "
                f"{contestant.records_sent} were sent, {resent} resent; "
                f"{_retries(contestant.runner)}")


def _resent_records(runner):
    """The records a client sent again (0 when it does not say): acks=1 without
    idempotence is at-least-once, and a batch resent after its request went unanswered
    (request_timeout_ms, a lost connection) may be stored twice: a frozen broker shows
    it (tests/test_delivery.py), and two runs of the 1,000 topics x 4 row at load ~20
    stored 2,543 and 3,193 records more than the 150,000 sent, before this count was
    kept.  Every resend is counted (record-retry-total, the resent batches' records),
    so copies beyond those are a bug."""
    if not isinstance(runner, peers.NetkafkaRunner):
        return 0
    return runner._producer.metrics()["producer-metrics"]["record-retry-total"]


def _retries(runner):
    """netkafka's retry and error counters, for a failed count."""
    if not isinstance(runner, peers.NetkafkaRunner):
        return "no retry counters for this client"
    own = runner._producer.metrics()["netkafka"]
    return {key: value for key, value in own.items()
            if key.startswith(("sender_batches_retried", "sender_errors."))}


def _threaded_round(producers, topic, values):
    """Every thread sends its share of values through its producer, then each producer
    is flushed: a round ends when the broker has every record."""
    share = len(values) // len(producers)

    def send_share(producer):
        send = producer.send
        for value in values[:share]:
            send(topic, value)

    threads = [threading.Thread(target=send_share, args=(p,)) for p in producers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for producer in set(producers):
        producer.flush()


def test_threads(benchmark, kafka_broker, broker_pids, topic_name):
    """Every thread count in both modes, one benchmark, rounds alternated across all eight
    contestants: run as a test per thread count, the later counts met a broker slowed by
    the earlier ones' gigabytes (its CPU per record rose 2-3x from the first test to the
    last), and that read as msgs/s falling with threads."""
    bootstrap = kafka_broker.bootstrap
    benchmark.group = "scale: threads sending"
    values = peers.values_for(RECORD_SIZE, THREAD_RECORDS // max(THREADS) * max(THREADS))
    options = dict(bootstrap_servers=bootstrap, acks=1, batch_size=peers.BATCH_SIZE,
                   linger_ms=peers.LINGER_MS)
    with contextlib.ExitStack() as stack:
        # One producer for every "shared" contestant and max(THREADS) for the others:
        # each round flushes its producers, so a producer carries nothing between rounds.
        shared = stack.enter_context(Producer(**options))
        own = [stack.enter_context(Producer(**options)) for _ in range(max(THREADS))]
        contestants, topics = {}, {}
        for threads in THREADS:
            for mode in ("shared", "per_thread"):
                key = (mode, threads)
                topic = topics[key] = f"{topic_name}-{mode}-{threads}"
                _create_topics(bootstrap, [topic], THREAD_PARTITIONS, stack)
                producers = [shared] * threads if mode == "shared" else own[:threads]
                contestants[key] = rounds.Contestant(
                    lambda producers=producers, topic=topic: _threaded_round(producers, topic,
                                                                             values),
                    len(values), broker_pids)
        measured = benchmark.pedantic(rounds.alternate, args=(contestants, ROUNDS), rounds=1,
                                      iterations=1)
        rows = [{"suite": "scale_threads", "client": "netkafka-send", "mode": mode,
                 "threads": threads, **rounds.summary(client_rounds)}
                for (mode, threads), client_rounds in measured.items()]
        benchmark.extra_info.update({"suite": "scale_threads", "clients": rows})
        for key, contestant in contestants.items():
            assert peers.acknowledged_records(bootstrap, topics[key]) == contestant.records_sent


def _rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_idle_partition_memory(benchmark, kafka_broker, topic_name):
    """Bytes per partition: Python allocations (tracemalloc) and RSS after one record to
    each of IDLE_PARTITIONS partitions (each holds an open batch), and after flush (each
    drained; the pool keeps freed buffers for reuse, which RSS counts)."""
    bootstrap = kafka_broker.bootstrap
    with contextlib.ExitStack() as stack:
        _create_topics(bootstrap, [topic_name], IDLE_PARTITIONS, stack)
        producer = stack.enter_context(Producer(
            bootstrap_servers=bootstrap, acks=1, batch_size=IDLE_BATCH_SIZE,
            linger_ms=IDLE_LINGER_MS,
            buffer_memory=max(32 << 20, 2 * IDLE_PARTITIONS * IDLE_BATCH_SIZE)))
        producer.send(topic_name, b"warm-up", partition=0)  # metadata, connection
        producer.flush()
        value = b"v" * RECORD_SIZE
        figures = {}

        def measure():
            gc.collect()
            tracemalloc.start()
            rss_before = _rss_bytes()
            for partition in range(IDLE_PARTITIONS):
                producer.send(topic_name, value, partition=partition)
            gc.collect()
            figures["open_traced_bytes"] = tracemalloc.get_traced_memory()[0]
            figures["open_rss_bytes"] = _rss_bytes() - rss_before
            producer.flush()
            # The linger timer holds a flushed batch until its deadline: past it, what
            # stays is what an idle partition costs.
            time.sleep(2 * IDLE_LINGER_MS / 1000)
            gc.collect()
            figures["drained_traced_bytes"] = tracemalloc.get_traced_memory()[0]
            figures["drained_rss_bytes"] = _rss_bytes() - rss_before
            # Where what stays after the drain was allocated: the largest sites.
            figures["drained_top_sites"] = [
                f"{stat.traceback[0].filename.rsplit('/', 2)[-1]}:{stat.traceback[0].lineno} "
                f"{stat.size} B in {stat.count}"
                for stat in tracemalloc.take_snapshot().statistics("lineno")[:TOP_SITES]]
            tracemalloc.stop()

        benchmark.pedantic(measure, rounds=1, iterations=1)
        per_partition = {f"{key}_per_partition": round(number / IDLE_PARTITIONS, 1)
                         for key, number in figures.items() if key != "drained_top_sites"}
        benchmark.extra_info.update({"suite": "scale_idle_memory",
                                     "partitions": IDLE_PARTITIONS,
                                     "batch_size": IDLE_BATCH_SIZE, **figures, **per_partition})
        assert peers.acknowledged_records(bootstrap, topic_name) == IDLE_PARTITIONS + 1
