"""netkafka's producer over SASL_PLAINTEXT against the secured test broker.

Every mechanism authenticates for real (PLAIN and SCRAM users of the broker, OAUTHBEARER
tokens from the local OIDC endpoint, checked by the broker against its JWKS); what netkafka
wrote is read back by confluent-kafka, configured on its own from the fixture.  Refusals:
a wrong password, a mechanism the listener does not enable, ACLs denying a topic or the
cluster's IdempotentWrite.  KIP-368: the REAUTH listener grants sessions of REAUTH_MS, so a
producer writing for several of them must re-authenticate without losing a record.  Every mechanism also runs over SASL_SSL (the recipes of the README: Confluent
Cloud's SASL_SSL/PLAIN, MSK's SASL_SSL/SCRAM).
"""
import logging
import socket
import threading
import time

import pytest
from confluent_kafka.admin import AclOperation, ResourceType

from netkafka import Producer, errors
from netkafka.client.connection import ConnectionConfig
from netkafka.client.io_pool import IOPool
from netkafka.client.metadata import request_metadata
from netkafka.client.sasl.oauthbearer import OidcClientCredentialsProvider
from netkafka.testing.admin import create_topic
from netkafka.testing.proxy import TcpProxy
from netkafka.testing.reader import read_topic
from refusals import refused_send
from netkafka.testing.security import (PLAINTEXT_REAUTH_LISTENER, REAUTH_MS, SASL_MECHANISMS, deny,
                                       deny_idempotent_writes, listener_name)

RECORDS = 50
WAIT_S = 30.0
# Re-authentication periods a producer writes through in the KIP-368 test.
REAUTH_PERIODS = 4
# Between two records there: shorter than a Produce request's round trip on loopback.
SEND_PAUSE_S = 0.0002
PLAINTEXT_LISTENER_NAME = "PLAINTEXT"


def sasl_settings(broker, mechanism, user="alice", password=None):
    """netkafka's settings for `user` with `mechanism` (password: a wrong one to try)."""
    if mechanism == "OAUTHBEARER":
        provider = OidcClientCredentialsProvider(broker.oauth.token_url, user,
                                                 broker.oauth.clients[user])
        return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
                "sasl_oauth_token_provider": provider}
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user,
            "sasl_plain_password": password or broker.passwords[mechanism][user]}


def admin_topic(broker, topic):
    create_topic(broker.listeners["PLAINTEXT"].bootstrap, topic, partitions=2)


def send_all(producer, topic, count=RECORDS, prefix=b""):
    """Sends count keyed records; returns their (key, value) after every future succeeded."""
    sent = [(prefix + b"k%d" % i, prefix + b"v%d" % i) for i in range(count)]
    futures = [producer.send(topic, value=value, key=key) for key, value in sent]
    producer.flush(WAIT_S)
    for future in futures:
        future.get(WAIT_S)
    return sent


def read_back(broker, topic, listener, count):
    records = read_topic(broker.listeners[listener].bootstrap, topic, expected_count=count,
                         client_config=broker.client_config(listener, "bob"))
    return sorted((r.key, r.value) for r in records)


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
def test_each_mechanism_produces(secured_broker, topic_name, mechanism, protocol):
    listener = listener_name(protocol, mechanism)
    admin_topic(secured_broker, topic_name)
    tls = {"security_protocol": protocol, "ssl_cafile": str(secured_broker.ca_file)} \
        if protocol == "SASL_SSL" else {}
    producer = Producer(bootstrap_servers=secured_broker.listeners[listener].bootstrap,
                        **{**sasl_settings(secured_broker, mechanism), **tls})
    try:
        sent = send_all(producer, topic_name)
    finally:
        producer.close()
    assert read_back(secured_broker, topic_name, listener, len(sent)) == sorted(sent)


def test_the_oidc_provider_fetches_its_token_from_the_endpoint(secured_broker, topic_name):
    """The built-in client-credentials provider against the local token endpoint: a
    wrong client secret gets no token, and the error names the endpoint and the
    refusal -- at once, as a wrong password: asking again gets the same 401, so it is
    not worth max_block_ms of waiting for metadata."""
    wrong = OidcClientCredentialsProvider(secured_broker.oauth.token_url, "alice", "not-the-secret")
    error = refused_at_once(secured_broker, wrong, topic_name)
    assert secured_broker.oauth.token_url in str(error) and "HTTP 401" in str(error), error


def refused_at_once(secured_broker, provider, topic_name):
    """The OAuthTokenError a send() through `provider` fails with, checked to come well
    within max_block_ms (60 s): a refusal every attempt would meet again."""
    listener = listener_name("SASL_PLAINTEXT", "OAUTHBEARER")
    max_block_ms = 60000
    producer = Producer(bootstrap_servers=secured_broker.listeners[listener].bootstrap,
                        security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                        sasl_oauth_token_provider=provider, max_block_ms=max_block_ms)
    started = time.monotonic()
    error = refused_send(producer, topic_name, errors.OAuthTokenError)
    elapsed_s = time.monotonic() - started
    assert elapsed_s < max_block_ms / 1000 / 2, elapsed_s
    return error


class FlakyProvider:
    """A user's token provider whose identity provider is away for `failures` calls from
    call number `first_failure` on (ConnectionError); the others hand out the OIDC
    endpoint's real tokens."""

    def __init__(self, provider, failures, first_failure=1):
        self._provider = provider
        self.failures = failures
        self.first_failure = first_failure
        self.calls = 0

    def token(self):
        self.calls += 1
        if 0 <= self.calls - self.first_failure < self.failures:
            raise ConnectionError("identity provider unreachable")
        return self._provider.token()


def test_a_token_providers_passing_failure_is_waited_for_not_fatal(secured_broker, topic_name):
    """A user's provider that raises (its own identity provider away for a moment) fails
    no record: the producer tries again, as for an unreachable broker, and every record
    lands once the provider answers (read back by confluent-kafka)."""
    listener = listener_name("SASL_PLAINTEXT", "OAUTHBEARER")
    admin_topic(secured_broker, topic_name)
    flaky = FlakyProvider(OidcClientCredentialsProvider(
        secured_broker.oauth.token_url, "alice", secured_broker.oauth.clients["alice"]), 2)
    producer = Producer(bootstrap_servers=secured_broker.listeners[listener].bootstrap,
                        security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                        sasl_oauth_token_provider=flaky)
    try:
        sent = send_all(producer, topic_name)
    finally:
        producer.close()
    assert flaky.calls > flaky.failures
    assert read_back(secured_broker, topic_name, listener, len(sent)) == sorted(sent)


class StalledProvider(FlakyProvider):
    """A user's token provider whose token() hangs, from call number `first_stall` on,
    until `release` is set (its HTTP call to an identity provider that does not answer,
    made without a timeout)."""

    def __init__(self, provider, release, first_stall=1):
        super().__init__(provider, 0, first_stall)
        self.release = release

    def token(self):
        self.calls += 1
        if self.calls >= self.first_failure:
            self.release.wait(WAIT_S)
        return self._provider.token()


def test_a_hung_token_provider_is_waited_for_again_not_called_at_every_attempt(
        secured_broker, topic_name):
    """Each attempt's setup timeout gives up on the provider's token() but it goes on
    hanging on its thread: the next attempts wait for that call again, rather than each
    leaving one more thread hanging in the provider; its token serves once it comes."""
    listener = listener_name("SASL_PLAINTEXT", "OAUTHBEARER")
    admin_topic(secured_broker, topic_name)
    release = threading.Event()
    provider = StalledProvider(OidcClientCredentialsProvider(
        secured_broker.oauth.token_url, "alice", secured_broker.oauth.clients["alice"]), release)
    producer = Producer(bootstrap_servers=secured_broker.listeners[listener].bootstrap,
                        security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                        sasl_oauth_token_provider=provider, max_block_ms=20000,
                        socket_connection_setup_timeout_ms=300,
                        socket_connection_setup_timeout_max_ms=300,
                        reconnect_backoff_ms=50, reconnect_backoff_max_ms=50)
    calls_while_hung = []

    def release_later():
        calls_while_hung.append(provider.calls)
        release.set()

    # After several setup timeouts and reconnects; send() waits for metadata meanwhile.
    timer = threading.Timer(3, release_later)
    timer.start()
    try:
        producer.send(topic_name, b"after the stall").get(WAIT_S)
    finally:
        timer.cancel()
        release.set()
        producer.close()
    assert calls_while_hung == [1]
    assert [r.value for r in read_topic(
        secured_broker.listeners[listener].bootstrap, topic_name, expected_count=1,
        client_config=secured_broker.client_config(listener, "bob"))] == [b"after the stall"]


class ProviderWithExtensions(FlakyProvider):
    """A user's provider (kafka-python's interface) with SASL extensions, e.g. Confluent
    Cloud's logicalCluster read from an environment variable that is not set."""

    def __init__(self, provider, extensions):
        super().__init__(provider, 0)
        self._extensions = extensions

    def extensions(self):
        return self._extensions


def test_extensions_the_broker_would_refuse_fail_at_once_naming_the_provider(secured_broker,
                                                                              topic_name):
    """As a token that is not one: every reconnect would meet the same refusal, so the
    record fails at once (the Java client refuses such an initial response too), not
    after max_block_ms of waiting for metadata."""
    provider = ProviderWithExtensions(OidcClientCredentialsProvider(
        secured_broker.oauth.token_url, "alice", secured_broker.oauth.clients["alice"]),
        {"logicalCluster": None})
    error = refused_at_once(secured_broker, provider, topic_name)
    assert str(error).startswith(
        "sasl_oauth_token_provider (ProviderWithExtensions).extensions() returned "
        "extensions the broker would refuse: OAUTHBEARER extension 'logicalCluster' has an "
        "invalid value None"), error


def test_a_token_endpoint_that_does_not_answer_is_named_by_the_setup_timeout(secured_broker,
                                                                             topic_name):
    """The endpoint accepts the connection and never answers: the setup timeout fires
    while the token is still being fetched, and says that is what it waited for."""
    listener = listener_name("SASL_PLAINTEXT", "OAUTHBEARER")
    with socket.create_server(("127.0.0.1", 0)) as silent:  # never accepts: no answer
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/token"
        provider = OidcClientCredentialsProvider(url, "alice", "secret", timeout_s=30)
        producer = Producer(bootstrap_servers=secured_broker.listeners[listener].bootstrap,
                            security_protocol="SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER",
                            sasl_oauth_token_provider=provider, max_block_ms=3000,
                            socket_connection_setup_timeout_ms=1000,
                            socket_connection_setup_timeout_max_ms=1000)
        error = refused_send(producer, topic_name, errors.KafkaTimeoutError)
    assert ("authentication (OAUTHBEARER's preparation, its token provider or KDC, had not "
            "finished) did not complete within this attempt's setup timeout") in str(error), error


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_wrong_password_fails_at_once_naming_mechanism_and_broker(secured_broker, topic_name,
                                                                    mechanism):
    listener = secured_broker.listeners[listener_name("SASL_PLAINTEXT", mechanism)]
    admin_topic(secured_broker, topic_name)
    max_block_ms = 60000
    producer = Producer(bootstrap_servers=listener.bootstrap, max_block_ms=max_block_ms,
                        **sasl_settings(secured_broker, mechanism, password="wrong-password"))
    started = time.monotonic()
    error = refused_send(producer, topic_name, errors.AuthenticationError)
    elapsed_s = time.monotonic() - started
    assert isinstance(error, errors.SaslAuthenticationFailedError)
    message = str(error)
    assert mechanism in message and listener.bootstrap in message, message
    # Not the metadata wait running out: the refusal itself, long before max_block_ms.
    assert elapsed_s < max_block_ms / 1000 / 2, elapsed_s
    assert read_back(secured_broker, topic_name, PLAINTEXT_LISTENER_NAME, 0) == []


def test_a_mechanism_the_listener_lacks_is_named_with_the_ones_it_has(secured_broker, topic_name):
    plain_listener = secured_broker.listeners[listener_name("SASL_PLAINTEXT", "PLAIN")]
    producer = Producer(bootstrap_servers=plain_listener.bootstrap,
                        **sasl_settings(secured_broker, "SCRAM-SHA-512"))
    message = str(refused_send(producer, topic_name, errors.UnsupportedSaslMechanismError))
    assert "SCRAM-SHA-512" in message and "offers PLAIN" in message, message


@pytest.mark.parametrize("protocol, listener", [("SASL_PLAINTEXT", "PLAINTEXT"),
                                                ("SASL_SSL", "SSL")])
def test_a_sasl_client_on_a_listener_without_sasl_fails_at_once_naming_the_setting(
        secured_broker, topic_name, protocol, listener):
    """The listener answers SaslHandshake with ILLEGAL_SASL_STATE: the setting is wrong
    for it, and waiting for metadata (max_block_ms) cannot change that."""
    spec = secured_broker.listeners[listener]
    tls = {"ssl_cafile": str(secured_broker.ca_file)} if protocol == "SASL_SSL" else {}
    max_block_ms = 60000
    producer = Producer(bootstrap_servers=spec.bootstrap, max_block_ms=max_block_ms,
                        **{**sasl_settings(secured_broker, "PLAIN"),
                           "security_protocol": protocol, **tls})
    started = time.monotonic()
    error = refused_send(producer, topic_name, errors.AuthenticationError)
    assert isinstance(error, errors.IllegalSaslStateError)
    assert (f"{spec.bootstrap} does not use SASL on this listener: "
            f"security_protocol={protocol!r} must match" in str(error)), error
    assert time.monotonic() - started < max_block_ms / 1000 / 2


def test_a_plaintext_client_on_a_sasl_listener_is_asked_whether_the_protocol_matches(
        secured_broker, topic_name):
    """The listener answers ApiVersions, then closes the connection at the Metadata
    request (not a SaslHandshake).  A close is not proof (brokers stop too), so the
    send still waits for max_block_ms, but its error asks the question."""
    spec = secured_broker.listeners[listener_name("SASL_PLAINTEXT", "PLAIN")]
    producer = Producer(bootstrap_servers=spec.bootstrap, max_block_ms=3000)
    error = refused_send(producer, topic_name, errors.KafkaTimeoutError)
    assert (f"{spec.bootstrap} closed the connection before answering any request after "
            f"ApiVersions (a SASL listener does that: does security_protocol='PLAINTEXT' "
            f"match the listener?)") in str(error), error


@pytest.mark.parametrize("operation", [AclOperation.WRITE, AclOperation.ALL])
def test_a_topic_the_acls_deny_fails_its_records_and_nothing_is_written(
        secured_broker, topic_name, operation):
    """Denied Write: the broker refuses the Produce request; denied everything (Describe
    too): the metadata answer refuses the topic.  Either way the records fail with
    TopicAuthorizationFailedError, and alice, not denied, writes beside bob."""
    listener = listener_name("SASL_PLAINTEXT", "SCRAM-SHA-256")
    bootstrap = secured_broker.listeners[listener].bootstrap
    admin_topic(secured_broker, topic_name)
    with secured_broker.acls(deny("bob", ResourceType.TOPIC, topic_name, operation)):
        bob = Producer(bootstrap_servers=bootstrap, max_block_ms=20000,
                       **sasl_settings(secured_broker, "SCRAM-SHA-256", user="bob"))
        refused_send(bob, topic_name, errors.TopicAuthorizationFailedError)
        alice = Producer(bootstrap_servers=bootstrap,
                         **sasl_settings(secured_broker, "SCRAM-SHA-256"))
        try:
            sent = send_all(alice, topic_name, count=5)
        finally:
            alice.close()
    assert read_back(secured_broker, topic_name, listener, len(sent)) == sorted(sent)


def test_a_denied_idempotent_write_names_the_missing_permission(secured_broker, topic_name):
    listener = listener_name("SASL_PLAINTEXT", "SCRAM-SHA-512")
    admin_topic(secured_broker, topic_name)
    with secured_broker.acls(*deny_idempotent_writes("bob")):
        bob = Producer(bootstrap_servers=secured_broker.listeners[listener].bootstrap,
                       enable_idempotence=True, max_block_ms=20000,
                       **sasl_settings(secured_broker, "SCRAM-SHA-512", user="bob"))
        error = refused_send(bob, topic_name, errors.ClusterAuthorizationFailedError)
    assert "IdempotentWrite" in str(error)
    assert read_back(secured_broker, topic_name, PLAINTEXT_LISTENER_NAME, 0) == []


@pytest.mark.parametrize("operation", [AclOperation.WRITE, AclOperation.DESCRIBE])
def test_a_denied_transactional_id_names_the_missing_permission(secured_broker, topic_name,
                                                                operation):
    """Describe denied: FindCoordinator is refused; Write denied: InitProducerId is.
    Either way the error says what to grant, as for IdempotentWrite."""
    listener = listener_name("SASL_PLAINTEXT", "SCRAM-SHA-256")
    txn_id = f"{topic_name}-txn"
    with secured_broker.acls(deny("bob", ResourceType.TRANSACTIONAL_ID, txn_id, operation)):
        bob = Producer(bootstrap_servers=secured_broker.listeners[listener].bootstrap,
                       transactional_id=txn_id, max_block_ms=20000,
                       **sasl_settings(secured_broker, "SCRAM-SHA-256", user="bob"))
        try:
            with pytest.raises(errors.TransactionalIdAuthorizationFailedError) as refused:
                bob.init_transactions()
        finally:
            bob.close()
    assert (f"this principal needs Write on the TransactionalId resource {txn_id!r}"
            in str(refused.value)), refused.value


def _transactional_bob(secured_broker, topic_name, transaction_version):
    """A transactional producer of user bob (SCRAM) on the topic, which admin creates."""
    listener = listener_name("SASL_PLAINTEXT", "SCRAM-SHA-256")
    admin_topic(secured_broker, topic_name)
    return Producer(bootstrap_servers=secured_broker.listeners[listener].bootstrap,
                    transactional_id=f"{topic_name}-txn", transaction_version=transaction_version,
                    max_block_ms=20000, **sasl_settings(secured_broker, "SCRAM-SHA-256", user="bob"))


@pytest.mark.parametrize("transaction_version", [1, None])
def test_a_topic_the_acls_deny_fails_the_transaction_and_the_next_one_writes_it(
        secured_broker, topic_name, transaction_version):
    """V1: the coordinator refuses to add the denied partition (AddPartitionsToTxn:
    TOPIC_AUTHORIZATION_FAILED); V2: its leader refuses the Produce.  The transaction
    fails (abortable), its batch is thrown away unsent, and once Write is granted the
    next transaction writes the partition."""
    bob = _transactional_bob(secured_broker, topic_name, transaction_version)
    try:
        bob.init_transactions()
        with secured_broker.acls(deny("bob", ResourceType.TOPIC, topic_name, AclOperation.WRITE)):
            bob.begin_transaction()
            refused = bob.send(topic_name, b"refused", partition=0)
            with pytest.raises(errors.TransactionAbortRequiredError) as raised:
                bob.commit_transaction()
            assert isinstance(raised.value.cause, errors.TopicAuthorizationFailedError)
            bob.abort_transaction()
            with pytest.raises(errors.KafkaError):
                refused.get(0)
        bob.begin_transaction()
        allowed = bob.send(topic_name, b"allowed", partition=0)
        bob.commit_transaction()
        assert allowed.get(0).offset >= 0
    finally:
        bob.close()
    committed = read_topic(secured_broker.listeners[PLAINTEXT_LISTENER_NAME].bootstrap,
                           topic_name, 1, isolation_level="read_committed")
    assert [r.value for r in committed] == [b"allowed"]


@pytest.mark.parametrize("transaction_version", [1, None])
def test_offsets_of_a_group_the_acls_deny_fail_the_transaction(secured_broker, topic_name,
                                                               transaction_version):
    """V1: AddOffsetsToTxn is refused; V2: the group coordinator's TxnOffsetCommit (or
    FindCoordinator, Describe being denied with Read) is: GROUP_AUTHORIZATION_FAILED
    either way, and the transaction only aborts; the producer goes on."""
    group = f"{topic_name}-group"
    bob = _transactional_bob(secured_broker, topic_name, transaction_version)
    try:
        bob.init_transactions()
        with secured_broker.acls(deny("bob", ResourceType.GROUP, group, AclOperation.READ)):
            bob.begin_transaction()
            bob.send(topic_name, b"aborted", partition=0)
            with pytest.raises(errors.GroupAuthorizationFailedError):
                bob.send_offsets_to_transaction({(topic_name, 0): 1}, group)
            with pytest.raises(errors.TransactionAbortRequiredError):
                bob.commit_transaction()
            bob.abort_transaction()
        bob.begin_transaction()
        bob.send(topic_name, b"committed", partition=0)
        bob.send_offsets_to_transaction({(topic_name, 0): 1}, group)
        bob.commit_transaction()
    finally:
        bob.close()
    committed = read_topic(secured_broker.listeners[PLAINTEXT_LISTENER_NAME].bootstrap,
                           topic_name, 1, isolation_level="read_committed")
    assert [r.value for r in committed] == [b"committed"]


def in_flight_at_reauthentication(producer):
    """Requests that were in flight when the producer's re-authentications began."""
    return sum(conn.stats()["in_flight_at_reauthentication"]
               for conn in producer._pool.connections())


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
def test_reauthentication_keeps_every_record_in_flight(secured_broker, topic_name, mechanism):
    """The broker grants sessions of REAUTH_MS; a producer writing without pause through
    REAUTH_PERIODS of them re-authenticates each time, with Produce requests in flight
    when it does, and every record is acknowledged and written once.  A record every
    SEND_PAUSE_S, each soon in a Produce request of its own (linger_ms=0), keeps
    several requests out at almost any moment while the volume stays small."""
    admin_topic(secured_broker, topic_name)
    producer = Producer(bootstrap_servers=secured_broker.listeners[PLAINTEXT_REAUTH_LISTENER].bootstrap,
                        **sasl_settings(secured_broker, mechanism))
    futures, sent = [], []
    started = time.monotonic()
    try:
        # REAUTH_PERIODS at least; more (up to 3x) until some exchange has begun with
        # requests in flight, which most do.
        while (time.monotonic() < started + REAUTH_PERIODS * REAUTH_MS / 1000
               or (time.monotonic() < started + 3 * REAUTH_PERIODS * REAUTH_MS / 1000
                   and not in_flight_at_reauthentication(producer))):
            key, value = b"k%d" % len(sent), b"v%d" % len(sent)
            futures.append(producer.send(topic_name, value=value, key=key))
            sent.append((key, value))
            time.sleep(SEND_PAUSE_S)
        producer.flush(WAIT_S)
        for future in futures:
            future.get(WAIT_S)
        stats = [conn.stats() for conn in producer._pool.connections()]
    finally:
        producer.close()
    # 85-95% of each session: at least one less than the periods written through.
    assert sum(s["reauthentications"] for s in stats) >= REAUTH_PERIODS - 1, stats
    # Some exchange began with Produce requests awaiting answers, which all succeeded.
    assert sum(s["in_flight_at_reauthentication"] for s in stats) > 0, stats
    assert read_back(secured_broker, topic_name, PLAINTEXT_LISTENER_NAME, len(sent)) == sorted(sent)


def test_a_token_fetch_failing_at_reauthentication_keeps_the_connection(secured_broker,
                                                                          caplog):
    """The provider fails its second call, the REAUTH listener's first re-authentication:
    the session it would renew is still valid, so the connection stays up and every request
    on it is answered (none failed, none retried on a new connection); the
    re-authentication is tried again, with a warning, and succeeds with the next token."""
    address = secured_broker.listeners[PLAINTEXT_REAUTH_LISTENER].bootstrap
    host, _, port = address.rpartition(":")
    flaky = FlakyProvider(OidcClientCredentialsProvider(
        secured_broker.oauth.token_url, "alice", secured_broker.oauth.clients["alice"]),
        1, first_failure=2)
    pool = IOPool(ConnectionConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_settings={"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": flaky}))
    caplog.set_level(logging.WARNING, "netkafka.client.connection")
    try:
        conn = pool.connection(-1, host, int(port))
        deadline = time.monotonic() + 2 * REAUTH_MS / 1000
        while time.monotonic() < deadline:
            # A few at once: requests in flight when the token fetch fails.
            answers = [request_metadata(conn, []) for _ in range(3)]
            for answer in answers:
                assert answer.result(WAIT_S).brokers
        stats = conn.stats()
    finally:
        pool.close()
    assert flaky.calls >= 3, flaky.calls
    assert stats["connections_ready"] == 1 and stats["reauthentications"] >= 1, stats
    assert any("re-authentication" in r.getMessage() and "identity provider unreachable"
               in r.getMessage() for r in caplog.records), caplog.text


def test_a_token_provider_hanging_at_reauthentication_ends_the_connection_with_the_session(
        secured_broker):
    """The provider hangs from its second call, the REAUTH listener's first
    re-authentication: the connection gave up on nothing, and stayed READY on a session
    the broker had ended, until the broker closed it under the next request.  Now the
    wait ends with the session, failing the connection with an error naming the
    preparation."""
    address = secured_broker.listeners[PLAINTEXT_REAUTH_LISTENER].bootstrap
    host, _, port = address.rpartition(":")
    release = threading.Event()
    stalled = StalledProvider(OidcClientCredentialsProvider(
        secured_broker.oauth.token_url, "alice", secured_broker.oauth.clients["alice"]),
        release, first_stall=2)
    pool = IOPool(ConnectionConfig(
        security_protocol="SASL_PLAINTEXT",
        sasl_settings={"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": stalled}))
    try:
        conn = pool.connection(-1, host, int(port))
        assert request_metadata(conn, []).result(WAIT_S).brokers
        ready_s = time.monotonic()
        while conn.state == "ready" and time.monotonic() < ready_s + 3 * REAUTH_MS / 1000:
            time.sleep(0.02)
        ended_after_s = time.monotonic() - ready_s
        described = conn.describe()
    finally:
        release.set()
        pool.close()
    assert stalled.calls == 2, stalled.calls
    assert ended_after_s < REAUTH_MS / 1000 + 1, (ended_after_s, described)
    assert "re-authentication's OAUTHBEARER preparation (its token provider or KDC) did not " \
           "finish" in described, described


def _reauth_producer(secured_broker, topic_name, mechanism, user, password, **settings):
    """A producer of a new SCRAM user on the REAUTH listener (its sessions end: KIP-368),
    the topic created by admin."""
    admin_topic(secured_broker, topic_name)
    secured_broker.set_scram_password(user, mechanism, password)
    return Producer(bootstrap_servers=secured_broker.listeners[PLAINTEXT_REAUTH_LISTENER].bootstrap,
                    security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                    sasl_plain_username=user, sasl_plain_password=password, **settings)


def test_records_queued_when_a_reconnect_is_refused_fail_with_the_authentication_error(
        secured_broker, topic_name):
    """A user deleted while its producer is connected: once its session ends (the REAUTH
    listener's KIP-368 lifetime), the re-authentication and every reconnect are refused.
    A record sent then is queued for the leader the metadata cache still names; it fails
    with the broker's refusal at the next refused reconnect, not at delivery_timeout_ms
    (which would fail it with a timeout error instead)."""
    mechanism = "SCRAM-SHA-512"
    user, password = f"dropped-{topic_name[-8:]}", "first-password"
    producer = _reauth_producer(secured_broker, topic_name, mechanism, user, password,
                                delivery_timeout_ms=120000)
    try:
        first = producer.send(topic_name, key=b"k", value=b"before").get(WAIT_S)
        secured_broker.delete_scram_user(user, mechanism, password)
        deadline = time.monotonic() + WAIT_S
        # The session ends within REAUTH_MS; its re-authentication is refused.
        while any(conn.state == "ready" for conn in producer._pool.connections()):
            assert time.monotonic() < deadline, "the producer's connection stayed ready"
            time.sleep(0.05)
        future = producer.send(topic_name, key=b"k", value=b"after")
        with pytest.raises(errors.AuthenticationError) as refused:
            future.get(WAIT_S)
    finally:
        producer.close()
    assert isinstance(refused.value, errors.SaslAuthenticationFailedError), refused.value
    assert mechanism in str(refused.value), refused.value
    records = read_back(secured_broker, topic_name, PLAINTEXT_LISTENER_NAME, 1)
    assert records == [(b"k", b"before")] and first.offset == 0


# A period with nothing sent: before, a refused producer logged in again at every
# reconnect backoff (REFUSED_BACKOFF_MAX_MS here) for as long as it lived.
IDLE_S = 2.0
REFUSED_BACKOFF_MAX_MS = 100


def test_a_refused_login_is_tried_again_only_when_a_send_needs_it(secured_broker, topic_name):
    """A user the broker does not know yet: its producer's metadata refreshes logged in
    again every reconnect backoff, sent records or not (its topic stays in metadata),
    each a failed login an account lockout counts.  Now a refusal is tried again only
    when a send needs metadata -- each such send failing at once with the refusal --,
    no sooner than the reconnect backoff; and once the user exists, a send logs in."""
    mechanism = "SCRAM-SHA-256"
    user, password = f"late-{topic_name[-8:]}", "its-password"
    listener = secured_broker.listeners[listener_name("SASL_PLAINTEXT", mechanism)]
    admin_topic(secured_broker, topic_name)
    # Every connection the producer makes passes the proxy: each is one login.
    with TcpProxy(int(listener.bootstrap.rsplit(":", 1)[1])) as proxy:
        producer = Producer(bootstrap_servers=proxy.address, security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism=mechanism, sasl_plain_username=user,
                            sasl_plain_password=password,
                            reconnect_backoff_max_ms=REFUSED_BACKOFF_MAX_MS)
        try:
            with pytest.raises(errors.SaslAuthenticationFailedError):
                producer.send(topic_name, b"refused").get(WAIT_S)
            logins = proxy.accepted
            time.sleep(IDLE_S)
            idle_logins = proxy.accepted - logins
            # Sent meanwhile: refused at once, naming the mechanism and the broker.
            for _ in range(3):
                with pytest.raises(errors.SaslAuthenticationFailedError) as refused:
                    producer.send(topic_name, b"refused").get(WAIT_S)
                assert mechanism in str(refused.value) and proxy.address in str(refused.value)
            secured_broker.set_scram_password(user, mechanism, password)
            for _ in range(200):
                try:
                    metadata = producer.send(topic_name, b"accepted").get(WAIT_S)
                    break
                except errors.SaslAuthenticationFailedError:
                    time.sleep(0.05)
            else:
                pytest.fail("the producer never logged in once the user existed")
        finally:
            producer.close()
    assert idle_logins == 0 and logins >= 1, (logins, idle_logins)
    assert metadata.offset == 0


def test_a_refused_reconnect_to_a_known_broker_is_not_tried_again_while_nothing_needs_it(
        secured_broker, topic_name):
    """A user deleted while its producer is connected (the REAUTH listener ends its
    session): every reconnect is refused.  Each refused connection asked for a metadata
    refresh, whose request reconnected and was refused in turn, for as long as the
    producer lived.  Now nothing is tried while nothing is sent."""
    mechanism = "SCRAM-SHA-512"
    user, password = f"gone-{topic_name[-8:]}", "first-password"
    producer = _reauth_producer(secured_broker, topic_name, mechanism, user, password,
                                reconnect_backoff_max_ms=REFUSED_BACKOFF_MAX_MS)

    def attempts():
        return sum(conn.stats()["connect_attempts"] for conn in producer._pool.connections())

    try:
        producer.send(topic_name, b"before").get(WAIT_S)
        secured_broker.delete_scram_user(user, mechanism, password)
        deadline = time.monotonic() + WAIT_S
        while any(conn.state == "ready" for conn in producer._pool.connections()):
            assert time.monotonic() < deadline, "the producer's connection stayed ready"
            time.sleep(0.05)
        with pytest.raises(errors.SaslAuthenticationFailedError):
            producer.send(topic_name, b"refused").get(WAIT_S)
        refused_attempts = attempts()
        time.sleep(IDLE_S)
        idle_attempts = attempts() - refused_attempts
    finally:
        producer.close()
    assert idle_attempts == 0, idle_attempts


def test_connection_settings_check_sasl_and_keep_the_password_out_of_repr():
    settings = {"sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
                "sasl_plain_password": "s3cret-pw"}
    config = ConnectionConfig(security_protocol="SASL_PLAINTEXT", sasl_settings=settings)
    assert config.uses_sasl and "s3cret-pw" not in repr(config)
    assert not ConnectionConfig().uses_sasl
    with pytest.raises(errors.SaslConfigError, match="needs sasl_plain_password"):
        ConnectionConfig(security_protocol="SASL_PLAINTEXT",
                         sasl_settings={"sasl_mechanism": "PLAIN", "sasl_plain_username": "alice"})
    with pytest.raises(ValueError, match="needs sasl_settings"):
        ConnectionConfig(security_protocol="SASL_PLAINTEXT")
    with pytest.raises(ValueError, match="needs no sasl_settings"):
        ConnectionConfig(sasl_settings=settings)
