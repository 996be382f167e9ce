"""What a WAL page costs the kernel here: the floor under the fsync modes' prices.

bench/wal_page_cost.c (compiled by gcc in pytest's tmp directory, run on a segment there,
on the machine's disk) measures, in CPU of the calling thread per 4 KiB page: making a
page of a shared file mapping writable again after a sync wrote it back (a fault, or
MADV_POPULATE_WRITE ahead), msync's writeback, a fresh segment's population, and the
alternative of O_DIRECT writes from shared memory; and the wall time of a sync of one
page, which is the disk's cache flush.  extra_info holds its lines, and:

    interval_floor_ns_per_entry   (re-dirtying + writeback at ~3 MiB per sync) per page,
                                  over the entries a page holds: what "interval" added to
                                  "never" per record before any other cost when it wrote
                                  through the segment file's mapping (as a segment that
                                  finds no free shared-memory image still does)
    staged_interval_floor_ns_per_entry  the same for how "interval" writes now
                                  (netkafka/producer/wal_staging.py): entries in shared
                                  memory that is never written back (so never
                                  write-protected again), copied at each sync by O_DIRECT
                                  into a recycled segment (~3 MiB per sync): the memory
                                  traffic of writing the entries plus the copy and flush
    always_bound_ratio_4_threads  four threads, each waiting for its own entry, at best
                                  4 entries per flush: 4 / the fastest flush, over the WAL
                                  off rate given by NETKAFKA_WAL_OFF_MSGS_PER_S (default
                                  770000: bench/test_bench_wal.py's best 4-thread 100 B row
                                  here)

    .venv/bin/python -m pytest bench/test_bench_wal_pages.py --benchmark-only

NETKAFKA_WAL_ENTRY_BYTES (default 200: a 100 B record's entry with bench/test_bench_wal.py's
topic names of ~45 bytes) sets the entry size.
"""
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY_BYTES = int(os.environ.get("NETKAFKA_WAL_ENTRY_BYTES", "200"))
WAL_OFF_MSGS_PER_S = float(os.environ.get("NETKAFKA_WAL_OFF_MSGS_PER_S", "770000"))
PAGE_BYTES = 4096


def run_probe(tmp_path):
    program = str(tmp_path / "wal_page_cost")
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Wextra", "-Werror", "-O2",
                    os.path.join(HERE, "wal_page_cost.c"), "-o", program],
                   check=True, capture_output=True, text=True)
    done = subprocess.run([program, str(tmp_path)], capture_output=True, text=True,
                          timeout=600, check=True)
    return {name: float(value) for name, value in
            (line.split() for line in done.stdout.splitlines())}


def test_wal_page_cost(benchmark, tmp_path):
    benchmark.group = "wal pages"
    costs = benchmark.pedantic(run_probe, args=(tmp_path,), rounds=1, iterations=1)
    assert set(costs) == {
        "populate_fresh_ns_per_page", "msync_ns_per_page_300k", "redirty_populate_ns_per_page",
        "msync_ns_per_page_3m", "redirty_fault_ns_per_page", "msync_one_page_cpu_us",
        "msync_one_page_min_us", "msync_one_page_median_us", "direct_ns_per_page",
        "direct_overwrite_ns_per_page_3m", "stage_rewrite_ns_per_page"}
    entries_per_page = PAGE_BYTES / ENTRY_BYTES
    costs["interval_floor_ns_per_entry"] = round(
        (costs["redirty_populate_ns_per_page"] + costs["msync_ns_per_page_3m"])
        / entries_per_page, 1)
    costs["staged_interval_floor_ns_per_entry"] = round(
        (costs["stage_rewrite_ns_per_page"] + costs["direct_overwrite_ns_per_page_3m"])
        / entries_per_page, 1)
    costs["always_bound_ratio_4_threads"] = round(
        4 / (costs["msync_one_page_min_us"] / 1e6) / WAL_OFF_MSGS_PER_S, 3)
    benchmark.extra_info.update(costs)
