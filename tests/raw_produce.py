"""A minimal Produce v7 client on a raw socket, for the encoder's end-to-end test.

It frames one request carrying already sealed RecordBatch bytes, sends it and checks
the partition's error code: just enough to put netkafka.record._batch's output on a real
broker before the protocol and I/O layers take over that job.  Produce v7 is the
oldest version that allows zstd and is not yet "flexible" (no tagged fields), so
plain struct packing describes it completely.
"""
import socket
import struct

from netkafka.protocol.framing import ApiKey

PRODUCE_VERSION = 7
ACKS_ALL = -1
TIMEOUT_MS = 30_000
CLIENT_ID = b"netkafka-records-test"


def _string(data):
    return struct.pack(">h", len(data)) + data


def produce_request(correlation_id, topic, partition, batch_bytes):
    """Length-prefixed Produce v7 request (request header v1) for one partition."""
    header = struct.pack(">hhi", ApiKey.PRODUCE, PRODUCE_VERSION, correlation_id) + _string(CLIENT_ID)
    body = (
        struct.pack(">h", -1)  # transactional_id: null
        + struct.pack(">hi", ACKS_ALL, TIMEOUT_MS)
        + struct.pack(">i", 1) + _string(topic.encode())
        + struct.pack(">i", 1) + struct.pack(">i", partition)
        + struct.pack(">i", len(batch_bytes)) + bytes(batch_bytes)
    )
    return struct.pack(">i", len(header) + len(body)) + header + body


def _recv_exactly(sock, size):
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 16))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def produce(bootstrap, topic, partition, batch_bytes, correlation_id=1, timeout_s=30.0):
    """Send one batch and return the base offset the broker gave it.

    Raises:
        RuntimeError: the broker answered with an error code for the partition.
    """
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(produce_request(correlation_id, topic, partition, batch_bytes))
        (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
        response = _recv_exactly(sock, size)
    # Response header v0, then: [topic [partition error_code base_offset
    # log_append_time_ms log_start_offset]] throttle_time_ms.
    pos = 0
    (got_correlation_id, topic_count) = struct.unpack_from(">ii", response, pos)
    pos += 8
    assert got_correlation_id == correlation_id, (got_correlation_id, correlation_id)
    assert topic_count == 1, topic_count
    (name_len,) = struct.unpack_from(">h", response, pos)
    pos += 2 + name_len
    (partition_count, got_partition, error_code, base_offset) = struct.unpack_from(">iihq", response, pos)
    assert (partition_count, got_partition) == (1, partition)
    if error_code:
        raise RuntimeError(f"Produce to {topic}-{partition} failed with error code {error_code}")
    return base_offset
