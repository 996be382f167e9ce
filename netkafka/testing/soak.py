"""The soak run: a steady load for half an hour while the broker restarts, watching for growth.

    python -m netkafka.testing.soak [--minutes 30] [--restart-every-minutes 5] [--rate 1000]
    make soak                      (SOAK_MINUTES, SOAK_RESTART_MINUTES, SOAK_RATE give them)

A broker of its own (one node, started here) takes a SteadyLoad (netkafka.testing.load) from
a netkafka Producer with the default guarantees (acks=all, idempotence) in this process; the
broker is restarted (SIGTERM, start, ready) every few minutes.  Once a minute the process's
resident memory, open file descriptors and threads are printed, with the load's progress.
At the end the topic is read back by confluent-kafka and checked as the chaos tests check it.

The rule, judged on the samples (each printed):

- Samples are grouped by how many restarts had begun when they were taken.  A sample taken
  while a restart is under way -- from its SIGTERM until every partition has acknowledged a
  record sent after it -- is printed but not judged: connections are being rebuilt.
- The reference is the group after the first restart.  Until then memory legitimately grows:
  the outage of the first restart is when the buffer pool first fills.
- Every later group must stay within the reference: its most threads and its most open file
  descriptors at most the reference's most, its largest RSS at most the reference's largest
  plus RSS_TOLERANCE_BYTES (allocator noise; a leak of a few hundred KiB a minute exceeds it
  within the run).
- And delivery must be exact: nothing failed, every acknowledged record read once, in order.

The exit status is 0 when all of that holds, 1 otherwise (the reasons are printed).
"""
import argparse
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import NamedTuple, Optional, Sequence

from netkafka import Producer
from netkafka.testing.admin import create_topic
from netkafka.testing.broker import Cluster
from netkafka.testing.load import SteadyLoad
from netkafka.testing.reader import read_topic

PARTITIONS = 6
PRODUCER_CONFIG = {"acks": "all", "enable_idempotence": True, "linger_ms": 5}
RSS_TOLERANCE_BYTES = 8 << 20
SAMPLE_EVERY_S = 60.0
# A hang guard: production must resume this long after the broker went down.
RESUME_BOUND_S = 120.0
CLOSE_TIMEOUT_S = 120.0
READ_TIMEOUT_S = 600.0
MIB = 1 << 20


class Sample(NamedTuple):
    """The process and the load at one moment."""

    minute: float
    restarts: int     # restarts begun before this sample
    judged: bool      # False: taken while a restart was under way
    rss_bytes: int
    open_fds: int
    threads: int
    sent: int
    acknowledged: int
    failed: int
    behind_s: float   # time send() blocking has put the load behind its schedule

    def line(self) -> str:
        return (f"minute {self.minute:5.1f}  restarts {self.restarts}  rss {self.rss_bytes / MIB:7.1f} MiB  "
                f"fds {self.open_fds:3d}  threads {self.threads:3d}  sent {self.sent:9d}  "
                f"acked {self.acknowledged:9d}  failed {self.failed}  behind {self.behind_s:5.1f} s"
                + ("" if self.judged else "  (restart under way: not judged)"))


def process_usage() -> tuple[int, int, int]:
    """(RSS bytes, open file descriptors, threads) of this process, from /proc (Linux)."""
    status = Path("/proc/self/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_bytes = int(fields["VmRSS"].split()[0]) * 1024
    threads = int(fields["Threads"])
    open_fds = len(os.listdir("/proc/self/fd")) - 1  # less the one listdir opened
    return rss_bytes, open_fds, threads


def growth(samples: Sequence[Sample], rss_tolerance_bytes: int = RSS_TOLERANCE_BYTES) -> list[str]:
    """The rule of the module's docstring: what grew after the first restart ([] if nothing).

    Raises:
        ValueError: fewer than two judged groups after the first restart (nothing to compare).
    """
    groups: dict[int, list[Sample]] = {}
    for sample in samples:
        if sample.judged and sample.restarts >= 1:
            groups.setdefault(sample.restarts, []).append(sample)
    if len(groups) < 2:
        raise ValueError(f"judged samples after {sorted(groups)} restart(s) only: at least two "
                         f"groups after the first restart are needed (run longer, or restart more often)")
    reference_restarts = min(groups)
    reference = groups.pop(reference_restarts)
    limits = {
        "threads": max(s.threads for s in reference),
        "open_fds": max(s.open_fds for s in reference),
        "rss_bytes": max(s.rss_bytes for s in reference) + rss_tolerance_bytes,
    }
    found = []
    for restarts, group in sorted(groups.items()):
        for field, limit in limits.items():
            worst = max(group, key=lambda s: getattr(s, field))
            if getattr(worst, field) > limit:
                found.append(f"{field} {getattr(worst, field)} at minute {worst.minute:.1f} (after "
                             f"{restarts} restarts) exceeds {limit}, the most after restart "
                             f"{reference_restarts}" + (" plus the tolerance" if field == "rss_bytes" else ""))
    return found


class Restarter:
    """Restarts the broker every restart_every_s on a thread of its own, and notes for each
    restart when production resumed (SteadyLoad.wait_resumed)."""

    def __init__(self, cluster: Cluster, load: SteadyLoad, restart_every_s: float, out):
        self._cluster = cluster  # immutable
        self._load = load  # immutable
        self._every_s = restart_every_s  # immutable
        self._out = out  # immutable
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._begun = 0  # guarded by _lock (written only by the restarter's thread): restarts begun
        self._under_way = False  # guarded by _lock: from SIGTERM until production resumed
        self.problems: list[str] = []  # guarded by _lock
        self._thread = threading.Thread(target=self._run, name="netkafka-soak-restarter", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop restarting; waits for a restart under way to finish."""
        self._stop.set()
        self._thread.join()

    def state(self) -> tuple[int, bool]:
        """(restarts begun, whether one is under way)."""
        with self._lock:
            return self._begun, self._under_way

    def _run(self) -> None:
        started_s = time.monotonic()
        while not self._stop.wait(max(0.0, started_s + (self._begun + 1) * self._every_s - time.monotonic())):
            with self._lock:
                self._begun += 1
                self._under_way = True
                number = self._begun
            node = self._cluster.nodes[0]
            try:
                node.stop()
                # From here on no record can be acknowledged until the broker is back.
                mark = self._load.mark(f"restart {number}")
                node.start()
                node.wait_ready()
                back_s = time.monotonic() - mark.at_s
                resumed_s = self._load.wait_resumed(mark, RESUME_BOUND_S)
            except Exception as exc:  # noqa: BLE001 -- reported and judged, the run goes on
                with self._lock:
                    self.problems.append(f"restart {number}: {exc}")
                    self._under_way = False
                print(f"restart {number}: failed: {exc}", file=self._out, flush=True)
                continue
            with self._lock:
                self._under_way = False
            print(f"restart {number}: broker down at minute {(mark.at_s - started_s) / 60:.1f}, ready "
                  f"again {back_s:.1f} s later; production resumed {resumed_s:.1f} s after it went down",
                  file=self._out, flush=True)


def run(minutes: float, restart_every_minutes: float, rate_per_s: float,
        sample_every_s: float = SAMPLE_EVERY_S, out=sys.stdout) -> int:
    """The soak run (see the module's docstring); returns the exit status."""
    print(f"soak: {minutes:g} min at {rate_per_s:g} records/s, broker restarted every "
          f"{restart_every_minutes:g} min, a sample every {sample_every_s:g} s; pid {os.getpid()}",
          file=out, flush=True)
    with tempfile.TemporaryDirectory(prefix="netkafka-soak-") as directory, \
            Cluster(1, directory=Path(directory) / "kafka") as cluster:
        topic = f"soak-{uuid.uuid4().hex[:8]}"
        create_topic(cluster.bootstrap, topic, partitions=PARTITIONS)
        producer = Producer(bootstrap_servers=cluster.bootstrap, **PRODUCER_CONFIG)
        load = SteadyLoad(producer, topic, rate_per_s, keep_placements=False)
        restarter = Restarter(cluster, load, restart_every_minutes * 60, out)
        samples = []
        try:
            load.start()
            restarter.start()
            started_s = time.monotonic()
            end_s = started_s + minutes * 60
            next_sample_s = started_s
            while next_sample_s <= end_s:
                time.sleep(max(0.0, next_sample_s - time.monotonic()))
                samples.append(_sample(started_s, load, restarter))
                print(samples[-1].line(), file=out, flush=True)
                next_sample_s += sample_every_s
        finally:
            restarter.stop()
            load.stop()
            producer.close(CLOSE_TIMEOUT_S)
        print(f"read back: {load.sent} records sent, reading ...", file=out, flush=True)
        result = load.check(read_topic(cluster.bootstrap, topic, expected_count=load.acknowledged,
                                       timeout_s=READ_TIMEOUT_S))
    problems = list(restarter.problems)
    try:
        problems += growth(samples)
    except ValueError as exc:
        problems.append(str(exc))
    if load.send_errors:
        problems.append(f"send() raised: {load.send_errors[:3]}")
    if load.failed:
        problems.append(f"{load.failed} records failed: {load.failures[:3]}")
    if result.problems:
        problems.append(result.problems)
    print(f"delivery: {result.summary()}", file=out)
    print("soak: " + ("PASS" if not problems else "FAIL\n  " + "\n  ".join(problems)), file=out, flush=True)
    return 0 if not problems else 1


def _sample(started_s: float, load: SteadyLoad, restarter: Restarter) -> Sample:
    restarts, under_way = restarter.state()
    rss_bytes, open_fds, threads = process_usage()
    sent, acknowledged, failed, behind_s = load.progress()
    return Sample(minute=(time.monotonic() - started_s) / 60, restarts=restarts, judged=not under_way,
                  rss_bytes=rss_bytes, open_fds=open_fds, threads=threads, sent=sent,
                  acknowledged=acknowledged, failed=failed, behind_s=behind_s)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m netkafka.testing.soak",
                                     description="Produce for a long time while the broker restarts; "
                                                 "fail if the process grows or a record is lost.")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--restart-every-minutes", type=float, default=5.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="records per second")
    parser.add_argument("--sample-every-seconds", type=float, default=SAMPLE_EVERY_S)
    args = parser.parse_args(argv)
    if min(args.minutes, args.restart_every_minutes, args.rate, args.sample_every_seconds) <= 0:
        parser.error("--minutes, --restart-every-minutes, --rate and --sample-every-seconds must be positive")
    return run(args.minutes, args.restart_every_minutes, args.rate, args.sample_every_seconds)


if __name__ == "__main__":
    sys.exit(main())
