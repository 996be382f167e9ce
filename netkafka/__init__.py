"""netkafka: a Kafka producer for Python whose hot paths are native."""
from netkafka._native import load_native_modules
from netkafka._version import __version__

_NATIVE = load_native_modules()

from netkafka.errors import (BackpressureTimeoutError,  # noqa: E402 -- after the native check
                             KafkaConfigurationError, KafkaConnectionError, KafkaError,
                             KafkaTimeoutError, ProducerClosedError, ProducerFencedError,
                             RecordDroppedError, RecordInInvalidBatchError, RecordKeptError,
                             RecordSpooledError, SentBeforeForkError, SerializationError,
                             TransactionAbortedError, TransactionAbortRequiredError,
                             TransactionStateError,
                             UndeliveredRecordsError, WalError)
from netkafka.producer.batch_send import BatchSendResult  # noqa: E402
from netkafka.producer._futures import (FutureRecordMetadata, RecordMetadata,  # noqa: E402
                                        TopicPartition)
from netkafka.producer.interceptors import ProducerRecord  # noqa: E402
from netkafka.producer.offsets import ConsumerGroupMetadata, OffsetAndMetadata  # noqa: E402
# kafka-python 3 exports its serializers from the package: `from kafka import
# JsonSerializer` becomes `from netkafka import JsonSerializer`.
from netkafka.serializer import (DefaultSerializer, Deserializer,  # noqa: E402
                                 JsonSerializer, Serializer)
from netkafka.record._columns import BinaryColumn  # noqa: E402
from netkafka.producer.producer import KafkaProducer, Producer  # noqa: E402
from netkafka.producer.replay import ReplayReport  # noqa: E402

__all__ = [
    "BackpressureTimeoutError",
    "BatchSendResult",
    "BinaryColumn",
    "ConsumerGroupMetadata",
    "DefaultSerializer",
    "Deserializer",
    "FutureRecordMetadata",
    "JsonSerializer",
    "KafkaConnectionError",
    "KafkaConfigurationError",
    "KafkaError",
    "KafkaProducer",
    "KafkaTimeoutError",
    "OffsetAndMetadata",
    "Producer",
    "ProducerClosedError",
    "ProducerFencedError",
    "ProducerRecord",
    "RecordDroppedError",
    "RecordInInvalidBatchError",
    "RecordMetadata",
    "RecordKeptError",
    "RecordSpooledError",
    "ReplayReport",
    "SentBeforeForkError",
    "SerializationError",
    "Serializer",
    "TopicPartition",
    "TransactionAbortRequiredError",
    "TransactionAbortedError",
    "TransactionStateError",
    "UndeliveredRecordsError",
    "WalError",
]
