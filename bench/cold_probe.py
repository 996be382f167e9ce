"""What Python costs when it runs with the CPU's caches flushed, as netkafka's per-batch and
per-request code does at large records, in a process of its own:

    python bench/cold_probe.py machine [CALLS]
    python bench/cold_probe.py batch BOOTSTRAP TOPIC RECORD_SIZE RECORDS [ROUNDS]

machine (no broker): a small method of the sender's shape (a lock round, a few attribute
updates, a counter, a dict-of-deques queue; about 80 bytecodes in two calls) timed warm,
then on its first and second call after an 8 MiB copy (more than this machine's 2 MiB L2),
CALLS times each (default 2,000); p50 and p90 of each, in ns of wall time.

batch: the caller's per-batch path in place.  send() of RECORDS values of RECORD_SIZE bytes
(the throughput settings, bench/peers.py's NetkafkaRunner; the 1 MiB row's request limits
from 1 MiB on, when TOPIC must not exist yet), ROUNDS times (default 3) after a warm-up, under
cProfile on the calling thread only, timed by that thread's CPU clock (what the process is
charged; cProfile adds its own fraction of a microsecond per call).  Prints the batches sent,
the caller's CPU per record and per batch, and the functions with the most own time (time
in their own code, not in the functions they call) per batch, with their calls per batch.
"""
import collections
import cProfile
import json
import pstats
import sys
import threading
import time

import peers
from io_thread_probe import runner_for

TOP_FUNCTIONS = 25
_FLUSH_BYTES = 8 << 20


class _SenderShape:
    """What a batch's hand-over does to the sender, in miniature."""

    def __init__(self):
        self.lock = threading.Lock()
        self.queues = {}
        self.metrics = collections.Counter()
        self.pending = self.seq = 0
        self.closed = False
        self.transaction = None

    def send(self, topic, partition, view, record_count):
        if view.nbytes <= 0:
            raise ValueError("empty")
        with self.lock:
            if self.closed:
                raise RuntimeError("closed")
            if self.transaction is not None:
                raise RuntimeError("transactional")
            item = (self.seq, topic, partition, view, record_count, time.monotonic_ns())
            self.seq += 1
            self.pending += 1
            self.metrics["batches"] += 1
            self._route((topic, partition), item)

    def _route(self, key, item):
        partitions = self.queues.get(key[0])
        if partitions is None:
            partitions = self.queues[key[0]] = {}
        queue = partitions.get(key)
        if queue is None:
            queue = partitions[key] = collections.deque()
        queue.append(item)
        if len(queue) > 64:
            queue.clear()


def _quantiles(times_ns):
    times_ns = sorted(times_ns)
    return {"p50": times_ns[len(times_ns) // 2], "p90": times_ns[len(times_ns) * 9 // 10]}


def measure_machine(calls: int) -> dict:
    shape, view = _SenderShape(), memoryview(bytes(100))
    source, target = bytearray(_FLUSH_BYTES), bytearray(_FLUSH_BYTES)
    warm, first, second = [], [], []
    for i in range(calls):
        started = time.perf_counter_ns()
        shape.send("topic", i & 3, view, 7)
        warm.append(time.perf_counter_ns() - started)
    for i in range(calls):
        target[:] = source  # 8 MiB read and 8 MiB written: the core's caches flushed
        started = time.perf_counter_ns()
        shape.send("topic", i & 3, view, 7)
        between = time.perf_counter_ns()
        shape.send("topic", (i + 1) & 3, view, 7)
        first.append(between - started)
        second.append(time.perf_counter_ns() - between)
    return {"mode": "machine", "calls": calls, "warm_ns": _quantiles(warm),
            "first_after_flush_ns": _quantiles(first),
            "second_after_flush_ns": _quantiles(second)}


def _batches_sent(producer) -> int:
    return producer._accumulator.metrics()["batches_sent"]


def measure_batch(bootstrap: str, topic: str, record_size: int, records: int,
                  round_count: int) -> dict:
    runner = runner_for(bootstrap, topic, record_size)
    try:
        values = peers.values_for(record_size, records)
        runner.run(topic, values)  # warm-up: connected, metadata known, the pool grown
        before = _batches_sent(runner._producer)
        profile = cProfile.Profile(time.thread_time)
        started = time.thread_time()
        profile.enable()
        for _ in range(round_count):
            runner.run(topic, values)
        profile.disable()
        caller_s = time.thread_time() - started
        batches = _batches_sent(runner._producer) - before
    finally:
        runner.close()
    stats = pstats.Stats(profile).stats
    top = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:TOP_FUNCTIONS]
    sent = records * round_count
    return {"mode": "batch", "record_size": record_size, "records": sent, "batches": batches,
            "caller_us_per_record": round(caller_s * 1e6 / sent, 2),
            "caller_us_per_batch": round(caller_s * 1e6 / batches, 1),
            "own_time_per_batch": {
                f"{name.rsplit('/', 1)[-1]}:{line}({function})":
                    f"{own_s * 1e6 / batches:.1f} us in {calls / batches:.2f} calls"
                for (name, line, function), (_, calls, own_s, _, _) in top}}


if __name__ == "__main__":
    if sys.argv[1] == "machine":
        result = measure_machine(int(sys.argv[2]) if len(sys.argv) > 2 else 2000)
    else:
        bootstrap_, topic_, size_, records_ = sys.argv[2:6]
        rounds_ = int(sys.argv[6]) if len(sys.argv) > 6 else 3
        result = measure_batch(bootstrap_, topic_, int(size_), int(records_), rounds_)
    print(json.dumps(result, indent=1))
