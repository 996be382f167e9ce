"""The write-ahead log's native half: entries appended into a memory-mapped segment.

wal.WriteAheadLog owns the directory (files, lock file, recovery, the housekeeping
thread); this module holds what runs per record and per sync:

    WalAppender.put_record()   one record entry: fixed fields, topic, context and the
                               record's Kafka encoding copied into the mapping, CRC32C,
                               tag stored last -- no syscall, no Python object
    WalAppender.ensure()       the one bounds check, before any write; a segment
                               without room rolls over to the next (cold, Python)
    WalAppender.sync_to()      group commit: the first caller syncs everything written
                               so far while the others wait, and finds their entries
                               durable when it is their turn

A segment is a 64-byte header (written by wal.py) and then entries framed as
csrc/wal_entry.h says.  Payloads, little-endian:

    RECORD   batch id u64 | index i32 | partition i32 | timestamp ms i64 |
             topic length u16 | context length u16 | record length u32 |
             topic | context | record        (flag bit 0: the record has a context)
    SEAL     batch id u64 | producer id i64 | partition i32 | base sequence i32 |
             record count i32 | producer epoch i16 | attributes i16 | batch CRC u32 |
             batch bytes u32 | topic length u16 | topic
    RESTAMP  batch id u64 | producer id i64 | base sequence i32 | producer epoch i16 |
             (0) u16 | batch CRC u32
    DONE     batch id u64 | outcome u32
    ROLL     next segment id u64
    MOVE     batch id u64 | SEAL's segment id u64 | SEAL's offset u64 | producer id i64 |
             partition i32 | base sequence i32 | record count i32 | producer epoch i16 |
             attributes i16 | batch CRC u32 | batch bytes u32 | topic length u16 | topic |
             then per record: timestamp ms i64 | context length i32 (-1: none) |
             record length u32 | context | record
             (flag bit 1: sealed -- the stamp fields and the SEAL's place are its
             seal's; else they are 0 and the record count is the records held)

Every ensure() keeps room for a ROLL entry behind the entry it makes room for, so a
segment can always be closed where its entries end.

Log positions count the bytes of every segment up to where it rolled over, so they
only grow; "durable up to position p" covers a prefix of the log, across segments.

Locking: see _wal.pxd.  The hot path (ensure_record_room, put_record) runs with the
appender's lock held by the accumulator, which takes it inside its own lock.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.errno cimport EINTR, EIO, errno
from libc.stdint cimport UINT64_MAX, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, strerror
from posix.mman cimport MAP_FAILED, MAP_SHARED, MS_SYNC, PROT_READ, PROT_WRITE
from posix.mman cimport mmap, msync, munmap
from posix.time cimport CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID, clock_gettime, timespec
from posix.unistd cimport fdatasync, fsync, pwrite, sysconf, _SC_PAGESIZE

from netkafka.producer._mutex cimport Mutex
from netkafka.record._batch cimport RecordBatchBuilder
from netkafka.csrc cimport (
    nk_read_uvarint64, NK_WAL_ENTRY_END, NK_WAL_ENTRY_HEADER_BYTES, NK_WAL_ENTRY_TORN, NK_WAL_ENTRY_VALID,
    nk_wal_check_entry, nk_wal_finish_entry, nk_wal_get16, nk_wal_get32, nk_wal_get64,
    nk_wal_put16, nk_wal_put32, nk_wal_put64, nk_wal_put_bytes, nk_wal_tag_crc,
)

from netkafka.errors import WalCorruptError, WalError, WalFullError, WalStorageError

cdef enum:
    _RECORD_FIXED_BYTES = 32
    _SEAL_FIXED_BYTES = 42
    _RESTAMP_BYTES = 28
    _DONE_BYTES = 12
    _ROLL_BYTES = 8
    _ROLL_ENTRY_BYTES = NK_WAL_ENTRY_HEADER_BYTES + _ROLL_BYTES
    _MOVE_FIXED_BYTES = 58
    _MOVE_RECORD_FIXED_BYTES = 16
    _FLAG_CONTEXT = 1
    _FLAG_SEALED = 2

RECORD = ENTRY_RECORD
SEAL = ENTRY_SEAL
RESTAMP = ENTRY_RESTAMP
DONE = ENTRY_DONE
ROLL = ENTRY_ROLL
MOVE = ENTRY_MOVE
MOVE_FIXED_BYTES = _MOVE_FIXED_BYTES
MOVE_RECORD_FIXED_BYTES = _MOVE_RECORD_FIXED_BYTES
FLAG_SEALED = _FLAG_SEALED
HEADER_BYTES = SEGMENT_HEADER_BYTES
ENTRY_HEADER_BYTES = NK_WAL_ENTRY_HEADER_BYTES
ROLL_ENTRY_BYTES = _ROLL_ENTRY_BYTES
RECORD_OVERHEAD_BYTES = NK_WAL_ENTRY_HEADER_BYTES + _RECORD_FIXED_BYTES
TOPIC_LIMIT_BYTES = MAX_TOPIC_BYTES
CONTEXT_LIMIT_BYTES = MAX_CONTEXT_BYTES

# What scan() found where it stopped.
SCAN_END = NK_WAL_ENTRY_END
SCAN_TORN = NK_WAL_ENTRY_TORN

cdef Py_ssize_t _PAGE_BYTES = sysconf(_SC_PAGESIZE)

cdef extern from "<sys/mman.h>" nogil:
    int madvise(void *addr, size_t length, int advice)

cdef enum:
    # Linux's, from 5.14: fault every page in for writing (a write fault, without a write).
    _MADV_POPULATE_WRITE = 23
    # A staged segment's syncs write whole blocks of this size, at offsets that are
    # multiples of it (what O_DIRECT asks of the largest logical blocks disks have).
    _STAGE_ALIGN_BYTES = 4096

STAGE_ALIGN_BYTES = _STAGE_ALIGN_BYTES


cdef inline uint64_t _clock_ns(int clock) noexcept nogil:
    cdef timespec now
    clock_gettime(clock, &now)
    return <uint64_t>now.tv_sec * 1000000000 + <uint64_t>now.tv_nsec


cdef object _os_error(str what, object path, int code):
    return WalStorageError(f"{what} {path}: {strerror(code).decode()}", errno=code)


# ----------------------------------------------------------------------------------
# Segments


@cython.final
cdef class MappedSegment:
    """A segment file mapped into memory (MAP_SHARED, read-write), or staged: written
    in the mapping of a shared-memory image instead, and copied to the file at each
    sync and write-out.

    Staged, the pages entries are written to are shared memory, which the kernel never
    writes back: they stay mapped writable from segment to segment, where a file's
    pages are write-protected by each writeback and fault again when next written (the
    cost of fsync "interval", see wal_staging.py).  A killed process leaves the image
    behind; the next producer copies it to the segment file before it reads the log.

    Args:
        fd: the open segment file (read-write); the caller keeps it and closes it.
        size_bytes: the file's length.
        path: the file's path, for error messages.
        image: None, or the MappedSegment of a shared-memory file of size_bytes to
            write in (staged), which keeps its mapping.  size_bytes must then be a
            multiple of STAGE_ALIGN_BYTES, so that syncs write whole blocks (fd may be
            open with O_DIRECT).

    Raises:
        WalStorageError: mmap failed (names the file and the OS's reason).
    """

    def __cinit__(self, int fd, Py_ssize_t size_bytes, path, MappedSegment image=None):
        cdef void *p
        cdef int code = 0
        if size_bytes < SEGMENT_HEADER_BYTES + _ROLL_ENTRY_BYTES:
            raise ValueError(f"a segment of {size_bytes} bytes has no room for entries")
        self.path = path
        self.size_bytes = size_bytes
        self._copy_fd = -1
        if image is not None:
            if image._base == NULL or image.size_bytes != size_bytes:
                raise ValueError(f"the image {image.path} cannot stage a segment of "
                                 f"{size_bytes} bytes")
            if size_bytes % _STAGE_ALIGN_BYTES:
                raise ValueError(f"a staged segment of {size_bytes} bytes is not a "
                                 f"multiple of {_STAGE_ALIGN_BYTES}")
            self._image = image
            self._base = image._base
            self._copy_fd = fd
            return
        with nogil:
            p = mmap(NULL, <size_t>size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
            if p == MAP_FAILED:
                code = errno
        if p == MAP_FAILED:
            raise _os_error("cannot map WAL segment", path, code)
        self._base = <unsigned char *>p

    def __dealloc__(self):
        if self._base != NULL and self._image is None:
            munmap(self._base, <size_t>self.size_bytes)

    @property
    def mapped(self):
        return self._base != NULL

    def unmap(self):
        """Removes the mapping (the caller holds the appender's sync_lock, or no
        appender has seen this segment)."""
        if self._base != NULL and self._image is None:
            munmap(self._base, <size_t>self.size_bytes)
        self._base = NULL
        self._image = None

    cdef int _check_range(self, Py_ssize_t offset, Py_ssize_t n) except -1:
        if self._base == NULL or (self._image is not None and self._image._base == NULL):
            raise ValueError(f"WAL segment {self.path} is not mapped")
        if offset < 0 or n < 0 or offset + n > self.size_bytes:
            raise ValueError(f"bytes {offset}..{offset + n} are outside WAL segment "
                             f"{self.path} of {self.size_bytes} bytes")
        return 0

    def read(self, Py_ssize_t offset, Py_ssize_t n):
        """n bytes from offset, copied."""
        self._check_range(offset, n)
        return PyBytes_FromStringAndSize(<char *>self._base + offset, n)

    def write(self, Py_ssize_t offset, data):
        """Copies data (bytes-like) to offset: headers and cuts, not entries."""
        cdef Py_buffer view
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            self._check_range(offset, view.len)
            memcpy(self._base + offset, view.buf, view.len)
            self.copied_bytes = min(self.copied_bytes, offset)
        finally:
            PyBuffer_Release(&view)

    def prefault(self, Py_ssize_t start=0):
        """Maps the pages from offset start on writable now (madvise
        MADV_POPULATE_WRITE), so that appends reaching them later take no page fault
        -- a fault per page cost more than the rest of an append.  The contents do not
        change, but the pages count as written: the OS writes them back like entries.
        False where the kernel lacks it (before Linux 5.14): appends fault as they go,
        that is all.  Staged, nothing to do: the image was prefaulted once, and its
        pages stay mapped writable."""
        cdef Py_ssize_t aligned = start - start % _PAGE_BYTES
        cdef int rc
        self._check_range(aligned, 0)
        if self._image is not None:
            return True
        with nogil:
            rc = madvise(self._base + aligned, <size_t>(self.size_bytes - aligned),
                         _MADV_POPULATE_WRITE)
        return rc == 0

    def write_roll(self, Py_ssize_t offset, uint64_t next_segment_id):
        """Ends this segment's log at offset with a ROLL entry naming the next segment:
        recovery closes a dead producer's last segment (or cuts a torn one) so."""
        self._check_range(offset, _ROLL_ENTRY_BYTES)
        _put_roll(self._base + offset, self.tag, next_segment_id)
        self.copied_bytes = min(self.copied_bytes, offset)

    def sync(self, Py_ssize_t start=0, end=None):
        """Writes bytes start..end (default: all) to disk and waits (msync; staged: a
        write of the blocks the file lacks up to end, then fdatasync)."""
        self._sync(start, self.size_bytes if end is None else end)

    cdef int _sync(self, Py_ssize_t start, Py_ssize_t end) except -1:
        # msync needs a page-aligned start; the bytes before it in its page go too.
        # Staged, copied_bytes says where the file's copy ends, whatever start is; the
        # file is synced even when it lacks nothing (a write-out copied it unsynced).
        cdef Py_ssize_t aligned
        cdef int rc = 0, code = 0
        if end <= start:
            return 0
        if self._copy_fd >= 0:
            self._write_out(end)
            with nogil:
                rc = fdatasync(self._copy_fd)
                if rc != 0:
                    code = errno
        else:
            self._check_range(start, end - start)
            aligned = start - start % _PAGE_BYTES
            with nogil:
                rc = msync(self._base + aligned, <size_t>(end - aligned), MS_SYNC)
                if rc != 0:
                    code = errno
        if rc != 0:
            raise _os_error("cannot sync WAL segment", self.path, code)
        return 0

    cdef int _write_out(self, Py_ssize_t end) except -1:
        # Staged: the image's bytes from copied_bytes to end into the file, without
        # waiting for the disk.  Whole blocks (O_DIRECT needs them): the block of
        # copied_bytes again, and the rest of end's block with whatever the image holds
        # there.  Not staged, or copied already: nothing to do (an unmapped segment
        # whose image went back once copied gets here from a later sync).
        cdef Py_ssize_t aligned, stop
        cdef ssize_t n
        cdef int rc = 0, code = 0
        if self._copy_fd < 0 or end <= self.copied_bytes:
            return 0
        self._check_range(self.copied_bytes, end - self.copied_bytes)
        aligned = self.copied_bytes - self.copied_bytes % _STAGE_ALIGN_BYTES
        stop = end + (_STAGE_ALIGN_BYTES - end % _STAGE_ALIGN_BYTES) % _STAGE_ALIGN_BYTES
        with nogil:
            while aligned < stop:
                n = pwrite(self._copy_fd, self._base + aligned, <size_t>(stop - aligned),
                           aligned)
                if n > 0:
                    aligned += n
                elif n < 0 and errno == EINTR:
                    continue
                else:
                    rc = -1
                    code = errno if n < 0 else EIO
                    break
        if rc != 0:
            raise _os_error("cannot write WAL segment", self.path, code)
        self.copied_bytes = end
        return 0


cdef const char *_topic_utf8(object topic, Py_ssize_t *length) except NULL:
    # A topic's UTF-8 (cached in the str), refused past the length an entry holds.
    cdef const char *utf8 = PyUnicode_AsUTF8AndSize(topic, length)
    if length[0] > MAX_TOPIC_BYTES:
        raise ValueError(f"topic {topic!r} is {length[0]} bytes long: the WAL takes topics "
                         f"of at most {MAX_TOPIC_BYTES}")
    return utf8


cdef inline void _put_roll(unsigned char *entry, uint32_t tag, uint64_t next_segment_id) noexcept:
    nk_wal_put64(entry + NK_WAL_ENTRY_HEADER_BYTES, next_segment_id)
    nk_wal_finish_entry(entry, tag, nk_wal_tag_crc(tag), ENTRY_ROLL, 0, _ROLL_BYTES)


def scan(MappedSegment segment not None, Py_ssize_t start=SEGMENT_HEADER_BYTES,
         bint done_only=False, skip=None, only=None, Py_ssize_t end=-1):
    """The entries of segment from offset start, until its log ends.

    Args:
        segment: a mapped segment whose tag is set.
        start: offset of the first entry.
        done_only: only DONE and ROLL entries are decoded (the first pass of recovery).
        skip: None, or a set of batch ids whose RECORD, SEAL, RESTAMP and MOVE entries
            are passed over (batches already done).
        only: None, or a set of batch ids: the RECORD, SEAL, RESTAMP, MOVE and DONE
            entries of other batches are passed over.
        end: -1, or an offset the scan stops at (where a writer's entries were known
            complete: what lies beyond may be half written).

    Returns:
        (entries, end, status): entries as tuples, in order --
            (RECORD, batch_id, index, partition, timestamp_ms, topic, record, context)
            (SEAL, batch_id, topic, partition, producer_id, producer_epoch,
                   base_sequence, record_count, attributes, batch_crc, batch_bytes,
                   offset)   (offset: the entry's, which places the seal in the log)
            (RESTAMP, batch_id, producer_id, producer_epoch, base_sequence, batch_crc)
            (DONE, batch_id, outcome)
            (ROLL, next_segment_id)
            (MOVE, batch_id, topic, partition, seal, seal_place, records) -- seal None
                (unsealed) or (producer_id, producer_epoch, base_sequence,
                record_count, attributes, batch_crc, batch_bytes); seal_place
                (segment id, offset) of the batch's SEAL entry; records a list of
                (timestamp_ms, record, context)
        -- end, the offset where the log stops (after a ROLL entry: its start), and
        status, SCAN_END (clean) or SCAN_TORN (an entry with this segment's tag whose
        checksum or length is wrong starts at end).

    Raises:
        WalCorruptError: an entry with a good checksum whose payload does not parse
            (names the segment and offset).
    """
    cdef const unsigned char *base = segment._base
    cdef const unsigned char *p
    cdef Py_ssize_t pos = start, size = segment.size_bytes if end < 0 else end
    cdef uint32_t length = 0, tag = segment.tag, tag_crc = nk_wal_tag_crc(segment.tag)
    cdef uint8_t kind = 0, flags = 0
    cdef int status
    cdef uint64_t batch_id
    cdef dict topics = {}
    entries = []
    segment._check_range(start, 0)
    segment._check_range(size, 0)
    while True:
        status = nk_wal_check_entry(base + pos, <size_t>(size - pos), tag, tag_crc, &length,
                                    &kind, &flags)
        if status != NK_WAL_ENTRY_VALID:
            return entries, pos, status
        p = base + pos + NK_WAL_ENTRY_HEADER_BYTES
        if kind == ENTRY_ROLL:
            _expect(length == _ROLL_BYTES, segment, pos)
            entries.append((ENTRY_ROLL, nk_wal_get64(p)))
            return entries, pos, NK_WAL_ENTRY_END
        if kind == ENTRY_DONE:
            _expect(length == _DONE_BYTES, segment, pos)
            batch_id = nk_wal_get64(p)
            if only is None or batch_id in only:
                entries.append((ENTRY_DONE, batch_id, nk_wal_get32(p + 8)))
        elif (kind == ENTRY_RECORD or kind == ENTRY_SEAL or kind == ENTRY_RESTAMP
              or kind == ENTRY_MOVE):
            # Each of these payloads starts with its batch id: read before the payload
            # is decoded (or when it is passed over), so checked here.
            _expect(length >= 8, segment, pos)
            batch_id = nk_wal_get64(p)
            if not done_only and (skip is None or batch_id not in skip) and (
                    only is None or batch_id in only):
                entries.append(_decode(kind, flags, p, length, segment, pos, topics))
        else:
            raise WalCorruptError(f"WAL segment {segment.path}: unknown entry type {kind} "
                                  f"at offset {pos}")
        pos += NK_WAL_ENTRY_HEADER_BYTES + length


cdef int _expect(bint condition, MappedSegment segment, Py_ssize_t pos) except -1:
    if not condition:
        raise WalCorruptError(f"WAL segment {segment.path}: the entry at offset {pos} has "
                              f"a good checksum but does not parse")
    return 0


cdef object _topic(const unsigned char *p, Py_ssize_t n, dict topics,
                   MappedSegment segment, Py_ssize_t pos):
    # Topics repeat: one str per distinct name.  Written from a str, so UTF-8: other
    # bytes are a corrupt entry, not a UnicodeDecodeError for the caller to puzzle over.
    raw = PyBytes_FromStringAndSize(<const char *>p, n)
    topic = topics.get(raw)
    if topic is None:
        try:
            topic = topics[raw] = PyUnicode_DecodeUTF8(<const char *>p, n, "strict")
        except UnicodeDecodeError:
            _expect(False, segment, pos)
    return topic


cdef tuple _decode(uint8_t kind, uint8_t flags, const unsigned char *p, uint32_t length,
                   MappedSegment segment, Py_ssize_t pos, dict topics):
    cdef uint16_t topic_len, context_len
    cdef uint32_t record_len
    cdef const unsigned char *q
    if kind == ENTRY_RESTAMP:
        _expect(length == _RESTAMP_BYTES, segment, pos)
        return (ENTRY_RESTAMP, nk_wal_get64(p), <int64_t>nk_wal_get64(p + 8),
                <int16_t>nk_wal_get16(p + 20), <int32_t>nk_wal_get32(p + 16),
                nk_wal_get32(p + 24))
    if kind == ENTRY_SEAL:
        _expect(length >= _SEAL_FIXED_BYTES, segment, pos)
        topic_len = nk_wal_get16(p + 40)
        _expect(length == <uint32_t>(_SEAL_FIXED_BYTES + topic_len), segment, pos)
        return (ENTRY_SEAL, nk_wal_get64(p), _topic(p + 42, topic_len, topics, segment, pos),
                <int32_t>nk_wal_get32(p + 16), <int64_t>nk_wal_get64(p + 8),
                <int16_t>nk_wal_get16(p + 28), <int32_t>nk_wal_get32(p + 20),
                <int32_t>nk_wal_get32(p + 24), <int16_t>nk_wal_get16(p + 30),
                nk_wal_get32(p + 32), nk_wal_get32(p + 36), pos)
    if kind == ENTRY_MOVE:
        return _decode_move(flags, p, length, segment, pos, topics)
    _expect(length >= _RECORD_FIXED_BYTES, segment, pos)
    topic_len = nk_wal_get16(p + 24)
    context_len = nk_wal_get16(p + 26)
    record_len = nk_wal_get32(p + 28)
    _expect(<uint64_t>length == <uint64_t>_RECORD_FIXED_BYTES + topic_len + context_len
            + record_len, segment, pos)
    q = p + _RECORD_FIXED_BYTES
    topic = _topic(q, topic_len, topics, segment, pos)
    q += topic_len
    context = (PyBytes_FromStringAndSize(<const char *>q, context_len)
               if flags & _FLAG_CONTEXT else None)
    q += context_len
    return (ENTRY_RECORD, nk_wal_get64(p), <int32_t>nk_wal_get32(p + 8),
            <int32_t>nk_wal_get32(p + 12), <int64_t>nk_wal_get64(p + 16), topic,
            PyBytes_FromStringAndSize(<const char *>q, record_len), context)


cdef tuple _decode_move(uint8_t flags, const unsigned char *p, uint32_t length,
                        MappedSegment segment, Py_ssize_t pos, dict topics):
    # Every length is checked against the entry's before it is used: the records'
    # fields are read from a payload whose checksum says only that we wrote it.
    cdef uint16_t topic_len
    cdef int32_t count, context_len, i
    cdef int64_t timestamp_ms
    cdef uint32_t record_len
    cdef uint64_t left
    cdef const unsigned char *q
    _expect(length >= _MOVE_FIXED_BYTES, segment, pos)
    topic_len = nk_wal_get16(p + 56)
    count = <int32_t>nk_wal_get32(p + 40)
    _expect(count >= 0 and length >= <uint32_t>(_MOVE_FIXED_BYTES + topic_len), segment, pos)
    seal = None
    if flags & _FLAG_SEALED:
        seal = (<int64_t>nk_wal_get64(p + 24), <int16_t>nk_wal_get16(p + 44),
                <int32_t>nk_wal_get32(p + 36), count, <int16_t>nk_wal_get16(p + 46),
                nk_wal_get32(p + 48), nk_wal_get32(p + 52))
    topic = _topic(p + _MOVE_FIXED_BYTES, topic_len, topics, segment,
                   pos)
    q = p + _MOVE_FIXED_BYTES + topic_len
    left = length - _MOVE_FIXED_BYTES - topic_len
    records = []
    for i in range(count):
        _expect(left >= _MOVE_RECORD_FIXED_BYTES, segment, pos)
        timestamp_ms = <int64_t>nk_wal_get64(q)
        context_len = <int32_t>nk_wal_get32(q + 8)
        record_len = nk_wal_get32(q + 12)
        q += _MOVE_RECORD_FIXED_BYTES
        left -= _MOVE_RECORD_FIXED_BYTES
        _expect(context_len >= -1 and left >= <uint64_t>(context_len if context_len > 0
                                                         else 0) + record_len,
                segment, pos)
        context = None
        if context_len >= 0:
            context = PyBytes_FromStringAndSize(<const char *>q, context_len)
            q += context_len
            left -= <uint64_t>context_len
        records.append((timestamp_ms, PyBytes_FromStringAndSize(<const char *>q, record_len),
                        context))
        q += record_len
        left -= record_len
    _expect(left == 0, segment, pos)
    return (ENTRY_MOVE, nk_wal_get64(p), topic, <int32_t>nk_wal_get32(p + 32), seal,
            (nk_wal_get64(p + 8), nk_wal_get64(p + 16)), records)


# ----------------------------------------------------------------------------------
# The appender


@cython.final
cdef class WalAppender:
    """Appends entries to the active segment; rolls over; syncs.

    Args:
        roll: roll(needed_bytes, control) -> MappedSegment or None, called with `lock`
            held when the active segment lacks room: the next segment, its header
            written (segment_id, tag and written_bytes set), with room for needed_bytes
            after its header -- or None when the log may not grow for records (control
            False); for control entries it must not return None.  It raises
            WalStorageError when the disk refuses.
        max_record_entry_bytes: the largest record entry the hot path may write: the
            room ensure_record_room() keeps.
        max_context_bytes: the largest context a record may carry.
        dir_fd: the directory holding the segments, fsynced after a roll.
    """

    def __cinit__(self, roll, Py_ssize_t max_record_entry_bytes, Py_ssize_t max_context_bytes,
                  int dir_fd):
        self.lock = Mutex()
        self.sync_lock = Mutex()
        self._roll = roll
        self.max_record_entry_bytes = max_record_entry_bytes
        self.max_context_bytes = max_context_bytes
        self._dir_fd = dir_fd
        self._unsynced = []

    def start(self, MappedSegment segment not None, uint64_t start_position):
        """The first active segment (its header written), at start_position of the log.
        Called once, before any append."""
        if self._active is not None:
            raise RuntimeError("the appender has started already")
        self._install(segment, start_position)
        self._durable = start_position

    cdef void _install(self, MappedSegment segment, uint64_t start_position) noexcept:
        self._active = segment
        self._base = segment._base
        self._tag = segment.tag
        self._tag_crc = nk_wal_tag_crc(segment.tag)
        self._pos = segment.written_bytes
        self._limit = segment.size_bytes - _ROLL_ENTRY_BYTES
        self._start = start_position

    # -- room ------------------------------------------------------------------------

    cdef int ensure(self, Py_ssize_t n, bint control) except -1:
        if self._pos + n <= self._limit:
            return 0
        return self._roll_over(n, control)

    cdef int ensure_record_room(self) except -1:
        return self.ensure(self.max_record_entry_bytes, False)

    cdef int _roll_over(self, Py_ssize_t n, bint control) except -1:
        # Cold: the active segment is full.  The next one comes from the owner; this
        # one is closed with a ROLL entry naming it and waits in _unsynced for a sync.
        cdef MappedSegment old, segment
        if self._failure is not None:
            raise WalStorageError(f"the WAL takes no entries after a failed sync or write: "
                                  f"{self._failure}", errno=self._failure.errno)
        if self._closed:
            raise WalError("the WAL is closed")
        segment = self._roll(n, control)
        if segment is None:
            if control:
                raise RuntimeError("the WAL's roll callback refused a control entry")
            return 1
        if segment.written_bytes + n + _ROLL_ENTRY_BYTES > segment.size_bytes:
            raise RuntimeError(f"the WAL's roll callback gave a segment of "
                               f"{segment.size_bytes} bytes for an entry of {n}")
        old = self._active
        _put_roll(self._base + self._pos, self._tag, segment.segment_id)
        self._pos += _ROLL_ENTRY_BYTES
        self._counts[ENTRY_ROLL] += 1
        old.written_bytes = self._pos
        self._unsynced.append(old)
        self._install(segment, self._start + <uint64_t>self._pos)
        self._dir_dirty = True
        self._rolls += 1
        return 0

    # -- entries (lock held, room ensured) ---------------------------------------------

    cdef uint64_t put_record(self, uint64_t batch_id, int32_t index,
                             const unsigned char *topic, Py_ssize_t topic_len,
                             int32_t partition, int64_t timestamp_ms,
                             const unsigned char *record, Py_ssize_t record_len,
                             const unsigned char *context, Py_ssize_t context_len) noexcept:
        cdef unsigned char *p = self._base + self._pos + NK_WAL_ENTRY_HEADER_BYTES
        cdef uint8_t flags = 0
        cdef Py_ssize_t payload
        if context_len < 0:
            context_len = 0
        else:
            flags = _FLAG_CONTEXT
        payload = _RECORD_FIXED_BYTES + topic_len + context_len + record_len
        p = nk_wal_put64(p, batch_id)
        p = nk_wal_put32(p, <uint32_t>index)
        p = nk_wal_put32(p, <uint32_t>partition)
        p = nk_wal_put64(p, <uint64_t>timestamp_ms)
        p = nk_wal_put16(p, <uint16_t>topic_len)
        p = nk_wal_put16(p, <uint16_t>context_len)
        p = nk_wal_put32(p, <uint32_t>record_len)
        p = nk_wal_put_bytes(p, topic, <size_t>topic_len)
        p = nk_wal_put_bytes(p, context, <size_t>context_len)
        nk_wal_put_bytes(p, record, <size_t>record_len)
        return self._finish_entry(ENTRY_RECORD, flags, payload)

    cdef uint64_t _advance(self, int kind, Py_ssize_t n) noexcept:
        self._pos += n
        self._counts[kind] += 1
        self._appended_bytes += <uint64_t>n
        return self._start + <uint64_t>self._pos

    # -- the accumulator's appends ------------------------------------------------------

    cdef Py_ssize_t append_to_batch(self, RecordBatchBuilder builder, object key,
                                    object value, object headers, int64_t timestamp_ms,
                                    uint64_t batch_id, object topic, int32_t partition,
                                    object context) except -3:
        # Room for any record first, so that the entry of a record the batch took can
        # always be written: a record is in both or in neither.  The entry holds the
        # record's bytes as the builder encoded them.
        cdef Py_ssize_t topic_len, context_len = -1, before, index
        cdef const char *topic_utf8 = _topic_utf8(topic, &topic_len)
        cdef const char *context_bytes = NULL
        if context is not None:
            context_bytes = PyBytes_AS_STRING(context)
            context_len = PyBytes_GET_SIZE(context)
            if context_len > self.max_context_bytes:
                raise ValueError(f"context of {context_len} bytes exceeds "
                                 f"{self.max_context_bytes}")
        self.lock.take()
        try:
            if self.ensure_record_room():
                return -2
            before = builder._pos_bytes
            index = builder._append_objects(key, value, headers, timestamp_ms, -1)
            if index >= 0:
                self.put_record(batch_id, <int32_t>index, <const unsigned char *>topic_utf8,
                                topic_len, partition, timestamp_ms,
                                builder._data + before, builder._pos_bytes - before,
                                <const unsigned char *>context_bytes, context_len)
            return index
        finally:
            self.lock.give()

    def append_rows_to(self, RecordBatchBuilder builder not None, append, Py_ssize_t start,
                       uint64_t batch_id, str topic, int32_t partition):
        """send_batch()'s bulk path: append(builder, start) -> rows appended, and an entry
        for each record it put into builder -- those before a refused row too.

        Raises:
            WalFullError: the log is at its bound for records (nothing appended).
            WalStorageError: a roll over to the next segment failed (disk full): the
                records appended and not logged are cut from builder again, which
                holds those logged (builder.record_count says how many).
            What append raises, once the records it appended are logged.
        """
        cdef Py_ssize_t topic_len, before
        cdef int32_t first
        cdef int64_t max_timestamp_ms
        cdef const char *topic_utf8 = _topic_utf8(topic, &topic_len)
        self.lock.take()
        try:
            if self.ensure_record_room():
                raise WalFullError("the WAL is at its bound (wal_max_bytes): no room for "
                                   "records")
            before = builder._pos_bytes
            first = builder._record_count
            max_timestamp_ms = builder._max_timestamp_ms
            try:
                return append(builder, start)
            finally:
                self._log_appended(builder, before, first, max_timestamp_ms, batch_id,
                                   topic_utf8, topic_len, partition)
        finally:
            self.lock.give()

    cdef int _log_appended(self, RecordBatchBuilder builder, Py_ssize_t start,
                           int32_t first_index, int64_t max_timestamp_ms, uint64_t batch_id,
                           const char *topic, Py_ssize_t topic_len,
                           int32_t partition) except -1:
        # With `lock` held: an entry for each record the builder holds from offset start
        # on (max_timestamp_ms: the builder's before them).  Records are read by their
        # own framing: length varint, attributes, then the timestamp delta against the
        # batch's first timestamp.  These entries never wait for room (the bulk call was
        # admitted as a whole, and is one batch at most): they may take the log past its
        # bound for records, as control entries.
        cdef const unsigned char *p = builder._data + start
        cdef const unsigned char *end = builder._data + builder._pos_bytes
        cdef const unsigned char *body
        cdef uint64_t body_bytes, ts_zigzag
        cdef int32_t index = first_index
        cdef int64_t timestamp_ms
        cdef Py_ssize_t record_bytes
        while p < end:
            body = nk_read_uvarint64(p, end, &body_bytes)
            body_bytes >>= 1  # a length is never negative: its zigzag is twice it
            if body == NULL or body_bytes > <uint64_t>(end - body) or body_bytes < 2 or \
                    nk_read_uvarint64(body + 1, body + body_bytes, &ts_zigzag) == NULL:
                raise RuntimeError("a record the builder wrote does not parse")
            record_bytes = (body - p) + <Py_ssize_t>body_bytes
            timestamp_ms = builder._first_timestamp_ms + <int64_t>(
                (ts_zigzag >> 1) ^ (0 - (ts_zigzag & 1)))
            try:
                self.ensure(NK_WAL_ENTRY_HEADER_BYTES + _RECORD_FIXED_BYTES + topic_len
                            + record_bytes, True)
            except BaseException:
                # The roll over failed (disk full): a record is in both the batch and
                # the log or in neither, so the batch ends at the last record logged.
                # Sealing is what makes a builder's bytes final, and it has not run.
                builder._pos_bytes = p - builder._data
                builder._record_count = index
                builder._max_timestamp_ms = max_timestamp_ms
                raise
            self.put_record(batch_id, index, <const unsigned char *>topic, topic_len,
                            partition, timestamp_ms, p, record_bytes, NULL, -1)
            if index == 0 or timestamp_ms > max_timestamp_ms:
                max_timestamp_ms = timestamp_ms
            p += record_bytes
            index += 1
        return 0

    cdef int sync_appended(self) except -1:
        # A failed sync fails the log, which then refuses the SEAL of the batches the
        # call's records are in: they are not sent.  But their entries are in the
        # segments, unsynced, and the next producer replays them: the error says so,
        # or a caller told only "cannot sync" sees them arrive later.
        cdef uint64_t position
        self.lock.take()
        position = self._start + <uint64_t>self._pos
        self.lock.give()
        try:
            self.sync_to(position)
        except WalStorageError as exc:
            raise WalStorageError(
                f"{exc}; the records of this call are not sent by this producer (the "
                f"failed log refuses their batches), but are in the log unsynced: the "
                f"next producer opened on its directory replays them (unless the machine "
                f"goes down before the OS writes them)", errno=exc.errno) from exc
        return 0

    def sync_appended_entries(self):
        """Returns once everything appended so far is on disk (fsync "always").

        Raises:
            WalStorageError: the sync failed (saying what becomes of the records).
        """
        self.sync_appended()

    # -- Python's appends: each takes the lock ------------------------------------------

    def append_record(self, uint64_t batch_id, int32_t index, str topic, int32_t partition,
                      int64_t timestamp_ms, record, context=None):
        """Appends a record entry; returns the log position after it.

        Args:
            record: bytes-like, the record as the batch holds it (its Kafka encoding).
            context: None or bytes-like of at most CONTEXT_LIMIT_BYTES.

        Raises:
            WalFullError: the log is at its bound for records (nothing written).
            ValueError: topic, context or record beyond their bounds.
        """
        cdef Py_buffer rec, ctx
        cdef Py_ssize_t topic_len, context_len = -1, n
        cdef const char *topic_utf8 = _topic_utf8(topic, &topic_len)
        cdef uint64_t position
        cdef int full
        PyObject_GetBuffer(record, &rec, PyBUF_SIMPLE)
        try:
            if context is not None:
                PyObject_GetBuffer(context, &ctx, PyBUF_SIMPLE)
                context_len = ctx.len
            try:
                if context_len > MAX_CONTEXT_BYTES:
                    raise ValueError(f"context of {context_len} bytes exceeds "
                                     f"{MAX_CONTEXT_BYTES}")
                n = (NK_WAL_ENTRY_HEADER_BYTES + _RECORD_FIXED_BYTES + topic_len
                     + max(context_len, 0) + rec.len)
                if n > self.max_record_entry_bytes:
                    raise ValueError(f"a record entry of {n} bytes exceeds the WAL's "
                                     f"{self.max_record_entry_bytes}")
                self.lock.take()
                try:
                    full = self.ensure(n, False)
                    if not full:
                        position = self.put_record(
                            batch_id, index, <const unsigned char *>topic_utf8, topic_len,
                            partition, timestamp_ms, <const unsigned char *>rec.buf,
                            rec.len, <const unsigned char *>(ctx.buf if context_len >= 0
                                                             else NULL), context_len)
                finally:
                    self.lock.give()
            finally:
                if context is not None:
                    PyBuffer_Release(&ctx)
        finally:
            PyBuffer_Release(&rec)
        if full:
            raise WalFullError("the WAL is at its bound (wal_max_bytes): no room for a record")
        return position

    def append_seal(self, uint64_t batch_id, str topic, int32_t partition, int64_t producer_id,
                    int16_t producer_epoch, int32_t base_sequence, int32_t record_count,
                    int16_t attributes, uint32_t batch_crc, uint32_t batch_bytes):
        """Appends a SEAL entry (never refused for room); returns the position after it."""
        cdef Py_ssize_t topic_len
        cdef const char *topic_utf8 = _topic_utf8(topic, &topic_len)
        cdef Py_ssize_t payload = _SEAL_FIXED_BYTES + topic_len
        cdef unsigned char *p
        with self.lock:
            p = self._start_entry(payload)
            p = nk_wal_put64(p, batch_id)
            p = nk_wal_put64(p, <uint64_t>producer_id)
            p = nk_wal_put32(p, <uint32_t>partition)
            p = nk_wal_put32(p, <uint32_t>base_sequence)
            p = nk_wal_put32(p, <uint32_t>record_count)
            p = nk_wal_put16(p, <uint16_t>producer_epoch)
            p = nk_wal_put16(p, <uint16_t>attributes)
            p = nk_wal_put32(p, batch_crc)
            p = nk_wal_put32(p, batch_bytes)
            p = nk_wal_put16(p, <uint16_t>topic_len)
            nk_wal_put_bytes(p, topic_utf8, <size_t>topic_len)
            return self._finish_entry(ENTRY_SEAL, 0, payload)

    def append_restamp(self, uint64_t batch_id, int64_t producer_id, int16_t producer_epoch,
                       int32_t base_sequence, uint32_t batch_crc):
        """Appends a RESTAMP entry; returns the position after it."""
        cdef unsigned char *p
        with self.lock:
            p = self._start_entry(_RESTAMP_BYTES)
            p = nk_wal_put64(p, batch_id)
            p = nk_wal_put64(p, <uint64_t>producer_id)
            p = nk_wal_put32(p, <uint32_t>base_sequence)
            p = nk_wal_put16(p, <uint16_t>producer_epoch)
            p = nk_wal_put16(p, 0)
            nk_wal_put32(p, batch_crc)
            return self._finish_entry(ENTRY_RESTAMP, 0, _RESTAMP_BYTES)

    def append_move_locked(self, payload, bint sealed):
        """With `lock` held: appends a MOVE entry whose payload (bytes-like, laid out
        as the module says; wal.py encodes it) is given -- a control entry, never
        refused for room.  Returns the log position after it."""
        cdef Py_buffer view
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            if view.len < _MOVE_FIXED_BYTES or view.len > 0xFFFFFFFF:
                raise ValueError(f"a MOVE payload of {view.len} bytes")
            memcpy(self._start_entry(view.len), view.buf, view.len)
            return self._finish_entry(ENTRY_MOVE, _FLAG_SEALED if sealed else 0, view.len)
        finally:
            PyBuffer_Release(&view)

    def active_end_locked(self):
        """With `lock` held: (the active segment, the offset where its entries end)."""
        return self._active, self._pos

    def append_done(self, uint64_t batch_id, uint32_t outcome):
        """Appends a DONE entry; returns the position after it."""
        with self.lock:
            nk_wal_put32(nk_wal_put64(self._start_entry(_DONE_BYTES), batch_id), outcome)
            return self._finish_entry(ENTRY_DONE, 0, _DONE_BYTES)

    cdef unsigned char *_start_entry(self, Py_ssize_t payload_bytes) except NULL:
        # With `lock` held: room for a control entry (never refused), and where its
        # payload goes; _finish_entry completes it.
        self.ensure(NK_WAL_ENTRY_HEADER_BYTES + payload_bytes, True)
        return self._base + self._pos + NK_WAL_ENTRY_HEADER_BYTES

    cdef uint64_t _finish_entry(self, int kind, uint8_t flags,
                                Py_ssize_t payload_bytes) noexcept:
        # The entry at _pos, its payload written: framed (csrc/wal_entry.h) and counted;
        # returns the log position after it.
        nk_wal_finish_entry(self._base + self._pos, self._tag, self._tag_crc, <uint8_t>kind,
                            flags, <uint32_t>payload_bytes)
        return self._advance(kind, NK_WAL_ENTRY_HEADER_BYTES + payload_bytes)

    # -- positions and syncs -------------------------------------------------------------

    @property
    def position(self):
        """The log position after the last entry appended."""
        with self.lock:
            return self._start + <uint64_t>self._pos

    @property
    def durable_position(self):
        """Every entry ending at or below this log position is on disk."""
        with self.lock:
            return self._durable

    @property
    def room_bytes(self):
        """Bytes left for entries in the active segment."""
        with self.lock:
            return max(0, self._limit - self._pos)

    @property
    def active_segment(self):
        with self.lock:
            return self._active

    def sync(self):
        """Everything appended so far is on disk when this returns."""
        return self.sync_to(UINT64_MAX)

    cpdef object sync_to(self, uint64_t position):
        """Returns once every entry ending at or below position (or everything
        appended, if that is less) is on disk.

        Group commit: one caller at a time holds sync_lock and syncs everything
        appended when it started; callers that waited for it usually find their entries
        covered and return without a sync of their own.

        Raises:
            WalStorageError: a sync failed (now or before: the WAL stays failed), and
                the log is not on disk up to position.
            WalError: the WAL is closed, and not on disk up to position.
        """
        cdef list rolled
        cdef MappedSegment active, segment
        cdef Py_ssize_t active_end
        cdef uint64_t target, wall_ns, cpu_ns
        cdef bint dir_dirty
        cdef int rc = 0, code = 0
        self.sync_lock.take()
        try:
            self.lock.take()
            try:
                target = self._start + <uint64_t>self._pos
                if self._durable >= (position if position < target else target):
                    # On disk before the log failed, if it did: a caller told otherwise
                    # takes its records for unsent, while their batches go out.
                    return None
                self._raise_if_failed_locked()
                if self._closed:
                    # The owner closed the segments' fds (their numbers may be other
                    # files' by now): what close() did not sync (fsync "never") cannot
                    # be synced any more.
                    raise WalError("the WAL is closed: entries it did not sync cannot be "
                                   "synced now")
                rolled = list(self._unsynced)
                active = self._active
                active_end = self._pos
                dir_dirty = self._dir_dirty
                self._dir_dirty = False
            finally:
                self.lock.give()
            # Timed: what a sync costs is the fsync modes' price (metrics()).
            wall_ns = _clock_ns(CLOCK_MONOTONIC)
            cpu_ns = _clock_ns(CLOCK_THREAD_CPUTIME_ID)
            try:
                for segment in rolled:
                    segment._sync(segment.synced_bytes, segment.written_bytes)
                    segment.synced_bytes = segment.written_bytes
                active._sync(active.synced_bytes, active_end)
                active.synced_bytes = active_end
                if dir_dirty:
                    with nogil:
                        rc = fsync(self._dir_fd)
                        if rc != 0:
                            code = errno
                    if rc != 0:
                        raise _os_error("cannot sync the WAL directory of", active.path, code)
            except WalStorageError as exc:
                self._failed(exc)
                raise
            self.lock.take()
            try:
                for segment in rolled:
                    # Reclaimed meanwhile (forget_locked) is gone already.
                    if segment in self._unsynced:
                        self._unsynced.remove(segment)
                if target > self._durable:
                    self._durable = target
                self._syncs += 1
                self._sync_wall_ns += _clock_ns(CLOCK_MONOTONIC) - wall_ns
                self._sync_cpu_ns += _clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu_ns
            finally:
                self.lock.give()
        finally:
            self.sync_lock.give()

    def write_out(self):
        """Writes what was appended to staged segments since their last sync or
        write-out to their files, without waiting for the disk (fsync "never": the
        images' bytes reach the files, the disk when the OS decides).  Segments not
        staged are the OS's to write back.

        Raises:
            WalStorageError: a write failed (now or before: the WAL stays failed, as
                after a failed sync).
        """
        cdef list rolled
        cdef MappedSegment active, segment
        cdef Py_ssize_t active_end
        self.sync_lock.take()
        try:
            self.lock.take()
            try:
                self._raise_if_failed_locked()
                rolled = list(self._unsynced)
                active = self._active
                active_end = self._pos
            finally:
                self.lock.give()
            try:
                for segment in rolled:
                    segment._write_out(segment.written_bytes)
                active._write_out(active_end)
            except WalStorageError as exc:
                self._failed(exc)
                raise
        finally:
            self.sync_lock.give()

    cdef int _raise_if_failed_locked(self) except -1:
        if self._failure is not None:
            raise WalStorageError(f"an earlier WAL sync or write failed: {self._failure}",
                                  errno=self._failure.errno)
        return 0

    cdef int _failed(self, object exc) except -1:
        # A sync or write-out failed: kept, and raised to every caller from now on.
        self.lock.take()
        self._failure = exc
        self._limit = 0  # every ensure() goes to _roll_over, which raises
        self.lock.give()
        return 0

    # -- the owner's housekeeping ------------------------------------------------------------

    def close_locked(self):
        """With `lock` held: no entry is taken from now on (the owner unmaps the
        segments next)."""
        self._closed = True
        self._limit = 0
        self._base = NULL

    def forget_locked(self, uint64_t segment_id):
        """With `lock` held: segment segment_id (rolled, being reclaimed) needs no sync
        any more.  By id: with fsync "never" a segment written out and unstaged is
        unmapped, its owner holding no MappedSegment of it, while it still awaits one."""
        self._unsynced = [segment for segment in self._unsynced
                          if (<MappedSegment>segment).segment_id != segment_id]

    def mark_directory_changed(self):
        """A segment file was deleted or renamed: the next sync fsyncs the directory."""
        self.lock.take()
        self._dir_dirty = True
        self.lock.give()

    def metrics(self):
        """Counters since start: entries by kind, bytes appended, syncs (how many, the
        time they took and the CPU the syncing threads used in them), rolls."""
        self.lock.take()
        try:
            return {"records_logged": self._counts[ENTRY_RECORD],
                    "seals_logged": self._counts[ENTRY_SEAL],
                    "restamps_logged": self._counts[ENTRY_RESTAMP],
                    "dones_logged": self._counts[ENTRY_DONE],
                    "moves_logged": self._counts[ENTRY_MOVE],
                    "bytes_logged": self._appended_bytes,
                    "syncs": self._syncs,
                    "sync_ns": self._sync_wall_ns,
                    "sync_cpu_ns": self._sync_cpu_ns,
                    "segments_rolled": self._rolls,
                    "position": self._start + <uint64_t>self._pos,
                    "durable_position": self._durable}
        finally:
            self.lock.give()
