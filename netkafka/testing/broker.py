"""Starts real Apache Kafka brokers on 127.0.0.1 for the tests, the demo and the benchmarks.

Every node is one JVM in KRaft combined mode (broker and controller in one process) with a
static controller quorum of all the cluster's nodes.  A node lives in its own directory:

    <cluster dir>/node-<id>/server.properties   the broker's config, written here
                           /log4j2.properties   sends the broker's log lines to stdout ...
                           /server.log          ... which, with the JVM's own output, lands here
                           /data/               log.dirs, formatted by kafka.tools.StorageTool

A cluster counts as started when every node answers a Metadata request listing every node as
an alive broker.  The probe is a few bytes over a raw socket so that this module needs nothing
beyond the standard library and a Java runtime.

Two release lines run (KAFKA_LINES): 4.x, the default, and 3.9, the last line that takes
Produce v0-v2.  Both are configured alike: the same properties, the same storage tool
options, and a log4j2 config for both (the poms bind slf4j to log4j2 for 3.9 too).

Besides its PLAINTEXT listener a node can serve further listeners, each on its own port
(`Listener`); netkafka.testing.security builds a node with TLS, mTLS and SASL listeners on it.

From the shell (state in .state/ of the checkout, or in $NETKAFKA_STATE_DIR):

    python -m netkafka.testing.broker start [--nodes 3] [--port 9092] [--fast-start]
                                            [--kafka-version 3.9]
                                            # prints the bootstrap address 127.0.0.1:PORT last
    python -m netkafka.testing.broker status
    python -m netkafka.testing.broker stop
"""
import argparse
import atexit
import base64
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Mapping, NamedTuple, Optional, Sequence

from netkafka.client.resolver import host_port
from netkafka.errors import BrokerHarnessError

REPO_ROOT = Path(__file__).resolve().parents[2]

HOST = "127.0.0.1"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
# How long to wait for the exit of a process that was sent SIGKILL.
KILL_WAIT_S = 10.0
PROBE_TIMEOUT_S = 1.0
POLL_INTERVAL_S = 0.1
LOG_TAIL_LINES = 40
# Written to a node's log before each start of its JVM, so that a report covers the latest run.
START_MARKER = "==== netkafka.testing.broker: starting node"

# A small fixed heap keeps three nodes plus the tests within a shared 2-core machine.  The
# serial collector: on two cores a parallel or concurrent one only adds threads competing
# with the client under test (and costs about 2 s more CPU to start).
BROKER_JVM_OPTIONS = ("-Xms512m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
# For nodes whose throughput does not matter (tests): without the C2 compiler a node starts
# on about 40% less CPU, and its code runs slower.
FAST_START_JVM_OPTIONS = (*BROKER_JVM_OPTIONS, "-XX:TieredStopAtLevel=1")
# That heap holds about 10,000 partitions, no more: a node given 10,000 had its old
# generation full after 3 full collections; at 15,000 (two 10,000-partition topics being
# made) it spent 344 s of its first 660 s in full collections and made ~100 partitions a
# minute, a broker too starved to answer anything in time.  A node for more partitions
# gets a larger heap (jvm_options_with_heap).
BROKER_HEAP_PARTITIONS = 10_000

# The storage formatter runs for a second: the C1 compiler alone serves it fastest.
FORMAT_JVM_OPTIONS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")

LOG4J2_CONFIG = """\
# Written by netkafka.testing.broker: every logger to stdout, which the launcher sends to
# server.log beside this file.
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
# Per-request and per-partition-state lines would drown the rest during a benchmark.
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def jvm_options_with_heap(jvm_options: Sequence[str], heap_mib: int) -> tuple[str, ...]:
    """jvm_options with a fixed heap of heap_mib MiB instead of theirs."""
    kept = [o for o in jvm_options if not o.startswith(("-Xms", "-Xmx"))]
    return (f"-Xms{heap_mib}m", f"-Xmx{heap_mib}m", *kept)


# -- locating the jars and the JVM -------------------------------------------------------------


class KafkaLine(NamedTuple):
    """A release line of Apache Kafka the harness runs, and where its jars come from."""

    name: str             # what kafka_version= and --kafka-version take: "4" or "3.9"
    pom: str              # the pom in the checkout naming its jars (the same as `make kafka`)
    cache_dir: str        # its directory under .cache/, holding libs/
    libs_variable: str    # environment variable naming a directory of its jars instead
    share_groups: bool    # has the share coordinator (KIP-932) and its settings


KAFKA_LINES = {
    "4": KafkaLine("4", "pom.xml", "kafka", "NETKAFKA_KAFKA_LIBS", share_groups=True),
    "3.9": KafkaLine("3.9", "kafka-3.9.pom.xml", "kafka-3.9", "NETKAFKA_KAFKA_3_9_LIBS",
                     share_groups=False),
}
DEFAULT_KAFKA_VERSION = "4"


def kafka_line(kafka_version: str) -> KafkaLine:
    """The KafkaLine named kafka_version ("4" or "3.9"); ValueError for any other."""
    try:
        return KAFKA_LINES[kafka_version]
    except KeyError:
        raise ValueError(f"kafka_version must be one of {sorted(KAFKA_LINES)}, got {kafka_version!r}") from None


def kafka_libs_dir(kafka_version: str = DEFAULT_KAFKA_VERSION) -> Path:
    """Return the directory holding the jars of a Kafka line, fetching them with mvn if needed.

    The line's variable ($NETKAFKA_KAFKA_LIBS for 4.x, $NETKAFKA_KAFKA_3_9_LIBS for 3.9) wins;
    otherwise .cache/<line>/libs of this checkout, filled from the line's pom by the same
    command as `make kafka` when it is missing.

    Raises:
        ValueError: kafka_version names no line the harness knows.
        BrokerHarnessError: no jars found and none could be fetched.
    """
    line = kafka_line(kafka_version)
    configured = os.environ.get(line.libs_variable)
    if configured:
        libs = Path(configured)
        if not any(libs.glob("kafka_*.jar")):
            raise BrokerHarnessError(f"{line.libs_variable}={configured} holds no kafka_*.jar")
        return libs
    libs = REPO_ROOT / ".cache" / line.cache_dir / "libs"
    if any(libs.glob("kafka_*.jar")):
        return libs
    pom = REPO_ROOT / line.pom
    if not pom.is_file():
        raise BrokerHarnessError(
            f"Apache Kafka {line.name}'s jars are not in {libs}; set {line.libs_variable} to a "
            f"directory of Kafka {line.name} jars, or run `make kafka` in a netkafka checkout"
        )
    command = [
        "mvn", "--batch-mode", "--quiet", "-f", str(pom), "dependency:copy-dependencies",
        "-DincludeScope=runtime", f"-DoutputDirectory={libs}",
    ]
    try:
        subprocess.run(command, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BrokerHarnessError(f"fetching Kafka's jars with `{' '.join(command)}` failed: {exc}") from exc
    return libs


def jar_version(libs: Path, artifact: str) -> Optional[str]:
    """The version in the name of the jar of `artifact` in libs, e.g. "3.9.2"; None if absent."""
    for jar in sorted(libs.glob(f"{artifact}-*.jar")):
        match = re.fullmatch(rf"{re.escape(artifact)}-(\d[\w.-]*)\.jar", jar.name)
        if match:
            return match.group(1)
    return None


def java_executable() -> str:
    """Return the java to run the broker with: $JAVA_HOME/bin/java, else java on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return os.path.join(java_home, "bin", "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerHarnessError("no java found (set JAVA_HOME or put Java 17+ on PATH)")
    return found


# Loading and verifying Kafka's classes is a third of a broker's start-up CPU.  The first node
# that stops cleanly leaves a dynamic class-data-sharing archive of the classes it loaded;
# later JVMs map that archive instead.  A JVM that finds the archive stale (other jars or
# another JDK) says so in its log and loads classes as usual.
CLASS_DUMP_NAME = "classes.jsa"  # what a node's JVM writes into the node directory at exit


@functools.lru_cache(maxsize=None)
def class_archive_path(libs: Path, java: str) -> Optional[Path]:
    """Where the shared class archive for these jars and this java is kept (None: nowhere).

    It sits beside the jars' directory, named by a digest of the java binary's path and the
    jars' names, sizes and times, so that new jars or a new JDK start a new archive.
    """
    cache = libs.parent
    if not os.access(cache, os.W_OK):
        return None
    digest = hashlib.sha1(os.path.realpath(java).encode())
    for jar in sorted(libs.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return cache / f"kafka-classes-{digest.hexdigest()[:16]}.jsa"


def new_cluster_id() -> str:
    """Return a random cluster id in Kafka's Uuid form: 16 bytes, URL-safe base64, no padding."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        # Kafka's own generator avoids a leading '-', which command lines take for an option.
        if not cluster_id.startswith("-"):
            return cluster_id


def free_ports(count: int) -> list[int]:
    """Return `count` distinct ports that were free on 127.0.0.1 a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# -- the Metadata probe ------------------------------------------------------------------------

METADATA_API_KEY = 3
# v4 is the oldest version Kafka 4.x still serves whose response holds the cluster id and the
# controller id, and it is not yet a flexible (tagged-field) version.
METADATA_API_VERSION = 4
PROBE_CLIENT_ID = b"netkafka-harness"
# A Metadata response for no topics is a few hundred bytes; anything larger is not a broker.
MAX_PROBE_RESPONSE_BYTES = 1 << 20


class ProbeResult(NamedTuple):
    """What a broker's Metadata response (asked for no topics) says about the cluster."""

    cluster_id: Optional[str]
    controller_id: int
    brokers: tuple[tuple[int, str, int], ...]  # (node id, host, port), as the broker lists them


def probe_metadata(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Send one Metadata v4 request for no topics and decode the answer.

    Raises:
        OSError: the connection failed or timed out.
        BrokerHarnessError: the answer is not a well-formed Metadata response.
    """
    correlation_id = 1
    body = struct.pack(
        f">hhih{len(PROBE_CLIENT_ID)}sib",
        METADATA_API_KEY, METADATA_API_VERSION, correlation_id,
        len(PROBE_CLIENT_ID), PROBE_CLIENT_ID,
        0,  # topics: an empty array asks for none (a null one would ask for all)
        0,  # allow_auto_topic_creation: false
    )
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        if not 0 < size <= MAX_PROBE_RESPONSE_BYTES:
            raise BrokerHarnessError(f"{host}:{port} answered with a frame of {size} bytes")
        response = _recv_exactly(sock, size)
    try:
        return _decode_metadata(response, correlation_id)
    except struct.error as exc:
        raise BrokerHarnessError(f"{host}:{port} sent a truncated Metadata response: {exc}") from exc


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionError("connection closed before the whole response arrived")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _decode_metadata(response: bytes, correlation_id: int) -> ProbeResult:
    """Decode the parts of a Metadata v4 response the harness needs; struct checks bounds."""
    received_id, _throttle_time_ms, broker_count = struct.unpack_from(">iii", response, 0)
    if received_id != correlation_id:
        raise BrokerHarnessError(f"response to correlation id {received_id}, expected {correlation_id}")
    offset = 12
    brokers = []
    for _ in range(broker_count):
        (node_id,) = struct.unpack_from(">i", response, offset)
        host, offset = _decode_string(response, offset + 4)
        (port,) = struct.unpack_from(">i", response, offset)
        _rack, offset = _decode_string(response, offset + 4)
        brokers.append((node_id, host, port))
    cluster_id, offset = _decode_string(response, offset)
    (controller_id,) = struct.unpack_from(">i", response, offset)
    return ProbeResult(cluster_id, controller_id, tuple(sorted(brokers)))


def _decode_string(buffer: bytes, offset: int) -> tuple[Optional[str], int]:
    """Decode an int16-length-prefixed nullable string; return it and the offset after it."""
    (length,) = struct.unpack_from(">h", buffer, offset)
    offset += 2
    if length < 0:
        return None, offset
    if offset + length > len(buffer):
        raise struct.error(f"string of {length} bytes at offset {offset} overruns the response")
    return buffer[offset:offset + length].decode("utf-8"), offset + length


# -- nodes and clusters ------------------------------------------------------------------------

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# The listeners every node has: clients' PLAINTEXT (also the readiness probe's) and the quorum's.
PLAINTEXT_LISTENER = "PLAINTEXT"
CONTROLLER_LISTENER = "CONTROLLER"


class Listener(NamedTuple):
    """A listener a node serves beside PLAINTEXT and CONTROLLER, on a port of its own.

    Its own settings are the broker's `listener.name.<name in lower case>.*` properties, given
    with the cluster's other settings.
    """

    name: str               # e.g. "SASL_SSL_PLAIN": upper-case letters, digits and '_'
    security_protocol: str  # one of SECURITY_PROTOCOLS
    # The address it binds and advertises: "::1" makes an IPv6 listener (written [::1]).
    host: str = HOST

# Nodes started by this process that must not outlive it (everything but `start` from the
# shell).  Guarded by _LIVE_LOCK: fixtures, tests and atexit may reach it from any thread.
_LIVE_NODES: "set[Node]" = set()
_LIVE_LOCK = threading.Lock()


def live_nodes() -> list["Node"]:
    """Return the nodes this process started (not detached) whose JVM still runs."""
    with _LIVE_LOCK:
        nodes = list(_LIVE_NODES)
    return [node for node in nodes if node.is_running()]


@atexit.register
def _stop_live_nodes() -> None:
    for node in live_nodes():
        node.kill()


class Node:
    """One KRaft combined-mode node (broker + controller in one JVM) of a Cluster.

    A Node is driven by one thread at a time (the test that owns the cluster); the fields
    below are not guarded by a lock.  Failover tests use stop(), kill(), pause(), resume()
    and restart() on a single node while the others keep running.
    """

    def __init__(self, cluster_id: str, node_id: int, broker_port: int, controller_port: int,
                 directory: Path, pid: Optional[int] = None,
                 jvm_options: Sequence[str] = BROKER_JVM_OPTIONS,
                 kafka_version: str = DEFAULT_KAFKA_VERSION,
                 listener_ports: Optional[Mapping[str, int]] = None):
        self.cluster_id = cluster_id            # tells this node's answers from another broker's
        self.node_id = node_id                  # node.id, also the broker id clients see
        self.broker_port = broker_port          # PLAINTEXT listener for clients
        self.controller_port = controller_port  # CONTROLLER listener for the quorum
        self.directory = directory              # node-<id>/ inside the cluster directory
        self.pid = pid                          # the JVM's pid (and process group), or None
        self.jvm_options = tuple(jvm_options)   # heap, collector, compiler for the broker JVM
        self.kafka_version = kafka_line(kafka_version).name  # whose jars run it: "4" or "3.9"
        # Port of each further listener (Listener.name -> port), beside the two above.
        self.listener_ports = dict(listener_ports or {})
        # Listener.name -> the port clients are told instead of the listener's own: a proxy in
        # front of it (netkafka.testing.proxy).  Set before the config is written (start()).
        self.advertised_ports: dict[str, int] = {}
        self._process: Optional[subprocess.Popen] = None  # set when this process started it
        self.detached = False                   # True: may outlive this process (shell start)

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.is_running() else "stopped"
        return f"<Node {self.node_id} {self.bootstrap} {state}>"

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.broker_port}"

    def address(self, listener_name: str) -> str:
        """ "127.0.0.1:PORT" of one of this node's listeners, PLAINTEXT's or a further one's."""
        if listener_name == PLAINTEXT_LISTENER:
            return self.bootstrap
        try:
            return f"{HOST}:{self.listener_ports[listener_name]}"
        except KeyError:
            raise KeyError(f"node {self.node_id} has no listener {listener_name!r} "
                           f"(it has {[PLAINTEXT_LISTENER, *self.listener_ports]})") from None

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def write_config(self, voters: str, settings: Mapping[str, object],
                     listeners: Sequence[Listener] = (), controller_protocol: str = "PLAINTEXT",
                     inter_broker_listener: str = PLAINTEXT_LISTENER) -> None:
        """Write server.properties and log4j2.properties for this node.

        Args:
            listeners: further listeners, each on its port in listener_ports.
            controller_protocol: the CONTROLLER listener's security protocol.
            inter_broker_listener: the listener brokers replicate over (advertised).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        bound = [f"{PLAINTEXT_LISTENER}://{self.bootstrap}"]
        bound += [f"{listener.name}://{host_port(listener.host, self.listener_ports[listener.name])}"
                  for listener in listeners]
        advertised = [f"{PLAINTEXT_LISTENER}://{self.bootstrap}"]
        advertised += [f"{listener.name}://" + host_port(
                           listener.host,
                           self.advertised_ports.get(listener.name, self.listener_ports[listener.name]))
                       for listener in listeners]
        protocols = [f"{PLAINTEXT_LISTENER}:PLAINTEXT", f"{CONTROLLER_LISTENER}:{controller_protocol}"]
        protocols += [f"{listener.name}:{listener.security_protocol}" for listener in listeners]
        config = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            "controller.quorum.voters": voters,
            "listeners": ",".join([*bound, f"{CONTROLLER_LISTENER}://{HOST}:{self.controller_port}"]),
            "advertised.listeners": ",".join(advertised),
            "controller.listener.names": CONTROLLER_LISTENER,
            "inter.broker.listener.name": inter_broker_listener,
            "listener.security.protocol.map": ",".join(protocols),
            "log.dirs": self.data_dir,
            **settings,
        }
        lines = [f"# netkafka.testing.broker: node {self.node_id} of cluster {self.cluster_id}"]
        lines += [f"{key}={value}" for key, value in config.items()]
        self.config_path.write_text("\n".join(lines) + "\n")
        (self.directory / "log4j2.properties").write_text(LOG4J2_CONFIG)

    def format_command(self, options: Sequence[str] = ()) -> list[str]:
        """The storage tool's command line formatting this node's log.dirs.

        Args:
            options: further options of `format`, e.g. ["--add-scram", "SCRAM-SHA-256=[...]"].
        """
        java, libs = java_executable(), kafka_libs_dir(self.kafka_version)
        archive = class_archive_path(libs, java)
        sharing = [f"-XX:SharedArchiveFile={archive}"] if archive is not None and archive.exists() else []
        return [
            java, *FORMAT_JVM_OPTIONS, *sharing, *self._log_options(),
            "-cp", str(libs / "*"), "kafka.tools.StorageTool",
            "format", "--config", str(self.config_path), "--cluster-id", self.cluster_id, *options,
        ]

    def start(self, detach: bool = False) -> None:
        """Launch the JVM in its own process group and return at once (see wait_ready).

        With detach=False the node is stopped when this Python process exits.
        """
        if self.is_running():
            raise BrokerHarnessError(f"node {self.node_id} already runs (pid {self.pid})")
        java, libs = java_executable(), kafka_libs_dir(self.kafka_version)
        command = [
            java, *self.jvm_options, *self._class_sharing_options(class_archive_path(libs, java)),
            *self._log_options(), "-cp", str(libs / "*"), "kafka.Kafka", str(self.config_path),
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"{START_MARKER} {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            log.flush()
            # A session of its own: Ctrl-C in the terminal does not reach the JVM, and stop()
            # signals the whole group.
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.directory, start_new_session=True,
            )
        self.pid = self._process.pid
        self.detached = detach
        if not detach:
            with _LIVE_LOCK:
                _LIVE_NODES.add(self)

    def _class_sharing_options(self, archive: Optional[Path]) -> list[str]:
        if archive is None:
            return []
        if archive.exists():
            return [f"-XX:SharedArchiveFile={archive}"]
        return [f"-XX:ArchiveClassesAtExit={self.directory / CLASS_DUMP_NAME}"]

    def _settle_class_dump(self, clean_exit: bool) -> None:
        """Keep the class archive the JVM dumped at a clean exit, if none is kept yet."""
        dumped = self.directory / CLASS_DUMP_NAME
        if not dumped.exists():
            return
        archive = (class_archive_path(kafka_libs_dir(self.kafka_version), java_executable())
                   if clean_exit else None)
        if archive is not None and not archive.exists():
            # Copied under a private name, then renamed: other JVMs may be mapping the archive
            # path this very moment, and the node directory may be on another file system.
            partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
            shutil.copyfile(dumped, partial)
            os.replace(partial, archive)
        dumped.unlink()

    def _log_options(self) -> list[str]:
        return [f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}"]

    def is_running(self) -> bool:
        """True while the node's JVM exists (also when paused)."""
        if self.pid is None:
            return False
        if self._process is not None:
            return self._process.poll() is None
        return _pid_runs_config(self.pid, self.config_path)

    def exit_code(self) -> Optional[int]:
        """The JVM's exit status if this process started it and it has exited, else None."""
        return None if self._process is None else self._process.poll()

    def probe(self, timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
        """Ask this node for metadata (see probe_metadata)."""
        return probe_metadata(HOST, self.broker_port, timeout_s)

    def wait_ready(self, expected_node_ids: Sequence[int] = (), timeout_s: float = START_TIMEOUT_S) -> ProbeResult:
        """Wait until this node answers Metadata listing itself and every expected node.

        Raises:
            BrokerHarnessError: the JVM exited or the time ran out; the message holds the log tail.
        """
        wanted = {self.node_id, *expected_node_ids}
        deadline = time.monotonic() + timeout_s
        last_problem = "no answer yet"
        while True:
            if not self.is_running():
                raise BrokerHarnessError(
                    f"Kafka node {self.node_id} ({self.bootstrap}) exited with status "
                    f"{self.exit_code()} while starting\n{self.log_tail()}"
                )
            try:
                result = self.probe()
            except (OSError, BrokerHarnessError) as exc:
                last_problem = f"{type(exc).__name__}: {exc}"
            else:
                alive = {broker[0] for broker in result.brokers}
                if result.cluster_id != self.cluster_id:
                    # Someone else's broker on our port: ours will fail to bind and exit.
                    last_problem = f"port {self.broker_port} is answered by cluster {result.cluster_id}"
                elif wanted <= alive:
                    return result
                else:
                    last_problem = f"alive brokers {sorted(alive)}, waiting for {sorted(wanted)}"
            if time.monotonic() > deadline:
                raise BrokerHarnessError(
                    f"Kafka node {self.node_id} ({self.bootstrap}) not ready after {timeout_s:.0f} s "
                    f"({last_problem})\n{self.log_tail()}"
                )
            time.sleep(POLL_INTERVAL_S)

    def log_tail(self, tail_lines: int = LOG_TAIL_LINES) -> str:
        """The first error of the node's latest run, with its causes, and the log's last lines.

        A broker that fails logs its shutdown after the error, so the tail alone rarely says why.
        """
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no log at {self.log_path}: {exc})"
        log_lines = text.splitlines()
        starts = [i for i, line in enumerate(log_lines) if line.startswith(START_MARKER)]
        run = log_lines[starts[-1]:] if starts else log_lines
        report = []
        first_error = next((i for i, line in enumerate(run) if "] ERROR " in line or "] FATAL " in line), None)
        if first_error is not None:
            report.append(f"---- first error in {self.log_path} ----")
            report.append(run[first_error])
            for line in run[first_error + 1:]:
                if line.startswith("["):
                    break
                if not line.startswith("\tat ") and not line.startswith("\t..."):
                    report.append(line)  # the exception and its causes, without stack frames
        report.append(f"---- last {tail_lines} lines of {self.log_path} ----")
        report.extend(run[-tail_lines:])
        return "\n".join(report)

    def send_signal(self, signum: int) -> None:
        """Send a signal to the node's process group; a node that is gone is left alone."""
        if self.pid is None or not self.is_running():
            return
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        """Ask the JVM to shut down cleanly (SIGTERM) without waiting."""
        self.send_signal(signal.SIGTERM)
        # A paused JVM would hold the SIGTERM until resumed.
        self.send_signal(signal.SIGCONT)

    def wait_stopped(self, timeout_s: float) -> bool:
        """Wait up to timeout_s for the JVM to exit; True when it has."""
        deadline = time.monotonic() + timeout_s
        while self.is_running():
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_INTERVAL_S)
        self._forget()
        return True

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL if the JVM has not exited after timeout_s."""
        self.terminate()
        if self.wait_stopped(timeout_s):
            self._settle_class_dump(clean_exit=True)
        else:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the node's process group and wait for the JVM to be gone."""
        self.send_signal(signal.SIGKILL)
        if not self.wait_stopped(KILL_WAIT_S):
            raise BrokerHarnessError(f"node {self.node_id} (pid {self.pid}) survived SIGKILL")
        self._settle_class_dump(clean_exit=False)

    def pause(self) -> None:
        """Freeze the JVM (SIGSTOP) and wait until it is frozen: sockets stay open, nothing answers."""
        self.send_signal(signal.SIGSTOP)
        self._wait_paused(True)

    def resume(self) -> None:
        """Let a paused JVM run again (SIGCONT) and wait until it does."""
        self.send_signal(signal.SIGCONT)
        self._wait_paused(False)

    def is_paused(self) -> bool:
        """True while the JVM is stopped by a signal (Linux; elsewhere always False)."""
        if self.pid is None:
            return False
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        # The state letter follows the command name, which is in parentheses.
        return stat[stat.rindex(")") + 2] in "Tt"

    def _wait_paused(self, paused: bool) -> None:
        # Signals are delivered asynchronously: the caller wants the new state, not the request.
        if not os.path.isdir("/proc/self"):
            return
        deadline = time.monotonic() + KILL_WAIT_S
        while self.is_running() and self.is_paused() != paused:
            if time.monotonic() > deadline:
                raise BrokerHarnessError(f"node {self.node_id} (pid {self.pid}) did not {'stop' if paused else 'continue'}")
            time.sleep(0.01)

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> ProbeResult:
        """Stop the node if it runs, start it on the same directory and ports, wait until ready."""
        self.stop()
        self.start(detach=self.detached)
        return self.wait_ready(timeout_s=timeout_s)

    def _forget(self) -> None:
        with _LIVE_LOCK:
            _LIVE_NODES.discard(self)

    def to_state(self) -> dict:
        return {
            "node_id": self.node_id, "broker_port": self.broker_port,
            "controller_port": self.controller_port, "directory": str(self.directory),
            "pid": self.pid, "jvm_options": list(self.jvm_options),
            "kafka_version": self.kafka_version, "listener_ports": self.listener_ports,
        }

    @classmethod
    def from_state(cls, cluster_id: str, state: Mapping) -> "Node":
        # State files written before the version matrix hold neither of the last two.
        return cls(cluster_id, state["node_id"], state["broker_port"], state["controller_port"],
                   Path(state["directory"]), state["pid"], state["jvm_options"],
                   state.get("kafka_version", DEFAULT_KAFKA_VERSION), state.get("listener_ports"))


def _pid_runs_config(pid: int, config_path: Path) -> bool:
    """True when pid is a live JVM started on config_path (not a recycled pid)."""
    if not os.path.isdir("/proc/self"):
        # No /proc (not Linux): the best left is "some process has this pid".
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(config_path).encode() in cmdline.split(b"\0")


class Cluster:
    """A Kafka cluster of `node_count` combined-mode nodes on 127.0.0.1.

    One node is the single broker of the tests and the demo; three make the failover cluster
    (replication factor 3 possible).  Use as a context manager or call start() and stop().

    Args:
        node_count: number of nodes; each is broker and controller, all are voters.
        port: broker port of node 1 (node i gets port + i - 1); free ports by default.
        directory: where the node directories go; it is emptied first.  By default a fresh
            temporary directory, deleted by stop().
        auto_create_topics: the broker's auto.create.topics.enable.
        min_insync_replicas: the broker's min.insync.replicas.
        extra_config: further broker settings, overriding the ones chosen here.
        jvm_options: the broker JVM's options (BROKER_JVM_OPTIONS, FAST_START_JVM_OPTIONS).
        kafka_version: which line runs: "4" (pom.xml's 4.x) or "3.9" (see KAFKA_LINES).
        listeners: further listeners of every node beside PLAINTEXT, each on a free port; their
            `listener.name.<name>.*` settings go into extra_config.
        controller_protocol: the security protocol of the quorum's CONTROLLER listener.
        inter_broker_listener: the listener brokers replicate over: PLAINTEXT or a further one.
        format_options: further options of the storage tool's `format` (e.g. --add-scram).
    """

    def __init__(self, node_count: int = 1, *, port: Optional[int] = None,
                 directory: Optional[os.PathLike] = None, auto_create_topics: bool = True,
                 min_insync_replicas: int = 1, extra_config: Optional[Mapping[str, object]] = None,
                 jvm_options: Sequence[str] = BROKER_JVM_OPTIONS,
                 kafka_version: str = DEFAULT_KAFKA_VERSION, listeners: Sequence[Listener] = (),
                 controller_protocol: str = "PLAINTEXT",
                 inter_broker_listener: str = PLAINTEXT_LISTENER,
                 format_options: Sequence[str] = ()):
        if node_count < 1:
            raise ValueError(f"node_count must be at least 1, got {node_count}")
        if not 1 <= min_insync_replicas <= node_count:
            raise ValueError(f"min_insync_replicas must be within 1..{node_count}, got {min_insync_replicas}")
        line = kafka_line(kafka_version)
        _check_listeners(listeners, controller_protocol, inter_broker_listener)
        self.kafka_version = line.name
        self.listeners = tuple(listeners)
        self.controller_protocol = controller_protocol
        self.inter_broker_listener = inter_broker_listener
        self.format_options = tuple(format_options)
        self.cluster_id = new_cluster_id()
        self._owns_directory = directory is None
        self.directory = Path(directory) if directory is not None else Path(tempfile.mkdtemp(prefix="netkafka-kafka-"))
        # One call for every free port, so that no two listeners are handed the same one.
        free = free_ports(node_count * (1 + len(self.listeners)) + (0 if port is not None else node_count))
        broker_ports = [port + i for i in range(node_count)] if port is not None else free[-node_count:]
        self.nodes = []
        for i in range(node_count):
            ports = free[i * (1 + len(self.listeners)):(i + 1) * (1 + len(self.listeners))]
            self.nodes.append(Node(
                self.cluster_id, i + 1, broker_ports[i], ports[0], self.directory / f"node-{i + 1}",
                jvm_options=jvm_options, kafka_version=line.name,
                listener_ports={listener.name: p for listener, p in zip(self.listeners, ports[1:])},
            ))
        replication = min(node_count, 3)
        share_coordinator = {
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": min(replication, 2),
        } if line.share_groups else {}
        self.settings = {
            "auto.create.topics.enable": str(auto_create_topics).lower(),
            "num.partitions": 1,
            "default.replication.factor": 1,
            "min.insync.replicas": min_insync_replicas,
            # Internal topics sized for the cluster: replicated over every node (up to 3), and
            # with a few partitions instead of 50 so that the first consumer group or
            # transaction does not wait for 50 partitions to be created.
            "offsets.topic.replication.factor": replication,
            "offsets.topic.num.partitions": 4,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min(replication, 2),
            "transaction.state.log.num.partitions": 4,
            **share_coordinator,
            # Consumers in tests join alone: do not wait 3 s for more members.
            "group.initial.rebalance.delay.ms": 0,
            # A deleted topic's files go at once, not 60 s later in the middle of the next
            # benchmark (measured: removing them costs the broker CPU another run needs).
            "file.delete.delay.ms": 0,
            # Tests write records stamped in 2023 or 1970: the default 7-day retention
            # deleted their logs at its check, between a produce and its read.
            "log.retention.ms": -1,
            **(extra_config or {}),
        }

    def __enter__(self) -> "Cluster":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<Cluster {self.cluster_id} {self.nodes}>"

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers string of every node, e.g. "127.0.0.1:9092"."""
        return ",".join(node.bootstrap for node in self.nodes)

    def listener_bootstrap(self, listener_name: str) -> str:
        """The bootstrap servers string of one listener on every node."""
        return ",".join(node.address(listener_name) for node in self.nodes)

    @property
    def release(self) -> Optional[str]:
        """The exact Kafka release that runs, e.g. "3.9.2", from its jars' names."""
        return jar_version(kafka_libs_dir(self.kafka_version), "kafka-clients")

    def node(self, node_id: int) -> Node:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node {node_id} in {self!r}")

    @property
    def voters(self) -> str:
        return ",".join(f"{node.node_id}@{HOST}:{node.controller_port}" for node in self.nodes)

    def start(self, timeout_s: float = START_TIMEOUT_S, detach: bool = False) -> None:
        """Write configs, format storage, start every node and wait until all are ready.

        Args:
            detach: leave the nodes running when this process exits (the shell's `start`).

        Raises:
            BrokerHarnessError: a node failed to start; every node is stopped again, the
                directory is kept for its logs.
        """
        if self.directory.exists():
            shutil.rmtree(self.directory)
        for node in self.nodes:
            node.write_config(self.voters, self.settings, self.listeners, self.controller_protocol,
                              self.inter_broker_listener)
        self._format()
        try:
            for node in self.nodes:
                node.start(detach=detach)
            expected = [node.node_id for node in self.nodes]
            deadline = time.monotonic() + timeout_s
            for node in self.nodes:
                node.wait_ready(expected, timeout_s=max(0.0, deadline - time.monotonic()))
        except BaseException:
            for node in self.nodes:
                node.kill()
            raise

    def _format(self) -> None:
        # The formatters run side by side: each is a JVM start, most of the cost.
        runs = []
        for node in self.nodes:
            with open(node.log_path, "ab") as log:
                runs.append(subprocess.Popen(node.format_command(self.format_options), stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT, cwd=node.directory))
        failed = [(node, run.wait()) for node, run in zip(self.nodes, runs)]
        for node, status in failed:
            if status != 0:
                raise BrokerHarnessError(f"formatting storage of node {node.node_id} failed with status {status}\n"
                                  f"{node.log_tail()}")

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until every running node lists every running node as an alive broker."""
        running = [node for node in self.nodes if node.is_running()]
        deadline = time.monotonic() + timeout_s
        for node in running:
            node.wait_ready([n.node_id for n in running], timeout_s=max(0.0, deadline - time.monotonic()))

    def heal(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Bring every node back after a failover test: resume paused ones, start stopped ones."""
        for node in self.nodes:
            if node.is_running():
                node.resume()
            else:
                node.start(detach=node.detached)
        self.wait_ready(timeout_s)

    def is_running(self) -> bool:
        """True while any node's JVM runs."""
        return any(node.is_running() for node in self.nodes)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop every node (SIGTERM all at once, SIGKILL what is left after timeout_s).

        Deletes the directory if the cluster made it itself; in a directory it was given
        (pytest's, which keeps the last few sessions') it deletes each node's data (the
        topics' logs: hundreds of MB after a test run) and keeps the server logs.
        """
        for node in self.nodes:
            node.terminate()
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            node.stop(max(0.0, deadline - time.monotonic()))
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)
        elif not self.is_running():
            for node in self.nodes:
                shutil.rmtree(node.data_dir, ignore_errors=True)

    def to_state(self) -> dict:
        return {"cluster_id": self.cluster_id, "directory": str(self.directory),
                "nodes": [node.to_state() for node in self.nodes]}

    @classmethod
    def from_state(cls, state: Mapping) -> "Cluster":
        """Rebuild a handle on a cluster another process started (its nodes are not ours)."""
        cluster = cls.__new__(cls)
        cluster.cluster_id = state["cluster_id"]
        cluster.directory = Path(state["directory"])
        cluster._owns_directory = False
        cluster.nodes = [Node.from_state(cluster.cluster_id, node) for node in state["nodes"]]
        cluster.kafka_version = cluster.nodes[0].kafka_version
        # What a restart would need of these is in the nodes' config files already.
        cluster.settings = {}
        cluster.listeners = ()
        cluster.controller_protocol = "PLAINTEXT"
        cluster.inter_broker_listener = PLAINTEXT_LISTENER
        cluster.format_options = ()
        return cluster


def _check_listeners(listeners: Sequence[Listener], controller_protocol: str,
                     inter_broker_listener: str) -> None:
    names = [listener.name for listener in listeners]
    for listener in listeners:
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", listener.name):
            raise ValueError(f"listener name {listener.name!r}: use upper-case letters, digits and '_'")
        if listener.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"listener {listener.name}: security protocol must be one of "
                             f"{SECURITY_PROTOCOLS}, got {listener.security_protocol!r}")
    reserved = {PLAINTEXT_LISTENER, CONTROLLER_LISTENER} & set(names)
    if reserved:
        raise ValueError(f"listener names {sorted(reserved)} are the harness's own")
    if len(set(names)) != len(names):
        raise ValueError(f"listener names repeat: {names}")
    if controller_protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"controller_protocol must be one of {SECURITY_PROTOCOLS}, got {controller_protocol!r}")
    if inter_broker_listener not in (PLAINTEXT_LISTENER, *names):
        raise ValueError(f"inter_broker_listener {inter_broker_listener!r} is not a listener "
                         f"of the cluster ({[PLAINTEXT_LISTENER, *names]})")


# -- command line ------------------------------------------------------------------------------


def state_dir() -> Path:
    return Path(os.environ.get("NETKAFKA_STATE_DIR") or REPO_ROOT / ".state")


def _state_file() -> Path:
    return state_dir() / "kafka.json"


def _load_state() -> Optional[Cluster]:
    try:
        return Cluster.from_state(json.loads(_state_file().read_text()))
    except FileNotFoundError:
        return None


def _cli_start(args: argparse.Namespace) -> int:
    running = _load_state()
    if running is not None and running.is_running():
        print(f"error: a Kafka cluster started from {_state_file()} still runs at {running.bootstrap}; "
              "stop it first", file=sys.stderr)
        return 1
    cluster = Cluster(args.nodes, port=args.port, directory=state_dir() / "kafka",
                      auto_create_topics=args.auto_create_topics,
                      min_insync_replicas=args.min_insync_replicas,
                      jvm_options=FAST_START_JVM_OPTIONS if args.fast_start else BROKER_JVM_OPTIONS,
                      kafka_version=args.kafka_version)
    started_s = time.monotonic()
    try:
        cluster.start(timeout_s=args.timeout, detach=True)
    except BrokerHarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _state_file().write_text(json.dumps(cluster.to_state(), indent=2) + "\n")
    print(f"Kafka {cluster.release} cluster {cluster.cluster_id}: {len(cluster.nodes)} node(s) ready in "
          f"{time.monotonic() - started_s:.1f} s, logs in {cluster.directory}/node-*/server.log")
    print(cluster.bootstrap)
    return 0


def _cli_stop(args: argparse.Namespace) -> int:
    cluster = _load_state()
    if cluster is None:
        print(f"no Kafka cluster recorded in {_state_file()}")
        return 0
    cluster.stop(timeout_s=args.timeout)
    _state_file().unlink()
    print(f"stopped Kafka cluster {cluster.cluster_id} ({cluster.bootstrap}); logs kept in {cluster.directory}")
    return 0


def _cli_status(args: argparse.Namespace) -> int:
    cluster = _load_state()
    if cluster is None:
        print(f"not running (no Kafka cluster recorded in {_state_file()})")
        return 3
    any_running = False
    for node in cluster.nodes:
        if not node.is_running():
            print(f"node {node.node_id}: not running ({node.bootstrap}, log {node.log_path})")
            continue
        any_running = True
        try:
            alive = [broker[0] for broker in node.probe().brokers]
            answer = f"answers, alive brokers {alive}"
        except (OSError, BrokerHarnessError) as exc:
            answer = f"does not answer ({exc})"
        print(f"node {node.node_id}: running, pid {node.pid}, {node.bootstrap}, {answer}, log {node.log_path}")
    print(f"{'running' if any_running else 'not running'}: {cluster.bootstrap}")
    return 0 if any_running else 3


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m netkafka.testing.broker",
                                     description="Run Apache Kafka on 127.0.0.1 for netkafka's tests.")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start", help="start a broker (or a cluster) in the background")
    start.add_argument("--nodes", type=int, default=1, help="number of combined broker+controller nodes")
    start.add_argument("--port", type=int, help="client port of node 1 (node i: PORT+i-1); free by default")
    start.add_argument("--no-auto-create-topics", dest="auto_create_topics", action="store_false",
                       help="set auto.create.topics.enable=false")
    start.add_argument("--min-insync-replicas", type=int, default=1)
    start.add_argument("--kafka-version", choices=sorted(KAFKA_LINES), default=DEFAULT_KAFKA_VERSION,
                       help="the release line to run (default %(default)s)")
    start.add_argument("--fast-start", action="store_true",
                       help="run the JVM without the C2 compiler: starts on less CPU, runs slower")
    start.add_argument("--timeout", type=float, default=START_TIMEOUT_S, help="seconds to wait for readiness")
    stop = commands.add_parser("stop", help="stop what `start` started")
    stop.add_argument("--timeout", type=float, default=STOP_TIMEOUT_S, help="seconds before SIGKILL")
    commands.add_parser("status", help="say whether it runs and where")
    args = parser.parse_args(argv)
    state_dir().mkdir(parents=True, exist_ok=True)
    return {"start": _cli_start, "stop": _cli_stop, "status": _cli_status}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
