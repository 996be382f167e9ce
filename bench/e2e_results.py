"""What the end-to-end benchmarks leave in pytest-benchmark's JSON.

Each benchmark's extra_info is one of three records, the input of bench/report.py (which
computes the ratios to confluent-kafka and to Java); the keys after "also" are additions
it does not need:

    throughput  suite, client, mode, record_size, acks, compression, batch_size,
                linger_ms, records, seconds, msgs_per_s, mb_per_s
                also: rounds, load_1m
    latency     suite, client, mode, rate, records, p50_ms, p99_ms, max_ms
                also: record_size, acks, linger_ms, load_1m
    memory      suite, client, mode, records, peak_rss_bytes, rss_growth_bytes,
                allocs_per_record, bytes_per_record
                also: record_size, rss_before_bytes, pending_records, load_1m

load_1m is the machine's load average when the benchmark ended: the machine is shared.
"""
import os

import peers

# Every extra_info written this session, in order: the terminal summary's rows (conftest.py).
RESULTS = []


def record_throughput(benchmark, client: str, mode: str, settings: "peers.Settings",
                      records: int, seconds: float, rounds: int) -> None:
    msgs_per_s = records / seconds
    _record(benchmark, {
        "suite": "throughput", "client": client, "mode": mode,
        "record_size": settings.record_size, "acks": settings.acks,
        "compression": settings.compression, "batch_size": settings.batch_size,
        "linger_ms": settings.linger_ms, "records": records, "seconds": round(seconds, 6),
        "msgs_per_s": round(msgs_per_s, 1),
        "mb_per_s": round(peers.mb_per_s(msgs_per_s, settings.record_size), 2),
        "rounds": rounds,
    })


def record_latency(benchmark, client: str, mode: str, settings: "peers.Settings", rate: int,
                   records: int, p50_ms: float, p99_ms: float, max_ms: float) -> None:
    _record(benchmark, {
        "suite": "latency", "client": client, "mode": mode, "rate": rate, "records": records,
        "p50_ms": round(p50_ms, 3), "p99_ms": round(p99_ms, 3), "max_ms": round(max_ms, 3),
        "record_size": settings.record_size, "acks": settings.acks,
        "linger_ms": settings.linger_ms,
    })


def record_memory(benchmark, info: dict) -> None:
    _record(benchmark, {"suite": "memory", **info})


def _record(benchmark, info: dict) -> None:
    info["load_1m"] = round(os.getloadavg()[0], 2)
    benchmark.extra_info.update(info)
    RESULTS.append(benchmark.extra_info)
