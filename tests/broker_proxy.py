"""TCP proxies in front of a real broker: protocol-level fakes for hostile answers.

BrokerProxy passes the client's bytes on untouched and the broker's through a
subclass's _answers().  MetadataProxy is a fake broker for hostile Metadata answers:
every request passes to the real broker untouched.  Every Metadata answer is decoded
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
from netkafka.protocol.produce import decode_produce_response
from protocol_samples import kafka_python_decode, kafka_python_response

_REQUEST_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


def recv_exactly(sock, n):
    """n bytes from a blocking socket; OSError if it closes first."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data


def _relay_frames(src, dst, transform):
    """Passes each size-prefixed frame from src to dst as transform(body) makes it
    (None: dropped), until either side closes."""
    try:
        while True:
            (size,) = struct.unpack(">i", recv_exactly(src, 4))
            body = transform(recv_exactly(src, size))
            if body is not None:
                dst.sendall(struct.pack(">i", len(body)) + body)
    except OSError:
        pass
    finally:
        dst.close()


class BrokerProxy:
    """A TCP proxy to the broker: the client's bytes go through _requests(src, dst)
    (untouched by default), the broker's through _answers(src, dst), which each
    subclass defines.  One thread per direction and connection."""

    def __init__(self, target):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.sockets = []  # guarded by lock: to close them all at the end
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for fn, args in ((self._requests, (client, upstream)),
                             (self._answers, (upstream, client))):
                threading.Thread(target=fn, args=args, daemon=True).start()

    def _requests(self, src, dst):
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

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


class MetadataProxy(BrokerProxy):
    """A fake broker for hostile Metadata answers; target: (host, port) of the real one.

    rewrite: None, or fields -> fields: applied to each Metadata answer's fields
    (kafka-python's MetadataResponse keyword arguments) while set; ``rewritten``
    counts the answers it was applied to.

    set_swallowing(True): every answer is dropped (its request reached the broker, which
    acted on it), until set_swallowing(False); ``swallowed`` counts them.
    """

    ANSWERED = (ApiKey.METADATA,)  # the APIs whose answers _answer() is handed

    def __init__(self, target):
        self.rewrite = None  # guarded by lock
        self.replace = None  # guarded by lock
        self.rewritten = 0  # guarded by lock
        self.swallowing = False  # guarded by lock
        self.swallowed = 0  # guarded by lock
        # Guarded by lock: per API key answered here (METADATA, and a subclass's), per
        # upstream socket, correlation id -> version of the requests in flight.
        self.asked = {api_key: {} for api_key in self.ANSWERED}
        super().__init__(target)

    def set_rewrite(self, rewrite, replace=None):
        """rewrite: as the class says; replace: None, or (old, new) bytes replaced in
        the encoded answer (bytes no encoder writes, such as a host that is not UTF-8)."""
        with self.lock:
            self.rewrite, self.replace = rewrite, replace
            self.rewritten = 0

    def set_swallowing(self, swallowing):
        with self.lock:
            self.swallowing = swallowing

    def swallowed_count(self):
        with self.lock:
            return self.swallowed

    def rewritten_count(self):
        with self.lock:
            return self.rewritten

    def _requests(self, src, dst):
        _relay_frames(src, dst, lambda body: self._request(dst, body))

    def _request(self, dst, body):
        """The request passed on to dst for body (None: dropped); noted if its answer
        is one _answer() is handed."""
        api_key, version, correlation_id = _REQUEST_HEADER.unpack_from(body)
        if api_key in self.asked:
            with self.lock:
                self.asked[api_key].setdefault(dst, {})[correlation_id] = version
        return body

    def _answers(self, src, dst):
        def answer(body):
            (correlation_id,) = struct.unpack_from(">i", body)
            with self.lock:
                if self.swallowing:
                    self.swallowed += 1
                    return None
                for api_key, book in self.asked.items():
                    version = book.get(src, {}).pop(correlation_id, None)
                    if version is not None:
                        break
            if version is None:
                return body
            return body[:4] + self._answer(api_key, body[4:], version)
        _relay_frames(src, dst, answer)

    def _answer(self, api_key, data, version):
        """The answer (after its correlation id) to send instead of data."""
        return self._metadata_answer(data, version)

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


class ProduceAnswerProxy(MetadataProxy):
    """A MetadataProxy (so every connection comes through it) that also hands each
    Produce answer (the bytes after the correlation id) and its version to
    ``rewrite_produce`` while that is set."""

    ANSWERED = (ApiKey.METADATA, ApiKey.PRODUCE)

    def __init__(self, target):
        self.rewrite_produce = None  # guarded by lock
        super().__init__(target)

    def _answer(self, api_key, data, version):
        if api_key != ApiKey.PRODUCE:
            return super()._answer(api_key, data, version)
        with self.lock:
            rewrite = self.rewrite_produce
        return data if rewrite is None else rewrite(data, version)


def one_partition_answer(error_code=None, base_offset=None):
    """A ProduceAnswerProxy rewrite_produce for requests of one partition: its answer's
    error code and base offset replaced where given (what the broker did stands: a
    record it appended stays appended)."""
    def rewrite(data, version):
        [part] = decode_produce_response(data, version).topics[0].partitions
        old = struct.pack(">ihq", part.partition, part.error_code, part.base_offset)
        assert data.count(old) == 1
        return data.replace(old, struct.pack(
            ">ihq", part.partition, part.error_code if error_code is None else error_code,
            part.base_offset if base_offset is None else base_offset))
    return rewrite


class ProduceDroppingProxy(MetadataProxy):
    """A MetadataProxy (so every connection comes through it) that leaves Produce
    requests unanswered while ``set_dropping(True)`` holds: such a request, and what
    follows it on its connection (answers come in order), never reach the broker,
    and the connection is closed once dropping ends.  Their batches' delivery times
    out; other connections' requests are answered.  set_dropping(True, after=n): the
    next n Produce requests pass first (a batch refused as too large, then the first
    of its parts, say)."""

    def __init__(self, target):
        self._passing = threading.Event()  # set: Produce requests pass
        self._passing.set()
        self._passes_left = None  # guarded by lock: Produce requests to pass, while dropping
        super().__init__(target)

    def set_dropping(self, dropping, after=0):
        with self.lock:
            self._passes_left = after if dropping else None
            if not dropping:
                self._passing.set()

    def _request(self, dst, body):
        (api_key,) = struct.unpack_from(">h", body)
        if api_key == ApiKey.PRODUCE:
            with self.lock:
                if self._passes_left == 0:
                    self._passing.clear()
                elif self._passes_left is not None:
                    self._passes_left -= 1
            if not self._passing.is_set():
                self._passing.wait()
                raise OSError("a Produce request dropped: its connection ends")
        return super()._request(dst, body)


class DescribeProducersRefusingProxy(MetadataProxy):
    """A MetadataProxy (so every connection comes through it) that never passes a
    DescribeProducers request on, and stops passing its connection's requests: the
    client gets no answer to it (its request_timeout_ms ends the connection); other
    connections' requests pass.  ``refused`` counts the requests (guarded by lock)."""

    refused = 0

    def _request(self, dst, body):
        (api_key,) = struct.unpack_from(">h", body)
        if api_key == ApiKey.DESCRIBE_PRODUCERS:
            with self.lock:
                self.refused += 1
            raise OSError("a DescribeProducers request refused: its connection ends")
        return super()._request(dst, body)
