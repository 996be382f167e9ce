"""A protocol-level fake broker in front of a real one, for hostile Metadata answers.

Every request passes to the real broker untouched.  Every Metadata answer is decoded
(kafka-python, an independent reader), its brokers are pointed at the proxy, so that
the client's later connections come back through it too, and while ``rewrite`` is set
the answer is handed to it before kafka-python encodes it again: a hostile value in an
otherwise well-formed answer.  Other answers pass through untouched.
"""
import socket
import struct
import threading

from kafka.protocol.metadata import MetadataResponse as KpMetadataResponse

from netkafka.protocol.framing import ApiKey
from protocol_samples import kafka_python_decode, kafka_python_response

_HEADER = struct.Struct(">ihhi")  # size, api key, api version, correlation id


def _recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _frames(sock):
    """(header bytes, body bytes) of each size-prefixed frame read from sock."""
    while True:
        size_bytes = _recv_exactly(sock, 4)
        (size,) = struct.unpack(">i", size_bytes)
        yield size_bytes, _recv_exactly(sock, size)


class MetadataProxy:
    """Listens on 127.0.0.1:port; target: (host, port) of the real broker.

    rewrite: None, or fields -> fields: applied to each Metadata answer's fields
    (kafka-python's MetadataResponse keyword arguments) while set; ``rewritten``
    counts the answers it was applied to.
    """

    def __init__(self, target):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.rewrite = None  # guarded by lock
        self.replace = None  # guarded by lock
        self.rewritten = 0  # guarded by lock
        self.sockets = []  # guarded by lock: to close them all at the end
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def set_rewrite(self, rewrite, replace=None):
        """rewrite: as the class says; replace: None, or (old, new) bytes replaced in
        the encoded answer (bytes no encoder writes, such as a host that is not UTF-8)."""
        with self.lock:
            self.rewrite, self.replace = rewrite, replace
            self.rewritten = 0

    def rewritten_count(self):
        with self.lock:
            return self.rewritten

    def close(self):
        self.listener.close()
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            asked = {}  # correlation id -> Metadata version, of requests in flight
            asked_lock = threading.Lock()
            with self.lock:
                self.sockets += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream, asked, asked_lock),
                             daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, asked, asked_lock),
                             daemon=True).start()

    @staticmethod
    def _requests(src, dst, asked, asked_lock):
        try:
            for size_bytes, body in _frames(src):
                _, api_key, version, correlation_id = _HEADER.unpack(size_bytes + body[:8])
                if api_key == ApiKey.METADATA:
                    with asked_lock:
                        asked[correlation_id] = version
                dst.sendall(size_bytes + body)
        except OSError:
            pass
        finally:
            dst.close()

    def _answers(self, src, dst, asked, asked_lock):
        try:
            for size_bytes, body in _frames(src):
                (correlation_id,) = struct.unpack_from(">i", body)
                with asked_lock:
                    version = asked.pop(correlation_id, None)
                if version is not None:
                    body = body[:4] + self._metadata_answer(body[4:], version)
                    size_bytes = struct.pack(">i", len(body))
                dst.sendall(size_bytes + body)
        except OSError:
            pass
        finally:
            dst.close()

    def _metadata_answer(self, data, version):
        answer = kafka_python_decode(KpMetadataResponse, data, version)
        fields = dict(throttle_time_ms=0, cluster_id=None, controller_id=-1,
                      authorized_operations=set(), error_code=0)  # what v0 lacks
        fields.update({name: getattr(answer, name) for name in (
            "throttle_time_ms", "cluster_id", "controller_id", "topics",
            "authorized_operations", "error_code") if hasattr(answer, name)})
        Broker = KpMetadataResponse.MetadataResponseBroker
        fields["brokers"] = [Broker(node_id=b.node_id, host="127.0.0.1", port=self.port,
                                    rack=getattr(b, "rack", None)) for b in answer.brokers]
        with self.lock:
            rewrite, replace = self.rewrite, self.replace
            if rewrite is not None:
                self.rewritten += 1
        if rewrite is None:
            return kafka_python_response(KpMetadataResponse, version, **fields)
        encoded = kafka_python_response(KpMetadataResponse, version, **rewrite(fields))
        return encoded if replace is None else encoded.replace(*replace)
