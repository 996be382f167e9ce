"""Asking a broker again until a deadline: the one loop behind every blocking request
whose retriable answers are waited out (FindCoordinator, InitProducerId, OffsetFetch,
the transactional requests).

An attempt either answers or raises a KafkaError.  A retriable one (the broker
loading, a coordinator that moved, a lost connection: the error's own ``retriable``
flag) is asked again after a backoff, for as long as the deadline allows; any other
is raised as it is.  The backoff grows as the Java client's does since KIP-580:
``retry_backoff_ms`` doubling with each retry, +-20% jitter, up to
``retry_backoff_max_ms`` (RetryBackoff), so that a coordinator that stays away is
not asked ten times a second.  When the deadline passes, KafkaTimeoutError says what was asked
and names the last retriable error, so that a timeout is never left unexplained.

Threads: blocks, so callers' threads (and the producer's transaction thread) only,
never an I/O thread (it would wait for itself).  Keeps no state.
"""
import math
import random
import time
from dataclasses import dataclass

from netkafka import errors
from netkafka.errors import KafkaTimeoutError


def exponential_ms(initial_ms, max_ms, attempts):
    """The Java client's ExponentialBackoff (multiplier 2, jitter 0.2): initial_ms *
    2**attempts * uniform(0.8, 1.2), never above max_ms; a max_ms at or below initial_ms
    gives max_ms, constant.  The reconnect backoff, the connection setup timeout and
    the retry backoff all grow so."""
    initial_ms = min(initial_ms, max_ms)
    if max_ms <= initial_ms:
        return initial_ms
    exponent = min(attempts, math.log2(max_ms / max(initial_ms, 1)))
    return min(initial_ms * 2 ** exponent * random.uniform(0.8, 1.2), max_ms)


@dataclass(frozen=True)
class RetryBackoff:
    """The wait before a retry: initial_ms (retry_backoff_ms) doubling with each retry
    up to max_ms (retry_backoff_max_ms), +-20% jitter.  An initial_ms above max_ms is
    kept, constant: kafka-python's meaning of the one setting it has (the Java client
    would wait max_ms), as the reconnect backoff keeps reconnect_backoff_ms.
    Immutable, so thread-safe."""

    initial_ms: float
    max_ms: float

    def ms(self, retries):
        """The wait, in ms, before retry number retries + 1 (0: the first retry)."""
        return exponential_ms(self.initial_ms, max(self.max_ms, self.initial_ms), retries)


def ask_until(deadline, late, attempt, backoff, *, last_error_after=": ", stop=None,
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
        backoff: the RetryBackoff after a retriable error, growing with each one in
            a row (cut short by the deadline).
        last_error_after: what joins late and the last error (": ", or "; " where
            late already has a colon).
        stop: a threading.Event that ends the asking (the producer closing): the
            waits are on it, and once it is set KafkaTimeoutError says stopped
            instead of late.
        backoff_s_by_code: {error code: wait in s} for errors whose wait is not
            backoff's.

    Raises:
        KafkaTimeoutError: only retriable errors (or none) before deadline, or stop
            set.
        KafkaError: the first error that is not retriable, as attempt raised it.
    """
    last_error = None
    retries = 0
    try:
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
            wait_s = (backoff_s_by_code or {}).get(getattr(last_error, "code", None))
            if wait_s is None:
                wait_s = backoff.ms(retries) / 1000
            retries += 1
            wait_s = min(wait_s, max(0.0, deadline - time.monotonic()))
            if stop is not None:
                stop.wait(wait_s)
            else:
                time.sleep(wait_s)
    finally:
        # Its traceback holds this frame, which holds it: a cycle that kept every
        # caller's frame (f_back) and locals alive until a full collection.
        last_error = None
