# Types of netkafka/record/_legacy.pyx (compiled): the message set v0/v1 builder.
from typing import Optional, Sequence

from typing_extensions import Self, final

from netkafka.record._compression import Compressor
from netkafka.record._pool import PooledBatch, PooledBuffer

_Bytes = bytes | bytearray | memoryview

@final
class LegacyMessageSetBuilder(PooledBatch):
    def __new__(cls, magic: int, buffer: PooledBuffer, batch_size_bytes: int,
                max_request_size_bytes: int,
                compressor: Optional[Compressor] = ...) -> Self: ...
    # 0 or 1: the message format version.
    @property
    def magic(self) -> int: ...
    # The record's offset in the set, or -1: it does not fit, open a new set.
    def append(self, key: Optional[_Bytes], value: Optional[_Bytes],
               headers: Optional[Sequence[object]] = ...,
               timestamp_ms: Optional[int] = ...) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def is_full(self) -> bool: ...
