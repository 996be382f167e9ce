"""The test harness itself: a real broker and cluster, topic creation, the independent reader.

These prove the tools every other test stands on; they check nothing of netkafka's producer.
"""
import functools
import json
import os
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer

from netkafka.errors import BrokerHarnessError
from netkafka.testing.admin import broker_api_versions, create_topic
from netkafka.testing.broker import (FAST_START_JVM_OPTIONS, KAFKA_LINES, Cluster, Listener,
                                     _decode_metadata, free_ports, jar_version, kafka_libs_dir,
                                     new_cluster_id, probe_metadata)
from netkafka.testing.fixtures import ExternalBroker
from netkafka.testing.reader import Record, read_topic

WAIT_S = 30.0


def host_port(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return host, int(port)


def produce(bootstrap: str, topic: str, messages: list[dict], **config) -> list[Record]:
    """Write messages with confluent-kafka; return the records the reader should see.

    The expected records come from the messages as given, placed where the delivery reports
    say (delivery reports carry no headers).
    """
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    expected = []

    def on_delivery(message, error, report):
        assert error is None, error
        timestamp_ms = message.get("timestamp", report.timestamp()[1])
        expected.append(Record(report.partition(), report.offset(), message.get("key"),
                               message.get("value"), message.get("headers", []), timestamp_ms,
                               "create_time"))

    for message in messages:
        producer.produce(topic, on_delivery=functools.partial(on_delivery, message), **message)
    assert producer.flush(WAIT_S) == 0
    assert len(expected) == len(messages)
    return expected


def kafka_process_runs(pid: int) -> bool:
    """True when pid is a live (not zombie) process running kafka.Kafka."""
    try:
        return b"kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat: R, S, T (stopped), Z, ..."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def wait_until(condition, what: str, timeout_s: float = WAIT_S):
    deadline = time.monotonic() + timeout_s
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)
    return result


# -- the single broker ---------------------------------------------------------------------------


def test_broker_answers_metadata(kafka_broker):
    result = probe_metadata(*host_port(kafka_broker.bootstrap))
    assert len(result.brokers) == 1
    node_id, host, port = result.brokers[0]
    assert (host, port) == host_port(kafka_broker.bootstrap)
    assert result.controller_id == node_id
    assert result.cluster_id


def test_topic_is_created_with_a_leader_per_partition(kafka_broker, topic_name):
    metadata = create_topic(kafka_broker.bootstrap, topic_name, partitions=4)
    partitions = metadata.topics[topic_name].partitions
    assert sorted(partitions) == [0, 1, 2, 3]
    assert all(p.leader == 1 and p.isrs == [1] for p in partitions.values())
    with pytest.raises(KafkaException, match="already exists"):
        create_topic(kafka_broker.bootstrap, topic_name, partitions=4)


def test_reader_returns_exactly_what_the_producer_wrote(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    base_ms = 1_700_000_000_000
    messages = [
        {"key": None, "value": b"no key"},
        {"key": b"", "value": b"", "headers": [("empty", b"")]},
        {"key": b"tombstone", "value": None},
        {"key": b"binary", "value": bytes(range(256)), "headers": [("bin", bytes(range(256)))]},
        {"key": b"big", "value": os.urandom(200_000)},
        {"key": b"headers", "value": b"v", "headers": [("a", b"1"), ("a", b"2"), ("null", None), ("\u00e9", b"x")]},
    ]
    messages += [{"key": f"key-{i}".encode(), "value": f"value-{i}".encode() * (i % 7),
                  "headers": [("i", str(i).encode())]} for i in range(1000)]
    for i, message in enumerate(messages):
        message["partition"] = i % 3
        message["timestamp"] = base_ms + i
    expected = produce(kafka_broker.bootstrap, topic_name, messages)

    records = read_topic(kafka_broker.bootstrap, topic_name, expected_count=len(messages))

    assert sorted(records) == sorted(expected)
    assert {r.timestamp_ms - base_ms for r in records} == set(range(len(messages)))
    for partition in range(3):
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == list(range(len(offsets)))


def test_reader_reports_log_append_time(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, config={"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000)
    produce(kafka_broker.bootstrap, topic_name, [{"value": b"x", "timestamp": 1}])
    after_ms = int(time.time() * 1000)
    [record] = read_topic(kafka_broker.bootstrap, topic_name, expected_count=1)
    assert record.timestamp_type == "log_append_time"
    # Clocks of broker and test are the same machine's; allow a second of rounding and skew.
    assert before_ms - 1000 <= record.timestamp_ms <= after_ms + 1000


def test_reader_reads_an_empty_topic_as_empty(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    assert read_topic(kafka_broker.bootstrap, topic_name) == []


def test_reader_fails_when_records_are_missing(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    produce(kafka_broker.bootstrap, topic_name, [{"value": b"only one"}])
    with pytest.raises(TimeoutError, match="read 1 records"):
        read_topic(kafka_broker.bootstrap, topic_name, expected_count=2, timeout_s=2)


def test_reader_fails_on_a_missing_topic(kafka_broker, topic_name):
    with pytest.raises(KafkaException):
        read_topic(kafka_broker.bootstrap, topic_name, timeout_s=5)


# -- Kafka 3.9 beside 4.x -------------------------------------------------------------------------


def test_kafka_3_9_offers_produce_v0_to_v2(kafka_broker_3_9):
    """ApiVersions as librdkafka hears it.  (4.x brokers advertise Produce v0 too, so that old
    librdkafka releases keep working, and refuse v0-v2 requests: only taking a legacy
    request, as below, tells the lines apart.)"""
    versions = broker_api_versions(kafka_broker_3_9.bootstrap)
    assert versions["Produce"][0] == 0 and versions["Produce"][1] >= 2


def test_kafka_3_9_takes_legacy_message_sets(kafka_broker_3_9, topic_name):
    """librdkafka told to skip ApiVersions and to take the broker for 0.9 speaks that release's
    protocol: an old Produce version with message set v0 (no timestamps)."""
    create_topic(kafka_broker_3_9.bootstrap, topic_name)
    messages = [{"key": f"k{i}".encode(), "value": f"v{i}".encode()} for i in range(20)]
    expected = produce(kafka_broker_3_9.bootstrap, topic_name, messages,
                       **{"api.version.request": False, "broker.version.fallback": "0.9.0"})
    records = read_topic(kafka_broker_3_9.bootstrap, topic_name, expected_count=len(messages))
    assert [(r.offset, r.key, r.value) for r in records] == [(e.offset, e.key, e.value) for e in expected]


def test_kafka_3_9_release_and_jars(kafka_broker_3_9):
    if isinstance(kafka_broker_3_9, ExternalBroker):
        pytest.skip("NETKAFKA_BOOTSTRAP_3_9 names a broker this session did not start")
    assert kafka_broker_3_9.release.startswith("3.9.")
    assert jar_version(kafka_libs_dir("3.9"), "kafka_2.13") == kafka_broker_3_9.release
    assert not jar_version(kafka_libs_dir(), "kafka-clients").startswith("3.")


# -- the three-node cluster ----------------------------------------------------------------------


def test_cluster_forms_and_replicates_to_all_three(kafka_cluster, topic_name):
    for node in kafka_cluster.nodes:
        result = node.probe()
        assert result.cluster_id == kafka_cluster.cluster_id
        assert [broker[0] for broker in result.brokers] == [1, 2, 3]

    metadata = create_topic(kafka_cluster.bootstrap, topic_name, partitions=3, replication_factor=3,
                            config={"min.insync.replicas": "3"})
    partitions = metadata.topics[topic_name].partitions
    assert sorted(partitions) == [0, 1, 2]
    for partition in partitions.values():
        assert sorted(partition.replicas) == [1, 2, 3]
        assert sorted(partition.isrs) == [1, 2, 3]

    # With min.insync.replicas=3, acks=all succeeds only once every replica has the records.
    expected = produce(kafka_cluster.bootstrap, topic_name,
                       [{"key": f"k{i}".encode(), "value": b"v"} for i in range(30)], acks="all")
    assert sorted(read_topic(kafka_cluster.bootstrap, topic_name, expected_count=30)) == sorted(expected)


def test_one_node_pauses_stops_and_comes_back(failover_cluster):
    node, witness = failover_cluster.node(3), failover_cluster.node(1)

    node.pause()
    assert process_state(node.pid) == "T"
    with pytest.raises(OSError):
        node.probe(timeout_s=1)
    node.resume()
    assert process_state(node.pid) in "RS"
    assert node.probe().cluster_id == failover_cluster.cluster_id

    old_pid = node.pid
    node.stop()
    assert not node.is_running() and not kafka_process_runs(old_pid)
    wait_until(lambda: [b[0] for b in witness.probe().brokers] == [1, 2], "node 3 to leave the cluster")

    node.restart()
    assert node.pid != old_pid and kafka_process_runs(node.pid)
    failover_cluster.wait_ready()
    assert [b[0] for b in witness.probe().brokers] == [1, 2, 3]


# -- the launcher's edges ------------------------------------------------------------------------


def run_cli(state_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NETKAFKA_STATE_DIR": str(state_dir)}
    return subprocess.run([sys.executable, "-m", "netkafka.testing.broker", *args], env=env,
                          capture_output=True, text=True, timeout=180)


def test_cli_start_status_stop_and_a_failing_start(tmp_path):
    [port] = free_ports(1)
    state, other_state = tmp_path / "state", tmp_path / "other"

    started = run_cli(state, "start", "--fast-start", "--port", str(port))
    try:
        assert started.returncode == 0, started.stderr
        assert started.stdout.splitlines()[-1] == f"127.0.0.1:{port}"
        [node] = json.loads((state / "kafka.json").read_text())["nodes"]
        assert kafka_process_runs(node["pid"])
        assert probe_metadata("127.0.0.1", port).brokers[0][2] == port

        status = run_cli(state, "status")
        assert status.returncode == 0, status.stdout
        assert f"running: 127.0.0.1:{port}" in status.stdout
        assert "answers, alive brokers [1]" in status.stdout

        again = run_cli(state, "start")
        assert again.returncode == 1 and "still runs" in again.stderr

        # Another cluster on the same port: its broker cannot bind and exits.
        clash = run_cli(other_state, "start", "--fast-start", "--port", str(port))
        assert clash.returncode == 1
        assert "exited with status 1 while starting" in clash.stderr
        assert "Address already in use" in clash.stderr
        assert "---- last 40 lines of" in clash.stderr
    finally:
        stopped = run_cli(state, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not kafka_process_runs(node["pid"])
    after = run_cli(state, "status")
    assert after.returncode == 3 and "not running" in after.stdout


def test_no_broker_outlives_a_session_even_when_interrupted(tmp_path):
    """A pytest session that leaks a node and is then interrupted leaves no JVM behind."""
    pids = tmp_path / "pids"
    pids.mkdir()
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["netkafka.testing.fixtures"]\n')
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        from netkafka.testing.broker import FAST_START_JVM_OPTIONS, Cluster

        PIDS = Path({str(pids)!r})

        def test_leaks_a_node(tmp_path):
            cluster = Cluster(1, directory=tmp_path, jvm_options=FAST_START_JVM_OPTIONS)
            cluster.start()
            (PIDS / "leaked").write_text(str(cluster.nodes[0].pid))

        def test_interrupted(kafka_broker):
            (PIDS / "fixture").write_text(str(kafka_broker.nodes[0].pid))
            raise KeyboardInterrupt
    """))
    env = {key: value for key, value in os.environ.items() if key != "NETKAFKA_BOOTSTRAP"}
    inner = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'tmp'}",
         "test_inner.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    output = inner.stdout + inner.stderr
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "Kafka nodes still running at the end of the session, now killed" in output
    for name in ("leaked", "fixture"):
        pid = int((pids / name).read_text())
        assert not kafka_process_runs(pid), f"{name} broker (pid {pid}) still runs"


def test_cluster_arguments_are_checked():
    with pytest.raises(ValueError, match="node_count"):
        Cluster(0)
    with pytest.raises(ValueError, match="min_insync_replicas"):
        Cluster(1, min_insync_replicas=2)
    with pytest.raises(ValueError, match="kafka_version must be one of"):
        Cluster(1, kafka_version="3.8")
    with pytest.raises(ValueError, match="security protocol"):
        Cluster(1, listeners=[Listener("TLS", "TLS")])
    with pytest.raises(ValueError, match="upper-case"):
        Cluster(1, listeners=[Listener("tls", "SSL")])
    with pytest.raises(ValueError, match="harness's own"):
        Cluster(1, listeners=[Listener("CONTROLLER", "SSL")])
    with pytest.raises(ValueError, match="repeat"):
        Cluster(1, listeners=[Listener("TLS", "SSL"), Listener("TLS", "SASL_SSL")])
    with pytest.raises(ValueError, match="not a listener"):
        Cluster(1, inter_broker_listener="TLS")


def test_every_listener_of_every_node_has_its_own_port(tmp_path):
    listeners = [Listener("TLS", "SSL"), Listener("SASL", "SASL_PLAINTEXT")]
    # A directory of the test's own: a cluster never started or stopped would leave the one
    # it makes itself in the system's temporary directory.
    cluster = Cluster(3, listeners=listeners, directory=tmp_path)
    ports = [node.broker_port for node in cluster.nodes] + [node.controller_port for node in cluster.nodes]
    ports += [port for node in cluster.nodes for port in node.listener_ports.values()]
    assert len(ports) == len(set(ports)) == 3 * 4
    assert cluster.listener_bootstrap("TLS") == ",".join(
        f"127.0.0.1:{node.listener_ports['TLS']}" for node in cluster.nodes)
    assert cluster.listener_bootstrap("PLAINTEXT") == cluster.bootstrap
    with pytest.raises(KeyError, match="no listener 'SSL'"):
        cluster.listener_bootstrap("SSL")


@pytest.mark.parametrize("version", sorted(KAFKA_LINES))
def test_missing_jars_are_reported(tmp_path, monkeypatch, version):
    variable = KAFKA_LINES[version].libs_variable
    monkeypatch.setenv(variable, str(tmp_path))
    with pytest.raises(BrokerHarnessError, match=f"{variable}=.* holds no kafka_"):
        kafka_libs_dir(version)


def test_state_keeps_each_nodes_line_and_listeners(tmp_path):
    cluster = Cluster(2, kafka_version="3.9", listeners=[Listener("TLS", "SSL")], directory=tmp_path)
    again = Cluster.from_state(json.loads(json.dumps(cluster.to_state())))
    assert again.kafka_version == "3.9"
    for node, restored in zip(cluster.nodes, again.nodes):
        assert restored.kafka_version == "3.9"
        assert restored.address("TLS") == node.address("TLS")
    # A state file from before the version matrix names neither: 4.x, no further listeners.
    old_state = cluster.to_state()
    for node in old_state["nodes"]:
        del node["kafka_version"], node["listener_ports"]
    assert [node.kafka_version for node in Cluster.from_state(old_state).nodes] == ["4", "4"]


def test_cli_takes_only_known_kafka_lines(tmp_path):
    refused = run_cli(tmp_path, "start", "--kafka-version", "3.8")
    assert refused.returncode == 2 and "invalid choice: '3.8'" in refused.stderr


def test_cluster_ids_have_kafkas_form():
    ids = {new_cluster_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 22 and not i.startswith("-") and "=" not in i for i in ids)


def test_probe_rejects_truncated_responses():
    host = b"127.0.0.1"
    response = (struct.pack(">iii", 1, 0, 1) + struct.pack(">ih", 1, len(host)) + host
                + struct.pack(">ih", 9092, -1) + struct.pack(">h", 2) + b"id" + struct.pack(">ii", 1, 0))
    assert _decode_metadata(response, 1) == ("id", 1, ((1, "127.0.0.1", 9092),))
    for size in range(len(response) - 4):  # the topic count is not read
        with pytest.raises(struct.error):
            _decode_metadata(response[:size], 1)
    with pytest.raises(BrokerHarnessError, match="correlation id"):
        _decode_metadata(response, 2)


def test_stop_deletes_the_topic_data_in_a_given_directory_and_keeps_the_logs(tmp_path, topic_name):
    # pytest keeps the last sessions' directories: without this, hundreds of MB of topic
    # data stayed in the temp directory after each run.
    cluster = Cluster(1, directory=tmp_path, jvm_options=FAST_START_JVM_OPTIONS)
    cluster.start()
    try:
        create_topic(cluster.bootstrap, topic_name)
        producer = Producer({"bootstrap.servers": cluster.bootstrap})
        producer.produce(topic_name, b"x" * 1000)
        assert producer.flush(30) == 0
        (node,) = cluster.nodes
        assert any(node.data_dir.glob(f"{topic_name}-0/*.log"))
    finally:
        cluster.stop()
    assert not node.data_dir.exists() and node.log_path.stat().st_size > 0
    assert tmp_path.exists()


def test_records_with_old_timestamps_are_kept_for_the_reader(tmp_path, topic_name):
    # Tests write timestamps of 2023 and of 1970.  The broker's default retention (7 days,
    # checked every 5 minutes) deleted such a log between a produce and its read: the
    # reader got 42 of 300 records, then its position was past the end.  The check runs
    # from the start and every 200 ms here, so that a deletion happens within the test.
    cluster = Cluster(1, directory=tmp_path, jvm_options=FAST_START_JVM_OPTIONS,
                      extra_config={"log.initial.task.delay.ms": 0,
                                    "log.retention.check.interval.ms": 200})
    cluster.start()
    try:
        create_topic(cluster.bootstrap, topic_name)
        messages = [{"value": b"old-%d" % i, "partition": 0, "timestamp": 1000 + i}
                    for i in range(10)]
        produce(cluster.bootstrap, topic_name, messages)
        time.sleep(2)
        records = read_topic(cluster.bootstrap, topic_name, expected_count=10, timeout_s=10)
        assert [r.value for r in records] == [m["value"] for m in messages]
    finally:
        cluster.stop()
