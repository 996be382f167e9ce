"""The write-ahead log (wal_dir): records on disk before send() returns, replayed
after a crash.

The directory:

    LOCK                        flock()ed by the producer that has the directory open
                                (one per directory); holds its pid
    00000000000000000007.wal    segments, named by id; the log is their chain: each
                                ends with a ROLL entry naming the next
    recycle.tmp                 a reclaimed segment waiting to be reused
    staging                     the token naming this producer's shared-memory images
                                of its segments (fsync "interval" and "never":
                                wal_staging.py)

A segment is a 64-byte header, then entries (framing: csrc/wal_entry.h; payloads:
_wal.pyx).  Header, little-endian: magic "NKWALSEG" | format version u32 | tag u32 |
segment id u64 | first batch id u64 | created ms u64 | size bytes u64 | zeros |
CRC32C of bytes 0..60 u32.

A batch in the log: open_batch() gives it an id; the accumulator appends its records'
entries (natively, _wal.pyx); log_seal() records its producer stamp when sealed,
log_restamp() a stamp the sender rewrites, log_done() its outcome.  A batch not done
is live, and pins the segment of its first entry: that one and every later one are
kept.  Segments before the oldest pinned one are reclaimed by the housekeeping
thread: one is kept as the spare (renamed recycle.tmp), reused as the next segment
with its pages mapped and its blocks allocated already; the others are deleted.

Relocation keeps a batch that does not complete for long (a partition without a
leader, a spooled batch, a slow partition) from holding every segment after it: the
live batches that pin segments older than the one before the active one (or than
the active one, when the log is short of room for records) are copied forward, each
as one MOVE entry holding its records and its last stamp, and the place of its
original SEAL entry, which orders sealed batches at replay as their SEALs were
ordered.  A MOVE supersedes every earlier entry of its batch; it is synced (unless
fsync is "never") before the batch is repinned to its segment, and only then can the
old segments go.  A copy costs what is live, not what is pinned; it is made only
when it frees at least four times what it copies (else the attempt is remembered
and not repeated until the pinned set changes).

Bound: every segment file counts against max_bytes (wal_max_bytes).  Records may
grow the log up to max_bytes less one segment; the last segment's worth is kept for
SEAL, RESTAMP and DONE entries, so that batches already logged can always complete
and free the log.  A record that finds no room gets WalFullError (the producer
applies its backoff strategy to that, as to buffer_memory).

fsync modes: "never" (the housekeeping thread writes what was appended to the
segment files every fsync_interval_ms without waiting for the disk, which stores it
when the OS decides; a process crash loses nothing, a machine crash what the disk had
not stored), "interval" (the housekeeping thread syncs every fsync_interval_ms: a
machine crash loses at most that much), "always" (callers wait in sync_to() for their
entries to be on disk, group-committed: see _wal.pyx).  With "never" and "interval"
the segments being written are staged in shared memory and copied to their files by
those writes and syncs, which costs less per record than writing into a file's pages
(wal_staging.py).  sync() forces one in any mode.

Recovery (at open): segments are read in id order along their chain, DONE entries
first (so that finished batches are skipped), then the rest (a MOVE replacing what
was read of its batch: _BatchReader).  The log ends at the
first torn entry (a good tag over a bad checksum: counted in torn_entries), at a
segment that ends without a ROLL entry while others follow, at a ROLL entry whose
segment is missing or unreadable, or at the last segment when its header was never
finished (no entry of its own behind it); segments past that end were never reported
durable and are deleted (counted).  A bad header anywhere else is corruption
(WalCorruptError), as is a header whose size is not its file's.  The last segment
read is closed with a ROLL entry naming the new producer's first segment.  What is
left live is the Recovery: batches sealed but not done (replayed byte-identical under
their stamp), and batches never sealed (re-encoded) -- see recovery().

Threads: the appender's methods and open_batch()/log_*() may be called from any
thread.  Locks: the appender's `lock` guards the appender and, here, _segments,
_spare, _total_bytes, _next_segment_id, _active_id, _next_batch_id, _live, _pins and
the counters; the appender's sync_lock is taken before it, by syncs and by
reclaiming (so that no sync runs over a segment being unmapped).  _reclaim_lock
(one reclaim at a time: relocation scans segments outside the appender's lock) comes
before both, and the accumulator's lock before all three.  A segment's mapping and
image (_SegmentFile.mapped, .slot) are set by whoever maps it (_roll_locked, or the
housekeeping thread for the spare) before another thread can see it; after that only
the housekeeping thread and close() change them, holding the sync_lock to unmap.  The
StagingArea's lock is a leaf.  _closing is guarded by _work (a threading.Condition).
"""
import collections
import errno
import fcntl
import logging
import os
import re
import struct
import threading
import time
from typing import NamedTuple

from netkafka._validate import check_choice, check_int
from netkafka.errors import (WalCorruptError, WalError, WalLockedError, WalStorageError,
                             WalVersionError)
from netkafka.producer import _wal
from netkafka.producer._wal import MappedSegment, WalAppender
from netkafka.producer import wal_staging
from netkafka.producer.wal_staging import StagingArea, apply_left_over, direct_writes
from netkafka.producer.wal_staging import os_call as _os_call
from netkafka.record._crc import crc32c
from netkafka.client.own_threads import mark_own_thread

_log = logging.getLogger("netkafka.producer.wal")

FSYNC_MODES = ("never", "interval", "always")
# 2: MOVE entries (relocation); SEAL entries place seals in the log by their offset.
FORMAT_VERSION = 2
MAGIC = b"NKWALSEG"
# DONE entries' outcomes.
OUTCOME_ACKNOWLEDGED = 1
OUTCOME_FAILED = 2

DEFAULT_MAX_BYTES = 1 << 30
DEFAULT_SEGMENT_BYTES = 64 << 20
DEFAULT_MAX_CONTEXT_BYTES = 1024

LOCK_NAME = "LOCK"
SPARE_NAME = "recycle.tmp"
_SEGMENT_NAME = re.compile(r"(\d{20})\.wal")
_HEADER = struct.Struct("<8sIIQQQQ12x")  # all but the trailing CRC
_HEADER_CRC = struct.Struct("<I")


def segment_name(segment_id):
    return f"{segment_id:020d}.wal"


class Seal(NamedTuple):
    """A sealed batch's stamp and header facts, as the last SEAL/RESTAMP logged them."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    attributes: int
    batch_crc: int
    batch_bytes: int


class RecoveredRecord(NamedTuple):
    index: int          # the record's place in its batch (its offset delta)
    timestamp_ms: int
    record: bytes       # as the batch held it (its Kafka encoding)
    context: object     # bytes, or None


class RecoveredBatch:
    """A batch a dead producer left live: its records, and its seal if it had one."""

    __slots__ = ("batch_id", "topic", "partition", "first_segment_id", "records", "seal",
                 "seal_place")

    def __init__(self, batch_id, topic, partition, first_segment_id):
        self.batch_id = batch_id
        self.topic = topic
        self.partition = partition
        self.first_segment_id = first_segment_id
        self.records = []  # RecoveredRecord, index order
        self.seal = None  # Seal, or None: never sealed
        # (segment id, offset) of its SEAL entry, kept through relocations: sealed
        # batches are replayed in this order, the order they were sealed in.
        self.seal_place = None

    def __repr__(self):
        state = "unsealed" if self.seal is None else f"sealed {self.seal}"
        return (f"RecoveredBatch({self.batch_id}, {self.topic}-{self.partition}, "
                f"{len(self.records)} records, {state})")


class Recovery:
    """What a WAL directory held when it was opened.

    Attributes:
        sealed: live batches that were sealed (perhaps sent), in the order their SEAL
            entries were logged -- a partition's in its send order.
        unsealed: live batches never sealed, in the order they were opened (batch
            id): a partition's in the order of its records.
        torn_entries: torn entries the log was cut at (0 or 1).
        segments_discarded: segments past the end of the log, deleted.
        segments_read: segments of the log read.
    """

    def __init__(self, sealed, unsealed, torn_entries, segments_discarded, segments_read):
        self.sealed = sealed
        self.unsealed = unsealed
        self.torn_entries = torn_entries
        self.segments_discarded = segments_discarded
        self.segments_read = segments_read

    @property
    def batches(self):
        return self.sealed + self.unsealed

    @property
    def record_count(self):
        return sum(len(batch.records) for batch in self.batches)

    def __repr__(self):
        return (f"Recovery(sealed={len(self.sealed)}, unsealed={len(self.unsealed)}, "
                f"records={self.record_count}, torn_entries={self.torn_entries}, "
                f"segments_discarded={self.segments_discarded})")


class _SegmentFile:
    """A segment file: its fd, and its mapping while it is written or reused."""

    __slots__ = ("segment_id", "path", "fd", "size_bytes", "mapped", "slot", "header_fault")

    def __init__(self, segment_id, path, fd, size_bytes):
        self.segment_id = segment_id
        self.path = path
        self.fd = fd
        self.size_bytes = size_bytes
        self.mapped = None  # MappedSegment or None
        self.slot = None  # the wal_staging.Slot whose image it is staged in, or None
        # Found at open (recovery): what is wrong with its header, or None when good.
        self.header_fault = None

    def map_for_reading(self):
        """A MappedSegment of this file as it is, tagged as its entries are."""
        mapped = MappedSegment(self.fd, self.size_bytes, self.path)
        mapped.segment_id = self.segment_id
        mapped.tag = self.segment_id & 0xFFFFFFFF
        return mapped


class WriteAheadLog:
    """A segmented, memory-mapped write-ahead log in one directory.

    Args:
        directory: created if missing.  One WriteAheadLog per directory at a time.
        fsync: "never", "interval" (default) or "always" (see the module's docstring).
        fsync_interval_ms: the interval of "interval"'s syncs and "never"'s writes
            (default 10); in every mode, the pace of the housekeeping thread.
        max_bytes: bound on the segment files together (default 1 GiB).
        segment_bytes: size of a segment (default 64 MiB, or max_bytes // 3 if less,
            rounded down to whole 4 KiB blocks).
        max_record_bytes: the largest record (Kafka-encoded) an entry may hold
            (default 1 MiB: max_request_size's default).
        max_context_bytes: the largest context a record may carry (default 1024).

    Raises:
        ValueError: a bad argument (named).
        WalLockedError: another producer has the directory open.
        WalVersionError: a segment of another format version is there.
        WalCorruptError: a file that is not a segment, a segment header no crash leaves,
            or an entry that does not parse.
        WalStorageError: the directory cannot be created, locked or written.
    """

    def __init__(self, directory, *, fsync="interval", fsync_interval_ms=10,
                 max_bytes=DEFAULT_MAX_BYTES, segment_bytes=None,
                 max_record_bytes=1 << 20, max_context_bytes=DEFAULT_MAX_CONTEXT_BYTES):
        check_choice("wal_fsync", fsync, FSYNC_MODES)
        check_int("wal_fsync_interval_ms", fsync_interval_ms, 1)
        check_int("wal_max_bytes", max_bytes, 1)
        check_int("max_record_bytes", max_record_bytes, 1)
        check_int("max_context_bytes", max_context_bytes, 0, _wal.CONTEXT_LIMIT_BYTES)
        max_entry = (_wal.RECORD_OVERHEAD_BYTES + _wal.TOPIC_LIMIT_BYTES + max_context_bytes
                     + max_record_bytes)
        smallest = _wal.HEADER_BYTES + max_entry + _wal.ROLL_ENTRY_BYTES
        if segment_bytes is None:
            segment_bytes = max(smallest, min(DEFAULT_SEGMENT_BYTES, max_bytes // 3))
            # Whole blocks where there is room: only such segments can be staged
            # (fsync "interval" and "never", wal_staging.py), whatever wal_max_bytes a
            # user picks.
            aligned = segment_bytes - segment_bytes % _wal.STAGE_ALIGN_BYTES
            if aligned >= smallest:
                segment_bytes = aligned
        check_int("wal_segment_bytes", segment_bytes, smallest)
        if max_bytes < 3 * segment_bytes:
            raise ValueError(
                f"wal_max_bytes={max_bytes} must hold at least three segments of "
                f"{segment_bytes} bytes (one being written, one to roll over to, one for "
                f"the entries that complete batches)")
        self.directory = os.path.abspath(os.fspath(directory))  # immutable
        self.fsync = fsync  # immutable
        self._fsync_interval_s = fsync_interval_ms / 1000  # immutable
        self.max_bytes = max_bytes  # immutable
        self.segment_bytes = segment_bytes  # immutable
        self.max_context_bytes = max_context_bytes  # immutable
        # Immutable: records may grow the log this far (the rest is for control entries).
        self._record_limit_bytes = max_bytes - segment_bytes
        self._segments = collections.OrderedDict()  # lock: id -> _SegmentFile, ascending
        self._spare = None  # lock: a _SegmentFile (mapped) ready to be the next segment
        self._total_bytes = 0  # lock: bytes of every segment file and of the spare
        self._next_segment_id = 1  # lock
        self._active_id = 0  # lock: the segment entries go to
        self._next_batch_id = 1  # lock
        self._live = {}  # lock: batch id -> id of the segment it pins
        self._pins = collections.Counter()  # lock: segment id -> live batches pinning it
        # lock: unpins so far (a batch done, or moved forward): only they free segments.
        self._unpins = 0
        # lock: _unpins when has_room_for_records() last reclaimed (-1: never).
        self._unpins_reclaimed = -1
        self._reclaim_lock = threading.Lock()
        # _reclaim_lock: (threshold, batches) of a relocation found not worth its copy.
        self._relocation_refused = None
        self._counts = collections.Counter()  # lock
        self._work = threading.Condition()  # wakes the housekeeping thread
        self._closing = False  # guarded by _work
        self._room = threading.Condition()  # notified when segments are reclaimed
        self._room_changes = 0  # guarded by _room: reclaims and spares made so far
        # Written by the housekeeping thread after each round (its thread_time_ns());
        # metrics() reads it without a lock: a counter a round behind at worst.
        self._housekeeping_cpu_ns = 0

        _makedirs(self.directory)
        # The directory's lock file and the directory: set here, closed (-1) by close(),
        # which runs once and after the housekeeping thread's last round, or (the lock
        # file's only) by a forked child's hook on its only thread.
        self._lock_fd = _lock_directory(self.directory)
        self._dir_fd = -1
        self._staging = None  # immutable once set: StagingArea, or None
        try:
            self._dir_fd = _os_call("cannot open WAL directory", self.directory, os.open,
                                    self.directory, os.O_RDONLY | os.O_DIRECTORY)
            # A dead producer's shared-memory images go to their files before the log
            # is read (wal_staging.py).
            apply_left_over(self.directory, self._image_segment_path)
            self.max_record_entry_bytes = max_entry  # immutable
            # Immutable (set once here); the appender is thread-safe (its own locks).
            self._appender = WalAppender(self._roll_locked, max_entry, max_context_bytes,
                                         self._dir_fd)
            self._recovery = self._recover()  # immutable: what the directory held
        except BaseException:
            if self._staging is not None:
                self._staging.close(remove=True)  # nothing was appended
            self._release_files()
            raise
        # Immutable: interval syncs, prefaulting, reclaiming (joined by close()).
        self._housekeeper = threading.Thread(target=self._housekeep, name="netkafka-wal",
                                             daemon=True)
        self._housekeeper.start()

    @property
    def appender(self):
        """The native appender (the accumulator's hot path writes through it)."""
        return self._appender

    def recovery(self):
        """The Recovery of what the directory held when opened."""
        return self._recovery

    # ------------------------------------------------------------------
    # Batches and entries: any thread.

    def open_batch(self):
        """A new batch's id; the batch is live until log_done() or discard_batch()."""
        with self._appender.lock:
            batch_id = self._next_batch_id
            self._next_batch_id += 1
            self._live[batch_id] = self._active_id
            self._pins[self._active_id] += 1
        return batch_id

    def discard_batch(self, batch_id):
        """A batch that got no record: forgotten, no entry written."""
        self._forget(batch_id)

    def append_record(self, batch_id, index, topic, partition, timestamp_ms, record,
                      context=None):
        """A record entry (the Python path; the accumulator uses the native one).
        Returns the log position after it.

        Raises:
            WalFullError: the log is at max_bytes for records.
            ValueError: context longer than max_context_bytes, or record longer than
                max_record_bytes.
        """
        if context is not None and len(context) > self.max_context_bytes:
            raise ValueError(f"context of {len(context)} bytes exceeds "
                             f"max_context_bytes={self.max_context_bytes}")
        return self._durable(self._appender.append_record(
            batch_id, index, topic, partition, timestamp_ms, record, context))

    def log_seal(self, batch_id, topic, partition, producer_id, producer_epoch, base_sequence,
                 record_count, attributes, batch_crc, batch_bytes):
        """The batch was sealed (before it goes to the sender).  Returns the position.
        With fsync "always" it returns once the entry is on disk: a batch that may be in
        the broker's log is never unknown to the WAL."""
        return self._durable(self._appender.append_seal(
            batch_id, topic, partition, producer_id, producer_epoch, base_sequence,
            record_count, attributes, batch_crc, batch_bytes))

    def log_restamp(self, batch_id, producer_id, producer_epoch, base_sequence, batch_crc):
        """The sender rewrote the sealed batch's stamp.  Returns the position.  Not
        synced here: a partition's batches are restamped together, and the caller
        calls sync_restamps() once, after the last, before any of them is sent."""
        return self._appender.append_restamp(batch_id, producer_id, producer_epoch,
                                             base_sequence, batch_crc)

    def sync_restamps(self, position):
        """With fsync "always", returns once the RESTAMP entries up to position are on
        disk: lost in a machine crash after their batches were sent, a replay would
        send those under their old stamp, which the broker cannot deduplicate --
        at-least-once where "always" promises exactly-once.  A failed sync is logged,
        not raised: the WAL refuses records from then on (send() raises), and the
        batches restamped go out all the same, as those sealed before the failure."""
        try:
            self._durable(position)
        except WalError as exc:
            _log.error("WAL %s: the new producer stamps of restamped batches cannot be "
                       "synced (%s); a replay after a machine crash would send them at "
                       "least once", self.directory, exc)

    def log_done(self, batch_id, outcome):
        """The batch was acknowledged or failed for good (OUTCOME_*): nothing of it is
        replayed, and its segments may go.  Returns the position."""
        position = self._appender.append_done(batch_id, outcome)
        self._forget(batch_id)
        return position

    def _forget(self, batch_id):
        with self._appender.lock:
            pinned = self._live.pop(batch_id, None)
            wake = pinned is not None and self._unpin_locked(pinned)
        if wake:
            self._wake()

    def _unpin_locked(self, segment_id):
        """One batch less pins segment_id; True when that freed something to reclaim."""
        self._unpins += 1
        self._pins[segment_id] -= 1
        if self._pins[segment_id]:
            return False
        del self._pins[segment_id]
        return self._reclaimable_locked()

    # ------------------------------------------------------------------
    # Room for records (the producer's backoff waits on it).

    def has_room_for_records(self):
        """Whether an append of a record would find room now (not WalFullError).
        Segments that hold nothing live any more are reclaimed first, here: room that
        only waits for the housekeeping thread is room."""
        appender = self._appender
        if appender.room_bytes >= appender.max_record_entry_bytes:
            return True
        needed = _wal.HEADER_BYTES + appender.max_record_entry_bytes + _wal.ROLL_ENTRY_BYTES
        for attempt in range(2):
            with appender.lock:
                if ((self._spare is not None and self._spare.size_bytes >= needed)
                        or self._total_bytes + max(self.segment_bytes, needed)
                        <= self._record_limit_bytes):
                    return True
                if attempt or self._unpins == self._unpins_reclaimed:
                    # No batch unpinned since the last reclaim here: another would
                    # free nothing (backoff='park' asks every park_us while full).
                    return False
                self._unpins_reclaimed = self._unpins
            # Reclaimed here even when nothing looks reclaimable: the housekeeping
            # thread may be reclaiming right now (segments taken out of the list, not
            # yet deleted or made the spare), and reclaim() waits for it on sync_lock.
            self.reclaim()

    def wait_for_room(self, timeout_s):
        """Waits up to timeout_s for reclaiming to make room for records; True if
        there is room now."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._room:
                seen = self._room_changes
            if self.has_room_for_records():
                return True
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return False
            self._wake()
            with self._room:
                self._room.wait_for(lambda: self._room_changes != seen, remaining_s)

    def _room_changed(self):
        with self._room:
            self._room_changes += 1
            self._room.notify_all()

    def describe_room(self):
        with self._appender.lock:
            return (f"the WAL at {self.directory} (wal_max_bytes={self.max_bytes}, "
                    f"{self._total_bytes} bytes of segments, {len(self._live)} batches "
                    f"not acknowledged)")

    # ------------------------------------------------------------------
    # Durability.

    def sync(self):
        """Every entry appended so far is on disk when this returns (any fsync mode).

        Raises:
            WalStorageError: the sync failed; the WAL refuses entries from then on.
            WalError: the log is closed with entries it did not sync (fsync "never").
        """
        self._appender.sync()

    def sync_to(self, position):
        """Returns once the log is on disk up to position (group commit)."""
        self._appender.sync_to(position)

    def _durable(self, position):
        if self.fsync == "always":
            self._appender.sync_to(position)
        return position

    # ------------------------------------------------------------------
    # Rolling over (the appender's callback, its lock held).

    def _roll_locked(self, needed_bytes, control):
        size = max(self.segment_bytes,
                   _wal.HEADER_BYTES + needed_bytes + _wal.ROLL_ENTRY_BYTES)
        segment_id = self._next_segment_id
        path = os.path.join(self.directory, segment_name(segment_id))
        spare = self._spare
        if spare is not None and spare.size_bytes >= size:
            self._spare = None
            self._write_header(spare.mapped, segment_id)
            _os_call("cannot rename WAL segment", spare.path, os.rename, spare.path, path)
            spare.path = spare.mapped.path = path
            segment = spare
        else:
            if not control and self._total_bytes + size > self._record_limit_bytes:
                self._counts["full"] += 1
                self._wake()  # perhaps something can be reclaimed now
                return None
            if self._total_bytes + size > self.max_bytes:
                # Only control entries get here: they complete batches, which frees
                # the log, so they may pass the bound rather than wait on it.
                self._counts["segments_over_bound"] += 1
            segment = self._create_segment(path, size)
            self._total_bytes += size
            self._write_header(segment.mapped, segment_id)
            self._counts["segments_created"] += 1
        segment.segment_id = segment_id
        self._segments[segment_id] = segment
        self._next_segment_id = segment_id + 1
        self._active_id = segment_id
        self._wake()  # a new spare is wanted
        return segment.mapped

    def _write_header(self, mapped, segment_id):
        header = _HEADER.pack(MAGIC, FORMAT_VERSION, segment_id & 0xFFFFFFFF, segment_id,
                              self._next_batch_id, int(time.time() * 1000), mapped.size_bytes)
        mapped.write(0, header + _HEADER_CRC.pack(crc32c(header)))
        mapped.segment_id = segment_id
        mapped.tag = segment_id & 0xFFFFFFFF
        mapped.written_bytes = _wal.HEADER_BYTES
        mapped.synced_bytes = 0

    # ------------------------------------------------------------------
    # The housekeeping thread: interval syncs and writes, reclaiming, the spare.

    def _wake(self):
        with self._work:
            self._work.notify()

    def _housekeep(self):
        mark_own_thread()
        # Every fsync_interval_ms in every mode (and when woken): a spare is prepared
        # when the active segment fills, whatever the fsync mode.
        first = True  # a round at once: what recovery left reclaimable
        while True:
            with self._work:
                if not self._closing and not first:
                    self._work.wait(self._fsync_interval_s)
                if self._closing:
                    return
            try:
                if first:
                    # The first segment was made on the opening thread, unfaulted: its
                    # pages now, behind the appends, rather than one fault each in them.
                    self._appender.active_segment.prefault()
                first = False
                if self.fsync == "interval":
                    self._appender.sync()
                elif self._staging is not None:
                    self._appender.write_out()  # "never": into the files, unsynced
                self.reclaim()
                self._prepare_spare()
                self._housekeeping_cpu_ns = time.thread_time_ns()
            except WalError as exc:
                # The appender keeps a failed sync and raises it to every caller from
                # now on; here it is logged once per occurrence.
                _log.error("WAL %s: %s", self.directory, exc)
                with self._work:
                    if not self._closing:
                        self._work.wait(1.0)

    def _reclaimable_locked(self):
        return bool(self._segments) and next(iter(self._segments)) < self._watermark_locked()

    def _watermark_locked(self):
        """Segments below this id hold nothing live."""
        return min(min(self._pins, default=self._active_id), self._active_id)

    def _short_of_room_locked(self):
        """Whether the next segment for records would be refused."""
        return (self._spare is None
                and self._total_bytes + self.segment_bytes > self._record_limit_bytes)

    def reclaim(self):
        """Relocates the batches that pin old segments (see the module's docstring),
        then deletes or recycles the segments that hold nothing live; returns how many.
        The housekeeping thread calls it every round."""
        with self._reclaim_lock:
            self._unstage_written()
            self._relocate()
            return self._reclaim_unpinned()

    def _unstage_written(self):
        # Segments rolled over and copied to their files to their end (synced, or
        # written out) give their images back for the spare to take; unmapped
        # (relocation maps what it reads from the file).
        if self._staging is None:
            return
        appender = self._appender
        with appender.sync_lock:
            with appender.lock:
                written = [segment for segment_id, segment in self._segments.items()
                           if segment.slot is not None and segment_id != self._active_id
                           and segment.mapped.copied_bytes >= segment.mapped.written_bytes]
            for segment in written:
                # First what may fail: a segment is unstaged whole or not at all (one
                # left unmapped but holding its image stopped every later round).
                direct_writes(segment.fd, False)
                segment.mapped.unmap()
                segment.mapped = None
                self._staging.give(segment.slot)
                segment.slot = None

    def _reclaim_unpinned(self):
        appender = self._appender
        gone = 0
        try:
            with appender.sync_lock:
                with appender.lock:
                    watermark = self._watermark_locked()
                    victims = [s for i, s in self._segments.items() if i < watermark]
                    for segment in victims:
                        del self._segments[segment.segment_id]
                        appender.forget_locked(segment.segment_id)
                    want_spare = self._spare is None
                try:
                    for segment in victims:
                        if want_spare and segment.size_bytes == self.segment_bytes:
                            want_spare = not self._recycle(segment)
                            if not want_spare:
                                gone += 1
                                continue
                        self._delete(segment)
                        gone += 1
                except WalStorageError:
                    # Oldest first, and none after one that stays: recovery reads the
                    # log from the oldest segment file there is, and one left behind a
                    # later one deleted would name a segment gone in its ROLL entry --
                    # every live segment after it would be discarded.
                    self._keep_unreclaimed(victims[gone:])
                    raise
        finally:
            if gone:
                appender.mark_directory_changed()
                self._room_changed()
        return gone

    def _keep_unreclaimed(self, segments):
        """With the appender's sync_lock held: segments (ascending) that reclaiming
        could not remove stay in the log, to be reclaimed by a later round, and on
        disk to their ROLL entries (forgotten by the appender's syncs, they are synced
        here): the log still leads from them to the segments after them."""
        with self._appender.lock:
            for segment in reversed(segments):
                self._segments[segment.segment_id] = segment
                self._segments.move_to_end(segment.segment_id, last=False)
        for segment in segments:
            if segment.mapped is not None:
                segment.mapped.sync(0, segment.mapped.written_bytes)
            _os_call("cannot sync WAL segment", segment.path, os.fsync, segment.fd)

    def _recycle(self, segment):
        """segment becomes the spare; False if it cannot (then it is deleted)."""
        spare_path = os.path.join(self.directory, SPARE_NAME)
        try:
            if segment.slot is None:
                self._map(segment)
            segment.mapped.prefault()
            os.rename(segment.path, spare_path)
        except (OSError, WalError) as exc:
            _log.warning("WAL %s: cannot recycle %s (%s); deleting it", self.directory,
                         segment.path, exc)
            return False
        segment.path = spare_path
        segment.mapped.path = spare_path
        with self._appender.lock:
            self._spare = segment
            self._counts["segments_reclaimed"] += 1
            self._counts["segments_recycled"] += 1
        return True

    def _delete(self, segment):
        self._remove_segment_file(segment)
        with self._appender.lock:
            self._total_bytes -= segment.size_bytes
            self._counts["segments_reclaimed"] += 1
            self._counts["segments_deleted"] += 1

    def _create_segment(self, path, size_bytes):
        """A new segment file of size_bytes, its blocks allocated (a write through a
        mapping of it can then not fail for lack of space: mmap would answer that with
        SIGBUS), mapped (_map).  The header is the caller's to write.

        Raises:
            WalStorageError: the disk is full, or the directory not writable (names
                path).
        """
        fd = _os_call("cannot create WAL segment", path, os.open, path,
                      os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        segment = _SegmentFile(None, path, fd, size_bytes)
        try:
            try:
                os.posix_fallocate(fd, 0, size_bytes)
            except OSError as exc:
                what = ("disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                        else exc.strerror)
                raise WalStorageError(f"cannot allocate {size_bytes} bytes for WAL segment "
                                      f"{path}: {what}", errno=exc.errno) from None
            self._map(segment)
        except BaseException:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        return segment

    def _map(self, segment):
        """Maps segment (not staged) to be written: staged in a free shared-memory image
        when the log stages (wal_staging.py), else its file (the mapping it has, if
        any, is kept)."""
        slot = None
        if self._staging is not None and segment.size_bytes == self._staging.size_bytes:
            slot = self._staging.take()
        if slot is None:
            if segment.mapped is None:
                segment.mapped = MappedSegment(segment.fd, segment.size_bytes, segment.path)
            return
        if segment.mapped is not None:
            # No mapping may see the file while O_DIRECT writes to it.
            segment.mapped.unmap()
            segment.mapped = None
        try:
            direct_writes(segment.fd, True)
            segment.mapped = MappedSegment(segment.fd, segment.size_bytes, segment.path,
                                           slot.mapping)
        except BaseException:
            self._staging.give(slot)
            raise
        segment.slot = slot

    def _remove_segment_file(self, segment):
        """Deletes a segment that is no part of the log any more, then unmaps and closes
        it: one the OS refuses to delete is left as it was (its image, if staged, still
        holding what its file may lack).

        Raises:
            WalStorageError: the file cannot be deleted (names it).
        """
        try:
            _os_call("cannot delete WAL segment", segment.path, os.unlink, segment.path)
        except WalStorageError as exc:
            if exc.errno != errno.ENOENT:
                raise
        self._close_segment_file(segment)

    def _close_segment_file(self, segment):
        """Unmaps and closes a segment file (once: its fd is -1 after)."""
        if segment.mapped is not None:
            segment.mapped.unmap()
            segment.mapped = None
        if segment.slot is not None:
            self._staging.give(segment.slot)
            segment.slot = None
        if segment.fd >= 0:
            os.close(segment.fd)
            segment.fd = -1

    def _prepare_spare(self):
        # A new file only once the active segment is half full: until then a segment
        # reclaimed meanwhile (its pages mapped, its blocks allocated) can be the spare.
        if self._appender.room_bytes > self.segment_bytes // 2:
            return
        with self._appender.lock:
            if (self._spare is not None
                    or self._total_bytes + self.segment_bytes > self._record_limit_bytes):
                return
            self._total_bytes += self.segment_bytes  # claimed before the file exists
        try:
            spare = self._create_segment(os.path.join(self.directory, SPARE_NAME),
                                         self.segment_bytes)
            spare.mapped.prefault()
        except BaseException:
            with self._appender.lock:
                self._total_bytes -= self.segment_bytes
            raise
        with self._appender.lock:
            self._spare = spare
            self._counts["spares_created"] += 1
        self._room_changed()

    # ------------------------------------------------------------------
    # Closing.

    def close(self):
        """Stops the housekeeping thread, syncs (fsync "never": writes out what the
        files lack), unmaps and closes every file, and releases the directory.  Calling
        it again does nothing."""
        with self._work:
            if self._closing:
                return
            self._closing = True
            self._work.notify_all()
        if self._housekeeper is not threading.current_thread():
            self._housekeeper.join()
        in_files = False
        try:
            if self.fsync != "never":
                self._appender.sync()
            else:
                self._appender.write_out()
            in_files = True
        finally:
            with self._appender.sync_lock:
                with self._appender.lock:
                    self._appender.close_locked()
                    segments = list(self._segments.values())
                    if self._spare is not None:
                        segments.append(self._spare)
                    self._segments.clear()
                    self._spare = None
                for segment in segments:
                    if segment.mapped is not None:
                        segment.mapped.unmap()
                    os.close(segment.fd)
            if self._staging is not None:
                # After a failed sync or write-out the images hold what the files
                # lack: kept, for the next producer on the directory to copy.
                self._staging.close(remove=in_files)
            self._release_files()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def release_lock_after_fork(self):
        """In a child of os.fork(), on its only thread: closes the child's copy of the
        lock file's fd.  The parent keeps the directory (a flock belongs to the open
        file, which the parent's fd holds too); the child, which cannot use the log,
        would otherwise hold it as long as it lives -- after the parent died, every
        producer opened on the directory would be refused.  Closing, not unlocking: an
        unlock here would release the parent's lock too."""
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _release_files(self):
        if self._dir_fd >= 0:
            os.close(self._dir_fd)
            self._dir_fd = -1
        if self._lock_fd >= 0:
            # Unlocked before closing: a child forked a moment ago may still hold a copy
            # of this fd (its fork hook drops it), and a flock only goes with the last
            # copy's close.  The child's hook itself must never unlock.
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def metrics(self):
        """The appender's counters (entries, bytes, syncs, rolls, positions) and the
        log's: segments, bytes on disk, live batches, segments created / recycled /
        reclaimed / deleted, batches and bytes relocated (copied forward) and
        relocations deferred as not worth their copy, times the log was full for a
        record, the CPU its housekeeping thread used (interval syncs, prefaulting,
        reclaiming), shared-memory images made and segments staged in them
        (wal_staging.py), and what recovery found (torn entries, segments discarded)."""
        snapshot = self._appender.metrics()
        with self._appender.lock:
            snapshot.update(self._counts)
            snapshot["segments"] = len(self._segments)
            snapshot["disk_bytes"] = self._total_bytes
            snapshot["live_batches"] = len(self._live)
        for key in ("segments_created", "segments_recycled", "segments_reclaimed",
                    "segments_deleted", "segments_over_bound", "spares_created", "full",
                    "batches_relocated", "bytes_relocated", "relocations_deferred"):
            snapshot.setdefault(key, 0)
        snapshot["housekeeping_cpu_ns"] = self._housekeeping_cpu_ns
        snapshot["staging_images"], snapshot["segments_staged"] = (
            (0, 0) if self._staging is None else self._staging.counts())
        snapshot["torn_entries"] = self._recovery.torn_entries
        snapshot["segments_discarded"] = self._recovery.segments_discarded
        return snapshot

    # ------------------------------------------------------------------
    # Recovery (in __init__, before any other thread knows the log).

    def _recover(self):
        found = self._open_segment_files()
        try:
            return self._recover_from(found)
        except BaseException:
            # A log that cannot be opened keeps none of its files open: a caller that
            # retries (a supervisor restarting the producer) would run out of fds.
            for segment in found + list(self._segments.values()):
                self._close_segment_file(segment)
            raise

    def _recover_from(self, found):
        chain, discarded, torn, done_ids, max_batch_id = self._read_chain(found)
        # Nothing past the end of the log was ever reported durable.
        for segment in discarded:
            _log.warning("WAL %s: %s is past the end of the log (a crash before it was "
                         "synced); deleted", self.directory, segment.path)
            self._remove_segment_file(segment)
        sealed, unsealed, max_batch_id = self._read_batches(chain, done_ids, max_batch_id)
        last_id = max([s.segment_id for s in found], default=0)
        self._next_segment_id = last_id + 1
        self._next_batch_id = max_batch_id + 1
        for segment, _, _ in chain:
            self._segments[segment.segment_id] = segment
            self._total_bytes += segment.size_bytes
        # Recovered batches are live (keeping their segments) until log_done() says
        # what replaying them came to.
        for batch in sealed + unsealed:
            self._live[batch.batch_id] = batch.first_segment_id
            self._pins[batch.first_segment_id] += 1
        # Staging starts anew (fsync "interval" and "never": see wal_staging.py).
        if self.fsync != "always" and self.segment_bytes % _wal.STAGE_ALIGN_BYTES == 0:
            if os.path.isdir(wal_staging.SHM_DIR):
                self._staging = StagingArea(self.directory, self._dir_fd, self.segment_bytes)
            else:
                # As when shared memory has no room for an image (StagingArea.take).
                _log.warning("WAL %s: no %s for shared-memory images; segments are mapped "
                             "from their files, and appends cost more per record",
                             self.directory, wal_staging.SHM_DIR)
        first = self._roll_locked(0, True)
        if chain:
            last, end, _ = chain[-1]
            # Close the dead producer's log where it ends, naming our first segment.
            last.mapped.write_roll(end, first.segment_id)
            last.mapped.sync(0, end + _wal.ROLL_ENTRY_BYTES)
        for segment, _, _ in chain:
            segment.mapped.unmap()
            segment.mapped = None
        first.sync(0, _wal.HEADER_BYTES)
        _os_call("cannot sync the WAL directory", self.directory, os.fsync, self._dir_fd)
        self._appender.start(first, 0)
        return Recovery(sealed, unsealed, torn, len(discarded), len(chain))

    def _open_segment_files(self):
        """Every segment file of the directory, ascending, with its header checked
        (mapped when the header is good, else mapped is None); stale spares deleted."""
        found = []
        try:
            names = sorted(os.listdir(self.directory))
        except OSError as exc:
            raise WalStorageError(f"cannot list WAL directory {self.directory}: "
                                  f"{exc.strerror}", errno=exc.errno) from None
        try:
            for name in names:
                path = os.path.join(self.directory, name)
                if name == SPARE_NAME:
                    _os_call("cannot delete", path, os.unlink, path)
                    continue
                match = _SEGMENT_NAME.fullmatch(name)
                if match is None:
                    continue
                fd = _os_call("cannot open WAL segment", path, os.open, path, os.O_RDWR)
                segment = _SegmentFile(int(match.group(1)), path, fd, 0)
                found.append(segment)  # closed below if what follows fails
                segment.size_bytes = _os_call("cannot open WAL segment", path, os.fstat,
                                              fd).st_size
                segment.header_fault = self._header_fault(segment)
                if segment.header_fault is None:
                    segment.mapped = segment.map_for_reading()
        except BaseException:
            # The files opened before the one that failed (to open, or to check).
            for opened in found:
                self._close_segment_file(opened)
            raise
        return found

    def _image_segment_path(self, raw, image):
        """The segment file a dead producer's image (path `image`) belongs to, from
        the image's header (raw: its first bytes); None for a header that is not a
        good one (an image is empty if its producer was killed as it made it).

        Raises:
            WalVersionError: another format version wrote the image: it holds what
                that version's segment lacks, for that version to copy (as segments,
                refused before anything is dropped).
        """
        if len(raw) < _wal.HEADER_BYTES:
            return None
        magic, version, _, segment_id, _, _, _ = _HEADER.unpack_from(raw)
        if magic == MAGIC and version != FORMAT_VERSION:
            raise WalVersionError(
                f"{image} (the shared-memory image of a segment of {self.directory}) was "
                f"written in WAL format version {version}; this netkafka reads version "
                f"{FORMAT_VERSION}: replay the directory with the netkafka that wrote it, "
                f"or move it away")
        (crc,) = _HEADER_CRC.unpack_from(raw, _HEADER.size)
        if magic != MAGIC or crc != crc32c(raw[:_HEADER.size]):
            return None
        return os.path.join(self.directory, segment_name(segment_id))

    def _header_fault(self, segment):
        """None for a good header; else what is wrong with it, for a header a crash may
        have left unfinished (judged by _check_unfinished when the log reaches it).

        Raises:
            WalCorruptError: the file is not a netkafka WAL segment, or its header has
                a good checksum and a size the file does not have (no crash makes
                one: the header is written after the file is allocated to its size).
            WalVersionError: another format version wrote it.
        """
        if segment.size_bytes < _wal.HEADER_BYTES:
            return f"is {segment.size_bytes} bytes, too short for a header"
        raw = _os_call("cannot read WAL segment", segment.path, os.pread, segment.fd,
                       _wal.HEADER_BYTES, 0)
        magic, version, _, segment_id, _, _, size_bytes = _HEADER.unpack_from(raw)
        if magic != MAGIC:
            if raw.count(0) == len(raw):
                return "has a header of zeros"  # created, header never written
            raise WalCorruptError(f"{segment.path} is not a netkafka WAL segment "
                                  f"(magic {magic!r}); move it out of the WAL directory")
        if version != FORMAT_VERSION:
            raise WalVersionError(
                f"{segment.path} was written in WAL format version {version}; this "
                f"netkafka reads version {FORMAT_VERSION}: replay the directory with the "
                f"netkafka that wrote it, or move it away")
        (crc,) = _HEADER_CRC.unpack_from(raw, _HEADER.size)
        if crc != crc32c(raw[:_HEADER.size]):
            return "has a header whose checksum is wrong"
        if size_bytes != segment.size_bytes:
            raise WalCorruptError(f"{segment.path}: its header says {size_bytes} bytes, the "
                                  f"file is {segment.size_bytes} bytes (truncated or "
                                  f"extended); nothing was deleted")
        if size_bytes < _wal.HEADER_BYTES + _wal.ROLL_ENTRY_BYTES:
            # No writer makes one (a segment holds at least its largest entry): read
            # as it is, it would not even hold the ROLL entry that ends it.
            raise WalCorruptError(f"{segment.path}: a WAL segment of {size_bytes} bytes "
                                  f"cannot hold entries; move it out of the WAL directory")
        if segment_id != segment.segment_id:
            # A spare renamed to this segment, its new header lost with its image.
            return f"has the header of segment {segment_id}"
        return None

    def _check_unfinished(self, segment, later):
        """The log reached segment, whose header is not good: returns if a crash can
        have left it so (then it held nothing reported durable, and is discarded with
        what follows); else raises.

        A header is written (into the file's pages, or its image) before any entry of
        its segment, and synced with them (a sync covers a segment from its byte 0, and
        syncs rolled segments before later ones; a killed process leaves its pages and
        images, which are copied back).  So a crash leaves a bad header only on the last
        segment, with no entry of its own behind it.

        Raises:
            WalCorruptError: a later segment has a good header, or this one holds an
                entry with a good checksum (names the file and what is wrong).
        """
        fault = segment.header_fault
        following = [s for s in later if s.mapped is not None]
        if following:
            raise WalCorruptError(
                f"{segment.path} {fault}, yet the log goes on in {following[0].path}: a "
                f"corrupt segment header, not a crash; nothing was deleted")
        if segment.size_bytes < _wal.HEADER_BYTES + _wal.ROLL_ENTRY_BYTES:
            return
        mapped = segment.map_for_reading()
        try:
            entries, end, _ = _wal.scan(mapped, done_only=True)
        finally:
            mapped.unmap()
        if entries or end > _wal.HEADER_BYTES:
            raise WalCorruptError(
                f"{segment.path} {fault}, yet holds entries with good checksums (up to "
                f"offset {end}): a corrupt segment header, not a crash; nothing was "
                f"deleted")

    def _read_chain(self, found):
        """Follows the log from the oldest segment: (chain, discarded, torn,
        done_ids, max_batch_id), chain a list of (segment, end offset, entries of
        the first pass)."""
        chain, done_ids, max_batch_id, torn = [], set(), 0, 0
        expected = None
        for position, segment in enumerate(found):
            if expected is not None and segment.segment_id != expected:
                break
            if segment.mapped is None:
                self._check_unfinished(segment, found[position + 1:])
                break
            entries, end, status = _wal.scan(segment.mapped, done_only=True)
            chain.append((segment, end, entries))
            first_batch_id = _HEADER.unpack_from(segment.mapped.read(0, _HEADER.size))[4]
            max_batch_id = max(max_batch_id, first_batch_id - 1)
            for entry in entries:
                if entry[0] == _wal.DONE:
                    done_ids.add(entry[1])
                    max_batch_id = max(max_batch_id, entry[1])
            if status == _wal.SCAN_TORN:
                torn = 1
                _log.warning("WAL %s: torn entry at offset %d of %s (a crash mid-write); "
                             "the log ends there", self.directory, end, segment.path)
                break
            if not entries or entries[-1][0] != _wal.ROLL:
                break  # the end of the dead producer's log, or a lost tail
            expected = entries[-1][1]
        discarded = found[len(chain):]
        return chain, discarded, torn, done_ids, max_batch_id

    def _read_batches(self, chain, done_ids, max_batch_id):
        """The live batches of the chain: (sealed, unsealed, max_batch_id)."""
        reader = _BatchReader(self.directory)
        for segment, _, _ in chain:
            entries, _, _ = _wal.scan(segment.mapped, skip=done_ids)
            reader.feed(segment, entries)
        sealed, unsealed = reader.live()
        return sealed, unsealed, max(max_batch_id, reader.max_batch_id)

    # ------------------------------------------------------------------
    # Relocation (reclaim(), _reclaim_lock held).

    def _relocate(self):
        """Copies forward, as MOVE entries, the live batches that pin segments older
        than the threshold (the active segment's id, less one unless the log is short
        of room for records), and repins them; returns how many moved."""
        appender = self._appender
        with appender.lock:
            threshold = self._active_id - (0 if self._short_of_room_locked() else 1)
            pinned = [segment_id for segment_id in self._pins if segment_id < threshold]
            if not pinned:
                return 0
            attempt = (threshold, sum(self._pins[segment_id] for segment_id in pinned))
            if attempt == self._relocation_refused:
                return 0
            candidates = {batch_id for batch_id, segment_id in self._live.items()
                          if segment_id < threshold}
            oldest = min(pinned)
            segments = [segment for segment_id, segment in self._segments.items()
                        if segment_id >= oldest]
            freed_bytes = sum(segment.size_bytes for segment in segments
                              if segment.segment_id < threshold)
            active, end = appender.active_end_locked()
        # What is before `end` is written for good: read without the lock, which
        # send() needs.  The candidates keep these segments pinned meanwhile.
        reader = _BatchReader(self.directory)
        for segment in segments:
            if segment.mapped is None:  # a dead producer's, unmapped after recovery
                segment.mapped = segment.map_for_reading()
            last = segment.mapped is active
            entries, _, _ = _wal.scan(segment.mapped, only=candidates,
                                      end=end if last else -1)
            reader.feed(segment, entries)
            if last:
                break
        copy_bytes = sum(_move_bytes(batch) for batch in reader.batches.values())
        if 4 * copy_bytes > freed_bytes:
            self._relocation_refused = attempt
            with appender.lock:
                self._counts["relocations_deferred"] += 1
            _log.info("WAL %s: %d live batches pin %d bytes of segments; copying their "
                      "%d bytes forward would free too little, not yet", self.directory,
                      len(candidates), freed_bytes, copy_bytes)
            return 0
        moves = []
        with appender.lock:
            # What was appended meanwhile: the rest of that segment, and those after.
            later = [s for i, s in self._segments.items() if i > active.segment_id]
            entries, _, _ = _wal.scan(active, end, only=candidates)
            reader.feed(self._segments[active.segment_id], entries)
            for segment in later:
                reader.feed(segment, _wal.scan(segment.mapped, only=candidates)[0])
            reader.check()
            for batch_id in candidates:
                old = self._live.get(batch_id)
                if old is None:
                    continue  # done meanwhile
                batch = reader.batches.get(batch_id)
                if batch is not None and batch.records:
                    appender.append_move_locked(_move_payload(batch), batch.seal is not None)
                moves.append((batch_id, old, self._active_id))
        if self.fsync != "never":
            # The copies on disk before the originals may go.
            self.sync()
        with appender.lock:
            for batch_id, old, new in moves:
                if self._live.get(batch_id) == old:
                    self._live[batch_id] = new
                    self._pins[new] += 1
                    self._unpin_locked(old)
            self._counts["batches_relocated"] += len(moves)
            self._counts["bytes_relocated"] += copy_bytes
        self._relocation_refused = None
        return len(moves)


class _BatchReader:
    """Folds a log's entries, fed in log order, into the batches they describe: what
    recovery replays, and what relocation copies forward.

    A moved batch's entries before its MOVE may have lost their beginning with a
    reclaimed segment: an entry that does not follow its batch is an error only if
    no MOVE of that batch (nor its DONE) comes after it (check())."""

    def __init__(self, directory):
        self.directory = directory  # immutable: for error messages
        self.batches = {}  # batch id -> RecoveredBatch, live as far as fed
        # batch id -> why its entries do not add up, until a MOVE or DONE of it.
        self._broken = {}
        self.max_batch_id = 0

    def check(self):
        """Raises WalCorruptError if a batch's entries do not add up."""
        for message in self._broken.values():
            raise WalCorruptError(message)

    def live(self):
        """(sealed, unsealed): sealed in the order of their SEAL entries, unsealed in
        the order they were opened."""
        self.check()
        sealed = sorted((b for b in self.batches.values() if b.seal is not None),
                        key=lambda b: b.seal_place)
        unsealed = sorted((b for b in self.batches.values() if b.seal is None),
                          key=lambda b: b.batch_id)
        return sealed, unsealed

    def feed(self, segment, entries):
        """entries: scan()'s, of segment (a _SegmentFile)."""
        batches = self.batches
        for entry in entries:
            kind = entry[0]
            if kind == _wal.ROLL:
                continue
            batch_id = entry[1]
            self.max_batch_id = max(self.max_batch_id, batch_id)
            if batch_id in self._broken and kind != _wal.MOVE and kind != _wal.DONE:
                continue
            batch = batches.get(batch_id)
            if kind == _wal.RECORD:
                _, _, index, partition, timestamp_ms, topic, record, context = entry
                if batch is None:
                    batch = batches[batch_id] = RecoveredBatch(
                        batch_id, topic, partition, segment.segment_id)
                if batch.seal is not None or index != len(batch.records) or (
                        topic, partition) != (batch.topic, batch.partition):
                    self._break(batch_id,
                                f"WAL {self.directory}: record {index} of batch {batch_id} "
                                f"({topic}-{partition}) in {segment.path} does not follow "
                                f"the batch's {len(batch.records)} records of "
                                f"{batch.topic}-{batch.partition}")
                    continue
                batch.records.append(RecoveredRecord(index, timestamp_ms, record, context))
            elif kind == _wal.SEAL:
                # A sealed batch is sealed again by a replay that re-encodes it under
                # a new stamp (replay.py): the new SEAL supersedes the old one, and
                # places the batch where the replay sent it.
                (_, _, topic, partition, producer_id, epoch, base_sequence, count,
                 attributes, batch_crc, batch_bytes, offset) = entry
                if batch is None or count != len(batch.records):
                    self._break(batch_id, f"WAL {self.directory}: the seal of batch "
                                          f"{batch_id} in {segment.path} does not match "
                                          f"its records")
                    continue
                batch.seal = Seal(producer_id, epoch, base_sequence, count, attributes,
                                  batch_crc, batch_bytes)
                batch.seal_place = (segment.segment_id, offset)
            elif kind == _wal.RESTAMP:
                _, _, producer_id, epoch, base_sequence, batch_crc = entry
                if batch is None or batch.seal is None:
                    self._break(batch_id, f"WAL {self.directory}: batch {batch_id} "
                                          f"restamped in {segment.path} before it was "
                                          f"sealed")
                    continue
                batch.seal = batch.seal._replace(
                    producer_id=producer_id, producer_epoch=epoch,
                    base_sequence=base_sequence, batch_crc=batch_crc)
            elif kind == _wal.MOVE:
                # The whole batch as it was when copied: what came before is superseded.
                _, _, topic, partition, seal, seal_place, records = entry
                self._broken.pop(batch_id, None)
                batch = batches[batch_id] = RecoveredBatch(batch_id, topic, partition,
                                                           segment.segment_id)
                batch.records = [RecoveredRecord(index, timestamp_ms, record, context)
                                 for index, (timestamp_ms, record, context)
                                 in enumerate(records)]
                if seal is not None:
                    batch.seal = Seal(*seal)
                    batch.seal_place = seal_place
            else:  # DONE: nothing of it is replayed
                batches.pop(batch_id, None)
                self._broken.pop(batch_id, None)

    def _break(self, batch_id, message):
        self.batches.pop(batch_id, None)
        self._broken.setdefault(batch_id, message)


_MOVE_FIXED = struct.Struct("<QQQqiiihhIIH")
_MOVE_RECORD = struct.Struct("<qiI")


def _move_bytes(batch):
    """The bytes of batch's MOVE entry."""
    return (_wal.ENTRY_HEADER_BYTES + _wal.MOVE_FIXED_BYTES + len(batch.topic.encode())
            + sum(_wal.MOVE_RECORD_FIXED_BYTES + len(r.record) + len(r.context or b"")
                  for r in batch.records))


def _move_payload(batch):
    """batch (a RecoveredBatch) as a MOVE entry's payload (layout: _wal.pyx)."""
    seal = batch.seal
    topic = batch.topic.encode()
    if seal is None:
        fixed = (batch.batch_id, 0, 0, 0, batch.partition, 0, len(batch.records), 0, 0, 0, 0,
                 len(topic))
    else:
        fixed = (batch.batch_id, batch.seal_place[0], batch.seal_place[1], seal.producer_id,
                 batch.partition, seal.base_sequence, seal.record_count, seal.producer_epoch,
                 seal.attributes, seal.batch_crc, seal.batch_bytes, len(topic))
    parts = [_MOVE_FIXED.pack(*fixed), topic]
    for record in batch.records:
        context = record.context
        parts.append(_MOVE_RECORD.pack(record.timestamp_ms,
                                       -1 if context is None else len(context),
                                       len(record.record)))
        if context is not None:
            parts.append(context)
        parts.append(record.record)
    return b"".join(parts)



# ----------------------------------------------------------------------
# Files.

def _makedirs(directory):
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise WalStorageError(f"cannot create WAL directory {directory}: {exc.strerror}",
                              errno=exc.errno) from None
    if not os.path.isdir(directory):
        raise WalStorageError(f"WAL directory {directory} is not a directory",
                              errno=errno.ENOTDIR)


def _lock_directory(directory):
    """The lock file's fd, flock()ed (exclusive), holding our pid."""
    path = os.path.join(directory, LOCK_NAME)
    fd = _os_call("cannot open the lock file", path, os.open, path, os.O_RDWR | os.O_CREAT,
                  0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        os.close(fd)
        forked = (" -- this process's parent: a producer inherited across os.fork() "
                  "cannot use its parent's WAL" if holder == str(os.getppid()) else "")
        raise WalLockedError(
            f"WAL directory {directory} is in use by another producer (pid {holder}){forked}:"
            f" one producer per directory") from None
    except OSError as exc:
        os.close(fd)
        raise WalStorageError(f"cannot lock {path}: {exc.strerror}", errno=exc.errno) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise WalStorageError(f"cannot write {path}: {exc.strerror}", errno=exc.errno) from None
    return fd
