"""send_batch()'s native helpers: a call's rows placed, grouped and answered in bulk.

batch_send.py tells the story of a call; these are its loops over rows, each one
native so that no Python object is made per row:

    partitions_array()    the caller's per-row `partitions`, checked, as array('i')
    keyed_partitions()    murmur2 of each row's key, bit-identical to send()'s
                          placement (the Java client's), over any form of keys
                          Rows takes
    place_unkeyed_rows()  the sticky partition send() would give each row without
                          a key, batch by batch (the batches planned, not built)
    group_rows()          the rows grouped by partition, in row order
    fill_rows()           a run's partition or offsets written back at its rows

send() itself never comes here: its path is _accumulator's and _partitioner's.
The planner sizes rows by the v2 record format (_columns.Rows.record_bytes,
_batch_layout.pxd), not through the builder.

Threads: everything runs on the caller's thread of send_batch(); the partitioner
it is given is thread-safe (its own lock), and each helper's state is its call's.
"""
cimport cython
from cpython.buffer cimport PyBuffer_Release
from cpython.sequence cimport PySequence_Fast_GET_ITEM
from cpython.tuple cimport PyTuple_CheckExact
from libc.stdint cimport INT32_MAX, int64_t, uint32_t

from netkafka.csrc cimport nk_murmur2_partition
from netkafka.producer._partitioner cimport Partitioner
from netkafka.record._batch_layout cimport HEADER_SIZE_BYTES
from netkafka.record._columns cimport BinarySource, Rows, _binary_source, integer_arg

import time
from array import array


# -- placement: a partition per row --------------------------------------------------

def partitions_array(partitions):
    """send_batch()'s per-row `partitions` as an array('i'), each element checked:
    an int partition id (or an integer with __index__, as numpy's), or None (-1:
    the partitioner's choice, as send()'s partition=None).  An array('i') is
    checked and returned as is; a pyarrow integer Array or ChunkedArray is
    converted (null: None).

    Raises:
        TypeError, ValueError: partitions is not a list, tuple, array('i') or
            pyarrow integer column, or an element is neither None nor an int in
            0..2**31-1 (named as partitions[i]).
    """
    return _partitions_array(partitions)


cdef object _partitions_array(object partitions):
    cdef Py_ssize_t i
    if type(partitions).__module__.startswith("pyarrow"):  # pyarrow is optional
        return _arrow_partitions(partitions)
    if isinstance(partitions, array) and partitions.typecode == "i":
        for i in range(len(partitions)):
            if partitions[i] < -1:
                raise ValueError(f"partitions[{i}]={partitions[i]} is negative")
        return partitions
    if not (type(partitions) is list or PyTuple_CheckExact(partitions)):
        raise TypeError(f"partitions must be {_PARTITIONS_TAKEN}, not "
                        f"{type(partitions).__name__}")
    result = array("i", bytes(4 * len(partitions)))
    cdef int[::1] out = result
    for i in range(len(partitions)):
        item = <object>PySequence_Fast_GET_ITEM(partitions, i)
        if item is None:
            out[i] = -1
            continue
        if isinstance(item, bool) or not isinstance(item, int):
            item = integer_arg(item, "an int or None", "partitions", i)
        if not 0 <= item <= 0x7FFFFFFF:
            raise ValueError(f"partitions[{i}]={item} is not a partition id (0..2**31-1)")
        out[i] = item
    return result


# Every form partitions= takes, for the message refusing another (the array('i') and
# pyarrow forms were left out of one of the two, as if refused).
_PARTITIONS_TAKEN = ("None, an int, a list or tuple of int or None, an array('i') (-1: the "
                     "partitioner's choice) or a pyarrow integer column")


cdef object _arrow_partitions(object column):
    # A pyarrow integer Array or ChunkedArray of partition ids (null: the
    # partitioner's choice) as array('i'), checked as a list of them is.
    import pyarrow
    import pyarrow.compute
    if not isinstance(column, (pyarrow.Array, pyarrow.ChunkedArray)):
        raise TypeError(f"partitions must be {_PARTITIONS_TAKEN}, not "
                        f"{type(column).__name__}")
    if not pyarrow.types.is_integer(column.type):
        raise TypeError(f"partitions: a pyarrow array of {column.type} is not a partition "
                        f"column: expected an integer type")
    try:
        ids = column.cast(pyarrow.int32())
    except pyarrow.ArrowInvalid as exc:
        raise ValueError(f"partitions: {exc}: not a partition id (0..2**31-1)") from None
    lowest = pyarrow.compute.min(ids).as_py()
    if lowest is not None and lowest < 0:
        raise ValueError(f"partitions[{pyarrow.compute.index(ids, lowest).as_py()}]="
                         f"{lowest} is negative")
    ids = ids.fill_null(-1)
    if isinstance(ids, pyarrow.ChunkedArray):
        ids = (pyarrow.concat_arrays(ids.chunks) if ids.num_chunks
               else pyarrow.array([], pyarrow.int32()))
    result = array("i")
    data = ids.buffers()[1]
    if data is not None:
        result.frombytes(memoryview(data)[ids.offset * 4:(ids.offset + len(ids)) * 4])
    return result


def keyed_partitions(keys, Py_ssize_t num_partitions, explicit=None):
    """Each row's partition as the Java client (and send()) places it, in bulk:
    the row's explicit partition if it has one, else murmur2 of its key.

    Args:
        keys: None (no keys), or anything _columns.Rows takes as keys (a list or
            tuple of bytes-like or None, a BinaryColumn, a pyarrow binary or
            string Array or ChunkedArray) or a BinarySource; read in place.
        num_partitions: the topic's partition count.
        explicit: None, or an array('i') as long as keys: the row's partition, or
            -1 where the partitioner chooses (partitions_array()).

    Returns:
        An array('i'): explicit[i] where >= 0, else toPositive(murmur2(key)) %
        num_partitions, else -1 (a row without a key, or with a key that cannot
        be read -- not bytes-like, offsets outside its data: the partitioner
        places it, and appending it raises that error).

    Raises:
        TypeError: keys is of another kind.
        ValueError: num_partitions is not in 1..2**31-1.
    """
    cdef uint32_t count
    cdef BinarySource source = None
    cdef Py_ssize_t i, n = 0  # always set below; 0 only quiets gcc's may-be-uninitialized
    cdef const unsigned char *data
    cdef Py_ssize_t length
    cdef Py_buffer view
    cdef const int[::1] given
    if num_partitions <= 0 or num_partitions > INT32_MAX:
        raise ValueError(f"num_partitions must be in 1..2**31-1, got {num_partitions}")
    count = <uint32_t>num_partitions
    if keys is not None:
        source = _binary_source(keys, "keys", -1, False)
        n = source.length
    if explicit is not None:
        given = explicit
        if source is not None and given.shape[0] != n:
            raise ValueError(f"partitions has {given.shape[0]} elements, keys has {n}")
        n = given.shape[0]
    elif source is None:
        raise TypeError("keyed_partitions needs keys or explicit partitions")
    result = array("i", b"\xff" * (4 * n))
    cdef int[::1] out = result
    i = 0
    while i < n:
        try:
            while i < n:
                if explicit is not None and given[i] >= 0:
                    out[i] = given[i]
                elif source is not None:
                    held = source.get(i, &data, &length, &view)
                    if length >= 0:
                        out[i] = <int>nk_murmur2_partition(data, <size_t>length, count)
                    if held:
                        PyBuffer_Release(&view)
                i += 1
        except (TypeError, ValueError):
            # Row i's key cannot be read: the row stays -1, placed as a row without
            # a key, and its append refuses it with this error -- it fails alone, as
            # a bad key does on a one-partition topic, never hashed.  (The try is
            # entered once per such row, not once per row.)
            i += 1
    return result


def place_unkeyed_rows(Rows rows, int[::1] partitions, explicit, Partitioner partitioner,
                       topic, all_partitions, available_partitions,
                       Py_ssize_t batch_size_bytes, open_batch):
    """send_batch()'s rows without a partition (-1 in `partitions`) get the sticky
    partition send() would give them, row after row, in place.

    The batches are planned here, not appended: each row's bytes are counted
    (Rows.record_bytes) into its partition's planned open batch, and where send()
    would open a new batch the partitioner hears what send() makes it hear --
    on_new_batch() when a row without a key, or (keyed=True) a keyed row, would
    start a batch on the sticky partition, then partition() for the next sticky
    one.  Then every row has a partition, so send_batch() can append each
    partition's rows in bulk and in row order, keyed or not, and the sticky
    partition still changes once per batch.  (The plan assumes the clock does not
    move and no other thread appends meanwhile; either can only end a real batch a
    little before or after the planned one.)

    Args:
        rows: the call's Rows.
        partitions: per row its partition, -1 for the partitioner's sticky choice;
            the -1s are overwritten.
        explicit: None, or per row the caller's partition (-1: none), as
            keyed_partitions() takes it: a row placed by the caller is not the
            partitioner's, as send(partition=p) is not.
        partitioner: the producer's sticky partitioner; all_partitions /
            available_partitions: the topic's, as partition() takes them.
        batch_size_bytes: the accumulator's batch size.
        open_batch: callable(partition) -> (size_bytes, record_count,
            first_timestamp_ms) of that partition's open batch now, or None.
    """
    cdef _BatchPlan plan = _BatchPlan(rows, partitioner, topic, all_partitions,
                                      available_partitions, batch_size_bytes, open_batch)
    cdef Py_ssize_t i
    cdef int p, sticky
    cdef int64_t size
    cdef const int[::1] given
    cdef bint by_caller = explicit is not None
    if by_caller:
        given = explicit
    # The sticky partition as send() would find it (chosen now if it is not yet).
    sticky = plan.sticky()
    for i in range(partitions.shape[0]):
        p = partitions[i]
        if p >= plan.count:
            continue  # no such partition: the row is refused when appended
        if p >= 0:
            size = plan.fits(i, p)
            if size < 0:
                if p == sticky and not (by_caller and given[i] >= 0):
                    partitioner.on_new_batch(topic, p)
                    sticky = -1
                size = plan.new_batch(i, p)
            plan.add(p, size)
            continue
        if sticky < 0:
            sticky = plan.sticky()
        size = plan.fits(i, sticky)
        if size < 0:
            # KIP-480: the row that would start a batch starts it on the next
            # sticky partition (send()'s _append_cold).
            partitioner.on_new_batch(topic, sticky)
            sticky = plan.sticky()
            size = plan.fits(i, sticky)
            if size < 0:
                size = plan.new_batch(i, sticky)
        partitions[i] = sticky
        plan.add(sticky, size)


@cython.final
cdef class _BatchPlan:
    """The open batch each partition would have, row after row, as place_unkeyed_rows
    plans them; owned by its call."""
    cdef Rows rows
    cdef Partitioner partitioner
    cdef object topic, all_partitions, available_partitions, open_batch
    cdef Py_ssize_t batch_size_bytes
    cdef Py_ssize_t count                 # the topic's partitions
    cdef int64_t now_ms                   # "now" for rows without a timestamp
    # Per partition: bytes of its planned open batch (-1: none, -2: not read from
    # the accumulator yet), its records, its first timestamp.
    cdef long long[::1] used
    cdef int[::1] records
    cdef long long[::1] first_ts

    def __cinit__(self, Rows rows, Partitioner partitioner, topic, all_partitions,
                  available_partitions, Py_ssize_t batch_size_bytes, open_batch):
        self.rows, self.partitioner, self.topic = rows, partitioner, topic
        self.all_partitions, self.available_partitions = all_partitions, available_partitions
        self.batch_size_bytes, self.open_batch = batch_size_bytes, open_batch
        self.count = len(all_partitions)
        self.now_ms = <int64_t>(time.time() * 1000)
        self.used = array("q", [-2]) * self.count
        self.records = array("i", bytes(4 * self.count))
        self.first_ts = array("q", bytes(8 * self.count))

    cdef int sticky(self) except -1:
        # The partitioner's sticky partition now, its open batch known.
        cdef int chosen = self.partitioner.partition(self.topic, None, self.all_partitions,
                                                     self.available_partitions)
        if not 0 <= chosen < self.count:
            raise ValueError(f"{type(self.partitioner).__name__} chose partition {chosen}, "
                             f"not one of the topic's {self.count}")
        return chosen

    cdef int64_t fits(self, Py_ssize_t i, int p) except -2:
        # Row i's bytes in p's planned open batch, or -1 when it has none or the
        # row does not fit (a new batch is needed).  A row the encoder will refuse
        # counts as nothing: it takes no room when appended either.
        cdef int64_t size
        if self.used[p] == -2:
            state = self.open_batch(p)
            if state is None:
                self.used[p] = -1
            else:
                self.used[p], self.records[p], self.first_ts[p] = state
        if self.used[p] < 0:
            return -1
        try:
            size = self.rows.record_bytes(i, self.records[p], self.first_ts[p], self.now_ms)
        except (TypeError, ValueError):
            return 0
        return size if self.used[p] + size <= self.batch_size_bytes else -1

    cdef int64_t new_batch(self, Py_ssize_t i, int p) except -2:
        # p's planned open batch starts again with row i (always taken, as the
        # encoder takes any first record); returns the row's bytes.
        self.used[p] = HEADER_SIZE_BYTES
        self.records[p] = 0
        try:
            self.first_ts[p] = self.rows.timestamp_ms(i, self.now_ms)
            return self.rows.record_bytes(i, 0, -1, self.now_ms)
        except (TypeError, ValueError):
            self.first_ts[p] = self.now_ms
            return 0

    cdef void add(self, int p, int64_t size) noexcept:
        self.used[p] += size
        self.records[p] += 1


# -- grouping and answers ------------------------------------------------------------

def group_rows(partitions):
    """Rows grouped by partition, each group in row order (a stable counting sort):
    send_batch() appends a group's rows by these indices, in place.

    Args:
        partitions: each row's partition (-1: none), as partitions_array() takes.

    Returns:
        (order, groups): order, an array('q') of the row indices, group after group;
        groups, a list of (partition, start, count) slices of order, ascending by
        partition (-1 first).

    Raises:
        TypeError, ValueError: as partitions_array().
    """
    given = _partitions_array(partitions)
    cdef int[::1] parts = given
    cdef Py_ssize_t n = parts.shape[0], i, p
    # A counter per partition id up to the largest one given -- but not past `last`:
    # an id far above the row count (a caller's 2**31 - 1) would cost gigabytes of
    # counters for a few rows.  Ids from `last` on share the last counter, and that
    # one group is sorted apart (by comparisons, fine for the few rows it holds).
    cdef Py_ssize_t last = 2 * n + 1024, top = -1
    for i in range(n):
        if parts[i] > top:
            top = parts[i]
    top = min(top, last)
    # starts[p + 1]: where partition p's rows begin in order (p = -1 at slot 0).
    cdef long long[::1] starts = array("q", bytes(8 * (top + 3)))
    for i in range(n):
        starts[min(parts[i], top) + 2] += 1
    for p in range(1, top + 3):
        starts[p] += starts[p - 1]
    groups = [(p - 1, starts[p], starts[p + 1] - starts[p])
              for p in range(top + 2) if starts[p + 1] > starts[p]]
    cdef bint shared = top == last and starts[top + 2] > starts[top + 1]
    order_array = array("q", bytes(8 * n))
    cdef long long[::1] order = order_array
    for i in range(n):
        p = min(parts[i], top) + 1
        order[starts[p]] = i
        starts[p] += 1
    if shared:
        groups.extend(_sort_group(order_array, groups.pop(), given))
    return order_array, groups


def _sort_group(order, group, partitions):
    # group's rows of order, several partitions mixed, sorted by partition in place
    # (a stable sort: each partition's rows stay in row order); its groups.
    _, start, count = group
    rows = sorted(order[start:start + count], key=partitions.__getitem__)
    order[start:start + count] = array("q", rows)
    groups, first = [], 0
    for end in range(1, count + 1):
        if end == count or partitions[rows[end]] != partitions[rows[first]]:
            groups.append((partitions[rows[first]], start + first, end - first))
            first = end
    return groups


ctypedef fused _row_value_t:
    int
    long long


def fill_rows(_row_value_t[::1] out, rows, long long first, long long step):
    """out[rows[k]] = first + k * step for every k: a run of send_batch() rows gets
    its partition (step 0) or its offsets (step 1) at its rows' places.

    rows: a range of step 1, or a buffer of int64 row indices (a slice of
    group_rows' order).  Every index is checked against out."""
    cdef const long long[::1] indices
    cdef Py_ssize_t size = out.shape[0], k, begin, count
    if isinstance(rows, range):
        begin, count = rows.start, len(rows)
        if rows.step != 1 or begin < 0 or begin + count > size:
            raise IndexError(f"rows {rows!r} do not fit {size} values")
        for k in range(count):
            out[begin + k] = <_row_value_t>(first + k * step)
        return
    indices = rows
    for k in range(indices.shape[0]):
        if not 0 <= indices[k] < size:
            raise IndexError(f"row {indices[k]} is outside {size} values")
    for k in range(indices.shape[0]):
        out[indices[k]] = <_row_value_t>(first + k * step)
