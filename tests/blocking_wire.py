"""A blocking, one-request-at-a-time Kafka socket for the protocol tests.

Only what the codec tests need to talk to the real broker before the
connection layer exists: send a request's buffers with socket.sendmsg (the
scatter-gather list encode_produce_request builds, as is), read one framed
response, check its correlation id.
"""
import socket
import struct

TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class BlockingWire:
    """One TCP connection to a broker; use as a context manager."""

    def __init__(self, bootstrap, timeout_s=TIMEOUT_S):
        host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.sock.close()

    def send(self, buffers):
        """Writes every buffer through sendmsg, resuming after partial writes."""
        views = [memoryview(b).cast("B") for b in buffers]
        while views:
            sent = self.sock.sendmsg(views)
            while views and sent >= views[0].nbytes:
                sent -= views[0].nbytes
                views.pop(0)
            if views and sent:
                views[0] = views[0][sent:]

    def receive(self, correlation_id):
        """Reads one response; returns its bytes after the correlation id."""
        (size,) = struct.unpack(">i", self._read_exactly(4))
        assert 4 <= size <= MAX_RESPONSE_BYTES, f"response size {size}"
        body = self._read_exactly(size)
        (got,) = struct.unpack_from(">i", body)
        assert got == correlation_id, f"correlation id {got}, expected {correlation_id}"
        return body[4:]

    def request(self, buffers, correlation_id):
        """Sends a request (bytes, or a list of buffers) and returns its response."""
        self.send([buffers] if isinstance(buffers, (bytes, bytearray)) else buffers)
        return self.receive(correlation_id)

    def _read_exactly(self, size):
        out = bytearray(size)
        view = memoryview(out)
        got = 0
        while got < size:
            n = self.sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError(f"broker closed the connection after {got}/{size} bytes")
            got += n
        return bytes(out)
