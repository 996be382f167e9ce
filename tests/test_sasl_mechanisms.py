"""The SASL mechanisms of netkafka.client.sasl, each against a real counterpart.

SCRAM runs against scramp's server side, the OIDC provider against an HTTP token
endpoint on 127.0.0.1 served by the test, MSK IAM through AWS's own signer with static
credentials (no network).  The OAUTHBEARER message is checked with the broker's own
grammar, written out here from Kafka's OAuthBearerClientInitialResponse.  Exchanges with
a real broker come with the connection states (issue 13), not here.
"""
import base64
import http.server
import json
import logging
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

import botocore.credentials as botocore_credentials
import pytest
import scramp

from netkafka.client import sasl
from netkafka.client.sasl import jaas, msk_iam, oauthbearer, scram
from netkafka.errors import (JaasConfigError, OAuthTokenError, SaslAuthenticationFailedError,
                             SaslConfigError, SaslLibraryMissingError, refuses_credentials)
from netkafka.testing.oauth import OAuthServer
from netkafka.testing.tls import make_tls_files

PLAIN_SETTINGS = {"sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                  "sasl_plain_password": "alice-secret"}


def scram_settings(mechanism, username="alice", password="alice-secret"):
    return {"sasl_mechanism": mechanism, "sasl_plain_username": username,
            "sasl_plain_password": password}


# --- the registry and the settings check


def test_the_registry_holds_each_mechanism_under_its_handshake_name():
    assert sasl.mechanism_names() == [
        "GSSAPI", "OAUTHBEARER", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    for name in sasl.mechanism_names():
        assert sasl.mechanism_class(name).name == name


def test_create_mechanism_builds_the_configured_one():
    mechanism = sasl.create_mechanism(scram_settings("SCRAM-SHA-512"), "broker1")
    assert isinstance(mechanism, scram.ScramSha512Mechanism)
    assert not mechanism.is_complete


def test_an_unknown_mechanism_is_refused_naming_the_setting_and_the_known_ones():
    with pytest.raises(SaslConfigError, match=r"sasl_mechanism='DIGEST-MD5'.*known: GSSAPI, "
                                              r"OAUTHBEARER, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"):
        sasl.check_sasl_settings({"sasl_mechanism": "DIGEST-MD5"}, "SASL_SSL")
    with pytest.raises(SaslConfigError, match=r"upper case: 'SCRAM-SHA-256'"):
        sasl.check_sasl_settings(scram_settings("scram-sha-256"), "SASL_SSL")
    with pytest.raises(SaslConfigError, match=r"MSK IAM use sasl_mechanism='OAUTHBEARER'"):
        sasl.check_sasl_settings({"sasl_mechanism": "AWS_MSK_IAM"}, "SASL_SSL")


def test_a_sasl_protocol_needs_a_mechanism():
    with pytest.raises(SaslConfigError, match=r"security_protocol='SASL_PLAINTEXT' needs "
                                              r"sasl_mechanism"):
        sasl.check_sasl_settings({}, "SASL_PLAINTEXT")


def test_sasl_settings_without_a_sasl_protocol_are_refused_not_ignored():
    with pytest.raises(SaslConfigError, match=r"sasl_plain_username is set but "
                                              r"security_protocol='SSL' does not use SASL"):
        sasl.check_sasl_settings({"sasl_plain_username": "alice"}, "SSL")
    with pytest.raises(SaslConfigError, match=r"security_protocol='SASL'"):
        sasl.check_sasl_settings({}, "SASL")
    # Defaults are not "set": kafka-python's default service name passes.
    sasl.check_sasl_settings({"sasl_kerberos_service_name": "kafka"}, "PLAINTEXT")


class _Provider:
    def token(self):
        return "t"


@pytest.mark.parametrize("mechanism, stray", [
    ("PLAIN", {"sasl_oauth_token_provider": _Provider()}),
    ("SCRAM-SHA-256", {"sasl_kerberos_service_name": "kafka-prod"}),
    ("SCRAM-SHA-512", {"sasl_kerberos_name": "kafka@broker1"}),
    ("OAUTHBEARER", {"sasl_plain_username": "alice"}),
])
def test_another_mechanisms_settings_are_refused_not_ignored(mechanism, stray):
    """A setting the chosen mechanism does not read would be silently ignored (and the
    user's credentials not be the ones sent): refused, naming it and the mechanism."""
    own = ({"sasl_oauth_token_provider": _Provider()} if mechanism == "OAUTHBEARER"
           else scram_settings(mechanism))
    settings = {**own, "sasl_mechanism": mechanism}
    sasl.check_sasl_settings(settings, "SASL_SSL")
    (name,) = stray
    with pytest.raises(SaslConfigError, match=rf"{name} is set but sasl_mechanism="
                                              rf"'{mechanism}' does not use it"):
        sasl.check_sasl_settings({**settings, **stray}, "SASL_SSL")
    # Defaults are not "set": kafka-python's default service name passes.
    sasl.check_sasl_settings({**settings, "sasl_kerberos_service_name": "kafka"}, "SASL_SSL")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_password_mechanisms_need_both_credentials(mechanism):
    settings = scram_settings(mechanism)
    sasl.check_sasl_settings(settings, "SASL_SSL")
    with pytest.raises(SaslConfigError, match=rf"sasl_mechanism='{mechanism}' needs "
                                              r"sasl_plain_password"):
        sasl.check_sasl_settings({**settings, "sasl_plain_password": None}, "SASL_SSL")
    with pytest.raises(SaslConfigError, match=r"sasl_plain_username must be a non-empty str "
                                              r".* not an empty str"):
        sasl.check_sasl_settings({**settings, "sasl_plain_username": ""}, "SASL_SSL")
    with pytest.raises(SaslConfigError, match=r"sasl_plain_password must be a non-empty str "
                                              r".* not a bytes"):
        sasl.check_sasl_settings({**settings, "sasl_plain_password": b"secret"}, "SASL_SSL")


def test_reauthentication_comes_at_85_to_95_percent_of_the_session():
    mechanism = sasl.create_mechanism(PLAIN_SETTINGS, "broker1")
    assert mechanism.reauthenticate_after_ms(0) is None
    assert mechanism.reauthenticate_after_ms(100_000, jitter=lambda: 0.0) == 85_000
    assert mechanism.reauthenticate_after_ms(100_000, jitter=lambda: 0.5) == 90_000
    assert 94_000 < mechanism.reauthenticate_after_ms(100_000, jitter=lambda: 0.9999) <= 95_000


def test_registering_a_taken_name_is_refused():
    with pytest.raises(ValueError, match=r"'PLAIN' is already registered"):
        sasl.register_mechanism(type(sasl.create_mechanism(PLAIN_SETTINGS, "h")))
    with pytest.raises(ValueError, match=r"not a SaslMechanism subclass"):
        sasl.register_mechanism(dict)


# --- PLAIN


def test_plain_sends_authzid_username_and_password_separated_by_nul():
    mechanism = sasl.create_mechanism(
        {**PLAIN_SETTINGS, "sasl_plain_password": "pässwörd"}, "broker1")
    assert mechanism.initial_response() == b"alice\0alice\0p\xc3\xa4ssw\xc3\xb6rd"
    assert mechanism.evaluate(b"") is None
    assert mechanism.is_complete


def test_plain_refuses_a_server_message_and_a_nul_in_a_credential():
    mechanism = sasl.create_mechanism(PLAIN_SETTINGS, "broker1")
    mechanism.initial_response()
    with pytest.raises(SaslAuthenticationFailedError, match=r"PLAIN has no server message"):
        mechanism.evaluate(b"unexpected")
    assert not mechanism.is_complete
    with pytest.raises(SaslConfigError, match=r"sasl_plain_password must not contain a NUL"):
        sasl.check_sasl_settings({**PLAIN_SETTINGS, "sasl_plain_password": "a\0b"}, "SASL_SSL")


# --- SCRAM, against scramp's server side


def scram_server(mechanism, username, password, iterations=4096):
    """A scramp server that knows ``username`` with ``password``."""
    server_mechanism = scramp.ScramMechanism(mechanism)
    auth_info = server_mechanism.make_auth_info(password, iteration_count=iterations)
    return server_mechanism.make_server(lambda name: auth_info if name == username else None)


def scram_exchange(mechanism, server, tamper_server_final=None):
    """Drive ``mechanism`` against ``server`` as the connection drives it against a
    broker; returns what the last evaluate() returned."""
    server.set_client_first(mechanism.initial_response().decode())
    client_final = mechanism.evaluate(server.get_server_first().encode())
    try:
        server.set_client_final(client_final.decode())
    except scramp.ScramException:
        pass  # the server's refusal travels in its final message, as e=...
    server_final = server.get_server_final()
    if tamper_server_final is not None:
        server_final = tamper_server_final(server_final)
    return mechanism.evaluate(server_final.encode())


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_completes_a_full_exchange_with_scramps_server(name):
    mechanism = sasl.create_mechanism(scram_settings(name), "broker1")
    server = scram_server(name, "alice", "alice-secret")
    assert mechanism.initial_response().startswith(b"n,,n=alice,r=")
    assert scram_exchange(mechanism, server) is None
    assert mechanism.is_complete


def test_scram_escapes_comma_and_equals_in_the_username():
    username = "team=a,user"
    mechanism = sasl.create_mechanism(scram_settings("SCRAM-SHA-256", username), "broker1")
    server = scram_server("SCRAM-SHA-256", username, "alice-secret")
    assert scram_exchange(mechanism, server) is None
    assert mechanism.is_complete


@pytest.mark.parametrize("name", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_a_wrong_password_is_refused_by_the_server(name):
    mechanism = sasl.create_mechanism(scram_settings(name, password="wrong"), "broker1")
    server = scram_server(name, "alice", "alice-secret")
    with pytest.raises(SaslAuthenticationFailedError, match=rf"{name} server-final message: "
                                                            r".*invalid-proof"):
        scram_exchange(mechanism, server)
    assert not mechanism.is_complete


def test_scram_refuses_a_server_signature_that_does_not_verify():
    mechanism = sasl.create_mechanism(scram_settings("SCRAM-SHA-256"), "broker1")
    server = scram_server("SCRAM-SHA-256", "alice", "alice-secret")

    def flip_signature(server_final):
        assert server_final.startswith("v=")
        signature = bytearray(base64.b64decode(server_final[2:]))
        signature[0] ^= 0x01
        return "v=" + base64.b64encode(bytes(signature)).decode()

    with pytest.raises(SaslAuthenticationFailedError,
                       match=r"SCRAM-SHA-256 server-final message: The server signature "
                             r"doesn't match"):
        scram_exchange(mechanism, server, tamper_server_final=flip_signature)
    assert not mechanism.is_complete


def test_scram_refuses_an_iteration_count_beyond_kafkas_before_deriving_the_key():
    mechanism = sasl.create_mechanism(scram_settings("SCRAM-SHA-512"), "broker1")
    server = scram_server("SCRAM-SHA-512", "alice", "alice-secret", iterations=16385)
    server.set_client_first(mechanism.initial_response().decode())
    with pytest.raises(SaslAuthenticationFailedError, match=r"asks for 16385 iterations; "
                                                            r"Kafka's credentials have 4096 to 16384"):
        mechanism.evaluate(server.get_server_first().encode())


def test_scram_refuses_a_malformed_server_message():
    mechanism = sasl.create_mechanism(scram_settings("SCRAM-SHA-256"), "broker1")
    mechanism.initial_response()
    with pytest.raises(SaslAuthenticationFailedError, match=r"server-first message: .*Malformed"):
        mechanism.evaluate(b"garbage")
    mechanism = sasl.create_mechanism(scram_settings("SCRAM-SHA-256"), "broker1")
    mechanism.initial_response()
    with pytest.raises(SaslAuthenticationFailedError, match=r"server-first message is not UTF-8"):
        mechanism.evaluate(b"\xff\xfe")


def test_scram_refuses_a_password_saslprep_forbids_naming_the_setting():
    with pytest.raises(SaslConfigError, match=r"sasl_plain_password cannot be used with "
                                              r"SCRAM-SHA-256"):
        sasl.check_sasl_settings(scram_settings("SCRAM-SHA-256", password="bell\x07"), "SASL_SSL")


@pytest.mark.parametrize("setting, value", [
    ("password", "pass\xa0word"), ("password", "pass\uff11"), ("password", "x\xadx"),
    ("password", "\ufb01sh"), ("username", "us\u2003er")])
def test_scram_refuses_what_saslprep_would_change_naming_the_setting(setting, value):
    """SASLprep mapped them before the key was derived (a no-break space to a space, a
    full-width digit to a digit, a soft hyphen away): the broker, whose credential is of
    the text as given (Java's client and kafka-configs use it so), answered "invalid
    credentials" to a correct password."""
    with pytest.raises(SaslConfigError, match=rf"^sasl_plain_{setting} cannot be used with "
                                              rf"SCRAM-SHA-512: it has characters SASLprep"):
        sasl.check_sasl_settings(scram_settings("SCRAM-SHA-512", **{setting: value}),
                                 "SASL_SSL")
    sasl.check_sasl_settings(scram_settings("SCRAM-SHA-512", **{setting: "plain"}), "SASL_SSL")


# --- OAUTHBEARER

# The broker's grammar for the client's message (Kafka's OAuthBearerClientInitialResponse),
# written out independently of the module under test.
_BROKER_KV = r"[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01"
BROKER_CLIENT_FIRST = re.compile(
    r"n,(a=(?:[\x01-\x7F]|=2C|=3D)+)?,\x01(?P<kvpairs>(" + _BROKER_KV + r")*)\x01")
BROKER_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


def broker_reads(message):
    """What the broker reads from an OAUTHBEARER client message: (token, extensions)."""
    match = BROKER_CLIENT_FIRST.fullmatch(message.decode("utf-8"))
    assert match, message
    pairs = dict(kv.split("=", 1) for kv in match.group("kvpairs").split("\x01") if kv)
    auth = BROKER_AUTH.fullmatch(pairs.pop("auth"))
    assert auth and auth.group("scheme").lower() == "bearer"
    return auth.group("token"), pairs


class StaticTokenProvider:
    def __init__(self, token, extensions=None):
        self._token = token
        self._extensions = extensions

    def token(self):
        return self._token

    def extensions(self):
        return self._extensions


def test_oauthbearer_message_bytes_without_and_with_extensions():
    assert oauthbearer.client_first_message("a.b-c_d") == b"n,,\x01auth=Bearer a.b-c_d\x01\x01"
    assert oauthbearer.client_first_message("tok", {"logicalCluster": "lkc-1", "b": "x y"}) == (
        b"n,,\x01auth=Bearer tok\x01b=x y\x01logicalCluster=lkc-1\x01\x01")


def test_oauthbearer_exchange_with_a_token_provider():
    provider = StaticTokenProvider("eyJh.eyJz.c2ln", {"identityPoolId": "pool-1"})
    mechanism = sasl.create_mechanism(
        {"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": provider}, "broker1")
    mechanism.prepare()
    assert broker_reads(mechanism.initial_response()) == (
        "eyJh.eyJz.c2ln", {"identityPoolId": "pool-1"})
    assert mechanism.evaluate(b"") is None
    assert mechanism.is_complete


def test_oauthbearer_answers_the_brokers_error_with_ctrl_a_then_fails_with_it():
    mechanism = oauthbearer.OAuthBearerMechanism(StaticTokenProvider("expired.token.x"))
    mechanism.prepare()
    mechanism.initial_response()
    error = b'{"status":"invalid_token"}'
    assert mechanism.evaluate(error) == b"\x01"
    with pytest.raises(SaslAuthenticationFailedError, match=r'refused the token: '
                                                            r'\{"status":"invalid_token"\}'):
        mechanism.evaluate(b"")
    assert not mechanism.is_complete


def test_a_kafka_python_token_provider_works_as_it_is():
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self):
            return "kp.token.value"

    settings = {"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Provider()}
    sasl.check_sasl_settings(settings, "SASL_SSL")
    mechanism = sasl.create_mechanism(settings, "broker1")
    mechanism.prepare()
    assert broker_reads(mechanism.initial_response()) == ("kp.token.value", {})


def test_oauthbearer_settings_need_a_provider_with_token():
    with pytest.raises(SaslConfigError, match=r"needs sasl_oauth_token_provider"):
        sasl.check_sasl_settings({"sasl_mechanism": "OAUTHBEARER"}, "SASL_SSL")
    with pytest.raises(SaslConfigError, match=r"sasl_oauth_token_provider \(str\) has no token"):
        sasl.check_sasl_settings({"sasl_mechanism": "OAUTHBEARER",
                                  "sasl_oauth_token_provider": "a-token"}, "SASL_SSL")


def test_oauthbearer_refuses_what_the_broker_would_refuse():
    with pytest.raises(OAuthTokenError, match=r"characters Kafka does not accept.*' \+='"):
        oauthbearer.client_first_message("has space+=")
    with pytest.raises(OAuthTokenError, match=r"an empty token"):
        oauthbearer.client_first_message("")
    with pytest.raises(OAuthTokenError, match=r"returned a NoneType, not a str"):
        oauthbearer.client_first_message(None)
    with pytest.raises(SaslConfigError, match=r"'auth' is reserved"):
        oauthbearer.client_first_message("t", {"auth": "x"})
    with pytest.raises(SaslConfigError, match=r"extension name 'logical_cluster' is invalid"):
        oauthbearer.client_first_message("t", {"logical_cluster": "x"})
    with pytest.raises(SaslConfigError, match=r"extension 'a' has an invalid value 'caf\xe9'"):
        oauthbearer.client_first_message("t", {"a": "caf\xe9"})


def test_a_failing_provider_is_named():
    class Broken:
        def token(self):
            raise KeyError("no token today")

    mechanism = oauthbearer.OAuthBearerMechanism(Broken())
    with pytest.raises(OAuthTokenError, match=r"sasl_oauth_token_provider \(Broken\) failed: "
                                              r"KeyError\('no token today'\)") as raised:
        mechanism.prepare()
    # Its failure may pass: waited for as an unreachable broker is, not failed at once.
    assert raised.value.retriable
    with pytest.raises(RuntimeError, match=r"prepare\(\) must run before"):
        mechanism.initial_response()


# --- the OIDC client-credentials provider, against a token endpoint on 127.0.0.1


class TokenEndpoint:
    """An HTTP token endpoint on 127.0.0.1 answering from a script of
    (status, JSON-able body or raw bytes[, an Event answered only once set: a stall]),
    recording every request it gets."""

    def __init__(self):
        self.answers = []
        self.requests = []
        self._lock = threading.Lock()
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with endpoint._lock:
                    endpoint.requests.append((self.command, self.path, dict(self.headers), body))
                    status, answer, *stall = endpoint.answers.pop(0)
                for released in stall:
                    released.wait(60)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except ConnectionError:
                    pass  # the client gave up on a stalled answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/oauth2/token"
        # A short poll interval: shutdown() waits for the next poll.
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@pytest.fixture
def endpoint():
    endpoint = TokenEndpoint()
    yield endpoint
    endpoint.close()


class Clock:
    def __init__(self, now_s=1_700_000_000.0):
        self.now_s = now_s

    def __call__(self):
        return self.now_s


def make_jwt(claims):
    def part(value):
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def test_oidc_provider_posts_the_client_credentials_grant(endpoint):
    endpoint.answers.append((200, {"access_token": "tok-1", "token_type": "Bearer",
                                   "expires_in": 3600}))
    provider = oauthbearer.OidcClientCredentialsProvider(
        endpoint.url, "my-client", "my:secret", scope="kafka write")
    assert provider.token() == "tok-1"
    [(method, path, headers, body)] = endpoint.requests
    assert (method, path) == ("POST", "/oauth2/token")
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"my-client:my:secret").decode()
    assert urllib.parse.parse_qs(body.decode()) == {
        "grant_type": ["client_credentials"], "scope": ["kafka write"]}


def test_oidc_provider_caches_and_refreshes_at_80_percent_of_expires_in(endpoint):
    endpoint.answers += [(200, {"access_token": "tok-1", "expires_in": 100}),
                         (200, {"access_token": "tok-2", "expires_in": 100})]
    clock = Clock()
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s", clock=clock)
    assert provider.token() == "tok-1"
    clock.now_s += 79.9
    assert provider.token() == "tok-1"
    assert len(endpoint.requests) == 1
    clock.now_s += 5.1  # 85%: the window's jitter spent
    assert provider.token() == "tok-2"
    assert len(endpoint.requests) == 2


def test_oidc_refreshes_spread_over_80_to_85_percent_of_the_lifetime(endpoint):
    """Java's refresh window jitter: clients started together used to refresh at the same
    instant, all at 80% of the lifetime."""
    clock = Clock()
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s", clock=clock)
    refreshed_after_s = []
    for fetch in range(30):
        endpoint.answers.append((200, {"access_token": f"tok-{fetch}", "expires_in": 1000}))
        fetched_s = clock.now_s
        provider.token()
        with provider._lock:
            refreshed_after_s.append(provider._refresh_at_s - fetched_s)
        clock.now_s = provider._refresh_at_s
    assert all(800 <= after_s <= 850 for after_s in refreshed_after_s), refreshed_after_s
    assert len(set(refreshed_after_s)) > 1, refreshed_after_s
    at_expiry = oauthbearer.OidcClientCredentialsProvider(
        endpoint.url, "c", "s", refresh_window_factor=1, clock=clock)
    endpoint.answers.append((200, {"access_token": "last", "expires_in": 1000}))
    fetched_s = clock.now_s
    at_expiry.token()
    assert at_expiry._refresh_at_s == fetched_s + 1000  # never after the expiry


@pytest.mark.parametrize("expires_in", ["100", "0100"])
def test_oidc_provider_takes_expires_in_as_a_string_of_digits(endpoint, expires_in):
    """Some identity providers (Azure AD's v1 endpoints) send expires_in as a JSON
    string: the token was refused, and no record could be sent."""
    endpoint.answers += [(200, {"access_token": "tok-1", "expires_in": expires_in}),
                         (200, {"access_token": "tok-2", "expires_in": expires_in})]
    clock = Clock()
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s", clock=clock)
    assert provider.token() == "tok-1"
    clock.now_s += 79.9
    assert provider.token() == "tok-1"
    clock.now_s += 5.1
    assert provider.token() == "tok-2"


@pytest.mark.parametrize("lifetime_s", [1e300, 10 * 365 * 86400])
def test_a_token_stated_to_live_beyond_a_day_is_refreshed_within_a_day(lifetime_s):
    """The local OIDC server hands out tokens whose expires_in and exp claim both say
    lifetime_s: an absurd one was cached, and trusted, practically for ever."""
    clock = Clock(time.time())
    with OAuthServer({"c": "s"}, "kafka", token_lifetime_s=lifetime_s) as server:
        provider = oauthbearer.OidcClientCredentialsProvider(server.token_url, "c", "s",
                                                             clock=clock)
        first = provider.token()
        clock.now_s += oauthbearer.MAX_TOKEN_LIFETIME_S * 0.8 - 1
        assert provider.token() == first and server.token_requests("c") == 1
        clock.now_s += oauthbearer.MAX_TOKEN_LIFETIME_S * 0.05 + 1
        assert provider.token() != first and server.token_requests("c") == 2


def test_oidc_provider_takes_the_earlier_of_expires_in_and_the_jwt_exp(endpoint):
    clock = Clock()
    jwt = make_jwt({"sub": "svc", "exp": int(clock.now_s) + 50})
    endpoint.answers += [(200, {"access_token": jwt, "expires_in": 3600}),
                         (200, {"access_token": make_jwt({"exp": int(clock.now_s) + 500})})]
    provider = oauthbearer.OidcClientCredentialsProvider(
        endpoint.url, "c", "s", refresh_window_factor=0.5, clock=clock)
    assert provider.token() == jwt
    clock.now_s += 24.9
    assert provider.token() == jwt
    clock.now_s += 2.6  # 55% of 50 s: the window's jitter spent
    assert provider.token() != jwt
    assert len(endpoint.requests) == 2


def test_oidc_provider_keeps_a_valid_token_when_a_refresh_fails(endpoint, caplog):
    endpoint.answers += [(200, {"access_token": "tok-1", "expires_in": 100}),
                         (503, {"error": "temporarily_unavailable"}),
                         (503, {"error": "temporarily_unavailable"})]
    clock = Clock()
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s", clock=clock)
    provider.token()
    clock.now_s += 90
    with caplog.at_level(logging.WARNING, logger=oauthbearer.__name__):
        assert provider.token() == "tok-1"
    assert "HTTP 503" in caplog.text and "valid for 10 s more" in caplog.text
    clock.now_s += 10
    with pytest.raises(OAuthTokenError, match=r"HTTP 503"):
        provider.token()


def test_oidc_http_errors_name_the_endpoint_and_the_status(endpoint):
    endpoint.answers += [(401, {"error": "invalid_client"}), (503, b"busy")]
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "wrong")
    with pytest.raises(OAuthTokenError) as refused:
        provider.token()
    assert str(refused.value) == (f"token endpoint {endpoint.url}: HTTP 401 Unauthorized: "
                                  '{"error": "invalid_client"}')
    assert (refused.value.url, refused.value.status, refused.value.retriable) == (
        endpoint.url, 401, False)
    with pytest.raises(OAuthTokenError, match=r"HTTP 503 Service Unavailable: busy") as busy:
        provider.token()
    assert busy.value.retriable


def test_oidc_unreachable_endpoint_is_named():
    closed = TokenEndpoint()
    url = closed.url
    closed.close()
    provider = oauthbearer.OidcClientCredentialsProvider(url, "c", "s", timeout_s=5)
    with pytest.raises(OAuthTokenError, match=rf"token endpoint {re.escape(url)}: no answer: "
                                              r".*refused") as unreachable:
        provider.token()
    assert unreachable.value.status is None and unreachable.value.retriable


def test_an_untrusted_token_endpoint_certificate_is_not_retried(tmp_path):
    """The endpoint's certificate does not verify: no later try will do better, so the
    error is not retriable (the records fail at once, as for a refused client secret)
    and says OpenSSL's reason, not 'no answer' after max_block_ms of tries."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(make_tls_files(tmp_path, []).broker_keystore_file)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        def serve():
            conn, _ = listener.accept()
            try:
                server_context.wrap_socket(conn, server_side=True).close()
            except OSError:  # ssl.SSLError too: the client refused the certificate
                conn.close()

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        url = f"https://127.0.0.1:{listener.getsockname()[1]}/token"
        provider = oauthbearer.OidcClientCredentialsProvider(url, "c", "s", timeout_s=10)
        with pytest.raises(OAuthTokenError) as refused:
            provider.token()
        server.join(10)
    assert str(refused.value).startswith(
        f"token endpoint {url}: its TLS certificate did not verify: "), refused.value
    assert "certificate verify failed" in str(refused.value)
    assert not refused.value.retriable and refuses_credentials(refused.value)


@pytest.mark.parametrize("answer, problem", [
    (b"<html>", r"answer is not JSON: b'<html>'"),
    ({"token": "x"}, r"answer has no access_token \(found: \['token'\]\)"),
    ({"access_token": "opaque", "expires_in": -5},
     r"expires_in -5 is not a positive, finite number"),
    # JSON's Infinity and NaN, which Python reads: a token never refreshed, or refreshed
    # at every call.
    (b'{"access_token": "opaque", "expires_in": Infinity}',
     r"expires_in inf is not a positive, finite number"),
    (b'{"access_token": "opaque", "expires_in": NaN}',
     r"expires_in nan is not a positive, finite number"),
    # A string: only one of digits is a lifetime (Azure AD v1 sends "3600").
    ({"access_token": "opaque", "expires_in": "-5"},
     r"expires_in '-5' is not a positive, finite number nor a string of digits"),
    ({"access_token": "opaque", "expires_in": "1h"}, r"expires_in '1h' is not a positive"),
    ({"access_token": "opaque", "expires_in": "NaN"}, r"expires_in 'NaN' is not a positive"),
    ({"access_token": "opaque", "expires_in": "0"}, r"expires_in '0' is not a positive"),
    ({"access_token": "opaque", "expires_in": True}, r"expires_in True is not a positive"),
    ({"access_token": "opaque"}, r"lifetime is unknown: .*no expires_in"),
    ({"access_token": make_jwt({"exp": float("inf")})}, r"lifetime is unknown"),
    ({"access_token": make_jwt({"exp": 10 ** 400})}, r"lifetime is unknown"),
    ({"access_token": "not a token", "expires_in": 60}, r"characters Kafka does not accept"),
])
def test_oidc_answers_without_a_usable_token_are_refused(endpoint, answer, problem):
    endpoint.answers.append((200, answer))
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s")
    with pytest.raises(OAuthTokenError, match=rf"token endpoint {re.escape(endpoint.url)}.*{problem}"):
        provider.token()


def test_a_form_encoded_token_answer_is_refused_without_quoting_the_token(endpoint):
    """Some identity providers answer form-encoded (RFC 6749 says JSON): the token in it
    is a live secret, kept out of the error, which logs and tracebacks carry."""
    endpoint.answers.append((200, b"access_token=gho_s3cr3tT0ken&scope=&token_type=bearer"))
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s")
    with pytest.raises(OAuthTokenError) as refused:
        provider.token()
    assert str(refused.value) == (
        f"token endpoint {endpoint.url}: answer is not JSON but form-encoded (fields: "
        f"access_token, scope, token_type; their values withheld): the endpoint must answer "
        f"JSON (RFC 6749)")


@pytest.mark.parametrize("body", [
    b"access_token=gho_s3cr3tT0ken&token_type=bearer&",  # a trailing &
    b"access_token=gho_s3cr3tT0ken&scope",  # a field with no =
    "access_token=gho_s3cr3tT0ken&scope=caf\u00e9".encode(),  # not ASCII
    b'{"access_token": "gho_s3cr3tT0ken", "token_type": "bearer",}',  # JSON, but not quite
])
def test_an_answer_naming_access_token_is_never_quoted(endpoint, body):
    """An answer that is not JSON and not strictly form-encoded, but carries a token all
    the same, was quoted in the error: the live token with it."""
    endpoint.answers.append((200, body))
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s")
    with pytest.raises(OAuthTokenError) as refused:
        provider.token()
    assert "s3cr3t" not in str(refused.value)
    assert str(refused.value).startswith(f"token endpoint {endpoint.url}: answer is not JSON")


def test_oidc_concurrent_callers_share_one_fetch(endpoint):
    endpoint.answers.append((200, {"access_token": "shared", "expires_in": 600}))
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s")
    tokens = []
    threads = [threading.Thread(target=lambda: tokens.append(provider.token())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tokens == ["shared"] * 8
    assert len(endpoint.requests) == 1


def test_a_caller_waits_for_a_hung_fetch_no_longer_than_its_timeout(endpoint):
    # token() held its lock during the HTTP request: a caller queued behind a fetch the
    # endpoint never answered, beyond its own timeout, then fetched once more itself.
    released = threading.Event()
    endpoint.answers += [(200, {"access_token": "tok-1", "expires_in": 100}, released),
                         (200, {"access_token": "tok-2", "expires_in": 100})]
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s", timeout_s=60)
    first = []
    fetching = threading.Thread(target=lambda: first.append(provider.token()))
    fetching.start()
    while not endpoint.requests:
        time.sleep(0.01)
    outcome = []

    def later_caller():
        try:
            outcome.append(provider.token(timeout_s=0.2))
        except OAuthTokenError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=later_caller)
    caller.start()
    caller.join(30)
    # The later caller gave up while the endpoint still stalled, without a fetch of its own.
    ended_while_stalled = not caller.is_alive()
    released.set()
    fetching.join(30)
    caller.join(30)
    assert ended_while_stalled and len(outcome) == 1 and isinstance(outcome[0], OAuthTokenError)
    assert str(outcome[0]) == (f"token endpoint {endpoint.url}: no token within 0.2 s: its "
                               f"fetch has not ended")
    assert outcome[0].retriable
    assert first == ["tok-1"] and len(endpoint.requests) == 1


def test_callers_that_come_during_a_failing_fetch_get_its_failure_not_a_fetch_of_their_own(
        endpoint):
    # A caller that came while a fetch ran waited for the lock, then fetched again.
    released = threading.Event()
    endpoint.answers += [(200, {"access_token": "late", "expires_in": 100}, released),
                         (200, {"access_token": "second", "expires_in": 100})]
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s", timeout_s=1)
    outcomes = []

    def caller():
        try:
            outcomes.append(provider.token())
        except OAuthTokenError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(2)]
    threads[0].start()
    while not endpoint.requests:
        time.sleep(0.01)
    threads[1].start()
    for thread in threads:
        thread.join(30)
    released.set()
    assert len(outcomes) == 2 and all(isinstance(outcome, OAuthTokenError)
                                      for outcome in outcomes)
    assert len(endpoint.requests) == 1


def test_callers_get_the_valid_cached_token_while_its_refresh_hangs(endpoint, caplog):
    released = threading.Event()
    endpoint.answers += [(200, {"access_token": "tok-1", "expires_in": 100}),
                         (200, {"access_token": "tok-2", "expires_in": 100}, released)]
    clock = Clock()
    provider = oauthbearer.OidcClientCredentialsProvider(endpoint.url, "c", "s", timeout_s=60,
                                                         clock=clock)
    assert provider.token() == "tok-1"
    clock.now_s += 90  # due, valid for 10 s more
    with caplog.at_level(logging.WARNING, logger=oauthbearer.__name__):
        # The caller that starts the refresh waits its own time, then takes the cached one.
        assert provider.token(timeout_s=0.1) == "tok-1"
    assert "no token within 0.1 s" in caplog.text and "valid for 10 s more" in caplog.text
    # One that comes while the refresh runs takes it at once: no second fetch.
    assert provider.token() == "tok-1"
    assert len(endpoint.requests) == 2
    released.set()
    for _ in range(3000):  # the refresh ends: its token is taken from then on
        if provider.token() == "tok-2":
            break
        time.sleep(0.01)
    assert provider.token() == "tok-2" and len(endpoint.requests) == 2
    with pytest.raises(ValueError, match=r"timeout_s must be a number >= 0 or None, got -1"):
        provider.token(timeout_s=-1)


def test_oauthbearer_with_the_oidc_provider_end_to_end(endpoint):
    endpoint.answers.append((200, {"access_token": make_jwt({"exp": 4_000_000_000}),
                                   "expires_in": 300}))
    provider = oauthbearer.OidcClientCredentialsProvider(
        endpoint.url, "c", "s", extensions={"logicalCluster": "lkc-abc"})
    settings = {"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": provider}
    sasl.check_sasl_settings(settings, "SASL_SSL")
    mechanism = sasl.create_mechanism(settings, "broker1")
    mechanism.prepare()
    token, extensions = broker_reads(mechanism.initial_response())
    assert token.count(".") == 2 and extensions == {"logicalCluster": "lkc-abc"}


def test_oidc_provider_settings_are_checked_at_construction():
    with pytest.raises(SaslConfigError, match=r"token_endpoint_url must be an http or https URL"):
        oauthbearer.OidcClientCredentialsProvider("ftp://idp/token", "c", "s")
    with pytest.raises(SaslConfigError, match=r"client_secret must be a non-empty str"):
        oauthbearer.OidcClientCredentialsProvider("https://idp/token", "c", "")
    with pytest.raises(SaslConfigError, match=r"refresh_window_factor must be a number in \(0, 1\]"):
        oauthbearer.OidcClientCredentialsProvider("https://idp/token", "c", "s",
                                                  refresh_window_factor=1.5)
    with pytest.raises(SaslConfigError, match=r"extension name 'bad key' is invalid"):
        oauthbearer.OidcClientCredentialsProvider("https://idp/token", "c", "s",
                                                  extensions={"bad key": "v"})


# --- sasl.jaas.config

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_jaas_plain_and_scram_credentials():
    assert jaas.credentials_from_jaas(
        f'{PLAIN_MODULE} required username="alice" password="alice-secret";', "PLAIN") == (
        "alice", "alice-secret")
    assert jaas.credentials_from_jaas(
        f"{SCRAM_MODULE} REQUIRED\n  username='bob'\n  password='p;w=/x';", "SCRAM-SHA-512") == (
        "bob", "p;w=/x")
    # Spark's relocated Kafka classes carry the same simple name.
    assert jaas.credentials_from_jaas(
        f"kafkashaded.{PLAIN_MODULE} required username=carol password=c-1;", "PLAIN") == (
        "carol", "c-1")


def test_jaas_escapes_and_comments_follow_javas_tokenizer():
    [entry] = jaas.parse_jaas_config(
        f"/* comment */ {PLAIN_MODULE} optional // to the end of the line\n"
        + r'username="a\"b\\c" password="tab\there\101\0\9"'
        + " other='single \"quoted\"' /path/comment\n;")
    assert entry.control_flag == "optional"
    assert entry.module_name == "PlainLoginModule"
    assert entry.options == {"username": 'a"b\\c', "password": "tab\there\x41\x009",
                             "other": 'single "quoted"'}


@pytest.mark.parametrize("config, problem", [
    ("", r"no login module"),
    (f"{PLAIN_MODULE}", r"at character 1: login module .*PlainLoginModule needs a control flag"),
    (f"{PLAIN_MODULE} mandatory username=a;", r"at character 57: 'mandatory' is not a control "
                                              r"flag; expected one of required"),
    (f'{PLAIN_MODULE} required username="a" password="b"',
     r"the entry of .*PlainLoginModule is not ended by ';'"),
    (f'{PLAIN_MODULE} required username "a";', r"option 'username' needs '=' and a value"),
    (f'{PLAIN_MODULE} required username=;', r"option 'username' has no value"),
    (f'{PLAIN_MODULE} required username="a;', r"at character 75: the \" quote opened here is "
                                              r"not closed on its line"),
    (f'{PLAIN_MODULE} required username="a"\n password="b\nc";', r"quote opened here is not closed"),
    (f'{PLAIN_MODULE} required username=a username=b;', r"option 'username' is given twice"),
    (f'{PLAIN_MODULE} required /* open', r"a /\* comment is not closed"),
    ('"quoted.Module" required;', r"expected a login module class name, found a quoted string"),
    (f'; {PLAIN_MODULE} required;', r"expected a login module class name, found ';'"),
])
def test_jaas_syntax_errors_name_the_position_and_the_problem(config, problem):
    with pytest.raises(JaasConfigError, match=rf"sasl\.jaas\.config.*{problem}"):
        jaas.parse_jaas_config(config)


def test_jaas_credentials_errors_name_what_is_missing_and_never_the_password():
    with pytest.raises(JaasConfigError, match=r"PlainLoginModule needs a non-empty password "
                                              r"option") as missing:
        jaas.credentials_from_jaas(f'{PLAIN_MODULE} required username="a" password="";', "PLAIN")
    with pytest.raises(JaasConfigError, match=r"names .*ScramLoginModule, but "
                                              r"sasl.mechanism='PLAIN' needs PlainLoginModule"):
        jaas.credentials_from_jaas(f'{SCRAM_MODULE} required username=a password=b;', "PLAIN")
    with pytest.raises(JaasConfigError, match=r"has 2 login modules; a client takes exactly one"):
        jaas.credentials_from_jaas(
            f"{PLAIN_MODULE} required username=a password=b; {PLAIN_MODULE} required "
            f"username=c password=d;", "PLAIN")
    with pytest.raises(JaasConfigError, match=r"not for sasl.mechanism='GSSAPI'"):
        jaas.credentials_from_jaas("x required;", "GSSAPI")
    # A delegation token sent as a password would only be refused as a wrong one.
    with pytest.raises(JaasConfigError, match=r"tokenauth \(delegation token authentication\) "
                                              r"is not supported") as token:
        jaas.credentials_from_jaas(
            f'{SCRAM_MODULE} required username="tokenid" password="hmac-secret" tokenauth=TRUE;',
            "SCRAM-SHA-256")
    assert "hmac-secret" not in str(token.value)
    assert jaas.credentials_from_jaas(f"{SCRAM_MODULE} required username=a password=b "
                                      f"tokenauth=false;", "SCRAM-SHA-512") == ("a", "b")
    with pytest.raises(JaasConfigError) as unclosed:
        jaas.credentials_from_jaas(
            f'{PLAIN_MODULE} required username="a" password="hunter2-secret', "PLAIN")
    assert "hunter2" not in str(unclosed.value)


def test_jaas_credentials_drive_a_scram_exchange():
    username, password = jaas.credentials_from_jaas(
        f'{SCRAM_MODULE} required username="svc" password="p\\"q";', "SCRAM-SHA-256")
    mechanism = sasl.create_mechanism(scram_settings("SCRAM-SHA-256", username, password), "b1")
    assert scram_exchange(mechanism, scram_server("SCRAM-SHA-256", "svc", 'p"q')) is None


def test_jaas_config_setting_carries_the_producers_credentials():
    """sasl_jaas_config (sasl.jaas.config by the Java client's name) instead of the
    username and password settings: checked when the Producer is built, used per exchange."""
    from netkafka.config import ProducerConfig
    jaas_config = f'{SCRAM_MODULE} required username="svc" password="p\\"q";'
    config = ProducerConfig.from_kwargs({
        "bootstrap_servers": "h:1", "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas_config})
    settings = config.connection_config().sasl_settings
    assert settings["sasl_jaas_config"] == jaas_config
    mechanism = sasl.create_mechanism(settings, "b1")
    assert scram_exchange(mechanism, scram_server("SCRAM-SHA-512", "svc", 'p"q')) is None
    refusals = [
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
          "sasl_jaas_config": jaas_config}, r"names .*ScramLoginModule, but "
                                            r"sasl.mechanism='PLAIN' needs PlainLoginModule"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
          "sasl_jaas_config": jaas_config.replace("scram.Scram", "plain.Plain"),
          "sasl_plain_username": "svc"},
         r"sasl_jaas_config and sasl_plain_username are both set"),
        ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
          "sasl_jaas_config": "org.apache.kafka.common.security.oauthbearer."
                              "OAuthBearerLoginModule required;"},
         r"PLAIN and SCRAM login modules only, not for sasl_mechanism='OAUTHBEARER'"),
        ({"security_protocol": "SSL", "sasl_jaas_config": jaas_config},
         r"sasl_jaas_config is set but security_protocol='SSL' does not use SASL"),
    ]
    for settings, message in refusals:
        with pytest.raises(SaslConfigError, match=message) as refused:
            ProducerConfig.from_kwargs({"bootstrap_servers": "h:1", **settings})
        assert 'p"q' not in str(refused.value)


# --- AWS MSK IAM through AWS's signer (static credentials: no network)

class StaticAwsCredentials(botocore_credentials.CredentialProvider):
    METHOD = "netkafka-test"

    def __init__(self, session_token=None):
        super().__init__()
        self.session_token = session_token
        self.loads = 0

    def load(self):
        self.loads += 1
        return botocore_credentials.Credentials(
            "AKIDNETKAFKATEST", "secret-key-for-the-test", self.session_token)


def signed_url(token):
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()


def test_msk_iam_token_is_a_presigned_connect_url_for_the_region():
    credentials = StaticAwsCredentials(session_token="session-token-1")
    provider = msk_iam.MskIamTokenProvider("eu-west-1", aws_credentials_provider=credentials)
    token = provider.token()
    url = urllib.parse.urlsplit(signed_url(token))
    query = {key: value for key, [value] in urllib.parse.parse_qs(url.query).items()}
    assert (url.scheme, url.netloc, url.path) == ("https", "kafka.eu-west-1.amazonaws.com", "/")
    assert query["Action"] == "kafka-cluster:Connect"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert re.fullmatch(r"AKIDNETKAFKATEST/\d{8}/eu-west-1/kafka-cluster/aws4_request",
                        query["X-Amz-Credential"])
    assert query["X-Amz-Expires"] == "900"
    assert query["X-Amz-Security-Token"] == "session-token-1"
    assert re.fullmatch(r"[0-9a-f]{64}", query["X-Amz-Signature"])
    assert query["User-Agent"].startswith("aws-msk-iam-sasl-signer-python/")


def test_token_providers_travel_pickled_as_netkafka_spark_sends_them():
    """netkafka.spark pickles the settings into its sinks and emitters (cloudpickle): a
    provider's copy has a lock of its own and no cached token, and makes its own."""
    import pickle
    from pyspark import cloudpickle
    provider = msk_iam.MskIamTokenProvider("eu-west-1",
                                           aws_credentials_provider=StaticAwsCredentials())
    provider.token()
    copy = pickle.loads(cloudpickle.dumps(provider))
    assert copy._lock is not provider._lock and copy._token is None
    assert "kafka.eu-west-1.amazonaws.com" in signed_url(copy.token())
    oidc = oauthbearer.OidcClientCredentialsProvider(
        "https://idp.example/token", "id", "secret", extensions={"logicalCluster": "lkc-1"})
    assert pickle.loads(cloudpickle.dumps(oidc)).extensions() == {"logicalCluster": "lkc-1"}


def test_msk_iam_token_travels_as_an_oauthbearer_message_the_broker_reads():
    provider = msk_iam.MskIamTokenProvider("us-east-1",
                                           aws_credentials_provider=StaticAwsCredentials())
    settings = {"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": provider}
    sasl.check_sasl_settings(settings, "SASL_SSL")
    mechanism = sasl.create_mechanism(settings, "b-1.cluster.kafka.us-east-1.amazonaws.com")
    mechanism.prepare()
    token, extensions = broker_reads(mechanism.initial_response())
    assert extensions == {}
    assert signed_url(token).startswith("https://kafka.us-east-1.amazonaws.com/?Action=")
    assert mechanism.evaluate(b"") is None and mechanism.is_complete


def test_msk_iam_token_is_cached_and_signed_again_before_its_15_minutes_end():
    credentials = StaticAwsCredentials()
    clock = Clock(time.time())
    provider = msk_iam.MskIamTokenProvider("us-east-1", aws_credentials_provider=credentials,
                                           clock=clock)
    first = provider.token()
    clock.now_s += 600
    assert provider.token() == first and credentials.loads == 1
    clock.now_s += 200  # past 80% of the 900 s lifetime
    provider.token()
    assert credentials.loads == 2


def test_msk_iam_settings_are_checked(monkeypatch, tmp_path):
    with pytest.raises(SaslConfigError, match=r"one credential source, not aws_profile, role_arn"):
        msk_iam.MskIamTokenProvider("us-east-1", aws_profile="p", role_arn="arn:aws:iam::1:role/r")
    with pytest.raises(SaslConfigError, match=r"sts_session_name needs role_arn"):
        msk_iam.MskIamTokenProvider("us-east-1", sts_session_name="s")
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(SaslConfigError, match=r"needs region: none given and none in the AWS "
                                              r"configuration"):
        msk_iam.MskIamTokenProvider()
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert msk_iam.MskIamTokenProvider().region == "ap-south-1"


def test_msk_iam_signer_failures_are_token_errors():
    class Failing(botocore_credentials.CredentialProvider):
        def load(self):
            raise RuntimeError("no credentials here")

    provider = msk_iam.MskIamTokenProvider("us-east-1", aws_credentials_provider=Failing())
    with pytest.raises(OAuthTokenError, match=r"AWS MSK IAM signer \(us-east-1\): no token: "
                                              r"RuntimeError\('no credentials here'\)") as raised:
        provider.token()
    assert raised.value.retriable  # a credentials source or STS may answer later


# --- optional libraries missing


@pytest.mark.parametrize("module, make, extra", [
    (msk_iam.SIGNER_MODULE, lambda: msk_iam.MskIamTokenProvider("us-east-1"), "aws"),
    ("gssapi", lambda: sasl.check_sasl_settings({"sasl_mechanism": "GSSAPI"}, "SASL_SSL"),
     "gssapi"),
])
def test_a_missing_optional_library_names_the_extra(monkeypatch, module, make, extra):
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(SaslLibraryMissingError, match=rf"pip install 'netkafka\[{extra}\]'"):
        make()


# --- GSSAPI against a real MIT Kerberos KDC on 127.0.0.1, started by the test
#
# The broker's side is the JDK's GSSAPI server as Kafka runs it, played here with the
# gssapi library as acceptor: context tokens until established, then the wrapped
# security layer offer (only "no layer"), then the client's wrapped choice, then an
# empty answer.  Skipped where the gssapi library or the KDC programs (the krb5-kdc and
# krb5-admin-server packages) are missing.

REALM = "NETKAFKA.TEST"
KDC_PROGRAMS = ("krb5kdc", "kdb5_util", "kadmin.local")
KDC_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def kdc(tmp_path_factory):
    """A KDC for REALM with the principals kafka/localhost and client, their keys in
    keytabs; the process environment points the Kerberos library at it meanwhile."""
    gssapi = pytest.importorskip("gssapi", reason="GSSAPI tests need the gssapi extra")
    programs = {name: shutil.which(name, path=KDC_PATH) for name in KDC_PROGRAMS}
    missing = [name for name, path in programs.items() if path is None]
    if missing:
        pytest.skip(f"GSSAPI tests need MIT Kerberos' KDC programs: {', '.join(missing)} "
                    f"missing (packages krb5-kdc, krb5-admin-server)")
    home = tmp_path_factory.mktemp("kdc")
    port = free_port()
    (home / "krb5.conf").write_text(
        f"[libdefaults]\n default_realm = {REALM}\n dns_lookup_kdc = false\n"
        f" dns_lookup_realm = false\n rdns = false\n dns_canonicalize_hostname = false\n"
        f"[realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n }}\n"
        f"[domain_realm]\n localhost = {REALM}\n")
    (home / "kdc.conf").write_text(
        f"[kdcdefaults]\n kdc_ports = {port}\n kdc_tcp_ports = {port}\n"
        f"[realms]\n {REALM} = {{\n  database_name = {home}/principal\n"
        f"  key_stash_file = {home}/stash\n  acl_file = {home}/kadm5.acl\n }}\n"
        f"[logging]\n kdc = FILE:{home}/kdc.log\n")
    env = {"KRB5_CONFIG": str(home / "krb5.conf"), "KRB5_KDC_PROFILE": str(home / "kdc.conf"),
           "KRB5CCNAME": f"FILE:{home}/ccache",
           "KRB5_CLIENT_KTNAME": str(home / "client.keytab"),
           "KRB5_KTNAME": str(home / "broker.keytab")}
    run_env = {**os.environ, **env}

    def run(*command):
        subprocess.run(command, env=run_env, check=True, timeout=60,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    run(programs["kdb5_util"], "create", "-s", "-r", REALM, "-P", "master-password")
    for principal, keytab in (("kafka/localhost", "broker.keytab"), ("client", "client.keytab")):
        run(programs["kadmin.local"], "-r", REALM, "-q", f"addprinc -randkey {principal}")
        run(programs["kadmin.local"], "-r", REALM, "-q", f"ktadd -k {home / keytab} {principal}")
    process = subprocess.Popen([programs["krb5kdc"], "-n", "-r", REALM], env=run_env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"krb5kdc did not listen on {port}: "
                                       f"{(home / 'kdc.log').read_text()[-2000:]}")
                time.sleep(0.05)
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        try:
            yield gssapi
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    finally:
        process.terminate()
        process.wait(timeout=10)


class KafkaGssapiBroker:
    """The broker's half of Kafka's GSSAPI exchange: ``answer(client bytes)`` returns
    the broker's next auth_bytes.  ``layers`` is the security layer offer."""

    def __init__(self, gssapi, layers=1):
        self._context = gssapi.SecurityContext(
            creds=gssapi.Credentials(usage="accept"), usage="accept")
        self._layers = layers
        self._step = "context"
        self.client_choice = None  # the client's unwrapped security layer message

    def _offer(self):
        self._step = "choice"
        return self._context.wrap(bytes((self._layers, 0x01, 0x00, 0x00)), False).message

    def answer(self, message):
        if self._step == "context":
            token = self._context.step(message)
            if not self._context.complete:
                return token
            if token:
                self._step = "offer"
                return token
            return self._offer()
        if self._step == "offer":
            assert message == b""
            return self._offer()
        assert self._step == "choice"
        self.client_choice = self._context.unwrap(message).message
        self._step = "done"
        return b""


def gssapi_exchange(mechanism, broker):
    mechanism.prepare()
    out = mechanism.initial_response()
    while out is not None:
        out = mechanism.evaluate(broker.answer(out))


def test_gssapi_completes_kafkas_exchange_with_a_real_kdc(kdc):
    settings = {"sasl_mechanism": "GSSAPI"}
    sasl.check_sasl_settings(settings, "SASL_PLAINTEXT")
    mechanism = sasl.create_mechanism(settings, "localhost")
    broker = KafkaGssapiBroker(kdc)
    gssapi_exchange(mechanism, broker)
    assert mechanism.is_complete
    # No security layer, a maximum buffer of 0 (RFC 4752), the client's own principal.
    assert broker.client_choice == b"\x01\x00\x00\x00" + f"client@{REALM}".encode()


def test_gssapi_service_principal_follows_the_settings(kdc):
    mechanism = sasl.create_mechanism(
        {"sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": "kafka",
         "sasl_kerberos_domain_name": "localhost"}, "broker1.elsewhere")
    gssapi_exchange(mechanism, KafkaGssapiBroker(kdc))
    assert mechanism.is_complete
    unknown = sasl.create_mechanism({"sasl_mechanism": "GSSAPI"}, "no-such-broker")
    with pytest.raises(SaslAuthenticationFailedError,
                       match=r"GSSAPI: no Kerberos token for kafka@no-such-broker: .*not found"):
        unknown.prepare()


def test_gssapi_refuses_a_broker_without_the_no_layer_option(kdc):
    mechanism = sasl.create_mechanism({"sasl_mechanism": "GSSAPI"}, "localhost")
    with pytest.raises(SaslAuthenticationFailedError,
                       match=r"offers security layers 0x02 without 'none'"):
        gssapi_exchange(mechanism, KafkaGssapiBroker(kdc, layers=2))
    assert not mechanism.is_complete


def test_gssapi_settings_are_checked(kdc):
    with pytest.raises(SaslConfigError, match=r"sasl_kerberos_service_name must be the broker's "
                                              r"service name without a host"):
        sasl.check_sasl_settings({"sasl_mechanism": "GSSAPI",
                                  "sasl_kerberos_service_name": "kafka@host"}, "SASL_SSL")
    with pytest.raises(SaslConfigError, match=r"sasl_kerberos_name must be a str or gssapi.Name"):
        sasl.check_sasl_settings({"sasl_mechanism": "GSSAPI", "sasl_kerberos_name": 5},
                                 "SASL_SSL")
    # The whole principal given: a service or domain name beside it would be ignored.
    for other, value in (("sasl_kerberos_service_name", "kafka-prod"),
                         ("sasl_kerberos_domain_name", "broker1.example.com")):
        with pytest.raises(SaslConfigError, match=rf"sasl_kerberos_name and {other} are both "
                                                  r"set"):
            sasl.check_sasl_settings({"sasl_mechanism": "GSSAPI",
                                      "sasl_kerberos_name": "kafka@broker1", other: value},
                                     "SASL_SSL")
    sasl.check_sasl_settings({"sasl_mechanism": "GSSAPI", "sasl_kerberos_name": "kafka@broker1",
                              "sasl_kerberos_service_name": "kafka"}, "SASL_SSL")
