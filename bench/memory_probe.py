"""One client's memory, measured in a process of its own (run by test_bench_e2e_memory.py):

    python bench/memory_probe.py CLIENT MODE BOOTSTRAP TOPIC RECORDS PENDING

prints one JSON object (the memory record of e2e_results.py, without suite and load).

1. RSS: a producer at the throughput settings (batch 1 MiB, linger 5 ms, acks=1) sends
   RECORDS values of 100 B after a warm-up of WARMUP_RECORDS and waits for every
   acknowledgement.  peak_rss_bytes is the process's peak resident set (VmHWM, the
   interpreter and the client's libraries included); rss_growth_bytes the resident set
   after the run minus before it (values already built).
2. Python heap per record: a second producer, whose linger (LONG_LINGER_MS) keeps every
   record queued, sends PENDING values (fewer than one batch holds); right after the send
   loop, with every record still pending, allocs_per_record = new live Python memory blocks
   (sys.getallocatedblocks) / PENDING and bytes_per_record = new traced Python memory
   (tracemalloc) / PENDING.  Then every record is flushed and acknowledged.  Memory a client
   takes from malloc directly (librdkafka's) is not Python memory: RSS shows it.

Only this module, peers.py and the client's own modules are imported, so that no other
client's libraries count in the RSS.
"""
import gc
import json
import sys
import tracemalloc

import peers

RECORD_SIZE = 100
WARMUP_RECORDS = 1000
LONG_LINGER_MS = 60_000


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024  # "VmRSS:   12345 kB"
    raise RuntimeError(f"/proc/self/status has no {field}")


def resident_bytes() -> int:
    return _status_bytes("VmRSS")


def peak_resident_bytes() -> int:
    # VmHWM belongs to this process's memory map, made new by exec; getrusage's ru_maxrss
    # would carry the pytest parent's peak over fork and exec.
    return _status_bytes("VmHWM")


def measure(client: str, mode: str, bootstrap: str, topic: str, records: int,
            pending: int) -> dict:
    runner_class = peers.PYTHON_CLIENTS[client]
    runner = runner_class(bootstrap, peers.Settings(RECORD_SIZE), mode)
    values = runner.prepare(peers.values_for(RECORD_SIZE, records))
    runner.run(topic, values[:WARMUP_RECORDS])
    gc.collect()
    rss_before = resident_bytes()
    runner.run(topic, values)
    rss_growth = resident_bytes() - rss_before
    peak_rss = peak_resident_bytes()
    runner.close()

    queued = runner_class(bootstrap, peers.Settings(RECORD_SIZE, linger_ms=LONG_LINGER_MS), mode)
    few = queued.prepare(peers.values_for(RECORD_SIZE, pending))
    queued.run(topic, few[:1])  # connected, metadata known
    gc.collect()
    tracemalloc.start()
    blocks_before = sys.getallocatedblocks()
    traced_before = tracemalloc.get_traced_memory()[0]
    queued.send_all(topic, few)
    traced_growth = tracemalloc.get_traced_memory()[0] - traced_before
    blocks_growth = sys.getallocatedblocks() - blocks_before
    tracemalloc.stop()
    queued.wait_all()
    queued.close()
    return {
        "client": client, "mode": mode, "records": records, "record_size": RECORD_SIZE,
        "peak_rss_bytes": peak_rss, "rss_growth_bytes": rss_growth,
        "rss_before_bytes": rss_before, "pending_records": pending,
        "allocs_per_record": round(blocks_growth / pending, 3),
        "bytes_per_record": round(traced_growth / pending, 1),
    }


if __name__ == "__main__":
    client_, mode_, bootstrap_, topic_, records_, pending_ = sys.argv[1:]
    print(json.dumps(measure(client_, mode_, bootstrap_, topic_, int(records_), int(pending_))))
