"""What a sending thread does when its target has no room.

The target is the leader's connection above its high watermark, or the
accumulator's buffer pool when it is full.  Any object with these three methods
can be a target (the ``Backpressured`` protocol):

    has_room() -> bool               room now?
    wait_for_room(timeout_s) -> bool block until room or timeout; room now?
    describe() -> str                names it in errors ("broker 1 at ...")

Strategies (the Netty producer's BackoffStrategy idea):

    block  the default: wait on the target's condition until there is room;
           after max_block_ms raise BackpressureTimeoutError naming the target
    park   sleep park_us and re-check, same bound and error; costs a wake-up
           per interval but reacts without needing the target to signal
    drop   raise RecordDroppedError at once; the caller counts the drop

A user strategy is any object with a ``wait_for_room(target, max_block_ms)``
method that returns when the caller may go on, or raises to refuse (subclass
BackoffStrategy, or just provide the method).
"""
import abc
import time

from netkafka._validate import check_choice
from netkafka.errors import BackpressureTimeoutError, RecordDroppedError


class BackoffStrategy(abc.ABC):
    """Decides what a caller does when target.has_room() is False."""

    name = "custom"

    @abc.abstractmethod
    def wait_for_room(self, target, max_block_ms):
        """Returns once the caller may go on; raises to refuse the record.

        Runs on the caller's thread.  target follows the Backpressured protocol
        (see the module docstring).
        """

    def __repr__(self):
        return f"{type(self).__name__}()"


class Block(BackoffStrategy):
    """Waits on the target's condition, up to max_block_ms."""

    name = "block"

    def wait_for_room(self, target, max_block_ms):
        deadline = time.monotonic() + max_block_ms / 1000
        while not target.has_room():
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                raise _timeout(self, target, max_block_ms)
            target.wait_for_room(remaining_s)


class Park(BackoffStrategy):
    """Sleeps park_us between checks of the target, up to max_block_ms."""

    name = "park"

    def __init__(self, park_us=100):
        if isinstance(park_us, bool) or not isinstance(park_us, (int, float)) or park_us <= 0:
            raise ValueError(f"park_us must be a number > 0, got {park_us!r}")
        self.park_us = park_us  # immutable

    def wait_for_room(self, target, max_block_ms):
        deadline = time.monotonic() + max_block_ms / 1000
        park_s = self.park_us / 1e6
        while not target.has_room():
            if time.monotonic() >= deadline:
                raise _timeout(self, target, max_block_ms)
            time.sleep(park_s)

    def __repr__(self):
        return f"Park(park_us={self.park_us})"


class Drop(BackoffStrategy):
    """Refuses at once."""

    name = "drop"

    def wait_for_room(self, target, max_block_ms):
        raise RecordDroppedError(
            f"record dropped (backoff='drop'): no room in {target.describe()}")


STRATEGIES = {"block": Block, "park": Park, "drop": Drop}


class NoWaitOnIOThreads(BackoffStrategy):
    """strategy, except on the threads that make room (a producer's I/O threads,
    where its callbacks run): a send() from a callback that found no room waited
    for the thread it runs on, stalling every batch of that thread for max_block_ms
    before it failed anyway.  There, no room refuses the record at once: with the
    BackpressureTimeoutError send() raises for a full target elsewhere (a
    KafkaTimeoutError, which callbacks written for kafka-python catch), or drop's
    own refusal, counted as a drop, where that is the strategy."""

    def __init__(self, strategy, on_io_thread):
        self.strategy = strategy  # immutable
        self._on_io_thread = on_io_thread  # immutable: callable() -> bool

    def wait_for_room(self, target, max_block_ms):
        if (self._on_io_thread() and not isinstance(self.strategy, Drop)
                and not target.has_room()):
            raise BackpressureTimeoutError(
                f"no room in {target.describe()} for a record sent from a callback: "
                f"callbacks run on the I/O thread that makes room, so it would wait for "
                f"itself; send it from another thread (or use backoff='drop')")
        self.strategy.wait_for_room(target, max_block_ms)

    def __repr__(self):
        return repr(self.strategy)


def backoff_strategy(spec="block", park_us=100):
    """The strategy for a ``backoff`` setting: a name or a strategy object.

    Raises:
        ValueError: naming the allowed values.
    """
    if callable(getattr(spec, "wait_for_room", None)):
        return spec
    check_choice("backoff", spec, sorted(STRATEGIES),
                 others=["an object with a wait_for_room(target, max_block_ms) method"])
    return Park(park_us) if spec == "park" else STRATEGIES[spec]()


def _timeout(strategy, target, max_block_ms):
    return BackpressureTimeoutError(
        f"no room for {max_block_ms} ms (max_block_ms, backoff={strategy.name!r}) "
        f"in {target.describe()}")
