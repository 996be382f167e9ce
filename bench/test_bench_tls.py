"""End-to-end throughput over TLS: netkafka beside confluent-kafka and the Java producer on
the secured broker's SSL listener and on its SASL_SSL one (PLAIN, as Confluent Cloud asks
for), rounds alternated (bench/rounds.py), one benchmark per cell.

Cells: SSL and SASL_SSL x 100 B and 128 KiB records x acks 1 and all, no compression,
batch 1 MiB and linger 5 ms for every client (bench/peers.py).  Each client's row holds
msgs/s and its CPU per record (its process, every thread; the Java producer's JVM as
rounds.JavaContestant counts it), the broker's CPU per record and the load, as in
test_bench_e2e_throughput.py, whose cell runner (run_cell) it reuses.  SASL costs a
connection its authentication only, so the two listeners' rows differ by noise: the SASL_SSL
rows are those of the setting users meet.  Topics are made, counted and deleted over the
broker's PLAINTEXT listener; the clients write over the secured one only, each configured
by its own names (the Java producer by a client.properties, as its users do).

    .venv/bin/python -m pytest bench/test_bench_tls.py --benchmark-only -k "SASL_SSL"

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
CLIENT_MODES = (("netkafka", "send"), ("confluent-kafka", "error_only"), ("java", "send"))
# listener -> the suite its rows go to (bench/e2e_results.py, bench/report.py).
LISTENERS = {"SSL": "throughput_tls", "SASL_SSL": "throughput_sasl_ssl"}
SASL_MECHANISM = "PLAIN"
SASL_USER = "alice"
_JAVA_PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def client_settings(secured_broker, listener: str) -> tuple[str, dict]:
    """(bootstrap of the listener, {client: its settings for it, in its own names})."""
    ca_file = str(secured_broker.ca_file)
    if listener == "SSL":
        spec = secured_broker.listener("SSL")
        return spec.bootstrap, {
            "netkafka": {"security_protocol": "SSL", "ssl_cafile": ca_file},
            "confluent-kafka": {"security.protocol": "SSL", "ssl.ca.location": ca_file},
            "java": {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                     "ssl.truststore.location": ca_file},
        }
    spec = secured_broker.listener("SASL_SSL", SASL_MECHANISM)
    password = secured_broker.passwords[SASL_MECHANISM][SASL_USER]
    confluent = secured_broker.client_config(spec.name, SASL_USER)
    del confluent["bootstrap.servers"]  # the runner's own
    return spec.bootstrap, {
        "netkafka": {"security_protocol": "SASL_SSL", "ssl_cafile": ca_file,
                     "sasl_mechanism": SASL_MECHANISM, "sasl_plain_username": SASL_USER,
                     "sasl_plain_password": password},
        "confluent-kafka": confluent,
        "java": {"security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM",
                 "ssl.truststore.location": ca_file, "sasl.mechanism": SASL_MECHANISM,
                 "sasl.jaas.config": f'{_JAVA_PLAIN_LOGIN} required username="{SASL_USER}" '
                                     f'password="{password}";'},
    }


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("listener", LISTENERS)
def test_tls_throughput(benchmark, secured_broker, topic_name, tmp_path, listener, size, acks):
    settings = peers.Settings(SIZES[size], ACKS[acks])
    benchmark.group = f"{listener} throughput {size} acks={settings.acks}"
    bootstrap, security = client_settings(secured_broker, listener)
    run_cell(benchmark, settings, CLIENT_MODES, bootstrap,
             secured_broker.listeners["PLAINTEXT"].bootstrap,
             rounds.broker_pids(secured_broker.cluster), topic_name, tmp_path,
             security=security, suite=LISTENERS[listener])
