# The write-ahead log's native half: entries into memory-mapped segments.  Layout,
# positions and locking: _wal.pyx; the files around it: wal.py.

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from netkafka.producer._mutex cimport Mutex
from netkafka.record._batch cimport RecordBatchBuilder


cdef enum:
    # Entry types (the type byte of csrc/wal_entry.h's header).
    ENTRY_RECORD = 1    # a record as send() accepted it, Kafka-encoded, with its batch
    ENTRY_SEAL = 2      # a batch sealed: its producer stamp and what its header holds
    ENTRY_RESTAMP = 3   # a sealed batch's producer stamp rewritten by the sender
    ENTRY_DONE = 4      # a batch's outcome: nothing of it is to be replayed
    ENTRY_ROLL = 5      # the segment ends here; the log goes on in the segment named
    ENTRY_MOVE = 6      # a live batch copied forward whole (records, stamp), superseding
                        # its earlier entries so that its old segments can go

    # Bytes of a segment's header, before its first entry.
    SEGMENT_HEADER_BYTES = 64
    # Bounds a record entry's fields are checked against before anything is written.
    MAX_TOPIC_BYTES = 255
    MAX_CONTEXT_BYTES = 65535


cdef class MappedSegment:
    # One segment file mapped shared, read-write, or staged in a shared-memory image (see
    # .pyx).  The WriteAheadLog opens and closes the file; this object owns the file's
    # mapping (an image's is the image's).  Unmapped only with the appender's sync_lock
    # held, so that no sync runs over a mapping that is going away.
    cdef unsigned char *_base              # the mapping; NULL once unmapped
    # Staged (see .pyx): the shared-memory image whose mapping _base is, and the
    # segment file's fd, which each sync and write-out writes the image's new blocks
    # to.  Else None and -1.  Set at construction; _image dropped when unmapped.
    cdef MappedSegment _image
    cdef int _copy_fd
    cdef readonly Py_ssize_t size_bytes    # length of the file and of the mapping
    cdef public object path                # the file, for error messages
    cdef public uint64_t segment_id        # set when its header is written
    cdef public uint32_t tag               # low 32 bits of segment_id: every entry carries it
    # Appender's lock: bytes of header and entries written.  Final once rolled.
    cdef public Py_ssize_t written_bytes
    # Appender's sync_lock: bytes known to be on disk.
    cdef public Py_ssize_t synced_bytes
    # Appender's sync_lock: staged, the image's bytes below it are in the file
    # (written to it, not necessarily on disk); lowered by a write() below it.
    cdef readonly Py_ssize_t copied_bytes

    cdef int _check_range(self, Py_ssize_t offset, Py_ssize_t n) except -1
    cdef int _sync(self, Py_ssize_t start, Py_ssize_t end) except -1
    cdef int _write_out(self, Py_ssize_t end) except -1


cdef class WalAppender:
    # Every field but the sync_lock's is guarded by `lock`.  Lock order: sync_lock,
    # then lock; the accumulator's lock comes before both.
    cdef readonly Mutex lock
    cdef readonly Mutex sync_lock          # one sync at a time: group commit (see .pyx)
    cdef MappedSegment _active             # the segment taking entries
    cdef unsigned char *_base              # _active's mapping, cached for the hot path
    cdef uint32_t _tag                     # _active.tag
    cdef uint32_t _tag_crc                 # nk_wal_tag_crc(_tag): where entries' checksums start
    cdef Py_ssize_t _pos                   # where the next entry goes in _active
    # Where entries must end in _active (room for a ROLL entry is kept behind them);
    # 0 once closed or failed, so that the one check sends every append to the cold path.
    cdef Py_ssize_t _limit
    cdef bint _closed                      # close_locked() was called
    cdef uint64_t _start                   # log position of _active's byte 0
    cdef uint64_t _durable                 # log position below which every byte is on disk
    cdef list _unsynced                    # rolled segments with bytes not yet on disk
    cdef bint _dir_dirty                   # a segment file was created or renamed since the
                                           # last sync: the directory needs an fsync too
    cdef int _dir_fd                       # immutable: the directory, for that fsync
    cdef object _roll                      # immutable: the owner's next-segment callback
    cdef object _failure                   # the error a failed sync left, raised from then on
    cdef readonly Py_ssize_t max_record_entry_bytes  # immutable: room a record may need
    cdef readonly Py_ssize_t max_context_bytes       # immutable: the largest context
    cdef uint64_t _counts[7]               # entries appended, by ENTRY_* type
    cdef uint64_t _appended_bytes          # bytes of entries appended
    cdef uint64_t _syncs                   # syncs that wrote something
    cdef uint64_t _sync_wall_ns            # time spent in those syncs (msync, directory fsync)
    cdef uint64_t _sync_cpu_ns             # CPU the syncing threads used in them (kernel
                                           # writeback and the disk's flush request)
    cdef uint64_t _rolls                   # segments rolled over to

    # With `lock` held.  0 when the active segment has room for n more bytes of entries
    # (rolling to the next segment if needed), 1 when the log is full for records
    # (control entries are never refused).  Raises the disk's errors.
    cdef int ensure(self, Py_ssize_t n, bint control) except -1
    cdef int ensure_record_room(self) except -1
    # With `lock` held and room ensured: writes a record entry, returns the log
    # position after it.  context_len -1: no context.
    cdef uint64_t put_record(self, uint64_t batch_id, int32_t index,
                             const unsigned char *topic, Py_ssize_t topic_len,
                             int32_t partition, int64_t timestamp_ms,
                             const unsigned char *record, Py_ssize_t record_len,
                             const unsigned char *context, Py_ssize_t context_len) noexcept
    cpdef object sync_to(self, uint64_t position)
    cdef int _raise_if_failed_locked(self) except -1
    cdef int _failed(self, object exc) except -1
    # send()'s path: the record into builder (its _append_objects) and its entry into the
    # log, under `lock` (taken here; the accumulator's is held).  Returns the record's
    # index, -1 when the batch is full, -2 when the log is full for records (nothing
    # written anywhere).  context: None or bytes.
    cdef Py_ssize_t append_to_batch(self, RecordBatchBuilder builder, object key,
                                    object value, object headers, int64_t timestamp_ms,
                                    uint64_t batch_id, object topic, int32_t partition,
                                    object context) except -3
    # Syncs everything appended so far (fsync "always", after an append returns).
    cdef int sync_appended(self) except -1
    cdef int _log_appended(self, RecordBatchBuilder builder, Py_ssize_t start,
                           int32_t first_index, int64_t max_timestamp_ms, uint64_t batch_id,
                           const char *topic, Py_ssize_t topic_len,
                           int32_t partition) except -1

    cdef void _install(self, MappedSegment segment, uint64_t start_position) noexcept
    cdef int _roll_over(self, Py_ssize_t n, bint control) except -1
    cdef uint64_t _advance(self, int kind, Py_ssize_t n) noexcept
    cdef unsigned char *_start_entry(self, Py_ssize_t payload_bytes) except NULL
    cdef uint64_t _finish_entry(self, int kind, uint8_t flags, Py_ssize_t payload_bytes) noexcept
