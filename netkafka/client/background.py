"""Work a connection hands to a thread of its own, and its result handed back to the
I/O thread: a name lookup (resolver.py) and a SASL mechanism's prepare().

The I/O thread must never block, so such work runs elsewhere; when it ends, its
thread leaves the result here and wakes the I/O thread, which takes it on its next
pass.  The connection may give up on the work meanwhile (a setup timeout, an address
change, the connection closing): each piece of work carries a token, and a result
whose token is no longer the one wanted is dropped by its thread -- nobody waits for
it, and it must not be mistaken for a later piece's.

Work the connection gave up on may still be running (a name lookup a DNS server never
answers, a token provider that hangs): resume() wants it again rather than the
connection starting the same work on one more thread at every attempt.

Threads: start(), resume(), take() and cancel() are the owning I/O thread's; deliver()
is the worker thread's.  _token, _result and _running are guarded by _lock, a leaf: no
other lock is taken while it is held, and the wakeup comes after it is released.
"""
import threading


class BackgroundResult:
    """The result of one piece of off-thread work at a time.

    Args:
        wakeup: called (no lock held) once a result is there: wakes the I/O thread.
    """

    __slots__ = ("_wakeup", "_lock", "_token", "_result", "_running")

    def __init__(self, wakeup):
        self._wakeup = wakeup  # immutable
        self._lock = threading.Lock()
        self._token = None  # guarded by _lock: the work wanted now (set by the I/O thread)
        # Guarded by _lock: its result once it ended (set by the worker, only while its
        # token is still the one wanted; taken by the I/O thread).
        self._result = None
        # Guarded by _lock: the tokens of work started and not delivered yet, wanted
        # or not (a set: a hung piece of work stays in it while newer ones come and go).
        self._running = set()

    def start(self, token):
        """The I/O thread: token's work, about to start, is the one wanted from now on;
        any earlier work's result is dropped."""
        with self._lock:
            self._token, self._result = token, None
            self._running.add(token)

    def resume(self, token):
        """The I/O thread: token's work, started earlier and given up on since, is the
        one wanted again if it is still running: True then (its result will come), and
        False, nothing wanted, when it ended meanwhile (its result was dropped)."""
        with self._lock:
            if token not in self._running:
                return False
            self._token, self._result = token, None
            return True

    def deliver(self, token, result):
        """The worker thread: hands result over, if token's work is still wanted."""
        with self._lock:
            self._running.discard(token)
            if self._token is not token:
                return  # timed out, moved or closed meanwhile: nobody waits for it
            self._token = None
            self._result = result
        self._wakeup()

    def take(self):
        """The I/O thread: the result handed over since the last take(), or None
        while the work is still running."""
        with self._lock:
            result, self._result = self._result, None
        return result

    def cancel(self):
        """The I/O thread: nothing is wanted any more; a result on its way is dropped."""
        with self._lock:
            self._token = self._result = None
