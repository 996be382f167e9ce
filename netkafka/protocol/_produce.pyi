# Types of netkafka/protocol/_produce.pyx (compiled): the Produce request encoder and
# response decoder.
import uuid
from collections.abc import Sequence
from typing import Optional

from typing_extensions import final

from netkafka.protocol.framing import Node

PRODUCE_VERSIONS: tuple[int, int]
PRODUCE_LEGACY_VERSIONS: tuple[int, int]
PRODUCE_FLEXIBLE_VERSION: int
PRODUCE_TOPIC_ID_VERSION: int

@final
class PartitionProduceResponse:
    @property
    def partition(self) -> int: ...
    @property
    def error_code(self) -> int: ...
    @property
    def base_offset(self) -> int: ...
    @property
    def log_append_time_ms(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    # (batch_index, message or None) of the records that failed the batch.
    @property
    def record_errors(self) -> tuple[tuple[int, Optional[str]], ...]: ...
    @property
    def error_message(self) -> Optional[str]: ...
    @property
    def leader_id(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...

@final
class TopicProduceResponse:
    # None from v13, which names topics by id.
    @property
    def name(self) -> Optional[str]: ...
    @property
    def topic_id(self) -> Optional[uuid.UUID]: ...
    @property
    def partitions(self) -> list[PartitionProduceResponse]: ...

@final
class ProduceResponse:
    @property
    def topics(self) -> list[TopicProduceResponse]: ...
    @property
    def throttle_time_ms(self) -> int: ...
    @property
    def node_endpoints(self) -> list[Node]: ...

def decode_produce_response(data: bytes | bytearray | memoryview,
                            version: int) -> ProduceResponse: ...

def wire_bytes(batch: bytes | bytearray | memoryview | tuple[memoryview, ...]) -> int: ...

def encode_produce_request(
        correlation_id: int, client_id: Optional[str], version: int, acks: int,
        timeout_ms: int, topic_data: dict[str, Sequence[tuple[int, bytes | bytearray | memoryview
                                              | tuple[memoryview, ...]]]],
        transactional_id: Optional[str] = ...,
        topic_ids: Optional[dict[str, uuid.UUID]] = ...) -> list[bytearray | memoryview]: ...
