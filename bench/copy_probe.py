"""Bytes copied per value byte between send() and the socket, for large records:

    python bench/copy_probe.py BOOTSTRAP RECORD_SIZE RECORDS [MEMMOVE_SYMBOL]

Issue 18 asks for no extra copy between send() and the socket.  A value of type bytes of
64 KiB or more is not copied in user space at all: its batch holds it, the CRC32C is taken
where it is, and sendmsg reads it from there (accumulator.HOLD_VALUES_FROM_BYTES); the one
copy is the kernel's, into the socket's buffers.
The producer has the large-record settings of bench/test_bench_e2e_throughput.py (acks=1,
batch 1 MiB, linger 5 ms, 2 MiB requests; send(), one thread).  After a warm-up run it
sends RECORDS values of RECORD_SIZE bytes once more while `perf record` (Linux perf, run as
root) counts, in this process only:

- every call of libc's memmove/memcpy of 1 KiB or more, with its length (a uprobe on
  MEMMOVE_SYMBOL, the implementation glibc's ifunc picks on this CPU; default the AVX-512
  one; `perf probe -x LIBC -F '__memmove*'` lists the candidates).  memcpy resolves to the
  same code, so both are counted.  Smaller copies (headers, varints) are not values.
- the bytes every sendmsg() returned as written (the kernel copies them from the batch's
  memory into the socket's buffers: the one kernel copy).

It prints one JSON object: user-space bytes copied per value byte, the copies per record,
and bytes written by sendmsg per value byte (above 1.0 by the batch, record and request
headers only), the sendmsg calls per record, and each thread's CPU per MB of the round.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import floor_probe
import peers
from test_bench_e2e_throughput import large_row_runner

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
DEFAULT_MEMMOVE_SYMBOL = "__memmove_avx512_unaligned_erms"
PROBE = "probe_libc:nk_copy"
MIN_COPY_BYTES = 1024


def _perf(*args: str) -> str:
    return subprocess.run(("perf",) + args, check=True, capture_output=True, text=True).stdout


def _field(line: str, name: str) -> int:
    return int(line.split(f"{name}=", 1)[1].split()[0], 0)


def measure(bootstrap: str, record_size: int, records: int, symbol: str) -> dict:
    topic = f"copy-probe-{record_size}-{os.getpid()}"
    runner = large_row_runner(bootstrap, topic, record_size)
    _perf("probe", "-q", "-x", LIBC, "-a", f"nk_copy={symbol} len=%dx:u64")
    try:
        values = peers.values_for(record_size, records)
        runner.run(topic, values)  # warm-up: connected, metadata known, the pool grown
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "perf.data")
            perf = subprocess.Popen(
                ["perf", "record", "-q", "-o", data, "-p", str(os.getpid()),
                 "-e", PROBE, "--filter", f"len >= {MIN_COPY_BYTES}",
                 "-e", "syscalls:sys_exit_sendmsg"], stdout=subprocess.DEVNULL)
            time.sleep(1.0)  # perf attaches to every thread before the round starts
            before = floor_probe.threads_cpu_s()
            runner.run(topic, values)
            after = floor_probe.threads_cpu_s()
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=60)
            lines = _perf("script", "-i", data).splitlines()
    finally:
        runner.close()
        _perf("probe", "-q", "-d", PROBE)
    copies = [_field(line, "len") for line in lines if "nk_copy" in line]
    # sendmsg's return value, printed in hex; an error (EAGAIN: the socket is full) is
    # negative, a write of nothing.
    returned = [int(line.rsplit("0x", 1)[1], 16) for line in lines if "sys_exit_sendmsg" in line]
    written = [count for count in returned if count < 2 ** 63]
    value_bytes = record_size * records
    return {"record_size": record_size, "records": records,
            "user_bytes_copied_per_value_byte": round(sum(copies) / value_bytes, 4),
            "user_copies_per_record": round(len(copies) / records, 3),
            "sendmsg_bytes_per_value_byte": round(sum(written) / value_bytes, 4),
            "sendmsg_calls_per_record": round(len(returned) / records, 3),
            "thread_us_per_MB": {name: round((after[name] - before.get(name, 0.0)) * 1e6
                                             * peers.MiB / value_bytes, 1) for name in after},
            "load_1m": round(os.getloadavg()[0], 2)}


if __name__ == "__main__":
    bootstrap_, size_, records_ = sys.argv[1:4]
    symbol_ = sys.argv[4] if len(sys.argv) > 4 else DEFAULT_MEMMOVE_SYMBOL
    print(json.dumps(measure(bootstrap_, int(size_), int(records_), symbol_)))
