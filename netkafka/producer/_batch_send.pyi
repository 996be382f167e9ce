# Types of netkafka/producer/_batch_send.pyx (compiled): send_batch()'s bulk placement.
from array import array
from typing import Any, Callable, Optional, Union

from netkafka.producer._partitioner import Partitioner

def partitions_array(partitions: Union[list[Optional[int]], tuple[Optional[int], ...],
                                       array[int]]) -> array[int]: ...
# keys: anything _columns.Rows takes as keys, or a BinarySource.
def keyed_partitions(keys: Any, num_partitions: int,
                     explicit: Optional[array[int]] = ...) -> array[int]: ...
# rows: a _columns.Rows; open_batch(partition) -> (size_bytes, record_count,
# first_timestamp_ms) of that partition's open batch, or None.
def place_unkeyed_rows(rows: Any, partitions: array[int], explicit: Optional[array[int]],
                       partitioner: Partitioner, topic: str, all_partitions: Any,
                       available_partitions: Any, batch_size_bytes: int,
                       open_batch: Callable[[int], Optional[tuple[int, int, Optional[int]]]],
                       ) -> None: ...
# (order, groups): row indices group after group, and (partition, start, count) slices.
def group_rows(partitions: Union[list[Optional[int]], tuple[Optional[int], ...], array[int]],
               ) -> tuple[array[int], list[tuple[int, int, int]]]: ...
# out: an int or int64 buffer; rows: a range of step 1 or a buffer of int64 indices.
def fill_rows(out: Any, rows: Any, first: int, step: int) -> None: ...
