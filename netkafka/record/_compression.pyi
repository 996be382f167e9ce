# Types of netkafka/record/_compression.pyx (compiled): its public names.
from typing import Optional

from typing_extensions import Self, final

CODEC_NAMES: tuple[str, ...]
# libzstd's level range, known once libzstd is resolved at import.
ZSTD_MIN_LEVEL: Optional[int]
ZSTD_MAX_LEVEL: Optional[int]

def codec_id(codec: Optional[str]) -> int: ...

@final
class Compressor:
    def __new__(cls, codec: Optional[str | int], level: Optional[int] = ...) -> Self: ...
    # CODEC_* of this compressor.
    @property
    def codec(self) -> int: ...
    # The codec level in use; 0 for none and snappy, which have none.
    @property
    def level(self) -> int: ...
    def compress(self, data: bytes | bytearray | memoryview) -> bytes: ...
    def max_compressed_size(self, n: int) -> int: ...
