"""Partition choice for records sent without an explicit partition.

Keyed records go where the Java client puts them -- toPositive(murmur2(key)) % n,
bit for bit (csrc/murmur2.c) -- so keyed data from netkafka and from JVM services
lands together.  Unkeyed records are spread according to the partitioner chosen.

The interface the accumulator uses (every partitioner here implements it):

    partition(topic, key_bytes, all_partitions, available_partitions) -> int
        key_bytes: the serialized key, a bytes-like object, or None for no key.
        all_partitions: the topic's partition ids, ascending.  Kafka numbers them
            0..n-1, so murmur2 placement needs only their count, as in Java.
        available_partitions: those with a known leader, ascending; may be empty.
    on_new_batch(topic, prev_partition)
        The accumulator calls this when a record the partitioner placed on
        prev_partition finds no open batch with room there, *before* opening one;
        then it calls partition() again for that same record and appends where that
        says.  This is the Java client's abort-on-new-batch flow (KIP-480): the
        record that would start a new batch starts it on the next sticky partition
        instead, so a sticky partition gets one batch and the next record moves on.

Why KIP-480's hook rather than KIP-794's byte count: Java 3.3+ (KIP-794) switches
the sticky partition after batch.size bytes and weights the next choice by queue
depth, because switching on batch boundaries sends more data to slow brokers (their
batches stay open longer and fill up).  Under load a batch boundary is batch_size
bytes, so both switch at the same point; the hook keeps the partitioner free of byte
counting and queue statistics, which the accumulator owns.  The cost: at low rates,
where linger_ms sends batches before they fill, switching per batch moves on sooner
than KIP-794 would and can favour slower brokers.  Adaptive weighting is not
implemented.

send_batch() places its rows in bulk the same way -- murmur2 for keys, the sticky
partitioner's choices batch by batch -- with _batch_send's keyed_partitions() and
place_unkeyed_rows().

Threads: partition() and on_new_batch() run on the caller's thread of send(), from
any number of threads at once.  Each stateful partitioner keeps its state in
per-topic records guarded by its own `_lock` (a Mutex; correctness does not
rest on the GIL).  The keyed path and murmur2 take no lock.
"""
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport INT32_MAX, int32_t, uint32_t

from netkafka.producer._mutex cimport Mutex
from netkafka.csrc cimport nk_murmur2, nk_murmur2_partition

import bisect
import operator
import random


cdef Py_ssize_t _random_below(object rng, Py_ssize_t n) except -1:
    # A random index below n from rng (a random.Random).  Its randrange() is Python:
    # about 45 bytecodes for each new batch's partition; random() is one C call, and
    # its 53 bits spread n (a partition count) as evenly as randrange would.
    if n <= 0:
        raise ValueError(f"no partition to choose from ({n} candidates)")
    cdef double draw = rng.random()
    return <Py_ssize_t>(draw * n)


cdef int _get_key_buffer(object data, Py_buffer *view) except -1:
    """A read-only view of a bytes-like key, or a TypeError saying what it was."""
    try:
        PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    except TypeError:
        raise TypeError(
            f"a record key must be bytes-like (serialize it first), "
            f"not {type(data).__name__}") from None
    return 0


cdef uint32_t _murmur2_bits(object data) except? 0:
    """murmur2 of a bytes-like object, as its 32 bits."""
    cdef Py_buffer view
    _get_key_buffer(data, &view)
    cdef uint32_t h = nk_murmur2(view.buf, <size_t>view.len)
    PyBuffer_Release(&view)
    return h


cdef uint32_t _checked_count(Py_ssize_t num_partitions, object topic) except 0:
    """num_partitions as the divisor murmur2 placement needs, or a clear error."""
    if num_partitions <= 0:
        raise ValueError(f"topic {topic!r} has no partitions to choose from")
    if num_partitions > INT32_MAX:
        raise ValueError(
            f"topic {topic!r}: {num_partitions} partitions is more than Kafka's int32 ids allow")
    return <uint32_t>num_partitions


cdef int keyed_partition(object key_bytes, Py_ssize_t num_partitions, object topic) except -1:
    """Java's placement of a keyed record: what DefaultPartitioner and
    BrokerAwarePartitioner give a key, taking no lock (the accumulator's hot path
    calls it under its own)."""
    cdef uint32_t count = _checked_count(num_partitions, topic)
    cdef Py_buffer view
    _get_key_buffer(key_bytes, &view)
    cdef int chosen = <int>nk_murmur2_partition(view.buf, <size_t>view.len, count)
    PyBuffer_Release(&view)
    return chosen


def murmur2(data):
    """Kafka's murmur2 of `data` (bytes-like), as the signed 32-bit int Java returns."""
    return <int32_t>_murmur2_bits(data)


def default_partition(key_bytes, Py_ssize_t num_partitions):
    """The Java client's partition for a keyed record: toPositive(murmur2(key)) % n.

    Raises:
        TypeError: key_bytes is not bytes-like.
        ValueError: num_partitions is not in 1..2**31-1.
    """
    if num_partitions <= 0 or num_partitions > INT32_MAX:
        raise ValueError(f"num_partitions must be in 1..2**31-1, got {num_partitions}")
    return keyed_partition(key_bytes, num_partitions, None)


cdef class Partitioner:
    """Base of netkafka's partitioners: the accumulator's interface (module docstring).

    Declared in _partitioner.pxd, so Cython callers dispatch through its C vtable;
    Python subclasses may override both methods.
    """

    cpdef int partition(self, topic, key_bytes, all_partitions,
                        available_partitions) except -1:
        raise NotImplementedError(f"{type(self).__name__}.partition")

    cpdef on_new_batch(self, topic, int prev_partition):
        """Stateless partitioners ignore the hook."""


cdef class _StickyTopic:
    """One topic's sticky state; fields guarded by the owning partitioner's _lock."""
    cdef int current    # the sticky partition, -1 until chosen or after a move
    cdef int retired    # the partition moved off by on_new_batch, -1 if none

    def __cinit__(self):
        self.current = -1
        self.retired = -1


cdef class _StickyPartitioner(Partitioner):
    """Keyed records by murmur2; unkeyed records on one partition per batch.

    Subclasses decide which partition comes next (_next_sticky); this class keeps
    the state machine: choose when unset, move on on_new_batch of the current one.
    """
    cdef Mutex _lock      # guards _topics and everything _next_sticky uses
    cdef dict _topics     # topic -> _StickyTopic; guarded by _lock

    def __init__(self):
        self._lock = Mutex()
        self._topics = {}

    cpdef int partition(self, topic, key_bytes, all_partitions,
                        available_partitions) except -1:
        cdef Py_ssize_t n = len(all_partitions)
        cdef _StickyTopic state
        if key_bytes is not None:
            return keyed_partition(key_bytes, n, topic)
        _checked_count(n, topic)
        self._lock.take()
        try:
            state = self._topics.get(topic)
            if state is None:
                state = _StickyTopic()
                self._topics[topic] = state
            # current >= n: the topic was recreated with fewer partitions.
            if state.current < 0 or state.current >= n:
                state.current = self._next_sticky(topic, all_partitions,
                                                  available_partitions, state.retired)
            return state.current
        finally:
            self._lock.give()

    cpdef on_new_batch(self, topic, int prev_partition):
        """Move off prev_partition if it is still the sticky one.

        Several threads can see the same full batch; only the first moves the
        sticky partition, the rest find it already moved (as Java's
        StickyPartitionCache does).
        """
        cdef _StickyTopic state
        self._lock.take()
        try:
            state = self._topics.get(topic)
            if state is not None and state.current == prev_partition:
                state.current = -1
                state.retired = prev_partition
        finally:
            self._lock.give()

    cdef int _next_sticky(self, topic, all_partitions, available_partitions,
                          int retired) except -1:
        """The next sticky partition; called with _lock held."""
        raise NotImplementedError(f"{type(self).__name__}._next_sticky")


cdef class DefaultPartitioner(_StickyPartitioner):
    """The Java client's default: murmur2 for keys, sticky for unkeyed records.

    The next sticky partition is drawn uniformly from the available partitions (all
    partitions when none is available), never the one just left while another
    exists -- as KIP-480's StickyPartitionCache chose.
    """
    cdef object _rng      # random.Random; guarded by _lock

    def __init__(self):
        super().__init__()
        self._rng = random.Random()

    cdef int _next_sticky(self, topic, all_partitions, available_partitions,
                          int retired) except -1:
        candidates = available_partitions if len(available_partitions) else all_partitions
        cdef Py_ssize_t count = len(candidates)
        if count > 1 and retired >= 0 and retired in candidates:
            # Draw among the others: index count-1 stands in for the retired one.
            chosen = candidates[_random_below(self._rng, count - 1)]
            if chosen == retired:
                chosen = candidates[count - 1]
        else:
            chosen = candidates[_random_below(self._rng, count)]
        return chosen


cdef class BrokerAwarePartitioner(_StickyPartitioner):
    """Keyed records by murmur2; unkeyed records kept on one broker at a time.

    Sticky like the default, one batch per partition, but the partitions are taken
    in order of (leader broker id, partition id): consecutive batches go to the same
    broker until each of its partitions has had one, then to the next broker.  The
    batches of a broker's run are ready together, so its ProduceRequests carry
    several batches and only one broker takes unkeyed traffic at a time.

    Args:
        leaders_for: callable(topic) -> mapping {partition id: leader broker id},
            the metadata cache's current view.  It is called with this
            partitioner's lock held (once per batch switch), so it must not call
            back into the partitioner; partitions missing from the mapping are
            grouped under broker -1.
    """
    cdef object _leaders_for  # callable(topic) -> {partition: leader}; immutable
    cdef object _rng          # random.Random for the first broker; guarded by _lock

    def __init__(self, leaders_for):
        if not callable(leaders_for):
            raise TypeError(
                f"BrokerAwarePartitioner needs leaders_for(topic) -> {{partition: broker}}, "
                f"got {leaders_for!r}")
        super().__init__()
        self._leaders_for = leaders_for
        self._rng = random.Random()

    cdef int _next_sticky(self, topic, all_partitions, available_partitions,
                          int retired) except -1:
        candidates = available_partitions if len(available_partitions) else all_partitions
        leaders = self._leaders_for(topic) or {}
        order = sorted((leaders.get(p, -1), p) for p in candidates)
        if retired < 0:
            # First choice: a random place in the cycle, so producers started
            # together do not all begin on the same broker.
            return order[_random_below(self._rng, len(order))][1]
        # The partition after the retired one in the cycle, wherever the retired
        # one now sorts (its leader may have moved).
        i = bisect.bisect_right(order, (leaders.get(retired, -1), retired))
        return order[i % len(order)][1]


cdef class _RoundRobinTopic:
    """One topic's round-robin state; fields guarded by the owning partitioner's _lock."""
    cdef Py_ssize_t next    # slot of the next record
    cdef list returned      # partitions given back by on_new_batch, reissued first

    def __cinit__(self):
        self.next = 0
        self.returned = []


cdef class RoundRobinPartitioner(Partitioner):
    """Every record to the next available partition in turn, keyed or not.

    As the Java client's RoundRobinPartitioner: the key is ignored and the cycle runs
    over the available partitions (all when none is available).  A partition given
    back by on_new_batch is issued again first, so the record that caused the new
    batch keeps its turn instead of skipping a partition (KAFKA-9965).
    """
    cdef Mutex _lock      # guards _topics
    cdef dict _topics     # topic -> _RoundRobinTopic; guarded by _lock

    def __init__(self):
        self._lock = Mutex()
        self._topics = {}

    cpdef int partition(self, topic, key_bytes, all_partitions,
                        available_partitions) except -1:
        cdef _RoundRobinTopic state
        candidates = available_partitions if len(available_partitions) else all_partitions
        cdef Py_ssize_t count = len(candidates)
        _checked_count(len(all_partitions), topic)
        self._lock.take()
        try:
            state = self._topics.get(topic)
            if state is None:
                state = _RoundRobinTopic()
                self._topics[topic] = state
            if state.returned:
                return state.returned.pop(0)
            chosen = candidates[state.next % count]
            state.next += 1
            return chosen
        finally:
            self._lock.give()

    cpdef on_new_batch(self, topic, int prev_partition):
        cdef _RoundRobinTopic state
        self._lock.take()
        try:
            state = self._topics.get(topic)
            if state is not None:
                state.returned.append(prev_partition)
        finally:
            self._lock.give()


cdef class CallablePartitioner(Partitioner):
    """A user function `(key_bytes, all_partitions, available_partitions) -> partition`.

    kafka-python's partitioner signature.  The result is checked: not an integer, or
    not one of the topic's partitions, raises naming the function.  The function
    may run on any send() thread at once and is called again for a record after
    on_new_batch; its own state is its own to guard.
    """

    def __init__(self, function):
        if not callable(function):
            raise TypeError(f"a custom partitioner must be callable, got {function!r}")
        self.function = function
        self.name = getattr(function, "__qualname__", None) or repr(function)

    cpdef int partition(self, topic, key_bytes, all_partitions,
                        available_partitions) except -1:
        return self._checked(topic, self.function(key_bytes, all_partitions,
                                                  available_partitions), all_partitions)

    cdef int _checked(self, topic, result, all_partitions) except -1:
        """result, if it is one of the topic's partitions; else an error naming
        the function."""
        if isinstance(result, bool):
            chosen = None  # True / False are ints to Python, but never a partition
        else:
            try:
                chosen = operator.index(result)
            except TypeError:
                chosen = None
        if chosen is None:
            raise TypeError(
                f"partitioner {self.name} returned {result!r} ({type(result).__name__}) "
                f"for topic {topic!r}: a partition must be an int")
        if chosen not in all_partitions:
            raise ValueError(
                f"partitioner {self.name} returned partition {chosen} for topic {topic!r}, "
                f"which is not one of its partitions {list(all_partitions)}")
        return chosen


cdef class ObjectPartitioner(CallablePartitioner):
    """A kafka-python 3 partitioner object: partition(topic, key, serialized_key,
    value, serialized_value, cluster) and, if it has one, on_new_batch(topic,
    cluster, prev_partition).

    This path runs before the record is encoded and knows its serialized key only:
    that goes as key and serialized_key, None as value and serialized_value.
    cluster is a ClusterView of the record's topic.  The result is checked as a
    callable's.
    """
    cdef object _on_new_batch  # the object's on_new_batch, or None; immutable
    cdef Mutex _lock           # guards _views
    cdef dict _views           # topic -> the ClusterView last given, for on_new_batch

    def __init__(self, partitioner):
        partition = getattr(partitioner, "partition", None)
        if not callable(partition):
            raise TypeError(f"a partitioner object needs a partition() method, "
                            f"got {partitioner!r}")
        super().__init__(partition)
        self.name = f"{type(partitioner).__qualname__}.partition"
        self._on_new_batch = getattr(partitioner, "on_new_batch", None)
        self._lock = Mutex()
        self._views = {}

    cpdef int partition(self, topic, key_bytes, all_partitions,
                        available_partitions) except -1:
        view = ClusterView(topic, all_partitions, available_partitions)
        if self._on_new_batch is not None:
            self._lock.take()
            self._views[topic] = view
            self._lock.give()
        return self._checked(topic, self.function(topic, key_bytes, key_bytes, None, None,
                                                  view), all_partitions)

    cpdef on_new_batch(self, topic, int prev_partition):
        if self._on_new_batch is None:
            return
        self._lock.take()
        view = self._views.get(topic)
        self._lock.give()
        if view is not None:
            self._on_new_batch(topic, view, prev_partition)


class ClusterView:
    """What a kafka-python partitioner asks of its `cluster` argument, for one topic."""

    __slots__ = ("_topic", "_all", "_available")

    def __init__(self, topic, all_partitions, available_partitions):
        self._topic = topic
        self._all = all_partitions
        self._available = available_partitions

    def topics(self):
        return {self._topic}

    def partitions_for_topic(self, topic):
        return set(self._all) if topic == self._topic else None

    def available_partitions_for_topic(self, topic):
        return set(self._available) if topic == self._topic else None