"""A Spark job that emits a DataFrame to Kafka with netkafka.spark, in local mode.

Against the project's local broker:

    .venv/bin/python -m netkafka.testing.broker start      # prints 127.0.0.1:PORT last
    .venv/bin/python examples/spark_emit.py --bootstrap 127.0.0.1:PORT
    .venv/bin/python -m netkafka.testing.broker stop

It builds --rows rows (a key among 1,000 and a 100-byte value), creates the topic,
sends the rows through the chosen path (--path arrow, pandas or sink), prints what
the delivery reports say and how long the job took, and with --verify
reads the topic back with the independent reader (confluent-kafka) and counts this
run's records (an existing --topic's records of earlier runs are left out).
"""
import argparse
import os
import sys
import time
import uuid
from typing import Optional

from pyspark.sql import SparkSession

from netkafka import spark as nks
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import end_offsets, read_topic


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("NETKAFKA_BOOTSTRAP"),
                        help="host:port of the broker (default: $NETKAFKA_BOOTSTRAP)")
    parser.add_argument("--topic", default=None, help="default: a new spark-emit-* topic")
    parser.add_argument("--partitions", type=int, default=4, help="of a new topic")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--spark-partitions", type=int, default=4)
    parser.add_argument("--path", choices=("arrow", "pandas", "sink"), default="arrow")
    parser.add_argument("--provenance", action="store_true",
                        help="add the Spark task provenance headers")
    parser.add_argument("--verify", action="store_true",
                        help="read the topic back and count this run's records")
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error("--bootstrap (or $NETKAFKA_BOOTSTRAP) is required")
    topic = args.topic or f"spark-emit-{uuid.uuid4().hex[:8]}"
    if args.topic is None:
        create_topic(args.bootstrap, topic, partitions=args.partitions)
    # Where this run's records will begin: an existing topic may hold earlier ones.
    start_offsets = end_offsets(args.bootstrap, topic) if args.verify else {}

    # The Python workers run this interpreter, which has netkafka.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("netkafka-spark-emit")
             .config("spark.ui.enabled", "false")
             # Where the producers go: read on the driver, shipped to the executors.
             .config(nks.CONF_PREFIX + "bootstrap.servers", args.bootstrap)
             .config(nks.CONF_PREFIX + "compression.type", "lz4")
             .getOrCreate())
    try:
        rows = spark.range(0, args.rows, numPartitions=args.spark_partitions).selectExpr(
            "cast(concat('user-', cast(id % 1000 as string)) as binary) as key",
            "cast(concat(lpad(cast(id as string), 12, '0'), repeat('.', 88)) as binary) "
            "as value")
        started = time.perf_counter()
        if args.path == "sink":
            # Raises (and Spark retries the task) if any record of a partition fails.
            rows.foreachPartition(nks.partition_sink(topic, key="key", value="value",
                                                     provenance=args.provenance))
            delivered, failed = args.rows, 0
        else:
            make = nks.arrow_emitter if args.path == "arrow" else nks.pandas_emitter
            emit = make(topic, key="key", value="value", provenance=args.provenance)
            mapped = (rows.mapInArrow(emit, emit.schema) if args.path == "arrow"
                      else rows.mapInPandas(emit, emit.schema))
            totals = mapped.groupBy().sum("delivered", "failed").first()
            assert totals is not None  # a global aggregate always has its one row
            delivered, failed = totals[0] or 0, totals[1] or 0
        seconds = time.perf_counter() - started
    finally:
        spark.stop()
    # The session's first job: the wall time includes Spark starting its Python
    # workers, so this is no benchmark (bench/ has one).
    print(f"{args.path}: {delivered} rows delivered, {failed} failed, to {topic!r} in "
          f"{seconds:.1f} s, Spark's start-up of its workers included")
    if args.verify:
        records = read_topic(args.bootstrap, topic, args.rows, start_offsets=start_offsets)
        print(f"read back: {len(records)} records of this run")
        return 0 if len(records) == args.rows and not failed else 1
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
