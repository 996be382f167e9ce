"""BrokerConnection against the real broker: handshake, requests, produce at every acks,
many requests in flight, zero-copy writes, timeouts, reconnects, hostile or foreign peers."""
import http.server
import logging
import socket
import struct
import threading
import time
import tracemalloc

import pytest
from kafka.protocol.metadata import MetadataResponse as KpMetadataResponse

from batch_helpers import (as_read, connection_states, io_stack, make_batch, new_buffer_pool,
                           release_batches)
from broker_proxy import BrokerProxy, MetadataProxy, recv_exactly
from netkafka import errors
from netkafka.client.connection import (AUTHENTICATING, CONNECTING, DISCONNECTED,
                                        NEGOTIATING_VERSIONS, READY, TRANSPORT_HANDSHAKE,
                                        ConnectionConfig)
from netkafka.errors import KafkaConnectionError, RequestTimeoutError
from netkafka.client.io_pool import IOPool
from netkafka.client.metadata import parse_bootstrap_servers, request_metadata
from netkafka.protocol import api_versions
from netkafka.protocol.framing import ApiKey
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic


def broker_address(bootstrap):
    return parse_bootstrap_servers(bootstrap)[0]


def single_node(kafka_broker):
    nodes = getattr(kafka_broker, "nodes", None)
    if not nodes:
        pytest.skip("needs a broker this session started (pause/restart)")
    return nodes[0]


@pytest.fixture
def pool():
    pool = IOPool(ConnectionConfig(request_timeout_ms=10000, connect_timeout_ms=5000))
    yield pool
    pool.close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_handshake_negotiates_versions_and_metadata_round_trips(kafka_broker, pool, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    host, port = broker_address(kafka_broker.bootstrap)
    conn = pool.connection(-1, host, port)

    answer = request_metadata(conn, [topic_name], allow_auto_topic_creation=False).result(30)

    assert conn.state == READY
    versions = conn.api_versions
    assert versions[ApiKey.PRODUCE] >= 3
    assert versions[ApiKey.METADATA] >= 1
    assert versions[ApiKey.API_VERSIONS] == api_versions.API_VERSIONS_VERSION
    assert [(b.host, b.port) for b in answer.brokers] == [(host, port)]
    (topic,) = answer.topics
    assert (topic.name, topic.error_code) == (topic_name, 0)
    assert sorted(p.partition for p in topic.partitions) == [0, 1, 2]
    assert {p.leader for p in topic.partitions} == {answer.brokers[0].node_id}


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_produce_batches_read_back_byte_exact(kafka_broker, topic_name, acks):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    buffers = new_buffer_pool()
    stack = io_stack(kafka_broker.bootstrap, sender_options={"acks": acks})
    try:
        sent = {0: [], 1: []}
        futures = []
        for i in range(6):
            partition = i % 2
            batch = make_batch(buffers, f"acks{acks}-b{i}", count=7)
            futures.append((batch, stack.sender.send(topic_name, partition, batch.view,
                                                     batch.record_count)))
            sent[partition] += batch.records
        results = [future.result(30) for _, future in futures]
        stack.sender.flush(30)
    finally:
        stack.close()

    if acks == 0:
        assert {r.base_offset for r in results} == {-1}  # no answer with acks=0
    else:
        for partition in (0, 1):
            offsets = [r.base_offset for r in results if r.partition == partition]
            assert offsets == [0, 7, 14]
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=42)
    for partition in (0, 1):
        got = [r for r in read if r.partition == partition]
        assert [r.offset for r in got] == list(range(21))
        assert as_read(got) == [tuple(w) for w in sent[partition]]
    release_batches([batch for batch, _ in futures])


def test_setup_passes_every_stage_in_order(kafka_broker, pool, caplog):
    host, port = broker_address(kafka_broker.bootstrap)
    caplog.set_level(logging.DEBUG, logger="netkafka.client.connection")
    conn = pool.connection(-1, host, port)
    assert request_metadata(conn, []).result(30).brokers
    assert connection_states(caplog, f"{host}:{port}") == [
        CONNECTING, TRANSPORT_HANDSHAKE, NEGOTIATING_VERSIONS, AUTHENTICATING, READY]
    assert conn.stats()["connections_ready"] == 1


def test_many_requests_in_flight_complete_in_order(kafka_broker, topic_name):
    """Batches queued while the broker is frozen go out as max_in_flight requests at once
    when it thaws; they are answered in order and every one is acknowledged."""
    node = single_node(kafka_broker)
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    stack = io_stack(kafka_broker.bootstrap, max_in_flight_requests_per_connection=5)
    completed = []
    try:
        stack.metadata.wait_for_topic(topic_name, 30)
        node.pause()
        try:
            batches = [make_batch(buffers, f"inflight-{i}", count=3) for i in range(30)]
            futures = []
            for i, batch in enumerate(batches):
                future = stack.sender.send(topic_name, 0, batch.view, batch.record_count)
                future.add_done_callback(lambda f, i=i: completed.append(i))
                futures.append(future)
            time.sleep(0.3)  # let the connection fill its in-flight window
        finally:
            node.resume()
        results = [f.result(30) for f in futures]
        leader_stats = stack.pool.get(stack.metadata.leader_id(topic_name, 0)).stats()
    finally:
        stack.close()

    assert completed == list(range(30))
    assert [r.base_offset for r in results] == list(range(0, 90, 3))
    # Produce requests (one batch of the partition each) were pipelined.
    assert leader_stats["in_flight_peak"] == 5
    read = read_topic(kafka_broker.bootstrap, topic_name, expected_count=90)
    assert as_read(read) == [tuple(w) for b in batches for w in b.records]
    release_batches(batches)


def test_pipelined_requests_on_one_connection_answer_in_order(kafka_broker):
    """Requests handed over before the connection is ready are written back to back,
    max_in_flight at a time, and matched to their answers in order."""
    host, port = broker_address(kafka_broker.bootstrap)
    pool = IOPool(ConnectionConfig(max_in_flight_requests_per_connection=8))
    order = []
    try:
        conn = pool.connection(-1, host, port)
        futures = [request_metadata(conn, []) for _ in range(40)]
        for i, future in enumerate(futures):
            future.add_done_callback(lambda f, i=i: order.append(i))
        answers = [future.result(30) for future in futures]
    finally:
        pool.close()
    assert order == list(range(40))
    assert all(a.brokers for a in answers)
    assert conn.stats()["in_flight_peak"] == 8


class _RechunkingProxy(BrokerProxy):
    """Passes the broker's bytes on cut anywhere: each read from the broker goes on
    in segments of sizes cycling through SEGMENTS_BYTES (inside a size prefix, across
    two answers), the last segment of a read cut short."""

    SEGMENTS_BYTES = (1, 3, 2, 7, 4096, 5, 11)

    def _answers(self, src, dst):
        segment = 0
        try:
            while data := src.recv(65536):
                while data:
                    size = self.SEGMENTS_BYTES[segment]
                    dst.sendall(data[:size])
                    data = data[size:]
                    segment = (segment + 1) % len(self.SEGMENTS_BYTES)
                    time.sleep(0.001)  # one segment per read on the other side, usually
        except OSError:
            pass
        finally:
            dst.close()


def test_answers_cut_anywhere_or_larger_than_the_receive_buffer_are_read_whole(
        kafka_broker):
    """The connection reads into a 64 KiB buffer: answers arrive cut at any byte, several
    in one read, and one of about 100 KiB (a Metadata answer naming 3000 unknown topics)."""
    unknown = [f"no-such-topic-{i:05d}-{'x' * 12}" for i in range(3000)]
    proxy = _RechunkingProxy(broker_address(kafka_broker.bootstrap))
    pool = IOPool(ConnectionConfig(max_in_flight_requests_per_connection=8))
    try:
        conn = pool.connection(-1, "127.0.0.1", proxy.port)
        small = [request_metadata(conn, []) for _ in range(6)]
        large = request_metadata(conn, unknown, allow_auto_topic_creation=False)
        small += [request_metadata(conn, []) for _ in range(6)]
        answers = [future.result(30) for future in small]
        big = large.result(30)
    finally:
        pool.close()
        proxy.close()
    assert all(a.brokers for a in answers)
    assert sorted(t.name for t in big.topics) == unknown
    assert {t.error_code for t in big.topics} == {errors.UnknownTopicOrPartitionError.code}
    assert conn.stats()["connections_ready"] == 1  # no answer broke the stream


def test_batch_memory_goes_to_sendmsg_uncopied(kafka_broker, topic_name, monkeypatch):
    """socket.sendmsg receives views of the sealed batch's own memory."""
    create_topic(kafka_broker.bootstrap, topic_name)
    buffers = new_buffer_pool()
    batch = make_batch(buffers, "zero-copy", count=50, value_bytes=500)
    exporters = []
    original = socket.socket.sendmsg

    def spying_sendmsg(sock, buffers, *args):
        exporters.extend(getattr(b, "obj", None) for b in buffers)
        return original(sock, buffers, *args)

    monkeypatch.setattr(socket.socket, "sendmsg", spying_sendmsg)
    stack = io_stack(kafka_broker.bootstrap)
    try:
        stack.sender.send(topic_name, 0, batch.view, batch.record_count).result(30)
    finally:
        stack.close()
    assert any(obj is batch.builder for obj in exporters)
    assert as_read(read_topic(kafka_broker.bootstrap, topic_name, 50)) == [
        tuple(w) for w in batch.records]
    release_batches([batch])


def test_connection_refused_names_the_address(pool):
    port = free_port()
    conn = pool.connection(-1, "127.0.0.1", port)
    with pytest.raises(KafkaConnectionError, match=rf"127\.0\.0\.1:{port}.*refused"):
        request_metadata(conn, []).result(10)
    assert conn.state == DISCONNECTED


class _QuietHTTPHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _Http400Server:
    """Answers whatever arrives with an HTTP 400 and closes, as many web servers do with
    bytes that are not HTTP."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.server_address = self.listener.getsockname()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with client:
                client.recv(65536)
                client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                               b"Connection: close\r\n\r\n")

    def close(self):
        self.listener.close()


def _silent_http_server():
    """Python's own HTTP server: it waits for a request line that never comes."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _QuietHTTPHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    server.close = lambda: (server.shutdown(), server.server_close())
    return server


@pytest.mark.parametrize("make_server, message", [
    (_silent_http_server, r"the ApiVersions handshake \(is it a Kafka broker\?\) did not "
                          r"complete within this attempt.s setup timeout of \d+ ms "
                          r"\(socket_connection_setup_timeout_ms=2000"),
    (_Http400Server, r"sent a response size of 1213486160 bytes \(first bytes b'HTTP'.*the "
                     r"peer does not speak the Kafka protocol"),
], ids=["silent", "answers-400"])
def test_http_server_port_gives_clear_error_without_hanging(make_server, message):
    server = make_server()
    port = server.server_address[1]
    pool = IOPool(ConnectionConfig(connect_timeout_ms=2000))
    try:
        conn = pool.connection(-1, "127.0.0.1", port)
        started = time.monotonic()
        with pytest.raises(errors.KafkaError, match=message) as failure:
            # Bounded either way: the connect timeout covers the handshake.
            request_metadata(conn, []).result(30)
        elapsed_s = time.monotonic() - started
    finally:
        pool.close()
        server.close()
    assert f"127.0.0.1:{port}" in str(failure.value)
    assert elapsed_s < 10


def test_request_never_sent_to_a_silent_endpoint_says_why_in_words():
    """The request outlives its request_timeout_ms before the handshake gives up: the
    error says where the connection is, not 'vNone (correlation id -1) ... (last
    error: None)' of a request never framed."""
    server = _silent_http_server()
    pool = IOPool(ConnectionConfig(request_timeout_ms=500, connect_timeout_ms=20000))
    try:
        conn = pool.connection(-1, "127.0.0.1", server.server_address[1])
        with pytest.raises(RequestTimeoutError) as failure:
            request_metadata(conn, []).result(10)
    finally:
        pool.close()
        server.close()
    text = str(failure.value)
    assert text == (f"a Metadata request was not sent to bootstrap server "
                    f"127.0.0.1:{server.server_address[1]} within request_timeout_ms=500: the "
                    "connection is still in the ApiVersions handshake (is it a Kafka broker?), "
                    "no error yet")


class _RewritingProxy(BrokerProxy):
    """Rewrites the first Metadata answer: its correlation id (an out-of-order answer)
    or its size prefix (an absurd size, or a claim the bytes never make good).  Hostile-broker input for the connection's
    checks; everything else passes through untouched."""

    def __init__(self, target, mode):
        self.mode = mode
        self.rewritten = threading.Event()
        super().__init__(target)

    def _answers(self, src, dst):
        frames = 0
        try:
            while True:
                header = recv_exactly(src, 8)
                size, correlation_id = struct.unpack(">ii", header)
                body = recv_exactly(src, size - 4)
                frames += 1
                if frames == 2 and not self.rewritten.is_set():  # frame 1 is ApiVersions
                    self.rewritten.set()
                    if self.mode == "correlation":
                        correlation_id += 1000
                    elif self.mode == "claim":
                        size = 90 * 1024 * 1024  # allowed, but only the real body follows
                    else:
                        size = 0x7FFFFFF0
                dst.sendall(struct.pack(">ii", size, correlation_id) + body)
        except OSError:
            pass
        finally:
            dst.close()


class _ClosingProxy(BrokerProxy):
    """A broker that closes the connection during version negotiation: the
    ApiVersions request reaches the real broker, its answer is dropped and the
    client's connection closed instead."""

    def _answers(self, src, dst):
        try:
            recv_exactly(src, 4)  # the broker started answering
        except OSError:
            pass
        finally:
            # shutdown, not only close: the other direction's thread is still in
            # recv() on dst, which would keep the connection open.
            dst.shutdown(socket.SHUT_RDWR)
            dst.close()


def test_close_during_version_negotiation_names_the_stage(kafka_broker, pool, caplog):
    proxy = _ClosingProxy(broker_address(kafka_broker.bootstrap))
    caplog.set_level(logging.DEBUG, logger="netkafka.client.connection")
    try:
        conn = pool.connection(-1, "127.0.0.1", proxy.port)
        with pytest.raises(KafkaConnectionError,
                           match=rf"127\.0\.0\.1:{proxy.port} closed the connection during "
                                 r"the ApiVersions handshake \(is it a Kafka broker\?\)"):
            request_metadata(conn, []).result(10)
    finally:
        proxy.close()
    assert connection_states(caplog, f"127.0.0.1:{proxy.port}")[:4] == [
        CONNECTING, TRANSPORT_HANDSHAKE, NEGOTIATING_VERSIONS, DISCONNECTED]
    assert conn.stats()["connections_ready"] == 0


@pytest.mark.parametrize("mode, message", [
    ("correlation", r"answered correlation id \d+ while the oldest request in flight is "
                    r"Metadata v\d+ \(correlation id \d+\): responses out of order"),
    ("size", r"sent a response size of 2147483632 bytes .*allowed 4\.\.104857600"),
])
def test_hostile_answer_is_a_protocol_error_and_the_connection_recovers(kafka_broker, pool,
                                                                         mode, message):
    proxy = _RewritingProxy(broker_address(kafka_broker.bootstrap), mode)
    try:
        conn = pool.connection(-1, "127.0.0.1", proxy.port)
        with pytest.raises(errors.ProtocolError, match=message) as failure:
            request_metadata(conn, []).result(10)
        assert f"127.0.0.1:{proxy.port}" in str(failure.value)
        # The connection was closed; the next request reconnects and is answered.
        assert request_metadata(conn, []).result(10).brokers
        assert conn.stats()["connections_ready"] == 2
    finally:
        proxy.close()


def test_a_size_prefix_alone_costs_no_memory(kafka_broker):
    """A response claiming 90 MiB (under max_response_bytes) of which a few KB come: the
    receive buffer grows as the bytes arrive, not to the claimed size at once."""
    proxy = _RewritingProxy(broker_address(kafka_broker.bootstrap), "claim")
    pool = IOPool(ConnectionConfig(request_timeout_ms=1000, connect_timeout_ms=5000))
    tracemalloc.start()
    try:
        conn = pool.connection(-1, "127.0.0.1", proxy.port)
        with pytest.raises(RequestTimeoutError, match="within request_timeout_ms=1000"):
            request_metadata(conn, []).result(10)
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        pool.close()
        proxy.close()
    assert proxy.rewritten.is_set()
    assert peak_bytes < 8 * 1024 * 1024


def test_a_response_larger_than_the_receive_buffer_is_read_whole(kafka_broker, pool):
    """Its bytes arrive over several reads while the buffer doubles to its size (~500 KB
    here: the broker's answer with 20,000 more brokers)."""
    proxy = MetadataProxy(broker_address(kafka_broker.bootstrap))
    Broker = KpMetadataResponse.MetadataResponseBroker
    extra = [Broker(node_id=1000 + i, host="127.0.0.1", port=proxy.port, rack=None)
             for i in range(20_000)]
    proxy.set_rewrite(lambda fields: dict(fields, brokers=fields["brokers"] + extra))
    try:
        conn = pool.connection(-1, "127.0.0.1", proxy.port)
        answer = request_metadata(conn, []).result(10)
    finally:
        proxy.close()
    assert proxy.rewritten_count() == 1
    assert len(answer.brokers) == 20_001
    assert {broker.node_id for broker in answer.brokers} >= {1000, 20_999}


class _RefusingEveryApiVersions:
    """A peer that answers every ApiVersions request UNSUPPORTED_VERSION with a v0 body
    offering ApiVersions v0..v3, whatever the version asked: ``asked`` lists the
    versions it was asked at."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.asked = []  # written by the serving thread; read after the test's request
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        with sock:
            try:
                while True:
                    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
                    _, version, correlation_id = struct.unpack_from(
                        ">hhi", recv_exactly(sock, size))
                    self.asked.append(version)
                    body = struct.pack(">ihihhh", correlation_id,
                                       errors.UnsupportedVersionError.code, 1,
                                       ApiKey.API_VERSIONS, 0, 3)
                    sock.sendall(struct.pack(">i", len(body)) + body)
            except OSError:
                pass

    def close(self):
        self.listener.close()


def test_api_versions_refused_again_at_the_version_offered_is_an_error_not_a_loop(pool):
    # The first refusal is followed once, at the version the answer offers (v3); a
    # broker refusing that too would otherwise be asked again and again, as fast as it
    # answers, until the setup timeout.
    peer = _RefusingEveryApiVersions()
    try:
        conn = pool.connection(-1, "127.0.0.1", peer.port)
        with pytest.raises(errors.UnsupportedVersionError,
                           match=r"ApiVersions request refused; the broker supports "
                                 r"ApiVersions v0\.\.v3"):
            request_metadata(conn, []).result(10)
    finally:
        peer.close()
    assert peer.asked[:3] == [api_versions.API_VERSIONS_VERSION, 3]


def test_request_times_out_while_the_broker_is_frozen(kafka_broker):
    node = single_node(kafka_broker)
    host, port = broker_address(kafka_broker.bootstrap)
    pool = IOPool(ConnectionConfig(request_timeout_ms=1000, connect_timeout_ms=2000))
    try:
        conn = pool.connection(-1, host, port)
        request_metadata(conn, []).result(10)
        node.pause()
        try:
            started = time.monotonic()
            future = request_metadata(conn, [])
            with pytest.raises(RequestTimeoutError,
                               match=rf"{host}:{port} did not answer Metadata .*"
                                     r"request_timeout_ms=1000"):
                future.result(10)
            waited_s = time.monotonic() - started
            assert conn.state != READY  # closed: its later answers would be stuck
        finally:
            node.resume()
        assert waited_s >= 0.9
        # After the thaw the connection comes back by itself.
        assert request_metadata(conn, []).result(10).brokers
    finally:
        pool.close()


def test_reconnects_after_the_broker_restarts(kafka_broker):
    node = single_node(kafka_broker)
    host, port = broker_address(kafka_broker.bootstrap)
    pool = IOPool(ConnectionConfig(reconnect_backoff_ms=50, reconnect_backoff_max_ms=500))
    try:
        conn = pool.connection(-1, host, port)
        request_metadata(conn, []).result(10)
        node.restart()
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = request_metadata(conn, []).result(10)
                break
            except KafkaConnectionError:
                # The first request may meet the dead socket; later ones reconnect.
                assert time.monotonic() < deadline, "no reconnect within 60 s"
                time.sleep(0.1)
        assert answer.brokers
        assert conn.stats()["connections_ready"] >= 2
    finally:
        pool.close()


def test_reconnect_attempts_back_off():
    """Against a closed port, attempts follow reconnect_backoff_ms doubling up to the max
    (with jitter), not a tight loop."""
    port = free_port()
    pool = IOPool(ConnectionConfig(reconnect_backoff_ms=50, reconnect_backoff_max_ms=200,
                                   request_timeout_ms=60000))
    try:
        conn = pool.connection(-1, "127.0.0.1", port)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            with pytest.raises(KafkaConnectionError):
                request_metadata(conn, []).result(5)
        attempts = conn.stats()["connect_attempts"]
    finally:
        pool.close()
    # Waits 50, 100, 200, 200, ... ms (+-20%) between attempts: 5 to 8 fit in one second.
    assert 3 <= attempts <= 10


def test_idle_connection_is_closed_and_reopened_on_demand(kafka_broker):
    host, port = broker_address(kafka_broker.bootstrap)
    pool = IOPool(ConnectionConfig(connections_max_idle_ms=300))
    try:
        conn = pool.connection(-1, host, port)
        request_metadata(conn, []).result(10)
        deadline = time.monotonic() + 10
        while conn.state != DISCONNECTED:
            assert time.monotonic() < deadline, "idle connection not closed"
            time.sleep(0.05)
        assert request_metadata(conn, []).result(10).brokers
        stats = conn.stats()
    finally:
        pool.close()
    assert stats["connections_ready"] == 2


@pytest.mark.parametrize("options, message", [
    ({"high_watermark_bytes": 10, "low_watermark_bytes": 20},
     r"high_watermark_bytes must be an int >= low_watermark_bytes \(20\), got 10"),
    ({"low_watermark_bytes": -1}, r"low_watermark_bytes must be an int >= 0, got -1"),
    ({"max_in_flight_requests_per_connection": 0},
     r"max_in_flight_requests_per_connection must be an int >= 1, got 0"),
    ({"send_buffer_bytes": 0}, r"send_buffer_bytes must be -1 \(OS default\) or > 0"),
    ({"request_timeout_ms": "30"}, r"request_timeout_ms must be an int"),
])
def test_config_is_validated(options, message):
    with pytest.raises(ValueError, match=message):
        ConnectionConfig(**options)


def test_watermark_defaults_are_documented_values():
    config = ConnectionConfig()
    assert (config.high_watermark_bytes, config.low_watermark_bytes) == (8 << 20, 4 << 20)
    assert "8 MiB / 4 MiB" in ConnectionConfig.__doc__
