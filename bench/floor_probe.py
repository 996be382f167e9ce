"""netkafka's cost per record at the floor, one entry at a time, in a process of its own:

    python bench/floor_probe.py MODE BOOTSTRAP TOPIC RECORDS [ROUNDS]

MODE is send, produce, send_batch (a list of values) or send_batch_arrow (a pyarrow
binary array).  The producer has the throughput settings (100 B values, acks=1, batch
1 MiB, linger 5 ms; bench/peers.py's NetkafkaRunner, one thread); after one warm-up run
it sends RECORDS values ROUNDS times (default 5), each round flushed, and prints one JSON
object: the client's process CPU per record of each round (every thread: the caller's and
the I/O, linger and any other of the producer's, bench/rounds.py's measure()) and their
median; of that, the medians of each thread's own (by name: MainThread is the caller,
netkafka-io-0 the I/O thread, netkafka-linger the linger timer) and of the process's
system time (the kernel's, every thread: socket writes, page faults, wake-ups).

The same script is what callgrind counts (README, "Where each nanosecond goes"): run it
with ROUNDS=1 at two record counts and the difference of the two totals, over the
difference of the counts, is the instructions per record of every thread, start-up and
warm-up cancelled out.  --separate-threads=yes splits that between the caller and the
producer's threads.
"""
import json
import resource
import statistics
import sys
import threading
import time

import peers
import rounds

RECORD_SIZE = 100


def measure(mode: str, bootstrap: str, topic: str, records: int, round_count: int) -> dict:
    runner = peers.NetkafkaRunner(bootstrap, peers.Settings(RECORD_SIZE), mode)
    try:
        values = runner.prepare(peers.values_for(RECORD_SIZE, records))
        runner.run(topic, values)  # warm-up: connected, metadata known, the pool grown
        measured, system_s, threads_s = [], [], []
        for _ in range(round_count):
            threads_before = threads_cpu_s()
            system_before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
            measured.append(rounds.measure(lambda: runner.run(topic, values), records, ()))
            system_s.append(resource.getrusage(resource.RUSAGE_SELF).ru_stime - system_before)
            threads_after = threads_cpu_s()
            threads_s.append({name: threads_after[name] - threads_before.get(name, 0.0)
                              for name in threads_after})
    finally:
        runner.close()
    per_record = [round(r.client_ns_per_record, 1) for r in measured]
    per_thread = {name: round(statistics.median(t.get(name, 0.0) for t in threads_s)
                              * rounds.NS / records, 1)
                  for name in threads_s[-1]}
    return {"mode": mode, "records": records, "record_size": RECORD_SIZE,
            "client_ns_per_record": statistics.median(per_record),
            "thread_ns_per_record": per_thread,
            "system_ns_per_record": round(statistics.median(system_s) * rounds.NS / records, 1),
            "round_client_ns_per_record": per_record,
            "load_1m": round(statistics.median(r.load_1m for r in measured), 2)}


def threads_cpu_s() -> dict:
    """{thread name: CPU seconds it has used}, for this process's live Python threads."""
    cpu = {}
    for thread in threading.enumerate():
        try:
            clock = time.pthread_getcpuclockid(thread.ident)
            cpu[thread.name] = cpu.get(thread.name, 0.0) + time.clock_gettime(clock)
        except (OSError, TypeError):  # ended meanwhile, or not started
            continue
    return cpu


if __name__ == "__main__":
    mode_, bootstrap_, topic_, records_ = sys.argv[1:5]
    rounds_ = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    print(json.dumps(measure(mode_, bootstrap_, topic_, int(records_), rounds_)))
