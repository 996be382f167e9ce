"""Idempotence: producer ids, epochs and each partition's sequence numbers.

A broker keeps, per (producer id, partition), the epoch and the sequence of the last
batch it appended, and the offsets of the last five.  It appends a batch only if its
base sequence follows that one (else OUT_OF_ORDER_SEQUENCE_NUMBER), answers a resend
of one of the last five with the first append's offsets, takes a higher epoch only
from sequence 0, and fences a lower one (INVALID_PRODUCER_EPOCH).  So retries neither
duplicate nor reorder, provided a partition's batches carry consecutive sequences in
the order they are sent -- which the accumulator guarantees by numbering them here, at
seal time, on the one thread draining that partition.

The producer id and epoch come from InitProducerId (no transactional id), asked of
any broker the first time a batch is sealed, and retried on retriable errors.

Starting over (KIP-360, as the Java client's TransactionManager does it): a batch the
broker has not appended that fails for good (delivery timeout, a non-retriable error,
retries used up) leaves a hole in its partition's sequence that the broker will never
fill; so does the first outstanding batch of a partition refused with
OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID, which is resent.  The partition
then starts over: the producer's epoch is bumped (once it is at its maximum, a new
producer id comes from InitProducerId), and the partition's outstanding batches are
re-stamped in send order from sequence 0 under the new epoch -- header and CRC
rewritten in place, records untouched -- and sent again.  The failed batch's records
fail with its error; those behind it are delivered, once and in order.

Only a batch the broker cannot hold under its old stamp may be re-stamped: sent again
under the new one it would be a duplicate.  A batch becomes "maybe appended" when an
attempt ends without a definite refusal (no answer, a lost connection,
REQUEST_TIMED_OUT, ...), and stops being so when, first of its partition, it is
refused for its sequence; nothing behind a batch the broker does not hold can be held
(sequences are consecutive).  So a partition starting over sends nothing until none
of its batches is in flight and its first one is not maybe appended: a first batch
that is gets resent under the old stamp until its fate is known (acknowledged,
refused, or failed for good).  Other partitions keep their own stamps; the broker
keeps epochs per partition.

A broker that holds no state of a producer id for a partition takes a batch of any
sequence from it (Kafka accepts any sequence where it knows no epoch).  So until a
batch of a partition has been acknowledged under its producer id, one batch of it is
in flight at a time: else a batch refused for itself (MESSAGE_TOO_LARGE, then split)
could be overtaken by the one behind it, appended at its later sequence, and the
partition would start over with its records out of send order.  The first answer
lets the rest go (done() says so; the Sender wakes the partition's leader).  And a
batch goes only once every batch before it is in a request or acknowledged: queued for
another broker (the leader moved while they waited), those would reach the new leader
after it.

Threads: next_sequence() and release_sequence() run on the thread draining the
partition; the others on the Sender's (callers' threads in send(), I/O threads,
track() and take() with the Sender's lock held).  Every field, a SequencedBatch's
included, is guarded by _lock, under which a batch is re-stamped only while it is in
no request: take() and restamp() exclude each other.  _fetch_lock serialises
InitProducerId.  Lock order: Sender._lock, then _lock, then the WAL's (a re-stamp is
logged, and with wal_fsync "always" synced, under both).  InitProducerId goes out with
neither held, from the draining thread or the "netkafka-producer-id" thread, never
from an I/O thread, which would wait for itself.
"""
import collections
import itertools
import logging
import struct
import threading
import time

from netkafka import errors
from netkafka.client.retry import ask_until
from netkafka.protocol.framing import ApiKey
from netkafka.protocol.init_producer_id import (
    decode_init_producer_id_response, encode_init_producer_id_request,
)

_log = logging.getLogger("netkafka.producer.idempotence")

_CRC = struct.Struct(">I")  # a RecordBatch v2's CRC32C, at offset 17
_SEQUENCE_LIMIT = 2**31  # sequences wrap to 0 after Int.MAX_VALUE, as in the Java client
_EPOCH_MAX = 2**15 - 1  # Short.MAX_VALUE: past it, a new producer id

# Refusals of a batch's sequence: "not yet" while an earlier batch of the partition is
# outstanding, a hole before it when it is the first.
_SEQUENCE_ERRORS = frozenset((errors.OutOfOrderSequenceNumberError.code,
                              errors.UnknownProducerIdError.code))
# Partition error codes that say this attempt was not appended: the broker refused
# the batch before writing it -- unless the answer carries the append's base offset: a
# leader that steps down while an acks=all append waits for its replicas answers
# NOT_LEADER_OR_FOLLOWER then, the offset kept (Kafka's DelayedProduce).  Any other
# answer but success may hide an append (REQUEST_TIMED_OUT and
# NOT_ENOUGH_REPLICAS_AFTER_APPEND come after one).  The Sender's too, for what it
# tells of a batch that failed.
NOT_APPENDED = frozenset(error.code for error in (
    errors.CorruptMessageError,
    errors.UnknownTopicOrPartitionError,
    errors.UnknownTopicIdError,  # Produce v13+'s UNKNOWN_TOPIC_OR_PARTITION (by topic id)
    errors.LeaderNotAvailableError,
    errors.NotLeaderOrFollowerError,
    errors.MessageTooLargeError,
    errors.RecordListTooLargeError,
    errors.NotEnoughReplicasError,  # checked before the append
    errors.TopicAuthorizationFailedError,
    errors.InvalidTimestampError,
    errors.OutOfOrderSequenceNumberError,
    errors.InvalidProducerEpochError,
    errors.UnknownProducerIdError,
    errors.InvalidRecordError,
))


def may_be_appended(error_code, written):
    """Whether an answer leaves its batch perhaps in the log: error_code None (no
    answer) or one not in NOT_APPENDED, or written (the answer carries the append's
    base offset, its error came after the append)."""
    return written or error_code is None or (error_code != errors.NO_ERROR
                                             and error_code not in NOT_APPENDED)


# What a sequence refusal means, from answered().
WAIT = "wait"  # an earlier batch is outstanding: resend once it is through
RESTART = "restart"  # a hole before this first batch: resend it after the restart
APPENDED = "appended"  # a later batch was acknowledged, so this one is in the log
PASSED_OVER = "passed over"  # a later one was appended without it: it is not in the log


class SequencedBatch:
    """A sealed batch of an idempotent partition, from the Sender taking it until it
    is acknowledged or fails.  Fields guarded by ProducerIdManager._lock."""

    __slots__ = ("key", "batch", "record_count", "wal_id", "part", "in_flight",
                 "maybe_appended", "appended", "appended_on")

    def __init__(self, key, batch, record_count, wal_id, part=False, appended_on=None):
        self.key = key  # (topic, partition)
        self.batch = batch  # the sealed RecordBatchBuilder, re-stamped in place
        self.record_count = record_count
        self.wal_id = wal_id  # its id in the WAL (0: none): a re-stamp is logged there
        self.part = part  # a part of a split batch (split()); wal_id is the batch's
        self.in_flight = False  # in a request not answered yet
        self.maybe_appended = False  # an attempt may have been appended (above)
        self.appended = False  # it, or a later batch under its stamp, was acknowledged
        # Replayed (replay.py): the node whose DescribeProducers answer, as the
        # partition's leader, said it has the batch; else None.
        self.appended_on = appended_on


class _PartitionSequence:
    """One partition's idempotence state; fields guarded by ProducerIdManager._lock."""

    __slots__ = ("producer_id", "epoch", "next_sequence", "outstanding", "in_flight")

    def __init__(self, producer_id, epoch):
        self.producer_id = producer_id  # the stamp its batches carry
        self.epoch = epoch
        self.next_sequence = 0  # base sequence of its next batch
        self.outstanding = collections.deque()  # SequencedBatch the Sender holds, send order
        self.in_flight = 0  # of those, how many are in a request


class ProducerIdManager:
    """Producer ids from the brokers and per-partition sequence numbers.

    Args:
        pool: the IOPool whose connections carry InitProducerId.
        metadata: the Metadata cache (which brokers there are).
        retry_backoff: the RetryBackoff between InitProducerId attempts.
        max_block_ms: bound on next_sequence() waiting for a producer id.
    """

    def __init__(self, pool, metadata, retry_backoff, max_block_ms, wal=None):
        self._pool = pool  # immutable
        self._metadata = metadata  # immutable
        self._wal = wal  # immutable; thread-safe: re-stamps are logged there
        self._retry_backoff = retry_backoff  # immutable
        self._max_block_s = max_block_ms / 1000  # immutable
        self._lock = threading.Lock()
        # Guarded by _lock: (producer id, epoch) a partition starting over takes;
        # None while a new producer id is fetched.
        self._current = None
        self._partitions = {}  # guarded by _lock: (topic, partition) -> _PartitionSequence
        # Guarded by _lock: partitions with a hole, to re-stamp from 0 under a new
        # epoch once they can (see above).
        self._restarting = set()
        # Guarded by _lock: (topic, partition) -> the producer id a batch of it was
        # acknowledged under: the broker holds that id's state there (see above).
        self._acknowledged_under = {}
        self._ids_fetched = 0  # guarded by _lock: InitProducerId answers so far
        self._epoch_bumps = 0  # guarded by _lock
        self._restarts = 0  # guarded by _lock: partitions re-stamped under a new epoch
        self._fetching = False  # guarded by _lock: the producer-id thread is running
        # Guarded by _lock: called (no lock held) once a new producer id lets the
        # partitions waiting for one start over (the Sender's restamp_all).
        self._on_new_producer_id = None
        self._fetch_lock = threading.Lock()  # one InitProducerId at a time; guards no field

    # ------------------------------------------------------------------
    # The thread draining a partition.

    def next_sequence(self, topic, partition, record_count):
        """(producer id, epoch, base sequence) for the next batch of the partition.

        Raises:
            KafkaTimeoutError: no producer id within max_block_ms.
            KafkaError: a broker refused InitProducerId for good.
        """
        key = (topic, partition)
        with self._lock:
            state = self._partitions.get(key)
            if state is not None:
                return self._number_locked(state, record_count)
        stamp = self._producer_id(time.monotonic() + self._max_block_s)
        with self._lock:
            # Only this thread adds this partition, so it is still missing.
            state = self._partitions[key] = _PartitionSequence(*stamp)
            return self._number_locked(state, record_count)

    def adopt(self, topic, partition, producer_id, epoch, next_sequence):
        """The partition goes on under a dead producer's stamp (the WAL's replay): its
        batches are numbered under producer_id and epoch from next_sequence on.  Called
        before any batch of it is numbered, after fetch_producer_id(): a partition
        that has to start over takes this producer's own id.

        Raises:
            KafkaError: the partition has a stamp already.
        """
        key = (topic, partition)
        with self._lock:
            if key in self._partitions:
                raise errors.KafkaError(f"{topic}-{partition} is numbered already: it "
                                        f"cannot adopt producer id {producer_id}")
            state = self._partitions[key] = _PartitionSequence(producer_id, epoch)
            state.next_sequence = next_sequence

    def fetch_producer_id(self):
        """This producer's own (producer id, epoch), asked for now if it has none yet.

        Raises:
            KafkaTimeoutError: no producer id within max_block_ms.
        """
        return self._producer_id(time.monotonic() + self._max_block_s)

    def release_sequence(self, topic, partition, producer_id, epoch, base_sequence,
                         record_count):
        """A batch next_sequence() numbered never reached the Sender: its sequences
        are given back, so that no hole is left (unless the partition has been
        re-stamped since, which did not count it)."""
        with self._lock:
            state = self._partitions.get((topic, partition))
            if (state is not None and (state.producer_id, state.epoch) == (producer_id, epoch)
                    and state.next_sequence
                    == (base_sequence + record_count) % _SEQUENCE_LIMIT):
                state.next_sequence = base_sequence

    @staticmethod
    def _number_locked(state, record_count):
        base = state.next_sequence
        state.next_sequence = (base + record_count) % _SEQUENCE_LIMIT
        return state.producer_id, state.epoch, base

    # ------------------------------------------------------------------
    # The Sender, with its lock held.

    def set_new_producer_id_listener(self, listener):
        with self._lock:
            self._on_new_producer_id = listener

    def track(self, topic, partition, batch, record_count, wal_id=0, appended_on=None):
        """The Sender takes a sealed batch (a RecordBatchBuilder numbered by
        next_sequence()): it joins its partition's outstanding batches, last.  One
        numbered before its partition was re-stamped is re-stamped now.  appended_on:
        SequencedBatch's."""
        key = (topic, partition)
        entry = SequencedBatch(key, batch, record_count, wal_id, appended_on=appended_on)
        with self._lock:
            state = self._partitions[key]
            if (batch.producer_id, batch.producer_epoch) != (state.producer_id, state.epoch):
                batch.rewrite_producer_state(*self._number_locked(state, record_count))
                self._make_durable_locked(self._log_restamp_locked(entry))
            state.outstanding.append(entry)
        return entry

    def take(self, entry):
        """Whether entry, first in its partition's queue, may go into a request now;
        if so it counts as in flight until answered()."""
        with self._lock:
            state = self._partitions[entry.key]
            if entry.key in self._restarting and not (entry.maybe_appended
                                                      and state.outstanding[0] is entry):
                return False  # only a first batch whose fate is unknown goes out
            if state.in_flight and self._acknowledged_under.get(entry.key) != state.producer_id:
                return False  # one at a time until the broker holds the id's state
            for ahead in state.outstanding:
                if ahead is entry:
                    break
                if not (ahead.in_flight or ahead.appended):
                    # To be sent (again), queued for another broker (its leader moved)
                    # or waiting for its backoff: sent first, this one would reach the
                    # new leader ahead of it -- out of order wherever the broker holds
                    # no state of the id.  At most max_in_flight ahead: a short look.
                    return False
            entry.in_flight = True
            state.in_flight += 1
            return True

    def split(self, entry, parts):
        """entry was refused as too large and the Sender cut it (split.py): parts,
        [(sealed RecordBatchBuilder, first record index, record count)] in order,
        take its place among its partition's outstanding batches, stamped with its
        producer id and epoch and their share of its sequences (as it is stamped now:
        the partition may have started over since the refusal).  Returns their
        SequencedBatch, in order; None, the parts unused, if entry may be in the log
        already (an earlier attempt ended without an answer): parts under its
        sequences would then be out of order, not duplicates."""
        with self._lock:
            if entry.maybe_appended:
                return None
            outstanding = self._partitions[entry.key].outstanding
            index = outstanding.index(entry)
            batch = entry.batch
            entries = []
            for builder, first, count in parts:
                builder.rewrite_producer_state(
                    batch.producer_id, batch.producer_epoch,
                    (batch.base_sequence + first) % _SEQUENCE_LIMIT)
                entries.append(SequencedBatch(entry.key, builder, count, entry.wal_id,
                                              part=True))
            del outstanding[index]
            for part in reversed(entries):
                outstanding.insert(index, part)
            entry.batch = None  # its memory is its owner's to release now
            return entries

    def answered(self, entry, error_code, written=False, node_id=None):
        """entry's request came back from node_id: error_code NO_ERROR, the partition's
        error code, or None (no answer: the request or its connection failed);
        written: the answer carries the append's base offset (its error came after
        the append).  Returns what a refusal of its sequence means (WAIT, RESTART,
        APPENDED or PASSED_OVER), else None."""
        with self._lock:
            state = self._partitions[entry.key]
            entry.in_flight = False
            state.in_flight -= 1
            if error_code == errors.NO_ERROR:
                entry.appended = True  # acknowledged: done() follows
            elif may_be_appended(error_code, written):
                entry.maybe_appended = True
            if error_code not in _SEQUENCE_ERRORS:
                return None
            if state.outstanding[0] is not entry:
                return WAIT
            if entry.appended_on is not None and entry.appended_on == node_id:
                # The leader that said it has the batch refuses its sequence: older
                # than the batches it keeps offsets of (five, one after loading a
                # snapshot: a clean restart), not a hole.
                return APPENDED
            if entry.appended:
                if entry.maybe_appended:
                    return APPENDED
                # No attempt of it can be in the log (each was refused before the
                # append), yet a later batch was acknowledged: a broker holding no
                # state of the producer id (expired, as it is a day after the records'
                # timestamps) takes any sequence.  Taken for appended, it was lost.
                return PASSED_OVER
            # Nothing before it is outstanding and the broker refused it: the hole
            # is before it, and it is not in the log.
            entry.maybe_appended = False
            self._restarting.add(entry.key)
            return RESTART

    def unresolved(self, entry):
        """entry, in a request not answered yet, fails at its delivery timeout: its
        attempt may be appended (the Java client's unresolved sequence), so the
        partition does not start over before that attempt's fate is known (done()
        follows; answered() when the answer comes)."""
        with self._lock:
            entry.maybe_appended = True

    def done(self, entry, ok, restart=True):
        """entry was acknowledged (ok) or failed for good: it leaves its partition's
        outstanding batches.  A failure starts the partition over, unless restart is
        False (the Sender is closing).  Returns whether batches of the partition held
        back until the broker held its producer id's state may go now (take())."""
        with self._lock:
            state = self._partitions[entry.key]
            outstanding = state.outstanding
            if outstanding[0] is entry:  # the usual case
                outstanding.popleft()
                index = 0
            else:
                index = outstanding.index(entry)
                del outstanding[index]
            producer_id = entry.batch.producer_id
            entry.batch = None  # its memory is its owner's to release now
            released = False
            if ok:
                # The broker appends in sequence order: those before it are in too.
                for earlier in itertools.islice(outstanding, index):
                    earlier.appended = True
                if self._acknowledged_under.get(entry.key) != producer_id:
                    self._acknowledged_under[entry.key] = producer_id
                    released = bool(outstanding)
            elif restart:
                self._restarting.add(entry.key)
                if not (entry.maybe_appended or entry.appended):
                    # Not in the log: nothing behind it can be -- unless a later batch
                    # was acknowledged (a broker holding no state of the id passed
                    # over it), and the others behind may be in too.
                    for later in itertools.islice(outstanding, index, None):
                        later.maybe_appended = False
            return released

    def restamp(self, keys=None):
        """Starts over every partition of keys (an iterable, read only if some
        partition is restarting; None: all) that is restarting and ready to (see
        the module's docstring).  Returns those re-stamped: their batches may be
        sent again."""
        restamped = []
        position = 0  # the WAL's, after the last RESTAMP entry logged
        with self._lock:
            if not self._restarting:
                return restamped
            for key in list(self._restarting if keys is None
                            else self._restarting.intersection(keys)):
                state = self._partitions[key]
                if state.in_flight or (state.outstanding
                                       and state.outstanding[0].maybe_appended):
                    continue
                stamp = self._new_stamp_locked((state.producer_id, state.epoch))
                if stamp is None:
                    continue  # the producer-id thread calls back with a new id
                producer_id, epoch = stamp
                sequence = 0
                for entry in state.outstanding:
                    entry.batch.rewrite_producer_state(producer_id, epoch, sequence)
                    position = self._log_restamp_locked(entry) or position
                    # No attempt under the new stamp yet (and none under the old
                    # one can be in the log: it is behind the first, which is not).
                    entry.maybe_appended = entry.appended = False
                    sequence = (sequence + entry.record_count) % _SEQUENCE_LIMIT
                state.producer_id, state.epoch = producer_id, epoch
                state.next_sequence = sequence
                self._restarting.discard(key)
                self._restarts += 1
                restamped.append(key)
            self._make_durable_locked(position)
        return restamped

    def _log_restamp_locked(self, entry):
        """A batch's new stamp into the WAL, with the CRC32C it has now: a replay
        rebuilds the batch as it was last sent.  Returns the WAL's position after the
        entry, or 0 when nothing was logged.

        A part of a split batch: the WAL knows the batch whole, under its stamp, and
        the broker may now hold records of it under the part's -- which the batch's
        stamp would not deduplicate, and whose newer epoch fences it.  The batch is
        logged with no stamp (producer id -1): a replay sends it at-least-once, under
        a stamp of its own, its records counted as possibly duplicated."""
        if self._wal is None or not entry.wal_id:
            return 0
        if entry.part:
            return self._wal.log_restamp(entry.wal_id, -1, -1, -1, 0)
        batch = entry.batch
        with memoryview(batch) as view:
            (batch_crc,) = _CRC.unpack_from(view, 17)
        return self._wal.log_restamp(entry.wal_id, batch.producer_id, batch.producer_epoch,
                                     batch.base_sequence, batch_crc)

    def _make_durable_locked(self, position):
        """The RESTAMP entries up to position (0: none) synced (wal_fsync "always")
        before _lock is given back, so before take() lets a restamped batch into a
        request.  The sync runs under the Sender's lock too: restamps are rare (an
        epoch bump, a batch numbered before one)."""
        if position:
            self._wal.sync_restamps(position)

    def _new_stamp_locked(self, stamp):
        """The stamp a partition now under `stamp` starts over with: the producer's
        current one if the partition has not used it, else the epoch after it (or,
        past the last epoch, None until a new producer id arrives)."""
        current = self._current
        if current is None:
            return None
        if current != stamp:
            return current
        if current[1] < _EPOCH_MAX:
            self._current = (current[0], current[1] + 1)
            self._epoch_bumps += 1
            return self._current
        self._current = None
        if not self._fetching:
            self._fetching = True
            threading.Thread(target=self._fetch_new_producer_id, args=(current,),
                             name="netkafka-producer-id", daemon=True).start()
        return None

    def metrics(self):
        with self._lock:
            current = self._current
            return {"producer_id": -1 if current is None else current[0],
                    "producer_epoch": -1 if current is None else current[1],
                    "producer_ids_fetched": self._ids_fetched,
                    "producer_epoch_bumps": self._epoch_bumps,
                    "partitions_restarted": self._restarts}

    # ------------------------------------------------------------------
    # InitProducerId.

    def _fetch_new_producer_id(self, spent):
        """The producer-id thread: a new id to replace `spent`, whose epochs are all
        used, however long it takes (the batches waiting for it fail at their
        delivery timeout meanwhile); gives up when the pool closes."""
        retries = 0
        while not self._pool.closed:
            try:
                self._producer_id(time.monotonic() + self._max_block_s, avoid=spent)
                break
            except errors.KafkaError as exc:
                _log.warning("no new producer id yet: %s", exc)
                time.sleep(self._retry_backoff.ms(retries) / 1000)
                retries += 1
        with self._lock:
            self._fetching = False
            listener = self._on_new_producer_id
        if listener is not None and not self._pool.closed:
            listener()

    def _producer_id(self, deadline, avoid=None):
        """The current (producer id, epoch), asking a broker for one if there is none
        or if it is `avoid`."""
        with self._fetch_lock:
            with self._lock:
                current = self._current
            if current is not None and current != avoid:
                return current
            current = self._fetch(deadline)
            with self._lock:
                self._current = current
                self._ids_fetched += 1
            return current

    def _fetch(self, deadline):
        return ask_until(
            deadline,
            f"no producer id (InitProducerId) within max_block_ms={self._max_block_s * 1000:.0f}",
            self._init_producer_id, self._retry_backoff)

    def _init_producer_id(self, timeout_s):
        # Any broker answers an idempotent producer; the one with least queued helps.
        conn = self._metadata.least_loaded_connection(timeout_s)
        client_id = conn.config.client_id
        response = conn.call(
            ApiKey.INIT_PRODUCER_ID,
            lambda cid, version: encode_init_producer_id_request(cid, client_id, version),
            decode_init_producer_id_response, timeout_s)
        if response.error_code == errors.ClusterAuthorizationFailedError.code:
            # Say which permission: the code alone does not.
            raise errors.ClusterAuthorizationFailedError(
                f"InitProducerId from {conn.describe()}: this principal may not have a "
                "producer id: it needs IdempotentWrite on the cluster resource "
                "(kafka-cluster), or Write on a topic (which also grants it since Kafka "
                "3.0); grant one, or set enable_idempotence=False")
        if response.error_code:
            raise errors.error_for_code(response.error_code,
                                        f"InitProducerId from {conn.describe()}")
        if response.producer_id < 0 or response.producer_epoch < 0:
            # Stamped on batches, producer id -1 would turn idempotence off unseen: a
            # broker neither checks nor deduplicates its sequences.
            raise errors.ProtocolError(
                f"InitProducerId from {conn.describe()} answered no error but producer id "
                f"{response.producer_id}, epoch {response.producer_epoch}")
        return response.producer_id, response.producer_epoch


class TransactionalProducerIds(ProducerIdManager):
    """The producer id and epoch of a transactional producer: its transaction
    coordinator's, never fetched nor bumped here.

    They come from InitProducerId with the transactional id (init_transactions(), and
    after a Transactions V1 abort of a failed transaction, or one that left holes) and
    from EndTxn v5+ (the end of every V2 transaction), and are installed between
    transactions, when no batch is outstanding: every partition starts again at
    sequence 0 under them.  A hole in a partition's sequences (a batch failed for good)
    fails the transaction; the partition waits, and the abort brings the next stamp.
    """

    def install(self, producer_id, epoch):
        """The stamp of the next transaction's batches, each partition from sequence 0.

        Raises:
            KafkaError: a batch is still outstanding (a caller's bug: transactions
                end only once every batch is done).
        """
        with self._lock:
            busy = sorted(key for key, state in self._partitions.items() if state.outstanding)
            if busy:
                raise errors.KafkaError(
                    f"a new producer id/epoch while batches of {busy} are outstanding")
            previous, self._current = self._current, (producer_id, epoch)
            if previous is None or previous[0] != producer_id:
                self._ids_fetched += 1
            elif previous[1] != epoch:
                self._epoch_bumps += 1
            self._partitions.clear()
            self._restarting.clear()

    def stamp(self):
        """The current (producer id, epoch), or None before init_transactions()."""
        with self._lock:
            return self._current

    @property
    def has_holes(self):
        """Whether a batch failed for good and left a hole in its partition's sequences
        (the partition waits for the next stamp: _new_stamp_locked)."""
        with self._lock:
            return bool(self._restarting)

    def _producer_id(self, deadline, avoid=None):
        with self._lock:
            current = self._current
        if current is None:  # records are refused before init_transactions(): a bug
            raise errors.KafkaError("no producer id: init_transactions() has not completed")
        return current

    def _new_stamp_locked(self, stamp):
        # The coordinator's next stamp, once installed; until then the partition waits.
        return self._current if self._current != stamp else None
