"""A user's typed script: mypy --strict must pass on it (make test runs mypy).

Nothing here runs in the test suite; it is checked, not executed.  Each line uses the
public surface as the README documents it, so that a wrong stub fails the check.
"""
from typing import Optional

import netkafka
from netkafka import FutureRecordMetadata, KafkaProducer, Producer, RecordMetadata
from netkafka.producer._settings_types import ProducerSettings


def on_success(metadata: RecordMetadata) -> None:
    print(metadata.topic, metadata.partition, metadata.offset, metadata.topic_partition)


def on_error(error: BaseException) -> None:
    print("failed:", error)


def produce(bootstrap: str) -> int:
    settings: ProducerSettings = {"bootstrap_servers": bootstrap, "acks": "all",
                                  "linger_ms": 5, "compression_type": "zstd"}
    with Producer(**settings) as producer:
        future: FutureRecordMetadata = producer.send("events", b"value", key=b"key",
                                                     headers=[("trace", b"1")])
        future.add_callback(on_success).add_errback(on_error)
        metadata: RecordMetadata = future.get(timeout=10)
        producer.produce("events", b"fire and forget")
        result = producer.send_batch("events", [b"a", b"b"], keys=[b"k", None]).get(10)
        by_column = producer.send_batch("events", [b"a", b"b"],
                                        headers={"source": [b"web", None]},
                                        partitions=[0, None]).get(10)
        failed: int = result.failed_count + by_column.failed_count
        offsets = result.offsets()
        partitions: set[int] = producer.partitions_for("events")
        producer.flush(timeout=30)
        metrics = producer.metrics()
        print(failed, offsets[0], partitions, metrics and metrics["netkafka"],
              producer.bootstrap_connected(), producer.config["linger_ms"])
    return metadata.offset


def legacy_name(bootstrap: str) -> Optional[RecordMetadata]:
    producer = KafkaProducer(bootstrap_servers=[bootstrap], value_serializer=str.encode,
                             retries=3)
    try:
        return producer.send("events", "text").get(timeout=10)
    except netkafka.KafkaTimeoutError:
        return None
    finally:
        producer.close()
