"""The transaction state machine on its own (netkafka/producer/transactions.py): every
move of the Java client's table that a call or a failure makes, the error each call
raises in each state it is refused in, the gate send() is checked by, and the
partitions of a transaction as the sender and the AddPartitionsToTxn thread see them.

The state machine holds no connection: these tests need no broker.  The same moves
against real brokers are in test_transactions_broker.py.
"""
import re
import threading
import time

import pytest

from netkafka.errors import (InvalidRecordError, KafkaTimeoutError, NotEnoughReplicasError,
                             ProducerFencedError, TopicAuthorizationFailedError,
                             TransactionAbortRequiredError,
                             TransactionalIdAuthorizationFailedError, TransactionStateError)
from netkafka.producer.transactions import TransactionState, TransactionStateMachine

S = TransactionState


class Gate:
    """Records what the state machine tells the accumulator's gate."""

    def __init__(self):
        self.refusals = []

    def __call__(self, refusal):
        self.refusals.append(refusal)

    def raises(self):
        """The exception a record sent now gets, or None if records are taken."""
        refusal = self.refusals[-1]
        return None if refusal is None else refusal()


def machine(state=S.UNINITIALIZED, v2=False):
    """A state machine and its gate, moved to `state` by the calls that lead there."""
    gate = Gate()
    txn = TransactionStateMachine("txn-1", gate)
    if state == S.UNINITIALIZED:
        return txn, gate
    txn.initialized()
    if state == S.READY:
        return txn, gate
    txn.begin(v2)
    if state == S.COMMITTING:
        txn.start_commit()
    elif state == S.ABORTING:
        txn.start_abort()
    elif state == S.ABORTABLE_ERROR:
        txn.record_failed(InvalidRecordError("first"))
    elif state == S.FATAL_ERROR:
        txn.record_failed(ProducerFencedError("fenced by a newer producer"))
    assert txn.state == state
    return txn, gate


def test_commit_and_abort_go_back_to_ready():
    txn, gate = machine()
    assert isinstance(gate.raises(), TransactionStateError)
    assert "before init_transactions()" in str(gate.raises())
    txn.initialized()
    assert txn.state == S.READY
    assert "call begin_transaction() first" in str(gate.raises())
    txn.begin(v2=False)
    assert txn.state == S.IN_TRANSACTION
    assert gate.raises() is None
    txn.start_commit()
    assert txn.state == S.COMMITTING
    assert "while the transaction commits" in str(gate.raises())
    txn.completed("commit_transaction()")
    assert txn.state == S.READY
    txn.begin(v2=True)
    assert txn.v2
    txn.start_abort()
    assert txn.state == S.ABORTING
    assert "while the transaction aborts" in str(gate.raises())
    txn.completed("abort_transaction()")
    assert txn.state == S.READY


def test_an_abortable_error_allows_only_abort():
    txn, gate = machine(S.IN_TRANSACTION)
    cause = InvalidRecordError("a null key on a compacted topic")
    txn.record_failed(cause)
    assert txn.state == S.ABORTABLE_ERROR
    assert txn.error is cause
    for call in (txn.start_commit, lambda: txn.check("send_offsets_to_transaction()",
                                                     S.IN_TRANSACTION),
                 lambda: txn.begin(v2=False)):
        with pytest.raises(TransactionAbortRequiredError) as raised:
            call()
        assert raised.value.cause is cause
        assert raised.value.__cause__ is cause
        assert "call abort_transaction()" in str(raised.value)
    refused = gate.raises()
    assert isinstance(refused, TransactionAbortRequiredError) and refused.cause is cause
    txn.start_abort()
    txn.completed("abort_transaction()")
    assert txn.state == S.READY
    assert txn.error is None
    txn.begin(v2=False)
    assert gate.raises() is None


def test_refusal_is_what_a_batch_thrown_away_gets():
    txn, _ = machine(S.IN_TRANSACTION)
    assert txn.refusal("sending the record") is None
    cause = InvalidRecordError("x")
    assert txn.record_failed(cause) is True  # moved now: the caller discards
    assert txn.record_failed(InvalidRecordError("y")) is False
    refused = txn.refusal("sending the record")
    assert isinstance(refused, TransactionAbortRequiredError) and refused.cause is cause
    assert "sending the record refused" in str(refused)


def test_the_first_failure_is_kept_and_later_ones_counted():
    txn, _ = machine(S.IN_TRANSACTION)
    first = NotEnoughReplicasError("first")
    txn.record_failed(first)
    txn.record_failed(NotEnoughReplicasError("second"))
    txn.abortable(InvalidRecordError("third"))
    assert txn.error is first
    with pytest.raises(TransactionAbortRequiredError, match="and 2 failures after it"):
        txn.start_commit()


def test_the_same_failure_told_twice_counts_once():
    """A refused append is told as it leaves the accumulator's cold path, and again when
    produce() counts it: one failure, not a second one after it."""
    for failure in (NotEnoughReplicasError("once"), ProducerFencedError("fenced once")):
        txn, _ = machine(S.IN_TRANSACTION)
        assert txn.record_failed(failure)
        assert not txn.record_failed(failure)
        with pytest.raises(Exception) as refused:
            txn.start_commit()
        assert refused.value.__cause__ is failure
        assert "after it" not in str(refused.value)


def test_a_commit_whose_records_fail_cannot_complete():
    txn, _ = machine(S.COMMITTING)
    cause = NotEnoughReplicasError("flush found a failed batch")
    txn.record_failed(cause)
    assert txn.state == S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortRequiredError) as raised:
        txn.completed("commit_transaction()")
    assert "commit_transaction() refused" in str(raised.value)
    assert raised.value.cause is cause
    txn.start_abort()
    txn.completed("abort_transaction()")
    assert txn.state == S.READY


@pytest.mark.parametrize("state", [S.ABORTING, S.READY, S.UNINITIALIZED])
def test_abortable_errors_outside_an_open_transaction_are_ignored(state):
    txn, _ = machine(state)
    txn.record_failed(NotEnoughReplicasError("a batch of the aborted transaction"))
    assert txn.state == state
    assert txn.error is None


@pytest.mark.parametrize("state", [s for s in S if s != S.FATAL_ERROR])
def test_a_fatal_error_is_for_good_and_raised_afresh_by_every_call(state):
    txn, gate = machine(state)
    fenced = ProducerFencedError("a newer producer took the transactional id over")
    txn.fatal(fenced)
    assert txn.state == S.FATAL_ERROR
    raised = []
    for call in (txn.start_commit, txn.start_abort, lambda: txn.begin(v2=False),
                 lambda: txn.check("init_transactions()", S.UNINITIALIZED),
                 lambda: txn.enroll("t", 0)):
        with pytest.raises(ProducerFencedError) as error:
            call()
        assert error.value.__cause__ is fenced
        assert "failed for good earlier" in str(error.value)
        raised.append(error.value)
    assert len({id(e) for e in raised}) == len(raised), "one instance raised twice"
    assert isinstance(gate.raises(), ProducerFencedError)
    txn.fatal(TransactionalIdAuthorizationFailedError("later"))
    assert txn.error is fenced


def test_fatal_and_abortable_failures_of_records_are_told_apart():
    txn, _ = machine(S.IN_TRANSACTION)
    txn.record_failed(TopicAuthorizationFailedError("not this topic"))
    assert txn.state == S.ABORTABLE_ERROR  # the producer can abort and go on
    txn.record_failed(TransactionalIdAuthorizationFailedError("not this id"))
    assert txn.state == S.FATAL_ERROR


@pytest.mark.parametrize("state, call, message", [
    (S.UNINITIALIZED, "begin", "before init_transactions()"),
    (S.IN_TRANSACTION, "begin", "while a transaction is open"),
    (S.COMMITTING, "begin", "commit_transaction() did not finish: call it again"),
    (S.ABORTING, "begin", "abort_transaction() did not finish: call it again"),
    (S.UNINITIALIZED, "start_commit", "before init_transactions()"),
    (S.READY, "start_commit", "with no transaction open"),
    (S.ABORTING, "start_commit", "while the transaction aborts"),
    (S.READY, "start_abort", "with no transaction open"),
    (S.COMMITTING, "start_abort", "while the transaction commits"),
    (S.READY, "initialized", "no move from ready to ready"),
])
def test_calls_in_the_wrong_state_say_why(state, call, message):
    txn, _ = machine(state)
    method = getattr(txn, call)
    with pytest.raises(TransactionStateError, match=re.escape(message)) as raised:
        method(False) if call == "begin" else method()
    assert "'txn-1'" in str(raised.value)
    assert txn.state == state


@pytest.mark.parametrize("state", [S.READY, S.IN_TRANSACTION, S.COMMITTING])
def test_init_transactions_twice_says_so(state):
    txn, _ = machine(state)
    with pytest.raises(TransactionStateError, match=r"init_transactions\(\) called again"):
        txn.check_init()


def test_init_transactions_after_a_fatal_error_raises_it():
    txn, _ = machine(S.FATAL_ERROR)
    with pytest.raises(ProducerFencedError):
        txn.check_init()


def test_a_commit_or_abort_that_did_not_finish_goes_on():
    txn, _ = machine(S.COMMITTING)
    txn.start_commit()
    assert txn.state == S.COMMITTING
    txn, _ = machine(S.ABORTING)
    txn.start_abort()
    assert txn.state == S.ABORTING


def test_transactional_calls_go_one_at_a_time():
    txn, _ = machine(S.IN_TRANSACTION)
    inside, leave = threading.Event(), threading.Event()

    def commit():
        with txn.operation("commit_transaction()"):
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=commit)
    thread.start()
    try:
        assert inside.wait(10)
        with pytest.raises(TransactionStateError,
                           match=r"abort_transaction\(\) while commit_transaction\(\) runs"):
            with txn.operation("abort_transaction()"):
                pass
    finally:
        leave.set()
        thread.join(10)
    with txn.operation("abort_transaction()"):
        txn.start_abort()
    assert txn.state == S.ABORTING


@pytest.mark.parametrize("call, start", [("commit_transaction()", "start_commit"),
                                         ("abort_transaction()", "start_abort")])
def test_a_record_sent_while_another_thread_commits_or_aborts_is_told_so(call, start):
    """A record sent while another thread's commit (abort) ran was told "while the
    transaction commits (commit_transaction() did not finish: call it again)": true
    only once that call ran out of time.  It names the running call now."""
    txn, gate = machine(S.IN_TRANSACTION)
    inside, leave = threading.Event(), threading.Event()

    def run():
        with txn.operation(call):
            getattr(txn, start)()
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert inside.wait(10)
        refused = gate.raises()
        assert isinstance(refused, TransactionStateError)
        assert str(refused) == (f"a record while {call} runs on another thread: the "
                                f"transaction takes no more records; begin the next one "
                                f"once it returns (transactional id 'txn-1')")
    finally:
        leave.set()
        thread.join(10)
    # The call returned without finishing (its timeout ran out, say): call it again.
    assert f"{call} did not finish: call it again" in str(gate.raises())


def test_v1_partitions_go_out_once_the_coordinator_added_them():
    txn, _ = machine(S.IN_TRANSACTION, v2=False)
    assert not txn.needs_end_txn and not txn.partitions_enrolled
    assert txn.enroll("b", 1) is True
    assert txn.partitions_enrolled and not txn.needs_end_txn  # nothing added yet
    assert txn.enroll("a", 0) is True
    assert txn.enroll("a", 0) is False  # once per partition per transaction
    assert not txn.may_send("a", 0)
    assert txn.take_partitions_to_add() == [("a", 0), ("b", 1)]
    assert txn.take_partitions_to_add() == []
    assert txn.enroll("a", 0) is False  # being added
    assert txn.needs_end_txn
    assert not txn.may_send("a", 0)
    txn.partitions_added([("a", 0), ("b", 1)])
    assert txn.may_send("a", 0) and txn.may_send("b", 1)
    assert not txn.may_send("c", 0)
    assert txn.enroll("a", 0) is False
    txn.start_commit()
    assert txn.enroll("c", 2) is True  # a commit hands over what it flushes
    assert txn.take_partitions_to_add() == [("c", 2)]
    txn.partitions_added([("c", 2)])
    txn.completed("commit_transaction()")
    txn.begin(v2=False)
    assert not txn.needs_end_txn
    assert not txn.may_send("a", 0)  # a new transaction adds its partitions again
    assert txn.enroll("a", 0) is True


def test_v2_partitions_go_out_at_once():
    txn, _ = machine(S.IN_TRANSACTION, v2=True)
    assert txn.enroll("a", 0) is False
    assert txn.may_send("a", 0)
    assert txn.take_partitions_to_add() == []
    assert txn.needs_end_txn


def test_offsets_alone_make_a_transaction_to_end():
    txn, _ = machine(S.IN_TRANSACTION)
    assert not txn.needs_end_txn
    txn.offsets_added()
    assert txn.needs_end_txn
    assert not txn.partitions_enrolled


def test_a_partition_not_added_fails_the_transaction():
    txn, _ = machine(S.IN_TRANSACTION)
    txn.enroll("secret", 0)
    taken = txn.take_partitions_to_add()
    denied = TopicAuthorizationFailedError("secret")
    txn.partitions_not_added(taken)
    txn.abortable(denied)
    assert txn.state == S.ABORTABLE_ERROR and txn.error is denied
    assert not txn.may_send("secret", 0)
    # Not in the coordinator's transaction, but its batch took sequence numbers: the
    # abort must bring a new epoch, from which the partition starts again at 0.
    assert txn.partitions_enrolled and not txn.needs_end_txn
    with pytest.raises(TransactionAbortRequiredError):
        txn.enroll("other", 0)


def test_a_fatal_error_stops_every_partition():
    txn, _ = machine(S.IN_TRANSACTION)
    txn.enroll("a", 0)
    txn.partitions_added(txn.take_partitions_to_add())
    assert txn.may_send("a", 0)
    txn.fatal(ProducerFencedError("fenced"))
    assert not txn.may_send("a", 0)


@pytest.mark.parametrize("state", [S.READY, S.ABORTING, S.UNINITIALIZED])
def test_batches_outside_an_open_transaction_are_refused(state):
    txn, _ = machine(state)
    with pytest.raises(TransactionStateError, match="sending a batch of t-3"):
        txn.enroll("t", 3)


def test_an_abort_adds_nothing_more():
    txn, _ = machine(S.IN_TRANSACTION)
    txn.enroll("a", 0)
    txn.start_abort()
    assert txn.take_partitions_to_add() == []
    assert not txn.needs_end_txn  # the coordinator has nothing of it
    assert txn.partitions_enrolled  # but its batch was numbered


def test_waiting_for_adds_ends_when_they_are_answered():
    txn, _ = machine(S.COMMITTING)
    txn.enroll("a", 0)
    taken = txn.take_partitions_to_add()
    timer = threading.Timer(0.2, txn.partitions_added, (taken,))
    timer.start()
    started = time.monotonic()
    txn.wait_for_adds(10)
    timer.join()
    assert txn.may_send("a", 0)
    assert time.monotonic() - started < 5


def test_waiting_for_adds_ends_when_the_transaction_fails():
    txn, _ = machine(S.COMMITTING)
    txn.enroll("a", 0)
    txn.take_partitions_to_add()
    timer = threading.Timer(0.2, txn.record_failed, (NotEnoughReplicasError("x"),))
    timer.start()
    txn.wait_for_adds(10)
    timer.join()
    assert txn.state == S.ABORTABLE_ERROR


def test_waiting_for_adds_times_out_naming_the_partitions():
    txn, _ = machine(S.COMMITTING)
    txn.enroll("a", 7)
    with pytest.raises(KafkaTimeoutError, match="partitions a-7 not added"):
        txn.wait_for_adds(0.05)
