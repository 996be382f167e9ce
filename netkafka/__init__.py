"""netkafka: a Kafka producer for Python whose hot paths are native."""
from netkafka._native import load_native_modules

_NATIVE = load_native_modules()

from netkafka.accumulator import ProducerClosedError  # noqa: E402 -- after the native check
from netkafka.backoff import BackpressureTimeoutError, RecordDroppedError  # noqa: E402
from netkafka.connection import KafkaTimeoutError  # noqa: E402
from netkafka.errors import KafkaError  # noqa: E402
from netkafka._futures import FutureRecordMetadata, RecordMetadata  # noqa: E402
from netkafka.producer import (KafkaProducer, Producer, SentBeforeForkError,  # noqa: E402
                               SerializationError)

__all__ = [
    "BackpressureTimeoutError",
    "FutureRecordMetadata",
    "KafkaError",
    "KafkaProducer",
    "KafkaTimeoutError",
    "Producer",
    "ProducerClosedError",
    "RecordDroppedError",
    "RecordMetadata",
    "SentBeforeForkError",
    "SerializationError",
]

__version__ = "0.1.0"
