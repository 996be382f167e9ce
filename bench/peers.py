"""The producers the end-to-end benchmarks compare, each driven as its users drive it.

A runner is made once per benchmark and then `run(topic, runner.prepare(values))` sends
every value and returns when every record is acknowledged (prepare() is the caller's
own work, outside the time: building what the client takes):

    netkafka        send() (a future per record, dropped), produce() (fire and forget),
                    send_batch() (one call with a list of all values), send_batch_arrow
                    (the same with a pyarrow binary array); then flush()
    confluent-kafka produce() with an error-only delivery report ("error_only") or with a
                    per-record on_delivery callback ("callback"); poll(0) every POLL_EVERY
                    records, poll() when its queue is full; then flush()
    kafka-python    send() per record, future dropped; then flush()
    aiokafka        await send() per record (it returns once the record is queued); then
                    await flush(), on an event loop of its own
    java            org.apache.kafka.tools.ProducerPerformance in a JVM of its own
                    (JavaProducerPerformance below): its own numbers, its own clock; for
                    keyed records over many topics and partitions, which that tool cannot
                    send, JavaKeyedProducer (bench/KeyedProducer.java, one JVM for every
                    round)

contestant() makes any of them a contestant of alternated rounds (bench/rounds.py).

Transactions (Settings.records_per_commit): netkafka and confluent-kafka open a
transaction, produce that many records and commit (the commit flushes), round after
round; each commit's wall time goes into the runner's commit_seconds.  The Java tool
commits by time only (--transaction-duration-ms, Settings.transaction_duration_ms),
so its benchmark sets the duration its expected rate fills with records_per_commit.

Every client gets the same Settings: batch size, linger, acks (idempotence on with
acks=all, off with acks=1, for every client), compression.  The values are PAYLOAD_POOL
distinct payloads of random ASCII letters, cycled; the Java tool reads the same payloads
from a file, so every client compresses the same bytes.

MB means 2**20 bytes of record value, as ProducerPerformance counts.
"""
import asyncio
import contextlib
import queue
import random
import re
import string
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, NamedTuple, Optional, Sequence

MiB = 1 << 20
BATCH_SIZE = MiB  # librdkafka's default batch.size, rounded to a power of two
LINGER_MS = 5  # librdkafka's and Java 4.x's default linger
PAYLOAD_POOL = 64
PAYLOAD_SEED = 20261126
POLL_EVERY = 10_000  # confluent-kafka: records between poll(0) calls
QUEUE_FULL_POLL_S = 0.001
JAVA_TIMEOUT_S = 600.0
WAIT_TIMEOUT_S = 600.0  # for every record of a run to be acknowledged
JAVA_HEAP = "-Xmx1g"


@dataclass(frozen=True)
class Settings:
    """What every client of one benchmark is configured with."""

    record_size: int
    acks: str = "1"  # "1" | "all"
    compression: str = "none"  # "none" | "lz4" | "zstd"
    batch_size: int = BATCH_SIZE
    linger_ms: int = LINGER_MS
    records_per_commit: Optional[int] = None  # transactions: commit after so many records
    transaction_duration_ms: Optional[int] = None  # the Java tool's commits: after so long
    # Records above the clients' 1 MiB limits: every client's request (librdkafka: message)
    # size limit, and the topic's max.message.bytes; None: the defaults.
    max_request_bytes: Optional[int] = None

    @property
    def idempotent(self) -> bool:
        return self.acks == "all"

    @property
    def python_acks(self):
        """acks as the Python clients take it (kafka-python's convention)."""
        return "all" if self.acks == "all" else int(self.acks)

    @property
    def python_compression(self):
        return None if self.compression == "none" else self.compression

    def request_limit(self, name: str) -> dict:
        """{name: max_request_bytes}, name being a client's own setting, or {} when the
        defaults hold."""
        return {} if self.max_request_bytes is None else {name: self.max_request_bytes}


def payloads(record_size: int, count: int = PAYLOAD_POOL) -> list[bytes]:
    """`count` distinct values of `record_size` random letters, the same on every call."""
    rng = random.Random(PAYLOAD_SEED + record_size)
    letters = string.ascii_letters.encode()
    return [bytes(rng.choices(letters, k=record_size)) for _ in range(count)]


def values_for(record_size: int, records: int) -> list[bytes]:
    """The values of one run: the payload pool cycled up to `records` entries."""
    pool = payloads(record_size)
    return [pool[i % len(pool)] for i in range(records)]


def write_properties_file(path: Path, properties: Mapping[str, str]) -> Path:
    """properties as a Java .properties file (a client.properties), its values escaped as
    java.util.Properties reads them back (a JAAS line holds '=' and quotes)."""
    def escaped(text: str) -> str:
        return (text.replace("\\", "\\\\").replace("\n", "\\n")
                .replace("=", "\\=").replace(":", "\\:"))
    path.write_text("".join(f"{escaped(key)}={escaped(value)}\n"
                            for key, value in properties.items()))
    return path


def write_payload_file(path: Path, record_size: int) -> Path:
    """The payload pool as ProducerPerformance's --payload-file: one value per line."""
    path.write_bytes(b"\n".join(payloads(record_size)))
    return path


def mb_per_s(msgs_per_s: float, record_size: int) -> float:
    return msgs_per_s * record_size / MiB


# -- Python clients ----------------------------------------------------------------------------


class _Runner:
    """send_all() queues every value; wait_all() returns once each is acknowledged (and
    raises if one failed).  The memory probe looks at the process between the two.  A
    transactional runner (records_per_commit) sends and commits transaction by
    transaction instead (run_transactions), timing each commit."""

    records_per_commit = None  # a transactional runner's Settings.records_per_commit
    commit_seconds = ()  # a transactional runner's: each commit's wall time, in order

    def prepare(self, values):
        return values

    def run(self, topic: str, values) -> None:
        if self.records_per_commit is not None:
            self.run_transactions(topic, values)
            return
        self.send_all(topic, values)
        self.wait_all()

    def run_transactions(self, topic: str, values) -> None:
        step = self.records_per_commit
        for start in range(0, len(values), step):
            self.begin_transaction()
            self.send_all(topic, values[start:start + step])
            started = time.perf_counter()
            self.commit_transaction()
            self.commit_seconds.append(time.perf_counter() - started)


class NetkafkaRunner(_Runner):
    """netkafka's Producer; mode "send", "produce", "send_batch" or "send_batch_arrow";
    security: further Producer keywords (TLS, SASL)."""

    MODES = ("send", "produce", "send_batch", "send_batch_arrow")

    def __init__(self, bootstrap: str, settings: Settings, mode: str = "send",
                 security: Optional[Mapping] = None):
        from netkafka import Producer

        if mode not in self.MODES:
            raise ValueError(f"netkafka mode must be one of {self.MODES}, got {mode!r}")
        self.mode = mode
        self._batch_result = None  # send_batch()'s, until wait_all() checks it
        transactional = {}
        if settings.records_per_commit is not None:
            self.records_per_commit, self.commit_seconds = settings.records_per_commit, []
            transactional["transactional_id"] = f"bench-netkafka-{random.getrandbits(32):x}"
        self._producer = Producer(
            bootstrap_servers=bootstrap, acks=settings.python_acks,
            compression_type=settings.python_compression,
            batch_size=settings.batch_size, linger_ms=settings.linger_ms,
            **settings.request_limit("max_request_size"), **(security or {}), **transactional)
        if transactional:
            self._producer.init_transactions()
            self.begin_transaction = self._producer.begin_transaction
            self.commit_transaction = self._producer.commit_transaction

    def prepare(self, values):
        if self.mode != "send_batch_arrow":
            return values
        import pyarrow
        return pyarrow.array(values, pyarrow.binary())

    def send_all(self, topic: str, values) -> None:
        if self.mode.startswith("send_batch"):
            self._batch_result = self._producer.send_batch(topic, values)
            return
        send = getattr(self._producer, self.mode)
        for value in values:
            send(topic, value)

    def wait_all(self) -> None:
        self._producer.flush()  # raises if a produce() record failed
        if self._batch_result is not None:
            outcome, self._batch_result = self._batch_result.get(0), None
            if outcome.failed_count:
                raise RuntimeError(f"netkafka send_batch: {outcome.failed_count} records "
                                   f"failed, first {outcome.errors[:3]}")

    def close(self) -> None:
        self._producer.close()


class ConfluentRunner(_Runner):
    """confluent-kafka's Producer; mode "error_only" or "callback"; security: further
    settings (TLS, SASL), librdkafka's names."""

    MODES = ("error_only", "callback")

    def __init__(self, bootstrap: str, settings: Settings, mode: str = "error_only",
                 security: Optional[Mapping] = None):
        from confluent_kafka import Producer

        if mode not in self.MODES:
            raise ValueError(f"confluent-kafka mode must be one of {self.MODES}, got {mode!r}")
        self.mode = mode
        self.errors = []  # appended to by delivery reports, served on this thread by poll()
        config = {
            "bootstrap.servers": bootstrap, "acks": settings.acks,
            "enable.idempotence": settings.idempotent,
            "compression.type": settings.compression,
            "batch.size": settings.batch_size, "linger.ms": settings.linger_ms,
            **settings.request_limit("message.max.bytes"), **(security or {}),
        }
        if mode == "error_only":
            config["on_delivery"] = self._on_delivery
            config["delivery.report.only.error"] = True
        if settings.records_per_commit is not None:
            self.records_per_commit, self.commit_seconds = settings.records_per_commit, []
            config["transactional.id"] = f"bench-confluent-{random.getrandbits(32):x}"
        self._producer = Producer(config)
        if settings.records_per_commit is not None:
            self._producer.init_transactions(WAIT_TIMEOUT_S)
            self.begin_transaction = self._producer.begin_transaction

    def commit_transaction(self) -> None:
        """Flushes and commits (confluent-kafka's commit_transaction() flushes too)."""
        self._producer.commit_transaction(WAIT_TIMEOUT_S)
        if self.errors:
            raise RuntimeError(f"confluent-kafka: {len(self.errors)} records failed, "
                               f"first {self.errors[:3]}")

    def _on_delivery(self, error, message) -> None:
        if error is not None:
            self.errors.append(error)

    def send_all(self, topic: str, values) -> None:
        produce, poll = self._producer.produce, self._producer.poll
        options = {"on_delivery": self._on_delivery} if self.mode == "callback" else {}
        for start in range(0, len(values), POLL_EVERY):
            for value in values[start:start + POLL_EVERY]:
                while True:
                    try:
                        produce(topic, value, **options)
                        break
                    except BufferError:  # its queue is full: serve reports, try again
                        poll(QUEUE_FULL_POLL_S)
            poll(0)

    def wait_all(self) -> None:
        left = self._producer.flush(WAIT_TIMEOUT_S)
        if left or self.errors:
            raise RuntimeError(f"confluent-kafka: {left} records left unflushed, "
                               f"{len(self.errors)} failed, first {self.errors[:3]}")

    def close(self) -> None:
        self._producer.flush(WAIT_TIMEOUT_S)


class KafkaPythonRunner(_Runner):
    """kafka-python's KafkaProducer, send() per record."""

    MODES = ("send",)

    def __init__(self, bootstrap: str, settings: Settings, mode: str = "send"):
        from kafka import KafkaProducer

        self.mode = mode
        self._producer = KafkaProducer(
            bootstrap_servers=bootstrap, acks=settings.python_acks,
            enable_idempotence=settings.idempotent,
            compression_type=settings.python_compression,
            batch_size=settings.batch_size, linger_ms=settings.linger_ms,
            **settings.request_limit("max_request_size"))

    def send_all(self, topic: str, values) -> None:
        send = self._producer.send
        for value in values:
            send(topic, value)

    def wait_all(self) -> None:
        self._producer.flush(WAIT_TIMEOUT_S)

    def close(self) -> None:
        self._producer.close()


class AiokafkaRunner(_Runner):
    """aiokafka's AIOKafkaProducer on an event loop the runner owns."""

    MODES = ("send",)

    def __init__(self, bootstrap: str, settings: Settings, mode: str = "send"):
        from aiokafka import AIOKafkaProducer

        self.mode = mode
        self._loop = asyncio.new_event_loop()

        async def started():  # aiokafka binds a producer to the loop running its __init__
            producer = AIOKafkaProducer(
                bootstrap_servers=bootstrap, acks=settings.python_acks,
                enable_idempotence=settings.idempotent,
                compression_type=settings.python_compression,
                max_batch_size=settings.batch_size, linger_ms=settings.linger_ms,
                **settings.request_limit("max_request_size"))
            await producer.start()
            return producer

        self._producer = self._loop.run_until_complete(started())

    async def _send_all(self, topic: str, values) -> None:
        send = self._producer.send
        for value in values:
            await send(topic, value)

    def send_all(self, topic: str, values) -> None:
        self._loop.run_until_complete(self._send_all(topic, values))

    def wait_all(self) -> None:
        self._loop.run_until_complete(self._producer.flush())

    def close(self) -> None:
        self._loop.run_until_complete(self._producer.stop())
        self._loop.close()


PYTHON_CLIENTS = {
    "netkafka": NetkafkaRunner,
    "confluent-kafka": ConfluentRunner,
    "kafka-python": KafkaPythonRunner,
    "aiokafka": AiokafkaRunner,
}


# -- the Java producer -------------------------------------------------------------------------


class PerfSummary(NamedTuple):
    """One summary line of ProducerPerformance (the whole run, or its steady state)."""

    records: int
    records_per_s: float
    mb_per_s: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    steady_state: bool


# "1000 steady state records sent, 3.5 records/sec (0.01 MB/sec), 1.2 ms avg latency, 9.00 ms
# max latency, 1 ms 50th, 2 ms 95th, 3 ms 99th, 4 ms 99.9th."  Progress lines every few
# seconds lack the percentiles, so they do not match.
_SUMMARY = re.compile(
    r"^(?P<records>\d+) (?P<steady>steady state )?records sent, "
    r"(?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>[\d.]+) ms 50th, (?P<p95>[\d.]+) ms 95th, (?P<p99>[\d.]+) ms 99th, "
    r"(?P<p999>[\d.]+) ms 99\.9th\.$")


def parse_producer_performance(output: str) -> PerfSummary:
    """The steady-state summary of ProducerPerformance's output if it printed one (run with
    --warmup-records), else its whole-run summary.

    Raises:
        ValueError: no summary line in the output (quoted in the message).
    """
    summaries = []
    for line in output.splitlines():
        match = _SUMMARY.match(line.strip())
        if match:
            summaries.append(PerfSummary(
                int(match["records"]), float(match["rate"]), float(match["mb"]),
                float(match["avg"]), float(match["max"]), float(match["p50"]),
                float(match["p95"]), float(match["p99"]), float(match["p999"]),
                match["steady"] is not None))
    if not summaries:
        raise ValueError(f"no ProducerPerformance summary line in its output:\n{output[-2000:]}")
    steady = [s for s in summaries if s.steady_state]
    return (steady or summaries)[-1]


def java_producer_settings(settings: Settings) -> list[str]:
    """The Java producer's name=value settings for settings."""
    s = settings
    return [f"acks={s.acks}", f"enable.idempotence={str(s.idempotent).lower()}",
            f"compression.type={s.compression}", f"batch.size={s.batch_size}",
            f"linger.ms={s.linger_ms}",
            *(f"{name}={value}" for name, value in s.request_limit("max.request.size").items())]


class JavaProducerPerformance:
    """Runs Kafka's ProducerPerformance (kafka-tools, from the jars `make kafka` fetched)."""

    def __init__(self, bootstrap: str, settings: Settings, payload_file: Path,
                 producer_config: Optional[Path] = None):
        """producer_config: a Java properties file of further producer settings (TLS,
        SASL), passed as --command-config (4.x's name of --producer.config), as users pass
        their client.properties."""
        from netkafka.testing.broker import java_executable, kafka_libs_dir

        self.settings = settings
        self._bootstrap = bootstrap
        self._payload_file = payload_file
        self._producer_config = producer_config
        self._java = java_executable()
        self._classpath = f"{kafka_libs_dir()}/*"

    def command(self, topic: str, records: int, warmup_records: int,
                throughput: int = -1) -> list[str]:
        s = self.settings
        return [
            self._java, JAVA_HEAP, "-cp", self._classpath,
            "org.apache.kafka.tools.ProducerPerformance",
            "--bootstrap-server", self._bootstrap, "--topic", topic,
            "--num-records", str(records + warmup_records),
            "--warmup-records", str(warmup_records),
            "--payload-file", str(self._payload_file), "--throughput", str(throughput),
            "--command-property", *java_producer_settings(s),
        ] + ([] if s.transaction_duration_ms is None
             else ["--transaction-duration-ms", str(s.transaction_duration_ms)]) + (
            [] if self._producer_config is None
            else ["--command-config", str(self._producer_config)])

    def run(self, topic: str, records: int, warmup_records: int,
            throughput: int = -1) -> PerfSummary:
        done = subprocess.run(self.command(topic, records, warmup_records, throughput),
                              capture_output=True, text=True, timeout=JAVA_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"ProducerPerformance exited with {done.returncode}:\n"
                               f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        return parse_producer_performance(done.stdout)


class JavaKeyedProducer:
    """The Java producer sending keyed records over topics (bench/KeyedProducer.java, run
    by java's source-file mode) in a JVM kept for every round, so that a round's CPU is the
    records' alone (pid: the JVM, for rounds.Contestant's client_pids).  Record i goes to
    topics[i % len(topics)] with key b"key-%d" % (i % key_count) and the payload pool's
    value i % PAYLOAD_POOL, as the suite's Python clients send them.  run() sends `records`
    records and returns once the producer's flush() has every one acknowledged.

    Raises (run):
        RuntimeError: records failed (the count and the first error), or the JVM answered
            nothing within JAVA_TIMEOUT_S or ended (its last lines of output quoted).
    """

    ANSWER = "keyed-producer "  # KeyedProducer.java's lines start so
    SOURCE = Path(__file__).resolve().parent / "KeyedProducer.java"
    KEPT_LINES = 40  # of its other output, for an error message

    def __init__(self, bootstrap: str, settings: Settings, topics: Sequence[str],
                 key_count: int, records: int, work_dir: Path):
        from netkafka.testing.broker import java_executable, kafka_libs_dir

        topics_file = work_dir / "keyed-producer-topics"
        topics_file.write_text("\n".join(topics))
        payload_file = write_payload_file(work_dir / "keyed-producer-payloads",
                                          settings.record_size)
        self.records = records
        self._process = subprocess.Popen(
            [java_executable(), JAVA_HEAP, "-cp", f"{kafka_libs_dir()}/*", str(self.SOURCE),
             bootstrap, str(topics_file), str(key_count), str(payload_file), str(records),
             *java_producer_settings(settings)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._lines = queue.Queue()  # the JVM's output, line by line; None at its end
        self._output = []  # its last lines that were not answers
        threading.Thread(target=self._read_output, name="keyed-producer-output",
                         daemon=True).start()
        try:
            self._expect("ready")
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        return self._process.pid

    def run(self) -> None:
        self._process.stdin.write("round\n")
        self._process.stdin.flush()
        self._expect(f"done {self.records}")

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.stdin.close()  # the end of its commands: it closes its producer
            try:
                self._process.wait(WAIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def _read_output(self) -> None:
        for line in self._process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _expect(self, expected: str) -> None:
        deadline = time.monotonic() + JAVA_TIMEOUT_S
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"KeyedProducer did not answer {expected!r} within "
                                   f"{JAVA_TIMEOUT_S:.0f} s; its output:\n"
                                   + "\n".join(self._output)) from None
            if line is None:
                raise RuntimeError(f"KeyedProducer ended (exit status {self._process.wait()}) "
                                   f"before answering {expected!r}; its output:\n"
                                   + "\n".join(self._output))
            if not line.startswith(self.ANSWER):
                self._output = (self._output + [line])[-self.KEPT_LINES:]
                continue
            answer = line[len(self.ANSWER):]
            if answer != expected:
                raise RuntimeError(f"KeyedProducer answered {answer!r}, not {expected!r}")
            return


# -- contestants of alternated rounds ---------------------------------------------------------


def contestant(client: str, mode: str, bootstrap: str, topic: str, settings: Settings,
               records: int, broker_pids: Sequence[int], payload_dir: Path,
               cleanup: contextlib.ExitStack, security: Optional[Mapping] = None):
    """A client as a contestant whose rounds send `records` values of settings.record_size
    to topic: a Python runner made now (closed by cleanup; security: its further
    settings), with its values prepared outside the rounds, or ProducerPerformance with
    --warmup-records of half the count, its payload file (and, with security, Java
    properties, its client.properties) written into payload_dir."""
    # Imported here: bench/memory_probe.py imports this module, and counts what it loads.
    import rounds

    if client == "java":
        java = JavaProducerPerformance(
            bootstrap, settings, write_payload_file(payload_dir / "payloads",
                                                    settings.record_size),
            None if not security else write_properties_file(
                payload_dir / "client.properties", security))
        return rounds.JavaContestant(java, topic, records, records // 2, broker_pids)
    runner = PYTHON_CLIENTS[client](bootstrap, settings, mode, **(
        {"security": security} if security else {}))
    cleanup.callback(runner.close)
    values = runner.prepare(values_for(settings.record_size, records))
    return rounds.Contestant(lambda: runner.run(topic, values), records, broker_pids, runner)


# -- the broker's side -------------------------------------------------------------------------


def end_offsets(bootstrap: str, *topics: str) -> dict:
    """{(topic, partition): end offset} of every partition of the topics, read with
    confluent-kafka's admin client in one metadata and one offsets request, however many
    topics."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    from netkafka.testing.admin import admin_client

    admin = admin_client(bootstrap)  # held until the answers: its end cancels the requests
    known = admin.list_topics(topic=topics[0] if len(topics) == 1 else None,
                              timeout=30).topics
    answers = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest()
                                  for topic in topics for p in known[topic].partitions})
    return {(tp.topic, tp.partition): future.result().offset
            for tp, future in answers.items()}


def acknowledged_records(bootstrap: str, *topics: str) -> int:
    """How many records the topics hold: the sum of their partitions' end offsets (a topic
    created empty holds that many)."""
    return sum(end_offsets(bootstrap, *topics).values())


def stored_shape(data_dirs: Sequence[Path], topic: str) -> dict:
    """How the broker stored a topic's records, read from its nodes' log segments
    (netkafka.testing.segments): batches, records per batch (mean), stored bytes per
    record (batch headers included) and the batches stored uncompressed -- the request
    shape the broker was sent, warm-up included.  A replicated partition counts once per
    node holding it."""
    from netkafka.testing.segments import stored_batches

    batches = [batch for data_dir in data_dirs for batch in stored_batches(data_dir, topic)]
    records = sum(batch.record_count for batch in batches)
    return {
        "stored_batches": len(batches),
        "records_per_batch": round(records / len(batches), 1) if batches else None,
        "stored_bytes_per_record": (round(sum(batch.size_bytes for batch in batches) / records, 2)
                                    if records else None),
        "uncompressed_batches": sum(1 for batch in batches if batch.codec == 0),
    }


def delete_topic(bootstrap: str, topic: str) -> None:
    """Frees the broker's disk: a full run writes tens of GB."""
    from netkafka.testing.admin import admin_client

    admin = admin_client(bootstrap)  # held until the answer: its destruction cancels the request
    admin.delete_topics([topic], operation_timeout=30)[topic].result()

