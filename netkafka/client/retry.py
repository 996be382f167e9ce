"""Asking a broker again until a deadline: the one loop behind every blocking request
whose retriable answers are waited out (FindCoordinator, InitProducerId, OffsetFetch,
the transactional requests).

An attempt either answers or raises a KafkaError.  A retriable one (the broker
loading, a coordinator that moved, a lost connection: the error's own ``retriable``
flag) is asked again after a backoff, for as long as the deadline allows; any other
is raised as it is.  When the deadline passes, KafkaTimeoutError says what was asked
and names the last retriable error, so that a timeout is never left unexplained.

Threads: blocks, so callers' threads (and the producer's transaction thread) only,
never an I/O thread (it would wait for itself).  Keeps no state.
"""
import time

from netkafka import errors
from netkafka.errors import KafkaTimeoutError


def ask_until(deadline, late, attempt, backoff_s, *, last_error_after=": ", stop=None,
              stopped=None, backoff_s_by_code=None):
    """attempt's answer, asking again after retriable errors until deadline.

    Args:
        deadline: time.monotonic() by which to have the answer.
        late: what KafkaTimeoutError says when the deadline passes, e.g. "the group
            coordinator of 'g' not found in time"; the last retriable error follows
            it after last_error_after.
        attempt: attempt(remaining_s) -> the answer, or raises a KafkaError;
            remaining_s (> 0) is what is left of the deadline, the bound of its
            requests.
        backoff_s: the wait after a retriable error (cut short by the deadline).
        last_error_after: what joins late and the last error (": ", or "; " where
            late already has a colon).
        stop: a threading.Event that ends the asking (the producer closing): the
            waits are on it, and once it is set KafkaTimeoutError says stopped
            instead of late.
        backoff_s_by_code: {error code: wait} for errors whose wait is not backoff_s.

    Raises:
        KafkaTimeoutError: only retriable errors (or none) before deadline, or stop
            set.
        KafkaError: the first error that is not retriable, as attempt raised it.
    """
    last_error = None
    while True:
        remaining_s = deadline - time.monotonic()
        stopped_now = stop is not None and stop.is_set()
        if remaining_s <= 0 or stopped_now:
            raise KafkaTimeoutError((stopped if stopped_now else late)
                                    + (f"{last_error_after}last error {last_error}"
                                       if last_error else ""))
        try:
            return attempt(remaining_s)
        except errors.KafkaError as exc:
            if not exc.retriable:
                raise
            last_error = exc
        wait_s = (backoff_s_by_code or {}).get(getattr(last_error, "code", None), backoff_s)
        wait_s = min(wait_s, max(0.0, deadline - time.monotonic()))
        if stop is not None:
            stop.wait(wait_s)
        else:
            time.sleep(wait_s)
