"""examples/otel_tracing.py, run as a user runs it: every record it sends carries its
span's W3C traceparent header, read back by the independent reader."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

pytest.importorskip("opentelemetry.sdk.trace", reason="the example's test needs opentelemetry-sdk")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "otel_tracing.py"


def test_trace_context_travels_in_the_headers(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name)
    done = subprocess.run([sys.executable, str(EXAMPLE), "--bootstrap", kafka_broker.bootstrap,
                           "--topic", topic_name, "--count", "3"],
                          capture_output=True, text=True, timeout=120,
                          # this checkout's netkafka, whatever is installed
                          env={**os.environ, "PYTHONPATH": str(EXAMPLE.parent.parent)})
    assert done.returncode == 0, done.stderr
    lines = re.findall(r"offset=(\d+) trace_id=([0-9a-f]{32})", done.stdout)
    assert len(lines) == 3, done.stdout + done.stderr
    sent = {int(offset): trace_id for offset, trace_id in lines}
    assert len(set(sent.values())) == 3  # one trace per record
    for record in read_topic(kafka_broker.bootstrap, topic_name, 3):
        headers = dict(record.headers)
        version, trace_id, span_id, flags = headers["traceparent"].decode().split("-")
        assert (version, trace_id) == ("00", sent[record.offset])
        assert re.fullmatch(r"[0-9a-f]{16}", span_id) and int(flags, 16) & 1  # sampled
