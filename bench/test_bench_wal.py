"""What the write-ahead log costs: send() with the WAL off and with each fsync mode.

One benchmark per cell (record size 100 B or 1 KiB, one or four sending threads); in
each, four netkafka producers -- wal_dir unset, and wal_fsync "never", "interval" (10
ms) and "always" -- send their records with send() from the cell's threads, acks=all
(idempotent), batch 1 MiB, linger 5 ms, each to a topic of its own (3 partitions), a
round ending when every record is acknowledged (flush).  Their rounds alternate after a
warm-up round each (bench/rounds.py), so that the broker's pace changes hit them alike.
Each WAL lives in pytest's tmp directory, on the machine's disk.

extra_info["wal"] holds a row per producer: msgs/s (records / the median round's wall
time), client CPU per record (this process, every thread) and broker CPU per record,
as rounds.summary() gives them, and against WAL off: the ratio of msgs/s and the
client CPU added per record.  WAL rows also say where the WAL's CPU went and what its
syncs cost, over the measured rounds (the WAL's metrics, warm-up left out): the CPU of
the syncs per record (sync_cpu_ns_per_record: msync's writeback and the flush request,
on whichever thread synced), the WAL's housekeeping thread's CPU per record
(wal_thread_ns_per_record: the interval syncs, prefaulting recycled segments,
reclaiming), records per sync and the mean sync's wall time (sync_us).  For "always",
sync_bound_msgs_per_s is what the cell's threads could reach if every sync covered one
record of each of them -- threads / sync_us: each call waits for a sync of its own
entry, so no more records than threads are ever waiting for one -- and
sync_bound_ratio_to_off that against WAL off.  The issue's targets: "interval" within 100 ns of client
CPU per 100 B record and at 0.7x or more of WAL off's msgs/s; "always" with four
threads at 0.3x or more.  The numbers are reported, not asserted (bench/, not tests/):

    .venv/bin/python -m pytest bench/test_bench_wal.py --benchmark-only -k "100B"

NETKAFKA_BENCH_SECONDS (default 1.5) sets how long a round should take (record counts
come from EXPECTED_MSGS_PER_S); NETKAFKA_BENCH_ROUNDS (default 3) the rounds.
"""
import contextlib
import os
import threading

import pytest

import peers
import rounds
from netkafka import Producer
from netkafka.testing.admin import create_topic

PARTITIONS = 3
SIZES = {"100B": 100, "1KiB": 1024}
THREADS = (1, 4)
MODES = ("off", "never", "interval", "always")
ROUND_SECONDS = float(os.environ.get("NETKAFKA_BENCH_SECONDS", "1.5"))
ROUNDS = int(os.environ.get("NETKAFKA_BENCH_ROUNDS", "3"))
WAL_COUNTERS = ("records_logged", "syncs", "sync_ns", "sync_cpu_ns", "housekeeping_cpu_ns")
# Rates on the reference machine (2 shared cores, the broker on them too), only to size
# a round: with "always" every send() waits for a sync of the disk.
EXPECTED_MSGS_PER_S = {"off": 500_000, "never": 500_000, "interval": 500_000,
                       ("always", 1): 4_000, ("always", 4): 12_000}


def records_per_round(mode, threads):
    rate = EXPECTED_MSGS_PER_S.get((mode, threads), EXPECTED_MSGS_PER_S.get(mode))
    wanted = int(rate * ROUND_SECONDS)
    return max(threads * 100, wanted // (threads * 100) * threads * 100)


class WalSender:
    """A producer (WAL off or on) whose run() sends its values from `threads` threads,
    each its share, then flushes."""

    def __init__(self, bootstrap, topic, mode, wal_dir, threads, values):
        settings = {} if mode == "off" else {"wal_dir": str(wal_dir), "wal_fsync": mode}
        # The WAL's counters each round added (None: WAL off).
        self.wal_rounds = None if mode == "off" else []
        self.producer = Producer(bootstrap_servers=bootstrap, acks="all",
                                 batch_size=peers.BATCH_SIZE, linger_ms=peers.LINGER_MS,
                                 **settings)
        self.topic = topic
        self.shares = [values[i::threads] for i in range(threads)]

    def _send(self, share):
        send, topic = self.producer.send, self.topic
        for value in share:
            send(topic, value)

    def _wal_counters(self):
        wal = self.producer.metrics()["netkafka-wal"]
        return {name: wal[name] for name in WAL_COUNTERS}

    def run(self):
        before = self._wal_counters() if self.wal_rounds is not None else None
        if len(self.shares) == 1:
            self._send(self.shares[0])
        else:
            workers = [threading.Thread(target=self._send, args=(share,))
                       for share in self.shares]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        self.producer.flush()
        if before is not None:
            after = self._wal_counters()
            self.wal_rounds.append({name: after[name] - before[name] for name in after})

    def wal_row(self, mode, threads):
        """What the WAL's syncs and thread cost over the rounds but the first (warm-up)."""
        measured = self.wal_rounds[1:]
        total = {name: sum(r[name] for r in measured) for name in WAL_COUNTERS}
        records, syncs = total["records_logged"], total["syncs"]
        row = {"sync_cpu_ns_per_record": round(total["sync_cpu_ns"] / records, 1),
               "wal_thread_ns_per_record": round(total["housekeeping_cpu_ns"] / records, 1),
               "records_per_sync": round(records / syncs, 2) if syncs else None,
               "sync_us": round(total["sync_ns"] / syncs / 1e3, 1) if syncs else None}
        if mode == "always" and syncs:
            row["sync_bound_msgs_per_s"] = round(threads * syncs * 1e9 / total["sync_ns"])
        return row

    def close(self):
        self.producer.close()


@pytest.mark.parametrize("threads", THREADS, ids=lambda t: f"{t}thread")
@pytest.mark.parametrize("size", SIZES)
def test_wal_cost(benchmark, kafka_broker, broker_pids, topic_name, tmp_path, size, threads):
    benchmark.group = f"wal {size} threads={threads}"
    bootstrap = kafka_broker.bootstrap
    with contextlib.ExitStack() as stack:
        contestants, senders = {}, {}
        for mode in MODES:
            topic = f"{topic_name}-{mode}"
            create_topic(bootstrap, topic, partitions=PARTITIONS)
            stack.callback(peers.delete_topic, bootstrap, topic)
            records = records_per_round(mode, threads)
            sender = senders[mode] = WalSender(bootstrap, topic, mode, tmp_path / mode,
                                               threads, peers.values_for(SIZES[size], records))
            stack.callback(sender.close)
            contestants[mode] = rounds.Contestant(sender.run, records, broker_pids)
        measured = benchmark.pedantic(rounds.alternate, args=(contestants, ROUNDS), rounds=1,
                                      iterations=1)
        rows = {mode: rounds.summary(measured[mode]) for mode in MODES}
        off = rows["off"]
        for mode, row in rows.items():
            row.update(mode=mode, record_size=SIZES[size], threads=threads,
                       msgs_ratio_to_off=round(row["msgs_per_s"] / off["msgs_per_s"], 3),
                       client_ns_added=round(row["client_ns_per_record"]
                                             - off["client_ns_per_record"], 1))
            if mode != "off":
                row.update(senders[mode].wal_row(mode, threads))
                if "sync_bound_msgs_per_s" in row:
                    row["sync_bound_ratio_to_off"] = round(
                        row["sync_bound_msgs_per_s"] / off["msgs_per_s"], 3)
        benchmark.extra_info["wal"] = list(rows.values())
        for mode, contestant in contestants.items():
            assert (peers.acknowledged_records(bootstrap, f"{topic_name}-{mode}")
                    == contestant.records_sent)
