"""The transactional calls of a Producer, and the coordinator requests behind them.

    init_transactions()    the transaction coordinator (FindCoordinator) gives the
                           producer id and epoch for the transactional id
                           (InitProducerId); a transaction the id's previous producer
                           left open is aborted by the coordinator first
    begin_transaction()    records are taken from now on; the transaction uses
                           Transactions V2 if the coordinator's broker finalizes
                           transaction.version 2 (and transaction_version allows)
    send() and friends     each batch handed to the sender enrols its partition:
                           V1 -- the transaction thread adds the partitions enrolled
                           meanwhile with one AddPartitionsToTxn, and the sender holds
                           their batches back until it is answered; V2 -- the leader
                           adds the partition when the first batch arrives
    send_offsets_to_transaction()
                           V1: AddOffsetsToTxn, then TxnOffsetCommit (v4 at most) to
                           the group coordinator; V2: TxnOffsetCommit (v5+) alone
    commit_transaction()   records refused from now on; flush: every record acknowledged
                           or failed -- one failure and the commit fails (abortable);
                           EndTxn(commit) unless the transaction holds nothing; V2:
                           the answer's bumped epoch stamps the next transaction
    abort_transaction()    records refused; what was not sent yet fails
                           (TransactionAbortedError), what is in flight is waited for,
                           and so are partitions being added (V1); EndTxn(abort); the
                           next stamp: V2 from the answer, V1 from InitProducerId with
                           the current id and epoch if the transaction failed or left
                           holes in its sequences (else the sequences go on)
    close()                a commit that ran out of time goes on; a transaction open,
                           failed or aborting is aborted (as the Java client's close)
    a failure              a record that fails, or a refused request, fails the
                           transaction (or the producer): what is not sent yet fails
                           at once, as the Java client's abortUndrainedBatches

Every coordinator request is retried after retry_backoff_ms (doubling up to
retry_backoff_max_ms) while its answer is
retriable (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS -- after 20 ms, the
time the coordinator takes to write the last transaction's markers -- and the rest
the Java client retries); NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a lost
connection also make the coordinator be looked up again.  Other errors are
abortable or fatal as the Java client's tables say (ABORTABLE_* below).  The calls
are bounded by max_block_ms: a commit or abort that runs out of it raises
KafkaTimeoutError and can be called again to go on.

Threads: the transactional calls run on their caller's thread, one at a time (the
state machine's operation()).  The transaction thread ("netkafka-txn") sends
AddPartitionsToTxn.  enroll() and may_send() are the sender's (callers' and I/O
threads, the Sender's lock held); record_failed() is the accumulator's (any thread,
no lock held).  Fields are immutable after start() but _adds_wanted, guarded by
_wake, and _metrics, guarded by _metrics_lock; the state machine guards its own.
Lock order: the Sender's lock, then _wake (enroll()); _wake is never held while
another lock is taken.
"""
import collections
import functools
import logging
import threading
import time

from netkafka import errors
from netkafka.errors import (KafkaTimeoutError, ProducerFencedError, TransactionAbortedError,
                             UndeliveredRecordsError)
from netkafka.client.coordinator import Coordinators
from netkafka.client.own_threads import mark_own_thread
from netkafka.client.retry import ask_until
from netkafka.producer.offsets import consumer_group_metadata, offsets_to_commit
from netkafka.producer.transactions import TransactionState, TransactionStateMachine
from netkafka.protocol import find_coordinator
from netkafka.protocol.add_offsets_to_txn import (
    decode_add_offsets_to_txn_response, encode_add_offsets_to_txn_request,
)
from netkafka.protocol.add_partitions_to_txn import (
    decode_add_partitions_to_txn_response, encode_add_partitions_to_txn_request,
)
from netkafka.protocol.end_txn import (
    EPOCH_BUMP_VERSION, decode_end_txn_response, encode_end_txn_request,
)
from netkafka.protocol.framing import ApiKey
from netkafka.protocol.init_producer_id import (
    decode_init_producer_id_response, encode_init_producer_id_request,
)
from netkafka.protocol.txn_offset_commit import (
    LAST_V1_VERSION, decode_txn_offset_commit_response, encode_txn_offset_commit_request,
)

_log = logging.getLogger("netkafka.producer.transaction_manager")
_S = TransactionState

# Transactions V2 needs these versions (KIP-890): a Produce that adds its partition,
# an EndTxn that bumps the epoch, a TxnOffsetCommit that adds the group's offsets.
V2_PRODUCE_VERSION = 12
V1_PRODUCE_MAX_VERSION = V2_PRODUCE_VERSION - 1
V1_END_TXN_MAX_VERSION = EPOCH_BUMP_VERSION - 1
# The feature a cluster finalizes at 2 once its brokers run Transactions V2.
TRANSACTION_VERSION_FEATURE = "transaction.version"
# CONCURRENT_TRANSACTIONS is answered while the coordinator writes the markers of the
# previous transaction, a matter of milliseconds: asked again sooner than other
# retriable errors (the Java client's 20 ms).
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.02
_BACKOFF_S_BY_CODE = {
    errors.ConcurrentTransactionsError.code: CONCURRENT_TRANSACTIONS_BACKOFF_S}

# Answers that fail the transaction but not the producer, per request (the Java
# client's); every other error that is not retriable is fatal.
_PRODUCER_ID_GONE_ERRORS = (errors.UnknownProducerIdError, errors.InvalidProducerIdMappingError)
_PRODUCER_ID_GONE = tuple(error.code for error in _PRODUCER_ID_GONE_ERRORS)
ABORTABLE_ADD_PARTITIONS = frozenset((errors.TopicAuthorizationFailedError.code,
                                      errors.TransactionAbortableError.code,
                                      *_PRODUCER_ID_GONE))
ABORTABLE_ADD_OFFSETS = frozenset((errors.GroupAuthorizationFailedError.code,
                                   errors.TransactionAbortableError.code, *_PRODUCER_ID_GONE))
ABORTABLE_TXN_OFFSET_COMMIT = frozenset((errors.GroupAuthorizationFailedError.code,
                                         errors.TransactionAbortableError.code,
                                         errors.FencedInstanceIdError.code,
                                         errors.UnknownMemberIdError.code,
                                         errors.IllegalGenerationError.code))
ABORTABLE_END_TXN = frozenset((errors.TransactionAbortableError.code, *_PRODUCER_ID_GONE))

# The longest close() waits for the transaction thread to stop.
_THREAD_STOP_S = 5.0

# What send() and friends raise that does not fail the open transaction: a bad argument
# or a call refused as a whole (closed, no transaction open, the transaction failed
# already) -- the Java client's IllegalArgumentException, SerializationException and
# IllegalStateException, which are no ApiExceptions.  A partition the topic lacks is
# no such argument (NoSuchPartitionError): the Java client waits for it and fails the
# record with a TimeoutException, which fails the transaction.  (produce() does not
# raise what it counts, so whatever it counts fails the transaction: the accumulator's
# count_untracked_failure.)
_NOT_A_RECORD_FAILURE = (errors.IllegalArgumentError, errors.SerializationError,
                         errors.IllegalStateError, errors.TransactionAbortRequiredError)


class TransactionManager:
    """A transactional producer's transactions.

    Args:
        transactional_id: the producer's transactional id.
        transaction_timeout_ms: how long the coordinator lets a transaction stay open
            before aborting it.
        transaction_version: None (V2 where the cluster has it) or 1 (always V1).
        pool, metadata: the producer's IOPool and Metadata.
        producer_ids: the TransactionalProducerIds stamping the batches.
        retry_backoff, max_block_ms, delivery_timeout_ms: the producer's settings
            (retry_backoff: a RetryBackoff of retry_backoff_ms and its max)
            (the bound of each transactional call is max_block_ms; adding partitions
            is retried for up to delivery_timeout_ms, their batches' own bound).
    """

    def __init__(self, transactional_id, transaction_timeout_ms, transaction_version, pool,
                 metadata, producer_ids, *, retry_backoff, max_block_ms,
                 delivery_timeout_ms):
        self.transactional_id = transactional_id  # immutable
        self._transaction_timeout_ms = transaction_timeout_ms  # immutable
        self._v2_allowed = transaction_version is None  # immutable
        self._producer_ids = producer_ids  # immutable; thread-safe
        self._coordinators = Coordinators(pool, metadata, retry_backoff)  # thread-safe
        self._retry_backoff = retry_backoff  # immutable
        self._max_block_s = max_block_ms / 1000  # immutable
        self._delivery_timeout_s = delivery_timeout_ms / 1000  # immutable
        self._closing = threading.Event()  # set by close(): retries stop waiting
        self._wake = threading.Condition(threading.Lock())
        self._adds_wanted = False  # guarded by _wake: enroll() found a new partition
        self._metrics_lock = threading.Lock()
        self._metrics = collections.Counter()  # guarded by _metrics_lock: see metrics()
        # The last V2 decision (_v2_now); only begin_transaction() touches it, and
        # transactional calls run one at a time.  V1 until a handshake says more.
        self._v2_last = False
        # Set once by start(), before any record can be sent.
        self.states = None
        self._sender = None
        self._accumulator = None
        self._thread = None

    def start(self, sender, accumulator):
        """Joins the sender and the accumulator (which refuses records from now on,
        until begin_transaction()) and starts the transaction thread."""
        self._sender = sender
        self._accumulator = accumulator
        self.states = TransactionStateMachine(self.transactional_id, accumulator.set_refusal)
        self._thread = threading.Thread(target=self._run, name="netkafka-txn", daemon=True)
        self._thread.start()

    def close(self, timeout_s=None):
        """Stops the transaction thread (an open transaction is left to the
        coordinator, which aborts it after transaction_timeout_ms), waiting for it up to
        timeout_s (None: _THREAD_STOP_S), never longer than _THREAD_STOP_S: it may be
        inside a coordinator request, which the pool's close() ends."""
        self._closing.set()
        with self._wake:
            self._wake.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(_THREAD_STOP_S if timeout_s is None
                              else min(timeout_s, _THREAD_STOP_S))

    # ------------------------------------------------------------------
    # The transactional calls (a caller's thread).

    def init_transactions(self):
        """InitProducerId for the transactional id: the producer id and epoch, once the
        coordinator has aborted a transaction the id's previous producer left open.

        Raises:
            TransactionStateError: called twice.
            KafkaTimeoutError: not done within max_block_ms (call again to go on).
            the fatal error (ProducerFencedError, TransactionalIdAuthorizationFailedError,
                InvalidTransactionTimeoutError, ...): the producer cannot go on.
        """
        states = self.states
        with states.operation("init_transactions()"):
            states.check_init()
            deadline = time.monotonic() + self._max_block_s
            stamp = self._init_producer_id(None, deadline)
            self._producer_ids.install(*stamp)
            states.initialized()

    def begin_transaction(self):
        """Opens a transaction: records are taken until commit or abort."""
        with self.states.operation("begin_transaction()"):
            self.states.check("begin_transaction()", _S.READY)
            self.states.begin(self._v2_now())

    def send_offsets_to_transaction(self, offsets, group):
        """Commits the consumer group's offsets as part of the open transaction (see
        offsets.py for the shapes of offsets and group).

        Raises:
            TypeError, ValueError: offsets or group are not what they should be (named).
            TransactionStateError: no transaction open.
            TransactionAbortRequiredError: the transaction failed earlier.
            KafkaTimeoutError: not done within max_block_ms (the transaction goes on:
                call again, or abort; a commit is refused until a call goes through).
            BrokerError: the coordinator refused (the transaction is abortable, or the
                producer fenced: see the state).
        """
        by_topic = offsets_to_commit(offsets)
        group = consumer_group_metadata(group)
        states = self.states
        with states.operation("send_offsets_to_transaction()"):
            states.check("send_offsets_to_transaction()", _S.IN_TRANSACTION)
            if not by_topic:
                return
            states.offsets_sending(True)
            deadline = time.monotonic() + self._max_block_s
            v2 = states.v2
            producer_id, epoch = self._producer_ids.stamp()
            txn_id = self.transactional_id
            if v2:
                # The group coordinator adds the offsets to the transaction as it
                # takes them: an answer lost on the way leaves them in, maybe.
                states.offsets_added()
            else:
                self._add_offsets(group.group_id, deadline)
            self._call(
                "TxnOffsetCommit", find_coordinator.GROUP, group.group_id,
                ApiKey.TXN_OFFSET_COMMIT,
                lambda cid, client_id, version: encode_txn_offset_commit_request(
                    cid, client_id, version, txn_id, group, producer_id, epoch, by_topic),
                decode_txn_offset_commit_response,
                functools.partial(_partition_error, {(topic, entry.partition)
                                                     for topic, entries in by_topic.items()
                                                     for entry in entries}),
                ABORTABLE_TXN_OFFSET_COMMIT, deadline,
                max_version=None if v2 else LAST_V1_VERSION)
            states.offsets_sending(False)

    def _add_offsets(self, group_id, deadline):
        """V1: AddOffsetsToTxn, the group's offsets into the open transaction.  Until it
        is answered the coordinator may have added them (an answer lost, or not in
        time): an abort then asks again before it ends the transaction."""
        states = self.states
        producer_id, epoch = self._producer_ids.stamp()
        txn_id = self.transactional_id
        states.offsets_asked(group_id)
        try:
            self._call(
                "AddOffsetsToTxn", find_coordinator.TRANSACTION, txn_id,
                ApiKey.ADD_OFFSETS_TO_TXN,
                lambda cid, client_id, version: encode_add_offsets_to_txn_request(
                    cid, client_id, version, txn_id, producer_id, epoch, group_id),
                decode_add_offsets_to_txn_response, _top_level_error,
                ABORTABLE_ADD_OFFSETS, deadline)
        except errors.BrokerError:
            states.offsets_asked(None)  # refused: not added
            raise
        states.offsets_added()

    def commit_transaction(self):
        """Flushes, then commits the open transaction.

        Raises:
            TransactionStateError: no transaction open, or send_offsets_to_transaction()
                did not finish.
            TransactionAbortRequiredError: a record (or a request) of the transaction
                failed: abort it.
            KafkaTimeoutError: not done within max_block_ms (call again to go on).
            the fatal error: the producer cannot go on.
        """
        self._commit(self._max_block_s)

    def _commit(self, timeout_s):
        states = self.states
        with states.operation("commit_transaction()"):
            states.start_commit()
            deadline = time.monotonic() + timeout_s
            try:
                self._accumulator.flush(self._remaining_s(deadline))
            except UndeliveredRecordsError:
                pass  # each failure has made the transaction abortable: raised below
            states.wait_for_adds(self._remaining_s(deadline))
            states.check("commit_transaction()", _S.COMMITTING)
            if states.needs_end_txn:
                self._end_transaction(True, deadline)
            states.completed("commit_transaction()")
            self._count(transactions_committed=1)

    def abort_transaction(self):
        """Aborts the open (or failed) transaction: records not sent yet fail with
        TransactionAbortedError; read_committed consumers never see any of it.

        Raises:
            TransactionStateError: no transaction open, or a commit under way.
            KafkaTimeoutError: not done within max_block_ms (call again to go on).
            the fatal error: the producer cannot go on (fenced, ...).
        """
        self._abort(self._max_block_s)

    def end_for_close(self, timeout_s):
        """close(): ends a transaction left open as the Java client's close() does,
        within timeout_s (None: max_block_ms, its bound in any case): a commit that
        did not finish (it ran out of max_block_ms) goes on, and aborts if it fails;
        a transaction open, failed, or whose abort did not finish is aborted.  Left
        to the coordinator instead, it would stay open until transaction_timeout_ms,
        and read_committed consumers of its partitions would stop before its first
        record until then; its records not sent yet would be flushed into it for
        nothing.  Nothing is raised: a failure is logged, and the coordinator aborts
        the transaction when it times out.  A call running on another thread is waited
        for first, within the same bound, as the Java client's close() lets a commit
        under way finish: shutting the I/O threads under it, a commit whose EndTxn the
        coordinator took would fail, told "the producer closed"."""
        deadline = time.monotonic() + (self._max_block_s if timeout_s is None
                                       else min(timeout_s, self._max_block_s))
        running = self.states.wait_until_idle(self._remaining_s(deadline))
        state = self.states.state
        if state not in (_S.IN_TRANSACTION, _S.ABORTABLE_ERROR, _S.ABORTING, _S.COMMITTING):
            return
        if running is not None:
            # Not "not ended, the coordinator aborts it": that call may well end it.
            _log.info("transaction %r: %s runs on another thread at close(), which "
                      "leaves the transaction to it", self.transactional_id, running)
            return
        try:
            if state == _S.COMMITTING:
                _log.info("transaction %r: finishing its commit at close()",
                          self.transactional_id)
                try:
                    self._commit(self._remaining_s(deadline))
                    return
                except errors.TransactionAbortRequiredError:
                    pass  # its records failed meanwhile: aborted below
            else:
                _log.info("transaction %r still open at close(): aborting it",
                          self.transactional_id)
            self._abort(self._remaining_s(deadline))
        except errors.KafkaError as exc:
            _log.warning("transaction %r not ended at close(), the coordinator aborts it "
                         "after transaction_timeout_ms: %r", self.transactional_id, exc)

    def _abort(self, timeout_s):
        states = self.states
        with states.operation("abort_transaction()"):
            states.start_abort()
            deadline = time.monotonic() + timeout_s
            discarded = TransactionAbortedError(
                f"the transaction of {self.transactional_id!r} was aborted before the "
                f"record was sent")
            self._accumulator.fail_incomplete(discarded)
            self._sender.discard_unsent(discarded)
            try:
                # Only batches in flight are left: wait for their answers.
                self._accumulator.flush(self._remaining_s(deadline))
            except UndeliveredRecordsError:
                pass  # records of the aborted transaction: thrown away on purpose
            states.wait_for_adds(self._remaining_s(deadline))
            group_id = states.offsets_unanswered
            if group_id is not None:
                # Its AddOffsetsToTxn may have opened the transaction at the coordinator,
                # with nothing else in it: ended without EndTxn, the transaction would
                # stay open there until it timed out, and the next one would join it.
                # Asked again, as the Java client's abort waits for it: added for sure
                # (or refused), and EndTxn below ends what it opened.
                try:
                    self._add_offsets(group_id, deadline)
                except errors.BrokerError as exc:
                    if exc.code not in ABORTABLE_ADD_OFFSETS:
                        raise  # fatal: the state machine was told
            unanswered = states.adds_unanswered
            if unanswered:
                # So may an AddPartitionsToTxn have: without EndTxn, the InitProducerId
                # below found the transaction ongoing, the coordinator fenced the epoch
                # and this producer was fenced for good (Kafka 3.9, V1).  Asked again,
                # as the Java client never stops asking: added for sure (or refused).
                try:
                    self._ask_add_partitions(unanswered, deadline)
                except errors.BrokerError as exc:
                    if exc.code not in ABORTABLE_ADD_PARTITIONS:
                        raise  # fatal: the state machine was told
                else:
                    states.partitions_added(unanswered)
            error = states.error
            ended = False
            # EndTxn is refused for a producer id the coordinator no longer maps to
            # the transactional id: InitProducerId below maps one again.
            if states.needs_end_txn and not isinstance(error,
                                                       errors.InvalidProducerIdMappingError):
                self._end_transaction(False, deadline)
                ended = True
            if states.v2:
                # The EndTxn answer was the next epoch; without EndTxn, a producer id
                # the coordinator lost needs one.
                bump = not ended and (states.partitions_enrolled
                                      or isinstance(error, _PRODUCER_ID_GONE_ERRORS))
            else:
                # As the Java client's V1 abort: after a failure (an abortable error),
                # and wherever a batch failed for good and left a hole in its
                # partition's sequences (an abort fails the batches it did not send,
                # numbered already) -- the next epoch starts every partition at 0.  An
                # abort of batches all acknowledged leaves the sequences to go on.
                bump = error is not None or self._producer_ids.has_holes
            if bump:
                self._producer_ids.install(
                    *self._init_producer_id(self._producer_ids.stamp(), deadline))
            states.completed("abort_transaction()")
            self._count(transactions_aborted=1)

    def metrics(self):
        """Counters: transactions_committed, transactions_aborted (EndTxn answered, or
        nothing to end), transaction_partitions_added and
        transaction_add_partitions_requests (Transactions V1: partitions the coordinator
        added, and the AddPartitionsToTxn requests that did it)."""
        with self._metrics_lock:
            counts = dict(self._metrics)
        for key in ("transactions_committed", "transactions_aborted",
                    "transaction_partitions_added", "transaction_add_partitions_requests"):
            counts.setdefault(key, 0)
        return counts

    def _count(self, **increments):
        with self._metrics_lock:
            self._metrics.update(increments)

    # ------------------------------------------------------------------
    # The sender and the accumulator.

    def enroll(self, topic, partition):
        """Sender.send(): a batch of (topic, partition) joins the transaction.

        Raises (the batch fails): what a record sent now raises, unless a transaction
            is open or committing."""
        if self.states.enroll(topic, partition):
            with self._wake:
                self._adds_wanted = True
                self._wake.notify()

    def may_send(self, topic, partition):
        """Sender.next_request(): whether the partition's batches may go out now."""
        return self.states.may_send(topic, partition)

    @property
    def produce_max_version(self):
        """The highest Produce version the open transaction may use: V1 must not send
        v12+, which would ask the leader to add the partition (V2); None for any."""
        return None if self.states.v2 else V1_PRODUCE_MAX_VERSION

    @property
    def discarding(self):
        """Sender: a batch answered with a retriable error is not sent again (the
        transaction is being aborted, or the producer cannot go on)."""
        return self.states.state in (_S.ABORTING, _S.FATAL_ERROR)

    def record_failed(self, error):
        """The accumulator: a record (or a batch) failed with error."""
        if self.states.record_failed(error):
            self._discard_unsent()

    def append_failed(self, error):
        """The accumulator, or send_batch(): send(), produce() or send_batch() raised
        error, the record not taken.  As the Java client's send() (KafkaProducer.doSend:
        each of its ApiExceptions fails the transaction), a failure of the record --
        no metadata or no memory within max_block_ms, too large, a topic refused --
        fails the open transaction, which committed would lack the record: a caller
        that let the exception go would not lose the record silently.  So does a
        partition the topic lacks; another bad argument or a refused call
        (_NOT_A_RECORD_FAILURE) leaves the transaction as it is."""
        if isinstance(error, errors.KafkaError) and (
                isinstance(error, errors.NoSuchPartitionError)
                or not isinstance(error, _NOT_A_RECORD_FAILURE)):
            self.record_failed(error)

    def failed_with(self, error):
        """Whether error is the failure of the transaction (or of the producer)."""
        return self.states.error is error

    def _discard_unsent(self):
        """The transaction (or the producer) has just failed: what is not sent yet
        cannot commit, so it fails now (as the Java client's abortUndrainedBatches)
        instead of going out for nothing or -- behind a sequence hole that only the
        abort's new epoch closes -- waiting for its delivery timeout; a commit waiting
        for it fails at once."""
        refusal = self.states.refusal("sending the record")
        if refusal is not None:
            self._accumulator.fail_incomplete(refusal)
            self._sender.discard_unsent(refusal)

    # ------------------------------------------------------------------
    # The transaction thread.

    def _run(self):
        mark_own_thread()
        while True:
            with self._wake:
                while not self._adds_wanted and not self._closing.is_set():
                    self._wake.wait()
                if self._closing.is_set():
                    return
                self._adds_wanted = False
            keys = self.states.take_partitions_to_add()
            if keys:
                self._add_partitions(keys)

    def _add_partitions(self, keys):
        try:
            self._ask_add_partitions(keys, time.monotonic() + self._delivery_timeout_s)
        except KafkaTimeoutError as exc:
            # Asked for as long as the partitions' batches may wait: the transaction
            # fails with them.  The coordinator may have added them all the same:
            # the abort asks again.
            self.states.partitions_not_added(keys, unanswered=True)
            if self.states.abortable(exc):
                self._discard_unsent()
            return
        except errors.KafkaError:
            # _call has failed the transaction (or the producer), and with it the
            # partitions' batches.
            self.states.partitions_not_added(keys)
            return
        self.states.partitions_added(keys)
        self._sender.wake_leaders(keys)

    def _ask_add_partitions(self, keys, deadline):
        """AddPartitionsToTxn of keys (topic, partition), answered by deadline."""
        by_topic = {}
        for topic, partition in keys:
            by_topic.setdefault(topic, []).append(partition)
        producer_id, epoch = self._producer_ids.stamp()
        txn_id = self.transactional_id
        self._call(
            "AddPartitionsToTxn", find_coordinator.TRANSACTION, txn_id,
            ApiKey.ADD_PARTITIONS_TO_TXN,
            lambda cid, client_id, version: encode_add_partitions_to_txn_request(
                cid, client_id, version, txn_id, producer_id, epoch, by_topic),
            decode_add_partitions_to_txn_response,
            functools.partial(_partition_error, set(keys)),
            ABORTABLE_ADD_PARTITIONS, deadline)
        self._count(transaction_partitions_added=len(keys),
                    transaction_add_partitions_requests=1)

    # ------------------------------------------------------------------
    # Coordinator requests (a caller's thread or the transaction thread).

    def _init_producer_id(self, current, deadline):
        """(producer id, epoch) from InitProducerId; current: the stamp to bump (v3+),
        or None for a first one."""
        producer_id, epoch = current or (-1, -1)
        txn_id, timeout_ms = self.transactional_id, self._transaction_timeout_ms
        response = self._call(
            "InitProducerId", find_coordinator.TRANSACTION, txn_id, ApiKey.INIT_PRODUCER_ID,
            lambda cid, client_id, version: encode_init_producer_id_request(
                cid, client_id, version, txn_id, timeout_ms, producer_id, epoch),
            decode_init_producer_id_response, _top_level_error, frozenset(), deadline)
        self._require_producer_id(response, f"InitProducerId for {txn_id!r}")
        return response.producer_id, response.producer_epoch

    def _end_transaction(self, committed, deadline):
        """EndTxn; with V2 the answer's producer id and epoch stamp the next transaction."""
        v2 = self.states.v2
        producer_id, epoch = self._producer_ids.stamp()
        txn_id = self.transactional_id
        response = self._call(
            f"EndTxn({'commit' if committed else 'abort'})", find_coordinator.TRANSACTION,
            txn_id, ApiKey.END_TXN,
            lambda cid, client_id, version: encode_end_txn_request(
                cid, client_id, version, txn_id, producer_id, epoch, committed),
            decode_end_txn_response, _top_level_error, ABORTABLE_END_TXN, deadline,
            max_version=None if v2 else V1_END_TXN_MAX_VERSION)
        if v2:
            # The answer's id and epoch stamp the next transaction.
            self._require_producer_id(response, f"EndTxn v{EPOCH_BUMP_VERSION}+ for {txn_id!r}")
            self._producer_ids.install(response.producer_id, response.producer_epoch)

    def _require_producer_id(self, response, what):
        """Fails the producer for good when an answer without an error carries no producer
        id or epoch (-1 is none): transactional batches cannot be stamped without them."""
        if response.producer_id < 0 or response.producer_epoch < 0:
            error = errors.ProtocolError(
                f"{what} answered no error but producer id {response.producer_id}, "
                f"epoch {response.producer_epoch}")
            self.states.fatal(error)
            raise error

    def _call(self, what, key_type, key, api_key, encode, decode, error_of, abortable,
              deadline, max_version=None):
        """Sends a request to the coordinator of key until it is answered without a
        retriable error, and returns the answer.

        encode(correlation_id, client_id, version) frames it; error_of(response,
        where) is the answer's error (a BrokerError, its message saying where it came
        from) or None.

        Raises:
            KafkaTimeoutError: only retriable answers (or none) before deadline.
            ProducerFencedError, or the error answered: not retriable; the transaction
                is abortable (codes in abortable) or the producer failed for good
                (the state machine is told first).
        """
        def attempt(remaining_s):
            try:
                return self._coordinators.request(
                    key_type, key, deadline, remaining_s, what, api_key, encode, decode,
                    error_of, max_api_version=max_version)
            except errors.KafkaError as exc:
                if not exc.retriable:
                    raise self._failed(exc, abortable)
                _log.debug("%s for %r: %r, asked again", what, self.transactional_id, exc)
                raise

        asked = f"{what} for transactional id {self.transactional_id!r}"
        return ask_until(deadline, f"{asked}: no answer in time", attempt, self._retry_backoff,
                         last_error_after="; ", stop=self._closing,
                         stopped=f"{asked}: the producer closed",
                         backoff_s_by_code=_BACKOFF_S_BY_CODE)

    def _failed(self, error, abortable):
        """error, a request's final failure (not retriable), told to the state machine:
        the transaction fails if its code is in abortable, else the producer does (the
        Java client's rule: an answer it does not expect is fatal).  Returns the
        exception to raise."""
        code = getattr(error, "code", None)
        if code in abortable:
            if self.states.abortable(error):
                self._discard_unsent()
            return error
        if code == errors.InvalidProducerEpochError.code:
            # From a coordinator (not a partition leader): a newer producer with this
            # transactional id, or a coordinator that timed the transaction out,
            # bumped the epoch past this producer's.
            fenced = ProducerFencedError(
                f"{self.transactional_id!r}: a newer producer with this transactional id "
                f"took over, or the coordinator aborted the transaction when it timed out "
                f"({error})")
            fenced.__cause__ = error
            error = fenced
        elif code == errors.TransactionalIdAuthorizationFailedError.code:
            # Say which permission: the code alone does not (FindCoordinator needs
            # Describe on the id, the other requests Write, which implies Describe).
            denied = errors.TransactionalIdAuthorizationFailedError(
                f"{error.message}: this principal needs Write on the TransactionalId "
                f"resource {self.transactional_id!r}")
            denied.__cause__ = error
            error = denied
        if self.states.fatal(error):
            self._discard_unsent()
        return error

    def _v2_now(self):
        """Whether a transaction begun now uses Transactions V2: allowed, and the
        coordinator's broker (as its last handshake told, no request made here)
        finalizes transaction.version 2 and speaks the versions V2 needs.  A
        coordinator not known now (it moved; the next request finds it) leaves the
        last answer standing."""
        if not self._v2_allowed:
            return False
        conn = self._coordinators.known(find_coordinator.TRANSACTION, self.transactional_id)
        features = None if conn is None else conn.finalized_features
        versions = None if conn is None else conn.api_versions
        if features is not None and versions is not None:
            self._v2_last = (features.get(TRANSACTION_VERSION_FEATURE, 0) >= 2
                             and versions.get(ApiKey.PRODUCE, 0) >= V2_PRODUCE_VERSION
                             and versions.get(ApiKey.END_TXN, 0) >= EPOCH_BUMP_VERSION)
        return self._v2_last

    @staticmethod
    def _remaining_s(deadline):
        return max(0.0, deadline - time.monotonic())


def _top_level_error(response, where):
    if response.error_code == errors.NO_ERROR:
        return None
    return errors.error_for_code(response.error_code, where)


def _partition_error(asked, response, where):
    """The error to act on among the answer's partitions of asked ((topic, partition)
    pairs; others are none of this request's): one that is not retriable first
    (OPERATION_NOT_ATTEMPTED only comes with another), else a retriable one.  An
    answer missing a partition of asked is a ProtocolError: taken as done, a partition
    never added would get no transaction marker, or an offset never committed would
    count as committed with the transaction."""
    missing = asked - response.errors.keys()
    if missing:
        return errors.ProtocolError(f"{where}: no answer for {sorted(missing)}")
    failed = {}
    for (topic, partition), code in response.errors.items():
        if (code not in (errors.NO_ERROR, errors.OperationNotAttemptedError.code)
                and (topic, partition) in asked):
            failed.setdefault(code, []).append(f"{topic}-{partition}")
    if not failed:
        return None
    chosen = [errors.error_for_code(code, f"{where}: {', '.join(names)}")
              for code, names in sorted(failed.items())]
    chosen.sort(key=lambda error: error.retriable)
    return chosen[0]
