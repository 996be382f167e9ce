"""What a benchmark ran on: the machine, and the version of every client and of the broker.

A pytest plugin for benchmark sessions (bench/conftest.py lists it in pytest_plugins):
pytest-benchmark's JSON gets these facts under machine_info["netkafka_environment"], so
that bench/report.py states them from the run itself rather than from whatever machine
renders the report.
"""
import importlib.metadata
import os
import platform
import re
import subprocess
from pathlib import Path

from netkafka.errors import BrokerHarnessError
from netkafka.testing.broker import REPO_ROOT, jar_version, java_executable, kafka_libs_dir

PYTHON_CLIENTS = ("confluent-kafka", "kafka-python", "aiokafka")


def describe():
    """The facts, as a JSON-ready dict (a fact that cannot be found is None)."""
    libs = kafka_libs_dir()
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "ram_bytes": _ram_bytes(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        # At the end of the session: how busy the machine was while it ran.
        "load_average": list(os.getloadavg()),
        "netkafka": f"{importlib.metadata.version('netkafka')} ({_git_commit()})",
        "clients": {name: _package_version(name) for name in PYTHON_CLIENTS},
        "librdkafka": _librdkafka_version(),
        "java_client": jar_version(libs, "kafka-clients"),
        "java": _java_version(),
        "broker": jar_version(libs, "kafka-server"),
    }


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["netkafka_environment"] = describe()


def _cpu_model():
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else platform.processor() or None


def _ram_bytes():
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    match = re.search(r"^MemTotal:\s*(\d+) kB$", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def _git_commit():
    try:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "commit unknown"
    return done.stdout.strip() or "commit unknown"


def _package_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _librdkafka_version():
    try:
        import confluent_kafka
    except ImportError:
        return None
    return confluent_kafka.libversion()[0]


def _java_version():
    try:
        done = subprocess.run([java_executable(), "-version"], capture_output=True, text=True,
                              timeout=30)
    except (BrokerHarnessError, OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stderr.strip().splitlines()
    return lines[0] if lines else None
