"""Memory per Python client at 100 B: peak RSS, RSS growth, Python blocks and bytes per
pending record -- each client in a fresh interpreter (memory_probe.py says what is measured
and how), against the session's broker.  pytest-benchmark's time is the probe's whole run.

    .venv/bin/python -m pytest bench/test_bench_e2e_memory.py --benchmark-only
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import e2e_results
import memory_probe
import peers
from netkafka.testing.admin import create_topic

RECORDS = 100_000
PENDING = 5_000  # 100 B records: about 0.6 MB, one batch (1 MiB) per partition at most
PARTITIONS = 3
PROBE = Path(memory_probe.__file__)
PROBE_TIMEOUT_S = 600

CLIENT_MODES = (
    ("netkafka", "send"), ("netkafka", "produce"), ("netkafka", "send_batch"),
    ("confluent-kafka", "error_only"), ("confluent-kafka", "callback"),
    ("kafka-python", "send"), ("aiokafka", "send"),
)


@pytest.mark.parametrize("client, mode", CLIENT_MODES, ids=[f"{c}-{m}" for c, m in CLIENT_MODES])
def test_memory(benchmark, kafka_broker, topic_name, client, mode):
    bootstrap = kafka_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    benchmark.group = f"memory, {RECORDS} records of 100 B"
    outcome = []

    def probe():
        done = subprocess.run(
            [sys.executable, str(PROBE), client, mode, bootstrap, topic_name, str(RECORDS),
             str(PENDING)], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"memory probe of {client} {mode} failed:\n{done.stderr[-3000:]}")
        outcome.append(json.loads(done.stdout.strip().splitlines()[-1]))

    try:
        benchmark.pedantic(probe, rounds=1, iterations=1)
        e2e_results.record_memory(benchmark, outcome[0])
        # the warm-up, the measured run, the second producer's first record and its queue
        sent = memory_probe.WARMUP_RECORDS + RECORDS + 1 + PENDING
        assert peers.acknowledged_records(bootstrap, topic_name) == sent
    finally:
        peers.delete_topic(bootstrap, topic_name)
