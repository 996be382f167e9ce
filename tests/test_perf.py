"""netkafka-perf run as a user runs it (a subprocess) against the session's real broker;
what it claims to have written is checked by the independent reader."""
import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

import netkafka
from broker_proxy import ProduceDroppingProxy
from netkafka.tools import perf
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

REPO = Path(netkafka.__file__).resolve().parents[1]
RUN_TIMEOUT_S = 180
# The Java tool's final line, with our percentiles' decimals.
NUMBER = r"(nan|[0-9.]+)"
SUMMARY = re.compile(
    rf"^(\d+) records sent, {NUMBER} records/sec \({NUMBER} MB/sec\), {NUMBER} ms avg latency, "
    rf"{NUMBER} ms max latency, {NUMBER} ms 50th, {NUMBER} ms 95th, {NUMBER} ms 99th, "
    rf"{NUMBER} ms 99.9th\.$")


def run_perf(*args, timeout=RUN_TIMEOUT_S):
    return subprocess.run([sys.executable, "-m", "netkafka.tools.perf", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def run_json(*args):
    done = run_perf(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def topic(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    return topic_name


@pytest.mark.parametrize("mode", ["send", "produce", "send_batch"])
def test_summary_line_and_every_record_in_the_topic(kafka_broker, topic, mode):
    count, size = 2345, 150
    extra = ["--rows-per-call", 100] if mode == "send_batch" else []  # the last call is short
    done = run_perf("--topic", topic, "--num-records", count, "--record-size", size,
                    "--bootstrap-servers", kafka_broker.bootstrap, "--mode", mode,
                    "--producer-config", "linger.ms=2", "batch.size=65536", *extra)
    assert done.returncode == 0, done.stderr
    match = SUMMARY.match(done.stdout.strip())
    assert match, done.stdout
    sent, per_s, mb_per_s = int(match[1]), float(match[2]), float(match[3])
    avg, max_ms, p50, p95, p99, p999 = map(float, match.groups()[3:])
    assert sent == count
    assert per_s > 0 and mb_per_s == pytest.approx(per_s * size / 2**20, rel=0.01, abs=0.01)
    assert 0 < p50 <= p95 <= p99 <= p999 <= max_ms and avg <= max_ms

    records = read_topic(kafka_broker.bootstrap, topic, count)
    assert len(records) == count
    assert {len(r.value) for r in records} == {size}
    assert all(re.fullmatch(rb"[A-Z]+", r.value) for r in records)  # the Java tool's letters


def test_json_summary(kafka_broker, topic):
    summary = run_json("--topic", topic, "--num-records", 1000, "--record-size", 64,
                       "--bootstrap-servers", kafka_broker.bootstrap, "--mode", "produce",
                       "--producer-config", "acks=1", "compression.type=lz4")
    assert summary["records_sent"] == 1000
    assert summary["records_failed"] == summary["records_unaccounted"] == 0
    assert summary["record_bytes_total"] == 64_000
    assert summary["producer_config"] == {"acks": 1, "compression_type": "lz4",
                                          "bootstrap_servers": kafka_broker.bootstrap}
    # Every tenth record is a latency probe sent with send(), the rest go with produce().
    assert summary["latency_samples"] == 100 and summary["latency_sample_every"] == 10
    assert (0 < summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"]
            <= summary["p999_ms"] <= summary["max_latency_ms"])
    assert summary["records_per_sec"] == pytest.approx(1000 / summary["elapsed_s"])
    assert len(read_topic(kafka_broker.bootstrap, topic, 1000)) == 1000


@pytest.mark.parametrize("mode, rows", [("send", 1), ("send_batch", 20), ("send_batch", 400)])
def test_throughput_holds_the_rate(kafka_broker, topic, mode, rows):
    count, per_s = 800, 400.0
    extra = ["--rows-per-call", rows] if mode == "send_batch" else []
    started = time.monotonic()
    summary = run_json("--topic", topic, "--num-records", count, "--record-size", 10,
                       "--throughput", per_s, "--bootstrap-servers", kafka_broker.bootstrap,
                       "--mode", mode, *extra)
    wall_s = time.monotonic() - started
    records = read_topic(kafka_broker.bootstrap, topic, count)
    assert len(records) == count == summary["records_sent"]
    # Lower bounds only: a loaded machine can make the run slower, never faster.  Record i
    # goes no earlier than i / per_s after the start; a call of rows records waits for
    # its last one's turn, less a throttle tick.
    least_s = (count - 1) / per_s - 0.05
    assert wall_s >= least_s
    assert summary["elapsed_s"] >= least_s
    assert summary["records_per_sec"] <= count / least_s
    # Independent of the tool's own clock: the records' CreateTime stamps, taken at send(),
    # span the calls from the first to the last.
    stamps = [r.timestamp_ms for r in records]
    assert (max(stamps) - min(stamps)) / 1000 >= (count - rows) / per_s - 0.06  # ms resolution


@pytest.mark.parametrize("throughput, rows", [("5", 1), ("400", 40), ("100000", 1000),
                                              ("-1", 1000)])
def test_throttled_send_batch_calls_hold_a_tenth_of_a_second(throughput, rows):
    """A call's rows go at its last row's turn: the default 1000 rows a call at
    --throughput 5 held the first call back 200 s, and a short run sent nothing."""
    args = perf.parse_args(["--topic", "t", "--num-records", "10", "--record-size", "10",
                            "--bootstrap-servers", "127.0.0.1:9", "--mode", "send_batch",
                            "--throughput", throughput])
    assert args.rows_per_call == rows


def test_progress_bar_on_a_terminal(kafka_broker, topic):
    controller, terminal = pty.openpty()
    with open(terminal, "wb") as stderr:
        done = subprocess.run(
            [sys.executable, "-m", "netkafka.tools.perf", "--topic", topic, "--num-records", "3000",
             "--record-size", "20", "--throughput", "3000", "--bootstrap-servers",
             kafka_broker.bootstrap], stdout=subprocess.PIPE, stderr=stderr, text=True,
            timeout=RUN_TIMEOUT_S, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    shown = b""
    while True:  # the bar's few redraws fit in the terminal's buffer: read once it is done
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the terminal's other end is closed and drained
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    assert done.returncode == 0
    # The terminal turns the final newline into \r\n; the bar's own \r start each redraw.
    redraws = shown.decode().replace("\r\n", "\n").split("\r")
    assert redraws[-1].startswith("[" + "#" * perf.BAR_WIDTH + "] 100.0% 3,000/3,000 records")
    assert len(redraws) >= 3  # redrawn in place while it ran, not one line per window
    assert "records sent," not in shown.decode()
    assert SUMMARY.match(done.stdout.strip())


def test_producer_properties_file_and_overrides(kafka_broker, topic, tmp_path):
    properties = tmp_path / "producer.properties"
    properties.write_text(f"# as kafka-producer-perf-test takes them\n"
                          f"bootstrap.servers={kafka_broker.bootstrap}\n"
                          f"linger.ms = 20\n"
                          f"batch.size: 32768\n"
                          f"acks all\n")
    summary = run_json("--topic", topic, "--num-records", 300, "--record-size", 10,
                       "--producer.config", properties, "--producer-config", "linger_ms=1")
    assert summary["producer_config"] == {"bootstrap_servers": kafka_broker.bootstrap,
                                          "linger_ms": 1, "batch_size": 32768, "acks": "all"}
    assert summary["records_sent"] == 300
    assert len(read_topic(kafka_broker.bootstrap, topic, 300)) == 300


def test_producer_config_given_twice_keeps_both(kafka_broker, topic):
    # Its two names read as two options; the second one dropped the first's settings.
    summary = run_json("--topic", topic, "--num-records", 100, "--record-size", 10,
                       "--bootstrap-servers", kafka_broker.bootstrap,
                       "--producer-config", "linger.ms=7", "acks=1",
                       "--producer-props", "batch.size=32768", "acks=all")
    assert summary["producer_config"] == {"linger_ms": 7, "acks": "all", "batch_size": 32768,
                                          "bootstrap_servers": kafka_broker.bootstrap}
    assert summary["records_sent"] == 100
    assert len(read_topic(kafka_broker.bootstrap, topic, 100)) == 100


@pytest.mark.parametrize("content, delimiter, payloads", [
    (b"first;second payload;3;", ";", [b"first", b"second payload", b"3"]),
    # As Java's: an empty piece between two delimiters is an empty payload; one
    # delimiter at the very start or end of the file delimits no piece.
    (b";first;;3;;", ";", [b"first", b"", b"3"]),
    # As Java's, the delimiter is a regular expression.
    (b"first|second payload|3", r"\|", [b"first", b"second payload", b"3"]),
    (b"first\tsecond\r\n3", r"\t|\r\n", [b"first", b"second", b"3"]),
])
@pytest.mark.parametrize("mode", ["send", "send_batch"])
def test_payload_file(kafka_broker, topic, tmp_path, content, delimiter, payloads, mode):
    path = tmp_path / "payloads.txt"
    path.write_bytes(content)
    summary = run_json("--topic", topic, "--num-records", 500, "--payload-file", path,
                       "--payload-delimiter", delimiter, "--mode", mode,
                       "--bootstrap-servers", kafka_broker.bootstrap)
    records = read_topic(kafka_broker.bootstrap, topic, 500)
    assert len(records) == summary["records_sent"] == 500
    values = [r.value for r in records]
    assert set(values) == set(payloads)  # 500 random picks of 3 or 4: all appear
    assert summary["record_bytes_total"] == sum(map(len, values))


@pytest.mark.parametrize("args, named", [
    (["--num-records", "0"], "--num-records"),
    (["--num-records", "ten"], "--num-records"),
    (["--throughput", "0"], "--throughput"),
    (["--mode", "fast"], "--mode"),
    (["--producer-config", "batch.size=-1"], "batch.size=-1"),
    (["--producer-config", "no.such.setting=1"], "no.such.setting"),
    (["--producer-config", "linger.ms"], "linger.ms"),
    (["--bootstrap-servers", "127.0.0.1:port"], "--bootstrap-servers"),
    (["--rows-per-call", "10"], "--rows-per-call"),
    (["--payload-delimiter", ","], "--payload-delimiter applies to --payload-file only"),
    (["--producer-config", "transactional.id=perf"],
     "--producer-config transactional.id=perf: netkafka-perf sends without transactions"),
    (["--payload-file", "/nonexistent/payloads"], "--payload-file"),
    # Refused before connecting: it connected and failed every record.
    (["--topic", "bad topic"], "--topic: topic 'bad topic' is not a valid Kafka topic name"),
])
def test_a_bad_argument_is_named(args, named):
    base = {"--topic": "t", "--num-records": "10", "--bootstrap-servers": "127.0.0.1:9"}
    for option, value in zip(args[::2], args[1::2]):
        base[option] = value
    if "--payload-file" not in base:
        base["--record-size"] = "10"
    done = run_perf(*[part for pair in base.items() for part in pair], timeout=60)
    assert done.returncode == 2
    assert "netkafka-perf: error:" in done.stderr and named in done.stderr, done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("delimiter, named", [
    ("|", "--payload-delimiter '|' matches an empty string"),
    ("(", "--payload-delimiter '(' is not a regular expression"),
])
def test_a_bad_payload_delimiter_is_named(tmp_path, delimiter, named):
    path = tmp_path / "payloads.txt"
    path.write_bytes(b"first|second")
    done = run_perf("--topic", "t", "--num-records", 10, "--bootstrap-servers", "127.0.0.1:9",
                    "--payload-file", path, "--payload-delimiter", delimiter, timeout=60)
    assert done.returncode == 2
    assert "netkafka-perf: error:" in done.stderr and named in done.stderr, done.stderr
    assert done.stdout == ""


def test_unreachable_broker_fails_with_a_non_zero_exit():
    with socket.socket() as closed:  # a port nothing listens on once this socket is gone
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    done = run_perf("--topic", "nowhere", "--num-records", 50, "--record-size", 10,
                    "--bootstrap-servers", f"127.0.0.1:{port}", "--json",
                    "--producer-config", "max.block.ms=1500", timeout=60)
    assert done.returncode == 1
    summary = json.loads(done.stdout)
    assert summary["records_sent"] == 0 and summary["records_failed"] == 50
    assert "50 of 50 records failed" in done.stderr and f"127.0.0.1:{port}" in done.stderr


def _sigint_default():
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("mode", ["send", "produce", "send_batch"])
def test_ctrl_c_stops_at_once_when_the_cluster_does_not_answer(kafka_broker, topic, mode):
    """Ctrl-C with every Produce request unanswered: the run waited for
    delivery_timeout_ms (ten minutes here) before it stopped.  Now it stops at once and
    counts what was acknowledged (nothing), failed and never sent."""
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    proxy = ProduceDroppingProxy((host, int(port)))
    proxy.set_dropping(True)  # metadata answered, Produce requests never
    count = 2000
    process = subprocess.Popen(
        [sys.executable, "-m", "netkafka.tools.perf", "--topic", topic, "--num-records",
         str(count), "--record-size", "100", "--bootstrap-servers", proxy.bootstrap,
         "--mode", mode, "--json", "--reporting-interval-ms", "100", "--producer-config",
         "delivery.timeout.ms=600000", "request.timeout.ms=590000", "linger.ms=5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        # Ctrl-C as a terminal delivers it: a suite run as a background job (a
        # non-interactive shell's `&`, as CI may run it) hands its children SIGINT
        # ignored, and the run went on for the 120 s.
        preexec_fn=_sigint_default)
    try:
        # A progress line: metadata has arrived and the records are being sent.
        assert "records sent" in process.stderr.readline()
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)  # far below the 600 s
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        proxy.set_dropping(False)
        proxy.close()
    assert process.returncode == perf.EXIT_INTERRUPTED, stderr
    summary = json.loads(stdout)
    assert summary["interrupted"] is True
    assert summary["records_sent"] == 0
    assert summary["records_failed"] + summary["records_unaccounted"] == count
    assert summary["errors"][0] == (
        f"interrupted: {summary['records_unaccounted']} records not sent or in a call cut "
        f"short, {summary['records_failed']} failed (those undelivered when stopped among "
        f"them)")
    assert "Traceback" not in stderr


@pytest.mark.parametrize("mode", ["send", "produce", "send_batch"])
def test_failed_records_are_counted(kafka_broker, topic, mode):
    # Records larger than max.request.size: refused by the producer, one by one.
    done = run_perf("--topic", topic, "--num-records", 40, "--record-size", 2000,
                    "--bootstrap-servers", kafka_broker.bootstrap, "--mode", mode, "--json",
                    "--producer-config", "max.request.size=1024", "batch.size=1024")
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert summary["records_sent"] == 0 and summary["records_failed"] == 40
    assert summary["records_unaccounted"] == 0
    assert "40 of 40 records failed" in done.stderr and "max_request_size" in done.stderr


def test_console_script_is_declared():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["netkafka-perf"].partition(":")
    assert module == perf.__name__ and getattr(perf, function) is perf.main


def test_properties_file_is_read_as_java_reads_it(tmp_path):
    path = tmp_path / "producer.properties"
    # "#:" begins a comment too (jproperties alone reads it as metadata, and refuses it
    # without a key).
    path.write_text("#::::: the cluster :::::\n#:\n! comment\nbootstrap.servers = h1:9092,\\\n"
                    "    h2:9092\n#: acks=0\nclient.id: caf\\u00e9\nsasl.jaas.config a\\=b\n")
    assert perf.read_properties(path) == [("bootstrap.servers", "h1:9092,h2:9092"),
                                          ("client.id", "café"), ("sasl.jaas.config", "a=b")]


def test_a_malformed_properties_line_is_named(tmp_path):
    path = tmp_path / "producer.properties"
    # A Windows path: Java's Properties too reads \u as the start of a \uXXXX escape.
    path.write_text("# the cluster\nbootstrap.servers=127.0.0.1:9\n"
                    "ssl.truststore.location=C:\\users\\me\\ca.pem\n")
    done = run_perf("--topic", "t", "--num-records", 10, "--record-size", 10,
                    "--producer.config", path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert re.search(r"producer.properties: line 3: a malformed \\uXXXX escape", done.stderr), \
        done.stderr
    assert "Traceback" not in done.stderr


# -- Java-style security properties against the secured broker ---------------------------

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def secured_properties(secured_broker, listener, tmp_path):
    """A client.properties for `listener` as a Java client's user writes it (alice, by
    SCRAM in sasl.jaas.config)."""
    path = tmp_path / "client.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in
                            secured_broker.java_client_config(listener).items()))
    return path


# MTLS through a properties file: tests/test_tls.py.
@pytest.mark.parametrize("listener", ["SASL_SSL_SCRAM_SHA_512", "SASL_SSL_SCRAM_SHA_256"])
def test_java_security_properties_reach_the_secured_broker(secured_broker, topic_name, tmp_path,
                                                           listener):
    create_topic(secured_broker.listeners["PLAINTEXT"].bootstrap, topic_name, partitions=3)
    properties = secured_properties(secured_broker, listener, tmp_path)
    done = run_perf("--topic", topic_name, "--num-records", 500, "--record-size", 50,
                    "--producer.config", properties, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["records_sent"] == 500 and summary["records_failed"] == 0
    # The summary shows the settings as read, never a password.
    shown = summary["producer_config"]
    assert shown["security_protocol"] == secured_broker.listeners[listener].security_protocol
    assert shown["ssl_cafile"] == str(secured_broker.ca_file) and shown["ssl_check_hostname"]
    for secret in ("sasl_jaas_config", "ssl_password"):
        assert shown.get(secret, perf.HIDDEN) == perf.HIDDEN
    for secret in (secured_broker.client_certs["alice"].key_password,
                   *(passwords["alice"] for passwords in secured_broker.passwords.values())):
        assert secret not in done.stdout + done.stderr
    records = read_topic(secured_broker.listeners[listener].bootstrap, topic_name, 500,
                         client_config=secured_broker.client_config(listener, "bob"))
    assert len(records) == 500 and {len(r.value) for r in records} == {50}


@pytest.mark.parametrize("line, named", [
    ("ssl.truststore.password=changeit", r"ssl.truststore.password.*a PEM trust store has no "
                                         r"password"),
    ("sasl.client.callback.handler.class=software.amazon.msk.auth.iam.IAMClientCallbackHandler",
     r"sasl.client.callback.handler.class.*MskIamTokenProvider"),
    ("ssl.keystore.type=PKCS12", r"ssl.keystore.type='PKCS12': must be 'PEM'"),
    ("sasl.oauthbearer.token.endpoint.url=https://idp/token",
     r"sasl.oauthbearer.token.endpoint.url.*OidcClientCredentialsProvider"),
    (f'sasl.jaas.config={SCRAM_MODULE} required username="alice" password="hunter2-pw"',
     r"sasl.jaas.config.* is not ended by ';'"),
    (f'sasl.jaas.config={SCRAM_MODULE} required username="alice" password="hunter2-pw";\n'
     "sasl.mechanism=PLAIN", r"needs PlainLoginModule"),
    (f'sasl.jaas.config={SCRAM_MODULE} required username="alice" password="hunter2-pw";\n'
     "sasl.mechanism=GSSAPI", r"PLAIN and SCRAM login modules only"),
    (f'sasl.jaas.config={SCRAM_MODULE} required username="alice" password="hunter2-pw";\n'
     "sasl.plain.password=hunter2-pw", r"sasl_jaas_config and sasl_plain_password are both set"),
])
def test_unsupported_security_properties_are_named(tmp_path, line, named):
    path = tmp_path / "client.properties"
    path.write_text(f"bootstrap.servers=127.0.0.1:9\nsecurity.protocol=SASL_SSL\n"
                    f"sasl.mechanism=SCRAM-SHA-512\n{line}\n")
    done = run_perf("--topic", "t", "--num-records", 10, "--record-size", 10,
                    "--producer.config", path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert re.search(named, done.stderr), done.stderr
    assert "hunter2" not in done.stderr


def test_the_origin_an_error_names_hides_a_password(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("bootstrap.servers=127.0.0.1:9\nssl.key.password=hunter2-pw\n")
    done = run_perf("--topic", "t", "--num-records", 10, "--record-size", 10,
                    "--producer.config", path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert re.search(r"\(ssl.key.password=\[hidden\]\): ssl_password is set but "
                     r"security_protocol='PLAINTEXT'", done.stderr), done.stderr
    assert "hunter2" not in done.stderr
