"""Which threads are netkafka's own: its I/O threads and the producer's background
threads (linger, spool, transactions, the WAL's housekeeping).  Users' callbacks run on
them, and there they must neither wait for work such a thread has yet to do (a future's
get(): the thread would wait for itself) nor end the thread by raising (SystemExit,
KeyboardInterrupt: every record after them would wait forever).

Threads: each thread marks itself as it starts, and only reads its own mark.
"""
import threading

_marks = threading.local()  # each thread's own


def mark_own_thread():
    """Called first thing by each thread netkafka starts (it is one for life)."""
    _marks.own = True


def on_own_thread():
    """True on a thread netkafka started and marked."""
    return getattr(_marks, "own", False)


def callback_error_is_contained(error):
    """Whether a user's callback's error is logged and the thread goes on: any
    Exception, and on netkafka's own threads any BaseException too.  On the caller's
    own thread a SystemExit or KeyboardInterrupt (Ctrl-C) propagates."""
    return isinstance(error, Exception) or on_own_thread()
