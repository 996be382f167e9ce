"""TLS: the settings (refused at construction, naming the setting; the Java client's PEM
names), TlsTransport's contract against a TLS server in this process, and producing over
the secured broker's SSL and MTLS listeners, read back by the independent reader."""
import datetime
import os
import selectors
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from netkafka import Producer
from netkafka.client.tls import HOLD_LIMIT_BYTES, TlsTransport, build_ssl_context
from netkafka.client.transport import PlainTransport
from netkafka.config import ProducerConfig, producer_setting
from netkafka.errors import (AuthenticationError, KafkaTimeoutError, SslAuthenticationError,
                             SslConfigError)
from netkafka.testing.admin import create_topic
from netkafka.testing.proxy import TcpProxy
from netkafka.testing.reader import read_topic
from netkafka.testing.tls import make_tls_files

RECORDS = 200
NOWHERE = "127.0.0.1:9"  # never connected to: construction alone is under test
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    return make_tls_files(tmp_path_factory.mktemp("tls"), ["alice"])


# -- settings -----------------------------------------------------------------------------


def bad_settings(tls):
    alice = tls.clients["alice"]
    return [
        ({"ssl_cafile": str(tls.ca_file)}, r"ssl_cafile is set but security_protocol="
                                           r"'PLAINTEXT' does not use TLS"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
          "sasl_plain_username": "u", "sasl_plain_password": "p", "ssl_check_hostname": False},
         r"ssl_check_hostname is set but security_protocol='SASL_PLAINTEXT'"),
        ({"security_protocol": "SSL", "ssl_cafile": "/no/such/ca.pem"},
         r"ssl_cafile='/no/such/ca.pem': No such file or directory"),
        ({"security_protocol": "SSL", "ssl_cafile": str(alice.key_file)},
         r"ssl_cafile=.* does not load"),
        ({"security_protocol": "SSL", "ssl_certfile": "/no/such/cert.pem"},
         r"ssl_certfile='/no/such/cert.pem': No such file or directory"),
        ({"security_protocol": "SSL", "ssl_certfile": str(alice.cert_file),
          "ssl_keyfile": "/no/such/key.pem"}, r"ssl_keyfile='/no/such/key.pem'"),
        ({"security_protocol": "SSL", "ssl_keyfile": str(alice.key_file)},
         r"ssl_keyfile is set without ssl_certfile"),
        ({"security_protocol": "SSL", "ssl_certfile": str(alice.cert_file),
          "ssl_keyfile": str(alice.encrypted_key_file), "ssl_password": "wrong"},
         r"ssl_keyfile: ssl_password does not decrypt the key"),
        ({"security_protocol": "SSL", "ssl_certfile": str(alice.cert_file),
          "ssl_keyfile": str(alice.encrypted_key_file)},
         r"ssl_keyfile: ssl_password does not decrypt the key \(or none was given\)"),
        ({"security_protocol": "SSL", "ssl_crlfile": "/no/such/crl.pem"},
         r"ssl_crlfile='/no/such/crl.pem'"),
        # Each missing part named by its setting, not OpenSSL's bare "PEM lib".
        ({"security_protocol": "SSL", "ssl_certfile": str(alice.cert_file)},
         r"ssl_certfile=.*alice.crt' holds no PEM private key \(put the key in it too, or "
         r"name its file in ssl_keyfile\)"),
        ({"security_protocol": "SSL", "ssl_certfile": str(alice.key_file)},
         r"ssl_certfile=.* holds no PEM certificate"),
        ({"security_protocol": "SSL", "ssl_certfile": str(alice.cert_file),
          "ssl_keyfile": str(alice.cert_file)}, r"ssl_keyfile=.* holds no PEM private key$"),
        ({"security_protocol": "SSL", "ssl_crlfile": str(tls.ca_file)},
         r"ssl_crlfile=.* holds no PEM CRL"),
        ({"security_protocol": "SSL", "ssl_ciphers": "NO-SUCH-CIPHER"},
         r"ssl_ciphers='NO-SUCH-CIPHER': OpenSSL takes none"),
        ({"security_protocol": "SSL", "ssl_context": "tls"},
         r"ssl_context must be an ssl.SSLContext, not a str"),
        ({"security_protocol": "TLS"}, r"security_protocol='TLS' is not one of"),
        # Refused as every bool setting refuses a non-bool (0 == False passed).
        ({"security_protocol": "SSL", "ssl_check_hostname": 0},
         r"^ssl_check_hostname must be True or False, got 0$"),
        ({"security_protocol": "SSL", "ssl_check_hostname": 1},
         r"^ssl_check_hostname must be True or False, got 1$"),
        ({"security_protocol": "SSL", "ssl_check_hostname": "false"},
         r"^ssl_check_hostname must be True or False, got 'false'$"),
        ({"security_protocol": "SSL", "ssl_context": ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)},
         r"ssl_context is a server's \(PROTOCOL_TLS_SERVER\): the producer is a TLS client"),
    ]


def test_bad_tls_settings_are_refused_at_construction_naming_the_setting(tls_files):
    for settings, message in bad_settings(tls_files):
        with pytest.raises(SslConfigError, match=message):
            Producer(bootstrap_servers=NOWHERE, **settings)


def test_a_java_or_pkcs12_store_where_pem_is_read_says_so_and_how_to_convert(tls_files,
                                                                              tmp_path):
    # A Java client's configuration moved here names its JKS trust store (no
    # ssl.truststore.type, so JKS by Java's default) or a PKCS12 key store: netkafka
    # said only that OpenSSL could not load it, or that it held no PEM certificate.
    from cryptography.hazmat.primitives import serialization
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import pkcs12

    alice = tls_files.clients["alice"]
    jks = tmp_path / "truststore.jks"
    subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file",
                    str(tls_files.ca_file), "-keystore", str(jks), "-storepass", "secret",
                    "-storetype", "JKS"], check=True, capture_output=True)
    key = serialization.load_pem_private_key(alice.key_file.read_bytes(), None)
    cert = x509.load_pem_x509_certificate(alice.cert_file.read_bytes())
    p12 = tmp_path / "keystore.p12"
    p12.write_bytes(pkcs12.serialize_key_and_certificates(
        b"alice", key, cert, None, serialization.NoEncryption()))
    der_cert = tmp_path / "ca.der"
    der_cert.write_bytes(x509.load_pem_x509_certificate(tls_files.ca_file.read_bytes())
                         .public_bytes(serialization.Encoding.DER))
    der_crl = tmp_path / "crl.der"
    der_crl.write_bytes(b"\x30\x82\x01\x00" + bytes(256))  # DER's first bytes, as a CRL's
    hint = r"and netkafka reads PEM files; convert it \(keytool -exportcert -rfc"
    for settings, message in [
            ({"ssl_cafile": str(jks)}, rf"ssl_cafile=.*truststore.jks' does not load: .*: it "
                                       rf"is a JKS key store, {hint}"),
            ({"ssl_certfile": str(jks)}, rf"ssl_certfile=.* holds no PEM certificate: it is "
                                         rf"a JKS key store, {hint}"),
            ({"ssl_certfile": str(p12)}, rf"ssl_certfile=.*keystore.p12' holds no PEM "
                                         rf"certificate: it is binary DER \(a PKCS12 store "
                                         rf"or a DER certificate\), and netkafka reads PEM "
                                         rf"files; convert it \(openssl pkcs12 -in FILE -nodes"),
            # keytool converts no DER file, a CRL least of all: openssl does.
            ({"ssl_cafile": str(der_cert)}, rf"ssl_cafile=.*ca.der' .*: it is binary DER .*"
                                            rf"openssl x509 -inform DER -in FILE"),
            ({"ssl_cafile": str(tls_files.ca_file), "ssl_crlfile": str(der_crl)},
             rf"ssl_crlfile=.*crl.der' .*: it is binary DER, and netkafka reads PEM files; "
             rf"convert it \(openssl crl -inform DER -in FILE -out crl.pem\)")]:
        with pytest.raises(SslConfigError, match=message):
            Producer(bootstrap_servers=NOWHERE, security_protocol="SSL", **settings)


def test_a_callable_ssl_password_is_asked_for_the_keys_password(tls_files):
    """kafka-python's ssl_password may be a callable returning the password (a secret
    store's look-up): it is called, as load_cert_chain does, not refused as a type."""
    alice = tls_files.clients["alice"]
    key = {"ssl_certfile": str(alice.cert_file), "ssl_keyfile": str(alice.encrypted_key_file)}
    asked = []

    def password():
        asked.append(True)
        return alice.key_password

    assert build_ssl_context({**key, "ssl_password": password}, "SSL") is not None
    assert asked == [True]
    with pytest.raises(SslConfigError, match=r"^ssl_password\(\) returned an object of type "
                                             r"int, not a str or bytes$"):
        build_ssl_context({**key, "ssl_password": lambda: 1234}, "SSL")
    with pytest.raises(SslConfigError, match="ssl_password does not decrypt the key"):
        build_ssl_context({**key, "ssl_password": lambda: "wrong"}, "SSL")


def test_a_crl_file_is_loaded_and_checked_for_the_brokers_certificate(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    crl = (x509.CertificateRevocationListBuilder()
           .issuer_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "ca")]))
           .last_update(now).next_update(now + datetime.timedelta(days=1))
           .sign(key, hashes.SHA256()))
    crl_file = tmp_path / "crl.pem"
    crl_file.write_bytes(crl.public_bytes(serialization.Encoding.PEM))
    context = build_ssl_context({"ssl_crlfile": str(crl_file)}, "SSL")
    assert context.verify_flags & ssl.VERIFY_CRL_CHECK_LEAF


def test_settings_build_the_context_the_connections_use(tls_files):
    alice = tls_files.clients["alice"]
    config = ProducerConfig.from_kwargs({
        "security_protocol": "SSL", "ssl_cafile": str(tls_files.ca_file),
        "ssl_certfile": str(alice.cert_file), "ssl_keyfile": str(alice.encrypted_key_file),
        "ssl_password": alice.key_password, "ssl_check_hostname": False,
        "ssl_ciphers": "ECDHE+AESGCM"})
    connection = config.connection_config()
    context = connection.ssl_context
    assert (connection.security_protocol, connection.sasl_settings) == ("SSL", None)
    assert context.check_hostname is False and context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    # The given CA alone, not the system's besides (as a Java trust store).
    [ca] = context.get_ca_certs()
    assert ((("organizationName", "netkafka tests"),) in ca["subject"])
    assert {c["name"].split("-")[0] for c in context.get_ciphers()
            if c["protocol"] == "TLSv1.2"} == {"ECDHE"}
    assert ProducerConfig.from_kwargs({}).connection_config().ssl_context is None


def test_passwords_stay_out_of_the_configs_repr(tls_files):
    alice = tls_files.clients["alice"]
    config = ProducerConfig.from_kwargs({
        "security_protocol": "SASL_SSL", "ssl_cafile": str(tls_files.ca_file),
        "ssl_certfile": str(alice.cert_file), "ssl_keyfile": str(alice.encrypted_key_file),
        "ssl_password": alice.key_password, "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice", "sasl_plain_password": "sasl-secret"})
    connection = config.connection_config()
    assert connection.sasl_settings["sasl_plain_password"] == "sasl-secret"
    for text in (repr(config), repr(connection)):
        assert alice.key_password not in text and "sasl-secret" not in text


def test_a_users_ssl_context_wins_over_the_other_settings():
    mine = ssl.create_default_context()
    config = ProducerConfig.from_kwargs({"security_protocol": "SSL", "ssl_context": mine,
                                         "ssl_cafile": "/not/looked/at.pem"})
    assert config.connection_config().ssl_context is mine


def test_java_pem_settings_become_kafka_pythons(tls_files, tmp_path):
    alice = tls_files.clients["alice"]
    java = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls_files.ca_file),
        "ssl.keystore.type": "pem",
        "ssl.keystore.location": str(alice.cert_file),
        "ssl.key.password": alice.key_password,
        "ssl.endpoint.identification.algorithm": "",
    }
    kwargs = {}
    for name, text in java.items():
        kwargs.update(producer_setting(name, text))
    assert kwargs == {"security_protocol": "SSL", "ssl_cafile": str(tls_files.ca_file),
                      "ssl_certfile": str(alice.cert_file), "ssl_password": alice.key_password,
                      "ssl_check_hostname": False}
    assert producer_setting("ssl.endpoint.identification.algorithm", "HTTPS") == {
        "ssl_check_hostname": True}
    # The bools it maps to pass ssl_check_hostname's check, and set the context.
    for text, checked in (("https", True), ("", False)):
        config = ProducerConfig.from_kwargs({
            "bootstrap_servers": NOWHERE, "security_protocol": "SSL",
            **producer_setting("ssl.endpoint.identification.algorithm", text)})
        assert config._ssl_context.check_hostname is checked
    # Text is trimmed and the protocol read in any case, as the Java client reads them.
    assert producer_setting("ssl.truststore.location", f"{tls_files.ca_file} ") == {
        "ssl_cafile": str(tls_files.ca_file)}
    assert producer_setting("ssl.key.password", "secret \t") == {"ssl_password": "secret"}
    assert producer_setting("security.protocol", "sasl_ssl ") == {
        "security_protocol": "SASL_SSL"}
    assert producer_setting("sasl.mechanism", "PLAIN ") == {"sasl_mechanism": "PLAIN"}
    for name, text, message in [
            ("ssl.truststore.type", "JKS", r"ssl.truststore.type='JKS': must be 'PEM'.*keytool"),
            ("ssl.endpoint.identification.algorithm", "dns",
             r"must be 'https' or ''")]:
        with pytest.raises(ValueError, match=message):
            producer_setting(name, text)


# -- TlsTransport against a TLS server in this process ------------------------------------


class EchoServer:
    """A blocking TLS server on one end of a socketpair, in a thread: echoes every byte
    back (so the client's writes and reads both cross TLS) and counts them; closes the
    socket once `expected` bytes came, with a close_notify first if close_notify."""

    def __init__(self, sock, keystore_file, expected=0, close_notify=False):
        self.expected = expected
        self._close_notify = close_notify
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(keystore_file)
        self.received = 0
        self._tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            self._tls.do_handshake()
            while self.received < self.expected and (data := self._tls.recv(1 << 16)):
                self.received += len(data)
                self._tls.sendall(data)
            if self._close_notify:
                # Sends close_notify, as a Java broker closes; waits for the answer.
                self._tls.unwrap()
        except (OSError, ssl.SSLError):
            pass  # the client went away
        finally:
            self._tls.close()

    def join(self):
        self._thread.join(10)


def drive(transport, selector, payload):
    """Writes payload through transport while reading the echo; returns what came back
    and the most plaintext one write() call took."""
    views = [memoryview(payload)]
    echoed = bytearray()
    buf = bytearray(100_000)
    largest_take = 0
    while len(echoed) < len(payload):
        if views or transport.output_pending:
            taken = transport.write(views)
            largest_take = max(largest_take, taken)
            if taken:
                views = [views[0][taken:]] if taken < views[0].nbytes else []
        n = transport.read_into(memoryview(buf))
        if n == 0:
            raise AssertionError("the server closed early")
        if n is None:
            events = selectors.EVENT_READ | (
                selectors.EVENT_WRITE if views or transport.output_pending else 0)
            selector.modify(transport, events)
            assert selector.select(10), "stuck: no event in 10 s"
        else:
            echoed += buf[:n]
    return bytes(echoed), largest_take


def echo_pair(tls_files, ca_file, peer="localhost:0", send_buffer_bytes=None, **echo_options):
    """A TlsTransport over one end of a socketpair (for the broker "localhost", trusting
    ca_file) and an EchoServer on the other."""
    client, server = socket.socketpair()
    client.setblocking(False)
    if send_buffer_bytes is not None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
    echo = EchoServer(server, tls_files.broker_keystore_file, **echo_options)
    context = build_ssl_context({"ssl_cafile": str(ca_file)}, "SSL")
    return TlsTransport(PlainTransport(client), context, "localhost", peer), echo


def handshake(transport, selector):
    """Runs the TLS handshake to its end, waiting on selector in between.  How many waits
    it takes depends on when the server's thread runs (its answer may already be there
    when handshake() reads): none is asserted."""
    selector.register(transport, selectors.EVENT_WRITE)
    while wanted := transport.handshake():
        selector.modify(transport, wanted)
        assert selector.select(10), "handshake stuck"


def read_past_nothing(transport):
    """read_into() until it has something to say other than "nothing now": its count."""
    buf = bytearray(16)
    with selectors.DefaultSelector() as selector:
        selector.register(transport, selectors.EVENT_READ)
        while (n := transport.read_into(memoryview(buf))) is None:
            assert selector.select(10)
    return n


def test_tls_transport_handshakes_in_steps_holds_back_a_bounded_amount_and_reads(tls_files):
    payload = os.urandom(3 * 1024 * 1024)
    transport, echo = echo_pair(tls_files, tls_files.ca_file, send_buffer_bytes=8192,
                                expected=len(payload))
    with selectors.DefaultSelector() as selector:
        handshake(transport, selector)
        echoed, largest_take = drive(transport, selector, payload)
    assert echoed == payload
    # The socket's buffer is far smaller than the payload, so the transport held
    # ciphertext back -- never more than its bound per call.
    assert 0 < largest_take <= HOLD_LIMIT_BYTES
    # The server closed after the echo: the end of the stream.
    assert read_past_nothing(transport) == 0
    transport.close()
    echo.join()
    assert echo.received == len(payload)


def test_tls_transport_ends_the_stream_at_the_brokers_close_notify(tls_files):
    """A Java broker sends close_notify when it closes a TLS connection (a request it
    refuses, its idle timeout, its shutdown): read_into() must say 0, the end of the
    stream, and not ask the TLS object again and again (which spun the I/O thread)."""
    transport, echo = echo_pair(tls_files, tls_files.ca_file, close_notify=True)
    with selectors.DefaultSelector() as selector:
        handshake(transport, selector)
    read = []
    # On a thread of its own: a regression spins, not the test.
    reader = threading.Thread(target=lambda: read.append(read_past_nothing(transport)),
                              daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "read_into() spins at the close_notify"
    assert read == [0]
    transport.close()
    echo.join()


def test_tls_transport_names_the_host_and_the_reason_a_certificate_fails(tls_files):
    transport, echo = echo_pair(tls_files, tls_files.untrusted_ca_file, peer="localhost:9093")
    with selectors.DefaultSelector() as selector:
        with pytest.raises(SslAuthenticationError,
                           match=r"TLS handshake with localhost:9093: the broker's certificate "
                                 r"did not verify: unable to get local issuer certificate"):
            handshake(transport, selector)
    transport.close()
    echo.join()


# -- the secured broker ---------------------------------------------------------------------


def produce_and_read(secured_broker, listener, topic, config_listener=None, **settings):
    """Produce RECORDS keyed records with netkafka over listener; return them and what the
    independent reader (configured on its own for config_listener) read back."""
    spec = secured_broker.listeners[listener]
    reader_config = secured_broker.client_config(config_listener or listener)
    create_topic(spec.bootstrap, topic, partitions=2, client_config=reader_config)
    sent = [(f"k{i}".encode(), os.urandom(100 + i)) for i in range(RECORDS)]
    with Producer(bootstrap_servers=spec.bootstrap, linger_ms=2, **settings) as producer:
        futures = [producer.send(topic, value, key) for key, value in sent]
        producer.flush(60)
        for future in futures:
            future.get(30)
    records = read_topic(spec.bootstrap, topic, expected_count=RECORDS, client_config=reader_config)
    return sent, [(r.key, r.value) for r in records]


def test_produce_over_ssl_read_back_independently(secured_broker, topic_name):
    sent, read = produce_and_read(secured_broker, "SSL", topic_name, security_protocol="SSL",
                                  ssl_cafile=str(secured_broker.ca_file))
    assert sorted(read) == sorted(sent)


@pytest.mark.parametrize("encrypted_key", [False, True], ids=["key", "encrypted-key"])
def test_produce_over_mtls_read_back_independently(secured_broker, topic_name, encrypted_key):
    alice = secured_broker.client_certs["alice"]
    key = ({"ssl_keyfile": str(alice.encrypted_key_file), "ssl_password": alice.key_password}
           if encrypted_key else {"ssl_keyfile": str(alice.key_file)})
    sent, read = produce_and_read(secured_broker, "MTLS", topic_name, security_protocol="SSL",
                                  ssl_cafile=str(secured_broker.ca_file),
                                  ssl_certfile=str(alice.cert_file), **key)
    assert sorted(read) == sorted(sent)


def test_mtls_without_a_client_certificate_is_refused_by_the_broker(secured_broker, topic_name):
    spec = secured_broker.listeners["MTLS"]
    with Producer(bootstrap_servers=spec.bootstrap, security_protocol="SSL",
                  ssl_cafile=str(secured_broker.ca_file), max_block_ms=120_000) as producer:
        with pytest.raises(SslAuthenticationError, match=rf"{spec.bootstrap} failed: \w+_CERTIFICATE"
                                                         r".*set ssl_certfile"):
            producer.send(topic_name, b"v").get(120)


def test_a_users_ssl_context_is_the_one_used(secured_broker, topic_name):
    # Trusts the test CA only because the user's own context does: the ssl_cafile given
    # beside it (the untrusted CA) is not looked at.
    context = ssl.create_default_context(cafile=str(secured_broker.ca_file))
    sent, read = produce_and_read(secured_broker, "SSL", topic_name, security_protocol="SSL",
                                  ssl_context=context,
                                  ssl_cafile=str(secured_broker.untrusted_ca_file))
    assert sorted(read) == sorted(sent)


def test_a_listener_closing_with_close_notify_fails_the_send_and_close_returns(
        secured_broker, topic_name):
    """SSL to a SASL_SSL listener: the TLS handshake passes, and the broker closes the
    connection (with close_notify) at the first request that is not SASL.  The send
    fails naming the closed connection; the I/O thread did not spin on the
    close_notify, so close() returns."""
    spec = secured_broker.listeners["SASL_SSL_PLAIN"]
    producer = Producer(bootstrap_servers=spec.bootstrap, security_protocol="SSL",
                        ssl_cafile=str(secured_broker.ca_file), max_block_ms=3000)
    try:
        with pytest.raises(KafkaTimeoutError, match=rf"{spec.bootstrap} closed the connection"):
            producer.send(topic_name, b"refused").get(30)
    finally:
        producer.close(timeout=10)


@pytest.mark.parametrize("listener, settings", [
    ("SSL", {}),
    ("SASL_SSL_PLAIN", {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                        "sasl_plain_username": "alice", "sasl_plain_password": "unused"}),
])
def test_a_plaintext_client_on_a_tls_listener_fails_at_once_naming_the_setting(
        secured_broker, topic_name, listener, settings):
    """The listener answers the plaintext ApiVersions request with a TLS alert: the
    send fails with that said, not after max_block_ms of retrying a 'response size'."""
    spec = secured_broker.listeners[listener]
    max_block_ms = 60000
    producer = Producer(bootstrap_servers=spec.bootstrap, max_block_ms=max_block_ms,
                        **settings)
    started = time.monotonic()
    try:
        with pytest.raises(AuthenticationError, match=r"the listener speaks TLS, but "
                                                      r"security_protocol='(SASL_)?PLAINTEXT'"):
            producer.send(topic_name, b"refused").get(90)
    finally:
        producer.close()
    assert time.monotonic() - started < max_block_ms / 1000 / 2


def test_a_tls_client_on_a_plaintext_listener_is_told_to_match_the_listener(secured_broker,
                                                                          topic_name):
    """The plaintext listener reads the ClientHello as a request too large and closes:
    a connection failure (see the next test), whose error says which setting to check."""
    spec = secured_broker.listeners["PLAINTEXT"]
    with Producer(bootstrap_servers=spec.bootstrap, security_protocol="SSL",
                  ssl_cafile=str(secured_broker.ca_file), max_block_ms=3000) as producer:
        with pytest.raises(KafkaTimeoutError,
                           match=rf"TLS handshake with {spec.bootstrap}: the peer closed the "
                                 r"connection \(is it a TLS listener\? security_protocol must "
                                 r"match the listener\)"):
            producer.send(topic_name, b"v").get(60)


def test_a_connection_closed_mid_handshake_is_retried_not_an_authentication_failure(
        secured_broker, topic_name):
    """A load balancer with no broker behind it accepts and closes (a TcpProxy whose
    target refuses): the TLS handshake meets EOF.  As in the Java client (an
    EOFException, not an SslAuthenticationException) that is a connection failure,
    retried; it failed the send at once as a refused authentication."""
    spec = secured_broker.listeners["SSL"]
    create_topic(spec.bootstrap, topic_name, client_config=secured_broker.client_config("SSL"))
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead_port = unused.getsockname()[1]  # nothing listens once this closes
    broker_port = int(spec.bootstrap.rsplit(":", 1)[1])
    with TcpProxy(dead_port) as proxy:
        timer = threading.Timer(2.0, proxy.retarget, (broker_port,))
        timer.start()
        try:
            with Producer(bootstrap_servers=proxy.address, security_protocol="SSL",
                          ssl_cafile=str(secured_broker.ca_file),
                          max_block_ms=30000) as producer:
                producer.send(topic_name, b"through").get(30)
        finally:
            timer.cancel()
        assert proxy.accepted >= 2  # closed at least once before it forwarded
    records = read_topic(spec.bootstrap, topic_name, 1,
                         client_config=secured_broker.client_config("SSL"))
    assert [r.value for r in records] == [b"through"]


def test_a_listener_silent_after_accept_times_out_naming_the_tls_handshake(tls_files):
    """A firewall or proxy that lets TCP through and drops TLS, or a listener that says
    nothing: the setup timeout bounds the handshake and names it as TLS's, as a Java
    user expects, not as a 'transport' handshake."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (backlog), never answers
        port = silent.getsockname()[1]
        with Producer(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SSL",
                      ssl_cafile=str(tls_files.ca_file), max_block_ms=1500,
                      socket_connection_setup_timeout_ms=300,
                      socket_connection_setup_timeout_max_ms=300) as producer:
            with pytest.raises(KafkaTimeoutError,
                               match=rf"bootstrap server 127.0.0.1:{port}: the TLS handshake "
                                     r"did not complete within this attempt's setup timeout"):
                producer.send("topic", b"v").get(10)


def test_an_untrusted_broker_certificate_fails_fast_naming_host_and_reason(secured_broker,
                                                                          topic_name):
    spec = secured_broker.listeners["SSL"]
    # max_block_ms far above the connection setup timeout: a KafkaTimeoutError would mean
    # the wait ran out instead of the handshake's failure being raised.
    with Producer(bootstrap_servers=spec.bootstrap, security_protocol="SSL",
                  ssl_cafile=str(secured_broker.untrusted_ca_file),
                  max_block_ms=600_000) as producer:
        with pytest.raises(SslAuthenticationError,
                           match=rf"TLS handshake with {spec.bootstrap}: the broker's certificate "
                                 r"did not verify: unable to get local issuer certificate"):
            producer.send(topic_name, b"v").get(600)


def test_host_name_checked_by_default_and_not_when_turned_off(secured_broker, topic_name):
    # "127.1" reaches 127.0.0.1, but the broker's certificate names 127.0.0.1 and
    # localhost, not "127.1".
    port = secured_broker.listeners["SSL"].bootstrap.rsplit(":", 1)[1]
    settings = {"bootstrap_servers": f"127.1:{port}", "security_protocol": "SSL",
                "ssl_cafile": str(secured_broker.ca_file), "max_block_ms": 600_000}
    with Producer(**settings) as producer:
        with pytest.raises(SslAuthenticationError, match=r"127.1:\d+.*Hostname mismatch"):
            producer.send(topic_name, b"v").get(600)
    create_topic(secured_broker.listeners["SSL"].bootstrap, topic_name,
                 client_config=secured_broker.client_config("SSL"))
    with Producer(**settings, ssl_check_hostname=False) as producer:
        producer.send(topic_name, b"unchecked", b"k").get(60)
    [record] = read_topic(secured_broker.listeners["SSL"].bootstrap, topic_name, 1,
                          client_config=secured_broker.client_config("SSL"))
    assert (record.key, record.value) == (b"k", b"unchecked")


def test_perf_tool_takes_java_security_properties(secured_broker, topic_name, tmp_path):
    spec = secured_broker.listeners["MTLS"]
    alice = secured_broker.client_certs["alice"]
    reader_config = secured_broker.client_config("MTLS")
    create_topic(spec.bootstrap, topic_name, client_config=reader_config)
    # A PEM key store is the key and the certificate chain in one file.
    keystore = tmp_path / "alice-keystore.pem"
    keystore.write_bytes(alice.encrypted_key_file.read_bytes() + alice.cert_file.read_bytes())
    properties = tmp_path / "client.properties"
    # Trailing blanks and a lower-case protocol, as Java's client reads them (its
    # ConfigDef trims values; SecurityProtocol.forName ignores case).
    properties.write_text(
        f"bootstrap.servers={spec.bootstrap}\n"
        "security.protocol=ssl \n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={secured_broker.ca_file} \n"
        "ssl.keystore.type=PEM\n"
        f"ssl.keystore.location={keystore}\t\n"
        f"ssl.key.password={alice.key_password} \n"
        "ssl.endpoint.identification.algorithm=https\n")
    done = subprocess.run(
        [sys.executable, "-m", "netkafka.tools.perf", "--topic", topic_name, "--num-records",
         "500", "--record-size", "100", "--throughput", "-1", "--producer.config", properties],
        capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("500 records sent")
    assert len(read_topic(spec.bootstrap, topic_name, 500, client_config=reader_config)) == 500


def test_spark_settings_dict_with_java_tls_names_produces_over_mtls(secured_broker, topic_name):
    from netkafka.spark import producer_settings

    spec = secured_broker.listeners["MTLS"]
    alice = secured_broker.client_certs["alice"]
    reader_config = secured_broker.client_config("MTLS")
    create_topic(spec.bootstrap, topic_name, client_config=reader_config)
    settings = producer_settings({
        "bootstrap.servers": spec.bootstrap, "security.protocol": "SSL",
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(secured_broker.ca_file),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(alice.cert_file),
        "ssl_keyfile": str(alice.key_file), "ssl.endpoint.identification.algorithm": "https"})
    assert settings.kwargs["ssl_cafile"] == str(secured_broker.ca_file)
    with Producer(**settings.kwargs) as producer:
        producer.send(topic_name, b"from spark settings", b"k").get(60)
    [record] = read_topic(spec.bootstrap, topic_name, 1, client_config=reader_config)
    assert (record.key, record.value) == (b"k", b"from spark settings")
