"""End-to-end throughput over TLS: netkafka beside confluent-kafka on the secured broker's
SSL listener, rounds alternated (bench/rounds.py), one benchmark per cell.

Cells: 100 B and 128 KiB records x acks 1 and all, no compression, batch 1 MiB and linger
5 ms for both clients (bench/peers.py).  Each client's row holds msgs/s and its CPU per
record (its process, every thread), the broker's CPU per record and the load, as in
test_bench_e2e_throughput.py, whose sizing (records_per_round) and settings it reuses.
Topics are made, counted and deleted over the broker's PLAINTEXT listener; the clients
write over SSL only.

    .venv/bin/python -m pytest bench/test_bench_tls.py --benchmark-only

The secured broker is its own JVM (the secured_broker fixture), not the session's broker,
and gets no warm-up of its own: the first cell's first client is warmed up by its
unmeasured round like every other.
"""
import contextlib

import pytest

import e2e_results
import peers
import rounds
from netkafka.testing.admin import create_topic
from test_bench_e2e_throughput import PARTITIONS, ROUNDS, records_per_round

SIZES = {"100B": 100, "128KiB": 128 * 1024}
ACKS = {"acks1": "1", "acksall": "all"}
CLIENT_MODES = (("netkafka", "send"), ("confluent-kafka", "error_only"))


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("size", SIZES)
def test_tls_throughput(benchmark, secured_broker, topic_name, size, acks):
    settings = peers.Settings(SIZES[size], ACKS[acks])
    benchmark.group = f"tls throughput {size} acks={settings.acks}"
    admin_bootstrap = secured_broker.listeners["PLAINTEXT"].bootstrap
    tls_bootstrap = secured_broker.listeners["SSL"].bootstrap
    ca_file = str(secured_broker.ca_file)
    security = {
        "netkafka": {"security_protocol": "SSL", "ssl_cafile": ca_file},
        "confluent-kafka": {"security.protocol": "SSL", "ssl.ca.location": ca_file},
    }
    broker_pids = rounds.broker_pids(secured_broker.cluster)
    with contextlib.ExitStack() as stack:  # runners closed, then topics deleted
        topics, contestants = {}, {}
        for client, mode in CLIENT_MODES:
            topic = topics[client, mode] = f"{topic_name}-{client}-{mode}"
            create_topic(admin_bootstrap, topic, partitions=PARTITIONS)
            stack.callback(peers.delete_topic, admin_bootstrap, topic)
            records = records_per_round((client, mode), settings.record_size)
            runner = peers.PYTHON_CLIENTS[client](tls_bootstrap, settings, mode,
                                                  security=security[client])
            stack.callback(runner.close)
            values = runner.prepare(peers.values_for(settings.record_size, records))
            contestants[client, mode] = rounds.Contestant(
                lambda runner=runner, topic=topic, values=values: runner.run(topic, values),
                records, broker_pids)
        measured = benchmark.pedantic(rounds.alternate, args=(contestants, ROUNDS), rounds=1,
                                      iterations=1)
        e2e_results.record_throughput(benchmark, settings, measured)
        benchmark.extra_info["listener"] = "SSL"
        for key, contestant in contestants.items():
            assert peers.acknowledged_records(admin_bootstrap, topics[key]) == contestant.records_sent
