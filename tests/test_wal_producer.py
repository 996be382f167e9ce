"""The Producer with a write-ahead log (wal_dir), against the real broker.

What is checked here: settings and their errors; every record sent with a WAL arrives
(read back by confluent-kafka) and the log is emptied as batches are acknowledged;
send_batch() logs its rows; "always" returns durable; a full WAL applies the backoff
strategy.  Crashes and replay: tests/test_wal_replay.py.
"""
import json
import logging
import os
import subprocess
import sys
import threading

import pytest

from batch_helpers import wait_for
from broker_proxy import ProduceAnswerProxy, ProduceDroppingProxy, one_partition_answer
from netkafka import Producer, RecordMetadata
from netkafka.errors import (BackpressureTimeoutError, KafkaConfigurationError, KafkaError,
                             KafkaTimeoutError, NotEnoughReplicasError, ProducerClosedError,
                             RecordDroppedError, RecordKeptError, RecordSpooledError,
                             UndeliveredRecordsError, WalLockedError, WalStorageError)
from netkafka.producer import wal_staging
from netkafka.producer.wal import WriteAheadLog
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic


HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# The children import this checkout's netkafka, as pytest does.
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}


def producer(broker, wal_dir, **settings):
    return Producer(bootstrap_servers=broker.bootstrap, wal_dir=str(wal_dir), **settings)


# -- settings -------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, message", [
    ({"wal_fsync": "often"}, "wal_fsync must be 'never', 'interval' or 'always'"),
    ({"wal_fsync_interval_ms": 0},
     "wal_fsync_interval_ms must be an int or a finite float >= 1"),
    ({"wal_max_bytes": 1 << 20}, "wal_max_bytes=1048576 must hold at least three segments"),
    ({"on_delivery_timeout": "retry"}, "on_delivery_timeout must be 'fail' or 'spool'"),
    ({"on_replay": "print"}, "on_replay must be a callable"),
])
def test_bad_wal_settings_are_named(tmp_path, settings, message):
    with pytest.raises(ValueError, match=message):
        Producer(bootstrap_servers="127.0.0.1:1", wal_dir=str(tmp_path), **settings)


@pytest.mark.parametrize("settings, message", [
    ({"on_delivery_timeout": "spool"}, "on_delivery_timeout='spool' needs wal_dir"),
    # A durability asked for and never given: accepted, it ran with no WAL at all.
    ({"wal_fsync": "always"}, "wal_fsync='always' needs wal_dir"),
    ({"wal.fsync": "never"}, "wal_fsync='never' needs wal_dir"),
    ({"wal_fsync_interval_ms": 5}, "wal_fsync_interval_ms=5 needs wal_dir"),
    ({"wal_max_bytes": 1 << 20}, "wal_max_bytes=1048576 needs wal_dir"),
])
def test_wal_settings_without_a_wal_dir_are_refused(settings, message):
    with pytest.raises(KafkaConfigurationError, match=message):
        Producer(bootstrap_servers="127.0.0.1:1", **settings)
    # At their defaults they say nothing, and are taken.
    Producer(bootstrap_servers="127.0.0.1:1", wal_fsync="interval").close()


@pytest.mark.parametrize("settings, message", [
    ({"transactional_id": "tx"}, "wal_dir with transactional_id='tx'"),
    ({"api_version": (0, 10, 2)}, "wal_dir needs RecordBatch v2"),
])
def test_a_wal_with_what_it_cannot_replay_is_refused(tmp_path, settings, message):
    with pytest.raises(KafkaConfigurationError, match=message):
        Producer(bootstrap_servers="127.0.0.1:1", wal_dir=str(tmp_path), **settings)


def test_java_style_names_are_taken(tmp_path):
    p = Producer(**{"bootstrap.servers": "127.0.0.1:1", "wal.dir": str(tmp_path),
                    "wal.fsync": "never"})
    try:
        assert (p.config.wal_dir, p.config.wal_fsync) == (str(tmp_path), "never")
    finally:
        p.close(0)


def test_a_second_producer_on_the_directory_is_refused(kafka_broker, tmp_path):
    with producer(kafka_broker, tmp_path):
        with pytest.raises(WalLockedError, match=f"{tmp_path}.*pid {os.getpid()}"):
            producer(kafka_broker, tmp_path)


def test_a_forked_child_cannot_use_its_parents_wal_and_says_so(tmp_path):
    p = Producer(bootstrap_servers="127.0.0.1:1", wal_dir=str(tmp_path), max_block_ms=500)
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: reports through the pipe, never returns to pytest
            try:
                os.close(read_end)
                try:
                    p.send("t", b"x")
                    outcome = b"sent"
                except Exception as exc:  # noqa: BLE001 -- reported to the parent
                    outcome = f"{type(exc).__name__}: {exc}".encode()
                os.write(write_end, outcome)
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        with os.fdopen(read_end, "rb") as pipe:
            outcome = pipe.read().decode()
    finally:
        p.close(0)
    assert outcome.startswith(f"WalLockedError: WAL directory {tmp_path} is in use by "
                              f"another producer (pid {os.getpid()}) -- this process's "
                              f"parent"), outcome


def test_a_forked_child_does_not_keep_its_parents_wal_locked(tmp_path):
    p = Producer(bootstrap_servers="127.0.0.1:1", wal_dir=str(tmp_path), max_block_ms=500)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: lives on, never using the producer, until told to exit
        try:
            os.close(write_end)
            os.read(read_end, 1)
        finally:
            os._exit(0)
    os.close(read_end)
    try:
        p.close(0)
        # The parent's producer is gone; the child, a worker that outlives it, must
        # not hold the directory for it (nor for a parent that died).
        Producer(bootstrap_servers="127.0.0.1:1", wal_dir=str(tmp_path),
                 max_block_ms=500).close(0)
    finally:
        os.close(write_end)
        os.waitpid(pid, 0)


def test_context_needs_a_wal_and_is_bounded(kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    with Producer(bootstrap_servers=kafka_broker.bootstrap) as plain:
        with pytest.raises(ValueError, match="context needs wal_dir"):
            plain.send(topic_name, b"v", context=b"c")
        with pytest.raises(KafkaError, match="sync_wal\\(\\) needs a write-ahead log"):
            plain.sync_wal()
    with producer(kafka_broker, tmp_path) as p:
        with pytest.raises(ValueError, match="context of 1025 bytes exceeds 1024"):
            p.send(topic_name, b"v", context=bytes(1025))
        with pytest.raises(TypeError, match="context must be bytes-like or None, not int"):
            p.send(topic_name, b"v", context=7)


# -- records through the log ----------------------------------------------------------------

@pytest.mark.parametrize("fsync", ["never", "interval", "always"])
def test_records_sent_with_a_wal_arrive_and_the_log_empties(kafka_broker, topic_name, tmp_path,
                                                           fsync):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    count = 3000
    with producer(kafka_broker, tmp_path, wal_fsync=fsync, linger_ms=5) as p:
        futures = [p.send(topic_name, b"v%d" % i, key=b"k%d" % (i % 17),
                          headers=[("h", b"%d" % i)], context=b"c%d" % i)
                   for i in range(count // 2)]
        for i in range(count // 2, count):
            p.produce(topic_name, b"v%d" % i, key=b"k%d" % (i % 17), headers=[("h", b"%d" % i)])
        p.flush(60)
        assert all(f.succeeded() for f in futures)
        wal = p.metrics()["netkafka-wal"]
        assert wal["records_logged"] == count
        assert wal["seals_logged"] == wal["dones_logged"] > 0
        assert wal["live_batches"] == 0
        if fsync == "never":
            assert wal["syncs"] == 0
    records = read_topic(kafka_broker.bootstrap, topic_name, count)
    assert sorted(r.value for r in records) == sorted(b"v%d" % i for i in range(count))
    # Closed cleanly with everything acknowledged: nothing to replay.
    log = WriteAheadLog(tmp_path)
    try:
        assert log.recovery().batches == []
    finally:
        log.close()


def test_send_batch_logs_every_row(kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    rows = 5000
    with producer(kafka_broker, tmp_path, batch_size=4096) as p:
        result = p.send_batch(topic_name, [b"row-%d" % i for i in range(rows)],
                              keys=[b"%d" % (i % 5) for i in range(rows)])
        result.get(60)
        assert result.failed_count == 0
        assert p.metrics()["netkafka-wal"]["records_logged"] == rows
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, rows)]
    assert sorted(values) == sorted(b"row-%d" % i for i in range(rows))


def test_always_returns_with_the_record_on_disk(kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    # Batches linger, so that nothing but send() appends to the log meanwhile.
    with producer(kafka_broker, tmp_path, wal_fsync="always", linger_ms=10_000) as p:
        appender = p._wal.appender
        for i in range(20):
            p.send(topic_name, b"%d" % i)
            assert appender.durable_position == appender.position
        p.flush(30)


def test_send_batch_with_always_returns_with_every_row_on_disk(kafka_broker, topic_name,
                                                                tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    with producer(kafka_broker, tmp_path, wal_fsync="always", linger_ms=10_000) as p:
        appender = p._wal.appender
        p.send_batch(topic_name, [b"row-%d" % i for i in range(500)])
        assert appender.durable_position == appender.position
        assert p.metrics()["netkafka-wal"]["records_logged"] == 500
        p.flush(30)


def test_sync_wal_puts_what_was_logged_on_disk(kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    with producer(kafka_broker, tmp_path, wal_fsync="never", linger_ms=1000) as p:
        p.send(topic_name, b"v")
        appender = p._wal.appender
        assert appender.durable_position < appender.position
        p.sync_wal()
        assert appender.durable_position == appender.position


def fail_the_next_sync(p, topic, produce=False):
    """Sends records until the WAL's sync fails under send() (fsync "always"): a pipe
    in the WAL directory's place makes the directory's fsync, which follows a roll
    over to a new segment, fail (EINVAL) as on a failing disk.  Returns (the error
    send() raised, the records sent before it).  produce: with produce() instead,
    until a record fails (the error None)."""
    read_end, write_end = os.pipe()
    os.dup2(read_end, p._wal._dir_fd)
    os.close(read_end)
    os.close(write_end)
    for i in range(1000):  # enough to fill a segment and roll over
        try:
            if not produce:
                p.send(topic, b"%04d" % i + b"v" * 500)
            else:
                p.produce(topic, b"%04d" % i + b"v" * 500)
                if p.metrics()["netkafka"]["records_failed"]:
                    return None, i
        except WalStorageError as exc:
            return exc, i
    raise AssertionError("no sync failed")


def always_on_small_segments(kafka_broker, wal_dir, **settings):
    return producer(kafka_broker, wal_dir, wal_fsync="always", batch_size=64 * 1024,
                    max_request_size=64 * 1024, wal_max_bytes=3 * 68 * 1024, **settings)


def close_failed(p):
    try:
        p.close(10)
    except WalStorageError:
        pass  # its close() syncs: the log failed


def first_delivered_on_small_segments(kafka_broker, topic_name, wal_dir, **settings):
    """A topic of one partition, and a producer (always_on_small_segments, linger 20 ms,
    settings) whose first record to it is delivered."""
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    p = always_on_small_segments(kafka_broker, wal_dir, linger_ms=20, **settings)
    try:
        p.send(topic_name, b"first").get(30)
    except BaseException:
        close_failed(p)
        raise
    return p


def test_a_failed_sync_under_always_says_the_record_is_not_sent_but_replayed(
        kafka_broker, topic_name, tmp_path):
    # The record is logged before its sync: told only "cannot sync", the caller takes
    # it for gone, and the next producer on the directory replays it.
    p = first_delivered_on_small_segments(kafka_broker, topic_name, tmp_path)
    try:
        caught, sent = fail_the_next_sync(p, topic_name)
        assert (f"cannot sync the WAL directory of {tmp_path}" in str(caught)
                and "the records of this call are not sent by this producer (the failed "
                    "log refuses their batches), but are in the log unsynced: the next "
                    "producer opened on its directory replays them" in str(caught)), caught
        p.flush(30)
        delivered = p.metrics()["netkafka"]["records_acknowledged"]
    finally:
        close_failed(p)
    with producer(kafka_broker, tmp_path) as again:
        report = again.replay(60)
    assert report.failed == report.pending == 0, report
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name,
                                          delivered + report.records)]
    assert values.count(b"%04d" % sent + b"v" * 500) == 1


class Acknowledgements:
    """An interceptor keeping the errors (None: acknowledged) on_acknowledgement hears."""

    def __init__(self):
        self.lock = threading.Lock()
        self.heard = []

    def on_send(self, record):
        return record

    def on_acknowledgement(self, metadata, exception):
        with self.lock:
            self.heard.append(exception)


# With interceptors too: produce() goes through send()'s path, where the record
# whose sync failed was counted failed at once and again when its batch failed.
@pytest.mark.parametrize("intercepted", [False, True])
def test_a_produced_record_whose_sync_failed_counts_as_failed_once(
        kafka_broker, topic_name, tmp_path, intercepted):
    # Logged, then the sync under produce() failed: the record is in its batch, which
    # the failed log refuses to seal, and that failure counts it -- produce() counted
    # it too, twice in records_failed and in what flush() raises.
    acknowledgements = Acknowledgements()
    p = first_delivered_on_small_segments(
        kafka_broker, topic_name, tmp_path,
        interceptors=[acknowledgements] if intercepted else ())
    try:
        _, before = fail_the_next_sync(p, topic_name, produce=True)
        with pytest.raises(UndeliveredRecordsError) as raised:
            p.flush(30)
        metrics = p.metrics()["netkafka"]
        # Each record once: the first, those produced before, the one whose sync failed.
        assert metrics["records_acknowledged"] + metrics["records_failed"] == (
            1 + before + 1), metrics
        assert raised.value.failed_count == metrics["records_failed"]
        if intercepted:
            with acknowledgements.lock:
                heard = list(acknowledgements.heard)
            assert len(heard) == 1 + before + 1, heard
            assert sum(error is not None for error in heard) == metrics["records_failed"]
    finally:
        close_failed(p)


def test_records_whose_batch_the_failed_wal_refused_are_told_they_are_replayed(
        kafka_broker, topic_name, tmp_path):
    # Their batch fails (its SEAL refused), its DONE cannot be logged either: they
    # stay in the log, and the next producer replays them.  Told only "failed", the
    # application saw them arrive later.
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    p = always_on_small_segments(kafka_broker, tmp_path, linger_ms=60_000)
    try:
        p.send(topic_name, b"first")
        p.flush(30)
        waiting = [p.send(topic_name, b"waiting-%d" % i) for i in range(3)]  # on disk
        fail_the_next_sync(p, topic_name)
        p.flush(30)  # their batch goes to be sealed
        for future in waiting:
            with pytest.raises(WalStorageError, match=(
                    f"the records stay in the write-ahead log at {tmp_path}, which failed "
                    f"and cannot log that they did not go: the next producer opened on "
                    f"that directory replays them")):
                future.get(30)
    finally:
        close_failed(p)
    heard = []
    with producer(kafka_broker, tmp_path, on_replay=lambda context, outcome: heard.append(
            outcome)) as again:
        report = again.replay(60)
    assert report.failed == report.pending == 0, report
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name,
                                          1 + report.records)]
    assert {b"waiting-%d" % i for i in range(3)} <= set(values)


def run_on_failing_disk(body, kafka_broker, topic_name, tmp_path):
    """Runs body in a child process whose disk refuses writes once body calls
    refuse_writes(): RLIMIT_FSIZE refuses writes past 64 KiB of any file with no
    privilege needed (SIGXFSZ, ignored, would kill the process instead of failing the
    call).  body has bootstrap, topic and wal_dir, and leaves what it reports in
    `report`; returns that."""
    child = f"""
import collections, json, resource, signal, sys, time
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from netkafka import Producer
bootstrap, topic, wal_dir = sys.argv[1:4]
def refuse_writes():
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
{body}
print(json.dumps(report))
try:
    p.close(5)
except Exception:
    pass
"""
    try:
        probe = subprocess.run(
            [sys.executable, "-c", child, kafka_broker.bootstrap, topic_name,
             str(tmp_path)], cwd=REPO, env=CHILD_ENV, capture_output=True, text=True,
            timeout=300)
    finally:
        # A failed log staged in shared memory (fsync "interval") keeps its images
        # (what its files lack) for a next producer these tests do not open: up to 64
        # MiB each.
        token_file = tmp_path / wal_staging.TOKEN_NAME
        token = token_file.read_text().strip() if token_file.exists() else None
        for name in os.listdir(wal_staging.SHM_DIR) if token else ():
            if name.startswith(f"netkafka-wal-{token}-"):
                os.unlink(os.path.join(wal_staging.SHM_DIR, name))
    assert probe.returncode == 0, probe.stderr
    return json.loads(probe.stdout.splitlines()[-1])


# A producer whose WAL fails under it, as a disk that refuses writes fails it.
FAILING_DISK = """
p = Producer(bootstrap_servers=bootstrap, wal_dir=wal_dir, wal_fsync="interval",
             linger_ms=20, max_block_ms=2000, request_timeout_ms=5000,
             delivery_timeout_ms=10000)
p.send(topic, b"first").get(30)
refuse_writes()
futures, refused = [], None
for i in range(400):
    try:
        futures.append(p.send(topic, b"%04d" % i + b"v" * 500))
    except Exception as exc:
        refused = type(exc).__name__
        break
    time.sleep(0.002)
outcomes = collections.Counter()
for future in futures:
    try:
        future.get(15)
        outcomes["delivered"] += 1
    except Exception as exc:
        outcomes[type(exc).__name__] += 1
metrics = p.metrics()["netkafka"]
report = {"refused": refused, "outcomes": outcomes,
          "buffer": [metrics["buffer_available_bytes"], metrics["buffer_total_bytes"]]}
"""


def test_a_wal_that_fails_under_the_producer_fails_new_records_and_completes_the_others(
        kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    summary = run_on_failing_disk(FAILING_DISK, kafka_broker, topic_name, tmp_path)
    # The interval sync failed once entries passed 64 KiB: send() refuses from then on.
    assert summary["refused"] == "WalStorageError", summary
    # Every record accepted before is delivered, or fails with the WAL's error (its
    # batch could not be sealed in the log) -- none waits for an outcome that never
    # comes because its DONE entry could not be written, and no batch keeps its memory.
    outcomes = summary["outcomes"]
    assert set(outcomes) <= {"delivered", "WalStorageError"}, summary
    assert summary["buffer"][0] == summary["buffer"][1], summary
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name,
                                          1 + outcomes["delivered"])]
    assert len(values) == 1 + outcomes["delivered"]


# send_batch() on a disk that fills as the WAL rolls over in the middle of a bulk append
# (fsync "always" writes its segments through their mappings, which RLIMIT_FSIZE lets
# be: only allocating the next segment fails).
FAILING_ROLL = """
# 1 MiB segments; 64 KiB batches of rows whose entries take about 400 KiB each.
p = Producer(bootstrap_servers=bootstrap, wal_dir=wal_dir, wal_fsync="always",
             wal_max_bytes=3 << 20, batch_size=64 * 1024, max_request_size=64 * 1024,
             linger_ms=20, max_block_ms=2000, request_timeout_ms=5000,
             delivery_timeout_ms=10000)
p.send(topic, b"first").get(30)
refuse_writes()
try:
    result = p.send_batch(topic, [b"%07d" % i for i in range(40000)], partitions=0)
    result.get(30)
    report = {"raised": None, "errors": [(row, type(exc).__name__)
                                         for row, exc in result.errors]}
except Exception as exc:
    report = {"raised": f"{type(exc).__name__}: {exc}", "errors": []}
"""


def test_send_batch_on_a_disk_that_fills_as_the_wal_rolls_over_delivers_what_it_reports(
        kafka_broker, topic_name, tmp_path):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    report = run_on_failing_disk(FAILING_ROLL, kafka_broker, topic_name, tmp_path)
    # The rows the log could not take fail with its error; send_batch() itself returns.
    assert report["raised"] is None, report
    failed = {row for row, _ in report["errors"]}
    assert failed and {name for _, name in report["errors"]} == {"WalStorageError"}
    delivered = [b"%07d" % i for i in range(40000) if i not in failed]
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name,
                                          1 + len(delivered))]
    # Exactly the rows reported delivered: none that was cut from its batch unlogged.
    assert values == [b"first"] + delivered


# -- a full log -----------------------------------------------------------------------------

@pytest.mark.parametrize("backoff, error", [("block", BackpressureTimeoutError),
                                            ("drop", RecordDroppedError)])
def test_a_full_wal_applies_the_backoff_strategy_and_acks_make_room(
        kafka_broker, topic_name, tmp_path, backoff, error):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=4)
    # Open batches linger for a minute: their records stay unacknowledged, and four
    # batches of 64 KiB are more than the smallest WAL holds for records.
    p = producer(kafka_broker, tmp_path, wal_fsync="never", linger_ms=60_000,
                 delivery_timeout_ms=100_000, batch_size=64 * 1024,
                 max_request_size=64 * 1024, wal_max_bytes=3 * 68 * 1024, max_block_ms=300,
                 backoff=backoff)
    try:
        sent = 0
        with pytest.raises(error, match=f"the WAL at {tmp_path}"):
            while sent < 100_000:
                p.send(topic_name, b"x" * 500, partition=sent % 4)
                sent += 1
        assert 0 < sent < 100_000
        p.flush(60)  # acknowledged: their segments go, records fit again
        p.send(topic_name, b"after", partition=0)
        p.flush(60)
        metrics = p.metrics()
        assert metrics["netkafka-wal"]["full"] > 0
        assert metrics["netkafka-wal"]["disk_bytes"] <= 3 * 68 * 1024
        if backoff == "drop":
            assert metrics["netkafka"]["records_dropped"] >= 1
    finally:
        p.close(10)
    assert len(read_topic(kafka_broker.bootstrap, topic_name, sent + 1)) == sent + 1


# -- the spool (on_delivery_timeout='spool') ------------------------------------------------

def paused_node(kafka_broker):
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (SIGSTOP)")
    return nodes[0]


SPOOL = dict(request_timeout_ms=1000, delivery_timeout_ms=2000, retry_backoff_ms=100,
             max_block_ms=1000, on_delivery_timeout="spool")


def spool_five(p, topic):
    """Five records sent to a broker frozen since: each is told it is spooled."""
    frozen = [p.send(topic, b"frozen-%d" % i) for i in range(5)]
    for future in frozen:
        with pytest.raises(RecordSpooledError):
            future.get(30)


def assert_the_next_producer_delivers_the_five(kafka_broker, topic, tmp_path):
    """The next producer on tmp_path replays spool_five's records: delivered, as
    on_replay hears and the reader finds."""
    heard = []
    with producer(kafka_broker, tmp_path, on_replay=lambda context, outcome: heard.append(
            outcome)) as again:
        report = again.replay(60)
        assert report.records == 5 and report.failed == report.pending == 0, report
    assert len(heard) == 5 and not any(isinstance(o, Exception) for o in heard), heard
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic, 6)]
    assert {b"frozen-%d" % i for i in range(5)} <= set(values)


def test_records_whose_delivery_timed_out_are_spooled_and_sent_when_the_broker_is_back(
        kafka_broker, topic_name, tmp_path):
    node = paused_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name)
    with producer(kafka_broker, tmp_path, **SPOOL) as p:
        p.send(topic_name, b"before").get(30)
        node.pause()
        try:
            frozen = [p.send(topic_name, b"frozen-%d" % i) for i in range(5)]
            for future in frozen:
                with pytest.raises(RecordSpooledError, match=f"kept in the write-ahead log "
                                                            f"at {tmp_path}") as caught:
                    future.get(30)
                assert isinstance(caught.value.__cause__, KafkaTimeoutError)
            assert p.metrics()["netkafka"]["records_spooled"] >= 5
            # Still frozen: the spool sends the batches again at each delivery timeout
            # (bytes the broker may hold already), and every attempt counts.
            wait_for(lambda: p.metrics()["netkafka"]["records_spool_sent"] >= 10, 30,
                     "a second resend of the spooled records")
        finally:
            node.resume()
        wait_for(lambda: p.metrics()["netkafka"]["records_spool_delivered"] >= 5, 60,
                 "the spooled records' delivery")
        metrics = p.metrics()
        assert metrics["netkafka"]["records_spool_failed"] == 0
        assert metrics["netkafka"]["spool_batches"] == 0
        assert metrics["netkafka-wal"]["live_batches"] == 0
        # Every outcome of a spooled batch follows a resend of it.
        assert (metrics["netkafka"]["records_spool_sent"]
                >= metrics["netkafka"]["records_spool_delivered"] >= 5)
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 6)]
    # At least once: a request the frozen broker held may be appended when it runs
    # again, before the spool's copy.
    assert {b"frozen-%d" % i for i in range(5)} <= set(values)


def test_a_spooled_resend_the_wal_fails_to_log_gives_its_sequences_back(
        kafka_broker, topic_name, tmp_path, monkeypatch):
    # The resend numbers the batch anew, then logs the new stamp: a log that fails
    # there must not keep the sequences, or each retry leaves a hole in the partition's.
    node = paused_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    with producer(kafka_broker, tmp_path, **SPOOL) as p:
        p.send(topic_name, b"before").get(30)
        wal = p._accumulator._wal
        log_restamp, bases = wal.log_restamp, []

        def fails_once(wal_id, producer_id, epoch, base_sequence, batch_crc):
            bases.append(base_sequence)
            if len(bases) == 1:
                raise WalStorageError("the disk failed")
            return log_restamp(wal_id, producer_id, epoch, base_sequence, batch_crc)

        monkeypatch.setattr(wal, "log_restamp", fails_once)
        node.pause()
        try:
            spool_five(p, topic_name)
            wait_for(lambda: len(bases) >= 2, 30, "a resend after the failed one")
        finally:
            node.resume()
        assert bases[1] == bases[0], bases
        wait_for(lambda: p.metrics()["netkafka"]["records_spool_delivered"] >= 5, 60,
                 "the spooled records' delivery")


def test_records_close_cuts_short_are_told_the_wal_keeps_them(kafka_broker, topic_name,
                                                             tmp_path):
    """close() failed the batches the sender had with its error alone ("the sender
    closed before ... was delivered", or the connection's shutdown), while the WAL
    kept them and the next producer replayed them: an application sending "failed"
    records again sent them twice.  They are told RecordKeptError now, as the records
    close() found still unsent were told that the WAL keeps them."""
    node = paused_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name)
    p = producer(kafka_broker, tmp_path, linger_ms=0)
    try:
        p.send(topic_name, b"before").get(30)
        node.pause()
        try:
            # Each record fills a batch: one in flight, the others queued in the sender.
            futures = [p.send(topic_name, b"cut-%d-" % i + b"x" * 12000) for i in range(5)]
            wait_for(lambda: p.metrics()["netkafka"]["batches_sent"] >= 6, 30,
                     "the batches' hand-over to the sender")
        finally:
            p.close(0)
    finally:
        node.resume()
    for future in futures:
        with pytest.raises(RecordKeptError, match=f"kept in the write-ahead log at "
                                                  f"{tmp_path} and replayed by the next") as caught:
            future.get(5)
        assert isinstance(caught.value, ProducerClosedError)
        assert isinstance(caught.value.__cause__, KafkaError)
    with producer(kafka_broker, tmp_path) as again:
        report = again.replay(60)
        assert report.records == 5 and report.failed == report.pending == 0, report
    values = {r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 6)}
    assert {b"cut-%d-" % i + b"x" * 12000 for i in range(5)} <= values


def test_a_spooled_batch_close_cuts_short_is_kept_not_failed(kafka_broker, topic_name,
                                                            tmp_path, caplog):
    """A spooled batch the sender had at close() was logged "failed for good" and
    counted in records_spool_failed, while the WAL kept it and the next producer
    replayed it.  It is logged as kept now, and counted as no failure."""
    caplog.set_level(logging.INFO, logger="netkafka")
    node = paused_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name)
    p = producer(kafka_broker, tmp_path, **SPOOL)
    try:
        p.send(topic_name, b"before").get(30)
        node.pause()
        try:
            spool_five(p, topic_name)
            # The spool hands them to the sender again (for a delivery timeout of
            # 2 s, the broker frozen): close() cuts that attempt short.
            wait_for(lambda: p.metrics()["netkafka"]["records_spool_sent"] >= 5, 30,
                     "the spool's resend")
        finally:
            p.close(0)
    finally:
        node.resume()
    assert p.metrics()["netkafka"]["records_spool_failed"] == 0
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "failed for good" in m], messages
    assert [m for m in messages if "was not delivered before close()" in m
            and f"stays in the write-ahead log at {tmp_path}" in m], messages
    assert_the_next_producer_delivers_the_five(kafka_broker, topic_name, tmp_path)


def test_records_refused_with_a_retriable_error_until_their_delivery_timeout_are_spooled(
        kafka_broker, topic_name, tmp_path):
    """Every Produce answer says NOT_ENOUGH_REPLICAS (a proxy rewrites them): the
    delivery timeout ends the retries, and the records are spooled as any whose
    delivery timed out -- before, they failed with the broker's error, lost although
    the spool was on.  Once the answers are true again the spool delivers them."""
    create_topic(kafka_broker.bootstrap, topic_name)
    host, port = kafka_broker.bootstrap.split(",")[0].rsplit(":", 1)
    proxy = ProduceAnswerProxy((host, int(port)))

    # The last attempt before the delivery timeout must be answered (the timeout's
    # cause is then the broker's error), not time out: SPOOL's request_timeout_ms of
    # 1 s was short for a broker or proxy stalled a moment on a loaded machine.
    settings = dict(SPOOL, request_timeout_ms=10_000, delivery_timeout_ms=10_000)
    try:
        with Producer(bootstrap_servers=proxy.bootstrap, wal_dir=str(tmp_path),
                      **settings) as p:
            p.send(topic_name, b"before").get(30)
            with proxy.lock:
                proxy.rewrite_produce = one_partition_answer(
                    error_code=NotEnoughReplicasError.code, base_offset=-1)
            refused = [p.send(topic_name, b"refused-%d" % i) for i in range(3)]
            try:
                for future in refused:
                    with pytest.raises(RecordSpooledError) as caught:
                        future.get(30)
                    timeout = caught.value.__cause__
                    assert isinstance(timeout, KafkaTimeoutError), repr(timeout)
                    assert isinstance(timeout.__cause__, NotEnoughReplicasError)
            finally:
                with proxy.lock:
                    proxy.rewrite_produce = None
            wait_for(lambda: p.metrics()["netkafka"]["records_spool_delivered"] >= 3, 60,
                     "the spooled records' delivery")
            metrics = p.metrics()["netkafka"]
    finally:
        proxy.close()
    assert metrics["sender_errors.NOT_ENOUGH_REPLICAS"] > 0
    assert metrics["records_spool_failed"] == 0
    values = {r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 4)}
    assert values == {b"before"} | {b"refused-%d" % i for i in range(3)}


def test_the_spool_survives_a_restart(kafka_broker, topic_name, tmp_path):
    node = paused_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name)
    p = producer(kafka_broker, tmp_path, **SPOOL)
    try:
        p.send(topic_name, b"before").get(30)
        node.pause()
        spool_five(p, topic_name)
    finally:
        p.close(0)
        node.resume()
    assert_the_next_producer_delivers_the_five(kafka_broker, topic_name, tmp_path)


def test_a_replayed_record_whose_delivery_times_out_is_spooled_and_heard_of_once_more(
        kafka_broker, topic_name, tmp_path):
    # Failed, a replayed batch stayed in the WAL all the same: on_replay heard
    # "failed", and the next producer replayed it again.  Spooled, on_replay hears
    # the spool error (as a sent record's future), then the spool's outcome.
    create_topic(kafka_broker.bootstrap, topic_name)
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    proxy = ProduceDroppingProxy((host, int(port)))
    settings = dict(bootstrap_servers=proxy.bootstrap, wal_dir=str(tmp_path), **SPOOL)
    heard = []
    try:
        first = Producer(**settings)
        try:
            first.send(topic_name, b"before").get(30)
            proxy.set_dropping(True)
            frozen = [first.send(topic_name, b"frozen-%d" % i, context=b"%d" % i)
                      for i in range(5)]
            for future in frozen:
                with pytest.raises(RecordSpooledError):
                    future.get(30)
        finally:
            first.close(0)  # the spooled records stay in the WAL
        second = Producer(**settings, on_replay=lambda context, outcome: heard.append(
            (context, outcome)))
        try:
            wait_for(lambda: len(heard) >= 5, 30, "the replayed records' delivery timeout")
            # Retried after its first request timed out (request_timeout_ms, 1 s), as a
            # batch of this producer's own is: the delivery timeout (2 s from the
            # replay's send) ended the second attempt; the spool's error names only
            # the last attempt's RequestTimeoutError.
            assert second.metrics()["netkafka"]["sender_batches_retried"] >= 1
            for _, outcome in heard:
                assert isinstance(outcome, RecordSpooledError), heard
                assert f"kept in the write-ahead log at {tmp_path}" in str(outcome)
            proxy.set_dropping(False)
            wait_for(lambda: len(heard) >= 10, 60, "the spool's delivery")
            report = second.replay(30)
        finally:
            second.close(10)
    finally:
        proxy.close()
    assert report.spooled == 5 and report.failed == report.pending == 0, report
    assert sorted(context for context, _ in heard[5:]) == [b"%d" % i for i in range(5)]
    assert all(isinstance(outcome, RecordMetadata) for _, outcome in heard[5:]), heard
    with producer(kafka_broker, tmp_path, on_replay=lambda *heard_again: heard.append(
            heard_again)) as third:
        assert third.replay(30).records == 0
    assert len(heard) == 10
    values = [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 6)]
    assert {b"frozen-%d" % i for i in range(5)} <= set(values)
