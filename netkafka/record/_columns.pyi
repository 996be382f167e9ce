# Types of netkafka/record/_columns.pyx (compiled): BinaryColumn, exported by netkafka.
from typing import Any, Optional

class BinaryColumn:
    def __init__(self, data: Any, offsets: Any, validity: Optional[Any] = ..., *,
                 offset_width_bytes: Optional[int] = ..., length: Optional[int] = ...,
                 first: int = ...) -> None: ...
    def __len__(self) -> int: ...
    @staticmethod
    def from_arrow(array: Any) -> BinaryColumn: ...
