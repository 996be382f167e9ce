"""What the end-to-end benchmarks leave in pytest-benchmark's JSON.

Each benchmark's extra_info holds records of three kinds, the input of bench/report.py
(which computes the ratios to confluent-kafka and to Java); the keys after "also" are
additions it does not need:

    throughput  one benchmark per cell of the matrix, {suite: "throughput", clients:
                [...]}: a row per client with suite, client, mode, record_size, acks, compression,
                batch_size, linger_ms, records, seconds, msgs_per_s, mb_per_s,
                client_ns_per_record, broker_ns_per_record
                also: rounds, load_1m, others_cores, round_seconds, round_client_cpu_s,
                round_broker_cpu_s; with a broker of this machine, how it stored the
                client's records (peers.stored_shape): stored_batches, records_per_batch,
                stored_bytes_per_record, uncompressed_batches
    throughput_tls  the same over TLS (bench/test_bench_tls.py), a table of its own
    throughput_sasl_ssl  the same over SASL_SSL (bench/test_bench_tls.py), a table too
    latency     suite, client, mode, rate, records, p50_ms, p99_ms, max_ms,
                client_ns_per_record, broker_ns_per_record
                also: record_size, acks, linger_ms, load_1m, others_cores
    memory      suite, client, mode, records, peak_rss_bytes, rss_growth_bytes,
                allocs_per_record, bytes_per_record
                also: record_size, rss_before_bytes, pending_records, load_1m
    transactions  one benchmark per records-per-commit cell, {suite: "transactions",
                clients: [...]}: a row per client with suite, client, mode, record_size,
                records_per_commit, records, seconds, msgs_per_s, client_ns_per_record,
                broker_ns_per_record, commit_p50_ms, commit_p99_ms (None for the Java
                tool, which commits every transaction_duration_ms instead)
                also: transaction_duration_ms, commits, and rounds' keys as throughput's

Times and CPU figures are bench/rounds.py's, medians over the rounds where there are
several: seconds (msgs_per_s = records / seconds), client_ns_per_record (the client's
process, every thread), broker_ns_per_record (None when the broker is not a process of
this machine), load_1m (the 1-minute load average at the end of a round, or of the
benchmark) and others_cores (cores other processes kept busy): the machine is shared.
"""
import os
from typing import Optional

import peers
import rounds

# Every row written this session, in order: the terminal summary's (conftest.py).
RESULTS = []


def record_throughput(benchmark, settings: "peers.Settings", measured: dict,
                      suite: str = "throughput", shapes: Optional[dict] = None) -> None:
    """measured: {(client, mode): [rounds.Round, ...]}, as rounds.alternate() returns it;
    suite: "throughput", or "throughput_tls" / "throughput_sasl_ssl" for rows over the
    secured broker's SSL / SASL_SSL listener; shapes: {(client, mode): peers.stored_shape()}
    where the broker's files could be read."""
    rows = []
    for (client, mode), client_rounds in measured.items():
        costs = rounds.summary(client_rounds)
        rows.append({
            "suite": suite, "client": client, "mode": mode,
            "record_size": settings.record_size, "acks": settings.acks,
            "compression": settings.compression, "batch_size": settings.batch_size,
            "linger_ms": settings.linger_ms, **costs,
            "mb_per_s": round(peers.mb_per_s(costs["msgs_per_s"], settings.record_size), 2),
            **(shapes or {}).get((client, mode), {}),
        })
    benchmark.extra_info.update({"suite": suite, "clients": rows})
    RESULTS.extend(rows)


def record_transactions(benchmark, record_size: int, records_per_commit: int,
                        java_duration_ms: int, measured: dict, commit_seconds: dict) -> None:
    """measured: {(client, mode): [rounds.Round, ...]}; commit_seconds: {(client, mode):
    the wall times of the measured rounds' commits} for the clients that time them."""
    rows = []
    for (client, mode), client_rounds in measured.items():
        commits = sorted(commit_seconds.get((client, mode), ()))
        rows.append({
            "suite": "transactions", "client": client, "mode": mode,
            "record_size": record_size, "records_per_commit": records_per_commit,
            **rounds.summary(client_rounds),
            "commits": len(commits),
            "commit_p50_ms": _percentile_ms(commits, 0.50),
            "commit_p99_ms": _percentile_ms(commits, 0.99),
            "transaction_duration_ms": java_duration_ms if client == "java" else None,
        })
    benchmark.extra_info.update({"suite": "transactions", "clients": rows})
    RESULTS.extend(rows)


def _percentile_ms(sorted_seconds, fraction):
    """The nearest-rank percentile, in ms; None for no samples."""
    if not sorted_seconds:
        return None
    index = min(len(sorted_seconds) - 1, max(0, round(fraction * len(sorted_seconds)) - 1))
    return round(sorted_seconds[index] * 1000, 3)


def record_latency(benchmark, client: str, mode: str, settings: "peers.Settings", rate: int,
                   p50_ms: float, p99_ms: float, max_ms: float,
                   measured: "rounds.Round") -> None:
    costs = rounds.summary([measured])
    _record(benchmark, {
        "suite": "latency", "client": client, "mode": mode, "rate": rate,
        "records": measured.records,
        "p50_ms": round(p50_ms, 3), "p99_ms": round(p99_ms, 3), "max_ms": round(max_ms, 3),
        "client_ns_per_record": costs["client_ns_per_record"],
        "broker_ns_per_record": costs["broker_ns_per_record"],
        "record_size": settings.record_size, "acks": settings.acks,
        "linger_ms": settings.linger_ms, "load_1m": costs["load_1m"],
        "others_cores": costs["others_cores"],
    })


def record_memory(benchmark, info: dict) -> None:
    _record(benchmark, {"suite": "memory", **info, "load_1m": round(os.getloadavg()[0], 2)})


def _record(benchmark, info: dict) -> None:
    benchmark.extra_info.update(info)
    RESULTS.append(benchmark.extra_info)
