"""End-to-end throughput over TLS: netkafka beside confluent-kafka on the secured broker's
SSL listener, rounds alternated (bench/rounds.py), one benchmark per cell.

Cells: 100 B and 128 KiB records x acks 1 and all, no compression, batch 1 MiB and linger
5 ms for both clients (bench/peers.py).  Each client's row holds msgs/s and its CPU per
record (its process, every thread), the broker's CPU per record and the load, as in
test_bench_e2e_throughput.py, whose cell runner (run_cell) it reuses.
Topics are made, counted and deleted over the broker's PLAINTEXT listener; the clients
write over SSL only.

    .venv/bin/python -m pytest bench/test_bench_tls.py --benchmark-only

The secured broker is its own JVM (the secured_broker fixture), not the session's broker,
and gets no warm-up of its own: the first cell's first client is warmed up by its
unmeasured round like every other.
"""
import pytest

import peers
import rounds
from test_bench_e2e_throughput import run_cell

SIZES = {"100B": 100, "128KiB": 128 * 1024}
ACKS = {"acks1": "1", "acksall": "all"}
CLIENT_MODES = (("netkafka", "send"), ("confluent-kafka", "error_only"))


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("size", SIZES)
def test_tls_throughput(benchmark, secured_broker, topic_name, tmp_path, size, acks):
    settings = peers.Settings(SIZES[size], ACKS[acks])
    benchmark.group = f"tls throughput {size} acks={settings.acks}"
    ca_file = str(secured_broker.ca_file)
    run_cell(benchmark, settings, CLIENT_MODES, secured_broker.listeners["SSL"].bootstrap,
             secured_broker.listeners["PLAINTEXT"].bootstrap,
             rounds.broker_pids(secured_broker.cluster), topic_name, tmp_path, security={
                 "netkafka": {"security_protocol": "SSL", "ssl_cafile": ca_file},
                 "confluent-kafka": {"security.protocol": "SSL", "ssl.ca.location": ca_file},
             }, suite="throughput_tls")
