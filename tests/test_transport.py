"""The transport seam: PlainTransport's contract over a socketpair (partial writes,
EAGAIN, IOV_MAX, reads, end of stream), connect_tcp, and a connection to the real
broker driving a transport shaped like TLS over a memory BIO (a handshake of several
steps, written bytes held back)."""
import array
import collections
import errno
import logging
import os
import selectors
import socket

import pytest

from batch_helpers import connection_states
from netkafka import errors
from netkafka.client import connection
from netkafka.client.connection import (AUTHENTICATING, CONNECTING, NEGOTIATING_VERSIONS,
                                        READY, TRANSPORT_HANDSHAKE, ConnectionConfig)
from netkafka.client.io_pool import IOPool
from netkafka.client.metadata import parse_bootstrap_servers, request_metadata
from netkafka.client.resolver import resolve
from netkafka.client.transport import (IOV_MAX, PlainTransport, connect_tcp, drop_written,
                                      queue_buffers)


def unwritten_views(pieces, written_bytes):
    """The buffers left to write once written_bytes of pieces were taken."""
    views = collections.deque()
    for piece in pieces:
        skip = min(written_bytes, len(piece))
        written_bytes -= skip
        if skip < len(piece):
            views.append(memoryview(piece)[skip:])
    return views


def drain(sock):
    data = bytearray()
    try:
        while chunk := sock.recv(1 << 20):
            data += chunk
    except BlockingIOError:
        pass
    return bytes(data)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()


def test_plain_write_takes_a_prefix_then_zero_on_eagain(pair):
    a, b = pair
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    pieces = [os.urandom(n) for n in (10, 70_000, 5, 300_000, 1)]
    total = sum(map(len, pieces))
    transport = PlainTransport(a)
    received = bytearray()
    written = partial = eagain = 0
    while written < total:
        sent = transport.write(unwritten_views(pieces, written))
        if sent == 0:
            eagain += 1
            received += drain(b)  # the socket has room again
            continue
        assert 0 < sent <= total - written
        partial += sent < total - written
        written += sent
    received += drain(b)
    assert bytes(received) == b"".join(pieces)
    assert partial and eagain  # the socket buffer is far smaller than the payload
    assert not transport.output_pending


def test_plain_write_looks_at_no_more_than_iov_max_buffers(pair):
    a, b = pair
    payload = bytes(range(256)) * (IOV_MAX // 256 + 1)
    views = [memoryview(payload)[i:i + 1] for i in range(IOV_MAX + 5)]
    assert PlainTransport(a).write(collections.deque(views)) == IOV_MAX
    assert drain(b) == payload[:IOV_MAX]


def test_the_write_queue_holds_byte_views_and_drops_what_was_written():
    # Any exporter goes in as a 1-D byte memoryview, empty ones left out; sendmsg and
    # drop_written() count the queue in bytes, so a typed or 2-D view is cast.
    ints = array.array("i", [1, 2])
    square = memoryview(b"wxyz").cast("B", (2, 2))
    queue = collections.deque()
    total = queue_buffers(queue, [b"ab", bytearray(), ints, memoryview(b"cdef")[1:], square])
    expected = b"ab" + ints.tobytes() + b"def" + b"wxyz"
    assert total == len(expected) == 17
    assert [(view.ndim, view.format) for view in queue] == [(1, "B")] * 4
    assert b"".join(queue) == expected
    for sent in (3, 7, 4, 3):  # inside a view, to a view's end, across two, the rest
        drop_written(queue, sent)
        expected = expected[sent:]
        assert b"".join(queue) == expected
    assert not queue


def test_plain_read_into_counts_bytes_none_when_empty_zero_at_end(pair):
    a, b = pair
    transport = PlainTransport(a)
    buf = bytearray(8)
    assert transport.read_into(memoryview(buf)) is None
    b.sendall(b"kafka")
    assert transport.read_into(memoryview(buf)[2:]) == 5
    assert bytes(buf) == b"\0\0kafka\0"
    b.close()
    assert transport.read_into(memoryview(buf)) == 0


def test_plain_handshake_is_done_at_once_and_close_frees_the_descriptor(pair):
    a, _ = pair
    transport = PlainTransport(a)
    assert transport.handshake() == 0
    assert transport.fileno() == a.fileno() >= 0
    transport.close()
    assert a.fileno() == transport.fileno() == -1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_connect_tcp_reports_a_refused_connect_once_writable():
    transport, err = connect_tcp(socket.AF_INET, ("127.0.0.1", free_port()), 65536, 65536)
    try:
        assert err in (0, errno.EINPROGRESS, errno.ECONNREFUSED)
        with selectors.DefaultSelector() as selector:
            selector.register(transport, selectors.EVENT_WRITE)
            assert selector.select(5)
        assert transport.connect_error() == errno.ECONNREFUSED
    finally:
        transport.close()


def test_connect_tcp_closes_its_socket_whatever_setting_it_up_raises():
    port = free_port()
    made = []
    real_socket = socket.socket

    def recording_socket(*args):
        made.append(real_socket(*args))
        return made[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "socket", recording_socket)
        with pytest.raises(TypeError):  # a str where setsockopt takes an int or bytes
            connect_tcp(socket.AF_INET, ("127.0.0.1", port), 65536, 65536,
                        [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, "1")])
    assert [sock.fileno() for sock in made] == [-1]  # closed, not left to the GC


def test_resolve_raises_for_a_name_that_does_not_resolve():
    # connect_tcp takes resolved addresses only: names are resolver.py's, off the I/O thread.
    with pytest.raises(socket.gaierror):
        resolve("no-such-host.invalid", 9092, canonical=False)


class _HoldingTransport:
    """In clear text, the shape of TLS over ssl.MemoryBIO: handshake() takes
    HANDSHAKE_STEPS steps, each waiting for the socket to be writable; write() takes up
    to HOLD_LIMIT_BYTES into its own buffer (TLS: encrypted records) and sends at most
    PIECE_BYTES of it per call, so bytes stay held with the connection's queue empty."""

    HANDSHAKE_STEPS = 2
    HOLD_LIMIT_BYTES = 4096
    PIECE_BYTES = 1000

    def __init__(self, plain):
        self._plain = plain
        self._held = bytearray()
        self.output_pending = False
        self.handshake_calls = 0
        self.pushes_with_nothing_new = 0  # write() calls with an empty queue

    def fileno(self):
        return self._plain.fileno()

    def connect_error(self):
        return self._plain.connect_error()

    def handshake(self):
        self.handshake_calls += 1
        return selectors.EVENT_WRITE if self.handshake_calls <= self.HANDSHAKE_STEPS else 0

    def write(self, buffers):
        if not buffers:
            self.pushes_with_nothing_new += 1
        taken = 0
        for view in buffers:
            room = self.HOLD_LIMIT_BYTES - len(self._held)
            if room <= 0:
                break
            part = view[:room]
            self._held += part
            taken += part.nbytes
        if self._held:
            sent = self._plain.write([memoryview(self._held)[:self.PIECE_BYTES]])
            del self._held[:sent]
        self.output_pending = bool(self._held)
        return taken

    def read_into(self, buffer):
        return self._plain.read_into(buffer)

    def close(self):
        self._plain.close()


def test_connection_drives_a_transport_that_takes_steps_and_holds_bytes(
        kafka_broker, monkeypatch, caplog):
    made = []

    def connect_holding(*args):
        plain, err = connect_tcp(*args)
        made.append(_HoldingTransport(plain))
        return made[-1], err

    monkeypatch.setattr(connection, "connect_tcp", connect_holding)
    caplog.set_level(logging.DEBUG, logger="netkafka.client.connection")
    host, port = parse_bootstrap_servers(kafka_broker.bootstrap)[0]
    # Each Metadata request names 300 topics: about 10 KB, ten pieces of the transport.
    unknown = [f"held-back-{i:04d}-{'x' * 20}" for i in range(300)]
    pool = IOPool(ConnectionConfig(max_in_flight_requests_per_connection=4))
    try:
        conn = pool.connection(-1, host, port)
        futures = [request_metadata(conn, unknown, allow_auto_topic_creation=False)
                   for _ in range(10)]
        answers = [future.result(30) for future in futures]
    finally:
        pool.close()
    for answer in answers:
        assert sorted(t.name for t in answer.topics) == unknown
        assert {t.error_code for t in answer.topics} == {
            errors.UnknownTopicOrPartitionError.code}
    (transport,) = made
    assert transport.handshake_calls == _HoldingTransport.HANDSHAKE_STEPS + 1
    assert transport.pushes_with_nothing_new > 0  # output_pending drove EVENT_WRITE
    assert connection_states(caplog, f"{host}:{port}")[:5] == [
        CONNECTING, TRANSPORT_HANDSHAKE, NEGOTIATING_VERSIONS, AUTHENTICATING, READY]
