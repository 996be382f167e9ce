"""End-to-end throughput: every producer against the session's broker, rounds alternated.

A benchmark is a cell of the matrix (record size, acks, compression, batching) and runs
every client of the cell: each sends `records` values to a topic of its own (PARTITIONS
partitions) per round, the round ending when the broker has acknowledged every record
(flush).  After a warm-up round each, the clients' ROUNDS rounds alternate (A B C A B C
...; bench/rounds.py), so that a change in the broker's pace -- its JIT, its phases, other
jobs on the machine -- hits every client alike instead of whichever ran its block then.
At the end each topic's end offsets must add up to every record its client sent, or the
benchmark fails.  Clients, modes and settings: bench/peers.py.  Every client uses batch
size 1 MiB and linger 5 ms (but in the kafka-python defaults cells).

Each client's row (bench/e2e_results.py) holds medians over its rounds: msgs/s = records /
the median round's wall time, first send to last acknowledgement; the client's CPU per
record (its process, every thread), the broker's CPU per record and the load, as
bench/rounds.py measures them.  The Java producer (ProducerPerformance, a JVM per round)
reports its own steady-state records/s, after --warmup-records of half the count, and its
CPU figures are those of the steady-state records (rounds.JavaContestant).

One benchmark per cell, not per client: rounds can only alternate inside one test, as
pytest runs tests one after another.  pytest-benchmark keeps one entry per test, so the
clients' rows go into its extra_info ("clients"), and its own time is the whole cell's
(every client's warm-up and rounds), which says nothing about any one client.

The matrix: record size 100 B, 1 KiB, 128 KiB x acks 1, all x compression none, lz4,
zstd, each cell with 8 client modes.  By default a subset (DEFAULT_CASES: 6 of the 18
cells); NETKAFKA_BENCH_FULL=1 runs all 18 (three times as long).  The 100 B acks=all cell
also has send_batch() with a pyarrow array, and beside the matrix, always: netkafka send()
and kafka-python at kafka-python's defaults (batch 16 KiB, linger 0; acks 1 and all), and
records of 1 MiB (acks=1, no compression) from netkafka, confluent-kafka and the Java
producer, whose request limits and topic take 2 MiB (LARGE_MAX_REQUEST_BYTES).  At large
records CPU per record over the record size is the CPU per byte.
Names read like `test_throughput[100B-acks1-none]`, so `-k` picks cells, and
NETKAFKA_BENCH_CLIENTS (client-mode names, comma-separated, e.g.
"netkafka-send,confluent-kafka-error_only") picks the clients of each:

    .venv/bin/python -m pytest bench/test_bench_e2e_throughput.py --benchmark-only \\
        -k "100B and acks1 and none"

NETKAFKA_BENCH_SECONDS (default 1.5) sets how long a round should take: each client's
record count comes from its expected rate (EXPECTED_MSGS_PER_S, capped by
EXPECTED_MB_PER_S), so kafka-python's rounds last as long as netkafka's.
NETKAFKA_BENCH_ROUNDS (default 3) sets the measured rounds.
"""
import contextlib
import itertools
import os

import pytest

import e2e_results
import peers
import rounds
from netkafka.testing.admin import create_topic

PARTITIONS = 3
KiB = 1024
SIZES = {"100B": 100, "1KiB": KiB, "128KiB": 128 * KiB, "1MiB": peers.MiB}
MATRIX_SIZES = ("100B", "1KiB", "128KiB")
ACKS = {"acks1": "1", "acksall": "all"}
COMPRESSIONS = ("none", "lz4", "zstd")
CLIENT_MODES = (
    ("netkafka", "send"), ("netkafka", "produce"), ("netkafka", "send_batch"),
    ("confluent-kafka", "error_only"), ("confluent-kafka", "callback"),
    ("kafka-python", "send"), ("aiokafka", "send"), ("java", "send"),
)
# send_batch() with a pyarrow array (from the earlier producer benchmark), in this cell.
ARROW = ("netkafka", "send_batch_arrow")
ARROW_CELL = ("100B", "acksall", "none")
# Beside the matrix: records of 1 MiB, the clients whose cost per MB is compared (issue 18).
LARGE_CELL = ("1MiB", "acks1", "none")
LARGE_CLIENT_MODES = (("netkafka", "send"), ("confluent-kafka", "error_only"), ("java", "send"))
# A 1 MiB value with its record's, batch's and request's headers is above every client's
# (and the broker's) 1 MiB default limit: the clients and the topic get twice that.
LARGE_MAX_REQUEST_BYTES = 2 * peers.MiB
# Beside the matrix: netkafka against kafka-python, both at kafka-python's defaults.
DEFAULTS_CLIENT_MODES = (("netkafka", "send"), ("kafka-python", "send"))
DEFAULT_BATCH_SIZE = 16384  # kafka-python's (and netkafka's) default batch_size
# The cells measured without NETKAFKA_BENCH_FULL: the targets' (100 B and 128 KiB,
# acks=1, no compression), 1 KiB, acks=all (the default of every client but librdkafka)
# and both fast codecs.  ARROW_CELL is among them, as among all.
DEFAULT_CASES = (
    ("100B", "acks1", "none"), ("1KiB", "acks1", "none"), ("128KiB", "acks1", "none"),
    ("100B", "acksall", "none"), ("1KiB", "acks1", "lz4"), ("1KiB", "acks1", "zstd"),
)
FULL = os.environ.get("NETKAFKA_BENCH_FULL", "") not in ("", "0")
ROUND_SECONDS = float(os.environ.get("NETKAFKA_BENCH_SECONDS", "1.5"))
ROUNDS = int(os.environ.get("NETKAFKA_BENCH_ROUNDS", "3"))

# What each client reaches on the reference machine (2 shared cores, broker on them too),
# only to size the runs: records of a round = the smaller of the two bounds x ROUND_SECONDS.
EXPECTED_MSGS_PER_S = {
    ("netkafka", "send"): 2_000_000, ("netkafka", "produce"): 2_000_000,
    ("netkafka", "send_batch"): 3_000_000, ARROW: 3_000_000,
    ("confluent-kafka", "error_only"): 700_000, ("confluent-kafka", "callback"): 500_000,
    ("kafka-python", "send"): 60_000, ("aiokafka", "send"): 100_000,
    ("java", "send"): 600_000,
}
EXPECTED_MB_PER_S = 150  # the local broker's ceiling at large records, whoever sends
MIN_RECORDS = 500


def client_name(client_mode) -> str:
    return "-".join(client_mode)


def selected_clients(names: str) -> frozenset:
    """The (client, mode) pairs NETKAFKA_BENCH_CLIENTS names; every one when it is empty.

    Raises:
        ValueError: a name that is no client-mode of this suite (the valid ones listed).
    """
    known = {client_name(key): key for key in EXPECTED_MSGS_PER_S}
    wanted = [name.strip() for name in names.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise ValueError(f"NETKAFKA_BENCH_CLIENTS: unknown {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known))}")
    return frozenset(known[name] for name in wanted) if wanted else frozenset(known.values())


SELECTED = selected_clients(os.environ.get("NETKAFKA_BENCH_CLIENTS", ""))


def records_per_round(client_mode, record_size: int) -> int:
    by_count = max(MIN_RECORDS, EXPECTED_MSGS_PER_S[client_mode] * ROUND_SECONDS)
    by_bytes = EXPECTED_MB_PER_S * peers.MiB * ROUND_SECONDS / record_size
    # MIN_RECORDS bounds the count, not the bytes: 500 records of 1 MiB would be a round of
    # several seconds per client.
    wanted = max(1, int(min(by_count, by_bytes)))
    magnitude = 10 ** max(len(str(wanted)) - 2, 0)  # two significant digits
    return wanted // magnitude * magnitude


def _cells():
    combos = (itertools.product(MATRIX_SIZES, ACKS, COMPRESSIONS) if FULL else DEFAULT_CASES)
    cells = [(combo, CLIENT_MODES + ((ARROW,) if combo == ARROW_CELL else ()),
              peers.BATCH_SIZE, peers.LINGER_MS, "-".join(combo)) for combo in combos]
    cells.append((LARGE_CELL, LARGE_CLIENT_MODES, peers.BATCH_SIZE, peers.LINGER_MS,
                  "-".join(LARGE_CELL)))
    cells += [(("100B", acks, "none"), DEFAULTS_CLIENT_MODES, DEFAULT_BATCH_SIZE, 0,
               f"100B-{acks}-none-defaults") for acks in ACKS]
    for (size, acks, compression), clients, batch_size, linger_ms, name in cells:
        chosen = tuple(key for key in clients if key in SELECTED)
        if chosen:
            yield pytest.param(size, acks, compression, batch_size, linger_ms, chosen, id=name)


@pytest.mark.parametrize("size, acks, compression, batch_size, linger_ms, clients",
                         list(_cells()))
def test_throughput(benchmark, kafka_broker, broker_pids, topic_name, tmp_path, size, acks,
                    compression, batch_size, linger_ms, clients):
    settings = peers.Settings(SIZES[size], ACKS[acks], compression, batch_size, linger_ms,
                              max_request_bytes=(LARGE_MAX_REQUEST_BYTES
                                                 if SIZES[size] >= peers.MiB else None))
    benchmark.group = (f"throughput {size} acks={settings.acks} {compression} "
                       f"batch={batch_size} linger={linger_ms}")
    run_cell(benchmark, settings, clients, kafka_broker.bootstrap, kafka_broker.bootstrap,
             broker_pids, topic_name, tmp_path,
             data_dirs=[node.data_dir for node in getattr(kafka_broker, "nodes", ())])


def large_row_runner(bootstrap: str, topic: str, record_size: int) -> peers.NetkafkaRunner:
    """netkafka's send() with the 1 MiB row's request limits, on topic, created now (3
    partitions) with the row's max.message.bytes: what the probes of large records run."""
    create_topic(bootstrap, topic, 3, config={"max.message.bytes": str(LARGE_MAX_REQUEST_BYTES)})
    return peers.NetkafkaRunner(
        bootstrap, peers.Settings(record_size, max_request_bytes=LARGE_MAX_REQUEST_BYTES), "send")


def run_cell(benchmark, settings, clients, bootstrap, admin_bootstrap, broker_pids, topic_name,
             payload_dir, security=None, suite="throughput", data_dirs=()):
    """One cell: a topic and a contestant per (client, mode) of clients, their rounds
    alternated and recorded, then every topic checked to hold every record its client sent.

    Args:
        bootstrap: where the clients send; admin_bootstrap: where topics are made, counted
            and deleted (a secured broker's PLAINTEXT listener).
        security: {client: its further settings} (TLS, SASL) for the Python clients.
        suite: the rows' suite (e2e_results.record_throughput).
        data_dirs: the broker nodes' log directories, where each client's batches are
            read back (peers.stored_shape); () for a broker that is no process here.
    """
    security = security or {}
    with contextlib.ExitStack() as stack:  # runners closed, then topics deleted
        topics, contestants = {}, {}
        for client, mode in clients:
            topic = topics[client, mode] = f"{topic_name}-{client}-{mode}"
            create_topic(admin_bootstrap, topic, partitions=PARTITIONS,
                         config={"max.message.bytes": str(settings.max_request_bytes)}
                         if settings.max_request_bytes else None)
            stack.callback(peers.delete_topic, admin_bootstrap, topic)
            records = records_per_round((client, mode), settings.record_size)
            if settings.batch_size != peers.BATCH_SIZE:  # small batches: a fraction of the rate
                records //= 5
            contestants[client, mode] = peers.contestant(
                client, mode, bootstrap, topic, settings, records, broker_pids, payload_dir,
                stack, security.get(client))
        measured = benchmark.pedantic(rounds.alternate, args=(contestants, ROUNDS), rounds=1,
                                      iterations=1)
        shapes = {key: peers.stored_shape(data_dirs, topics[key]) for key in contestants
                  } if data_dirs else {}
        e2e_results.record_throughput(benchmark, settings, measured, suite, shapes)
        for key, contestant in contestants.items():
            assert (peers.acknowledged_records(admin_bootstrap, topics[key])
                    == contestant.records_sent)
