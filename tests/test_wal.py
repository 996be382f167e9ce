"""The write-ahead log store (netkafka/producer/wal.py, _wal.pyx): real files, real mmap.

What is checked: entries come back from a reopened directory as written; the log rolls
over, reclaims and recycles segments (and never reads a recycled segment's old entries);
batches that do not complete are moved forward, so that they pin no old segment, and
come back whole and in order, also from a process killed between the move and the
delete;
a process SIGKILLed at random moments leaves a log holding every operation it completed
and nothing torn; a torn entry (what a machine crash leaves) is cut and counted once;
the bound, the lock file, the version header and the OS's refusals give their errors;
the fsync modes sync when they say they do; with "interval", segments staged in
shared memory (wal_staging.py) reach their files, and a killed writer's images are
copied back by the next opener (or dropped when empty or naming no segment).
"""
import errno
import os
import random
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from netkafka.errors import (BackpressureTimeoutError, WalCorruptError, WalError,
                             WalFullError, WalLockedError, WalStorageError, WalVersionError)
from netkafka.producer import _wal, wal_staging
from netkafka.producer.accumulator import _WalRoom
from netkafka.producer.backoff import Park
from netkafka.producer import wal as wal_module
from netkafka.producer.wal import (OUTCOME_ACKNOWLEDGED, OUTCOME_FAILED, SPARE_NAME,
                                   WriteAheadLog, segment_name)
from netkafka.record._batch import RecordBatchBuilder
from netkafka.record._columns import Rows
from netkafka.record._crc import crc32c
from netkafka.record._pool import BufferPool

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kill_progress  # noqa: E402 -- the killed process's progress, next to this file
import wal_writer  # noqa: E402 -- the killed process's script, found next to this file

REPO = os.path.dirname(HERE)
# The children import this checkout's netkafka, as pytest does (a script's own directory,
# not the working directory, starts its sys.path).
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
SMALL = dict(segment_bytes=64 * 1024, max_bytes=1024 * 1024, max_record_bytes=1024,
             max_context_bytes=64)


def open_wal(directory, **options):
    return WriteAheadLog(directory, **{**SMALL, **options})


def recover(directory):
    """What a log opened on directory recovered; the log closed again (an open one
    would keep its shared-memory images)."""
    with open_wal(directory) as wal:
        return wal.recovery()


def segments(directory):
    return sorted(name for name in os.listdir(directory) if name.endswith(".wal"))


def fill_batch(wal, topic, partition, records, contexts=None):
    batch_id = wal.open_batch()
    for index, record in enumerate(records):
        wal.append_record(batch_id, index, topic, partition, 1000 + index, record,
                          None if contexts is None else contexts[index])
    return batch_id


# -- what goes in comes out ---------------------------------------------------------------

def test_entries_come_back_from_a_reopened_directory(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    sealed = fill_batch(wal, "orders", 2, [b"a", b"", b"c" * 300], [b"ctx-a", None, b""])
    wal.log_seal(sealed, "orders", 2, 4242, 3, 17, 3, 0x0004, 0xDEADBEEF, 512)
    restamped = fill_batch(wal, "orders", 1, [b"x"])
    wal.log_seal(restamped, "orders", 1, 4242, 3, 20, 1, 0, 1, 100)
    wal.log_restamp(restamped, 5151, 0, 0, 0xCAFE)
    open_only = fill_batch(wal, "ünïcode", 0, [b"u1", b"u2"])
    acked = fill_batch(wal, "orders", 2, [b"gone"])
    wal.log_seal(acked, "orders", 2, 4242, 3, 20, 1, 0, 7, 70)
    wal.log_done(acked, OUTCOME_ACKNOWLEDGED)
    failed = fill_batch(wal, "orders", 0, [b"failed"])
    wal.log_done(failed, OUTCOME_FAILED)
    wal.close()

    wal = open_wal(tmp_path)
    recovery = wal.recovery()
    assert [b.batch_id for b in recovery.sealed] == [sealed, restamped]
    assert [b.batch_id for b in recovery.unsealed] == [open_only]
    first = recovery.sealed[0]
    assert (first.topic, first.partition) == ("orders", 2)
    assert [(r.index, r.timestamp_ms, r.record, r.context) for r in first.records] == [
        (0, 1000, b"a", b"ctx-a"), (1, 1001, b"", None), (2, 1002, b"c" * 300, b"")]
    assert first.seal == (4242, 3, 17, 3, 0x0004, 0xDEADBEEF, 512)
    # The last stamp logged is the one a replay sends under.
    assert recovery.sealed[1].seal == (5151, 0, 0, 1, 0, 0xCAFE, 100)
    assert recovery.unsealed[0].topic == "ünïcode"
    assert [r.record for r in recovery.unsealed[0].records] == [b"u1", b"u2"]
    assert (recovery.torn_entries, recovery.segments_discarded) == (0, 0)
    # Batch ids go on where the dead log stopped: a DONE for an old batch cannot be
    # mistaken for a new one.
    assert wal.open_batch() > failed
    wal.close()


def test_a_log_of_many_segments_reads_back_in_order_and_positions_only_grow(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    positions, expected = [], []
    rng = random.Random(7)
    for n in range(60):
        records = [rng.randbytes(rng.randrange(0, 900)) for _ in range(10)]
        batch_id = fill_batch(wal, "t", n % 4, records)
        positions.append(wal.appender.position)
        expected.append((batch_id, n % 4, records))
    assert positions == sorted(positions)
    assert wal.metrics()["segments_rolled"] >= 3
    wal.close()
    recovery = recover(tmp_path)
    assert recovery.sealed == []
    assert [(b.batch_id, b.partition, [r.record for r in b.records])
            for b in recovery.unsealed] == expected


def test_acknowledged_segments_are_recycled_and_their_old_entries_never_read(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    payload = b"p" * 800
    for _ in range(80):  # five segments, every batch done at once
        batch_id = fill_batch(wal, "t", 0, [payload] * 5)
        wal.log_seal(batch_id, "t", 0, 1, 0, 0, 5, 0, 0, 0)
        wal.log_done(batch_id, OUTCOME_ACKNOWLEDGED)
        wal.reclaim()
    metrics = wal.metrics()
    assert metrics["segments_recycled"] >= 2, metrics
    assert metrics["segments"] <= 2 and metrics["disk_bytes"] <= wal.max_bytes
    # A recycled segment still holds the entries of its first life behind the new ones.
    live = fill_batch(wal, "t", 1, [b"new"])
    wal.close()
    recovery = recover(tmp_path)
    assert [(b.batch_id, [r.record for r in b.records]) for b in recovery.batches] == [
        (live, [b"new"])]


# -- relocation: a batch that does not complete pins nothing -------------------------------

def stream_done_batches(wal, count, every=None, reclaim=True):
    """count batches of 5 x 800 bytes, each acknowledged at once (and reclaiming after
    each, as the housekeeping thread would, unless reclaim is False); every(n) is
    called before batch n."""
    for n in range(count):
        if every is not None:
            every(n)
        batch_id = fill_batch(wal, "busy", 0, [b"p" * 800] * 5)
        wal.log_seal(batch_id, "busy", 0, 1, 0, 0, 5, 0, 0, 0)
        wal.log_done(batch_id, OUTCOME_ACKNOWLEDGED)
        if reclaim:
            wal.reclaim()


def test_batches_that_never_complete_are_moved_forward_and_the_log_stays_bounded(tmp_path):
    wal = open_wal(tmp_path, fsync="interval")
    stuck = fill_batch(wal, "slow", 0, [b"s0", b"s1" * 100, b""], [b"c0", None, b""])
    wal.log_seal(stuck, "slow", 0, 77, 1, 40, 3, 0, 0xAB, 300)
    wal.log_restamp(stuck, 78, 2, 0, 0xCD)  # the stamp a replay must use
    growing = fill_batch(wal, "slow", 1, [b"g0"])
    records_of_growing = [b"g0"]
    later = []

    def meanwhile(n):
        if n % 20 == 19:  # the open batch takes records while it is moved about
            records_of_growing.append(b"g%d" % len(records_of_growing))
            wal.append_record(growing, len(records_of_growing) - 1, "slow", 1, 1000 + n,
                              records_of_growing[-1], b"ctx" if n % 40 == 19 else None)
        if n == 40:  # sealed after `stuck`, on its partition: replayed after it
            later.append(fill_batch(wal, "slow", 0, [b"later"]))
            wal.log_seal(later[0], "slow", 0, 78, 2, 3, 1, 0, 0xEF, 60)
        peak[0] = max(peak[0], len(segments(tmp_path)))

    peak = [0]
    # 250 batches of 4 KiB: a megabyte, the bound, 16 segments -- pinned by `stuck`,
    # the log would be full after 15 of them.
    stream_done_batches(wal, 250, meanwhile)
    metrics = wal.metrics()
    assert metrics["batches_relocated"] >= 10, metrics
    assert metrics["moves_logged"] >= 10 and metrics["full"] == 0, metrics
    # The active segment, the one before it, and the spare (a rolling segment may be
    # on its way out): the live bytes are a few hundred.
    assert peak[0] <= 4 and metrics["disk_bytes"] <= 4 * wal.segment_bytes, (peak, metrics)
    assert metrics["live_batches"] == 3
    wal.close()

    wal = open_wal(tmp_path)
    recovery = wal.recovery()
    assert [b.batch_id for b in recovery.sealed] == [stuck, later[0]]
    first = recovery.sealed[0]
    assert (first.topic, first.partition) == ("slow", 0)
    assert [(r.index, r.timestamp_ms, r.record, r.context) for r in first.records] == [
        (0, 1000, b"s0", b"c0"), (1, 1001, b"s1" * 100, None), (2, 1002, b"", b"")]
    assert first.seal == (78, 2, 0, 3, 0, 0xCD, 300)
    assert recovery.sealed[1].seal == (78, 2, 3, 1, 0, 0xEF, 60)
    [open_batch] = recovery.unsealed
    assert open_batch.batch_id == growing
    assert [r.index for r in open_batch.records] == list(range(len(records_of_growing)))
    assert [r.record for r in open_batch.records] == records_of_growing
    assert [r.context for r in open_batch.records][1:3] == [b"ctx", None]
    # Moved in the new producer's life too: a recovered batch being replayed that
    # does not complete pins nothing either.
    stream_done_batches(wal, 250)
    assert len(segments(tmp_path)) <= 4
    for batch in recovery.batches:
        wal.log_done(batch.batch_id, OUTCOME_ACKNOWLEDGED)
    wal.close()
    assert recover(tmp_path).batches == []


def test_a_batch_sealed_again_is_read_with_its_last_seal_by_recovery_and_relocation(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    batch_id = fill_batch(wal, "t", 0, [b"x" * 20])
    wal.log_seal(batch_id, "t", 0, 4242, 3, 40, 1, 0, 5, 70)
    wal.close()
    wal = open_wal(tmp_path, fsync="never")
    # A replay that cannot use the stamp re-encodes the batch and seals it again.
    wal.log_seal(batch_id, "t", 0, 77, 0, 0, 1, 0, 6, 70)
    for _ in range(400):  # other batches roll the log on while this one is live
        wal.log_done(fill_batch(wal, "u", 0, [b"f" * 900]), OUTCOME_ACKNOWLEDGED)
    wal.reclaim()
    metrics = wal.metrics()
    # Moved forward (by the housekeeping thread too, perhaps more than once), so that
    # the segments it pinned went.
    assert metrics["batches_relocated"] >= 1
    assert metrics["segments"] <= 3
    wal.close()
    [batch] = recover(tmp_path).sealed
    assert (batch.batch_id, batch.seal) == (batch_id, (77, 0, 0, 1, 0, 6, 70))


def test_a_move_is_made_only_when_it_frees_four_times_its_copy_and_not_retried_till_then(
        tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    # 40 KiB live in the first segment: worth moving once 160 KiB of segments are
    # pinned by it, not before.
    fill_batch(wal, "slow", 0, [b"x" * 1000] * 40)
    before_move = []  # segment files seen while it was not moved

    def watch(n):
        if not wal.metrics()["batches_relocated"]:
            before_move.append(len(segments(tmp_path)))

    stream_done_batches(wal, 80, watch)
    metrics = wal.metrics()
    assert metrics["batches_relocated"] == 1, metrics
    # Two segments behind the one before the active one were not enough (128 KiB).
    assert max(before_move) >= 4, before_move
    # Deferred once per threshold, not once per reclaim() (80 of them).
    assert 1 <= metrics["relocations_deferred"] <= 3, metrics
    assert len(segments(tmp_path)) <= 4
    wal.close()


def test_records_logged_before_their_batchs_move_are_read_though_its_start_is_gone(
        tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    growing = fill_batch(wal, "slow", 0, [b"r0"])
    with wal._reclaim_lock:  # the housekeeping thread moves nothing meanwhile
        stream_done_batches(wal, 40, reclaim=False)  # 160 KiB: the third segment
        wal.append_record(growing, 1, "slow", 0, 1001, b"r1")
    wal.reclaim()  # r0 and r1 moved, behind r1's own entry; r0's segment deleted
    assert wal.metrics()["batches_relocated"] == 1
    assert segment_name(1) not in segments(tmp_path)
    wal.append_record(growing, 2, "slow", 0, 1002, b"r2")
    wal.close()
    # r1's entry ahead of the MOVE does not follow anything read: the MOVE after it
    # says what the batch is.
    [batch] = recover(tmp_path).unsealed
    assert [(r.index, r.record) for r in batch.records] == [(0, b"r0"), (1, b"r1"),
                                                            (2, b"r2")]


MOVE_THEN_DIE = """
import os, signal, sys
from netkafka.producer.wal import OUTCOME_ACKNOWLEDGED, WriteAheadLog
wal = WriteAheadLog(sys.argv[1], fsync="always", segment_bytes=64 * 1024,
                    max_bytes=1024 * 1024, max_record_bytes=1024, max_context_bytes=64)
stuck = wal.open_batch()
for index in range(3):
    wal.append_record(stuck, index, "slow", 0, 5, b"r%d" % index, b"c%d" % index)
wal.log_seal(stuck, "slow", 0, 9, 1, 0, 3, 0, 0x12, 99)
while wal.appender.metrics()["segments_rolled"] < 3:
    batch_id = wal.open_batch()
    wal.append_record(batch_id, 0, "busy", 0, 5, b"b" * 900)
    wal.log_done(batch_id, OUTCOME_ACKNOWLEDGED)
with wal._reclaim_lock:  # moved, then killed before the old segments are deleted
    wal._relocate()
    print(wal.metrics()["batches_relocated"], stuck, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_batch_moved_by_a_process_killed_before_deleting_the_original_comes_back_once(
        tmp_path):
    child = subprocess.run([sys.executable, "-c", MOVE_THEN_DIE, str(tmp_path)], cwd=REPO,
                           env=CHILD_ENV, capture_output=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    moved, stuck = map(int, child.stdout.split())
    assert moved == 1
    # The original entries and the MOVE are both there: the MOVE supersedes them.
    recovery = recover(tmp_path)
    assert recovery.unsealed == []
    [batch] = recovery.sealed
    assert batch.batch_id == stuck
    assert [(r.index, r.record, r.context) for r in batch.records] == [
        (i, b"r%d" % i, b"c%d" % i) for i in range(3)]
    assert batch.seal == (9, 1, 0, 3, 0, 0x12, 99)


# -- killed at random moments --------------------------------------------------------------

def run_and_kill(directory, progress, fsync, rng):
    """Runs tests/wal_writer.py until it has done some work, SIGKILLs it at a random
    moment, and returns (WAL id of its batch 0, operations it completed)."""
    kill_progress.reset(progress)
    child = subprocess.Popen([sys.executable, os.path.join(HERE, "wal_writer.py"),
                              str(directory), str(progress), fsync],
                             cwd=REPO, env=CHILD_ENV, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while kill_progress.read(progress)[1] < 50:
            assert child.poll() is None, child.stderr.read().decode()
            assert time.monotonic() < deadline, "the writer did not start"
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.15))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stderr.close()
    return kill_progress.read(progress)


def recovered_state(recovery, first_batch_id):
    """The recovery as expected_state() tells it, checking every byte on the way."""
    state = {}
    for batch in recovery.batches:
        number = batch.batch_id - first_batch_id
        assert (batch.topic, batch.partition) == (wal_writer.TOPIC, number % 3)
        assert [(r.index, r.record, r.context) for r in batch.records] == [
            (i, wal_writer.record(number, i), wal_writer.context(number, i))
            for i in range(len(batch.records))]
        if batch.seal is not None:
            pid, epoch, base, attributes, crc, size = wal_writer.seal(number)
            assert batch.seal == (pid, epoch, base, wal_writer.RECORDS_PER_BATCH, attributes,
                                  crc, size)
        state[number] = (len(batch.records), batch.seal is not None)
    return state


@pytest.mark.parametrize("fsync, kills", [("never", 20), ("interval", 20), ("always", 4)])
def test_a_process_killed_anywhere_leaves_every_completed_operation_and_nothing_torn(
        tmp_path, fsync, kills):
    directory, progress = tmp_path / "wal", tmp_path / "progress"
    rng = random.Random(fsync)
    discarded = 0
    for _ in range(kills):
        first_batch_id, completed = run_and_kill(directory, progress, fsync, rng)
        wal = WriteAheadLog(directory, fsync=fsync, **wal_writer.WAL_OPTIONS)
        recovery = wal.recovery()
        # The kill may land after an operation's entry is written and before the
        # progress counter says so: then the log holds one operation more.
        assert recovered_state(recovery, first_batch_id) in (
            wal_writer.expected_state(completed), wal_writer.expected_state(completed + 1))
        # The tag of an entry is stored last: a killed process leaves no torn entry.
        assert recovery.torn_entries == 0
        discarded += recovery.segments_discarded
        for batch in recovery.batches:  # replayed, say: the next writer starts clean
            wal.log_done(batch.batch_id, OUTCOME_ACKNOWLEDGED)
        wal.close()
    # Killed mid-roll, a new segment may be left behind the end of the log: deleted.
    assert discarded <= kills


# -- torn entries: what a machine crash leaves ------------------------------------------------

def write_and_find_last_entry(directory, count):
    """A log of one batch of `count` records, closed; returns (segment path, offset of
    the last record entry, its length)."""
    wal = open_wal(directory, fsync="never")
    batch_id = fill_batch(wal, "t", 0, [bytes([i]) * 200 for i in range(count)])
    end = wal.appender.position
    wal.close()
    [name] = segments(directory)
    entry_bytes = _wal.RECORD_OVERHEAD_BYTES + 1 + 200
    # Log positions start at the first segment's byte 0.
    return os.path.join(directory, name), end - entry_bytes, entry_bytes, batch_id


@pytest.mark.parametrize("damage", ["flipped byte", "lost page"])
def test_a_torn_last_entry_is_cut_counted_once_and_the_log_goes_on(tmp_path, damage):
    path, offset, length, batch_id = write_and_find_last_entry(tmp_path, 5)
    with open(path, "r+b") as f:
        if damage == "flipped byte":
            f.seek(offset + length - 3)
            byte = f.read(1)
            f.seek(offset + length - 3)
            f.write(bytes([byte[0] ^ 0x40]))
        else:  # the header reached the disk, the payload behind it did not
            f.seek(offset + _wal.ENTRY_HEADER_BYTES)
            f.write(bytes(length - _wal.ENTRY_HEADER_BYTES))
    wal = open_wal(tmp_path)
    recovery = wal.recovery()
    assert recovery.torn_entries == 1
    [batch] = recovery.unsealed
    assert [r.record for r in batch.records] == [bytes([i]) * 200 for i in range(4)]
    assert wal.metrics()["torn_entries"] == 1
    after = fill_batch(wal, "t", 1, [b"after the cut"])
    wal.close()
    # The cut is a ROLL entry now: the next open finds the same records, no torn entry,
    # and what was written after the cut.
    recovery = recover(tmp_path)
    assert recovery.torn_entries == 0
    assert [(b.batch_id, len(b.records)) for b in recovery.unsealed] == [(batch_id, 4),
                                                                         (after, 1)]


def several_segments(tmp_path):
    """A closed log of one batch over four segments (at least three): their names."""
    wal = open_wal(tmp_path, fsync="never")
    fill_batch(wal, "t", 0, [b"r" * 900] * 250)
    wal.close()
    names = segments(tmp_path)
    assert len(names) >= 3
    return names


def test_a_lost_segment_tail_ends_the_log_there_and_later_segments_are_discarded(tmp_path):
    names = several_segments(tmp_path)
    # The second segment's ROLL entry (and whatever else) never reached the disk.
    second = os.path.join(tmp_path, names[1])
    with open(second, "r+b") as f:
        f.truncate(0)
        f.truncate(SMALL["segment_bytes"])
        f.seek(0)
        with open(os.path.join(tmp_path, names[0]), "rb") as first:
            header = bytearray(first.read(_wal.HEADER_BYTES))
    segment_id = int(names[1][:20])
    struct.pack_into("<IQ", header, 12, segment_id & 0xFFFFFFFF, segment_id)
    struct.pack_into("<I", header, 60, crc32c(bytes(header[:60])))
    with open(second, "r+b") as f:
        f.write(header)
    recovery = recover(tmp_path)
    assert recovery.segments_discarded == len(names) - 2
    [batch] = recovery.unsealed
    assert 0 < len(batch.records) < 250
    assert all(r.record == b"r" * 900 for r in batch.records)


def test_an_entry_with_a_good_checksum_that_does_not_parse_is_corruption_not_a_tear(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    position = wal.appender.position
    wal.close()
    [name] = segments(tmp_path)
    tag = int(name[:20]) & 0xFFFFFFFF
    payload = bytes(8)  # a RECORD payload far shorter than its fixed fields
    body = struct.pack("<IBBH", len(payload), _wal.RECORD, 0, 0) + payload
    crc = crc32c(body, crc32c(struct.pack("<I", tag)))
    with open(os.path.join(tmp_path, name), "r+b") as f:
        f.seek(position)
        f.write(struct.pack("<II", tag, crc) + body)
    with pytest.raises(WalCorruptError, match=rf"{name}.*offset {position}"):
        open_wal(tmp_path)


def write_entry(path, offset, tag, kind, payload):
    """An entry framed as the writer frames it (a good checksum) at offset of path."""
    body = struct.pack("<IBBH", len(payload), kind, 0, 0) + payload
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<II", tag, crc32c(body, crc32c(struct.pack("<I", tag)))) + body)


def test_an_entry_too_short_for_its_batch_id_is_corruption_not_read_past(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    fill_batch(wal, "t", 0, [b"live"])
    acked = fill_batch(wal, "t", 0, [b"acked"])
    wal.log_done(acked, OUTCOME_ACKNOWLEDGED)
    position = wal.appender.position
    wal.close()
    [name] = segments(tmp_path)
    tag = int(name[:20]) & 0xFFFFFFFF
    assert acked != tag
    # A RECORD entry with no payload, then bytes that end the log (a foreign tag) and
    # spell the acked batch's id where the entry's batch id would be: read past the
    # entry, they made it look like an entry of a done batch, passed over.
    write_entry(tmp_path / name, position, tag, _wal.RECORD, b"")
    with open(tmp_path / name, "r+b") as f:
        f.seek(position + _wal.ENTRY_HEADER_BYTES)
        f.write(struct.pack("<Q", acked))
    with pytest.raises(WalCorruptError, match=rf"{name}.*offset {position}"):
        open_wal(tmp_path)


def test_an_entry_whose_topic_is_not_utf8_is_corruption(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    position = wal.appender.position
    wal.close()
    [name] = segments(tmp_path)
    topic = b"\xff\xfe"
    payload = struct.pack("<QiiqHHI", 1, 0, 0, 1000, len(topic), 0, 0) + topic
    write_entry(tmp_path / name, position, int(name[:20]) & 0xFFFFFFFF, _wal.RECORD, payload)
    with pytest.raises(WalCorruptError, match=rf"{name}.*offset {position}"):
        open_wal(tmp_path)


def test_a_segment_too_small_for_entries_is_corruption(tmp_path):
    header = wal_module._HEADER.pack(wal_module.MAGIC, wal_module.FORMAT_VERSION, 1, 1, 1, 0,
                                     70)
    with open(tmp_path / segment_name(1), "wb") as f:
        f.write(header + struct.pack("<I", crc32c(header)) + bytes(6))
    with pytest.raises(WalCorruptError, match=rf"{segment_name(1)}: a WAL segment of 70 bytes"):
        open_wal(tmp_path)
    assert open_files_under(tmp_path) == []


def open_files_under(directory):
    """This process's fds open on files under directory."""
    names = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue  # the listing's own fd
        if target.startswith(f"{directory}/"):
            names.append(target)
    return names


def test_a_log_that_cannot_be_opened_leaves_none_of_its_files_open(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    fill_batch(wal, "t", 0, [b"r" * 900] * 150)  # three segments
    with wal.appender.lock:
        _, offset = wal.appender.active_end_locked()
    wal.close()
    names = segments(tmp_path)
    assert len(names) == 3
    # An entry of the last segment with a good checksum that does not parse: the
    # segments before it were opened and read when recovery finds it.
    tag = int(names[-1][:20]) & 0xFFFFFFFF
    body = struct.pack("<IBBH", 8, _wal.RECORD, 0, 0) + bytes(8)
    with open(tmp_path / names[-1], "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<II", tag, crc32c(body, crc32c(struct.pack("<I", tag)))) + body)
    for _ in range(3):  # a caller retrying
        with pytest.raises(WalCorruptError):
            open_wal(tmp_path)
    assert open_files_under(tmp_path) == []


# -- segment headers: what a crash leaves, and what only corruption makes ------------------

def closed_log_of_one_segment(directory, count=5):
    """A log of one segment holding a batch of `count` records, closed; returns (its
    path, the offset where its entries end, the batch's id)."""
    wal = open_wal(directory, fsync="never")
    batch_id = fill_batch(wal, "t", 0, [bytes([i]) * 200 for i in range(count)])
    end = wal.appender.position
    wal.close()
    [name] = segments(directory)
    return directory / name, end, batch_id


def directory_bytes(directory):
    return {name: (directory / name).read_bytes() for name in segments(directory)}


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x10]))


def test_a_flipped_header_byte_over_entries_is_corruption_and_nothing_is_deleted(tmp_path):
    path, _, _ = closed_log_of_one_segment(tmp_path)
    flip_byte(path, 40)  # the created-ms field: the header's checksum no longer matches
    before = directory_bytes(tmp_path)
    with pytest.raises(WalCorruptError, match=rf"{path.name} has a header whose checksum is "
                                              rf"wrong, yet holds entries"):
        open_wal(tmp_path)
    assert directory_bytes(tmp_path) == before
    assert open_files_under(tmp_path) == []


def test_a_bad_header_before_later_segments_is_corruption_and_nothing_is_deleted(tmp_path):
    names = several_segments(tmp_path)
    # Zeros, as a header never written would be: but later segments' headers were.
    with open(tmp_path / names[1], "r+b") as f:
        f.write(bytes(_wal.HEADER_BYTES))
    before = directory_bytes(tmp_path)
    with pytest.raises(WalCorruptError, match=rf"{names[1]} has a header of zeros, yet the "
                                              rf"log goes on in .*{names[2]}"):
        open_wal(tmp_path)
    assert directory_bytes(tmp_path) == before


def test_a_header_whose_size_is_not_its_files_is_corruption(tmp_path):
    path, end, _ = closed_log_of_one_segment(tmp_path)
    os.truncate(path, SMALL["segment_bytes"] // 2)
    with pytest.raises(WalCorruptError, match=rf"{path.name}: its header says "
                                              rf"{SMALL['segment_bytes']} bytes, the file is "
                                              rf"{SMALL['segment_bytes'] // 2} bytes"):
        open_wal(tmp_path)
    assert os.path.getsize(path) == SMALL["segment_bytes"] // 2


def rolled_to_unfinished_segment(directory):
    """A log of one segment whose last entry is a ROLL naming a next segment, as a
    producer killed (or a machine crashed) just after rolling over leaves it; returns
    (the next segment's path, its id, the batch's id).  The caller makes that file."""
    path, end, batch_id = closed_log_of_one_segment(directory)
    segment_id = int(path.name[:20])
    write_entry(path, end, segment_id & 0xFFFFFFFF, _wal.ROLL,
                struct.pack("<Q", segment_id + 1))
    return directory / segment_name(segment_id + 1), segment_id + 1, batch_id


def header_bytes(segment_id, size_bytes):
    header = wal_module._HEADER.pack(wal_module.MAGIC, wal_module.FORMAT_VERSION,
                                     segment_id & 0xFFFFFFFF, segment_id, 1, 0, size_bytes)
    return header + struct.pack("<I", crc32c(header))


@pytest.mark.parametrize("state", ["empty file", "zeros", "torn header",
                                   "a spare's old header"])
def test_the_last_segment_a_crash_left_unfinished_is_discarded_and_the_log_kept(tmp_path,
                                                                                  state):
    path, segment_id, batch_id = rolled_to_unfinished_segment(tmp_path)
    size = SMALL["segment_bytes"]
    if state == "empty file":  # created, not yet allocated
        content = b""
    elif state == "zeros":  # allocated, header not yet written
        content = bytes(size)
    elif state == "torn header":  # killed while its header was being written
        content = header_bytes(segment_id, size)[:40] + bytes(size - 40)
    else:  # a recycled spare renamed, its new header (in an image) lost
        content = header_bytes(segment_id - 1, size) + bytes(size - _wal.HEADER_BYTES)
    path.write_bytes(content)
    if state == "a spare's old header":  # and an entry of the old segment: not its tag
        write_entry(path, _wal.HEADER_BYTES, (segment_id - 1) & 0xFFFFFFFF, _wal.DONE,
                    struct.pack("<QI", 7, OUTCOME_ACKNOWLEDGED))
    with open_wal(tmp_path) as wal:
        recovery = wal.recovery()
        assert (recovery.segments_discarded, recovery.torn_entries) == (1, 0)
        [batch] = recovery.unsealed
        assert (batch.batch_id, [r.record for r in batch.records]) == (
            batch_id, [bytes([i]) * 200 for i in range(5)])
    assert path.name not in segments(tmp_path)


def test_a_bad_header_over_entries_of_the_last_segment_is_corruption(tmp_path):
    path, segment_id, _ = rolled_to_unfinished_segment(tmp_path)
    size = SMALL["segment_bytes"]
    path.write_bytes(header_bytes(segment_id, size) + bytes(size - _wal.HEADER_BYTES))
    write_entry(path, _wal.HEADER_BYTES, segment_id & 0xFFFFFFFF, _wal.DONE,
                struct.pack("<QI", 3, OUTCOME_ACKNOWLEDGED))
    flip_byte(path, 20)  # the segment id field
    before = directory_bytes(tmp_path)
    with pytest.raises(WalCorruptError, match=rf"{path.name} has a header whose checksum is "
                                              rf"wrong, yet holds entries with good "
                                              rf"checksums"):
        open_wal(tmp_path)
    assert directory_bytes(tmp_path) == before


# -- errors: lock, version, bound, storage --------------------------------------------------

def test_a_second_opener_is_refused_naming_the_directory_and_holder(tmp_path):
    wal = open_wal(tmp_path)
    with pytest.raises(WalLockedError, match=rf"{tmp_path}.*pid {os.getpid()}"):
        open_wal(tmp_path)
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from netkafka.producer.wal import WriteAheadLog; "
         "WriteAheadLog(sys.argv[1], segment_bytes=1 << 20, max_bytes=4 << 20, "
         "max_record_bytes=1024)", str(tmp_path)],
        cwd=REPO, env=CHILD_ENV, capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "WalLockedError" in probe.stderr
    wal.close()
    open_wal(tmp_path).close()  # released with close()


def test_close_releases_the_directory_while_a_forked_childs_copy_of_the_lock_is_open(tmp_path):
    # A child forked a moment ago may not have run its fork hook (which drops its copy of
    # the lock fd) when the parent closes the log; the parent's close() must not wait on it.
    wal = open_wal(tmp_path)
    childs_copy = os.dup(wal._lock_fd)  # the same open file, as a fork's copy is
    try:
        wal.close()
        open_wal(tmp_path).close()
    finally:
        os.close(childs_copy)


def test_segments_of_another_format_version_or_no_wal_at_all_are_refused_untouched(tmp_path):
    open_wal(tmp_path).close()
    [name] = segments(tmp_path)
    path = os.path.join(tmp_path, name)
    with open(path, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<I", 1))  # the format before MOVE entries
    with pytest.raises(WalVersionError, match=rf"{name}.*version 1.*reads version 2"):
        open_wal(tmp_path)
    with open(path, "r+b") as f:
        f.write(b"PK\x03\x04 not a WAL")
    with pytest.raises(WalCorruptError, match=rf"{name} is not a netkafka WAL segment"):
        open_wal(tmp_path)
    assert os.path.getsize(path) == SMALL["segment_bytes"]


def test_records_stop_at_the_bound_control_entries_do_not_and_acks_free_room(tmp_path):
    wal = open_wal(tmp_path, fsync="never", max_bytes=4 * SMALL["segment_bytes"])
    batches = []
    with pytest.raises(WalFullError, match="wal_max_bytes"):
        while True:
            batches.append(fill_batch(wal, "t", 0, [b"f" * 1000] * 8))
    assert wal.metrics()["full"] >= 1
    assert wal.metrics()["disk_bytes"] <= wal.max_bytes - wal.segment_bytes
    for batch_id in batches:  # seals and acks complete the batches: never refused
        wal.log_seal(batch_id, "t", 0, 1, 0, 0, 8, 0, 0, 0)
        wal.log_done(batch_id, OUTCOME_ACKNOWLEDGED)
    wal.reclaim()
    fill_batch(wal, "t", 0, [b"f" * 1000] * 8)
    assert wal.metrics()["disk_bytes"] <= wal.max_bytes
    wal.close()


def test_a_full_log_polled_by_park_reclaims_only_after_an_acknowledgement(tmp_path):
    # backoff='park' asks for room every park_us while the log is full: a reclaim at
    # each ask (a scan of the pinned segments) burned a core for nothing.
    # Closed even when it fails: its shared-memory images would stay behind.
    with open_wal(tmp_path, fsync="never", max_bytes=4 * SMALL["segment_bytes"]) as wal:
        batches = []
        with pytest.raises(WalFullError):
            while True:
                batches.append(fill_batch(wal, "t", 0, [b"f" * 1000] * 8))
        parked = threading.current_thread()
        reclaims = []
        reclaim = wal.reclaim

        def counted_reclaim():
            if threading.current_thread() is parked:  # not the housekeeping thread's
                reclaims.append(1)
            return reclaim()

        wal.reclaim = counted_reclaim
        with pytest.raises(BackpressureTimeoutError, match="backoff='park'"):
            Park(park_us=100).wait_for_room(_WalRoom(wal), 100)
        # One, or one more for a relocation's unpins meanwhile: ~500 before, one per park.
        assert len(reclaims) <= 2, len(reclaims)
        for batch_id in batches:
            wal.log_seal(batch_id, "t", 0, 1, 0, 0, 8, 0, 0, 0)
            wal.log_done(batch_id, OUTCOME_ACKNOWLEDGED)
        Park(park_us=100).wait_for_room(_WalRoom(wal), 10_000)
        assert len(reclaims) <= 4, len(reclaims)


@pytest.mark.parametrize("name, value, message", [
    ("fsync", "sometimes", "wal_fsync must be 'never', 'interval' or 'always'"),
    ("fsync_interval_ms", 0, "wal_fsync_interval_ms must be an int >= 1"),
    ("max_bytes", 2 * 64 * 1024, "wal_max_bytes=131072 must hold at least three segments"),
    ("segment_bytes", 1000, "wal_segment_bytes must be an int >= "),
])
def test_bad_settings_are_named(tmp_path, name, value, message):
    with pytest.raises(ValueError, match=message):
        open_wal(tmp_path, **{name: value})


def test_a_directory_that_cannot_be_created_is_named(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    with pytest.raises(WalStorageError, match=rf"cannot create WAL directory {blocker}/wal"):
        open_wal(blocker / "wal")


def test_an_unwritable_directory_is_named():
    # Under /tmp itself: pytest's tmp_path is closed to other users than its owner.
    parent = tempfile.mkdtemp(prefix="netkafka-wal-")
    os.chmod(parent, 0o755)
    directory = os.path.join(parent, "read-only")
    os.mkdir(directory, 0o555)
    # root writes anywhere: the probe drops to nobody (after its imports) when it is root.
    drop = "os.setgid(65534); os.setuid(65534); " if os.geteuid() == 0 else ""
    probe = subprocess.run(
        [sys.executable, "-c", "import os, sys; from netkafka.producer.wal import "
         f"WriteAheadLog; {drop}WriteAheadLog(sys.argv[1])", str(directory)],
        cwd=REPO, env=CHILD_ENV, capture_output=True, text=True, timeout=60)
    shutil.rmtree(parent)
    assert probe.returncode != 0
    assert f"WalStorageError: cannot open the lock file {directory}/LOCK" in probe.stderr


def test_no_room_on_disk_for_a_segment_is_an_error_naming_it(tmp_path):
    # RLIMIT_FSIZE makes the allocation of a segment fail as a full disk does, with no
    # privilege needed; SIGXFSZ would kill the process instead of failing the call.
    probe = subprocess.run(
        [sys.executable, "-c",
         "import resource, signal, sys\n"
         "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
         "resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, 32 * 1024))\n"
         "from netkafka.producer.wal import WriteAheadLog\n"
         "WriteAheadLog(sys.argv[1], segment_bytes=64 * 1024, max_bytes=1 << 20,"
         " max_record_bytes=1024, max_context_bytes=64)\n", str(tmp_path)],
        cwd=REPO, env=CHILD_ENV, capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0
    assert (f"WalStorageError: cannot allocate 65536 bytes for WAL segment "
            f"{tmp_path}/{segment_name(1)}") in probe.stderr
    assert segments(tmp_path) == []  # nothing half-made is left


def test_a_segment_that_cannot_be_deleted_stays_in_the_log_ahead_of_the_live_ones(
        tmp_path, monkeypatch, caplog):
    # Recovery reads the log from the oldest segment file there is: a reclaimed one left
    # behind while later ones went would start it, its ROLL naming a segment gone, and
    # every live segment after it would be discarded.
    real_unlink = os.unlink
    refused = []

    def unlink(path, *args, **kwargs):
        if refused is not None and str(path).endswith(".wal"):
            refused.append(path)
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    wal = open_wal(tmp_path, fsync="interval")
    stream_done_batches(wal, 64, reclaim=False)  # the housekeeping thread reclaims
    deadline = time.monotonic() + 10
    while not refused and time.monotonic() < deadline:
        time.sleep(0.01)
    assert refused, "no segment was deleted"
    refused = None  # the disk takes deletions again
    stream_done_batches(wal, 64)
    live = fill_batch(wal, "t", 1, [b"kept"])
    wal.close()
    assert [(b.batch_id, [r.record for r in b.records]) for b in recover(tmp_path).batches] \
        == [(live, [b"kept"])]
    assert any("cannot delete WAL segment" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("call, fails_on", [("fsync", "directory"), ("pread", "segment")])
def test_what_the_disk_refuses_as_a_log_opens_is_a_storage_error_naming_the_file(
        tmp_path, monkeypatch, call, fails_on):
    open_wal(tmp_path, fsync="always").close()
    [name] = segments(tmp_path)
    real = getattr(os, call)

    def refused(fd, *args):
        if stat.S_ISDIR(os.fstat(fd).st_mode) == (fails_on == "directory"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(fd, *args)

    monkeypatch.setattr(os, call, refused)
    what = (f"cannot sync the WAL directory {tmp_path}" if fails_on == "directory"
            else f"cannot read WAL segment {tmp_path / name}")
    with pytest.raises(WalStorageError, match=f"{what}: Input/output error"):
        open_wal(tmp_path, fsync="always")


# -- fsync modes ------------------------------------------------------------------------------

def test_never_syncs_only_when_asked(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    fill_batch(wal, "t", 0, [b"x"] * 50)
    time.sleep(0.05)
    assert wal.metrics()["syncs"] == 0
    assert wal.appender.durable_position < wal.appender.position
    wal.sync()
    assert wal.appender.durable_position == wal.appender.position
    metrics = wal.metrics()
    assert metrics["syncs"] == 1
    # What the sync cost is counted: its time, and the CPU of the thread that synced.
    assert metrics["sync_ns"] > 0 and metrics["sync_cpu_ns"] > 0
    wal.close()


def segment_files_hold(directory, data):
    return any(data in (directory / name).read_bytes() for name in segments(directory))


def fill_batches_written_out(wal, directory, payload, count=48):
    """count batches of five records (48 of 4 KiB: about three 64 KiB segments), each
    waited for until a segment file holds it; returns their ids."""
    batch_ids = []
    for n in range(count):
        batch_ids.append(fill_batch(wal, "t", 0, [payload + b"%03d" % n] * 5))
        deadline = time.monotonic() + 10
        while not segment_files_hold(directory, payload + b"%03d" % n):
            assert time.monotonic() < deadline, f"batch {n} never reached its segment file"
            time.sleep(0.001)
    return batch_ids


def test_never_writes_staged_segments_to_their_files_without_syncing(tmp_path):
    # "never" stages its segments too: every fsync_interval_ms the housekeeping thread
    # writes what was appended to the segment files, and does not sync them.
    wal = open_wal(tmp_path, fsync="never", fsync_interval_ms=1)
    payload = b"w" * 800
    batch_ids = fill_batches_written_out(wal, tmp_path, payload)
    metrics = wal.metrics()
    assert metrics["syncs"] == 0
    assert wal.appender.durable_position < wal.appender.position
    # Two images, taken more than twice: segments rolled over and written out to their
    # end gave theirs back to later segments.
    assert metrics["segments_rolled"] >= 2, metrics
    assert metrics["staging_images"] == 2 and metrics["segments_staged"] > 2, metrics
    # A sync still covers the rolled segments whose images went back (their files only
    # need syncing now).
    wal.sync()
    assert wal.appender.durable_position == wal.appender.position
    assert wal.metrics()["syncs"] == 1
    token = (tmp_path / wal_staging.TOKEN_NAME).read_text().strip()
    wal.close()
    assert not [name for name in images() if token in name]
    recovery = recover(tmp_path)
    assert [(b.batch_id, [r.record for r in b.records]) for b in recovery.unsealed] == [
        (batch_id, [payload + b"%03d" % n] * 5) for n, batch_id in enumerate(batch_ids)]


def test_never_forgets_reclaimed_segments_whose_images_went_back(tmp_path):
    # Rolled segments written out give their images back while they still await a sync
    # (nothing syncs them with "never"); reclaimed, they must not be synced any more:
    # their files are gone.
    wal = open_wal(tmp_path, fsync="never", fsync_interval_ms=1)
    batch_ids = fill_batches_written_out(wal, tmp_path, b"r" * 800)
    for batch_id in batch_ids:
        wal.log_done(batch_id, OUTCOME_ACKNOWLEDGED)
    deadline = time.monotonic() + 10
    while wal.metrics()["segments_deleted"] < 1:
        assert time.monotonic() < deadline, f"nothing was deleted: {wal.metrics()}"
        time.sleep(0.001)
    wal.sync()
    assert wal.appender.durable_position == wal.appender.position
    wal.close()


def open_never_wal_past_its_first_round(directory):
    """A "never" log whose housekeeping thread made its first round (at once, on open)
    and makes no other within a test: nothing is written out but by the test."""
    wal = open_wal(directory, fsync="never", fsync_interval_ms=3_600_000)
    deadline = time.monotonic() + 10
    while wal.metrics()["housekeeping_cpu_ns"] == 0:
        assert time.monotonic() < deadline, "the housekeeping thread's first round never came"
        time.sleep(0.001)
    return wal


def test_never_closes_with_every_image_written_to_its_file(tmp_path):
    # Closed before the housekeeping thread wrote anything: close() writes what the
    # files lack, then removes the images.
    wal = open_never_wal_past_its_first_round(tmp_path)
    batch_id = fill_batch(wal, "t", 0, [b"closing-%03d" % i for i in range(100)])
    assert wal.metrics()["segments_staged"] >= 1
    assert not segment_files_hold(tmp_path, b"closing-099")
    wal.close()
    assert segment_files_hold(tmp_path, b"closing-099")
    [batch] = recover(tmp_path).unsealed
    assert (batch.batch_id, [r.record for r in batch.records]) == (
        batch_id, [b"closing-%03d" % i for i in range(100)])


def test_a_failed_write_out_fails_the_log_and_its_images_keep_every_record(tmp_path):
    wal = open_never_wal_past_its_first_round(tmp_path)
    batch_id = fill_batch(wal, "t", 0, [b"kept-%03d" % i for i in range(100)])
    # The segment file's descriptor now refuses writes (a read-only one in its place).
    active = wal._segments[wal._active_id]
    readonly = os.open(active.path, os.O_RDONLY)
    os.dup2(readonly, active.fd)
    os.close(readonly)
    with pytest.raises(WalStorageError, match=f"cannot write WAL segment {active.path}"):
        wal.appender.write_out()
    with pytest.raises(WalStorageError, match="the WAL takes no entries after a failed sync "
                                              "or write: cannot write WAL segment"):
        wal.append_record(batch_id, 100, "t", 0, 5, b"refused")
    with pytest.raises(WalStorageError, match="an earlier WAL sync or write failed: cannot "
                                              "write WAL segment"):
        wal.sync()
    token = (tmp_path / wal_staging.TOKEN_NAME).read_text().strip()
    with pytest.raises(WalStorageError):
        wal.close()
    # The images hold what the file lacks: kept, and the next log on the directory
    # applies them.
    assert [name for name in images() if token in name]
    [batch] = recover(tmp_path).unsealed
    assert (batch.batch_id, [r.record for r in batch.records]) == (
        batch_id, [b"kept-%03d" % i for i in range(100)])
    assert not [name for name in images() if token in name]


def test_entries_on_disk_before_the_log_failed_are_still_reported_on_disk(tmp_path):
    # Under "always", a caller whose entries another thread's sync put on disk asks after
    # a later sync failed: told they are not on disk, send() says its record is not sent
    # by this producer -- while its batch goes out, and twice if the caller resends it.
    wal = open_never_wal_past_its_first_round(tmp_path)
    batch_id = wal.open_batch()
    on_disk = wal.append_record(batch_id, 0, "t", 0, 5, b"on disk")
    wal.sync()
    wal.append_record(batch_id, 1, "t", 0, 6, b"not yet")
    active = wal._segments[wal._active_id]
    readonly = os.open(active.path, os.O_RDONLY)  # the file now refuses writes
    os.dup2(readonly, active.fd)
    os.close(readonly)
    with pytest.raises(WalStorageError, match=f"cannot write WAL segment {active.path}"):
        wal.sync()
    wal.sync_to(on_disk)  # returns: they are
    with pytest.raises(WalStorageError, match="an earlier WAL sync or write failed"):
        wal.sync_to(on_disk + 1)
    with pytest.raises(WalStorageError):
        wal.close()
    [batch] = recover(tmp_path).unsealed  # the images kept what the file lacks
    assert [r.record for r in batch.records] == [b"on disk", b"not yet"]


def test_a_sync_after_never_closed_the_log_is_refused_not_run_on_a_stale_fd(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    assert wal._staging is not None  # the segment is staged: synced through its fd
    fill_batch(wal, "t", 0, [b"x"] * 10)
    wal.close()  # written to the files, not synced
    # The segment files' fds are closed: their numbers go to the next files opened.
    others = [os.open(tmp_path / f"other-{i}", os.O_RDWR | os.O_CREAT) for i in range(8)]
    try:
        with pytest.raises(WalError, match="the WAL is closed"):
            wal.sync()
    finally:
        for fd in others:
            os.close(fd)


def test_interval_syncs_in_the_background(tmp_path):
    wal = open_wal(tmp_path, fsync="interval", fsync_interval_ms=5)
    fill_batch(wal, "t", 0, [b"x"] * 50)
    position = wal.appender.position
    deadline = time.monotonic() + 10
    while wal.appender.durable_position < position:
        assert time.monotonic() < deadline, "the interval sync never came"
        time.sleep(0.005)
    # The housekeeping thread's CPU (its syncs among it) is counted after each round.
    while wal.metrics()["housekeeping_cpu_ns"] == 0:
        assert time.monotonic() < deadline, "the housekeeping thread's CPU is not counted"
        time.sleep(0.005)
    assert wal.metrics()["sync_cpu_ns"] > 0
    wal.close()


STAGE_THEN_DIE = """
import os, signal, sys, time
from netkafka.producer.wal import WriteAheadLog
wal = WriteAheadLog(sys.argv[1], fsync="interval", fsync_interval_ms=3_600_000,
                    segment_bytes=64 * 1024, max_bytes=1024 * 1024, max_record_bytes=1024,
                    max_context_bytes=64)
while wal.metrics()["housekeeping_cpu_ns"] == 0:  # its first round (a sync) is done
    time.sleep(0.001)
batch_id = wal.open_batch()
for index in range(50):
    wal.append_record(batch_id, index, "t", 0, 5, b"staged-%04d" % index + b"." * 300)
print(batch_id, wal.metrics()["segments_staged"], flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def images():
    return sorted(name for name in os.listdir(wal_staging.SHM_DIR)
                  if name.startswith("netkafka-wal-"))


def test_interval_entries_not_yet_synced_survive_a_killed_process_in_shared_memory(tmp_path):
    before = images()
    child = subprocess.run([sys.executable, "-c", STAGE_THEN_DIE, str(tmp_path)], cwd=REPO,
                           env=CHILD_ENV, capture_output=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    batch_id, staged = map(int, child.stdout.split())
    assert staged == 1
    token = (tmp_path / wal_staging.TOKEN_NAME).read_text().strip()
    left = [name for name in images() if token in name]
    assert len(left) == 1 and left[0] not in before
    # Not synced: the segment file lacks the entries; its shared-memory image has them.
    [name] = segments(tmp_path)
    assert b"staged-0049" not in (tmp_path / name).read_bytes()
    assert b"staged-0049" in open(os.path.join(wal_staging.SHM_DIR, left[0]), "rb").read()
    [batch] = recover(tmp_path).unsealed
    assert batch.batch_id == batch_id
    assert [r.record for r in batch.records] == [
        b"staged-%04d" % i + b"." * 300 for i in range(50)]
    assert not [name for name in images() if token in name]


def test_an_image_left_empty_or_naming_no_segment_is_dropped(tmp_path):
    # What a producer killed as it made an image leaves (created, not yet sized), and an
    # image whose segment was reclaimed meanwhile.
    open_wal(tmp_path, fsync="interval").close()
    token = (tmp_path / wal_staging.TOKEN_NAME).read_text().strip()
    empty = os.path.join(wal_staging.SHM_DIR, f"netkafka-wal-{token}-0")
    stale = os.path.join(wal_staging.SHM_DIR, f"netkafka-wal-{token}-1")
    open(empty, "wb").close()
    header = wal_module._HEADER.pack(wal_module.MAGIC, wal_module.FORMAT_VERSION, 999, 999, 1, 0,
                                     64 * 1024)
    with open(stale, "wb") as f:
        f.write(header + struct.pack("<I", crc32c(header)) + b"\0" * (64 * 1024 - 64))
    assert recover(tmp_path).batches == []
    assert not os.path.exists(empty) and not os.path.exists(stale)
    assert segments(tmp_path) == ["00000000000000000002.wal"]


def test_an_image_another_format_version_left_is_refused_untouched(tmp_path):
    # What a producer of another netkafka, killed, leaves: its segment file, and the
    # shared-memory image holding what the file lacks.
    open_wal(tmp_path, fsync="interval").close()
    [name] = segments(tmp_path)
    path = tmp_path / name
    header = bytearray(path.read_bytes()[:_wal.HEADER_BYTES])
    struct.pack_into("<I", header, 8, 3)
    struct.pack_into("<I", header, 60, crc32c(bytes(header[:60])))
    with open(path, "r+b") as f:
        f.write(header)
    token = (tmp_path / wal_staging.TOKEN_NAME).read_text().strip()
    image = os.path.join(wal_staging.SHM_DIR, f"netkafka-wal-{token}-0")
    content = bytes(header) + b"entries the file lacks" + bytes(64 * 1024 - 86)
    with open(image, "wb") as f:
        f.write(content)
    try:
        with pytest.raises(WalVersionError, match=r"netkafka-wal-.*version 3.*reads version 2"):
            open_wal(tmp_path, fsync="interval")
        # Kept for the netkafka that wrote it, which copies it to its segment.
        with open(image, "rb") as f:
            assert f.read() == content
    finally:
        if os.path.exists(image):
            os.unlink(image)


def test_interval_segments_are_staged_while_images_are_free_and_mapped_from_files_else(
        tmp_path, monkeypatch):
    monkeypatch.setattr(wal_staging, "SLOTS", 1)
    wal = open_wal(tmp_path, fsync="interval", fsync_interval_ms=1)
    payload, live = b"p" * 800, []
    for n in range(80):  # five segments, all but every tenth batch done at once
        batch_id = fill_batch(wal, "t", 0, [payload + b"%d" % n] * 5)
        if n % 10:
            wal.log_done(batch_id, OUTCOME_ACKNOWLEDGED)
        else:
            live.append(batch_id)
    metrics = wal.metrics()
    assert metrics["staging_images"] == 1
    # One image: while it holds the active segment, the spare is a file mapping.
    assert 0 < metrics["segments_staged"] < metrics["segments_rolled"] + 1, metrics
    wal.close()
    assert not [name for name in images() if name.startswith("netkafka-wal-" + (
        tmp_path / wal_staging.TOKEN_NAME).read_text().strip())]
    recovery = recover(tmp_path)
    assert [(b.batch_id, [r.record for r in b.records]) for b in recovery.unsealed] == [
        (batch_id, [payload + b"%d" % (10 * k)] * 5) for k, batch_id in enumerate(live)]


def test_without_shared_memory_segments_are_mapped_from_files_and_a_warning_says_so(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(wal_staging, "SHM_DIR", str(tmp_path / "no-shm"))
    with open_wal(tmp_path / "wal", fsync="interval") as wal:
        fill_batch(wal, "t", 0, [b"x"])
        assert wal.metrics()["staging_images"] == 0
    assert any("no " + str(tmp_path / "no-shm") in r.getMessage()
               for r in caplog.records if r.levelname == "WARNING"), caplog.records
    assert [[r.record for r in b.records] for b in recover(tmp_path / "wal").batches] == [
        [b"x"]]


def test_the_housekeeping_thread_goes_on_after_a_segment_it_could_not_unstage(
        tmp_path, monkeypatch):
    real_direct_writes = wal_module.direct_writes
    refused = []

    def direct_writes(fd, on):
        if not on and not refused:
            refused.append(fd)
            raise WalStorageError("cannot set O_DIRECT on a WAL segment: Input/output "
                                  "error", errno=errno.EIO)
        return real_direct_writes(fd, on)

    monkeypatch.setattr(wal_module, "direct_writes", direct_writes)
    with open_wal(tmp_path, fsync="interval") as wal:
        # A live batch keeps the first segment, rolled over (too new to be moved), until
        # a round syncs it and unstages it.
        fill_batch(wal, "t", 1, [b"pinned"])
        stream_done_batches(wal, 20, reclaim=False)
        deadline = time.monotonic() + 10
        while not refused and time.monotonic() < deadline:
            time.sleep(0.01)
        assert refused
        time.sleep(1.5)  # the thread's pause after an error, and a round after it
        fill_batch(wal, "t", 1, [b"later"])
        position = wal.appender.position
        deadline = time.monotonic() + 5
        while wal.appender.durable_position < position and time.monotonic() < deadline:
            time.sleep(0.01)
        assert wal.appender.durable_position >= position, "interval syncs stopped"


def test_a_file_system_refusing_o_direct_gets_the_images_through_its_page_cache(
        tmp_path, monkeypatch):
    real_fcntl = wal_staging.fcntl.fcntl

    def refusing(fd, command, *args):
        if command == wal_staging.fcntl.F_SETFL and args[0] & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_fcntl(fd, command, *args)

    monkeypatch.setattr(wal_staging.fcntl, "fcntl", refusing)
    with open_wal(tmp_path, fsync="interval") as wal:
        batch_id = fill_batch(wal, "t", 0, [b"%d" % i * 50 for i in range(300)])
        wal.sync()
        assert wal.metrics()["segments_staged"] >= 1
    [batch] = recover(tmp_path).unsealed
    assert (batch.batch_id, [r.record for r in batch.records]) == (
        batch_id, [b"%d" % i * 50 for i in range(300)])


def test_any_wal_max_bytes_gets_segments_of_whole_blocks_which_interval_stages(tmp_path):
    # 10,000,000 // 3 is not a multiple of 4096: the default segment is rounded down.
    with WriteAheadLog(tmp_path, fsync="interval", max_bytes=10_000_000) as wal:
        assert wal.segment_bytes == 10_000_000 // 3 // 4096 * 4096
        assert wal.metrics()["segments_staged"] == 1


def test_always_returns_durable_and_groups_the_syncs_of_concurrent_callers(tmp_path):
    wal = open_wal(tmp_path, fsync="always")
    batch_id = wal.open_batch()
    position = wal.append_record(batch_id, 0, "t", 0, 1, b"one")
    assert wal.appender.durable_position >= position

    per_thread, threads = 100, 4
    lagging = []

    def writer():
        batch = wal.open_batch()
        for index in range(per_thread):
            position = wal.append_record(batch, index, "t", 0, 1, b"r" * 100)
            if wal.appender.durable_position < position:
                lagging.append(position)

    syncs_before = wal.metrics()["syncs"]
    workers = [threading.Thread(target=writer) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert lagging == []
    # Group commit: while one caller syncs, the others' entries pile up behind it and
    # go to disk together with the next sync.
    assert wal.metrics()["syncs"] - syncs_before < threads * per_thread
    wal.close()


# -- the C framing alone ------------------------------------------------------------------------

def test_entry_framing_is_exact_and_clean_under_sanitizers(tmp_path):
    driver = str(tmp_path / "wal_entry_driver")
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g",
                    "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-fno-omit-frame-pointer", "-I", os.path.join(REPO, "csrc"),
                    os.path.join(HERE, "csrc", "wal_entry_driver.c"), "-o", driver],
                   check=True, capture_output=True, text=True)
    done = subprocess.run([driver], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.split("\n")[-2] == "checked wal entries"


# -- send_batch()'s bulk appends ----------------------------------------------------------

def test_rows_a_failed_roll_left_unlogged_are_cut_from_the_batch(tmp_path):
    wal = open_wal(tmp_path, fsync="never")
    # No spare, and no file for the next segment: the roll fails as on a full disk.
    wal._prepare_spare = lambda: None

    def disk_full(path, size_bytes):
        raise WalStorageError(f"cannot allocate {size_bytes} bytes for WAL segment {path}: "
                              f"disk full", errno=errno.ENOSPC)

    wal._create_segment = disk_full
    pool = BufferPool(64 * 1024, 4 * 64 * 1024)
    builder = RecordBatchBuilder(pool.try_acquire(), 64 * 1024, 64 * 1024)
    # About 3,000 rows fit the batch; their entries (about 60 bytes each) do not fit
    # the 64 KiB segment: the roll comes in the middle of the bulk call.
    rows = Rows([b"%010d" % i for i in range(5000)], None, None,
                [1000 + i % 7 for i in range(5000)])
    batch_id = wal.open_batch()
    with pytest.raises(WalStorageError, match="disk full"):
        wal.appender.append_rows_to(builder, lambda b, start: b.append_rows(rows, None, start),
                                    0, batch_id, "t", 0)
    kept = builder.record_count
    assert 0 < kept < 5000
    assert builder.max_timestamp_ms == max(1000 + i % 7 for i in range(kept))
    wal.close()
    # The log holds exactly the records the batch holds, byte for byte.
    [batch] = recover(tmp_path).unsealed
    assert [r.index for r in batch.records] == list(range(kept))
    view = builder.seal()
    assert struct.unpack_from(">i", view, 57)[0] == kept  # the batch's record count
    assert bytes(view[61:]) == b"".join(r.record for r in batch.records)
    view.release()
    builder.mark_failed()
    builder.release()
