# Types of netkafka/producer/producer.py for type checkers and IDEs: its public surface,
# with the keyword arguments spelled out (ProducerSettings), since the class itself
# takes **configs and checks them at run time (netkafka.config.ProducerConfig).
# tests/test_typing.py keeps this stub's names equal to the class's public ones.
from types import TracebackType
from typing import Any, Optional, Sequence, Union

from typing_extensions import Self, Unpack

from netkafka.config import ProducerConfig
from netkafka.producer._accumulator import ProducerCore
from netkafka.producer._settings_types import ProducerSettings
from netkafka.producer.batch_send import BatchSendResult

class Producer(ProducerCore):
    config: ProducerConfig
    def __init__(self, **configs: Unpack[ProducerSettings]) -> None: ...
    def send_batch(self, topic: str, values: Any, keys: Any = ...,
                   headers: Optional[Sequence[Any]] = ...,
                   partitions: Union[None, int, Sequence[int]] = ...,
                   timestamps_ms: Any = ...) -> BatchSendResult: ...
    def flush(self, timeout: Optional[float] = ...) -> None: ...
    def close(self, timeout: Optional[float] = ...) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: Optional[type[BaseException]],
                 exc: Optional[BaseException], traceback: Optional[TracebackType]) -> None: ...
    def partitions_for(self, topic: str) -> set[int]: ...
    def metrics(self) -> dict[str, dict[str, Any]]: ...
    def on_metadata(self, snapshot: Any, moved: Any) -> None: ...

KafkaProducer = Producer
