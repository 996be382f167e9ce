"""Records of 128 KiB and 1 MiB through the Producer to the real broker, read back by an
independent reader -- and no copy in user space between send() and the socket: a value
of type bytes that large is held by its batch (accumulator.HOLD_VALUES_FROM_BYTES), and
the socket is offered a view of that very object; the rest of the batch (header, keys,
headers) is pooled batch memory.  A mutable value (a bytearray) is copied into its batch,
once: a caller may change it after send() returns.

The cost of large records (CPU per byte beside confluent-kafka's) is measured in
bench/test_bench_e2e_throughput.py and bench/test_bench_tls.py."""
import pytest

from netkafka import Producer
from netkafka.client import connection
from netkafka.record._pool import PooledBatch
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

KiB = 1024
MiB = 1024 * KiB
RECORDS = 12
# A 1 MiB value with its headers is above the 1 MiB default request limit: the producer
# and the topic take twice that.
MAX_REQUEST_BYTES = 2 * MiB


class RecordingTransport:
    """A transport that hands everything to the real one and notes, of each buffer the
    connection offers to write() at least min_bytes long, the object owning its memory and
    (a copy made by the test alone) its bytes: a batch is released, its memory reused,
    once written."""

    def __init__(self, transport, min_bytes, offered):
        self._transport = transport
        self._min_bytes = min_bytes
        self._offered = offered

    def write(self, buffers):
        self._offered.extend((view.obj, bytes(view)) for view in buffers
                             if view.nbytes >= self._min_bytes)
        return self._transport.write(buffers)

    def __getattr__(self, name):  # fileno, handshake, read_into, close, output_pending, ...
        return getattr(self._transport, name)


def _recording_producer(kafka_broker, topic_name, monkeypatch, min_bytes, offered, **settings):
    real_connect = connection.connect_tcp

    def connect_recording(*args, **kwargs):
        transport, err = real_connect(*args, **kwargs)
        return RecordingTransport(transport, min_bytes, offered), err

    monkeypatch.setattr(connection, "connect_tcp", connect_recording)
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1,
                 config={"max.message.bytes": str(MAX_REQUEST_BYTES)})
    return Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=5, batch_size=MiB,
                    max_request_size=MAX_REQUEST_BYTES, **settings)


def _send_each(producer, topic, values, keys, headers):
    for key, value, record_headers in zip(keys, values, headers):
        producer.send(topic, value, key=key, headers=record_headers)


def _send_batch(producer, topic, values, keys, headers):
    result = producer.send_batch(topic, values, keys=keys, headers=headers)
    assert result.get(30).failed_count == 0


@pytest.mark.parametrize("entry", [_send_each, _send_batch], ids=["send", "send_batch"])
@pytest.mark.parametrize("acks", [1, "all"])
@pytest.mark.parametrize("value_bytes", [128 * KiB, MiB], ids=["128KiB", "1MiB"])
def test_large_values_reach_the_socket_as_the_caller_gave_them(kafka_broker, topic_name,
                                                               monkeypatch, value_bytes, acks,
                                                               entry):
    offered = []
    values = [bytes([65 + i]) * value_bytes for i in range(RECORDS)]
    keys = [b"key-%d" % i for i in range(RECORDS)]
    with _recording_producer(kafka_broker, topic_name, monkeypatch, 1, offered,
                             acks=acks) as producer:
        entry(producer, topic_name, values, keys, [[("n", b"%d" % i)] for i in range(RECORDS)])
        producer.flush()

    # Every buffer offered that could hold part of a value is batch memory or a value
    # itself (other requests, framing, are small bytes and bytearrays).
    strays = [type(owner).__name__ for owner, content in offered
              if len(content) >= 4 * KiB and not isinstance(owner, PooledBatch)
              and not any(owner is value for value in values)]
    assert strays == [], f"buffers from copies offered to the socket: {strays}"
    # Each value is offered as itself, whole (from where a partial write stopped, too).
    assert all(any(owner is value for owner, _ in offered) for value in values)
    assert not any(isinstance(owner, PooledBatch) and len(content) >= value_bytes
                   for owner, content in offered), "a value was copied into its batch"
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=RECORDS)
    assert [(r.key, r.value, r.headers) for r in read] == [
        (key, value, [("n", b"%d" % i)]) for i, (key, value) in enumerate(zip(keys, values))]


def test_a_large_mutable_value_is_copied_and_may_change_after_send(kafka_broker, topic_name,
                                                                  monkeypatch):
    offered = []
    value = bytearray(b"a" * (256 * KiB))
    with _recording_producer(kafka_broker, topic_name, monkeypatch, 1, offered,
                             acks=1) as producer:
        future = producer.send(topic_name, value)
        value[:] = b"b" * len(value)  # the caller's to change once send() returned
        future.get(timeout=30)

    assert not any(owner is value for owner, _ in offered)
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=1)
    assert [r.value for r in read] == [b"a" * (256 * KiB)]
