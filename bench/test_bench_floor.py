"""The floor (issue 18 item 2): netkafka's client CPU per record, one entry at a time, at
100 B, acks=1, one thread, batch 1 MiB, linger 5 ms, 4 partitions -- send(), produce(),
send_batch() with a list and with a pyarrow binary array.

Each entry runs bench/floor_probe.py in a fresh interpreter against the session's broker
(what it measures and how: its docstring): RECORDS records a round, ROUNDS rounds after a
warm-up.  extra_info holds the median client CPU per record (every thread of the process),
each thread's share by name, the process's system time per record, the load, and the
issue's target for the entry beside it -- reported, not asserted: CPU time on a shared
machine moves with its load (README, "Where each nanosecond goes", has the instruction
counts, which do not).  pytest-benchmark's own time is the probe's whole run.

    .venv/bin/python -m pytest bench/test_bench_floor.py --benchmark-only
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import floor_probe
from netkafka.testing.admin import create_topic

RECORDS = 1_000_000
ROUNDS = int(os.environ.get("NETKAFKA_BENCH_ROUNDS", "5"))
PARTITIONS = 4
PROBE = Path(floor_probe.__file__)
PROBE_TIMEOUT_S = 600
# The targets, ns of client CPU per record.
TARGET_NS = {"send": 100, "produce": 80, "send_batch": 40, "send_batch_arrow": 30}


@pytest.mark.parametrize("mode", list(TARGET_NS))
def test_floor(benchmark, kafka_broker, topic_name, mode):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=PARTITIONS)
    command = [sys.executable, str(PROBE), mode, kafka_broker.bootstrap, topic_name,
               str(RECORDS), str(ROUNDS)]
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(PROBE.parents[1])] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))

    def probe():
        done = subprocess.run(command, capture_output=True, text=True, check=True,
                              timeout=PROBE_TIMEOUT_S, env=environment)
        return json.loads(done.stdout.splitlines()[-1])

    measured = benchmark.pedantic(probe, rounds=1, iterations=1)
    benchmark.group = "floor: client CPU per record, 100 B, acks=1, one thread"
    benchmark.extra_info.update(measured, target_ns_per_record=TARGET_NS[mode],
                                partitions=PARTITIONS)
