"""examples/spark_emit.py, run as a user runs it (its own Spark in local mode): --verify
on an existing topic counts the records of this run only."""
import os
import subprocess
import sys
from pathlib import Path

from netkafka import Producer
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "spark_emit.py"
ROWS = 300
EARLIER = 50


def test_verify_on_a_topic_of_an_earlier_run_counts_this_runs_records(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    producer = Producer(bootstrap_servers=kafka_broker.bootstrap)
    try:
        for sequence in range(EARLIER):
            producer.send(topic_name, b"an earlier run's %d" % sequence)
        producer.flush()
    finally:
        producer.close()
    done = subprocess.run([sys.executable, str(EXAMPLE), "--bootstrap", kafka_broker.bootstrap,
                           "--topic", topic_name, "--rows", str(ROWS), "--spark-partitions", "2",
                           "--verify"],
                          capture_output=True, text=True, timeout=300,
                          # this checkout's netkafka, whatever is installed
                          env={**os.environ, "PYTHONPATH": str(EXAMPLE.parent.parent)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"read back: {ROWS} records of this run" in done.stdout, done.stdout
    assert len(read_topic(kafka_broker.bootstrap, topic_name, EARLIER + ROWS)) == EARLIER + ROWS
