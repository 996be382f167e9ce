"""Proof by killing: a producer at steady load SIGKILLed again and again, restarted on
the same WAL directory each time, and the topic read back by confluent-kafka.

Each run of tests/wal_loader.py replays what the previous one left, then sends
records b"<run>:<i>" (keyed and unkeyed, acks='all', several partitions) until it is
killed at a random moment -- while replaying, sealing, with requests on the wire,
writing DONE entries; a kill lands where it lands.  A last run sends a few records,
flushes and closes.  Then every record whose send() returned must be in the topic
exactly once, and each partition must hold its records in send order; records sent
but not yet returned when the kill came may be there too, once.

NETKAFKA_WAL_KILLS sets the kills per fsync mode (`make wal-kill` runs 200), and
NETKAFKA_WAL_RESTARTS the broker restarts during a replay (`make wal-kill` runs 20).  A
SIGKILL kills the process, not the machine: the page cache keeps what was written
to the mappings, and shared memory the images "interval" stages its segments in, so
"never" and "interval" must lose nothing here either (what they may lose to a power
cut is not what this can show).
"""
import collections
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import kill_progress
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
KILLS = int(os.environ.get("NETKAFKA_WAL_KILLS", "20"))
RESTARTS = int(os.environ.get("NETKAFKA_WAL_RESTARTS", "2"))
PARTITIONS = 4
LAST_RUN_RECORDS = 100


class Runs:
    """The runs of wal_loader.py on one directory, and what each returned from send()."""

    def __init__(self, bootstrap, topic, directory, fsync, rng):
        self.bootstrap, self.topic, self.fsync, self.rng = bootstrap, topic, fsync, rng
        self.wal_dir = directory / "wal"
        self.progress = directory / "progress"
        self.returned = {}  # run -> sends that returned before it died

    def start(self, stop=None):
        run = str(len(self.returned))
        kill_progress.reset(self.progress)
        command = [sys.executable, os.path.join(HERE, "wal_loader.py"), self.bootstrap,
                   self.topic, str(self.wal_dir), self.fsync, str(self.progress), run]
        if stop is not None:
            command.append(str(stop))
        return run, subprocess.Popen(command, cwd=REPO, env=CHILD_ENV, stderr=subprocess.PIPE)

    def run_and_kill(self):
        run, child = self.start()
        try:
            deadline = time.monotonic() + 120
            if self.rng.random() < 0.25:
                # Killed early: while it imports, opens the WAL or replays.
                time.sleep(self.rng.uniform(0.0, 1.5))
            else:
                while self.read_progress()[1] < 100:
                    assert child.poll() is None, child.stderr.read().decode()
                    assert time.monotonic() < deadline, "the loader never got going"
                    time.sleep(0.01)
                time.sleep(self.rng.uniform(0.0, 0.5))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            stderr = child.stderr.read().decode()
            child.stderr.close()
        assert child.returncode == -signal.SIGKILL, stderr
        self.returned[run] = self.read_progress()[1]

    def finish(self):
        run, child = self.start(stop=LAST_RUN_RECORDS)
        _, stderr = child.communicate(timeout=300)
        assert child.returncode == 0, stderr.decode()
        self.returned[run] = LAST_RUN_RECORDS

    def logged_about(self, records):
        """The runs' log lines that are not about one replayed record, and those about
        records (wal_loader.py's logs)."""
        named = tuple(f"replayed {run}:{i}:" for run, i in records)
        lines = []
        for run in self.returned:
            path = f"{self.progress}.{run}.log"
            if os.path.exists(path):
                with open(path) as log:
                    lines += [line for line in log if " root INFO replayed " not in line
                              or any(name in line for name in named)]
        return "".join(lines[-400:])

    def read_progress(self):
        return kill_progress.read(self.progress)

    def check_topic(self):
        """Every returned send exactly once, partitions in send order; returns how
        many records the topic holds."""
        # The last run flushed and closed: the topic is complete, read to its end.
        records = read_topic(self.bootstrap, self.topic, timeout_s=120)
        sent = [tuple(int(part) for part in r.value.split(b":")) for r in records]
        duplicated = [s for s, n in collections.Counter(sent).items() if n > 1]
        assert not duplicated, f"{len(duplicated)} records twice, e.g. {duplicated[:5]}"
        present = set(sent)
        lost = [(int(run), i) for run, count in self.returned.items() for i in range(count)
                if (int(run), i) not in present]
        assert not lost, (f"{len(lost)} returned sends missing, e.g. {lost[:5]}; what the "
                          f"runs logged of them:\n{self.logged_about(lost[:5])}")
        by_partition = collections.defaultdict(list)
        for record, key in sorted(zip(records, sent), key=lambda p: (p[0].partition,
                                                                      p[0].offset)):
            by_partition[record.partition].append(key)
        for partition, keys in by_partition.items():
            assert keys == sorted(keys), f"partition {partition} is not in send order"
        return len(records)


@pytest.mark.parametrize("fsync, kills", [("always", KILLS), ("interval", max(1, KILLS // 4)),
                                          ("never", max(1, KILLS // 4))])
def test_a_producer_killed_again_and_again_loses_and_duplicates_nothing(
        kafka_broker, topic_name, tmp_path, fsync, kills):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=PARTITIONS)
    runs = Runs(kafka_broker.bootstrap, topic_name, tmp_path, fsync, random.Random(fsync))
    for _ in range(kills):
        runs.run_and_kill()
    runs.finish()
    assert runs.check_topic() >= sum(runs.returned.values())


def test_a_broker_restart_during_replay_loses_and_duplicates_nothing(
        failover_cluster, topic_name, tmp_path):
    create_topic(failover_cluster.bootstrap, topic_name, partitions=PARTITIONS,
                 replication_factor=3)
    runs = Runs(failover_cluster.bootstrap, topic_name, tmp_path, "always", random.Random(7))
    for restart in range(RESTARTS):
        node = failover_cluster.nodes[restart % len(failover_cluster.nodes)]
        runs.run_and_kill()
        # The next run replays while a broker goes down and comes back.
        run, child = runs.start(stop=LAST_RUN_RECORDS)
        node.kill()
        time.sleep(1.0)
        node.restart()
        _, stderr = child.communicate(timeout=300)
        assert child.returncode == 0, stderr.decode()
        runs.returned[run] = LAST_RUN_RECORDS
    assert runs.check_topic() >= sum(runs.returned.values())
