"""The transaction state machine of a transactional producer.

The states and their moves are the Java client's:

    UNINITIALIZED --init_transactions()--> READY --begin_transaction()--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction()--> COMMITTING --EndTxn done--> READY
    IN_TRANSACTION or ABORTABLE_ERROR --abort_transaction()--> ABORTING --EndTxn done--> READY
    IN_TRANSACTION or COMMITTING --a record or a request failed--> ABORTABLE_ERROR
    any state --fenced, not authorized, unsupported--> FATAL_ERROR, for good

A commit or abort that did not finish (its timeout ran out) leaves the state at
COMMITTING or ABORTING, and the same call again takes up where it stopped.  Only one
transactional call runs at a time (operation()); a second one from another thread is
refused rather than interleaved with the first.

What a call in the wrong state raises:
    TransactionStateError            the call makes no sense now (begin twice, commit with
                                     no transaction open, send() outside a transaction)
    TransactionAbortRequiredError    the open transaction failed (its cause attached):
                                     only abort_transaction() is possible
    the fatal error itself           fenced (ProducerFencedError), not authorized, ... --
                                     a fresh instance of its class per call, caused by it

Records are taken only IN_TRANSACTION.  send() is checked by the accumulator, not
here: at every state change (and as a commit or abort starts or stops running) the
state machine hands the accumulator's gate what a record sent now must raise (None
while records are taken), so send() pays one field test it already made, under the
lock it already took.

What the sender asks (may_send): with Transactions V1 a partition's batches may go
out only once the transaction coordinator has added the partition to the transaction
(AddPartitionsToTxn).  A batch handed to the sender enrols its partition (enroll());
the partitions enrolled since the last AddPartitionsToTxn are taken together by the
thread sending the next one (take_partitions_to_add()), so each partition is added
once per transaction, while records keep being appended and other partitions' batches
keep going out.  With Transactions V2 (KIP-890: Produce v12+, EndTxn v5) the partition
leader adds the partition itself when the first batch of the transaction arrives:
every batch may be sent at once.

Threads: any method from any thread.  Every field is guarded by _lock; _adds_done
(a condition on it) is notified when the last partition being added is answered, and
_idle (another) when a transactional call ends.  The
gate is called with _lock held.  Lock order: the Sender's lock, then _lock, then the
gate's (the accumulator's lock).
"""
import contextlib
import enum
import logging
import threading
import time

from netkafka import errors
from netkafka.errors import (BrokerError, KafkaTimeoutError, TransactionAbortRequiredError,
                             TransactionStateError)

_log = logging.getLogger("netkafka.producer.transactions")


class TransactionState(enum.Enum):
    """A transactional producer's state (the Java client's, less its INITIALIZING)."""

    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


_S = TransactionState
# target state: the states it may be entered from.
_ALLOWED_FROM = {
    _S.READY: frozenset((_S.UNINITIALIZED, _S.COMMITTING, _S.ABORTING)),
    _S.IN_TRANSACTION: frozenset((_S.READY,)),
    _S.COMMITTING: frozenset((_S.IN_TRANSACTION,)),
    _S.ABORTING: frozenset((_S.IN_TRANSACTION, _S.ABORTABLE_ERROR)),
    _S.ABORTABLE_ERROR: frozenset((_S.IN_TRANSACTION, _S.COMMITTING)),
    _S.FATAL_ERROR: frozenset(TransactionState),
}

# Errors after which the producer cannot go on (the Java client's fatal ones): another
# producer took the transactional id over, or the broker refuses the producer itself.
FATAL_ERRORS = (errors.ProducerFencedError, errors.TransactionalIdAuthorizationFailedError,
                errors.ClusterAuthorizationFailedError, errors.UnsupportedVersionError,
                errors.IncompatibleBrokerError)

# Why a call is refused in a state where it makes no sense (FATAL_ERROR and
# ABORTABLE_ERROR have errors of their own).
_WRONG_STATE = {
    _S.UNINITIALIZED: "before init_transactions()",
    _S.READY: "with no transaction open: call begin_transaction() first",
    _S.IN_TRANSACTION: "while a transaction is open: commit or abort it first",
    _S.COMMITTING: "while the transaction commits (commit_transaction() did not finish: "
                   "call it again)",
    _S.ABORTING: "while the transaction aborts (abort_transaction() did not finish: "
                 "call it again)",
}


class TransactionStateMachine:
    """A transactional producer's state, and the partitions of its open transaction.

    Args:
        transactional_id: the producer's transactional id (for messages).
        gate: callable(refusal), told at once and at every state change what a record
            sent now must raise: None while records are taken, else a callable
            returning the exception.  Called with the state machine's lock held.
    """

    def __init__(self, transactional_id, gate):
        self.transactional_id = transactional_id  # immutable
        self._gate = gate  # immutable
        self._lock = threading.Lock()
        self._adds_done = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._state = _S.UNINITIALIZED  # guarded by _lock
        self._error = None  # guarded by _lock: the abortable or fatal error, the first one
        self._later_failures = 0  # guarded by _lock: failures after _error, for messages
        self._operation = None  # guarded by _lock: the transactional call running, by name
        self._v2 = False  # guarded by _lock: the open transaction uses Transactions V2
        # Guarded by _lock: the open transaction's partitions (topic, partition): added
        # by the coordinator, being added, enrolled and not yet asked for, refused or
        # never answered (V1); every partition enrolled (V2, where the leader adds it).
        self._added = set()
        self._pending = set()
        self._new = set()
        self._not_added = set()
        # Guarded by _lock: of _not_added, those whose AddPartitionsToTxn (V1) got no
        # answer in time -- the coordinator may have added them, and so opened the
        # transaction.
        self._add_unanswered = set()
        self._offsets_added = False  # guarded by _lock: group offsets are in the transaction
        # Guarded by _lock: a send_offsets_to_transaction() began and has not gone
        # through (it ran out of max_block_ms): the transaction cannot commit yet.
        self._offsets_unfinished = False
        # Guarded by _lock: the group of an AddOffsetsToTxn (V1) with no answer yet --
        # the coordinator may have added the group's offsets, and so opened the
        # transaction, or not -- else None.
        self._offsets_unanswered = None
        with self._lock:
            self._gate(self._record_refusal_locked())

    # ------------------------------------------------------------------
    # What any thread may ask.

    @property
    def state(self):
        with self._lock:
            return self._state

    @property
    def error(self):
        """The error behind ABORTABLE_ERROR or FATAL_ERROR, else None."""
        with self._lock:
            return self._error

    @property
    def v2(self):
        """Whether the open (or last) transaction uses Transactions V2."""
        with self._lock:
            return self._v2

    @property
    def partitions_enrolled(self):
        """Whether a batch of the open transaction was handed to the sender (and its
        partition enrolled): the partitions' sequence numbers moved on."""
        with self._lock:
            return bool(self._added or self._pending or self._new or self._not_added)

    @property
    def needs_end_txn(self):
        """Whether the open transaction holds anything (a partition or group offsets): an
        empty one ends without EndTxn, which the coordinator would refuse."""
        with self._lock:
            return bool(self._added or self._pending or self._offsets_added)

    # ------------------------------------------------------------------
    # The transactional calls (a caller's thread).

    @contextlib.contextmanager
    def operation(self, name):
        """Runs the transactional call `name` ("commit_transaction()") alone.

        Raises:
            TransactionStateError: another transactional call is running (named).
        """
        with self._lock:
            if self._operation is not None:
                raise TransactionStateError(
                    f"{name} while {self._operation} runs on another thread: the "
                    f"transactional calls of a producer go one at a time")
            self._operation = name
            self._regate_locked()
        try:
            yield
        finally:
            with self._lock:
                self._operation = None
                self._regate_locked()
                self._idle.notify_all()

    @property
    def running(self):
        """The transactional call running now (its name), or None."""
        with self._lock:
            return self._operation

    def wait_until_idle(self, timeout_s):
        """close(): waits up to timeout_s until no transactional call runs on another
        thread; returns the one still running (its name), or None."""
        with self._idle:
            self._idle.wait_for(lambda: self._operation is None, timeout_s)
            return self._operation

    def refusal(self, what):
        """The exception `what` gets in the state now (for batches thrown away because
        the transaction failed); None IN_TRANSACTION."""
        with self._lock:
            return None if self._state == _S.IN_TRANSACTION else self._refusal_locked(what)

    def check(self, what, *states):
        """Raises what `what` ("send_offsets_to_transaction()") must raise unless the
        state is one of states."""
        with self._lock:
            if self._state not in states:
                raise self._refusal_locked(what)

    def check_init(self):
        """Raises what init_transactions() raises unless the state is UNINITIALIZED."""
        with self._lock:
            if self._state == _S.UNINITIALIZED:
                return
            if self._state in (_S.FATAL_ERROR, _S.ABORTABLE_ERROR):
                raise self._refusal_locked("init_transactions()")
            raise TransactionStateError(
                f"init_transactions() called again: the producer has its producer id "
                f"already (state {self._state.value}, transactional id "
                f"{self.transactional_id!r})")

    def initialized(self):
        """init_transactions() got its producer id: UNINITIALIZED -> READY."""
        with self._lock:
            self._transition_locked(_S.READY)

    def begin(self, v2):
        """begin_transaction(): READY -> IN_TRANSACTION.  v2: the transaction uses
        Transactions V2 (the coordinator's brokers finalize transaction.version 2)."""
        with self._lock:
            if self._state != _S.READY:
                raise self._refusal_locked("begin_transaction()")
            self._clear_locked()
            self._v2 = v2
            self._transition_locked(_S.IN_TRANSACTION)

    def start_commit(self):
        """commit_transaction(): IN_TRANSACTION -> COMMITTING, or a commit that did not
        finish goes on."""
        with self._lock:
            if self._state == _S.COMMITTING:
                return
            if self._state != _S.IN_TRANSACTION:
                raise self._refusal_locked("commit_transaction()")
            if self._offsets_unfinished:
                # Committed now, the transaction would hold its records without all
                # of the offsets of the input they came from, which would be read
                # and written again (the Java client's commit waits behind them).
                raise TransactionStateError(
                    f"commit_transaction() while send_offsets_to_transaction() did not "
                    f"finish (it ran out of max_block_ms): call it again, or "
                    f"abort_transaction() (transactional id {self.transactional_id!r})")
            self._transition_locked(_S.COMMITTING)

    def start_abort(self):
        """abort_transaction(): IN_TRANSACTION or ABORTABLE_ERROR -> ABORTING, or an
        abort that did not finish goes on.  Nothing more is added to the transaction
        (take_partitions_to_add() answers [] from now on)."""
        with self._lock:
            if self._state == _S.ABORTING:
                return
            if self._state not in (_S.IN_TRANSACTION, _S.ABORTABLE_ERROR):
                raise self._refusal_locked("abort_transaction()")
            self._transition_locked(_S.ABORTING)

    def completed(self, what):
        """EndTxn answered, or the transaction was empty: COMMITTING or ABORTING -> READY.

        Raises:
            what `what` ("commit_transaction()") raises if the transaction failed
                meanwhile: a failed commit does not complete.
        """
        with self._lock:
            if self._state not in (_S.COMMITTING, _S.ABORTING):
                raise self._refusal_locked(what)
            self._clear_locked()
            self._transition_locked(_S.READY)

    def offsets_sending(self, sending):
        """send_offsets_to_transaction() begins (sending True) or has gone through
        (False): in between, a commit is refused."""
        with self._lock:
            self._offsets_unfinished = sending

    def offsets_added(self):
        """The group's offsets are in the transaction (AddOffsetsToTxn answered, or with
        V2 TxnOffsetCommit): the transaction must end with EndTxn."""
        with self._lock:
            self._offsets_added = True
            self._offsets_unanswered = None

    def offsets_asked(self, group_id):
        """AddOffsetsToTxn for group_id is sent (V1), or None: it was answered with an
        error (the offsets are not added)."""
        with self._lock:
            self._offsets_unanswered = group_id

    @property
    def adds_unanswered(self):
        """The partitions, sorted, whose AddPartitionsToTxn (V1) got no answer in time."""
        with self._lock:
            return sorted(self._add_unanswered)

    @property
    def offsets_unanswered(self):
        """The group of an AddOffsetsToTxn with no answer (it may have been applied),
        or None."""
        with self._lock:
            return self._offsets_unanswered

    # ------------------------------------------------------------------
    # Failures (any thread).

    def record_failed(self, error):
        """A record of the transaction (or a batch of them) failed with error: the
        transaction cannot commit (fatal errors aside, it can be aborted).  Returns
        whether the state moved (see abortable and fatal)."""
        if isinstance(error, FATAL_ERRORS):
            return self.fatal(error)
        return self.abortable(error)

    def abortable(self, error):
        """The open transaction failed with error: IN_TRANSACTION or COMMITTING ->
        ABORTABLE_ERROR.  Ignored while aborting (the transaction is being thrown away)
        or with no transaction open; a second error is counted, the first one kept.
        Returns whether the state moved to ABORTABLE_ERROR now."""
        with self._lock:
            if error is self._error:
                # The same failure told again: a refused append is told as it leaves
                # the accumulator's cold path (which a nested append passes up too)
                # and again when produce() counts it.
                return False
            if self._state == _S.ABORTABLE_ERROR:
                self._later_failures += 1
                return False
            if self._state not in _ALLOWED_FROM[_S.ABORTABLE_ERROR]:
                _log.debug("transaction %r: %r in state %s, ignored", self.transactional_id,
                           error, self._state.value)
                return False
            _log.info("transaction %r failed, it must be aborted: %r", self.transactional_id,
                      error)
            self._error = error
            self._transition_locked(_S.ABORTABLE_ERROR)
            return True

    def fatal(self, error):
        """The producer cannot go on (fenced, not authorized, unsupported): any state ->
        FATAL_ERROR, for good.  The first fatal error is kept.  Returns whether the
        state moved to FATAL_ERROR now."""
        with self._lock:
            if error is self._error:
                return False  # told again (see abortable)
            if self._state == _S.FATAL_ERROR:
                self._later_failures += 1
                return False
            _log.error("transactional producer %r cannot go on: %r", self.transactional_id,
                       error)
            self._error = error
            self._later_failures = 0
            self._transition_locked(_S.FATAL_ERROR)
            return True

    # ------------------------------------------------------------------
    # The partitions of the transaction: the sender and the thread adding them.

    def enroll(self, topic, partition):
        """A batch of (topic, partition) is handed to the sender: the partition joins
        the transaction.  Returns True if it is new and must be added to it
        (Transactions V1): the caller wakes the thread sending AddPartitionsToTxn.

        Raises (the batch is not sent):
            what a record sent now raises, unless a transaction is open or committing
            (a commit hands over the batches it flushes).
        """
        key = (topic, partition)
        with self._lock:
            if self._state not in (_S.IN_TRANSACTION, _S.COMMITTING):
                raise self._refusal_locked(f"sending a batch of {topic}-{partition}")
            if self._v2:
                self._added.add(key)
                return False
            if key in self._added or key in self._pending or key in self._new:
                return False
            self._new.add(key)
            return True

    def may_send(self, topic, partition):
        """Whether a batch of (topic, partition) may go into a request now: with V1 once
        the coordinator has added the partition; never after a fatal error."""
        with self._lock:
            return self._state != _S.FATAL_ERROR and (topic, partition) in self._added

    def take_partitions_to_add(self):
        """The partitions enrolled since the last call, sorted, now counted as being
        added (answer with partitions_added / partitions_not_added); [] if none, or if
        the transaction has failed or is being aborted (nothing more is added then)."""
        with self._lock:
            if not self._new or self._state not in (_S.IN_TRANSACTION, _S.COMMITTING):
                return []
            taken = sorted(self._new)
            self._new.clear()
            self._pending.update(taken)
            return taken

    def partitions_added(self, keys):
        """The coordinator added keys to the transaction: their batches may go (those
        its earlier answer did not come for: the abort ends them with EndTxn)."""
        with self._lock:
            for key in keys:
                if key in self._pending or key in self._add_unanswered:
                    self._pending.discard(key)
                    self._add_unanswered.discard(key)
                    self._not_added.discard(key)
                    self._added.add(key)
            if not self._pending:
                self._adds_done.notify_all()

    def partitions_not_added(self, keys, unanswered=False):
        """The coordinator did not add keys (unanswered: no answer came in time, it
        may have): the caller has failed the transaction (or the producer) with the
        reason; their batches fail when it is aborted.  They still count as enrolled:
        their batches took sequence numbers."""
        with self._lock:
            self._pending.difference_update(keys)
            self._not_added.update(keys)
            if unanswered:
                self._add_unanswered.update(keys)
            if not self._pending:
                self._adds_done.notify_all()

    def wait_for_adds(self, timeout_s):
        """Waits until no partition is being added, nor -- in an open or committing
        transaction -- enrolled and not yet asked for: a commit ends the transaction
        only then, and so does an abort, whose EndTxn would otherwise race the
        AddPartitionsToTxn (reaching the coordinator first, it finds no transaction
        to abort and answers INVALID_TXN_STATE, fatal).  Also ends when the
        transaction fails (the caller looks at the state next).

        Raises:
            KafkaTimeoutError: partitions still being added after timeout_s (named).
        """
        deadline = time.monotonic() + timeout_s
        with self._adds_done:
            while self._adds_outstanding_locked():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._adds_done.wait(remaining)
            waiting = sorted(self._adds_outstanding_locked())
            if waiting:
                raise KafkaTimeoutError(
                    f"transaction {self.transactional_id!r}: partitions "
                    f"{', '.join(f'{t}-{p}' for t, p in waiting)} not added to the "
                    f"transaction within {timeout_s:.1f} s")

    # ------------------------------------------------------------------
    # With _lock held.

    def _transition_locked(self, target):
        if self._state not in _ALLOWED_FROM[target]:
            # A bug of the caller's: every public method checks first.
            raise TransactionStateError(
                f"transaction {self.transactional_id!r}: no move from {self._state.value} "
                f"to {target.value}")
        _log.debug("transaction %r: %s -> %s", self.transactional_id, self._state.value,
                   target.value)
        self._state = target
        if target in (_S.READY, _S.IN_TRANSACTION):
            self._error = None
            self._later_failures = 0
        self._gate(self._record_refusal_locked())
        self._adds_done.notify_all()  # wait_for_adds() looks at the state again

    def _adds_outstanding_locked(self):
        """The partitions wait_for_adds() waits for in the state now: enrolled
        ones are no longer asked for once the transaction aborts (or failed)."""
        if self._state in (_S.IN_TRANSACTION, _S.COMMITTING):
            return self._pending | self._new
        if self._state == _S.ABORTING:
            return self._pending
        return frozenset()

    def _clear_locked(self):
        self._added.clear()
        self._pending.clear()
        self._new.clear()
        self._not_added.clear()
        self._add_unanswered.clear()
        self._offsets_added = False
        self._offsets_unfinished = False
        self._offsets_unanswered = None
        self._adds_done.notify_all()

    def _regate_locked(self):
        # COMMITTING or ABORTING, a record's refusal says whether the commit or abort
        # runs now (on another thread) or did not finish: it changes as one starts or
        # stops, not only with the state.
        if self._state in (_S.COMMITTING, _S.ABORTING):
            self._gate(self._record_refusal_locked())

    def _record_refusal_locked(self):
        """What a record sent now raises, as a callable making it; None IN_TRANSACTION."""
        if self._state == _S.IN_TRANSACTION:
            return None
        state = self._state
        error = self._error
        later = self._later_failures
        running = self._operation

        def refusal():
            # The one gate of send(), produce() and send_batch(): named for none of them.
            # Called under the accumulator's lock: it must not take this one.
            return _refusal(state, error, later, "a record", self.transactional_id,
                            running)

        return refusal

    def _refusal_locked(self, what):
        return _refusal(self._state, self._error, self._later_failures, what,
                        self.transactional_id)


def _refusal(state, error, later_failures, what, transactional_id, running=None):
    """The exception for `what` refused in `state` (error: the abortable or fatal one;
    running: the transactional call running on another thread, or None)."""
    if state == _S.FATAL_ERROR:
        return _fatal_again(error, f"{what} refused: the transactional producer "
                                   f"{transactional_id!r} failed for good earlier")
    if state == _S.ABORTABLE_ERROR:
        more = f" (and {later_failures} failures after it)" if later_failures else ""
        refused = TransactionAbortRequiredError(
            f"{what} refused: the transaction of {transactional_id!r} failed with "
            f"{error!r}{more}; call abort_transaction(), then begin a new one", error)
        refused.__cause__ = error
        return refused
    if running is not None and state in (_S.COMMITTING, _S.ABORTING):
        # Not "did not finish: call it again": the call is running now.
        return TransactionStateError(
            f"{what} while {running} runs on another thread: the transaction takes no "
            f"more records; begin the next one once it returns (transactional id "
            f"{transactional_id!r})")
    return TransactionStateError(f"{what} {_WRONG_STATE[state]} (transactional id "
                                 f"{transactional_id!r})")


def _fatal_again(error, context):
    """A fresh exception of the fatal error's class, caused by it: raising the one
    instance from every later call (and thread) would pile their tracebacks onto it."""
    if isinstance(error, BrokerError):
        again = errors.error_for_code(error.code, f"{context}: {error.message or error}")
    else:
        again = type(error)(f"{context}: {error}")
    again.__cause__ = error
    return again
