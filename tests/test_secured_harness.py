"""The secured test broker itself: every listener, the credentials it takes and refuses, ACLs.

These prove the harness that netkafka's TLS and SASL tests stand on; they check nothing of
netkafka.  Every client here is confluent-kafka (librdkafka), configured on its own from the
fixture's files and credentials.  One broker serves the whole file.
"""
import base64
import json
import logging
import ssl
import time
import urllib.error
import urllib.request

import jwt
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import ResourceType
from cryptography import x509
from cryptography.x509.oid import NameOID

from netkafka.testing.admin import admin_client, create_topic
from netkafka.testing.oauth import OAuthServer
from netkafka.testing.reader import read_topic
from netkafka.testing.security import (ADMIN_USER, LISTENERS, REAUTH_LISTENER, REAUTH_MS, binding_filter,
                                       deny, deny_idempotent_writes)
from netkafka.testing.tls import make_tls_files

RECORDS = 30
WAIT_S = 30.0
# librdkafka gives up on a record after this long; refused requests fail well before.
MESSAGE_TIMEOUT_MS = 10_000

# (listener, mechanism to pick on a multi-mechanism listener, encrypted client key).
ROUND_TRIPS = [pytest.param(spec.name, None, False, id=spec.name)
               for spec in LISTENERS if len(spec.sasl_mechanisms) <= 1]
ROUND_TRIPS += [pytest.param(spec.name, mechanism, False, id=f"{spec.name}-{mechanism}")
                for spec in LISTENERS if len(spec.sasl_mechanisms) > 1 for mechanism in spec.sasl_mechanisms]
ROUND_TRIPS.append(pytest.param("MTLS", None, True, id="MTLS-encrypted-key"))
IDENTIFIED_LISTENERS = [spec.name for spec in LISTENERS if spec.authenticates and len(spec.sasl_mechanisms) <= 1]
PASSWORD_LISTENERS = [spec.name for spec in LISTENERS
                      if spec.sasl_mechanism is not None and spec.sasl_mechanism != "OAUTHBEARER"]


def produce(config: dict, topic: str, count: int = RECORDS, prefix: bytes = b"") -> list[tuple]:
    """Write count keyed records with confluent-kafka; return (key, value) of each, or raise
    the first delivery error."""
    producer = Producer({**config, "linger.ms": 5, "message.timeout.ms": MESSAGE_TIMEOUT_MS})
    errors = []
    sent = [(prefix + f"k{i}".encode(), prefix + f"v{i}".encode()) for i in range(count)]
    for key, value in sent:
        producer.produce(topic, value, key, on_delivery=lambda error, _: error and errors.append(error))
    assert producer.flush(WAIT_S) == 0
    if errors:
        raise AssertionError(errors[0])
    return sent


def delivery_error(config: dict, topic: str) -> KafkaError:
    """The error confluent-kafka's delivery report gives one record (which must fail)."""
    producer = Producer({**config, "message.timeout.ms": MESSAGE_TIMEOUT_MS})
    reports = []
    producer.produce(topic, b"refused?", on_delivery=lambda error, _: reports.append(error))
    assert producer.flush(WAIT_S) == 0
    [error] = reports
    assert error is not None, f"the record was written to {topic}"
    return error


def connection_error(config: dict, timeout_s: float = WAIT_S) -> KafkaError:
    """The first error a client meets while connecting (which must fail).

    "All brokers down" is left out: it follows the error that closed the connection, and the
    two may reach error_cb in either order.
    """
    errors = []
    producer = Producer({**config, "error_cb": lambda error: error.code() != KafkaError._ALL_BROKERS_DOWN
                         and errors.append(error)})
    deadline = time.monotonic() + timeout_s
    while not errors:
        assert time.monotonic() < deadline, f"no error within {timeout_s} s"
        try:
            producer.poll(0.1)
        except KafkaException as exc:  # a fatal error is raised, not handed to error_cb
            return exc.args[0]
    return errors[0]


def written(records) -> list[tuple]:
    return [(record.key, record.value) for record in records]


# -- every listener takes its own clients ------------------------------------------------------


@pytest.mark.parametrize("listener, mechanism, encrypted_key", ROUND_TRIPS)
def test_round_trip_on_every_listener(secured_broker, topic_name, listener, mechanism, encrypted_key):
    bootstrap = secured_broker.listeners[listener].bootstrap
    tokens_before = secured_broker.oauth.token_requests("alice")
    admin_config = secured_broker.client_config(listener, "alice", sasl_mechanism=mechanism)
    create_topic(bootstrap, topic_name, partitions=2, client_config=admin_config)

    producer_config = secured_broker.client_config(listener, "alice", sasl_mechanism=mechanism,
                                                   encrypted_key=encrypted_key)
    sent = produce(producer_config, topic_name)
    consumer_config = secured_broker.client_config(listener, "alice", sasl_mechanism=mechanism,
                                                   encrypted_key=encrypted_key)
    records = read_topic(bootstrap, topic_name, expected_count=len(sent), client_config=consumer_config)

    assert sorted(written(records)) == sorted(sent)
    if (mechanism or secured_broker.listeners[listener].sasl_mechanism) == "OAUTHBEARER":
        # librdkafka's OIDC client took its tokens from the test's token endpoint.
        assert secured_broker.oauth.token_requests("alice") > tokens_before


def test_listener_settings_name_what_each_listener_needs(secured_broker):
    assert set(secured_broker.listeners) == {spec.name for spec in LISTENERS}
    assert secured_broker.listener("SASL_SSL", "SCRAM-SHA-512").name == "SASL_SSL_SCRAM_SHA_512"
    assert secured_broker.listener("SSL").bootstrap.startswith("127.0.0.1:")
    ports = {spec.bootstrap for spec in secured_broker.listeners.values()}
    assert len(ports) == len(LISTENERS)
    mtls = secured_broker.client_config("MTLS", "bob", encrypted_key=True)
    assert mtls["ssl.key.location"] == str(secured_broker.client_certs["bob"].encrypted_key_file)
    assert mtls["ssl.key.password"] == secured_broker.client_certs["bob"].key_password
    with pytest.raises(ValueError, match="sasl_mechanism"):
        secured_broker.client_config(REAUTH_LISTENER, "alice")
    with pytest.raises(KeyError, match="no user"):
        secured_broker.client_config("SSL", "mallory")
    with pytest.raises(KeyError, match="no listener"):
        secured_broker.listener("SASL_SSL", "GSSAPI")


# -- what the listeners refuse -----------------------------------------------------------------


@pytest.mark.parametrize("listener", PASSWORD_LISTENERS)
def test_a_wrong_password_is_refused(secured_broker, listener):
    config = {**secured_broker.client_config(listener, "alice"), "sasl.password": "not-the-password"}
    error = connection_error(config)
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "Authentication failed" in error.str()


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT_SCRAM_SHA_256", "SASL_SSL_PLAIN"])
def test_an_unknown_user_and_another_mechanism_are_refused(secured_broker, listener):
    unknown = {**secured_broker.client_config(listener, "alice"), "sasl.username": "mallory"}
    assert connection_error(unknown).code() == KafkaError._AUTHENTICATION
    # Each listener takes only its own mechanism.
    other = "SCRAM-SHA-512" if listener.endswith("PLAIN") else "PLAIN"
    error = connection_error({**secured_broker.client_config(listener, "alice"), "sasl.mechanism": other})
    assert error.code() == KafkaError._AUTHENTICATION and "Unsupported SASL mechanism" in error.str()


def test_a_wrong_client_secret_gets_no_token(secured_broker):
    config = {**secured_broker.client_config("SASL_SSL_OAUTHBEARER", "alice"),
              "sasl.oauthbearer.client.secret": "not-the-secret"}
    error = connection_error(config)
    assert error.code() == KafkaError._AUTHENTICATION
    assert "invalid_client" in error.str()


@pytest.mark.parametrize("token_kind", ["valid", "forged", "expired", "other-audience", "other-issuer"])
def test_the_broker_checks_each_token_against_the_jwks(secured_broker, topic_name, token_kind):
    """A token handed over by the client's own callback: the broker alone judges it."""
    oauth = secured_broker.oauth
    token = {
        "valid": lambda: oauth.issue_token("alice"),
        "forged": lambda: oauth.issue_token("alice", forged=True),
        "expired": lambda: oauth.issue_token("alice", lifetime_s=-120),
        "other-audience": lambda: oauth.issue_token("alice", aud="another-cluster"),
        "other-issuer": lambda: oauth.issue_token("alice", iss="http://127.0.0.1:1"),
    }[token_kind]()
    listener = secured_broker.listeners["SASL_PLAINTEXT_OAUTHBEARER"]
    config = {"bootstrap.servers": listener.bootstrap, "security.protocol": listener.security_protocol,
              "sasl.mechanism": "OAUTHBEARER",
              # librdkafka asks for a token and its expiry (s); the broker's rules decide.
              "oauth_cb": lambda _config: (token, time.time() + 3600)}
    if token_kind == "valid":
        create_topic(listener.bootstrap, topic_name, client_config=config)
        assert produce(config, topic_name, count=1)
    else:
        error = connection_error(config)
        assert error.code() == KafkaError._AUTHENTICATION and "invalid_token" in error.str()


def test_mtls_requires_a_client_certificate(secured_broker):
    config = secured_broker.client_config("MTLS", "alice")
    del config["ssl.certificate.location"], config["ssl.key.location"]
    error = connection_error(config)
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT)
    assert "certificate" in error.str()


def test_a_client_trusting_another_ca_refuses_the_broker(secured_broker):
    config = {**secured_broker.client_config("SSL"), "ssl.ca.location": str(secured_broker.untrusted_ca_file)}
    error = connection_error(config)
    # librdkafka names a failed handshake _SSL or, under load, _TRANSPORT (seen in a CI run).
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT)
    assert "certificate verify failed" in error.str()


# -- ACLs --------------------------------------------------------------------------------------


def test_an_acl_denies_a_topic_to_one_user_on_every_listener(secured_broker, topic_name):
    """bob is denied; alice, under the same grants, is not: each listener names its clients."""
    create_topic(secured_broker.listeners["PLAINTEXT"].bootstrap, topic_name)
    expected = []
    with secured_broker.acls(deny("bob", ResourceType.TOPIC, topic_name)):
        for listener in IDENTIFIED_LISTENERS:
            error = delivery_error(secured_broker.client_config(listener, "bob"), topic_name)
            assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, (listener, error)
            expected += produce(secured_broker.client_config(listener, "alice"), topic_name, count=2,
                                prefix=listener.encode())
    # Nothing of bob's was written; once the ACL is gone he may write again.
    expected += produce(secured_broker.client_config("SASL_SSL_SCRAM_SHA_256", "bob"), topic_name, count=1,
                        prefix=b"bob")
    records = read_topic(secured_broker.listeners["PLAINTEXT"].bootstrap, topic_name,
                         expected_count=len(expected))
    assert sorted(written(records)) == sorted(expected)


def test_acls_deny_idempotent_writes_to_one_user(secured_broker, topic_name):
    create_topic(secured_broker.listeners["PLAINTEXT"].bootstrap, topic_name)
    idempotent = {"enable.idempotence": True}
    with secured_broker.acls(*deny_idempotent_writes("bob")):
        bob = {**secured_broker.client_config("SASL_SSL_SCRAM_SHA_512", "bob"), **idempotent}
        error = connection_error(bob)
        assert error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, error
        assert error.fatal()
        alice = {**secured_broker.client_config("SASL_SSL_SCRAM_SHA_512", "alice"), **idempotent}
        assert produce(alice, topic_name, count=3)


def test_only_super_users_change_acls(secured_broker, topic_name):
    binding = deny("bob", ResourceType.TOPIC, topic_name)
    listener = "SASL_SSL_SCRAM_SHA_256"
    alice = admin_client(secured_broker.listeners[listener].bootstrap,
                         secured_broker.client_config(listener, "alice"))
    with pytest.raises(KafkaException) as refused:
        alice.create_acls([binding])[binding].result()
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    admin = admin_client(secured_broker.listeners[listener].bootstrap,
                         secured_broker.client_config(listener, ADMIN_USER))
    admin.create_acls([binding])[binding].result()
    [deleted] = admin.delete_acls([binding_filter(binding)])[binding_filter(binding)].result()
    assert deleted == binding


# -- re-authentication -------------------------------------------------------------------------


def test_the_reauth_listener_makes_clients_authenticate_again(secured_broker, topic_name):
    """The broker hands out a session lifetime of REAUTH_MS and librdkafka re-authenticates
    (KIP-368) with every mechanism; records sent across the renewal are all written."""
    create_topic(secured_broker.listeners["PLAINTEXT"].bootstrap, topic_name)
    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.Logger("reauth", logging.DEBUG)
    logger.addHandler(Collect())
    spec = secured_broker.listeners[REAUTH_LISTENER]
    producers = {mechanism: Producer({**secured_broker.client_config(REAUTH_LISTENER, "alice", sasl_mechanism=mechanism),
                                      "debug": "security", "logger": logger,
                                      "client.id": f"reauth-{mechanism}"})
                 for mechanism in spec.sasl_mechanisms}
    expected = []
    for round_ in ("before", "after"):
        if round_ == "after":
            # Past the session lifetime: a connection not re-authenticated is closed by now.
            time.sleep(REAUTH_MS / 1000 * 1.2)
        for mechanism, producer in producers.items():
            value = f"{mechanism}-{round_}".encode()
            producer.produce(topic_name, value)
            expected.append(value)
        for producer in producers.values():
            assert producer.flush(WAIT_S) == 0

    assert any(f"Received session lifetime {REAUTH_MS} ms" in line for line in lines)
    for mechanism in spec.sasl_mechanisms:
        assert any(f"reauth-{mechanism}" in line and "Auth in state REAUTH" in line for line in lines), mechanism
    records = read_topic(spec.bootstrap, topic_name, expected_count=len(expected),
                         client_config=secured_broker.client_config(REAUTH_LISTENER, "bob", sasl_mechanism="PLAIN"))
    assert sorted(record.value for record in records) == sorted(expected)


# -- the certificates and the OAuth server, without a broker -----------------------------------


def test_tls_files_hold_what_clients_and_broker_need(tmp_path):
    files = make_tls_files(tmp_path, ["alice"])
    alice = files.clients["alice"]
    cert = x509.load_pem_x509_certificate(alice.cert_file.read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    context = ssl.create_default_context(cafile=str(files.ca_file))
    context.load_cert_chain(alice.cert_file, alice.encrypted_key_file, password=alice.key_password)
    with pytest.raises(ssl.SSLError):
        context.load_cert_chain(alice.cert_file, alice.encrypted_key_file, password="wrong")
    assert alice.key_file.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert alice.encrypted_key_file.read_bytes().startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert alice.key_file.stat().st_mode & 0o077 == 0
    keystore = files.broker_keystore_file.read_bytes()
    assert keystore.startswith(b"-----BEGIN PRIVATE KEY-----") and b"-----BEGIN CERTIFICATE-----" in keystore
    assert files.untrusted_ca_file.read_bytes() != files.ca_file.read_bytes()


def token_request(server: OAuthServer, body: bytes, headers: dict) -> tuple[int, dict]:
    request = urllib.request.Request(server.token_url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def basic(client_id: str, secret: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()}


def test_oauth_server_hands_out_tokens_its_jwks_verifies():
    with OAuthServer({"alice": "s3cret", "bob": "other"}, "aud-1", token_lifetime_s=120) as server:
        status, answer = token_request(server, b"grant_type=client_credentials&scope=write+read",
                                       basic("alice", "s3cret"))
        assert status == 200 and answer["token_type"] == "Bearer" and answer["expires_in"] == 120
        key = jwt.PyJWKClient(server.jwks_url).get_signing_key_from_jwt(answer["access_token"])
        claims = jwt.decode(answer["access_token"], key.key, algorithms=["RS256"], audience="aud-1",
                            issuer=server.issuer)
        assert claims["sub"] == "alice" and claims["scope"] == "write read"
        assert claims["exp"] - claims["iat"] == 120

        # client_secret_post works too; every token is counted per client.
        status, answer = token_request(server, b"grant_type=client_credentials&client_id=bob&client_secret=other", {})
        assert status == 200
        assert server.token_requests("alice") == 1 and server.token_requests("bob") == 1
        assert server.jwks_requests == 1

        forged = server.issue_token("alice", forged=True)
        with pytest.raises(jwt.InvalidSignatureError):
            jwt.decode(forged, key.key, algorithms=["RS256"], audience="aud-1")

        for body, headers, status_wanted, error in [
            (b"grant_type=client_credentials", basic("alice", "wrong"), 401, "invalid_client"),
            (b"grant_type=client_credentials", basic("mallory", "s3cret"), 401, "invalid_client"),
            (b"grant_type=client_credentials", {}, 401, "invalid_client"),
            (b"grant_type=password&username=alice", basic("alice", "s3cret"), 400, "unsupported_grant_type"),
            (b"\xff\xfe", basic("alice", "s3cret"), 400, "invalid_request"),
        ]:
            status, answer = token_request(server, body, headers)
            assert (status, answer["error"]) == (status_wanted, error), body
        assert server.token_requests("alice") == 1
