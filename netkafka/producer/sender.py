"""The sender: sealed record batches in, acknowledged offsets out.

A caller hands over a sealed batch for (topic, partition).  The sender looks up
the partition's leader, applies the backoff strategy if that broker's
connection is above its high watermark, and queues the batch for the broker;
the batch's bytes count as the connection's outbound bytes from then on.  A
partition without a leader parks its batch until metadata names one.

When the connection can take another request (fewer than max_in_flight
outstanding, nothing left to write) its I/O thread asks the sender for one:
the broker's queued batches, at most one per partition, up to
max_request_size, become one Produce request whose buffers are the batches'
own memory.  Answers complete the batches (their on_done); retriable errors put the
batch back at the front of its partition's queue after a backoff
(retry_backoff_ms, doubling with each resend up to retry_backoff_max_ms) and
ask for fresh metadata when the error says the leader moved, until retries
or delivery_timeout_ms run out.  A batch in a request fails at its delivery
timeout too, as the Java client's does, not when the request's answer or
request_timeout_ms comes (its error says it may be in the log) -- unless it is
a transaction's (_sweep).

Idempotent batches (sealed with a producer id and sequence): idempotence.py's
ProducerIdManager keeps each partition's batches not yet completed in send order
and says which may go out.  A batch refused with OUT_OF_ORDER_SEQUENCE_NUMBER or
UNKNOWN_PRODUCER_ID is resent: after the earlier batch it waits for, or, first of
its partition, after the partition starts over under a new epoch -- as the batches
behind one that failed for good do (re-stamped in place, see idempotence.py).
Refused so once a later batch of its partition was acknowledged, it is in the log
(acknowledged, offset unknown) if an attempt of it may have been written, else it
fails: the broker passed over it.  DUPLICATE_SEQUENCE_NUMBER means the broker has the
batch already: acknowledged, offset unknown (-1).

A batch of two records or more refused as MESSAGE_TOO_LARGE is split in halves
(split.py), which take its place in its partition's queue -- and, idempotent, its
place among the partition's outstanding batches, with its sequences -- and its
on_done hears their outcomes together (_SplitOutcome, ProduceResult.parts).  While
a part is in a request, its partition's next batch waits for the answer: a part
refused again is split in its turn, its halves ahead of the parts after it.

Transactional batches: the TransactionManager (transaction_manager.py) is told
of each batch as it is queued (its partition joins the transaction) and asked,
per partition and request, whether the partition's batches may go out yet; a
hole in a transaction's sequence fails its batch (the transaction is aborted
and starts over under the next epoch) instead of re-stamping it.

Queues: per broker, one FIFO per partition; a request takes the head of each
partition in turn (round robin across requests, so a busy partition cannot
starve the others when max_request_size cuts a request short), and stops at the
first head that does not fit: a request costs the partitions it carries, not
every partition queued.  A resent
batch goes back into its partition's FIFO in send order.

Threads: send(), flush(), close() run on callers' threads (and hold_while_queued()
on the accumulator's linger thread); next_request(),
has_pending(), the answer handling and on_failure() (a connection refused:
its queued batches fail at once) on I/O threads.  All queues and
counters are guarded by ``_lock``.  Lock order: Sender._lock, then
``_topics_lock``, a connection's, the metadata's, the ProducerIdManager's or the
transaction state machine's lock, never the other way round.  ``_topics_lock``
(the batches held per topic) comes after the accumulator's lock too
(forget_unused()) and before the metadata's only.
"""
import collections
import copy
import functools
import logging
import threading
import time
from concurrent.futures import Future
from typing import NamedTuple

from netkafka import errors
from netkafka._validate import check_int
from netkafka.config import acks_value
from netkafka.producer.backoff import backoff_strategy
from netkafka.client.connection import Request
from netkafka.client.retry import RetryBackoff
from netkafka.errors import KafkaConnectionError, KafkaTimeoutError, RecordDroppedError
from netkafka.producer.accumulator import release_batch
from netkafka.producer.idempotence import APPENDED, PASSED_OVER, RESTART, may_be_appended
from netkafka.producer.split import split_in_halves
from netkafka.protocol.framing import ApiKey
from netkafka.protocol.produce import (
    decode_produce_response, encode_produce_request, wire_bytes,
)
from netkafka.record._pool import PooledBatch

_log = logging.getLogger("netkafka.producer.sender")

# The largest offset a record can have (int64).  A base offset answered with less room
# than the batch's records need is no broker's: each record's offset is base + index,
# computed in int64 by the futures (_futures.pyx) and send_batch's offsets().
_MAX_OFFSET = 2**63 - 1
# A batch's magic byte, and a RecordBatch v2's (legacy message sets: 0 and 1).
_MAGIC_AT = 16
_MAGIC_V2 = 2


class ProduceResult(NamedTuple):
    """A batch's outcome when acknowledged.  base_offset is -1 when unknown (acks=0, a
    duplicate, an offset no broker could answer).

    parts: () for a batch sent whole; for one a broker refused as too large and the
    sender split (split.py), each part's outcome, ((first record index, base offset,
    log-append time, error or None), ...) by index -- base_offset and
    log_append_time_ms are then the first part's.  A batch refused for records the
    broker named (_record_outcomes) is told so too: a failed part per named record,
    one per run of the others.  A split batch some of whose parts
    failed is told (its ProduceResult, the first part's error): on_done(result, error)
    with both."""

    topic: str
    partition: int
    base_offset: int
    log_append_time_ms: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    parts: tuple


# A ProduceResult from a tuple of its fields: the namedtuple's own constructor is a
# Python function, called once per batch on the I/O thread; this is one C call.
_result = functools.partial(tuple.__new__, ProduceResult)


class _Batch:
    """A sealed batch on its way; owned by whichever queue holds it (under
    Sender._lock) or by the request carrying it (its I/O thread)."""

    __slots__ = ("seq", "first", "part", "topic", "partition", "view", "size_bytes", "record_count",
                 "on_done", "attempts", "created_ns", "retry_at_ns", "node_id", "sequenced",
                 "maybe_written", "last_error")

    def __init__(self, seq, topic, partition, view, record_count, now_ns, on_done):
        self.seq = seq  # send order: keeps a partition's FIFO in order across resends
        # The index of its first record in the batch send() was given: the parts of a
        # split batch, which share its seq, keep their records' order by it (_queued_before).
        self.first = 0
        self.part = False  # a part of a split batch (_split)
        self.topic = topic
        self.partition = partition
        self.view = view  # a memoryview, or a tuple of them (PooledBatch.segments())
        self.size_bytes = wire_bytes(view)
        self.record_count = record_count
        self.on_done = on_done  # on_done(result, error), called once by _complete
        self.attempts = 0
        self.created_ns = now_ns
        self.retry_at_ns = 0
        self.node_id = None  # the connection holding its outbound reservation
        self.sequenced = None  # idempotent: its SequencedBatch (the ProducerIdManager's lock)
        # An attempt ended with no answer or an error that may follow an append
        # (idempotence.may_be_appended): its records may be in the log, which its failure
        # at its delivery timeout or by close() says.  Cleared when the broker proves
        # otherwise (a RESTART verdict).
        self.maybe_written = False
        # What its last attempt met (a retriable error), for its failure should it
        # expire queued: a batch refused for a deleted topic and then parked for want of
        # a leader used to fail saying only that time ran out.
        self.last_error = None


class _ConnectionRoom:
    """A connection above its high watermark as a backoff target (backoff.py's
    Backpressured protocol) for one batch.  The first check takes a place in the
    connection's line of callers waiting for room, which block sleeps in and park
    polls: they go in the order they came, whatever their strategy (all woken by the
    drain, they raced each other and any send() that came meanwhile, and a later one
    often won).  leave_line() once the batch is queued or refused: the next one's turn.
    Used by one thread."""

    __slots__ = ("conn", "place")

    def __init__(self, conn):
        self.conn = conn
        self.place = None  # the place in the connection's line, once checked

    def has_room(self):
        if self.place is None:
            self.place = self.conn.join_line()
        return self.conn.has_room_in_line(self.place)

    def wait_for_room(self, timeout_s):
        return self.has_room() or self.conn.wait_for_room_in_line(self.place, timeout_s)

    def leave_line(self):
        if self.place is not None:
            self.conn.leave_line(self.place)

    def describe(self):
        return self.conn.describe()


def _too_large_hint(item):
    """What to do about a batch the broker refused as larger than it takes: the broker
    says only MESSAGE_TOO_LARGE."""
    if item.record_count == 1:
        return (f" (a {item.size_bytes}-byte batch of one record: the record is larger "
                f"than the topic's max.message.bytes or the broker's message.max.bytes)")
    # Such a batch is split (_split) unless it cannot be read back (a legacy message
    # set) or may be in the log already: the setting that makes its batches fit is
    # the way out then.
    return (f" (a {item.size_bytes}-byte batch of {item.record_count} records: set "
            f"batch_size below the topic's max.message.bytes, or the broker's "
            f"message.max.bytes, so the batches fit)")


class Sender:
    """Routes sealed batches to partition leaders.

    Args:
        pool: the IOPool (its request source becomes this sender).
        metadata: the Metadata cache.
        acks: 0, 1, -1 or 'all'. Default 1.
        max_block_ms: bound on send() waiting for metadata and for room.
            Default 60000.
        backoff: 'block' (default), 'park', 'drop' or a strategy object
            (see backoff.py); park_us: the park interval. Default 100.
        retries: resends of a batch after retriable errors. Default 2**31-1,
            bounded in practice by delivery_timeout_ms.
        retry_backoff_ms: wait before a batch's first resend, doubling with each
            one after it (+-20% jitter). Default 100.
        retry_backoff_max_ms: the most it grows to (KIP-580). Default 1000.
        delivery_timeout_ms: bound from send() to the batch's outcome.
            Default 120000.
        max_request_size: bytes of batches per Produce request. Default 1048576.
        idempotence: the ProducerIdManager that numbered the batches (above), or
            None (default): the batches carry no producer id.
        stats: the ProducerMetrics that hears of requests, answers and resends
            (metrics.py), or None.
        transaction: the TransactionManager of a transactional producer, or None
            (default).  Each batch enrols its partition in the open transaction as
            it is handed over; a partition's batches go out only when the manager
            says so (with Transactions V1, once the coordinator added it); Produce
            requests carry the transactional id, at v11 at most for a V1
            transaction; after a retriable error a batch is not sent again while the
            transaction is being aborted.
        compressor: the Compressor the producer's batches are sealed with, or None:
            the parts of a batch of its codec split as too large are compressed with
            it, at its level (split.py).
        guarantee_order: a partition with a batch in a request sends no other until
            that one is answered, whatever connection the next would take (the
            partition's leader moved meanwhile): the producer's with
            max_in_flight_requests_per_connection=1, which orders a partition's
            records without idempotence only so -- the Java client mutes such a
            partition too.  Default False.
    """

    def __init__(self, pool, metadata, acks=1, max_block_ms=60000, backoff="block",
                 park_us=100, retries=2**31 - 1, retry_backoff_ms=100,
                 retry_backoff_max_ms=1000, delivery_timeout_ms=120000,
                 max_request_size=1048576, idempotence=None,
                 stats=None, transaction=None, compressor=None, guarantee_order=False):
        acks = acks_value(acks)
        check_int("max_block_ms", max_block_ms, 0)
        check_int("retries", retries, 0)
        check_int("retry_backoff_ms", retry_backoff_ms, 0)
        check_int("retry_backoff_max_ms", retry_backoff_max_ms, 0)
        check_int("delivery_timeout_ms", delivery_timeout_ms, 1)
        check_int("max_request_size", max_request_size, 1)
        self.acks = acks  # immutable
        self.max_block_ms = max_block_ms  # immutable
        self.backoff = backoff_strategy(backoff, park_us)  # immutable
        self.retries = retries  # immutable
        self.retry_backoff = RetryBackoff(retry_backoff_ms, retry_backoff_max_ms)  # immutable
        self.delivery_timeout_ms = delivery_timeout_ms  # immutable
        self.max_request_size = max_request_size  # immutable
        self.guarantee_order = bool(guarantee_order)  # immutable
        self._idempotence = idempotence  # immutable; thread-safe
        self._pool = pool  # immutable
        self._metadata = metadata  # immutable
        self._stats = stats  # immutable; thread-safe
        self._transaction = transaction  # immutable; thread-safe
        self._compressor = compressor  # immutable; thread-safe

        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)  # notified when _pending drops to 0
        # Guarded by _lock: node_id -> {(topic, partition): deque of _Batch};
        # a partition's entry exists only while its deque is non-empty.
        self._queues = {}
        self._next_seq = 0  # guarded by _lock
        # Guarded by _lock: node_id -> when a wake-up for its resends is due
        # (one timer per node, not one per drain attempt).
        self._retry_wakeup_ns = {}
        self._unrouted = collections.deque()  # guarded by _lock: batches with no leader known
        # Guarded by _lock: (topic, partition) -> release(), the accumulator's, called (no
        # lock held) once a request takes the last batch queued for the partition
        # (hold_while_queued()).
        self._held = {}
        # Guarded by _lock: node_id -> {(topic, partition): release()}, held while other
        # partitions' batches were queued for the node (node_id None: while the partition
        # has no leader); released (no lock held) when the node's next request is built
        # or the partition moves (hold_while_queued()).
        self._held_for_request = {}
        self._pending = 0  # guarded by _lock: batches handed over, not yet completed
        # Guarded by _lock: (topic, partition) of each part of a split batch in a request,
        # and with guarantee_order of every batch in one: the partition's next batch
        # waits for its answer.  Refused as too large again, the part is split, and a
        # later batch sent meanwhile would have put its records before the part's
        # (appended, with no idempotence; or refused out of sequence and sent again).
        self._muted = set()
        # Guarded by _lock: the batches in a request not answered yet.  One whose
        # delivery_timeout_ms runs out fails then (_sweep), as the Java client's
        # getExpiredInflightBatches fails it, not up to request_timeout_ms later; its
        # answer, when it comes, finds it gone from here and is ignored (_on_outcome).
        self._in_flight = set()
        # Guarded by _topics_lock: topic -> its batches handed over, not yet completed
        # (_pending's, per topic): a topic idle in the accumulator is not forgotten by
        # the metadata while one is here -- a spooled or replayed batch, say --, or a
        # leader's move would leave it with no leader until its delivery timeout.
        self._topics_lock = threading.Lock()
        self._batches_per_topic = collections.Counter()
        # Guarded by _topics_lock: topic -> time.monotonic_ns() its last batch here was
        # completed, until forget_unused() forgets it: a use of the topic, which a topic
        # that has no table in the accumulator (a replayed batch's) has no other of
        # (topics_done_ns()).
        self._topics_done_ns = {}
        self._closed = False  # guarded by _lock
        self._sweep_at_ns = None  # guarded by _lock: delivery-timeout sweep scheduled then
        self._metrics = collections.Counter()  # guarded by _lock

        pool.set_request_source(self)
        pool.add_listener(self)
        metadata.add_listener(self)
        if idempotence is not None:
            idempotence.set_new_producer_id_listener(self.restamp_all)

    # ------------------------------------------------------------------
    # Callers' threads.

    def send(self, topic, partition, batch, record_count, created_ns=None, on_done=None,
             wal_id=0, appended_on=None):
        """Queues a sealed batch (any buffer; its memory is sent as is and must
        not change until the batch is done -- with idempotence, a sealed
        RecordBatchBuilder numbered by the ProducerIdManager, whose producer
        state the sender may rewrite).  created_ns: time.monotonic_ns() when
        the batch was opened, where delivery_timeout_ms starts (default: now).
        wal_id: the batch's id in the write-ahead log, where a re-stamp of it is
        logged (0: none).  appended_on: a replayed batch's node whose
        DescribeProducers answer said it has it (SequencedBatch).

        on_done(result, error) hears the outcome, once: a ProduceResult and
        None, or None and the exception; on the thread that learns it (an I/O
        thread, usually), with no lock held; what it raises is logged.  Without
        on_done, send() returns a Future of the ProduceResult instead (a
        per-batch object the accumulator does without).

        Raises (the batch is not queued; on_done is not called):
            KafkaTimeoutError: the topic's partitions not known within max_block_ms
                (a partition without a leader, or a topic deleted since, is no reason:
                its batch waits for a leader).
            TransactionStateError, TransactionAbortRequiredError, or a fatal error:
                a transactional producer's transaction does not take the batch.
            BackpressureTimeoutError: strategy block/park and the leader's
                connection stayed above its high watermark (names the broker);
                never on an I/O thread, where the batch is queued past it.
            RecordDroppedError: strategy drop and no room (counted; not on an
                I/O thread either).
            KafkaError: the sender is closed, or the batch exceeds max_request_size.
        """
        if isinstance(batch, PooledBatch):
            view = batch.segments()  # large values as the caller gave them: no copy
        else:
            view = memoryview(batch)
            if view.ndim != 1 or view.format != "B":
                view = view.cast("B")
        size_bytes = wire_bytes(view)
        if size_bytes > self.max_request_size:
            raise errors.KafkaError(
                f"batch of {size_bytes} bytes for {topic}-{partition} exceeds "
                f"max_request_size={self.max_request_size}")
        future = None
        if on_done is None:
            future = Future()
            on_done = functools.partial(_resolve, future)
        start = time.monotonic()
        # A partition without a leader now (or of a topic deleted since): the batch waits
        # for one among the unrouted, up to its delivery timeout, as the Java client's
        # does.  Waiting here held up the thread handing batches over (the linger thread:
        # every partition's) for max_block_ms, and then failed the batch.
        broker = self._metadata.leader_if_any(topic, partition, self.max_block_ms / 1000)
        node_id = conn = None
        if broker is not None:
            node_id = broker.node_id
            conn = self._pool.open_connection(node_id, broker.host, broker.port)
        # On an I/O thread (a callback's send() filled the batch) the batch is queued
        # past the high watermark: waiting there waited for the thread that drains
        # the connection, max_block_ms per batch.  Its memory is still bounded by
        # buffer_memory, which such a send() does not wait for either (backoff.py).
        room = None
        if conn is not None and not conn.has_room() and not self._pool.on_io_thread():
            room = _ConnectionRoom(conn)
        try:
            if room is not None:
                self._wait_for_room(room, start, record_count)
            with self._lock:
                if self._closed:
                    raise errors.KafkaError("the sender is closed: batch not sent")
                if self._transaction is not None:
                    # Under the lock: an abort's discard_unsent() comes before the batch
                    # (and refuses it) or after it (and fails it), never between.
                    self._transaction.enroll(topic, partition)
                item = _Batch(self._next_seq, topic, partition, view, record_count,
                              time.monotonic_ns() if created_ns is None else created_ns,
                              on_done)
                self._next_seq += 1
                self._pending += 1
                self._hold_topic(topic, 1)
                if self._idempotence is not None:
                    item.sequenced = self._idempotence.track(topic, partition, batch,
                                                             record_count, wal_id,
                                                             appended_on)
                # Behind a batch of its own partition, a batch needs no wake-up: what
                # takes that one out (its wake-up, an answer, a write, a retry timer,
                # a re-stamp) runs the connection's pump, which asks for the next
                # request while it can send one.  Under backpressure that is most
                # batches: one wake byte (and a GIL hand-off) each saved.
                if conn is None:
                    # Looked up again under _lock: a leader named since, by an answer whose
                    # on_metadata() came before this batch was parked, would otherwise leave
                    # it parked until the next answer (minutes: a topic with a leader for
                    # every partition waits for metadata_max_age_ms).
                    node_id = self._metadata.leader_id(topic, partition)
                partitions = self._queues.get(node_id)
                wake = not partitions or not partitions.get((topic, partition))
                self._route_locked(item, node_id, conn=conn)
                if conn is None and item.node_id is not None:
                    conn = self._pool.get(item.node_id)
        finally:
            if room is not None:
                # Once the batch's bytes count as outbound: the next caller in line
                # looks at the watermark with them.
                room.leave_line()
        if wake and conn is not None:
            conn.wakeup()
        return future

    def _wait_for_room(self, room, start, record_count):
        """send(): the backoff strategy's wait for room in the connection of room (a
        _ConnectionRoom), within what is left of max_block_ms since start."""
        remaining_ms = max(0, self.max_block_ms - int((time.monotonic() - start) * 1000))
        try:
            self.backoff.wait_for_room(room, remaining_ms)
        except RecordDroppedError:
            with self._lock:
                self._metrics["batches_dropped"] += 1
                self._metrics["records_dropped"] += record_count
            raise
        # A connection closed meanwhile has room (waiting is pointless then): say why
        # the batch cannot go.
        if self._pool.closed:
            raise KafkaConnectionError(f"{room.conn.describe()} is closed: batch not sent")

    def hold_while_queued(self, topic, partition, release):
        """The accumulator, a batch's linger_ms having passed: whether batches are
        queued for the partition's leader and not yet in a request.  If so, the batch
        may stay open and take more records, and release() is called, on an I/O
        thread with no lock held:
        - when a request takes the last batch queued for the partition itself, if it
          has some: handed over now, the batch would only wait behind them;
        - else when the leader's next request is built, or the partition moves to
          another leader: the requests to that broker are not keeping up (in flight
          at their limit, or a broker slow or unreachable), and the batch would only
          wait in the queue for that request.  So the Java client drains a broker's
          batches only when it can send it a request.  With 10,000 keyed partitions
          and a broker that kept up with 7,000-11,000 records/s, batches grew from
          2 records to 3-4;
        - or, the partition having no leader (its replicas down, its topic deleted:
          Metadata.awaits_leader), when an answer names one: handed over, the batch
          would only wait among the unrouted (send()), a pooled buffer for a few
          records per linger_ms, where the Java client's batch of such a partition
          fills up.  (The accumulator holds no batch past its delivery timeout.)

        Returns whether it holds the batch (the accumulator looks at it again some time
        later if release() has not come: accumulator.HELD_RECHECK_MS)."""
        key = (topic, partition)
        leader = self._metadata.leader_id(topic, partition)
        awaits_leader = leader is None and self._metadata.awaits_leader(topic, partition)
        with self._lock:
            if awaits_leader:
                self._held_for_request.setdefault(None, {})[key] = release
                return True
            partitions = self._queues.get(leader)
            if not partitions:
                return False
            if partitions.get(key):
                self._held[key] = release
            else:
                self._held_for_request.setdefault(leader, {})[key] = release
            return True

    def flush(self, timeout_s=None):
        """Waits until every batch handed over is completed; raises
        KafkaTimeoutError if some are still pending after timeout_s."""
        with self._done:
            if not self._done.wait_for(lambda: self._pending == 0, timeout_s):
                raise KafkaTimeoutError(
                    f"{self._pending} batches still pending after flush timeout "
                    f"of {timeout_s} s")

    def close(self, timeout_s=None):
        """Flushes for up to timeout_s, then fails whatever is left; send()
        raises from now on.  The pool and metadata are closed by their owner."""
        try:
            self.flush(timeout_s)
        except KafkaTimeoutError:
            pass  # what is left fails below, each batch with its own error
        with self._lock:
            self._closed = True
            leftovers = self._take_queued_locked()
            released = self._take_held_locked()
        for release in released:
            release()
        for item in leftovers:
            self._complete(item, error=_closed_before_delivery(item))

    def discard_unsent(self, error):
        """Fails with error every batch queued and not in a request now (a
        transaction is being aborted, or the producer failed for good); batches in
        flight complete with their answers."""
        with self._lock:
            leftovers = self._take_queued_locked()
            released = self._take_held_locked()
        for release in released:
            release()
        for item in leftovers:
            self._complete(item, error=error)

    def topics_done_ns(self):
        """{topic: time.monotonic_ns() its last batch here was completed}, for the
        topics forget_unused() has not forgotten since (remove_idle_tables, the
        accumulator's lock held).  The sender asks the metadata for the topic of each
        batch handed over, a topic with no table in the accumulator too -- a replayed
        batch's, or a spooled one's whose table went just before the sender took it --,
        which no table's use would ever let go."""
        with self._topics_lock:
            return dict(self._topics_done_ns)

    def forget_unused(self, topics, forget):
        """The accumulator's topics idle for metadata_max_idle_ms (remove_idle_tables,
        its lock held): those with no batch here are forgotten -- forget(them), the
        metadata's forget_topics, with _topics_lock held, so that a batch handed over
        meanwhile either keeps its topic or asks for it again (_hold_topic()).
        Returns them."""
        with self._topics_lock:
            unused = {topic for topic in topics if topic not in self._batches_per_topic}
            if unused:
                forget(unused)
                for topic in unused:
                    self._topics_done_ns.pop(topic, None)
        return unused

    def wake_leaders(self, keys):
        """The connections to the leaders of keys ((topic, partition) pairs) look at
        their queues again: the transaction manager has let their batches go."""
        for node_id in {self._metadata.leader_id(*key) for key in keys}:
            conn = None if node_id is None else self._pool.get(node_id)
            if conn is not None:
                conn.wakeup()

    def metrics(self):
        """Counters: batches/records acknowledged, failed, retried, dropped;
        batches pending; "errors.<NAME>" per error code brokers answered.
        batches_split counts batches refused as too large and sent again in two
        (a part counts as a batch in the others).
        batches_retried counts every batch queued again after it went out: a
        retriable error code (also in errors.<NAME>), or a request with no answer
        (request_timeout_ms, a connection lost: in no errors.<NAME>) -- the one way
        the sender sends a batch's bytes twice (the accumulator's spool counts its
        own, records_spool_sent)."""
        with self._lock:
            snapshot = dict(self._metrics)
            snapshot["batches_pending"] = self._pending
        for key in ("batches_acknowledged", "records_acknowledged", "batches_failed",
                    "records_failed", "batches_retried", "batches_dropped",
                    "records_dropped", "batches_split"):
            snapshot.setdefault(key, 0)
        return snapshot

    # ------------------------------------------------------------------
    # Request source: the I/O thread of conn.

    def has_pending(self, conn):
        with self._lock:
            return bool(self._queues.get(conn.node_id))

    def next_request(self, conn):
        """One Produce request of conn's queued batches, or None: the head
        batch of each partition led by conn's broker, up to max_request_size."""
        node_id = conn.node_id
        with self._lock:
            partitions = self._queues.get(node_id)
            if not partitions:
                return None  # the usual answer to a connection between requests
            now_ns = time.monotonic_ns()
            chosen, expired, woken, released = [], [], set(), []
            total = records = 0
            earliest_retry_ns = wakeup_at_ns = None
            # One snapshot for the whole request: leaders and topic ids agree, and
            # the metadata's lock is taken once, not once per partition.
            snapshot = self._metadata.snapshot()
            limit_ns = self.delivery_timeout_ms * 1_000_000
            for key in list(partitions):
                queue = partitions[key]
                broker = None if snapshot is None else snapshot.leader(*key)
                leader = None if broker is None else broker.node_id
                if leader != node_id:
                    # The leader moved: the partition's batches follow it.
                    del partitions[key]
                    for item in queue:
                        conn.release_outbound(item.size_bytes)
                        self._route_locked(item, leader, snapshot)
                    woken.add(leader)
                    continue
                head = queue[0]
                if now_ns - head.created_ns >= limit_ns:
                    self._expire_locked(queue, conn, now_ns, expired)
                    if not queue:
                        del partitions[key]
                        self._release_held_locked(key, released)
                        continue
                    head = queue[0]
                if head.retry_at_ns > now_ns:
                    if earliest_retry_ns is None or head.retry_at_ns < earliest_retry_ns:
                        earliest_retry_ns = head.retry_at_ns
                    continue
                if chosen and total + head.size_bytes > self.max_request_size:
                    # Full: stop here, as Java's drain does, rather than look at every
                    # other queued partition for a smaller batch (with thousands of
                    # partitions queued, a scan of them all per request).  This
                    # partition stays first in line for the next request.
                    break
                if (self._transaction is not None
                        and not self._transaction.may_send(*key)):
                    continue  # not in the transaction yet: wake_leaders() wakes us
                if self._muted and key in self._muted:
                    continue  # _on_answer() wakes us
                if head.sequenced is not None and not self._idempotence.take(head.sequenced):
                    # Its partition is starting over (_restamp() wakes us), holds back
                    # until the broker has its producer id's state, or has an earlier
                    # batch to send first (done() or the routing of it wakes us).
                    continue
                if head.part or self.guarantee_order:
                    self._muted.add(key)
                queue.popleft()
                chosen.append(head)
                total += head.size_bytes
                records += head.record_count
                # To the back of the round: the next request starts elsewhere.
                del partitions[key]
                if queue:
                    partitions[key] = queue
                else:
                    self._release_held_locked(key, released)
            if not partitions:
                del self._queues[node_id]
            self._in_flight.update(chosen)
            if chosen and self._held_for_request:
                released.extend(self._held_for_request.pop(node_id, {}).values())
            if earliest_retry_ns is not None:
                # Nothing else may wake this connection when the backoff ends.
                due_ns = self._retry_wakeup_ns.get(node_id)
                if due_ns is None or due_ns <= now_ns or due_ns > earliest_retry_ns:
                    self._retry_wakeup_ns[node_id] = wakeup_at_ns = earliest_retry_ns
        if wakeup_at_ns is not None:
            self._pool.thread_for(node_id).call_later(
                (wakeup_at_ns - now_ns) / 1e6, conn.wakeup)
        if expired:
            self._fail_expired(expired)
        for release in released:
            release()
        for leader in woken:
            other = None if leader is None else self._pool.get(leader)
            if other is not None:
                other.wakeup()
        if not chosen:
            return None
        topic_data = {}
        topic_ids = {}  # Produce v13+ names topics by id (from Metadata v10+)
        for item in chosen:
            item.attempts += 1
            framed = topic_data.get(item.topic)
            if framed is None:
                framed = topic_data[item.topic] = []
                info = snapshot.topics.get(item.topic)  # chosen: snapshot named its leader
                topic_ids[item.topic] = None if info is None else info.topic_id
            framed.append((item.partition, item.view))
        acks = self.acks
        timeout_ms = conn.config.request_timeout_ms
        client_id = conn.config.client_id
        transactional_id = max_version = None
        if self._transaction is not None:
            transactional_id = self._transaction.transactional_id
            max_version = self._transaction.produce_max_version
        if self._stats is not None:
            self._stats.request_sent(node_id, records)
        return Request(
            ApiKey.PRODUCE,
            lambda cid, version: encode_produce_request(
                cid, client_id, version, acks, timeout_ms, topic_data,
                transactional_id=transactional_id, topic_ids=topic_ids),
            decode_produce_response,
            functools.partial(self._on_answer, conn, chosen, topic_ids, now_ns),
            expects_response=acks != 0,
            reserved_bytes=total,
            max_api_version=max_version,
        )

    # ------------------------------------------------------------------
    # Answers (I/O threads) and metadata changes.

    def _on_answer(self, conn, batches, topic_ids, requested_ns, response, error):
        try:
            self._on_outcome(conn, batches, topic_ids, requested_ns, response, error)
        finally:
            muted = {(item.topic, item.partition) for item in batches
                     if item.part or self.guarantee_order}
            if muted:
                # Retried, or a part's halves if split again, they are queued by now:
                # the next batches go.
                with self._lock:
                    self._muted.difference_update(muted)
                self.wake_leaders(muted)

    def _on_outcome(self, conn, batches, topic_ids, requested_ns, response, error):
        """A request's outcome: its answer (response), or the error that ended it."""
        idempotence = self._idempotence
        requested = batches
        with self._lock:
            late = [item for item in batches if item not in self._in_flight]
            self._in_flight.difference_update(batches)
        if late:
            batches = self._forget_late(batches, late)
        for item in batches:
            item.node_id = None  # its reservation was released as it was written
        if response is not None and self._stats is not None:
            self._stats.response(conn.node_id, (time.monotonic_ns() - requested_ns) / 1e6,
                                 response.throttle_time_ms)
        if error is not None:
            for item in batches:
                item.maybe_written = True  # no answer: appended or not, unknown
                if item.sequenced is not None:
                    idempotence.answered(item.sequenced, None)
            if not error.retriable:  # e.g. a ProtocolError: resending won't help
                if isinstance(error, errors.ProtocolError):
                    # The decoder's words alone ("truncated at offset 0") named
                    # neither the broker nor the request.
                    decoding, error = error, errors.ProtocolError(
                        f"{conn.describe()} answered Produce with bytes that are not a "
                        f"valid answer: {error}")
                    error.__cause__ = decoding
                for item in batches:
                    self._complete(item, error=error)
            else:
                if error.invalid_metadata:
                    self._metadata.request_update()
                for item in batches:
                    self._retry_or_fail(item, error)
        elif response is None:  # acks=0: done once written
            self._complete_all([(item, _result((item.topic, item.partition, -1, -1,
                                                item.record_count, ())), None)
                                for item in batches])
        else:
            self._on_response(conn, batches, topic_ids, response)
        if idempotence is not None:
            # Answered, retried or failed (or failed earlier, out of time): a partition
            # starting over may be ready.  (A generator: read only when some partition
            # is starting over.)
            self._restamp((item.topic, item.partition) for item in requested)

    def _forget_late(self, batches, late):
        """Cold: late, of a request's batches, failed at their delivery timeout while
        it was in flight (_sweep): the answer says nothing more to their owners.  An
        idempotent one stops counting as in flight -- its partition may start over once
        none is (idempotence.py) -- whatever the answer: the sweep counted it as maybe
        appended, and nothing of it is sent again under its stamp.  Returns the others."""
        if self._idempotence is not None:
            for item in late:
                self._idempotence.answered(item.sequenced, None)
        return [item for item in batches if item not in late]

    def _on_response(self, conn, batches, topic_ids, response):
        answers = {}
        names = None  # v13+ (topics named by id): {topic id's int: name}, made once
        for t in response.topics:
            name = t.name
            if name is None:
                if names is None:
                    # By the ids' ints: hashing a UUID is a Python call, an int's is not.
                    names = {topic_id.int: topic for topic, topic_id in topic_ids.items()
                             if topic_id is not None}
                name = names.get(t.topic_id.int)
            for p in t.partitions:
                answers[name, p.partition] = p
        refresh = False
        acknowledged = []  # completed together, after the loop
        for item in batches:
            part = answers.get((item.topic, item.partition))
            code = None if part is None else part.error_code
            verdict = None
            # An error with the append's offset came after the append (NOT_LEADER_OR_
            # FOLLOWER from a leader that stepped down while waiting for acks=all).
            written = part is not None and code != errors.NO_ERROR and part.base_offset >= 0
            if item.sequenced is not None:
                # A duplicate: appended by an earlier attempt whose answer was lost,
                # and too long ago for the broker to have kept its offset.
                if code == errors.DuplicateSequenceNumberError.code:
                    code = errors.NO_ERROR
                verdict = self._idempotence.answered(item.sequenced, code, written,
                                                     conn.node_id)
            if verdict == RESTART:
                item.maybe_written = False  # the first of its partition the broker lacks
            elif may_be_appended(code, written):
                item.maybe_written = True
            if part is None:
                self._complete(item, error=errors.ProtocolError(
                    f"{conn.describe()} answered Produce without "
                    f"{item.topic}-{item.partition}"))
            elif code == errors.NO_ERROR or verdict == APPENDED:
                appended = part.error_code == errors.NO_ERROR
                base_offset = part.base_offset if appended else -1
                if base_offset > _MAX_OFFSET - (item.record_count - 1):
                    base_offset = -1  # appended, but at no offset that can be true: unknown
                acknowledged.append((item, _result((
                    item.topic, item.partition, base_offset,
                    part.log_append_time_ms if appended else -1, item.record_count, ())),
                    None))
            elif (code == errors.MessageTooLargeError.code and item.record_count > 1
                  and self._split(item)):
                pass  # its records go again, in two batches
            elif verdict == PASSED_OVER:
                # Sent again it would land behind the later batch: it fails, as the
                # Java client's does on a hole, and the partition starts over.
                self._refuse(item, errors.OutOfOrderSequenceNumberError(
                    f"{item.topic}-{item.partition} from {conn.describe()}: the broker "
                    f"appended a later batch of the partition without this one (it held "
                    f"no state of the producer id: expired, or lost with its leader) and "
                    f"refuses this one out of sequence; no attempt of it was written"),
                    part, conn)
            else:
                error = errors.error_for_code(
                    code,
                    f"{item.topic}-{item.partition} from {conn.describe()}"
                    + (f": {part.error_message}" if part.error_message else "")
                    + (_too_large_hint(item) if code == errors.MessageTooLargeError.code
                       else ""))
                refresh |= error.invalid_metadata
                with self._lock:
                    self._metrics["errors." + error.name] += 1
                if verdict == RESTART and self._transaction is not None:
                    # A hole in a transaction's sequence: the transaction fails now
                    # (its abort brings the next epoch) rather than the batch
                    # waiting for one until its delivery timeout.
                    self._refuse(item, error, part, conn)
                elif error.retriable or verdict is not None:  # WAIT or RESTART: resend
                    self._retry_or_fail(item, error, (part, conn))
                else:
                    self._refuse(item, error, part, conn)
        if acknowledged:
            self._complete_all(acknowledged)
        if refresh:
            self._metadata.request_update()

    def _split(self, item):
        """A batch of two records or more refused as MESSAGE_TOO_LARGE: its records go
        again in two batches (split.py), in its place in its partition's queue, ahead
        of the batches sent after it, and its on_done hears their outcomes together
        (_SplitOutcome).  With idempotence the halves take its place among the
        partition's outstanding batches, with its sequences: the batches behind it,
        refused as out of sequence meanwhile, wait for them (idempotence.py).
        Returns whether it was split, or failed as any batch the sender's close()
        cut short (closed meanwhile: nothing goes out any more, and the broker's
        refusal would say its records were too large, which split they were not); if
        not (a legacy message set, which is not read back; a batch that may be in the
        log already; a transaction being aborted) it fails as refused."""
        # Splitting reads the records: a held value's copy is made here, where it is rare.
        data = b"".join(item.view) if type(item.view) is tuple else item.view
        if data[_MAGIC_AT] != _MAGIC_V2:
            return False
        try:
            parts = split_in_halves(data, self.max_request_size, self._compressor)
        except ValueError as exc:  # our own batch: never, unless a bug
            _log.warning("a batch of %s-%d refused as too large cannot be split: %s",
                         item.topic, item.partition, exc)
            return False
        outcome = _SplitOutcome(item, len(parts))
        # A request's view of a part is its own (as send() takes one of the builder):
        # the sealed view goes back with the part (release_batch), which a slice of
        # it still held by a request would refuse.
        items = [_Batch(item.seq, item.topic, item.partition, memoryview(builder), count,
                        item.created_ns,
                        functools.partial(outcome.part_done, index, first, builder, view))
                 for index, (builder, view, first, count) in enumerate(parts)]
        for part, (_, _, first, _) in zip(items, parts):
            part.first = item.first + first
            part.part = True
            part.maybe_written = item.maybe_written  # the batch's records are the parts'
        with self._lock:
            closed = self._closed
            if not closed:
                if self._transaction is not None and self._transaction.discarding:
                    return False
                if item.sequenced is not None:
                    entries = self._idempotence.split(
                        item.sequenced, [(builder, first, count)
                                         for builder, _, first, count in parts])
                    if entries is None:
                        return False
                    for part, entry in zip(items, entries):
                        part.sequenced = entry
                # Its memory is its owner's, released once the parts are done.
                item.view = None
                self._pending += len(items) - 1  # the parts stand for it
                self._hold_topic(item.topic, len(items) - 1)
                self._metrics["batches_split"] += 1
                self._metrics["errors." + errors.MessageTooLargeError.name] += 1
                leader = self._metadata.leader_id(item.topic, item.partition)
                for part in items:
                    self._route_locked(part, leader)
        if closed:
            self._complete(item, error=_closed_before_delivery(item))
            return True
        conn = None if leader is None else self._pool.get(leader)
        if conn is not None:
            conn.wakeup()
        return True

    def _refuse(self, item, error, part, conn):
        """Fails a batch the broker refused with error in its answer part (from conn):
        as the Java client's Sender does on every path that fails such a batch, the
        records part's record_errors names fail each with its own error
        (_record_outcomes), told as a split batch is: its ProduceResult, its first
        part's error."""
        if not part.record_errors:
            self._complete(item, error=error)
            return
        outcomes = _record_outcomes(item, part, conn, error)
        self._complete(item, _result((item.topic, item.partition, -1, -1,
                                      item.record_count, outcomes)),
                       outcomes[0][3])

    def _retry_or_fail(self, item, error, answer=None):
        """Sends item again after its backoff, or fails it with error (as a delivery
        timeout when out of time); answer: (part, conn) when a Produce answer's part
        said error, whose named records fail as _refuse fails them."""
        now_ns = time.monotonic_ns()
        # The Java client's since KIP-580: a batch that keeps meeting retriable errors
        # (a partition without enough in-sync replicas, a leader moving) waits longer
        # each time rather than asking the broker at retry_backoff_ms until it expires.
        backoff_ns = int(self.retry_backoff.ms(item.attempts - 1) * 1_000_000)
        with self._lock:
            stopped = (self._closed or item.attempts > self.retries
                       or (self._transaction is not None and self._transaction.discarding))
            # Out of time: it fails as a delivery timeout (a KafkaTimeoutError, which
            # the spool keeps), the broker's error its cause -- not as that error
            # alone, as if the broker had refused it for good.
            expired = not stopped and (now_ns - item.created_ns + backoff_ns
                                       >= self.delivery_timeout_ms * 1_000_000)
            give_up = stopped or expired
            if not give_up:
                self._metrics["batches_retried"] += 1
                if self._stats is not None:
                    self._stats.batch_retried(item.topic, item.record_count)
                item.retry_at_ns = now_ns + backoff_ns
                item.last_error = error
                leader = self._metadata.leader_id(item.topic, item.partition)
                self._route_locked(item, leader)
        if expired:
            self._complete(item, error=_delivery_timeout(self, item, error))
            return
        if give_up:
            if answer is None:
                self._complete(item, error=error)
            else:
                self._refuse(item, error, *answer)
            return
        # The leader's connection looks at its queue now and sets a timer for
        # the end of the backoff (an unrouted batch waits for metadata).
        conn = None if leader is None else self._pool.get(leader)
        if conn is not None:
            conn.wakeup()

    def on_ready(self, conn):
        """Pool listener: a connection is ready (it asks for requests itself)."""

    def on_failure(self, conn, error, was_ready):
        """Pool listener: a broker refused this client's credentials or certificate
        (a password changed, a user deleted since the last connection), or its token
        endpoint refused to issue a token (errors.refuses_credentials).  The batches
        queued for it fail now with that error, as records fail at once when the
        first connection is refused, instead of waiting through reconnects that meet
        the same refusal until delivery_timeout_ms.  Other failures leave them
        queued: the connection is tried again, or metadata moves them elsewhere."""
        if not errors.refuses_credentials(error):
            return
        refused, released = [], []
        with self._lock:
            for key, queue in self._queues.pop(conn.node_id, {}).items():
                for item in queue:
                    conn.release_outbound(item.size_bytes)
                    item.node_id = None
                refused += queue
                self._release_held_locked(key, released)
        for release in released:
            release()
        for item in refused:
            self._complete(item, error=error)
        if refused and self._idempotence is not None:
            self._restamp({(item.topic, item.partition) for item in refused})

    def on_metadata(self, snapshot, moved):
        """Metadata listener: queued batches follow their partitions' leaders."""
        woken = set()
        with self._lock:
            if self._closed:
                return
            for node_id, partitions in list(self._queues.items()):
                conn = self._pool.get(node_id)
                for key in moved.intersection(partitions):
                    broker = None if snapshot is None else snapshot.leader(*key)
                    new_id = None if broker is None else broker.node_id
                    if new_id == node_id:
                        continue
                    for item in partitions.pop(key):
                        conn.release_outbound(item.size_bytes)
                        self._route_locked(item, new_id, snapshot)
                    woken.add(new_id)
                if not partitions:
                    del self._queues[node_id]
            released = [self._held_for_request[node_id].pop(key)
                        for node_id, held in list(self._held_for_request.items())
                        for key in moved.intersection(held)]
            unrouted, self._unrouted = self._unrouted, collections.deque()
            for item in unrouted:
                broker = snapshot.leader(item.topic, item.partition)
                new_id = None if broker is None else broker.node_id
                self._route_locked(item, new_id, snapshot)
                woken.add(new_id)
        for release in released:
            release()
        for node_id in woken:
            conn = None if node_id is None else self._pool.get(node_id)
            if conn is not None:
                conn.wakeup()

    # ------------------------------------------------------------------
    # Helpers.

    def _take_queued_locked(self):
        """With _lock held: every batch queued and not in a request, taken out of the
        queues (their outbound bytes released), for the caller to fail."""
        taken = list(self._unrouted)
        self._unrouted.clear()
        for node_id, partitions in self._queues.items():
            conn = self._pool.get(node_id)
            for queue in partitions.values():
                for item in queue:
                    conn.release_outbound(item.size_bytes)
                    item.node_id = None
                taken += queue
        self._queues.clear()
        return taken

    def _take_held_locked(self):
        """With _lock held: the release() of every batch hold_while_queued() holds,
        the holds ended (the caller calls them once the lock is released)."""
        released = list(self._held.values())
        self._held.clear()
        for held in self._held_for_request.values():
            released += held.values()
        self._held_for_request.clear()
        return released

    def _route_locked(self, item, node_id, snapshot=None, conn=None):
        """With _lock held: queue item, in send order within its partition, for
        node_id (None, or a broker not in the metadata: parked until metadata
        names a leader); counts its bytes as that connection's outbound.  conn:
        node_id's connection, when the caller has it at hand.

        Every batch queued makes sure of a sweep by its delivery timeout, a resend
        too: the last sweep may have run while it was in flight, and the connection
        it is queued for may never ask for a request again (its broker down)."""
        self._schedule_sweep_locked(item.created_ns)
        if conn is None and node_id is not None:
            conn = self._pool.get(node_id)
        if conn is None and node_id is not None:
            broker = (snapshot or self._metadata.snapshot()).brokers.get(node_id)
            if broker is not None:
                conn = self._pool.connection(node_id, broker.host, broker.port)
        if conn is None:
            item.node_id = None
            self._unrouted.append(item)
            return
        conn.reserve_outbound(item.size_bytes)
        item.node_id = node_id
        queue = self._queues.setdefault(node_id, {}).setdefault(
            (item.topic, item.partition), collections.deque())
        if not queue or not _queued_before(item, queue[-1]):
            queue.append(item)
            return
        # A resend, or a part of a split batch: before the first batch whose records
        # were sent after its own (a short scan, rare).
        for index, queued in enumerate(queue):
            if _queued_before(item, queued):
                queue.insert(index, item)
                return

    def _release_held_locked(self, key, released):
        """With _lock held: key's queue is empty; its held batch's release() goes to
        released, to be called once the lock is released."""
        if self._held:
            release = self._held.pop(key, None)
            if release is not None:
                released.append(release)

    def _expire_locked(self, queue, conn, now_ns, expired):
        """With _lock held: moves the batches at the front of queue (a partition's,
        queued for conn) whose delivery_timeout_ms has run out to expired, releasing
        their outbound bytes.  Called by whichever looks first: next_request(), as
        conn asks for work, or _sweep(), for a connection that does not ask (leader
        down, in-flight limit reached)."""
        limit_ns = self.delivery_timeout_ms * 1_000_000
        while queue and now_ns - queue[0].created_ns >= limit_ns:
            item = queue.popleft()  # the oldest of the partition comes first
            conn.release_outbound(item.size_bytes)
            item.node_id = None
            expired.append(item)

    def _expire_in_flight_locked(self, now_ns, expired):
        """With _lock held: moves the batches in a request whose delivery_timeout_ms has
        run out to expired (Java's Sender.getExpiredInflightBatches).  Their fate is
        unknown: the broker may append them yet, so their errors say they may be in the
        log, and an idempotent one counts as maybe appended -- its partition starts over
        under a new epoch only once its answer is in and the partition's first
        outstanding batch is known not to be in the log, as Java's unresolved sequence
        waits (idempotence.py), never reusing its sequence blindly."""
        limit_ns = self.delivery_timeout_ms * 1_000_000
        out_of_time = [item for item in self._in_flight
                       if now_ns - item.created_ns >= limit_ns]
        self._in_flight.difference_update(out_of_time)
        out_of_time.sort(key=lambda item: (item.seq, item.first))  # send order
        for item in out_of_time:
            item.maybe_written = True
            if item.sequenced is not None:
                self._idempotence.unresolved(item.sequenced)
        expired += out_of_time

    def _fail_expired(self, expired):
        """Without _lock: fails the batches _expire_locked() and
        _expire_in_flight_locked() took out; their idempotent partitions may start
        over then."""
        for item in expired:
            self._complete(item, error=_delivery_timeout(self, item, item.last_error))
        if expired and self._idempotence is not None:
            self._restamp({(item.topic, item.partition) for item in expired})

    def _schedule_sweep_locked(self, created_ns):
        """With _lock held: make sure batches stuck in a queue (leader down)
        still fail at delivery_timeout_ms."""
        due_ns = created_ns + self.delivery_timeout_ms * 1_000_000
        if self._sweep_at_ns is not None and self._sweep_at_ns <= due_ns:
            return
        self._sweep_at_ns = due_ns
        delay_ms = max(0.0, (due_ns - time.monotonic_ns()) / 1e6)
        self._pool.thread_for(0).call_later(delay_ms, self._sweep)

    def _sweep(self):
        now_ns = time.monotonic_ns()
        limit_ns = self.delivery_timeout_ms * 1_000_000
        expired, released = [], []
        with self._lock:
            self._sweep_at_ns = None
            for node_id, partitions in list(self._queues.items()):
                conn = self._pool.get(node_id)
                for key, queue in list(partitions.items()):
                    self._expire_locked(queue, conn, now_ns, expired)
                    if not queue:
                        del partitions[key]
                        self._release_held_locked(key, released)
                if not partitions:
                    del self._queues[node_id]
            keep = collections.deque()
            for item in self._unrouted:
                (expired if now_ns - item.created_ns >= limit_ns else keep).append(item)
            self._unrouted = keep
            waiting = [queue[0].created_ns for partitions in self._queues.values()
                       for queue in partitions.values()]
            waiting += [item.created_ns for item in keep]
            if self._in_flight and self._transaction is None:
                # Not a transaction's: its abort waits for the batches in flight to be
                # done (transaction_manager.py), and EndTxn must not overtake a
                # Produce request the broker may still append.
                self._expire_in_flight_locked(now_ns, expired)
                waiting += [item.created_ns for item in self._in_flight]
            if waiting:
                self._schedule_sweep_locked(min(waiting))
        for release in released:
            release()
        self._fail_expired(expired)

    def restamp_all(self):
        """The ProducerIdManager's listener: a new producer id arrived, partitions
        waiting for it can start over."""
        self._restamp()

    def _restamp(self, keys=None):
        """Idempotent partitions of keys (None: all) that can start over now are
        re-stamped; their leaders' connections look at their queues again."""
        leaders = {self._metadata.leader_id(*key) for key in self._idempotence.restamp(keys)}
        for node_id in leaders:
            conn = None if node_id is None else self._pool.get(node_id)
            if conn is not None:
                conn.wakeup()

    def _hold_topic(self, topic, count):
        """With _lock held: count more batches of topic here.  The first one asks
        the metadata for the topic again if forget_unused() dropped it after send()
        looked its leader up (add_topic() does nothing for a topic it asks for)."""
        with self._topics_lock:
            first = topic not in self._batches_per_topic
            self._batches_per_topic[topic] += count
            if first:
                self._metadata.add_topic(topic)

    def _complete(self, item, result=None, error=None):
        self._complete_all(((item, result, error),))

    def _complete_all(self, outcomes):
        """Completes batches: outcomes is a sequence of (item, result, error), one
        lock round trip for them all (the batches of one answer, usually)."""
        for item, _, _ in outcomes:
            # The batch's memory is no longer ours to hold: once told the outcome,
            # the owner may release the buffer it came from.
            item.view = None
        released = None
        with self._lock:
            metrics = self._metrics
            for item, _, error in outcomes:
                # A failure leaves a hole: the caller calls _restamp() next.
                if item.sequenced is not None and self._idempotence.done(
                        item.sequenced, error is None, restart=not self._closed):
                    released = released or set()
                    released.add((item.topic, item.partition))
                if error is None:
                    metrics["batches_acknowledged"] += 1
                    metrics["records_acknowledged"] += item.record_count
                else:
                    metrics["batches_failed"] += 1
                    metrics["records_failed"] += item.record_count
            self._pending -= len(outcomes)
            if self._pending == 0:
                self._done.notify_all()
            now_ns = time.monotonic_ns()
            with self._topics_lock:
                held = self._batches_per_topic
                for item, _, _ in outcomes:
                    held[item.topic] -= 1
                    if not held[item.topic]:
                        del held[item.topic]
                        self._topics_done_ns[item.topic] = now_ns
        if released:
            # Their next batches were held back (ProducerIdManager.take): their leaders
            # look again.
            self.wake_leaders(released)
        for item, result, error in outcomes:
            if error is not None and item.maybe_written:
                error = _saying_maybe_written(error)
            try:
                item.on_done(result, error)
            except Exception:  # noqa: BLE001 -- the other batches still complete
                _log.exception("completion of a %s-%d batch raised", item.topic,
                               item.partition)


class _SplitOutcome:
    """The on_done of a batch split in parts: hears each part's outcome (on the I/O
    thread that learns it), gives the part's memory back, and once every part is
    done tells the batch's on_done (see ProduceResult.parts).  A part split again
    reports its own parts.  Fields guarded by _lock: the parts may complete on
    different I/O threads (their partition's leader moved).

    An idempotent batch's stamp tells its owner under which producer id and epoch it
    was written (the replay counts a batch its partition started over under a new
    one as possibly duplicated): when a part was written under another stamp (its
    partition started over meanwhile), the batch is re-stamped so before its owner
    hears of it -- its bytes are not sent again from here."""

    def __init__(self, item, count):
        self._topic = item.topic  # immutable
        self._partition = item.partition  # immutable
        self._record_count = item.record_count  # immutable
        self._on_done = item.on_done  # immutable
        # Immutable: the batch's sealed RecordBatchBuilder, or None (no idempotence).
        self._batch = None if item.sequenced is None else item.sequenced.batch
        self._lock = threading.Lock()
        self._parts = [()] * count  # guarded by _lock: each part's outcomes, by part
        self._left = count  # guarded by _lock: parts not done yet
        self._restamped = None  # guarded by _lock: a stamp a part was written under

    def part_done(self, index, first, builder, view, result, error):
        stamp = (builder.producer_id, builder.producer_epoch)
        release_batch(builder, view, error is None)
        if result is not None and result.parts:  # split again
            outcomes = tuple((first + start, base_offset, append_ms, part_error)
                             for start, base_offset, append_ms, part_error in result.parts)
        elif error is None:
            outcomes = ((first, result.base_offset, result.log_append_time_ms, None),)
        else:
            outcomes = ((first, -1, -1, error),)
        batch = self._batch
        with self._lock:
            if (batch is not None and error is None
                    and stamp != (batch.producer_id, batch.producer_epoch)):
                self._restamped = stamp
            self._parts[index] = outcomes
            self._left -= 1
            if self._left:
                return
            parts = tuple(outcome for outcomes in self._parts for outcome in outcomes)
            restamped = self._restamped
        if restamped is not None:
            batch.rewrite_producer_state(*restamped, batch.base_sequence)
        error = next((part[3] for part in parts if part[3] is not None), None)
        self._on_done(_result((self._topic, self._partition, parts[0][1], parts[0][2],
                               self._record_count, parts)), error)


def _queued_before(item, other):
    """Whether item's records were sent before other's, in one partition's queue: by
    send order, then (parts of one split batch, a part split again among the others)
    by first record.  A part split again used to queue its halves behind the parts
    after it, which then overtook them."""
    return (item.seq, item.first) < (other.seq, other.first)


def _resolve(future, result, error):
    """on_done for a caller of send() that wants a Future."""
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


# What a batch's error adds when _Batch.maybe_written: failed is not absent.
_MAYBE_WRITTEN = ("an attempt went unanswered or failed after the broker may have appended "
                  "it, so its records may be in the log")


def _saying_maybe_written(error):
    """error, saying that the batch's records may be in the log (a copy of it, of its
    class, with its cause) unless it says so already: its records failed after an
    attempt the broker may have appended (an unanswered request, an answer that could
    not be read, retries run out after such an attempt), so failed is not absent."""
    if _MAYBE_WRITTEN in str(error):
        return error
    saying = copy.copy(error)
    saying.args = (f"{error}; {_MAYBE_WRITTEN}",)
    saying.__cause__ = error.__cause__
    return saying


def _record_outcomes(item, part, conn, error):
    """A batch refused for records the broker named (KIP-467's record_errors) as a
    split batch's parts, ((first record index, -1, -1, error), ...): as the Java
    client's Sender fails them, each named record with the broker's words on it (the
    partition's error class when one record is named, else InvalidRecordError: the
    one code cannot say which fault each had), the others with a
    RecordInInvalidBatchError.  An index outside the batch fails it whole with a
    ProtocolError: Java's Sender never looks such an index up, which leaves a
    broker's record error unsaid and its good records failed for no named reason."""
    where = f"{item.topic}-{item.partition} from {conn.describe()}"
    named = {}
    for index, message in part.record_errors:
        if not 0 <= index < item.record_count:
            return ((0, -1, -1, errors.ProtocolError(
                f"{where} refused record {index} of a batch of {item.record_count} "
                f"({error})")),)
        words = message or part.error_message or errors.error_for_code(
            part.error_code).name
        code = (part.error_code if len(part.record_errors) == 1
                else errors.InvalidRecordError.code)
        named[index] = errors.error_for_code(code, f"{where}: record {index}: {words}")
    innocent = errors.RecordInInvalidBatchError(
        f"{where}: failed to append record because it was part of a batch which had one "
        f"or more invalid records (record {', '.join(map(str, sorted(named)))})")
    outcomes = []
    for index in range(item.record_count):  # a run of good records is one part
        record_error = named.get(index, innocent)
        if not outcomes or record_error is not innocent or outcomes[-1][3] is not innocent:
            outcomes.append((index, -1, -1, record_error))
    return tuple(outcomes)


def _closed_before_delivery(item):
    """The error of a batch the sender's close() cut short (where batches complete,
    one that may be in the log is said to be: _saying_maybe_written)."""
    return errors.KafkaError(
        f"the sender closed before {item.topic}-{item.partition} was delivered")


def _delivery_timeout(sender, item, last_error=None):
    """The error of a batch out of time; last_error: what its last attempt met (its
    __cause__ then), or None (no attempt was answered with an error yet)."""
    # "Not delivered" is all that is known only of a batch no broker may have appended.
    fate = f"; {_MAYBE_WRITTEN}" if item.maybe_written else ""
    last = "" if last_error is None else f"; the last one met {last_error!r}"
    error = KafkaTimeoutError(
        f"{item.topic}-{item.partition}: batch of {item.record_count} records not "
        f"delivered within delivery_timeout_ms={sender.delivery_timeout_ms} "
        f"({item.attempts} attempts{fate}{last})")
    error.__cause__ = last_error
    return error
