# Types of netkafka/record/_compression.pyx (compiled): its public names.
from typing import Optional

CODEC_NAMES: tuple[str, ...]
# libzstd's level range, known once libzstd is resolved at import.
ZSTD_MIN_LEVEL: Optional[int]
ZSTD_MAX_LEVEL: Optional[int]

def codec_id(codec: Optional[str]) -> int: ...
