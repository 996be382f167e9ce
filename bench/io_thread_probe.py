"""What the I/O thread costs per Produce request and per record, in a process of its own:

    python bench/io_thread_probe.py calls|cpu BOOTSTRAP TOPIC RECORD_SIZE RECORDS [ROUNDS]

The producer has the throughput settings (acks=1, batch 1 MiB, linger 5 ms; bench/peers.py's
NetkafkaRunner, send(), one thread); from 1 MiB on, the benchmark's 1 MiB row's request
limits, and TOPIC (which must not exist yet) is created with its max.message.bytes.  After a
warm-up run it sends RECORDS values of RECORD_SIZE bytes ROUNDS times (default 3), each round
flushed, and prints one JSON object.

calls: a profile hook (threading.setprofile, so only the producer's threads carry it)
counts on the I/O thread the Python functions entered ("call" events) and the C functions
Python code called ("c_call": builtins, Cython functions, methods of C types) -- cProfile
counts both -- over the Produce requests the connections framed meanwhile (their
requests_sent).  The hook slows the thread down: CPU is not measured in this mode.  The
functions most called per request are listed too, to show where the calls go.

cpu: each thread's CPU time (pthread_getcpuclockid) per record, median of the rounds, with
the load; the I/O thread is netkafka-io-0, whose time is also split into user and system
(the kernel's: socket writes and, on loopback, the receiving side's TCP work) from
/proc/self/task/<tid>/stat (clock ticks: give a round a second or more).
"""
import collections
import json
import os
import statistics
import sys
import threading
import time

import floor_probe
import peers
from test_bench_e2e_throughput import large_row_runner

TOP_FUNCTIONS = 40
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def runner_for(bootstrap: str, topic: str, record_size: int) -> peers.NetkafkaRunner:
    """A producer with the throughput settings; from 1 MiB on, those of the benchmark's 1 MiB
    row: request limits and the topic's max.message.bytes raised, as no 1 MiB record fits the
    defaults once its headers are added."""
    if record_size < peers.MiB:
        return peers.NetkafkaRunner(bootstrap, peers.Settings(record_size), "send")
    return large_row_runner(bootstrap, topic, record_size)


def _requests_sent(producer) -> int:
    return sum(conn.stats()["requests_sent"] for conn in producer._pool.connections())


def count_calls(bootstrap: str, topic: str, record_size: int, records: int,
                round_count: int) -> dict:
    io_thread = {}  # the ident of netkafka-io-0, once seen
    counting = threading.Event()
    per_function = collections.Counter()
    events = collections.Counter()

    def hook(frame, event, arg):
        if not counting.is_set() or event not in ("call", "c_call"):
            return
        ident = threading.get_ident()
        if ident != io_thread.get("ident"):
            if "ident" in io_thread or threading.current_thread().name != "netkafka-io-0":
                return
            io_thread["ident"] = ident
        events[event] += 1
        if event == "call":
            code = frame.f_code
            per_function[f"{os.path.basename(code.co_filename)}:{code.co_name}"] += 1
        else:
            per_function[f"C {getattr(arg, '__qualname__', repr(arg))}"] += 1

    threading.setprofile(hook)
    runner = runner_for(bootstrap, topic, record_size)
    try:
        values = peers.values_for(record_size, records)
        runner.run(topic, values)  # warm-up: connected, metadata known, the pool grown
        before = _requests_sent(runner._producer)
        counting.set()
        for _ in range(round_count):
            runner.run(topic, values)
        counting.clear()
        requests = _requests_sent(runner._producer) - before
    finally:
        runner.close()
        threading.setprofile(None)
    return {"mode": "calls", "record_size": record_size, "records": records * round_count,
            "requests": requests,
            "records_per_request": round(records * round_count / requests, 1),
            "python_calls_per_request": round(events["call"] / requests, 1),
            "c_calls_per_request": round(events["c_call"] / requests, 1),
            "top": {name: round(count / requests, 2)
                    for name, count in per_function.most_common(TOP_FUNCTIONS)}}


def _io_thread_user_system_s() -> tuple:
    """(user, system) CPU seconds of netkafka-io-0, from /proc."""
    for thread in threading.enumerate():
        if thread.name == "netkafka-io-0":
            stat = open(f"/proc/self/task/{thread.native_id}/stat").read()
            fields = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on
            return int(fields[11]) / _TICKS_PER_S, int(fields[12]) / _TICKS_PER_S
    raise RuntimeError("the producer has no netkafka-io-0 thread")


def measure_cpu(bootstrap: str, topic: str, record_size: int, records: int,
                round_count: int) -> dict:
    runner = runner_for(bootstrap, topic, record_size)
    try:
        values = peers.values_for(record_size, records)
        runner.run(topic, values)
        threads_s, loads, requests = [], [], []
        for _ in range(round_count):
            before, sent = floor_probe.threads_cpu_s(), _requests_sent(runner._producer)
            io_before = _io_thread_user_system_s()
            started = time.process_time()
            runner.run(topic, values)
            process_s = time.process_time() - started
            after = floor_probe.threads_cpu_s()
            io_after = _io_thread_user_system_s()
            threads = {name: after[name] - before.get(name, 0.0) for name in after}
            threads["process"] = process_s
            threads["netkafka-io-0 user"] = io_after[0] - io_before[0]
            threads["netkafka-io-0 system"] = io_after[1] - io_before[1]
            threads_s.append(threads)
            requests.append(_requests_sent(runner._producer) - sent)
            loads.append(os.getloadavg()[0])
    finally:
        runner.close()
    return {"mode": "cpu", "record_size": record_size, "records": records,
            "requests_per_round": statistics.median(requests),
            "thread_ns_per_record": {
                name: round(statistics.median(t.get(name, 0.0) for t in threads_s)
                            * 1e9 / records, 1)
                for name in threads_s[-1]},
            "load_1m": round(statistics.median(loads), 2)}


if __name__ == "__main__":
    mode_, bootstrap_, topic_, size_, records_ = sys.argv[1:6]
    rounds_ = int(sys.argv[6]) if len(sys.argv) > 6 else 3
    probe = {"calls": count_calls, "cpu": measure_cpu}[mode_]
    print(json.dumps(probe(bootstrap_, topic_, int(size_), int(records_), rounds_)))
