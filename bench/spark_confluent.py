"""The confluent-kafka peer of bench/test_bench_spark.py: a foreachPartition sink on librdkafka.

Written the way a careful user would write it, so that netkafka is measured against a fair
peer: one Producer per Python worker process, reused by every task that worker runs (a
producer per partition would measure librdkafka's start-up instead), delivery reports for
failures only (delivery.report.only.error: no Python call per acknowledged record), poll() to
serve them while producing, flush() at the end of the partition, and a raised error if any
record failed, so that Spark retries the task.

Imported by name on the executors (the benchmark puts bench/ on their PYTHONPATH), so that
the producer cache below lives as long as the worker process.
"""
import os
from typing import Callable, Iterable, Mapping

# (producer, its failed deliveries) of this worker process by configuration; owned by the
# worker's task thread (PySpark runs one task at a time per worker process), which is also
# where librdkafka's reports run, from poll() and flush().  Keyed by pid as well: a forked
# child must not use its parent's librdkafka threads.
_producers: dict = {}
# Records between two poll(0) calls, which serve delivery reports.
POLL_EVERY = 10_000
FLUSH_TIMEOUT_S = 120.0


def _producer(config: Mapping[str, object]):
    from confluent_kafka import Producer

    key = (os.getpid(), tuple(sorted(config.items())))
    entry = _producers.get(key)
    if entry is None:
        failures = []

        def on_delivery(error, _message):
            failures.append(error)

        producer = Producer({**config, "delivery.report.only.error": True,
                             "on_delivery": on_delivery})
        entry = _producers[key] = (producer, failures)
    return entry


def partition_sink(topic: str, config: Mapping[str, object],
                   value: str = "value") -> Callable[[Iterable], None]:
    """A function for df.foreachPartition that sends each row's `value` column to `topic`."""
    config = dict(config)

    def send_partition(rows: Iterable) -> None:
        producer, failures = _producer(config)
        failures.clear()  # a failed task raised already; its retry starts afresh
        produce = producer.produce
        for index, row in enumerate(rows):
            while True:
                try:
                    produce(topic, row[value])
                    break
                except BufferError:  # its queue is full: serve reports, then retry
                    producer.poll(0.001)
            if index % POLL_EVERY == 0:
                producer.poll(0)
        remaining = producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            raise RuntimeError(f"confluent-kafka: {remaining} records to {topic!r} not "
                               f"delivered within {FLUSH_TIMEOUT_S:.0f} s")
        if failures:
            raise RuntimeError(f"confluent-kafka: {len(failures)} records to {topic!r} failed, "
                               f"the first with {failures[0]}")

    return send_partition
