"""Connectivity the Java client has: names resolved off the I/O thread, every address of a
name tried, client_dns_lookup, IPv6 brokers, the growing setup timeout, re-bootstrap.

Every test talks to a real broker.  Where a name must resolve to several addresses, the
test answers getaddrinfo() for a name of its own (a ``.test`` name, which no DNS serves)
with real addresses -- the machine's resolver knows no such name -- and the connections
to those addresses are real.
"""
import contextlib
import re
import socket
import threading
import time

import pytest

from broker_proxy import MetadataProxy
from netkafka import Producer, errors
from netkafka.client.connection import READY, RESOLVING, ConnectionConfig
from netkafka.client.retry import exponential_ms
from netkafka.client.io_pool import IOPool
from netkafka.client.metadata import parse_bootstrap_servers, request_metadata
from netkafka.client.resolver import host_port, resolve
from netkafka.testing.admin import create_topic
from netkafka.testing.broker import Cluster, Listener
from netkafka.testing.proxy import TcpProxy, proxy_listener
from netkafka.testing.reader import read_topic
from netkafka.testing.security import listener_name

_REAL_GETADDRINFO = socket.getaddrinfo


def _has_ipv6_loopback():
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


HAS_IPV6 = _has_ipv6_loopback()
IPV6_LISTENER = Listener("IPV6", "PLAINTEXT", host="::1")
PROXIED_LISTENER = Listener("PROXIED", "PLAINTEXT")


@pytest.fixture(scope="module")
def node_with_listeners(tmp_path_factory, kafka_jvm_options):
    """One node with an IPv6 listener on [::1] (where this machine has IPv6 loopback) and a
    PROXIED listener advertised at a TcpProxy in front of it: (node, proxy)."""
    listeners = [PROXIED_LISTENER, *([IPV6_LISTENER] if HAS_IPV6 else [])]
    cluster = Cluster(1, directory=tmp_path_factory.mktemp("kafka-connectivity"),
                      jvm_options=kafka_jvm_options, listeners=listeners)
    (proxy,) = proxy_listener(cluster, PROXIED_LISTENER.name).values()
    try:
        cluster.start()
        try:
            yield cluster.nodes[0], proxy
        finally:
            cluster.stop()
    finally:
        proxy.close()


def _port(bootstrap):
    return int(bootstrap.rpartition(":")[2])


# -- names resolved off the I/O thread, every address tried ------------------------------------


def _slow_lookups(monkeypatch, name):
    """Makes name's lookups wait (a DNS server that takes its time) until the returned
    Event is set, then resolve to 127.0.0.1; the list returned gets the name of each
    thread that looked it up."""
    release = threading.Event()
    lookup_threads = []

    def getaddrinfo(host, *args, **kwargs):
        if host == name:
            lookup_threads.append(threading.current_thread().name)
            release.wait(30)
            host = "127.0.0.1"
        return _REAL_GETADDRINFO(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return release, lookup_threads


def test_a_slow_name_lookup_does_not_stall_the_io_thread(kafka_broker, monkeypatch):
    port = _port(kafka_broker.bootstrap)
    release, lookup_threads = _slow_lookups(monkeypatch, "slow.test")
    pool = IOPool(ConnectionConfig(connect_timeout_ms=20000), io_threads=1)
    try:
        slow = pool.connection(-1, "slow.test", port)
        slow_answer = request_metadata(slow, [])
        # Same I/O thread (one only): it serves this connection while the lookup hangs.
        fast = pool.connection(-2, "127.0.0.1", port)
        assert request_metadata(fast, []).result(10).brokers
        assert slow.state == RESOLVING and not slow_answer.done()
        release.set()
        assert slow_answer.result(10).brokers
        assert slow.attempt_address == ("slow.test", "127.0.0.1")
    finally:
        release.set()
        pool.close()
    assert len(lookup_threads) == 1 and lookup_threads[0].startswith("netkafka-resolve")


def test_a_lookup_that_hangs_past_the_setup_timeout_is_waited_for_not_started_again(
        kafka_broker, monkeypatch):
    # Each attempt after a setup timeout started one more resolver thread while the
    # earlier ones still hung: a DNS server that never answers left them piling up.
    port = _port(kafka_broker.bootstrap)
    release, lookup_threads = _slow_lookups(monkeypatch, "hung.test")
    pool = IOPool(ConnectionConfig(connect_timeout_ms=100, connect_timeout_max_ms=100,
                                   reconnect_backoff_ms=10, reconnect_backoff_max_ms=10,
                                   request_timeout_ms=20000))
    try:
        hung = pool.connection(-1, "hung.test", port)
        failed = []
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # each request an attempt, each timed out
            failed.append(request_metadata(hung, []).exception(10))
        started_while_hung = list(lookup_threads)
        release.set()
        assert request_metadata(hung, []).result(10).brokers
    finally:
        release.set()
        pool.close()
    assert len(failed) >= 3, failed
    assert all(isinstance(error, errors.KafkaTimeoutError) for error in failed), failed
    assert len(started_while_hung) == 1, started_while_hung


def _answer_name(monkeypatch, name, infos):
    """Makes getaddrinfo() answer infos for name; the list returned grows by one per
    lookup of it."""
    lookups = []

    def getaddrinfo(host, *args, **kwargs):
        if host == name:
            lookups.append(host)
            return infos
        return _REAL_GETADDRINFO(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


def test_every_address_of_a_name_is_tried_in_turn(kafka_broker, monkeypatch, topic_name):
    # multi.test has two addresses; the broker listens on the second only (127.0.0.1), so
    # the first (::1 where there is IPv6, else an address that refuses) fails to connect.
    port = _port(kafka_broker.bootstrap)
    with socket.socket() as dead:
        dead.bind(("127.0.0.2", 0))
        dead_port = dead.getsockname()[1]
    first = (_REAL_GETADDRINFO("::1", port, type=socket.SOCK_STREAM) if HAS_IPV6
             else _REAL_GETADDRINFO("127.0.0.2", dead_port, type=socket.SOCK_STREAM))
    second = _REAL_GETADDRINFO("127.0.0.1", port, type=socket.SOCK_STREAM)
    _answer_name(monkeypatch, "multi.test", first + second)
    producer = Producer(bootstrap_servers=f"multi.test:{port}", acks=1)
    try:
        producer.send(topic_name, b"via the second address").get(timeout=30)
        (bootstrap,) = [c for c in producer._pool.connections() if c.node_id < 0]
        stats = bootstrap.stats()
    finally:
        producer.close()
    assert stats["connect_attempts"] == 2 and stats["connections_ready"] == 1
    assert bootstrap.attempt_address == ("multi.test", "127.0.0.1")
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [
        b"via the second address"]


def test_an_address_refusing_the_setup_is_followed_by_the_next_not_the_first(
        secured_broker, monkeypatch):
    # sasl.test's first address is the broker's PLAINTEXT listener, which refuses the SASL
    # handshake (a failure after TCP connected, unlike a refused connect); its second the
    # SASL_PLAINTEXT listener of PLAIN.  The attempt after the refusal (and the reconnect
    # backoff) went to the first address again, every time, as the round started over
    # from a new lookup: as in Java's ClusterConnectionStates, it takes the next address.
    refusing = _port(secured_broker.listeners["PLAINTEXT"].bootstrap)
    accepting = _port(secured_broker.listeners[listener_name("SASL_PLAINTEXT", "PLAIN")].bootstrap)
    lookups = _answer_name(monkeypatch, "sasl.test", [
        *_REAL_GETADDRINFO("127.0.0.1", refusing, type=socket.SOCK_STREAM),
        *_REAL_GETADDRINFO("127.0.0.1", accepting, type=socket.SOCK_STREAM)])
    pool = IOPool(ConnectionConfig(
        security_protocol="SASL_PLAINTEXT", reconnect_backoff_ms=10,
        reconnect_backoff_max_ms=10,
        sasl_settings={"sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                       "sasl_plain_password": secured_broker.passwords["PLAIN"]["alice"]}))
    try:
        conn = pool.connection(-1, "sasl.test", accepting)
        refused = request_metadata(conn, []).exception(30)
        answer = request_metadata(conn, []).result(30)
        stats = conn.stats()
    finally:
        pool.close()
    assert isinstance(refused, errors.IllegalSaslStateError), refused
    assert answer.brokers
    assert stats["connect_attempts"] == 2 and stats["connections_ready"] == 1, stats
    assert len(lookups) == 1, lookups


def test_a_name_that_does_not_resolve_fails_naming_it():
    pool = IOPool()
    try:
        conn = pool.connection(-1, "no-such-host.invalid", 9092)
        with pytest.raises(errors.KafkaConnectionError,
                           match=r"cannot resolve no-such-host\.invalid:9092 for bootstrap"):
            request_metadata(conn, []).result(30)
    finally:
        pool.close()


def test_canonical_mode_names_bootstrap_addresses_by_their_reverse_entry(kafka_broker):
    port = _port(kafka_broker.bootstrap)
    try:
        canonical, _ = socket.getnameinfo(("127.0.0.1", port), socket.NI_NAMEREQD)
    except OSError:
        pytest.skip("127.0.0.1 has no reverse entry here")
    pool = IOPool(ConnectionConfig(
        client_dns_lookup="resolve_canonical_bootstrap_servers_only"))
    try:
        bootstrap = pool.connection(-1, "127.0.0.1", port)
        answer = request_metadata(bootstrap, []).result(10)
        (broker,) = answer.brokers
        known = pool.connection(broker.node_id, broker.host, broker.port)
        request_metadata(known, []).result(10)
    finally:
        pool.close()
    # The canonical name is the host TLS would verify and SASL name for the bootstrap
    # address; a broker named by metadata keeps its advertised host.
    assert bootstrap.attempt_address == (canonical, "127.0.0.1")
    assert known.attempt_address == ("127.0.0.1", "127.0.0.1")


@pytest.mark.parametrize("forward, expected", [
    (["10.0.0.7", "127.0.0.1"], "broker.example"),  # the name leads back: it is used
    (["10.0.0.7"], "127.0.0.1"),  # the reverse zone names a host that is elsewhere
    (None, "127.0.0.1"),  # the reverse name does not resolve at all
])
def test_canonical_name_is_used_only_when_it_resolves_back_to_the_address(
        monkeypatch, forward, expected):
    # Java's getCanonicalHostName() checks the reverse entry forward; so does netkafka,
    # so that a reverse zone alone cannot pick the name TLS verifies.  The system's
    # resolver is replaced: no DNS here can be made to lie on purpose.
    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host != "broker.example":
            return real_getaddrinfo(host, port, *args, **kwargs)
        if forward is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port or 0)) for ip in forward]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "getnameinfo", lambda sockaddr, flags: ("broker.example", "0"))
    (address,) = resolve("127.0.0.1", 9092, canonical=True)
    assert address.host == expected
    assert address.sockaddr == ("127.0.0.1", 9092)


def test_canonical_bootstrap_name_is_the_one_tls_verifies(secured_broker, topic_name):
    # "127.1" reaches 127.0.0.1, whose reverse entry is localhost; the broker's certificate
    # names 127.0.0.1 and localhost, not "127.1" (use_all_dns_ips fails the hostname check
    # there: test_tls.test_host_name_checked_by_default_and_not_when_turned_off).  In
    # canonical mode TLS verifies the canonical name, as Java's client does.
    try:
        canonical, _ = socket.getnameinfo(("127.0.0.1", 0), socket.NI_NAMEREQD)
    except OSError:
        canonical = None
    if canonical != "localhost":
        pytest.skip(f"127.0.0.1's reverse entry here is {canonical!r}, not localhost")
    listener = secured_broker.listeners["SSL"]
    create_topic(listener.bootstrap, topic_name, client_config=secured_broker.client_config("SSL"))
    with Producer(bootstrap_servers=f"127.1:{_port(listener.bootstrap)}",
                  security_protocol="SSL", ssl_cafile=str(secured_broker.ca_file),
                  client_dns_lookup="resolve_canonical_bootstrap_servers_only") as producer:
        producer.send(topic_name, b"verified as localhost", b"k").get(60)
        (bootstrap,) = [c for c in producer._pool.connections() if c.node_id < 0]
    assert bootstrap.attempt_address == ("localhost", "127.0.0.1")
    [record] = read_topic(listener.bootstrap, topic_name, 1,
                          client_config=secured_broker.client_config("SSL"))
    assert record.value == b"verified as localhost"


@pytest.mark.parametrize("setting, value, message", [
    ("client_dns_lookup", "default",
     r"client_dns_lookup must be 'use_all_dns_ips' or 'resolve_canonical_bootstrap_servers_only'"),
    ("client.dns.lookup", "use_all_dns", r"client_dns_lookup must be 'use_all_dns_ips' or"),
    ("metadata_recovery_strategy", "REBOOTSTRAP",
     r"metadata_recovery_strategy must be 'none' or 'rebootstrap', got 'REBOOTSTRAP'"),
    ("socket_connection_setup_timeout_max_ms", 0,
     r"socket_connection_setup_timeout_max_ms must be an int or a finite float >= 1"),
    ("socket_options", [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, "1")],
     r"socket_options must be a list of \(level, option, value\) for socket.setsockopt "
     r"\(ints; the value an int or bytes\)"),
])
def test_bad_connectivity_settings_are_refused_at_construction(setting, value, message):
    with pytest.raises(ValueError, match=message):
        Producer(bootstrap_servers="127.0.0.1:9", **{setting: value})


# -- IPv6 -------------------------------------------------------------------------------------


def test_bracketed_ipv6_addresses_parse_and_print():
    assert parse_bootstrap_servers("[::1]:9092, [fd00::2]:19092,host:1") == [
        ("::1", 9092), ("fd00::2", 19092), ("host", 1)]
    assert host_port("::1", 9092) == "[::1]:9092"
    assert host_port("broker-1", 9092) == "broker-1:9092"


@pytest.mark.skipif(not HAS_IPV6, reason="no IPv6 loopback (::1) on this machine")
def test_a_broker_on_ipv6_serves_bootstrap_and_metadata(node_with_listeners, topic_name):
    node, _ = node_with_listeners
    bootstrap = f"[::1]:{node.listener_ports[IPV6_LISTENER.name]}"
    producer = Producer(bootstrap_servers=bootstrap, acks=1)
    try:
        for i in range(3):
            producer.send(topic_name, b"over IPv6 %d" % i)
        producer.flush(30)
        (broker,) = producer._metadata.snapshot().brokers.values()
        leader = producer._pool.get(broker.node_id)
        assert leader.state == READY
    finally:
        producer.close()
    # The metadata answer names the broker by its IPv6 address, and the records went there.
    assert (broker.host, broker.port) == ("::1", node.listener_ports[IPV6_LISTENER.name])
    assert leader.address == bootstrap and leader.attempt_address == ("::1", "::1")
    assert [r.value for r in read_topic(node.bootstrap, topic_name, 3)] == [
        b"over IPv6 0", b"over IPv6 1", b"over IPv6 2"]


# -- the setup timeout ----------------------------------------------------------------------


def test_setup_timeout_doubles_per_failed_setup_up_to_its_max_and_resets(kafka_broker):
    # A black-holed proxy accepts the TCP connection and never answers ApiVersions: each
    # attempt runs into its setup timeout, which the error states.
    with TcpProxy(_port(kafka_broker.bootstrap)) as proxy:
        proxy.blackhole()
        pool = IOPool(ConnectionConfig(connect_timeout_ms=100, connect_timeout_max_ms=400,
                                       request_timeout_ms=500, reconnect_backoff_ms=10,
                                       reconnect_backoff_max_ms=10))
        try:
            conn = pool.connection(-1, "127.0.0.1", proxy.port)
            timeouts_ms = []
            for _ in range(4):
                with pytest.raises(errors.KafkaTimeoutError) as failure:
                    request_metadata(conn, []).result(10)
                assert "socket_connection_setup_timeout_max_ms=400" in str(failure.value)
                timeouts_ms.append(int(re.search(r"setup timeout of (\d+) ms",
                                                 str(failure.value)).group(1)))
            assert conn.consecutive_failures == 4
            proxy.forward()
            assert request_metadata(conn, []).result(10).brokers
            assert conn.consecutive_failures == 0
            # A READY connection that fails (here: a request timeout) does not grow it: the
            # next setup starts from socket_connection_setup_timeout_ms again, as in Java.
            proxy.blackhole()
            with pytest.raises(errors.RequestTimeoutError):
                request_metadata(conn, []).result(10)
            with pytest.raises(errors.KafkaTimeoutError) as failure:
                request_metadata(conn, []).result(10)
            timeouts_ms.append(int(re.search(r"setup timeout of (\d+) ms",
                                             str(failure.value)).group(1)))
        finally:
            pool.close()
    # 100 ms * 2**n, +-20% jitter, never above the 400 ms max.
    assert 80 <= timeouts_ms[0] <= 120
    assert 160 <= timeouts_ms[1] <= 240
    assert 320 <= timeouts_ms[2] <= 400
    assert 320 <= timeouts_ms[3] <= 400
    assert 80 <= timeouts_ms[4] <= 120


def test_exponential_growth_follows_javas_formula():
    samples = [exponential_ms(1000, 30000, n) for n in range(8) for _ in range(50)]
    by_attempt = [samples[n * 50:(n + 1) * 50] for n in range(8)]
    for n, values in enumerate(by_attempt):
        term = min(1000 * 2 ** n, 30000)
        assert all(0.8 * term <= v <= min(1.2 * term, 30000) for v in values)
    assert exponential_ms(5000, 3000, 4) == 3000  # a max below the start: constant max
    assert exponential_ms(0, 1000, 3) == 0  # reconnect_backoff_ms=0: no wait


# -- re-bootstrap (KIP-899) ----------------------------------------------------------------


@contextlib.contextmanager
def _moving_cluster(node_with_listeners, strategy, topic, delivery_timeout_ms):
    """A producer bootstrapped through a proxy of its own (a load balancer's address) in front
    of the PROXIED listener, which advertises the node's proxy: the producer learns the broker
    at that proxy's address, and writes one record there.  Then the cluster moves: the learned
    address stops answering, and the bootstrap address leads to a listener that advertises a
    reachable one (PLAINTEXT, 127.0.0.1).  Yields (producer, the learned BrokerInfo)."""
    node, advertised_proxy = node_with_listeners
    bootstrap = TcpProxy(node.listener_ports[PROXIED_LISTENER.name])
    bootstrap.start()
    producer = Producer(
        bootstrap_servers=bootstrap.address, acks="all", metadata_recovery_strategy=strategy,
        request_timeout_ms=1000, delivery_timeout_ms=delivery_timeout_ms, retry_backoff_ms=50,
        reconnect_backoff_ms=50, reconnect_backoff_max_ms=200,
        socket_connection_setup_timeout_ms=300, socket_connection_setup_timeout_max_ms=600)
    try:
        producer.send(topic, b"before").get(timeout=30)
        (learned,) = producer._metadata.snapshot().brokers.values()
        assert learned.port == advertised_proxy.port
        advertised_proxy.blackhole()
        bootstrap.retarget(node.broker_port)
        yield producer, learned
    finally:
        producer.close()
        bootstrap.close()
        advertised_proxy.forward()


def test_rebootstrap_resumes_sends_when_every_known_broker_is_unreachable(
        node_with_listeners, topic_name):
    node, _ = node_with_listeners
    # Room for a loaded machine: re-bootstrapping takes one request timeout (1 s) and a few
    # round trips here.
    with _moving_cluster(node_with_listeners, "rebootstrap", topic_name,
                         delivery_timeout_ms=20000) as (producer, broker):
        after = [producer.send(topic_name, b"after %d" % i) for i in range(3)]
        for future in after:
            future.get(timeout=30)
        (moved,) = producer._metadata.snapshot().brokers.values()
        rebootstraps = producer._metadata.rebootstraps
    assert rebootstraps >= 1
    assert (moved.node_id, moved.port) == (broker.node_id, node.broker_port)
    assert sorted(r.value for r in read_topic(node.bootstrap, topic_name, 4)) == [
        b"after 0", b"after 1", b"after 2", b"before"]


def test_without_rebootstrap_sends_to_an_unreachable_cluster_time_out(
        node_with_listeners, topic_name):
    node, _ = node_with_listeners
    with _moving_cluster(node_with_listeners, "none", topic_name,
                         delivery_timeout_ms=4000) as (producer, _):
        future = producer.send(topic_name, b"lost cluster")
        with pytest.raises(errors.KafkaTimeoutError,
                           match=r"not delivered within delivery_timeout_ms=4000"):
            future.get(timeout=30)
        rebootstraps = producer._metadata.rebootstraps
    assert rebootstraps == 0
    assert [r.value for r in read_topic(node.bootstrap, topic_name, 1)] == [b"before"]


def _naming(proxy):
    """A Metadata rewrite: every broker at proxy's address."""
    def rewrite(fields):
        return {**fields, "brokers": [type(b)(node_id=b.node_id, host="127.0.0.1",
                                              port=proxy.port, rack=b.rack)
                                      for b in fields["brokers"]]}
    return rewrite


def _known_broker_turns(kafka_broker, topic_name, rewrite, recovers, timeout_match,
                        **settings):
    """Two fake brokers in front of the real one (tests/broker_proxy.py): "bootstrap",
    the producer's bootstrap_servers, whose answers name "known" as the cluster's broker;
    Produce passes through both.  One record is sent through "known", then its Metadata
    answers go through rewrite, and one record goes to a new topic: delivered when
    recovers (then read back), else its send() times out matching timeout_match.
    Asserts that the bootstrap address was asked again exactly when recovers; returns
    the producer's rebootstraps."""
    target = ("127.0.0.1", _port(kafka_broker.bootstrap))
    known, bootstrap = MetadataProxy(target), MetadataProxy(target)
    bootstrap.set_rewrite(_naming(known))
    later = f"{topic_name}-later"
    for topic in (topic_name, later):
        create_topic(kafka_broker.bootstrap, topic, 1)
    try:
        with Producer(bootstrap_servers=bootstrap.bootstrap, **settings) as producer:
            producer.send(topic_name, b"before").get(timeout=30)
            bootstrap_answers = bootstrap.rewritten_count()
            known.set_rewrite(rewrite)
            if recovers:
                producer.send(later, b"after").get(timeout=30)
            else:
                with pytest.raises(errors.KafkaTimeoutError, match=timeout_match):
                    producer.send(later, b"after")
            rebootstraps = producer._metadata.rebootstraps
    finally:
        known.close()
        bootstrap.close()
    assert known.rewritten_count() >= 1  # the rewritten answers were served
    if recovers:
        assert bootstrap.rewritten_count() > bootstrap_answers
        assert [r.value for r in read_topic(kafka_broker.bootstrap, later, 1)] == [b"after"]
    else:
        assert bootstrap.rewritten_count() == bootstrap_answers
        assert read_topic(kafka_broker.bootstrap, later) == []
    return rebootstraps


@pytest.mark.parametrize("strategy", ["rebootstrap", "none"])
def test_rebootstrap_required_answer_sends_the_next_request_to_bootstrap_servers(
        kafka_broker, topic_name, strategy):
    # KIP-1102: a broker may answer Metadata (v13+) with the top-level error
    # REBOOTSTRAP_REQUIRED.  Real brokers do not send it on their own: the fake "known"
    # broker answers every Metadata request with it.
    rebootstraps = _known_broker_turns(
        kafka_broker, topic_name, lambda fields: {**fields, "error_code": 129},
        recovers=strategy == "rebootstrap", timeout_match=r"REBOOTSTRAP_REQUIRED",
        max_block_ms=3000, metadata_recovery_strategy=strategy)
    assert (rebootstraps >= 1) if strategy == "rebootstrap" else (rebootstraps == 0)


@pytest.mark.parametrize("trigger_ms", [2000, None])
def test_rebootstrap_when_no_metadata_answer_is_usable_for_the_trigger_time(
        kafka_broker, topic_name, trigger_ms):
    # KIP-1102's trigger: the known broker stays connected and answers, but every answer
    # is refused (it lists no brokers: a ProtocolError, the connection kept), so no
    # connection ever fails and KIP-899's condition never holds.  Within
    # metadata_recovery_rebootstrap_trigger_ms the producer asks bootstrap_servers
    # again; at the default (5 minutes) it is still waiting when max_block_ms ends.
    settings = {} if trigger_ms is None else {
        "metadata_recovery_rebootstrap_trigger_ms": trigger_ms}
    rebootstraps = _known_broker_turns(
        kafka_broker, topic_name, lambda fields: {**fields, "brokers": []},
        recovers=trigger_ms is not None, timeout_match=r"lists no brokers",
        max_block_ms=6000, metadata_recovery_strategy="rebootstrap", **settings)
    assert (rebootstraps >= 1) if trigger_ms is not None else (rebootstraps == 0)


@pytest.mark.parametrize("value", [-1, float("nan"), "300000"])
def test_rebootstrap_trigger_setting_is_checked(value):
    with pytest.raises((TypeError, ValueError), match=r"metadata_recovery_rebootstrap_trigger_ms"):
        Producer(bootstrap_servers="127.0.0.1:9", metadata_recovery_rebootstrap_trigger_ms=value)
