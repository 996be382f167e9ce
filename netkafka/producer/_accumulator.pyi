# Types of netkafka/producer/_accumulator.pyx (compiled): the part of it Producer
# inherits and users call.  The accumulator's internals are typed in their .pyx.
from typing import Optional, Sequence

from netkafka.producer._futures import FutureRecordMetadata

Headers = Optional[Sequence[tuple[str, Optional[bytes]]]]

class ProducerCore:
    # context: bytes the write-ahead log keeps with the record (wal_dir only).
    def send(self, topic: str, value: object = ..., key: object = ...,
             headers: Headers = ..., partition: Optional[int] = ...,
             timestamp_ms: Optional[int] = ...,
             context: Optional[bytes] = ...) -> FutureRecordMetadata: ...
    def produce(self, topic: str, value: object = ..., key: object = ...,
                headers: Headers = ..., partition: Optional[int] = ...,
                timestamp_ms: Optional[int] = ..., context: Optional[bytes] = ...) -> None: ...
