"""Records of 128 KiB and 1 MiB through the Producer to the real broker, read back by an
independent reader -- and no copy between send() and the socket beyond send()'s own copy
of the value into its batch: every buffer the connection hands its transport that could
hold a value is a view of pooled batch memory (a copy made on the way would be another
object, bytes or a bytearray), and the value is in it.

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
    connection offers to write() at least min_bytes long, the type of the object owning
    its memory and (a copy made by the test alone) its bytes: a batch is released, its
    memory reused, once written."""

    def __init__(self, transport, min_bytes, offered):
        self._transport = transport
        self._min_bytes = min_bytes
        self._offered = offered

    def write(self, buffers):
        self._offered.extend((type(view.obj), bytes(view)) for view in buffers
                             if view.nbytes >= self._min_bytes)
        return self._transport.write(buffers)

    def __getattr__(self, name):  # fileno, handshake, read_into, close, output_pending, ...
        return getattr(self._transport, name)


@pytest.mark.parametrize("value_bytes", [128 * KiB, MiB], ids=["128KiB", "1MiB"])
def test_large_values_reach_the_socket_from_the_batch_memory(kafka_broker, topic_name,
                                                             monkeypatch, value_bytes):
    offered = []
    real_connect = connection.connect_tcp

    def connect_recording(*args, **kwargs):
        transport, err = real_connect(*args, **kwargs)
        return RecordingTransport(transport, value_bytes, offered), err

    monkeypatch.setattr(connection, "connect_tcp", connect_recording)
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1,
                 config={"max.message.bytes": str(MAX_REQUEST_BYTES)})
    values = [bytes([65 + i]) * value_bytes for i in range(RECORDS)]
    with Producer(bootstrap_servers=kafka_broker.bootstrap, acks=1, linger_ms=5,
                  batch_size=MiB, max_request_size=MAX_REQUEST_BYTES) as producer:
        for value in values:
            producer.send(topic_name, value)
        producer.flush()

    assert offered, "no buffer large enough to hold a value was written"
    copies = [owner.__name__ for owner, _ in offered if not issubclass(owner, PooledBatch)]
    assert copies == [], f"values went to the socket from copies: {copies}"
    # Each value is whole in batch memory offered to the socket (a batch is offered again,
    # from where a partial write stopped, until all of it is written).
    assert all(any(value in content for _, content in offered) for value in values)
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=RECORDS)
    assert [record.value for record in read] == values
