"""The accumulator's hot path: one record into its partition's open batch.

accumulator.RecordAccumulator subclasses AccumulatorCore: everything that happens
once per batch or less (opening batches, waiting for memory, handing batches to the
sender, linger, flush) is Python there; this module holds the state those paths
share with send() and the one path that runs per record:

    _append(topic, partition, key, value, headers, timestamp_ms, track)
        under `lock`: the topic's partitions            (TopicTable)
        no lock:      the partitioner's choice          (unless partition is given)
        under `lock`: encode into the open batch        (PartitionQueue.open)
        -> a FutureRecordMetadata over the batch's result

With a write-ahead log (wal_dir) the record goes into the batch and its entry into
the log together, under the log's lock taken inside ours (_wal.WalAppender.
append_to_batch): a record is in both or in neither.  A log full for records
raises WalFullError out of the append, which _append() turns into a wait under the
backoff strategy (the subclass's _append_when_wal_has_room), as for memory.

Producer.send() enters it straight from C (ProducerCore, below); produce() and
append_into_batch() are the same path with no future made (the fire-and-forget and
bulk paths): they get the Batch the record went into (and, for the bulk path, the
record's index there), told apart by the `track` argument (TRACK_*).  The bulk
path's own native helpers (rows placed and grouped by partition, a run's outcome
spread back over its rows) are _batch_send's.

Anything else -- an unknown topic, no open batch or a full one, a refused record (a closed
accumulator, a transactional producer between transactions)
-- goes to the subclass's _append_cold() with the same arguments (a full batch is
moved to the ready queue first, under the same lock round trip).

Measured (100-byte values, no key, sticky partitioner, a stub sender, per-batch work
included): 2.2 us per record when this path was Python; 0.6 us in Cython with 16 KiB
batches, 0.34 us with 1 MiB ones.

Locking: `lock` (a _mutex.Mutex) guards `topics`, `closed`, `refusal`, the clock cache, and every
field of the TopicTable, PartitionQueue and Batch objects reachable from `topics`.
The partitioner runs outside it (it has its own lock, and a custom partitioner is
user code, which must not run under ours).  Lock order: `lock`, then the buffer
pool's mutex, the linger timer's condition, the WAL appender's lock or the metadata's
lock (RecordAccumulator.remove_idle_tables).
"""
cimport cython
from cpython.bool cimport PyBool_Check
from cpython.bytes cimport PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.long cimport PyLong_Check
from libc.stdint cimport int64_t, uint64_t

from netkafka.producer._futures cimport BatchResult, new_record_future
from netkafka.producer._mutex cimport Mutex
from netkafka.producer._partitioner cimport Partitioner, keyed_partition
from netkafka.producer._wal cimport WalAppender
from netkafka.record._batch cimport RecordBatchBuilder
from netkafka.record._legacy cimport LegacyMessageSetBuilder
from netkafka.record._pool cimport PooledBatch
from netkafka.record._columns cimport checked_timestamp_ms, integer_arg
from netkafka.csrc cimport (
    nk_clock_cache, nk_clock_init, nk_clock_now_ms, nk_clock_ticks_per_ms,
)

import collections
import time

from netkafka.errors import WalFullError, WalStorageError
from netkafka.producer._partitioner import BrokerAwarePartitioner, DefaultPartitioner


cdef enum:
    # What an append hands back, and what it counts (the `track` argument).
    TRACK_FUTURE = 0      # a FutureRecordMetadata (send())
    TRACK_COUNT = 1       # the Batch; the record counts in untracked_records (produce())
    TRACK_NONE = 2        # (Batch, index in it); the caller follows the record (send_batch())


@cython.final
cdef class Batch:
    """An open or ready batch: its builder and the result its records' futures share."""
    # A RecordBatchBuilder, or a LegacyMessageSetBuilder (api_version below (0, 11));
    # owned as _pool.pxd says (lock, then drainer).
    cdef readonly PooledBatch builder
    cdef readonly int legacy_magic            # immutable: the legacy builder's magic; -1 for v2
    cdef readonly BatchResult result          # thread-safe
    cdef readonly int64_t created_ns          # time.monotonic_ns() when opened
    cdef public uint64_t wal_id               # its id in the WAL (0: no WAL); set when opened
    # Records appended with no future (produce()): their failure is counted for
    # flush() to raise.  Accumulator's lock while open; read once completed.
    cdef readonly int untracked_records
    # Where they are (the batch may be split, its parts failing apart: untracked_in):
    # indexes [_run_start, _run_end), the last run of consecutive ones, after the
    # earlier runs' (start, end) in _runs (None while there is one run).  Guarded as
    # untracked_records.
    cdef Py_ssize_t _run_start, _run_end
    cdef list _runs
    # Set by the sender's release of a batch it held (hold_while_queued), before the
    # linger thread is told: that thread hands it over without asking again.
    cdef public bint released

    def __cinit__(self, PooledBatch builder not None, BatchResult result not None,
                  int64_t created_ns):
        if isinstance(builder, RecordBatchBuilder):
            self.legacy_magic = -1
        elif isinstance(builder, LegacyMessageSetBuilder):
            self.legacy_magic = (<LegacyMessageSetBuilder>builder).magic
        else:
            raise TypeError(f"a Batch's builder is a RecordBatchBuilder or a "
                            f"LegacyMessageSetBuilder, not {type(builder).__name__}")
        self.builder = builder
        self.result = result
        self.created_ns = created_ns

    cdef inline void _count_untracked(self, Py_ssize_t index):
        # With the accumulator's lock held: the record at index has no future.
        self.untracked_records += 1
        if index == self._run_end:  # the usual case: the run goes on
            self._run_end += 1
            return
        if self._run_end > self._run_start:
            if self._runs is None:
                self._runs = []
            self._runs.append((self._run_start, self._run_end))
        self._run_start = index
        self._run_end = index + 1

    def untracked_in(self, Py_ssize_t first, Py_ssize_t end):
        """Once completed: how many of the records at indexes first..end-1 have no
        future (produce())."""
        runs = [(self._run_start, self._run_end)]
        if self._runs is not None:
            runs += self._runs
        return sum(max(0, min(end, stop) - max(first, start)) for start, stop in runs)


@cython.final
cdef class PartitionQueue:
    """One partition's batches on this side of the sender.  Fields guarded by the
    accumulator's lock."""
    cdef readonly object topic     # immutable
    cdef readonly int partition    # immutable
    cdef public Batch open         # the batch taking records, or None
    cdef readonly object ready     # collections.deque of closed Batches, oldest first
    cdef public bint draining      # a thread is handing `ready` to the sender
    # Bytes the recent retired batches held: the largest, halved at each batch since.  The
    # next batch starts in a buffer that size, so a busy partition does not copy each of
    # its batches up through the size classes again, and one whose batches only vary in
    # size (linger cuts them) does not either.
    cdef readonly Py_ssize_t last_batch_bytes

    def __cinit__(self, topic, int partition):
        self.topic = topic
        self.partition = partition
        self.ready = collections.deque()

    cpdef retire(self):
        """With the accumulator's lock held: the open batch goes to the ready
        queue, to be handed over by _drain()."""
        self.last_batch_bytes = max(self.open.builder._pos_bytes, self.last_batch_bytes >> 1)
        self.ready.append(self.open)
        self.open = None


@cython.final
cdef class TopicTable:
    """A topic's partitions as the partitioner sees them, and their queues.  Fields
    guarded by the accumulator's lock."""
    cdef readonly tuple all_partitions        # partition ids, ascending
    cdef readonly tuple available_partitions  # those with a leader, ascending
    cdef list _queues                         # PartitionQueue or None, by partition id
    # With a built-in sticky partitioner: its last answer for an unkeyed record, -1
    # for none (forget_sticky_locked); sticky_epoch counts the times it was forgotten,
    # so that an answer asked for before a move is not kept after it.
    cdef int sticky
    cdef unsigned long sticky_epoch
    # time.monotonic_ns() when the table was made or last opened a batch: the producer
    # drops a topic idle for metadata_max_idle_ms (RecordAccumulator.remove_idle_tables).
    cdef public int64_t used_ns

    def __cinit__(self, int64_t used_ns):
        self.all_partitions = ()
        self.available_partitions = ()
        self._queues = []
        self.sticky = -1
        self.used_ns = used_ns

    cdef inline void forget_sticky_locked(self):
        self.sticky = -1
        self.sticky_epoch += 1

    cdef inline PartitionQueue queue_or_none(self, int partition):
        if 0 <= partition < len(self._queues):
            return self._queues[partition]
        return None


cdef class AccumulatorCore:
    """The state send() shares with the accumulator, and the per-record append.

    Args:
        partitioner: a netkafka.producer.partitioner.Partitioner.
    """
    cdef readonly Mutex lock                # guards everything below (see module docstring)
    cdef readonly Partitioner partitioner   # immutable; thread-safe
    cdef dict _topics                       # lock: topic -> TopicTable
    cdef public bint closed                 # lock: close() was called; refusal is for good
    # lock: None while records are taken, else a callable making the exception a record
    # sent now raises: ProducerClosedError after close(), a transactional producer's
    # between its transactions (set_refusal, by its state machine).
    cdef public object refusal
    cdef nk_clock_cache _clock              # lock: "now" for records without a timestamp
    cdef public WalAppender wal             # immutable once set: the WAL's, or None
    cdef public bint wal_always             # immutable: fsync "always" (send() waits)
    # Immutable: the partitioner is DefaultPartitioner or BrokerAwarePartitioner, whose
    # choice the hot path makes under `lock` without calling it: murmur2 for a key
    # (keyed_partition, no lock of its own), and for no key the sticky partition it
    # last gave, kept in the TopicTable until this accumulator tells it to move on.
    cdef bint _sticky_builtin
    # lock: the topic of the last append and its TopicTable (None after that table
    # is removed), so that a run of records to one topic skips the dict.
    cdef object _last_topic
    cdef TopicTable _last_table

    def __cinit__(self, Partitioner partitioner not None, *args, **kwargs):
        self.lock = Mutex()
        self.partitioner = partitioner
        self._sticky_builtin = type(partitioner) in (DefaultPartitioner,
                                                     BrokerAwarePartitioner)
        self._topics = {}
        nk_clock_init(&self._clock, nk_clock_ticks_per_ms())

    def append_into_batch(self, topic, partition, key, value, headers, timestamp_ms):
        """As ProducerCore.send() appends, but makes no future and counts nothing:
        returns (the Batch the record went into, its index there); the bulk path
        follows its outcome."""
        return self._append(topic, partition, key, value, headers, timestamp_ms,
                            TRACK_NONE, None)

    def append_tracked(self, topic, partition, key, value, headers, timestamp_ms,
                       int track, context):
        """The general form of every append, for the cold path to start again
        with: track is the TRACK_* value it was given."""
        return self._append(topic, partition, key, value, headers, timestamp_ms, track,
                            context)

    def append_once(self, topic, partition, key, value, headers, timestamp_ms, int track,
                    context):
        """As append_tracked, but a full WAL raises WalFullError (for the wait in
        _append_when_wal_has_room to try again)."""
        return self._append_once(topic, partition, key, value, headers, timestamp_ms, track,
                                 context)

    @cython.final
    cdef object _append(self, topic, partition, key, value, headers, timestamp_ms,
                        int track, object context):
        # Encodes one record into its partition's open batch; returns what `track`
        # says.  partition None lets the partitioner choose.  context: None, or the
        # bytes the WAL keeps with the record.  Raises what the encoder and the
        # partitioner raise for bad arguments (naming them), and whatever
        # _append_cold raises.
        if context is not None and (self.wal is None or not PyBytes_CheckExact(context)):
            context = _context_bytes(context, self.wal is not None)
        if self.wal is None:
            # No WAL, nothing to wait for room in: no try block to enter per record.
            return self._append_once(topic, partition, key, value, headers, timestamp_ms,
                                     track, context)
        try:
            return self._append_once(topic, partition, key, value, headers, timestamp_ms,
                                     track, context)
        except WalFullError:
            return (<object>self)._append_when_wal_has_room(
                topic, partition, key, value, headers, timestamp_ms, track, context)

    @cython.final
    cdef object _append_once(self, topic, partition, key, value, headers, timestamp_ms,
                             int track, object context):
        cdef TopicTable table
        cdef PartitionQueue queue
        cdef PartitionQueue retired = None
        cdef object appended
        cdef int chosen = -1
        cdef int64_t ts = -1
        cdef unsigned long epoch
        cdef bint full = False
        if type(topic) is not str:
            topic = topic_arg(topic)
        if timestamp_ms is not None:
            ts = checked_timestamp_ms(timestamp_ms, "timestamp_ms", -1)
        if partition is not None:
            chosen = partition = _partition_arg(partition)
        # 1. The topic's partitions; with a built-in partitioner its choice too, so
        # that the usual record takes the lock once.
        self.lock.take()
        try:
            table = None if self.refusal is not None else self._table_locked(topic)
            if table is not None:
                if chosen < 0 and self._sticky_builtin:
                    if key is None:
                        chosen = table.sticky
                    else:
                        chosen = keyed_partition(key, len(table.all_partitions), topic)
                if chosen >= 0:
                    appended = self._append_chosen_locked(table, chosen, key, value, headers,
                                                          ts, track, context, &full)
                    if appended is not None:
                        return appended
                    if full:
                        retired = table.queue_or_none(chosen)
                else:
                    all_partitions = table.all_partitions
                    available = table.available_partitions
                    epoch = table.sticky_epoch
        finally:
            self.lock.give()
        if table is None:
            return self._append_cold(topic, partition, -1, key, value, headers, timestamp_ms,
                                     track, context, None)
        if chosen < 0:
            # 2. The partitioner's choice (outside our lock: its own lock, or user code).
            chosen = self.partitioner.partition(topic, key, all_partitions, available)
            # 3. The record, into the partition's open batch if it has room.
            self.lock.take()
            try:
                if self._sticky_builtin and table.sticky_epoch == epoch:
                    table.sticky = chosen
                appended = self._append_chosen_locked(table, chosen, key, value, headers, ts,
                                                      track, context, &full)
                if appended is not None:
                    return appended
                if full:
                    retired = table.queue_or_none(chosen)
            finally:
                self.lock.give()
        return self._append_cold(topic, partition, chosen, key, value, headers, timestamp_ms,
                                 track, context, retired)

    cdef inline TopicTable _table_locked(self, topic):
        # The topic's table, or None; the last topic's without the dict.
        if topic is self._last_topic:
            return self._last_table
        table = self._topics.get(topic)
        if table is not None:
            self._last_topic = topic
            self._last_table = table
        return table

    @cython.final
    cdef object _append_chosen_locked(self, TopicTable table, int chosen, key, value,
                                      headers, int64_t ts, int track, object context,
                                      bint *full):
        # With the lock held: the record into partition chosen's open batch; what
        # `track` says, or None (refused, no queue or no open batch yet, or full:
        # the cold path's turn).  A full batch leaves the open slot now, under this
        # lock, and *full says so: the cold path hands it over and opens the next.
        cdef PartitionQueue queue
        full[0] = False
        if self.refusal is not None:
            return None
        queue = table.queue_or_none(chosen)
        if queue is None:
            return None
        appended = self._append_locked(queue, key, value, headers, ts, track, context)
        if appended is None and queue.open is not None:
            queue.retire()
            full[0] = True
        return appended

    @cython.final
    cdef object _append_locked(self, PartitionQueue queue, key, value, headers, int64_t ts,
                               int track, object context):
        # With the lock held: the record into queue's open batch, or None when there
        # is none or it is full.  ts < 0: now.  Returns what `track` says; raises
        # WalFullError when the WAL has no room for it (then it is in neither).
        cdef Batch batch = queue.open
        cdef Py_ssize_t index
        if batch is None:
            return None
        if ts < 0:
            ts = nk_clock_now_ms(&self._clock)
        if self.wal is not None:
            # v2 only (a WAL needs RecordBatch v2: the config refuses a legacy format).
            index = self.wal.append_to_batch(<RecordBatchBuilder>batch.builder, key, value,
                                             headers, ts, batch.wal_id, queue.topic,
                                             queue.partition, context)
            if index == -2:
                raise WalFullError("the WAL is at wal_max_bytes")
        elif batch.legacy_magic < 0:
            index = (<RecordBatchBuilder>batch.builder)._append_objects(key, value, headers,
                                                                        ts, -1)
        elif batch.legacy_magic == 0:
            # v0 has no timestamp field: as kafka-python, a given one is not
            # written, and the record's metadata says -1 (none).
            ts = -1
            index = (<LegacyMessageSetBuilder>batch.builder).append(key, value, headers, None)
        else:
            index = (<LegacyMessageSetBuilder>batch.builder).append(key, value, headers, ts)
        if index < 0:
            return None
        if track == TRACK_COUNT:
            batch._count_untracked(index)
            return batch
        if track == TRACK_NONE:
            return batch, index
        return new_record_future(batch.result, <int>index, ts, _size_of(key),
                                 _size_of(value), _headers_size(headers))

    # -- for the cold paths (Python, the lock held by the caller unless said) --------

    def try_append_locked(self, PartitionQueue queue not None, key, value, headers,
                          timestamp_ms, int track, context):
        """With the lock held: the record into queue's open batch; what `track` says
        (its future, or its Batch), or None when queue has no open batch or it is full."""
        cdef int64_t ts = -1 if timestamp_ms is None else checked_timestamp_ms(timestamp_ms, "timestamp_ms", -1)
        return self._append_locked(queue, key, value, headers, ts, track, context)

    def queue_locked(self, topic, int partition):
        """With the lock held: the partition's queue, created on first use; None if
        the topic or partition is not known."""
        cdef TopicTable table = self._topics.get(topic)
        cdef PartitionQueue queue
        if table is None or not 0 <= partition < len(table._queues):
            return None
        queue = table._queues[partition]
        if queue is None:
            queue = table._queues[partition] = PartitionQueue(topic, partition)
        return queue

    def table_locked(self, topic):
        """With the lock held: the topic's TopicTable, or None."""
        return self._topics.get(topic)

    def queues_locked(self):
        """With the lock held: every partition queue created so far."""
        return [queue for table in self._topics.values()
                for queue in (<TopicTable>table)._queues if queue is not None]

    def remove_table_locked(self, topic):
        """With the lock held: forgets the topic's table, which has no batch (the
        caller checked): the next record for the topic waits for its metadata, as a
        first one does."""
        if self._last_topic is not None and self._last_topic == topic:
            self._last_topic = None
            self._last_table = None
        del self._topics[topic]

    def tables_locked(self):
        """With the lock held: (topic, TopicTable) of every topic known."""
        return list(self._topics.items())

    def set_partitions(self, topic, all_partitions, available_partitions, create=True):
        """Any thread (takes the lock): the topic's partitions as metadata says.
        Queues of partitions that disappeared stay until their batches are done.
        create False: only a table that exists is updated (a metadata answer must
        not bring back the table of a topic dropped as idle meanwhile)."""
        cdef TopicTable table
        all_partitions = tuple(all_partitions)
        available_partitions = tuple(available_partitions)
        with self.lock:
            table = self._topics.get(topic)
            if table is None:
                if not create:
                    return
                table = self._topics[topic] = TopicTable(time.monotonic_ns())
            table.all_partitions = all_partitions
            table.available_partitions = available_partitions
            table.forget_sticky_locked()
            count = max(all_partitions) + 1 if all_partitions else 0
            if count > len(table._queues):
                table._queues.extend([None] * (count - len(table._queues)))

    def forget_sticky(self, topic):
        """Any thread (takes the lock): the partitioner was told to move topic's
        unkeyed records on (on_new_batch), so the hot path asks it again.  Called
        after the partitioner has moved: an answer given before the move is then
        never kept."""
        cdef TopicTable table
        with self.lock:
            table = self._topics.get(topic)
            if table is not None:
                table.forget_sticky_locked()


cpdef str topic_arg(object topic):
    """Cold: a topic that is not exactly a str (send(), produce(), send_batch()).  A str
    subclass's (a str Enum member's, which kafka-python takes) plain str; the
    partition queues and the metadata are keyed by plain strs."""
    if isinstance(topic, str):
        return str.__str__(topic)
    raise TypeError(f"topic must be a str, not {type(topic).__name__}")


cdef int _partition_arg(object partition) except -1:
    if not PyLong_Check(partition) or PyBool_Check(partition):
        # Cold: an integer of another type (numpy's, as a pandas column gives them),
        # which kafka-python takes, stands for its int; a bool or a float does not.
        # send_batch()'s rule for its partitions, so both say the same.
        partition = integer_arg(partition, "an int or None", "partition", -1)
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")
    if partition > 0x7FFFFFFF:
        raise ValueError(f"partition {partition} is beyond Kafka's int32 partition ids")
    return partition


cdef object _context_bytes(object context, bint wal):
    # A record's context, as bytes.  Cold: only a context that is not bytes gets here.
    if not wal:
        raise ValueError("context needs wal_dir: it is kept in the write-ahead log")
    try:
        return bytes(memoryview(context))
    except TypeError:
        raise TypeError(f"context must be bytes-like or None, not "
                        f"{type(context).__name__}") from None


cdef inline int _size_of(object data) except -2:
    # Serialized size as RecordMetadata reports it; data was accepted by the encoder.
    if data is None:
        return -1
    if PyBytes_CheckExact(data):
        return <int>PyBytes_GET_SIZE(data)
    return memoryview(data).nbytes


cdef int _headers_size(object headers) except -2:
    # kafka-python's serialized_header_size: UTF-8 keys plus values; -1 for none.
    # headers were accepted by the encoder: (str or bytes, bytes or None) pairs.
    cdef int size = 0
    if not headers:
        return -1
    for name, value in headers:
        size += len(name.encode()) if isinstance(name, str) else len(name)
        if value is not None:
            size += len(value)
    return size


cdef class ProducerCore:
    """netkafka.Producer's per-record entries, send() and produce(), in C: the
    caller's call is the only Python call a record costs on its way into a batch.
    Producer subclasses it; everything else of the producer is Python there.

    Fields are set by Producer (_start(), and __init__ for the serializers) and
    only read here.  _records is None in a forked child until the child's own
    stack is started: the entries then ask Producer._restarted() for it.  The
    Python hooks they call (_serialize_record, _restarted, _counts_as_undelivered)
    are Producer's.
    """
    cdef public AccumulatorCore _records   # the running accumulator, or None (above)
    cdef public object _key_serializer     # Producer's serializer function or None
    cdef public object _value_serializer   # Producer's serializer function or None
    cdef public object _interceptors       # an InterceptorChain, or None when none is set

    def send(self, topic, value=None, key=None, headers=None, partition=None,
             timestamp_ms=None, context=None):
        """Queues a record and returns its FutureRecordMetadata.

        With wal_dir, the record is in the write-ahead log when this returns (on
        disk too with wal_fsync='always').

        Args:
            topic: the topic's name.
            value: bytes-like, or None (a tombstone); through value_serializer if set.
            key: bytes-like or None; through key_serializer if set.  Keyed records
                go where the Java client puts them (murmur2).
            headers: None or a list of (str key, bytes value) pairs.
            partition: the partition, or None to let the partitioner choose.
            timestamp_ms: CreateTime in milliseconds since the epoch; None: now.
            context: None, or bytes (at most 1024) the WAL keeps with the record:
                after a crash, on_replay(context, metadata_or_error) tells the next
                producer what became of it.  Needs wal_dir.

        Raises:
            ProducerClosedError: after close(), or close() while it waited for the
                topic's metadata.
            SerializationError: a serializer failed.
            TypeError, ValueError: a bad argument (named), neither key nor value
                (a ValueError, as kafka-python's), a record larger than
                max_request_size among them (a RecordTooLargeError: kafka-python's
                MessageSizeTooLargeError, and a KafkaError); a topic no Kafka string
                can carry (a lone surrogate, over 32767 UTF-8 bytes) is an
                IllegalArgumentError, refused before the producer keeps it.
            KafkaTimeoutError: no metadata for the topic within max_block_ms.
            InvalidTopicError: a topic name Kafka's rule or the broker refuses (at
                once, naming the topic); TopicAuthorizationFailedError likewise.
            BackpressureTimeoutError: no memory within max_block_ms.
            RecordDroppedError: no memory and backoff='drop'.
            WalStorageError: the WAL's disk refused (full, unwritable, failed sync).
                With wal_fsync "always" a sync that failed after the record was
                logged says so: the record is not sent, and the next producer on the
                directory replays it.
        """
        if self._interceptors is not None:
            return (<object>self)._send_intercepted(topic, value, key, headers, partition,
                                                    timestamp_ms, True, context)
        if key is None and value is None:
            self._refuse_empty_record()
        return self._append_record(topic, value, key, headers, partition, timestamp_ms,
                                   TRACK_FUTURE, context, True)

    @cython.final
    cdef object _append_record(self, topic, value, key, headers, partition, timestamp_ms,
                               int track, object context, bint sync_wal):
        cdef AccumulatorCore records = self._records
        if self._key_serializer is not None or self._value_serializer is not None:
            key, value, headers = (<object>self)._serialize_record(topic, key, value, headers)
        if records is None:
            records = (<object>self)._restarted()
        # Steps 2-5 of Producer's story are the accumulator's append: it comes back
        # to Producer._wait_for_partition() when metadata is missing, and asks the
        # partitioner's on_new_batch() when a record would open a new batch.
        future = records._append(topic, partition, key, value, headers, timestamp_ms, track,
                                 context)
        if sync_wal and records.wal_always:
            records.wal.sync_appended()
        return future

    def _refuse_empty_record(self):
        """Cold: send() of a record with neither key nor value, which kafka-python's
        send() refuses (a caller's slip, not a tombstone: a tombstone has a key) before
        its serializers see them -- but after its closed check: a closed producer (or a
        transactional one between transactions) says so first.  With interceptors, the
        record on_send hands on is the one checked.  produce() takes such a record, as
        confluent-kafka's produce() and the Java client do."""
        cdef AccumulatorCore records = self._records
        if records is None:
            records = (<object>self)._restarted()
        (<object>records).raise_if_refusing()
        raise ValueError("a record needs a key or a value; both are None")

    def _send_record(self, topic, value, key, headers, partition, timestamp_ms, context=None):
        """send() past the interceptors: the intercepted path's way in.  With wal_fsync
        "always" the caller syncs (_sync_intercepted), once the future has its callbacks:
        a sync failing here lost the future of a record in its batch, whose failure
        then counted it a second time."""
        return self._append_record(topic, value, key, headers, partition, timestamp_ms,
                                   TRACK_FUTURE, context, False)

    def produce(self, topic, value=None, key=None, headers=None, partition=None,
                timestamp_ms=None, context=None):
        """Fire and forget: queues a record as send() does, but returns None and
        makes no future for it -- the fastest way to send one record.

        A failure of the record is not raised here: it is counted, shown in
        metrics() as records_untracked_failed, and raised by the next flush() as an
        UndeliveredRecordsError giving how many records failed since the previous
        flush() and the first errors.  That covers delivery errors and refusals of
        the record itself (unknown partition, no metadata or no memory within
        max_block_ms, a bad timestamp) -- but not a record that can never be
        written (below).

        Args: as send().

        Raises:
            ProducerClosedError: after close().
            TypeError: an argument of the wrong type (named), as send().
            InvalidTopicError: as send().
            RecordTooLargeError: a record larger than max_request_size or
                buffer_memory, as send() (confluent-kafka's produce() raises
                MSG_SIZE_TOO_LARGE at once too).
        """
        cdef AccumulatorCore records = self._records
        if self._interceptors is not None:
            (<object>self)._send_intercepted(topic, value, key, headers, partition,
                                             timestamp_ms, False, context)
            return
        if records is None:
            records = (<object>self)._restarted()
        try:
            if self._key_serializer is not None or self._value_serializer is not None:
                key, value, headers = (<object>self)._serialize_record(topic, key, value,
                                                                       headers)
            records._append(topic, partition, key, value, headers, timestamp_ms,
                            TRACK_COUNT, context)
        except Exception as exc:
            if not (<object>self)._counts_as_undelivered(exc):
                raise
            (<object>records).count_untracked_failure(exc)
            return
        if records.wal_always:
            try:
                records.wal.sync_appended()
            except WalStorageError:
                # The record is in its batch, which the failed log refuses to seal: that
                # failure counts it, once, for flush() to raise.
                pass
