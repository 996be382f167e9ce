"""client.retry.ask_until: the loop behind FindCoordinator, InitProducerId, OffsetFetch
and the transactional requests (each of which the broker tests drive end to end)."""
import gc
import threading
import time
import weakref

import pytest

from netkafka import errors
from netkafka.client.retry import RetryBackoff, ask_until

FAST = RetryBackoff(1, 1)  # 1 ms, constant
SLOW = RetryBackoff(30000, 30000)


def _answers(*outcomes):
    """An attempt that raises or returns outcomes in turn, recording what it was given."""
    given = []
    pending = list(outcomes)

    def attempt(remaining_s):
        given.append(remaining_s)
        outcome = pending.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
    return attempt, given


def test_retriable_errors_are_asked_again_until_an_answer():
    attempt, given = _answers(errors.CoordinatorLoadInProgressError("loading"),
                              errors.KafkaConnectionError("lost"), "answer")
    deadline = time.monotonic() + 10
    assert ask_until(deadline, "x not found in time", attempt, FAST) == "answer"
    assert len(given) == 3
    assert all(0 < remaining_s <= 10 for remaining_s in given)


def test_a_retriable_error_keeps_none_of_the_callers_locals_alive():
    # The last retriable error was kept in a local of ask_until, whose frame its
    # traceback holds: a cycle, and through the frames' f_back every caller's locals
    # stayed alive until a full collection -- send_batch()'s columns, when
    # InitProducerId was asked again on its thread (COORDINATOR_LOAD_IN_PROGRESS from
    # a broker just started).
    class Columns:
        pass

    def attempt(remaining_s):
        if not asked:
            asked.append(remaining_s)
            raise errors.CoordinatorLoadInProgressError("loading")
        return "answer"

    def caller(columns):
        return ask_until(time.monotonic() + 10, "late", attempt, FAST)

    asked = []
    columns = Columns()
    alive = weakref.ref(columns)
    gc.disable()  # freed by reference counting, or not at all
    try:
        assert caller(columns) == "answer"
        del columns
        assert alive() is None
    finally:
        gc.enable()


def test_an_error_that_is_not_retriable_is_raised_as_it_is_at_once():
    refusal = errors.GroupAuthorizationFailedError("OffsetFetch of group 'g'")
    attempt, given = _answers(errors.CoordinatorLoadInProgressError("loading"), refusal)
    with pytest.raises(errors.GroupAuthorizationFailedError) as caught:
        ask_until(time.monotonic() + 10, "late", attempt, FAST)
    assert caught.value is refusal
    assert len(given) == 2


@pytest.mark.parametrize("after", [": ", "; "])
def test_the_deadline_names_what_was_asked_and_the_last_error(after):
    loading = errors.CoordinatorLoadInProgressError("FindCoordinator from broker 1")

    def attempt(remaining_s):
        raise loading
    start = time.monotonic()
    with pytest.raises(errors.KafkaTimeoutError) as caught:
        ask_until(start + 0.2, "the group coordinator of 'g' not found in time", attempt,
                  RetryBackoff(50, 50), last_error_after=after)
    assert str(caught.value) == (f"the group coordinator of 'g' not found in time"
                                 f"{after}last error {loading}")
    # The backoff is cut short by the deadline: the call ends with it, not long after.
    assert time.monotonic() - start < 5


def test_a_deadline_already_past_asks_nothing():
    attempt, given = _answers("answer")
    with pytest.raises(errors.KafkaTimeoutError, match=r"^late$"):
        ask_until(time.monotonic() - 1, "late", attempt, FAST)
    assert given == []


def test_stop_ends_the_asking_and_says_so():
    stop = threading.Event()

    def attempt(remaining_s):
        stop.set()  # the producer closes while the request is answered
        raise errors.ConcurrentTransactionsError("EndTxn")
    start = time.monotonic()
    with pytest.raises(errors.KafkaTimeoutError) as caught:
        ask_until(start + 60, "EndTxn: no answer in time", attempt, SLOW,
                  last_error_after="; ", stop=stop, stopped="EndTxn: the producer closed")
    assert str(caught.value).startswith("EndTxn: the producer closed; last error ")
    assert time.monotonic() - start < 30  # the backoff waited on stop, which was set


def test_an_error_code_may_have_its_own_backoff():
    concurrent = errors.ConcurrentTransactionsError("EndTxn")
    attempt, given = _answers(concurrent, concurrent, "answer")
    start = time.monotonic()
    assert ask_until(start + 60, "late", attempt, SLOW,
                     backoff_s_by_code={concurrent.code: 0.001}) == "answer"
    assert time.monotonic() - start < 30  # not the 30 s backoff of other errors


class _RecordedWaits:
    """A stop event that is never set and records each wait instead of waiting."""

    def __init__(self):
        self.waits_s = []

    def is_set(self):
        return False

    def wait(self, timeout_s):
        self.waits_s.append(timeout_s)


def test_the_backoff_doubles_with_each_retriable_error_up_to_its_max():
    # KIP-580: 10, 20, 40, 80, 80 ms (+-20%); it used to be 10 ms each time.
    loading = errors.CoordinatorLoadInProgressError("loading")
    attempt, given = _answers(*[loading] * 5, "answer")
    waits = _RecordedWaits()
    assert ask_until(time.monotonic() + 60, "late", attempt, RetryBackoff(10, 80),
                     stop=waits, stopped="closed") == "answer"
    ratios = [wait_s * 1000 / expected_ms
              for wait_s, expected_ms in zip(waits.waits_s, [10, 20, 40, 80, 80])]
    assert len(ratios) == 5 and all(0.8 <= ratio <= 1.2 for ratio in ratios), ratios
    assert max(waits.waits_s) <= 0.080  # the jitter never takes it past the max


def test_a_retry_backoff_above_its_max_is_kept_constant():
    # kafka-python has only retry_backoff_ms: a user's 5000 ms stays 5000 ms, not the
    # default max's 1000.
    assert {RetryBackoff(5000, 1000).ms(retries) for retries in range(6)} == {5000}
    assert RetryBackoff(0, 1000).ms(3) == 0
