"""The demo against an existing cluster, as a user runs it: a subprocess with stderr a pipe.

The session's broker stands in for the user's cluster (--bootstrap-servers).  Run once
with the independent reader, which must verify every record, and once with
confluent-kafka made unimportable, which must say so, still produce, and skip only the
read-back (the test reads the records back itself).
"""
import os
import re
import subprocess
import sys

import pytest

from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDS = 20_000
# Hides confluent-kafka as if not installed: importing it raises ModuleNotFoundError.
WITHOUT_READER = ("import sys; sys.modules['confluent_kafka'] = None; "
                  "from netkafka.tools.demo import main; main(sys.argv[1:])")


def demo(*args, code=None):
    command = [sys.executable] + (["-c", code] if code else ["-m", "netkafka.tools.demo"])
    env = {k: v for k, v in os.environ.items() if k != "NETKAFKA_BOOTSTRAP"}
    return subprocess.run(command + list(args), cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def test_help_states_the_producer_defaults():
    done = demo("--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for default in ("--batch-size BATCH_SIZE the producer's batch_size in bytes (its default) "
                    "(default: 16384)",
                    "--linger-ms LINGER_MS the producer's linger_ms (its default) (default: 0)",
                    "the producer's acks (default: all)",
                    "--bootstrap-servers HOST:PORT"):
        assert default in text, text


def test_demo_against_an_existing_cluster_verifies_every_record(kafka_broker, topic_name):
    done = demo("--bootstrap-servers", kafka_broker.bootstrap, "--records", str(RECORDS),
                "--record-size", "64", "--partitions", "2", "--linger-ms", "5")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"produced {RECORDS:,} records of 64 bytes" in done.stdout, done.stdout
    for check in ("count", "offsets contiguous", "no duplicates", "sample byte-exact"):
        assert f"ok   {check}" in done.stdout, done.stdout
    # Not a terminal: whole lines, none rewritten in place, the last one at 100%.
    progress = [line for line in done.stderr.splitlines() if line.startswith("producing:")]
    assert "\r" not in done.stderr and progress, done.stderr
    assert progress[-1].startswith(f"producing: {RECORDS:,}/{RECORDS:,} records"), progress


def test_demo_run_again_on_its_topic_verifies_the_records_of_this_run(kafka_broker,
                                                                       topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    for _ in range(2):
        done = demo("--bootstrap-servers", kafka_broker.bootstrap, "--topic", topic_name,
                    "--records", "1000", "--record-size", "16")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "ok   count: 1,000 of 1,000" in done.stdout, done.stdout
        assert "ok   no duplicates" in done.stdout, done.stdout
    # The second run's offsets begin where the first run's ended.
    first = {int(p): int(start) for p, start in re.findall(r"p(\d+): (\d+)\.\.", done.stdout)}
    assert sorted(first) == [0, 1] and sum(first.values()) == 1000, done.stdout
    assert len(read_topic(kafka_broker.bootstrap, topic_name, 2000)) == 2000


def test_demo_without_confluent_kafka_produces_and_says_what_it_skipped(kafka_broker,
                                                                       topic_name):
    done = demo("--bootstrap-servers", kafka_broker.bootstrap, "--topic", topic_name,
                "--records", "500", "--record-size", "16", code=WITHOUT_READER)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "confluent-kafka is not installed (pip install confluent-kafka)" in done.stdout
    assert "not verified" in done.stdout and "ok   count" not in done.stdout, done.stdout
    records = read_topic(kafka_broker.bootstrap, topic_name, 500)
    assert sorted(int.from_bytes(r.value[:8], "big") for r in records) == list(range(500))


@pytest.mark.parametrize("flag, value, minimum", [
    ("--partitions", "0", 1), ("--batch-size", "-5", 0), ("--linger-ms", "-1", 0),
    ("--records", "0", 1), ("--records", "-3", 1), ("--record-size", "7", 8)])
def test_a_value_below_its_minimum_is_refused_naming_the_flag_before_producing(
        kafka_broker, flag, value, minimum):
    done = demo("--bootstrap-servers", kafka_broker.bootstrap, flag, value)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"error: argument {flag}: must be an int >= {minimum}, got {value}" in done.stderr
    assert "Traceback" not in done.stderr and "Kafka broker at" not in done.stdout, done.stdout


def test_partitions_with_an_existing_topic_is_refused_not_ignored(kafka_broker, topic_name):
    done = demo("--bootstrap-servers", kafka_broker.bootstrap, "--topic", topic_name,
                "--partitions", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "error: --partitions applies to the new topic only" in done.stderr, done.stderr
    assert "Kafka broker at" not in done.stdout, done.stdout
