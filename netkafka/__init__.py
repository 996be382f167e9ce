"""netkafka: a Kafka producer for Python whose hot paths are native."""
from netkafka._native import load_native_modules
from netkafka._version import __version__

_NATIVE = load_native_modules()

from netkafka.errors import (BackpressureTimeoutError,  # noqa: E402 -- after the native check
                             KafkaConnectionError, KafkaError, KafkaTimeoutError,
                             ProducerClosedError, ProducerFencedError, RecordDroppedError,
                             SentBeforeForkError, SerializationError,
                             TransactionAbortedError, TransactionAbortRequiredError,
                             TransactionStateError, UndeliveredRecordsError)
from netkafka.producer.batch_send import BatchSendResult  # noqa: E402
from netkafka.producer._futures import FutureRecordMetadata, RecordMetadata  # noqa: E402
from netkafka.producer.offsets import (ConsumerGroupMetadata,  # noqa: E402
                                       OffsetAndMetadata, TopicPartition)
from netkafka.record._columns import BinaryColumn  # noqa: E402
from netkafka.producer.producer import KafkaProducer, Producer  # noqa: E402

__all__ = [
    "BackpressureTimeoutError",
    "BatchSendResult",
    "BinaryColumn",
    "ConsumerGroupMetadata",
    "FutureRecordMetadata",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaProducer",
    "KafkaTimeoutError",
    "OffsetAndMetadata",
    "Producer",
    "ProducerClosedError",
    "ProducerFencedError",
    "RecordDroppedError",
    "RecordMetadata",
    "SentBeforeForkError",
    "SerializationError",
    "TopicPartition",
    "TransactionAbortRequiredError",
    "TransactionAbortedError",
    "TransactionStateError",
    "UndeliveredRecordsError",
]
