"""The record accumulator: records into per-partition batches, batches to the sender.

Each (topic, partition) has at most one open batch, a RecordBatchBuilder (or, with
legacy_magic, a LegacyMessageSetBuilder: message format v0/v1) over a buffer from
the BufferPool; send() encodes its record straight into it.  A batch
leaves the open slot when it is full (the next record does not fit batch_size),
when linger_ms has passed since it was opened, or on flush()/close().  It then waits
in the partition's ready queue until a thread hands it over: seal (compress, header,
CRC32C) and Sender.send().  Completion comes back on an I/O thread, which gives the
batch's memory back to the pool and resolves the records' futures.

    send() threads --append--> open batch --full/linger/flush--> ready queue
        --drain: seal + Sender.send (one thread per partition at a time)--> sender

Order: a partition's batches are handed over in the order they were opened, since
only one thread drains a partition at a time (the `draining` flag) and it takes
them from the head of the queue.  Whoever moves a batch to the ready queue drains
next, unless another thread is draining that partition already, in which case that
thread will take it before it stops.

Memory: every batch's buffers come from the BufferPool, bounded by buffer_memory.
A batch starts in a buffer as large as its partition's recent batches (the smallest
class, FIRST_BUFFER_BYTES, for a new partition) and moves to one twice as large when a
record does not fit (while open, up to batch_size); when the pool has no room for that,
the batch counts as full and goes.  When the pool has no room for a new batch's first
buffer, opening it applies the backoff strategy (block, park or drop, see backoff.py),
bounded by max_block_ms.  Connection watermarks are the sender's.

Linger: one thread, "netkafka-linger", sleeps on a condition until the earliest
linger deadline of an open batch (no polling), then moves that batch to the ready
queue and drains it.  With linger_ms=0 a new batch is due at once: it leaves when
the linger thread gets to it, so batches fill while that thread waits for its turn
-- the Java client's "send when the sender is free" behaviour.  For the same reason
a batch whose partition still has batches queued in the sender for a request
(a broker slow or unreachable, or requests in flight at their limit) stays open
until a request takes the last of them, and one whose broker has other partitions'
batches queued stays open until that broker's next request is built
(Sender.hold_while_queued), or a recheck later at the latest: handed over, it would
only wait behind them, holding a pooled buffer for a few records.  One batch per
linger_ms of a black-holed broker's partitions used to take all of buffer_memory
within seconds (2,048 buffers of 16 KiB for a few records each, 13 s into a black
hole at 1,000 records/s), and then send() blocked for every partition
(tests/test_chaos.py).

Hot path: _accumulator.AccumulatorCore's append, in Cython (one record into an open
batch with room, or a full batch out of the open slot); everything rarer is here,
in _append_cold().

Locks (never held while waiting for memory, for the sender or for the broker):
    self.lock (the core's)    the topic tables, every partition queue's fields (open
                              batch, ready queue, draining flag), closed, refusal,
                              the clock
    self._state_lock          the set of incomplete batches and the counters
    _LingerTimer._cond        the linger heap and the timer's stop flag
Order: self.lock, then _state_lock, _LingerTimer._cond, the BufferPool's mutex or
the Sender's _topics_lock (remove_idle_tables).
The linger thread takes _cond only to pop due entries, never together with another.
"""
import collections
import functools
import heapq
import itertools
import logging
import struct
import threading
import time
import traceback

from netkafka import errors
from netkafka.producer._accumulator import AccumulatorCore, Batch
from netkafka.producer._futures import BatchResult
from netkafka.record._batch import (SMALLEST_BATCH_BYTES, RecordBatchBuilder,
                                    pool_buffer_size_bytes)
from netkafka.record._legacy import LegacyMessageSetBuilder
from netkafka.record._pool import BufferPool
from netkafka.errors import (BackpressureTimeoutError, BufferPoolExhausted, KafkaTimeoutError,
                             ProducerClosedError, RecordDroppedError, UndeliveredRecordsError)
from netkafka.producer.wal import OUTCOME_ACKNOWLEDGED, OUTCOME_FAILED
from netkafka.client.own_threads import mark_own_thread

_log = logging.getLogger("netkafka.producer.accumulator")


# The buffer a batch starts in (it doubles, up to batch_size, as records come): memory
# is charged for what batches hold, so buffer_memory / batch_size does not bound the
# partitions that can have an open batch -- buffer_memory / FIRST_BUFFER_BYTES does:
# 16,384 at the default 32 MiB, enough for a batch on each of 10,000 partitions.  With
# 16 KiB first buffers (2,048 open batches), keyed 100 B records over 10,000 partitions
# waited for memory nearly every record and went one per batch: 1.03 records per batch,
# 44-46 us of client CPU per record (bench/test_bench_scale.py).  A busy partition's
# batches start as large as its recent ones (PartitionQueue.last_batch_bytes), so only
# its first batch grows through the small classes.
FIRST_BUFFER_BYTES = 2 * 1024
# Values of type bytes from this size up are held by their batch, not copied into it
# (RecordBatchBuilder's hold_values_from_bytes): the socket reads them where the caller
# left them.  Copying a 1 MiB value from a cold cache took the caller about 200 us on
# the 2-core Xeon (perf), half of its CPU per record.  The size is librdkafka's
# (message.copy.max.bytes, 65535 by default, above which it references a payload);
# not tuned here.
HOLD_VALUES_FROM_BYTES = 64 * 1024
# How soon a batch Sender.hold_while_queued() kept open is looked at again if its
# release has not come.  Every way a held batch's wait can end releases it (a request
# takes its partition's queued batches or is built for its broker, the batches expire
# or are refused or discarded, the partition moves, the sender closes); the look is for
# what none of them covers (a partition moved to no leader, a broker that stopped
# answering).  Each look costs the linger thread 10-20 us: with 10,000 partitions held
# through requests that took 0.5-1 s, looks every 100 ms doubled the client's CPU per
# record.
HELD_RECHECK_MS = 1000
# How many errors of fire-and-forget records flush() names (the count is exact).
FIRST_ERRORS_KEPT = 5
# A sealed RecordBatch v2's CRC32C and attributes, at offset 17: what a SEAL entry keeps.
_CRC_AND_ATTRIBUTES = struct.Struct(">Ih")


class RecordAccumulator(AccumulatorCore):
    """Per-partition batching between send() and the sender.

    Args:
        partitioner: the Partitioner choosing partitions for records sent without one.
        sender: the Sender batches are handed to.
        topic_waiter: callable(topic, partition or None): waits (up to max_block_ms)
            until metadata knows the topic (and that partition), then calls
            set_partitions(); raises naming the reason if it cannot.
        batch_size: bytes a batch may reach (a single larger record gets a batch of
            its own, up to max_request_size).
        max_request_size: bytes of the largest batch.
        compressor: None, or the Compressor (compression_type at its level, KIP-390)
            every batch is compressed with, shared (when compressing does not pay:
            sent uncompressed).
        buffer_memory: bound on the memory of all batches not yet completed.
        linger_ms: how long a batch below batch_size waits for more records (longer
            while its partition has batches queued in the sender, see Linger above).
        max_block_ms: bound on an append waiting for memory.
        delivery_timeout_ms: a batch older than this when it is handed over fails
            without being sent (the sender bounds the rest of its way).
        backoff: the strategy object (backoff.backoff_strategy) applied when the
            pool is full.
        idempotence: the ProducerIdManager numbering batches as they are sealed, or
            None (batches carry no producer id).
        stats: the ProducerMetrics that hears of batches handed over and failed
            (metrics.py), or None.
        legacy_magic: None (RecordBatch v2), or 0 / 1: batches are legacy message
            sets of that format (api_version below (0, 11)); no idempotence then.
        transaction: a transactional producer's TransactionManager, or None: its
            batches are transactional, every record that fails is told to it (before
            anyone waiting for the record learns of it: a commit's flush must find
            the transaction failed), and its state machine sets what a record sent
            between transactions raises (set_refusal).
        wal: the WriteAheadLog records are logged in, or None.  Batches get an id
            there when opened, a SEAL entry when sealed and a DONE entry when
            acknowledged or failed -- except those failed by close() or spooled,
            which the log keeps for the next producer.
        spool: with a WAL, whether a batch whose delivery timed out is spooled (its
            futures fail with RecordSpooledError, it stays in the WAL and goes to the
            sender again, every retry_backoff_ms, until the cluster takes it) rather
            than failed (on_delivery_timeout='spool').
        retry_backoff_ms: the spool's pace.
    """

    def __init__(self, partitioner, sender, topic_waiter, *, batch_size, max_request_size,
                 compressor, buffer_memory, linger_ms, max_block_ms,
                 delivery_timeout_ms, backoff, idempotence=None, stats=None,
                 legacy_magic=None, transaction=None, wal=None, spool=False,
                 retry_backoff_ms=100):
        if legacy_magic is not None and idempotence is not None:
            raise ValueError("legacy message sets carry no producer id: no idempotence")
        self._legacy_magic = legacy_magic  # immutable
        self._sender = sender  # immutable
        self._topic_waiter = topic_waiter  # immutable
        # A batch_size too small for a record (0: kafka-python's "disable batching
        # entirely") makes batches of one record: the smallest batch's.
        self._batch_size = max(batch_size, SMALLEST_BATCH_BYTES)  # immutable
        self._max_request_size = max_request_size  # immutable
        self._compressor = compressor  # immutable; thread-safe
        buffer_size = pool_buffer_size_bytes(self._batch_size, self._compressor)
        # Thread-safe (its own mutex).  Batches start in FIRST_BUFFER_BYTES and grow;
        # with a codec, a buffer of the largest class is set aside so a batch sealed
        # while the pool is full still goes out compressed (BufferPool).
        self._pool = BufferPool(buffer_size, max(buffer_memory, buffer_size),
                                min(FIRST_BUFFER_BYTES, buffer_size),
                                compression_reserve=self._compressor is not None)
        # round(): linger_ms may be a float (0.5 is 500,000 ns), and ns are ints.
        self._linger_ns = round(linger_ms * 1_000_000)  # immutable
        self._max_block_ms = max_block_ms  # immutable
        self._delivery_timeout_ns = delivery_timeout_ms * 1_000_000  # immutable
        self._backoff = backoff  # immutable
        self._idempotence = idempotence  # immutable; thread-safe
        self._stats = stats  # immutable; thread-safe
        self._transaction = transaction  # immutable; thread-safe
        self._state_lock = threading.Lock()
        self._incomplete = set()  # guarded by _state_lock: BatchResults not completed yet
        self._metrics = collections.Counter()  # guarded by _state_lock
        # Guarded by _state_lock: fire-and-forget records failed since the last
        # flush(), and the first few errors (FIRST_ERRORS_KEPT).
        self._untracked_failed = 0
        self._untracked_errors = []
        self._wal = wal  # immutable; thread-safe
        # Guarded by _state_lock: from close() on, failed batches stay in the WAL.
        self._wal_keeps_failures = False
        if wal is not None:
            self.wal = wal.appender
            self.wal_always = wal.fsync == "always"
        self._spool = _Spool(self, retry_backoff_ms) if spool and wal is not None else None
        self._next_idle_check_ns = 0  # guarded by lock: see remove_idle_tables
        # Guarded by lock: topic -> time.monotonic_ns() of its last partitions_for(),
        # use that keeps it from going idle as a batch opened does (remove_idle_tables).
        self._asked_ns = {}
        # Guarded by lock: _append_cold calls running.  They hold a topic's queue or
        # table across releases of the lock (waiting for memory, the partitioner), so
        # no table goes while one runs (remove_idle_tables).
        self._cold_appends = 0
        self._linger = _LingerTimer(self)

    # ------------------------------------------------------------------
    # send() threads: what the hot path (AccumulatorCore._append) leaves to us.

    def _append_cold(self, topic, partition, chosen, key, value, headers, timestamp_ms,
                     track, context, retired):
        """The append for anything but a record into an open batch with room: an
        unknown topic or partition, a new or full batch, a refused record.
        chosen: the partition the core picked, -1 if it did not get that far; track:
        what to return (the core's TRACK_*: a future, or the Batch); context: the
        record's, for the WAL; retired: the queue whose full batch the core moved to
        the ready queue, or None.  What it raises (every refusal of a record but a bad
        argument the core finds first) is told to the transaction (append_failed)."""
        with self.lock:
            self._cold_appends += 1
        try:
            return self._append_new(topic, partition, chosen, key, value, headers,
                                    timestamp_ms, track, context, retired)
        except errors.KafkaError as exc:
            self.append_failed(exc)
            raise
        finally:
            with self.lock:
                self._cold_appends -= 1

    def _append_new(self, topic, partition, chosen, key, value, headers, timestamp_ms,
                    track, context, retired):
        """_append_cold's work: the topic's metadata, then a new batch if needed."""
        if retired is not None:
            queue = retired
        else:
            with self.lock:
                if self.refusal is not None:
                    raise self.refusal()
                queue = None if chosen < 0 else self.queue_locked(topic, chosen)
            if queue is None:
                # The topic, or this partition of it, is not in the table yet: wait
                # for metadata (or a clear error), then start again.
                self._topic_waiter(topic, None if chosen < 0 else chosen)
                return self.append_once(topic, partition, key, value, headers,
                                        timestamp_ms, track, context)
            with self.lock:
                appended = self.try_append_locked(queue, key, value, headers, timestamp_ms,
                                                  track, context)
                if appended is not None:
                    return appended  # another thread opened a batch meanwhile
                if queue.open is not None:
                    queue.retire()
                    retired = queue
        if retired is not None:
            self._drain(queue)
        if partition is None:
            # The partitioner's choice would open a new batch: it may move on first
            # (KIP-480: a sticky partition gets one batch, then the next one does).
            self.partitioner.on_new_batch(topic, chosen)
            self.forget_sticky(topic)  # the hot path asks the partitioner again
            with self.lock:
                table = self.table_locked(topic)
                all_partitions = table.all_partitions
                available = table.available_partitions
            chosen = self.partitioner.partition(topic, key, all_partitions, available)
            with self.lock:
                queue = self.queue_locked(topic, chosen)
        return self._append_to_new_batch(queue, key, value, headers, timestamp_ms, track,
                                         context)

    def _append_to_new_batch(self, queue, key, value, headers, timestamp_ms, track, context):
        deadline = time.monotonic() + self._max_block_ms / 1000
        size_bytes = 0  # 0: the smallest class; more for a first record larger than that
        buffer = None
        try:
            while True:
                retired = filled = False
                with self.lock:
                    if self.refusal is not None:
                        raise self.refusal()
                    # Another thread may have opened a batch meanwhile.
                    appended = self.try_append_locked(queue, key, value, headers,
                                                      timestamp_ms, track, context)
                    if appended is not None:
                        return appended
                    if queue.open is not None:
                        queue.retire()
                        retired = True
                    start_bytes = self._start_bytes_locked(queue, size_bytes)
                    if buffer is None:
                        buffer = self._pool.try_acquire(start_bytes)
                    if buffer is not None:
                        batch, buffer = self._open_locked(queue, buffer), None
                        try:
                            appended = self.try_append_locked(queue, key, value, headers,
                                                              timestamp_ms, track, context)
                        except errors.BufferPoolExhausted:
                            # The record alone is larger than a pooled buffer and the
                            # pool has no room for a larger one now: wait for one.
                            # (The v2 bound also covers a legacy v0/v1 set of that
                            # record, whose per-record overhead is smaller.)  At most
                            # the pool's largest: the record's own size fits that (the
                            # builder refuses it as too large otherwise), and the
                            # bound's slack beyond it would fail the wait.
                            size_bytes = min(RecordBatchBuilder.size_upper_bound_bytes(
                                key, value, headers), self._pool.largest_bytes)
                            start_bytes = self._start_bytes_locked(queue, size_bytes)
                            self._discard_open_locked(queue)
                        except BaseException:
                            self._discard_open_locked(queue)
                            raise
                        else:
                            if not batch.builder.is_full:
                                self._linger.schedule(batch.created_ns + self._linger_ns,
                                                      queue, batch)
                                return appended
                            # A record that fills a batch alone (one within a record's
                            # least size of batch_size, or larger) leaves nothing to
                            # linger for: the batch goes now, as a later append would
                            # send it, and the linger thread is not woken for it (at 1
                            # MiB records it woke once or twice per record: 35-55 us).
                            queue.retire()
                            retired = filled = True
                if retired:
                    self._drain(queue)
                if filled:
                    return appended
                if buffer is None:
                    buffer = self._wait_for_memory(start_bytes, deadline)
        finally:
            if buffer is not None:
                buffer.release()  # taken but not used (closed, or a batch appeared)

    def _append_when_wal_has_room(self, topic, partition, key, value, headers, timestamp_ms,
                                  track, context):
        """The append once the WAL has room for records again: the backoff strategy
        waits for acknowledgements to free segments (block, park), or refuses the
        record (drop), within max_block_ms."""
        deadline = time.monotonic() + self._max_block_ms / 1000
        room = _WalRoom(self._wal)
        while True:
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                if not room.has_room():
                    self._backoff.wait_for_room(room, remaining_ms)
            except RecordDroppedError:
                with self._state_lock:
                    self._metrics["records_dropped"] += 1
                raise
            try:
                return self.append_once(topic, partition, key, value, headers, timestamp_ms,
                                        track, context)
            except errors.WalFullError:
                if time.monotonic() >= deadline:
                    raise BackpressureTimeoutError(
                        f"no room for a record within max_block_ms={self._max_block_ms} "
                        f"({room.describe()})") from None

    # ------------------------------------------------------------------
    # send_batch(): rows in bulk (the caller's thread).

    def topic_partitions(self, topic):
        """(all_partitions, available_partitions) of topic, as the partitioner sees
        them; waits for metadata (up to max_block_ms) if the topic is new."""
        with self.lock:
            table = self.table_locked(topic)
        if table is None:
            self._topic_waiter(topic, None)
            with self.lock:
                table = self.table_locked(topic)
        return table.all_partitions, table.available_partitions

    @property
    def batch_size_bytes(self):
        """batch_size: where send_batch()'s sticky plan ends a batch."""
        return self._batch_size

    def open_batch_state(self, topic, partition):
        """(size_bytes, record_count, first_timestamp_ms) of the partition's open
        batch now, or None: where send_batch()'s sticky plan starts."""
        with self.lock:
            queue = self.queue_locked(topic, partition)
            batch = None if queue is None else queue.open
            if batch is None:
                return None
            builder = batch.builder
            return builder.size_bytes, builder.record_count, builder.first_timestamp_ms

    def append_rows(self, topic, partition, rows, outcome):
        """Appends rows, in order, to partition's batches (partition None: unkeyed
        rows the partitioner places, sticky -- a full batch moves them on as it
        moves send()'s records).

        A batch's first row goes the per-record way (append_into_batch: metadata,
        memory, opening the batch, the sticky move); the rows after it go in bulk
        (rows.append_to: the builder's append_rows) while the
        batch has room.  A row the builder refuses (its type, its size, its
        timestamp) fails alone; an error of the partition itself (no metadata,
        no such partition, no memory within max_block_ms) fails the rows left, as
        each would wait as long again; so does a WAL that fails (a disk full as it
        rolls over), the rows it did not log taken out of the batch.

        rows: count, record(i) -> (key, value, headers, timestamp_ms), append_to(
        builder, start) -> rows appended.  outcome hears where each row went:
        appended(rows, batch_result, first_offset_delta, start, count) and
        refused(rows, start, count, error) (called with self.lock held), and says
        any_appended(): whether some row of the call went into a batch -- from
        then on a refusal of every record (a close(), a transaction's end) fails
        the rows left rather than raise, so that the call's result still tells.
        """
        start, count = 0, rows.count
        while start < count:
            try:
                # A row the encoder would refuse is refused as it is read, before a
                # batch is opened for it (Rows.record).
                key, value, headers, timestamp_ms = rows.record(start)
                batch, first = self.append_into_batch(topic, partition, key, value, headers,
                                                      timestamp_ms)
            except (TypeError, ValueError) as exc:
                outcome.refused(rows, start, 1, exc)
                start += 1
                continue
            except errors.KafkaError as exc:
                if self.refuses_every_record(exc) and not outcome.any_appended():
                    raise  # closed, or no transaction open: the call fails, not its rows
                # (Once some rows went, the caller needs the result to know which:
                # the rows left fail, whatever the reason.)
                outcome.refused(rows, start, count - start, exc)
                return
            run_start, start = start, start + 1
            retired = False
            wal_failure = None
            with self.lock:
                queue = self.queue_locked(topic, batch.result.partition)
                builder = batch.builder
                if queue.open is batch and builder.record_count != first + 1:
                    # Another thread appended between that row and this lock: the
                    # bulk rows' offsets start a run of their own.
                    outcome.appended(rows, batch.result, first, run_start, 1)
                    run_start, first = start, builder.record_count
                while start < count and queue.open is batch and self.refusal is None:
                    before = builder.record_count
                    try:
                        start += self._append_rows_to(rows, start, batch, queue)
                    except errors.WalFullError:
                        break  # the next row waits for room, on the per-record path
                    except errors.WalError as exc:
                        # The log failed (a roll over on a full disk): the rows it
                        # logged are in the batch, the others were cut from it again.
                        start += builder.record_count - before
                        wal_failure = exc
                        break
                    except (TypeError, ValueError) as exc:
                        # Row `start + appended` was refused, the ones before it taken.
                        start += builder.record_count - before
                        if start > run_start:
                            outcome.appended(rows, batch.result, first, run_start,
                                             start - run_start)
                        outcome.refused(rows, start, 1, exc)
                        start += 1
                        run_start, first = start, builder.record_count
                        continue
                    if start < count:
                        queue.retire()  # full: the next row opens a batch
                        retired = True
                if start > run_start:
                    outcome.appended(rows, batch.result, first, run_start, start - run_start)
            if retired:
                self._drain(queue)
            if wal_failure is not None:
                # As a failure on the per-record path: the rows left fail with it.
                if self.refuses_every_record(wal_failure) and not outcome.any_appended():
                    raise wal_failure
                outcome.refused(rows, start, count - start, wal_failure)
                return

    def _start_bytes_locked(self, queue, size_bytes):
        """With the lock held: the size of queue's next batch's first buffer, which is
        also what a wait for memory waits for: as large as its recent batches were
        (PartitionQueue.last_batch_bytes, at most batch_size), and at least size_bytes
        (0: the smallest class; more for a first record larger than that).

        Never smaller than recent batches while the pool is short of memory: a batch
        started small grows only while the pool has room, so it would be cut short
        at what little is free, teach its partition small batches, and keep the pool
        full of them.  Measured with 8 threads calling send() on one producer (100 B
        records, 1 MiB batches, 32 MiB, the client outrunning the broker): batches of
        190-430 KB instead of one thread's 1 MiB, and 1.0-1.5x one thread's client CPU
        per record; waiting for a buffer of the recent size instead, as the Java client
        waits for a whole batch: 0.9-1.0 MB batches, 1.1-1.2x."""
        return max(size_bytes, min(queue.last_batch_bytes, self._batch_size))

    def _append_rows_to(self, rows, start, batch, queue):
        """With the lock held: rows from start on into batch while it has room (and,
        with a WAL, their entries into the log); how many went in."""
        if self._wal is None:
            return rows.append_to(batch.builder, start)
        return self.wal.append_rows_to(batch.builder, rows.append_to, start, batch.wal_id,
                                       queue.topic, queue.partition)

    def _wait_for_memory(self, size_bytes, deadline):
        """A buffer of size_bytes (0: the pool's size) once the backoff strategy
        allows, within the time left to deadline; None if the strategy saw room but
        did not take it (the caller tries again)."""
        room = _PoolRoom(self._pool, size_bytes)
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        try:
            self._backoff.wait_for_room(room, remaining_ms)
        except RecordDroppedError:
            with self._state_lock:
                self._metrics["records_dropped"] += 1
            raise
        finally:
            room.leave_line()
        if room.buffer is None and time.monotonic() >= deadline:
            raise BackpressureTimeoutError(
                f"no memory for a batch within max_block_ms={self._max_block_ms} "
                f"({room.describe()})")
        return room.buffer

    def _open_locked(self, queue, buffer):
        """With the lock held: a new open batch for queue over buffer."""
        if self._legacy_magic is None:
            builder = RecordBatchBuilder(buffer, self._batch_size, self._max_request_size,
                                         self._compressor,
                                         transactional=self._transaction is not None,
                                         hold_values_from_bytes=HOLD_VALUES_FROM_BYTES)
        else:
            builder = LegacyMessageSetBuilder(self._legacy_magic, buffer, self._batch_size,
                                              self._max_request_size, self._compressor)
        batch = Batch(builder, BatchResult(queue.topic, queue.partition), time.monotonic_ns())
        if self._wal is not None:
            batch.wal_id = self._wal.open_batch()
        queue.open = batch
        # Once per batch, not per record: the topic is in use (remove_idle_tables).
        self.table_locked(queue.topic).used_ns = batch.created_ns
        with self._state_lock:
            self._incomplete.add(batch.result)
            self._metrics["batches_created"] += 1
        return batch

    def _discard_open_locked(self, queue):
        """With the lock held: drops queue's open batch, which took no record."""
        batch, queue.open = queue.open, None
        with self._state_lock:
            self._incomplete.discard(batch.result)
        if self._wal is not None:
            self._wal.discard_batch(batch.wal_id)
        batch.builder.mark_failed()
        batch.builder.release()

    def note_asked(self, topic):
        """partitions_for() (a caller's thread): the topic is in use, as if a batch
        opened; one never sent to goes idle too (remove_idle_tables)."""
        with self.lock:
            self._asked_ns[topic] = time.monotonic_ns()

    def remove_idle_tables(self, idle_ns, forget):
        """Any thread (an I/O thread's metadata answer): the topics that opened no
        batch, were not asked about (note_asked) and had no batch completed in the
        sender (Sender.topics_done_ns: a replayed batch's topic has no table here) for
        idle_ns (metadata_max_idle_ms) and have no batch open, queued or in flight -- in
        the sender neither, a spooled one say (Sender.forget_unused) -- go:
        forget(topics) is called with them, this lock held, so that metadata stops
        asking for them before a record can find the table gone and ask again (lock
        order: this lock, then the sender's topics lock, then the metadata's), and
        their tables go.  The next record for such a topic
        waits for its metadata as a first one does.  Looked at no more often than
        every idle_ns / 4 (a pass over every topic): a topic goes 1 to 1.25 times
        idle_ns after its last use, at the next metadata answer."""
        now_ns = time.monotonic_ns()
        with self.lock:
            if now_ns < self._next_idle_check_ns or self._cold_appends:
                return
            if self._spool is not None and self._spool.pending:
                return  # spooled batches (not in _incomplete) need their topics' leaders
            self._next_idle_check_ns = now_ns + idle_ns // 4
            used_ns = self._sender.topics_done_ns()
            for topic, asked_ns in self._asked_ns.items():
                used_ns[topic] = max(asked_ns, used_ns.get(topic, asked_ns))
            for topic, table in self.tables_locked():
                used_ns[topic] = max(table.used_ns, used_ns.get(topic, table.used_ns))
            idle = {topic for topic, used in used_ns.items() if used <= now_ns - idle_ns}
            if idle:
                with self._state_lock:
                    # Every batch opened and not completed yet (open, queued, in flight).
                    idle.difference_update(result.topic for result in self._incomplete)
            if not idle:
                return
            for topic in self._sender.forget_unused(idle, forget):
                if self.table_locked(topic) is not None:
                    self.remove_table_locked(topic)
                self._asked_ns.pop(topic, None)

    # ------------------------------------------------------------------
    # Handing over: send() threads, the linger thread, flush().

    def _drain(self, queue):
        """Hands queue's ready batches to the sender, oldest first, unless another
        thread is doing so already (it takes them all before it stops)."""
        with self.lock:
            if queue.draining or not queue.ready:
                return
            queue.draining = True
            batch = queue.ready.popleft()
        try:
            while True:
                self._hand_over(queue, batch)
                batch = None
                with self.lock:
                    if not queue.ready:
                        queue.draining = False
                        return
                    batch = queue.ready.popleft()
        except BaseException as exc:
            # Only an interrupt gets here (_hand_over turns errors into failed
            # batches): fail the batch in hand, let another thread drain the rest.
            with self.lock:
                queue.draining = False
            if batch is not None:
                self._complete(batch, None, error=errors.KafkaError(
                    f"handing the batch over was interrupted: {exc!r}"))
            raise

    def _hand_over(self, queue, batch):
        """Seals batch and gives it to the sender; a failure fails the batch."""
        builder = batch.builder
        view = None
        counted = False
        try:
            age_ns = time.monotonic_ns() - batch.created_ns
            if age_ns >= self._delivery_timeout_ns:
                raise KafkaTimeoutError(
                    f"{queue.topic}-{queue.partition}: batch of {builder.record_count} "
                    f"records not sent within delivery_timeout_ms="
                    f"{self._delivery_timeout_ns // 1_000_000} (waited "
                    f"{age_ns // 1_000_000} ms in the accumulator)")
            record_count = builder.record_count
            if self._idempotence is not None:
                # Numbered here, by the one thread draining the partition: its
                # sequences follow the order its batches reach the sender.
                builder.set_producer_state(*self._idempotence.next_sequence(
                    queue.topic, queue.partition, record_count))
            uncompressed_bytes = builder.size_bytes
            view = self._seal_and_log(batch, builder, queue.topic, queue.partition,
                                      record_count)
            sealed_bytes = view.nbytes
            # Counted before the sender has it: an I/O thread may complete it
            # before send() returns, and no one must see it done but not sent.
            self._count_sent(1, record_count, view.nbytes)
            counted = True
            # The builder itself: with idempotence the sender may re-stamp it.
            self._sender.send(queue.topic, queue.partition, builder, record_count,
                              created_ns=batch.created_ns,
                              on_done=functools.partial(self._on_delivered, batch, view),
                              wal_id=batch.wal_id)
        except Exception as exc:  # noqa: BLE001 -- the batch's futures carry it
            if counted:  # the sender refused it: not sent after all
                self._count_sent(-1, -record_count, -view.nbytes)
            # Done in the WAL before its sequences go to the next batch: a replay must
            # never send this one and that one under the same sequences.
            exc = self._log_outcome(batch, exc)
            if self._idempotence is not None and builder.producer_id >= 0:
                # Numbered but never sent: its sequences are the partition's next.
                self._idempotence.release_sequence(
                    queue.topic, queue.partition, builder.producer_id,
                    builder.producer_epoch, builder.base_sequence, record_count)
            self._complete(batch, view, error=exc)
            return
        if self._stats is not None:
            # The view may be released by now (an I/O thread completed the batch).
            self._stats.batch_sent(queue.topic, record_count, uncompressed_bytes,
                                   sealed_bytes, age_ns / 1e6)

    def _seal_and_log(self, batch, builder, topic, partition, record_count):
        """Seals the batch and returns its view; with a WAL, logs its SEAL entry before
        the sender has it: a batch that may be in the broker's log is never unknown to
        the WAL (with fsync "always", on disk first).  The view is for its size and
        header only (the values the batch holds are not copied into it)."""
        view = builder.seal(contiguous=False)
        if self._wal is not None:
            batch_crc, attributes = _CRC_AND_ATTRIBUTES.unpack_from(view, 17)
            self._wal.log_seal(batch.wal_id, topic, partition, builder.producer_id,
                               builder.producer_epoch, builder.base_sequence, record_count,
                               attributes, batch_crc, view.nbytes)
        return view

    def _count_sent(self, batches, records, nbytes):
        with self._state_lock:
            self._metrics["batches_sent"] += batches
            self._metrics["records_sent"] += records
            self._metrics["bytes_sent"] += nbytes

    def _on_delivered(self, batch, view, result, error):
        """The sender's outcome (an I/O thread, usually)."""
        if result is not None:  # a split batch's may come with an error (ProduceResult)
            self._complete(batch, view, base_offset=result.base_offset,
                           log_append_time_ms=result.log_append_time_ms, error=error,
                           parts=result.parts)
        else:
            self._complete(batch, view, error=error)

    def _log_outcome(self, batch, error, parts=()):
        """The batch's DONE entry, once; returns the error its records are told
        (log_wal_outcome)."""
        done, error = self.log_wal_outcome(batch.wal_id, error, parts)
        if done:
            batch.wal_id = 0
        return error

    def log_wal_outcome(self, wal_id, error, parts=()):
        """Any thread: a batch's DONE entry in the WAL, acknowledged or failed for good
        -- but a failure from close() on, or one the spool takes (_spools()), is not
        logged: the batch is sent again.  parts: a split batch's (ProduceResult.parts).
        Returns (whether the batch is done with the WAL: its DONE logged, or refused by
        a failed log; the error its records are told: error, or for a failure from
        close() on a RecordKeptError, for a failure whose DONE the failed log refused a
        WalStorageError, each saying that the next producer on the directory replays
        them)."""
        if self._wal is None or not wal_id:
            return False, error
        with self._state_lock:
            closing = error is not None and self._wal_keeps_failures
        if closing:
            return False, self._kept_error(error)
        if error is not None and self._spools(error, parts):
            return False, error
        try:
            self._wal.log_done(wal_id, OUTCOME_ACKNOWLEDGED if error is None
                               else OUTCOME_FAILED)
        except errors.WalError as exc:
            # A log that failed (a sync or write refused, no room on disk for a
            # segment) must not keep the outcome from the batch's futures, nor its
            # memory from the pool: the batch stays live in the WAL, and the next
            # producer on the directory replays it -- a failure says so, or records
            # told only "failed" arrive later.
            _log.error("WAL: the outcome of a batch cannot be logged (%s); the next "
                       "producer on the directory replays it", exc)
            if error is not None:
                kept = errors.WalStorageError(
                    f"{error}; the records stay in the write-ahead log at "
                    f"{self._wal.directory}, which failed and cannot log that they did "
                    f"not go: the next producer opened on that directory replays them "
                    f"(its on_replay reports their fate)", errno=getattr(exc, "errno", None))
                # Its frames must not keep views of the batch alive (_complete).
                traceback.clear_frames(error.__traceback__)
                kept.__cause__ = error
                return True, kept
        return True, error

    @property
    def compressor(self):
        """The Compressor every batch is sealed with, or None (thread-safe)."""
        return self._compressor

    @property
    def buffer_pool(self):
        """The BufferPool batches take their memory from (thread-safe)."""
        return self._pool

    @property
    def wal_keeps_failures(self):
        """Whether a batch that fails now stays in the WAL (close() has begun)."""
        with self._state_lock:
            return self._wal_keeps_failures

    def keep_failures_in_wal(self):
        """From now on (close()), batches that fail stay in the WAL, to be replayed."""
        with self._state_lock:
            self._wal_keeps_failures = True

    def _complete(self, batch, view, base_offset=-1, log_append_time_ms=-1, error=None,
                  parts=()):
        """The WAL's DONE entry first (what the application learns next must not be
        replayed), memory back to the pool (a send() may be waiting for it), then the
        futures, then flush()'s set.  A delivery timeout with the spool on keeps the
        batch instead (_spool_batch), a split batch's only when every part timed out
        (_spools()).

        A split batch's records take their parts' outcomes, and it is done in the WAL:
        the records of its parts that failed are told so and never replayed.  Its
        produce() records (counted, not told one by one) in the failed parts count as
        failed for flush()."""
        if error is not None and self._spools(error, parts):
            self._spool_batch(batch, view, error)
            return
        if batch.wal_id:  # without a WAL, no call: this runs for every batch
            error = self._log_outcome(batch, error, parts)
        builder = batch.builder
        record_count = builder.record_count
        failed_count = _failed_records(record_count, error, parts)
        untracked_failed = ()  # (count, error) of its failed produce() records
        if failed_count and batch.untracked_records:
            untracked_failed = (_failed_untracked(batch, record_count, parts) if parts
                                else ((batch.untracked_records, error),))
        if error is not None:
            # The error lives on in the records' futures; its traceback's frames must
            # not keep views of the batch (and so its memory) alive with it.
            traceback.clear_frames(error.__traceback__)
        release_batch(builder, view, error is None)
        if error is not None and self._transaction is not None:
            self._transaction.record_failed(error)
        if parts:
            batch.result.complete_parts(parts)
        elif error is None:
            batch.result.succeed(base_offset, log_append_time_ms)
        else:
            batch.result.fail(error)
        with self._state_lock:
            self._incomplete.discard(batch.result)
            self._metrics["records_acknowledged"] += record_count - failed_count
            if failed_count:
                self._metrics["records_failed"] += failed_count
                if self._stats is not None:
                    self._stats.batch_failed(batch.result.topic, failed_count)
                for count, part_error in untracked_failed:
                    self._count_untracked_locked(count, part_error)

    # ------------------------------------------------------------------
    # The spool (on_delivery_timeout='spool').

    def _spools(self, error, parts=()):
        """Whether a batch that failed with error goes to the spool: a delivery
        timeout with the spool on.  A split batch (parts: its ProduceResult.parts)
        only when every part timed out: the spool resends the batch whole (the WAL
        knows it whole), which would write an acknowledged part again.  A leader's
        connection full for max_block_ms (BackpressureTimeoutError, a
        KafkaTimeoutError too) is no delivery timeout: the batch fails."""
        return (self._spool is not None and _is_delivery_timeout(error)
                and all(_is_delivery_timeout(part[3]) for part in parts))

    def _spool_batch(self, batch, view, error):
        """A batch whose delivery timed out: its futures fail with RecordSpooledError,
        and it stays -- its records in the WAL, its bytes in memory -- for the spool
        to send again."""
        batch.result.fail(self._spooled_error(error))
        with self._state_lock:
            self._incomplete.discard(batch.result)
        self._keep_spooled(batch, view, None)

    def spool_replayed(self, wal_id, topic, partition, builder, view, error, parts,
                       on_final):
        """An I/O thread: a batch replay.py sent (its sealed builder and view, its WAL
        id) failed with error (split: parts, ProduceResult.parts).  A delivery timeout
        with the spool on keeps it (_spools()), as this producer's own batches are
        kept: returns the RecordSpooledError its records are told, and
        on_final(result, error) hears its outcome once the spool has one.  Else
        returns None: the batch is the caller's still."""
        if not self._spools(error, parts):
            return None
        batch = Batch(builder, BatchResult(topic, partition), time.monotonic_ns())
        batch.wal_id = wal_id
        spooled = self._spooled_error(error)
        self._keep_spooled(batch, view, on_final)
        return spooled

    def _kept_error(self, error):
        """A failure from close() on, whose batch the WAL keeps: the records are told
        that the next producer on the directory replays them (an application that sent
        "failed" records again would send them twice)."""
        kept = errors.RecordKeptError(
            f"{error}; the record is kept in the write-ahead log at {self._wal.directory} "
            f"and replayed by the next producer that opens it")
        kept.__cause__ = error
        return kept

    def _spooled_error(self, error):
        spooled = errors.RecordSpooledError(
            f"{error}; the record is kept in the write-ahead log at {self._wal.directory} "
            f"and sent again when the cluster answers")
        spooled.__cause__ = error
        traceback.clear_frames(error.__traceback__)
        return spooled

    def _keep_spooled(self, batch, view, on_final):
        with self._state_lock:
            self._metrics["records_spooled"] += batch.builder.record_count
        self._spool.keep(batch, view, on_final)

    def seal_spooled(self, batch, view):
        """The spool thread: batch's sealed view, sealing (and SEAL-logging) it if it
        timed out before it was."""
        if view is not None:
            return view
        builder = batch.builder
        return self._seal_and_log(batch, builder, batch.result.topic, batch.result.partition,
                                  builder.record_count)

    def resend_spooled(self, batch, view, on_final):
        """The spool thread: the sealed batch to the sender again, numbered anew (its
        old stamp timed out with the partition, which started over); on_final: None,
        or spool_replayed()'s.  Raises what the sender raises; the sequences go back
        then, and the spool tries again later."""
        builder = batch.builder
        topic, partition = batch.result.topic, batch.result.partition
        count = builder.record_count
        if self._idempotence is not None:
            builder.rewrite_producer_state(*self._idempotence.next_sequence(
                topic, partition, count))
        # Counted before the sender has it (as _hand_over counts): an I/O thread may
        # complete it before send() returns.  Each attempt counts: the bytes may be in
        # the broker's log already, and the sender counts none of this as a retry.
        self._count_spool_sent(count)
        try:
            if self._idempotence is not None:
                # In the try: a failed log gives the sequences back too, or each
                # attempt would leave a hole in the partition's.
                (batch_crc,) = struct.unpack_from(">I", view, 17)
                self._wal.sync_restamps(self._wal.log_restamp(
                    batch.wal_id, builder.producer_id, builder.producer_epoch,
                    builder.base_sequence, batch_crc))
            self._sender.send(topic, partition, builder, count,
                              on_done=functools.partial(self._on_spool_delivered, batch,
                                                        view, on_final),
                              wal_id=batch.wal_id)
        except BaseException:
            self._count_spool_sent(-count)
            if builder.producer_id >= 0:
                self._idempotence.release_sequence(topic, partition, builder.producer_id,
                                                   builder.producer_epoch,
                                                   builder.base_sequence, count)
            raise

    def _count_spool_sent(self, records):
        with self._state_lock:
            self._metrics["records_spool_sent"] += records

    def _on_spool_delivered(self, batch, view, on_final, result, error):
        """A spooled batch's outcome (an I/O thread): delivered, timed out again (kept
        again), or failed for good.  Its futures heard of it already; a replayed
        batch's on_final hears it now.

        Split, some parts timed out and others not (in the topic, or failed for good):
        its records were told they are sent again, and the WAL knows the batch whole.
        It stays there, not done, for the next producer on the directory to replay
        (under its stamp: the broker drops the parts it has while among its last five
        batches of the producer; else they count as possibly duplicated), rather than
        the spool writing the acknowledged parts again at every resend."""
        parts = () if result is None else result.parts
        if error is not None and self._spools(error, parts):
            self._spool.keep(batch, view, on_final)
            return
        builder = batch.builder
        topic, partition = batch.result.topic, batch.result.partition
        if error is not None and any(self._spools(part[3]) for part in parts):
            _log.error("a spooled batch of %d records to %s-%d was split and only some "
                       "of its parts timed out (%s): it stays in the write-ahead log at "
                       "%s, and the next producer that opens it replays it",
                       builder.record_count, topic, partition, error, self._wal.directory)
            release_batch(builder, view, False)
            return
        if error is not None and self.wal_keeps_failures:
            # close() came first: the WAL keeps the batch, the next producer on the
            # directory replays it -- not a failure, and on_final's record hears its
            # fate from that producer's on_replay, as a batch still spooled at close().
            _log.warning("a spooled batch of %d records to %s-%d was not delivered "
                         "before close() (%s): it stays in the write-ahead log at %s, and "
                         "the next producer that opens it replays it", builder.record_count,
                         topic, partition, error, self._wal.directory)
            release_batch(builder, view, False)
            return
        if batch.wal_id:  # without a WAL, no call: this runs for every batch
            error = self._log_outcome(batch, error, parts)
        if error is not None:
            _log.error("a spooled batch of %d records to %s-%d failed for good: %s",
                       builder.record_count, topic, partition, error)
        failed = _failed_records(builder.record_count, error, parts)
        release_batch(builder, view, error is None)
        with self._state_lock:
            self._metrics["records_spool_delivered"] += builder.record_count - failed
            self._metrics["records_spool_failed"] += failed
        if on_final is not None:
            on_final(result, error)

    def release_spooled(self, batch, view):
        """close(): a batch still spooled is kept in the WAL (no DONE entry), its memory
        given back."""
        release_batch(batch.builder, view, False)

    def append_failed(self, error):
        """Any thread, no lock held: send(), produce() or send_batch() raises error, the
        record (or the call's rows) not taken: a transaction fails as the Java client's
        send() fails it (TransactionManager.append_failed)."""
        if self._transaction is not None:
            self._transaction.append_failed(error)

    def rows_refused(self, error):
        """send_batch(), no lock held: rows were refused before reaching a batch (error,
        the first one's) and the call went on with the others.  A transaction fails as
        with a record that failed: committed, it would lack them."""
        if self._transaction is not None:
            self._transaction.record_failed(error)

    def count_untracked_failure(self, error):
        """Any thread: a fire-and-forget record refused before it reached a batch
        (produce() does not raise it): counted, and raised by flush()."""
        if self._transaction is not None:
            self._transaction.record_failed(error)
        with self._state_lock:
            self._metrics["records_failed"] += 1
            self._count_untracked_locked(1, error)

    def count_untracked_delivery_failure(self, error):
        """Any thread: a produce() record that went through interceptors (and so has
        a future, whose batch counted it in records_failed) failed: raised by
        flush() like other produce() failures."""
        with self._state_lock:
            self._count_untracked_locked(1, error)

    def _count_untracked_locked(self, count, error):
        self._metrics["records_untracked_failed"] += count
        self._untracked_failed += count
        if len(self._untracked_errors) < FIRST_ERRORS_KEPT:
            self._untracked_errors.append(error)

    # ------------------------------------------------------------------
    # The linger thread.

    def _on_linger_expired(self, queue, batch):
        with self.lock:
            if queue.open is not batch:
                return  # full, flushed or discarded already
        # Asked with no lock held: the Sender takes its own lock and the metadata's.  A
        # record or a flush() may retire the batch meanwhile: checked again below.  Not
        # held past its delivery timeout: handed over, it fails then (_hand_over).
        if (not batch.released
                and time.monotonic_ns() - batch.created_ns < self._delivery_timeout_ns
                and self._sender.hold_while_queued(
                    queue.topic, queue.partition,
                    functools.partial(self._release_held, queue, batch))):
            self._linger.schedule(time.monotonic_ns() + HELD_RECHECK_MS * 1_000_000,
                                  queue, batch)
            return
        with self.lock:
            if queue.open is not batch:
                return
            queue.retire()
        self._drain(queue)

    def _release_held(self, queue, batch):
        """The sender lets a batch it held go (an I/O thread): handed over when the
        linger thread gets to it, not held again.  Released with the other batches
        held for its broker, it goes in the request after the one that released
        them; asked again, all but the first would see that first one queued and be
        held once more, one batch per request."""
        batch.released = True
        self._linger.schedule(0, queue, batch)

    # ------------------------------------------------------------------
    # Any thread.

    def flush(self, timeout_s=None):
        """Closes every open batch, hands everything over, and waits until every
        batch that existed when flush() was called is completed.

        Raises:
            KafkaTimeoutError: some are still pending after timeout_s.
            UndeliveredRecordsError: fire-and-forget records (append_untracked)
                failed since the previous flush(); the count starts again at 0.
        """
        with self.lock:
            queues = self.queues_locked()
            for queue in queues:
                if queue.open is not None:
                    queue.retire()
            queues = [queue for queue in queues if queue.ready]
            with self._state_lock:
                waiting = list(self._incomplete)
        for queue in queues:
            self._drain(queue)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for result in waiting:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not result.wait(remaining):
                # Done is not enough: a batch counts until its callbacks have returned
                # (one still running counted as 0 "not delivered").
                left = sum(1 for r in waiting if not r.done)
                running = sum(1 for r in waiting if r.done and not r.wait(0))
                raise KafkaTimeoutError(
                    f"flush: {left} batches still not delivered after {timeout_s} s"
                    + (f", {running} with callbacks still running" if running else ""))
        self._raise_untracked_failures()

    def _raise_untracked_failures(self):
        """Raises UndeliveredRecordsError for the fire-and-forget records (append_untracked)
        that failed since it was last raised; the count starts again at 0."""
        with self._state_lock:
            failed, self._untracked_failed = self._untracked_failed, 0
            first_errors, self._untracked_errors = self._untracked_errors, []
        if failed:
            raise UndeliveredRecordsError(failed, first_errors)

    def close(self, timeout_s=None):
        """Refuses further records, flushes for up to timeout_s (None: until done),
        stops the linger thread and the spool.  What is left is failed by
        fail_incomplete().  With no time (0), nothing more is handed over, as the
        Java client's close(0) forces it: what had not gone out fails for certain,
        where a flush of no time sent it and the close then cut its answer off
        (failed, "may be in the log", and written)."""
        with self.lock:
            self.closed = True
            self.refusal = _closed_refusal
        try:
            if timeout_s is None or timeout_s > 0:
                self.flush(timeout_s)
            else:
                self._raise_untracked_failures()
        finally:
            self._linger.stop()
            if self._spool is not None:
                self._spool.stop()

    def refuses_every_record(self, error):
        """Any thread: whether error, raised for a record, refused every record (closed,
        no transaction open, the transaction failed earlier: see set_refusal) rather
        than that one, whose failure may have failed the transaction itself
        (append_failed) and so made records refused from then on."""
        with self.lock:
            refusing = self.refusal is not None
        return refusing and (self._transaction is None
                             or not self._transaction.failed_with(error))

    def raise_if_refusing(self):
        """Any thread: raises what a record sent now would raise, if records are
        refused (see set_refusal): send_batch() of no rows says it too."""
        with self.lock:
            if self.refusal is not None:
                raise self.refusal()

    def set_refusal(self, refusal):
        """What a record sent from now on raises (a callable making it), or None to
        take records again; a closed accumulator keeps refusing.  The transaction
        state machine's gate."""
        with self.lock:
            if not self.closed:
                self.refusal = refusal

    def fail_incomplete(self, error):
        """Fails every batch not handed over yet: the end of close(), and a
        transaction's abort or failure (records are refused by then)."""
        with self.lock:
            leftovers = []
            for queue in self.queues_locked():
                if queue.open is not None:
                    queue.retire()
                leftovers += queue.ready
                queue.ready.clear()
        for batch in leftovers:
            self._complete(batch, None, error=error)

    def fail_after_fork(self, error):
        """In a forked child only: fails every batch not completed at the fork.  They
        are the parent's to deliver; here they can only fail.  Takes no lock (a
        parent thread may have held one at the fork): the child runs one thread now,
        and this accumulator is never used again."""
        for result in list(self._incomplete):
            result.fail_after_fork(error)

    def metrics(self):
        """Counters: batches_created, batches_sent, records_sent, bytes_sent,
        records_acknowledged, records_failed, records_dropped (refused for lack of
        memory, backoff='drop'), with the spool records_spooled (delivery timed out,
        kept), records_spool_sent (handed to the sender again, at every attempt: a
        batch kept again after another timeout counts again -- resends the sender's
        batches_retried does not count, whose bytes the broker may hold already),
        records_spool_delivered, records_spool_failed (for good: not a batch close()
        cut short, which the WAL keeps for the next producer's replay) and
        spool_batches (waiting now), records_untracked_failed (those of records_failed
        sent with no future: produce()); batches_incomplete; buffer_total_bytes and
        buffer_available_bytes."""
        with self._state_lock:
            snapshot = dict(self._metrics)
            snapshot["batches_incomplete"] = len(self._incomplete)
        for key in ("batches_created", "batches_sent", "records_sent", "bytes_sent",
                    "records_acknowledged", "records_failed", "records_dropped",
                    "records_untracked_failed"):
            snapshot.setdefault(key, 0)
        if self._spool is not None:
            for key in ("records_spooled", "records_spool_sent", "records_spool_delivered",
                        "records_spool_failed"):
                snapshot.setdefault(key, 0)
            snapshot["spool_batches"] = self._spool.pending
        snapshot["buffer_total_bytes"] = self._pool.total_bytes
        snapshot["buffer_available_bytes"] = self._pool.available_bytes
        return snapshot


def _closed_refusal():
    return ProducerClosedError("the producer is closed: it takes no more records")


def _failed_records(record_count, error, parts):
    """How many of a batch's record_count records failed: all of them, none, or of a
    split batch (parts: ProduceResult.parts), those of its failed parts."""
    if error is None:
        return 0
    if not parts:
        return record_count
    return sum(end - first for first, end, _ in _failed_parts(record_count, parts))


def _failed_untracked(batch, record_count, parts):
    """(count, error) of a split batch's produce() records in its failed parts, one
    per kind of error: the first part's of each class stands for the others (a
    record the broker named invalid keeps its own, the parts refused as too large
    one between them)."""
    by_kind = {}
    for first, end, error in _failed_parts(record_count, parts):
        count = batch.untracked_in(first, end)
        if count:
            kept_count, kept = by_kind.get(type(error), (0, error))
            by_kind[type(error)] = (kept_count + count, kept)
    return tuple(by_kind.values())


def _failed_parts(record_count, parts):
    """The (first, end, error) of a split batch's failed parts, by record index."""
    ends = [part[0] for part in parts[1:]] + [record_count]
    return [(part[0], end, part[3]) for part, end in zip(parts, ends) if part[3] is not None]


def release_batch(builder, view, acknowledged):
    """A batch is done: its state says so, its view (if any) goes, and its memory back
    to the pool -- unless a request on an I/O thread still holds a view of the bytes:
    then the buffers go back when that view goes (PooledBuffer.__dealloc__)."""
    if acknowledged:
        builder.mark_acknowledged()
    else:
        builder.mark_failed()
    if view is not None:
        view.release()
    try:
        builder.release()
    except BufferError:
        pass


def _is_delivery_timeout(error):
    return (isinstance(error, KafkaTimeoutError)
            and not isinstance(error, BackpressureTimeoutError))


class _PoolRoom:
    """The buffer pool as a backoff target (backoff.py's Backpressured protocol) for
    one buffer of size_bytes.  The first check that finds no room takes a place in
    the pool's line of waiters, which block sleeps in and park polls: waiters are
    served in the order they came whatever their strategy (a park-mode send()
    polling took memory ahead of block-mode ones waiting longer).  A
    check that finds room takes the buffer, so that no other thread can take it
    before the caller's retry.  leave_line() once done, served or not.  Used by one
    thread."""

    __slots__ = ("pool", "size_bytes", "buffer", "place")

    def __init__(self, pool, size_bytes):
        self.pool = pool
        self.size_bytes = size_bytes
        self.buffer = None  # the buffer a check or wait took, for the caller
        self.place = None  # the place in the pool's line, once a check found no room

    def has_room(self):
        if self.buffer is None:
            if self.place is None:
                self.buffer = self.pool.try_acquire(self.size_bytes)
                if self.buffer is None:
                    self.place = self.pool.join_line(self.size_bytes)
            else:
                self.buffer = self.pool.try_acquire(place=self.place)
        return self.buffer is not None

    def wait_for_room(self, timeout_s):
        if not self.has_room():
            self.buffer = self.pool.acquire(timeout_ms=timeout_s * 1000, place=self.place)
        return self.buffer is not None

    def leave_line(self):
        if self.place is not None:
            self.pool.leave_line(self.place)

    def describe(self):
        return (f"the producer's buffer pool ({self.pool.available_bytes} of "
                f"{self.pool.total_bytes} bytes free, buffer_memory)")


class _WalRoom:
    """The WAL as a backoff target (backoff.py's Backpressured protocol): room for a
    record once acknowledged segments are reclaimed."""

    __slots__ = ("wal",)

    def __init__(self, wal):
        self.wal = wal

    def has_room(self):
        return self.wal.has_room_for_records()

    def wait_for_room(self, timeout_s):
        return self.wal.wait_for_room(timeout_s)

    def describe(self):
        return self.wal.describe_room()


class _Spool:
    """on_delivery_timeout='spool': batches whose delivery timed out, handed to the
    sender again one by one by the "netkafka-spool" thread; when the sender refuses one
    (its topic's partitions not known within max_block_ms: the cluster is still away; a
    partition without a leader is no refusal, its batch waits in the sender) the thread
    waits retry_backoff_ms and tries again.  Their records stay in the WAL throughout: a
    producer that stops meanwhile leaves them to the next one's replay."""

    def __init__(self, accumulator, retry_backoff_ms):
        self._accumulator = accumulator  # immutable
        self._pause_s = max(retry_backoff_ms, 1) / 1000  # immutable
        self._cond = threading.Condition(threading.Lock())
        # Guarded by _cond: (Batch, sealed view or None, on_final or None: see
        # RecordAccumulator.spool_replayed).
        self._batches = collections.deque()
        self._stopping = False  # guarded by _cond
        self._thread = threading.Thread(target=self._run, name="netkafka-spool", daemon=True)
        self._thread.start()

    @property
    def pending(self):
        """Batches waiting to be sent again."""
        with self._cond:
            return len(self._batches)

    def keep(self, batch, view, on_final):
        """Any thread: batch waits to be sent again."""
        with self._cond:
            if self._stopping:
                stopped = True
            else:
                stopped = False
                self._batches.append((batch, view, on_final))
                self._cond.notify()
        if stopped:
            self._accumulator.release_spooled(batch, view)

    def stop(self, timeout_s=5.0):
        """Stops the thread; what is still spooled stays in the WAL."""
        with self._cond:
            self._stopping = True
            leftovers = list(self._batches)
            self._batches.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)
        for batch, view, _ in leftovers:
            self._accumulator.release_spooled(batch, view)

    def _run(self):
        mark_own_thread()
        while True:
            with self._cond:
                while not self._batches and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                batch, view, on_final = self._batches.popleft()
            try:
                view = self._accumulator.seal_spooled(batch, view)
                self._accumulator.resend_spooled(batch, view, on_final)
            except Exception as exc:  # noqa: BLE001 -- the cluster is away: try later
                _log.debug("spooled batch not taken yet: %s", exc)
                with self._cond:
                    stopping = self._stopping
                    if not stopping:
                        self._batches.appendleft((batch, view, on_final))
                        self._cond.wait(self._pause_s)
                if stopping:
                    self._accumulator.release_spooled(batch, view)


class _LingerTimer:
    """The linger thread: hands over batches whose linger_ms has passed.

    It sleeps until the earliest deadline of a batch still open, not of every batch: a
    busy partition fills its batch before linger_ms, and each wake costs the process
    14-80 us of CPU on a 2-core VM (a futex wake and the GIL's hand-over; 128 KiB
    records woke it 1.2 times per batch).  While batches keep filling early it sleeps
    linger_ms at a time, since no batch opened meanwhile can be due sooner; once a wake
    finds nothing scheduled it sleeps until schedule() wakes it."""

    def __init__(self, accumulator):
        self._accumulator = accumulator  # immutable
        self._linger_ns = accumulator._linger_ns  # immutable
        self._cond = threading.Condition(threading.Lock())
        self._heap = []  # guarded by _cond: (deadline_ns, seq, queue, batch)
        self._seq = itertools.count()  # guarded by _cond: ties in the heap
        self._stopping = False  # guarded by _cond
        # Guarded by _cond; read by schedule() while the thread waits: when its wait ends
        # (monotonic ns), or None for a wait only schedule() ends.
        self._wake_ns = None
        # Guarded by _cond: the thread looks at the heap before it waits again (it is
        # handing a batch over, or was notified), so schedule() need not notify: with
        # _wake_ns None from its last wait, every schedule() meanwhile notified
        # (108,000 notifies in 900,000 keyed records over 10,000 partitions).
        self._looking = True
        self._thread = threading.Thread(target=self._run, name="netkafka-linger", daemon=True)
        self._thread.start()

    def schedule(self, deadline_ns, queue, batch):
        """Any thread: batch leaves queue's open slot at deadline_ns at the latest."""
        with self._cond:
            heapq.heappush(self._heap, (deadline_ns, next(self._seq), queue, batch))
            if not self._looking and (self._wake_ns is None or deadline_ns < self._wake_ns):
                self._cond.notify()  # due before the thread would wake
                self._looking = True

    def stop(self, timeout_s=5.0):
        with self._cond:
            self._stopping = True
            self._heap.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _drop_retired_locked(self):
        """Pops the earliest deadlines of batches already gone from their queue's open
        slot (filled, flushed or discarded); returns how many.  queue.open is read
        without the accumulator's lock: a batch never returns to the open slot once it
        has left, so the read can be late (the entry then waits for its deadline and
        _on_linger_expired finds it gone) but never drops a batch still open."""
        heap, dropped = self._heap, 0
        while heap and heap[0][2].open is not heap[0][3]:
            heapq.heappop(heap)
            dropped += 1
        return dropped

    def _run(self):
        mark_own_thread()
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    dropped = self._drop_retired_locked()
                    now_ns = time.monotonic_ns()
                    if self._heap and self._heap[0][0] <= now_ns:
                        _, _, queue, batch = heapq.heappop(self._heap)
                        self._looking = True
                        break
                    if self._heap:
                        self._wake_ns = self._heap[0][0]
                    elif dropped and self._linger_ns:
                        # Batches are filling before their deadlines: any batch opened
                        # from now on is due linger_ms from now at the earliest (an
                        # earlier deadline, e.g. a held batch's recheck, wakes us).
                        self._wake_ns = now_ns + self._linger_ns
                    else:
                        self._wake_ns = None
                    self._looking = False
                    # At most threading's longest wait: a linger_ms beyond it (some
                    # 292 years) raised OverflowError here, ending this thread.
                    self._cond.wait(None if self._wake_ns is None
                                    else min((self._wake_ns - now_ns) / 1e9,
                                             threading.TIMEOUT_MAX))
            try:
                self._accumulator._on_linger_expired(queue, batch)
            except Exception:  # noqa: BLE001 -- the thread must keep serving the others
                _log.exception("linger expiry of a %s-%d batch failed", queue.topic,
                               queue.partition)
