"""netkafka: a Kafka producer for Python whose hot paths are native."""
from netkafka._native import load_native_modules
from netkafka._version import __version__

_NATIVE = load_native_modules()

from netkafka.errors import (BackpressureTimeoutError,  # noqa: E402 -- after the native check
                             KafkaConnectionError, KafkaError, KafkaTimeoutError,
                             ProducerClosedError, RecordDroppedError, RecordSpooledError,
                             SentBeforeForkError, SerializationError, UndeliveredRecordsError,
                             WalError)
from netkafka.producer.batch_send import BatchSendResult  # noqa: E402
from netkafka.producer._futures import FutureRecordMetadata, RecordMetadata  # noqa: E402
from netkafka.record._columns import BinaryColumn  # noqa: E402
from netkafka.producer.producer import KafkaProducer, Producer  # noqa: E402
from netkafka.producer.replay import ReplayReport  # noqa: E402

__all__ = [
    "BackpressureTimeoutError",
    "BatchSendResult",
    "BinaryColumn",
    "FutureRecordMetadata",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaProducer",
    "KafkaTimeoutError",
    "Producer",
    "ProducerClosedError",
    "RecordDroppedError",
    "RecordMetadata",
    "RecordSpooledError",
    "ReplayReport",
    "SentBeforeForkError",
    "SerializationError",
    "UndeliveredRecordsError",
    "WalError",
]
