"""The linger thread (producer.accumulator._LingerTimer) on its own, with a stand-in
accumulator: it must hand over every batch still open at its deadline, never before it
and never late by a sleep; and it must not wake for batches already gone from their
queue (filled before linger_ms, the common case under load)."""
import threading
import time

import pytest

from netkafka.producer.accumulator import _LingerTimer

HANG_GUARD_S = 10  # a wait this long means the thread missed a wake-up, not slowness


class Queue:
    def __init__(self, name):
        self.topic, self.partition, self.open = name, 0, None


class Accumulator:
    """Records _on_linger_expired calls: (monotonic ns, batch)."""

    def __init__(self, linger_ms):
        self._linger_ns = linger_ms * 1_000_000
        self.expired = []
        self.called = threading.Event()

    def _on_linger_expired(self, queue, batch):
        self.expired.append((time.monotonic_ns(), batch))
        self.called.set()


@pytest.fixture
def timer_for():
    timers = []

    def make(linger_ms):
        accumulator = Accumulator(linger_ms)
        timers.append(_LingerTimer(accumulator))
        return timers[-1], accumulator

    yield make
    for timer in timers:
        timer.stop()


def wake_ns(timer):
    with timer._cond:
        return timer._wake_ns


def wait_until(predicate):
    deadline = time.monotonic() + HANG_GUARD_S
    while not predicate():
        assert time.monotonic() < deadline, "the linger thread did not get there"
        time.sleep(0.001)


def test_a_batch_retired_before_its_deadline_is_not_woken_for(timer_for):
    timer, accumulator = timer_for(linger_ms=50)
    retired, still_open = Queue("retired"), Queue("open")
    gone, open_batch = object(), object()
    still_open.open = open_batch  # retired.open stays None: the batch filled and left
    now = time.monotonic_ns()
    timer.schedule(now + 20_000_000, retired, gone)
    due_ns = now + 60_000_000
    timer.schedule(due_ns, still_open, open_batch)
    assert accumulator.called.wait(HANG_GUARD_S)
    time.sleep(0.1)  # room for a wrong second call
    assert [batch for _, batch in accumulator.expired] == [open_batch]
    assert accumulator.expired[0][0] >= due_ns  # not before its deadline


def test_while_batches_fill_early_it_sleeps_a_linger_at_a_time_then_waits_for_work(timer_for):
    timer, accumulator = timer_for(linger_ms=50)
    queue = Queue("p0")
    before = time.monotonic_ns()
    timer.schedule(before + 50_000_000, queue, object())  # queue.open is None: retired
    # The wake schedule() gave found only a retired batch: no batch opened from then on
    # can be due sooner than linger_ms later, so it sleeps that long ...
    wait_until(lambda: wake_ns(timer) is not None)
    assert wake_ns(timer) >= before + 50_000_000
    # ... and a wake that finds nothing scheduled at all waits for schedule().
    wait_until(lambda: wake_ns(timer) is None)
    assert accumulator.expired == []


def test_a_deadline_sooner_than_the_threads_sleep_wakes_it(timer_for):
    timer, accumulator = timer_for(linger_ms=60_000)
    timer.schedule(time.monotonic_ns(), Queue("retired"), object())
    wait_until(lambda: wake_ns(timer) is not None)  # asleep for a minute
    queue, batch = Queue("held"), object()
    queue.open = batch
    timer.schedule(0, queue, batch)  # as a held batch's recheck asks: now
    assert accumulator.called.wait(HANG_GUARD_S)
    assert [b for _, b in accumulator.expired] == [batch]


def test_with_no_linger_a_retired_batch_does_not_make_it_spin(timer_for):
    timer, accumulator = timer_for(linger_ms=0)
    timer.schedule(time.monotonic_ns(), Queue("retired"), object())
    # linger_ms=0 gives no lower bound on the next deadline: it waits for schedule().
    wait_until(lambda: not timer._heap)
    assert wake_ns(timer) is None
    assert accumulator.expired == []


def test_schedule_does_not_notify_while_the_thread_hands_a_batch_over(timer_for):
    timer, accumulator = timer_for(linger_ms=0)
    time.sleep(0.05)  # room to start waiting with nothing scheduled (_wake_ns None)
    notifies = []
    cond = timer._cond
    real_notify = cond.notify
    cond.notify = lambda: (notifies.append(1), real_notify())
    handing_over, go_on = threading.Event(), threading.Event()
    accumulator._on_linger_expired = lambda queue, batch: (
        handing_over.set(), go_on.wait(HANG_GUARD_S))
    first = Queue("first")
    first.open = object()
    timer.schedule(time.monotonic_ns(), first, first.open)
    assert handing_over.wait(HANG_GUARD_S)
    # Scheduled while the thread is busy: it looks at the heap before it waits again.
    later = Queue("later")
    later.open = object()
    for _ in range(100):
        timer.schedule(time.monotonic_ns() + 10_000_000, Queue("retired"), object())
    timer.schedule(time.monotonic_ns() + 20_000_000, later, later.open)
    called = []
    accumulator._on_linger_expired = lambda queue, batch: called.append(batch)
    go_on.set()
    wait_until(lambda: called)
    assert called == [later.open]  # not missed for want of a notify
    assert len(notifies) <= 1  # the first schedule()'s at most
