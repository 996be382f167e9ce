"""A local OAuth 2.0 provider for the secured test broker: a JWKS and a token endpoint.

The broker validates OAUTHBEARER tokens against the key set at /jwks; clients get tokens from
/token by the client-credentials grant (RFC 6749, 4.4), the flow of an OIDC client provider
such as librdkafka's `sasl.oauthbearer.method=oidc` or Kafka's Java login handler:

    GET  /jwks    {"keys": [the RSA public key, with its kid]}
    POST /token   grant_type=client_credentials[&scope=...], the client's id and secret by
                  HTTP Basic (client_secret_basic) or as form fields (client_secret_post)
                  -> {"access_token": JWT, "token_type": "Bearer", "expires_in": s, "scope": ...}

Tokens are real RS256 JWTs (PyJWT signs them): iss is this server's URL, sub the client id,
aud the audience the broker expects.  issue_token() makes one directly, also the malformed
ones a test needs (expired, another audience, signed by a key the JWKS does not list).

The server runs on 127.0.0.1 in daemon threads of the test process (http.server); it must
run before the broker starts, since the broker fetches the key set while it starts.
"""
import base64
import binascii
import collections
import http.server
import json
import secrets
import threading
import time
import urllib.parse
from typing import Mapping, Optional

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

HOST = "127.0.0.1"
JWKS_PATH = "/jwks"
TOKEN_PATH = "/token"
DEFAULT_TOKEN_LIFETIME_S = 3600
# Form bodies of token requests are a few hundred bytes.
MAX_REQUEST_BODY_BYTES = 64 * 1024
RSA_KEY_BITS = 2048


class OAuthServer:
    """The JWKS and token endpoints, for clients known by id and secret.

    Args:
        clients: client id -> client secret; a token's subject is its client's id.
        audience: the aud claim of every token, which the broker is told to expect.
        token_lifetime_s: lifetime of the tokens /token hands out; tests of token refresh set
            it lower (the attribute may be changed while the server runs).
    """

    def __init__(self, clients: Mapping[str, str], audience: str,
                 token_lifetime_s: int = DEFAULT_TOKEN_LIFETIME_S):
        self.clients = dict(clients)
        self.audience = audience
        self.token_lifetime_s = token_lifetime_s
        self.key_id = secrets.token_hex(8)  # kid of the one key in the JWKS
        self._signing_key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS)
        # Signs forged tokens: same kid, a key the JWKS does not hold.
        self._forging_key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS)
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self._signing_key.public_key(), as_dict=True)
        # "use" and not PyJWT's "key_ops", which RFC 7517 4.3 says not to give together.
        key = {"kty": "RSA", "n": jwk["n"], "e": jwk["e"], "kid": self.key_id, "use": "sig", "alg": "RS256"}
        self._jwks_body = json.dumps({"keys": [key]}).encode()
        # Requests served so far, for tests of token refresh and of the broker's key fetches;
        # written by the handler threads, guarded by _lock.
        self._lock = threading.Lock()
        self._token_requests: collections.Counter = collections.Counter()  # client id -> tokens handed out
        self._jwks_requests = 0
        self._server: Optional[http.server.ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    def __enter__(self) -> "OAuthServer":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """http://127.0.0.1:PORT, also the issuer (iss) of every token."""
        if self._server is None:
            raise RuntimeError("the OAuth server is not running")
        return f"http://{HOST}:{self._server.server_address[1]}"

    @property
    def issuer(self) -> str:
        return self.url

    @property
    def jwks_url(self) -> str:
        return self.url + JWKS_PATH

    @property
    def token_url(self) -> str:
        return self.url + TOKEN_PATH

    def token_requests(self, client_id: str) -> int:
        """How many tokens /token has handed to client_id."""
        with self._lock:
            return self._token_requests[client_id]

    @property
    def jwks_requests(self) -> int:
        """How many times the key set was fetched."""
        with self._lock:
            return self._jwks_requests

    def start(self) -> None:
        """Listen on a free port of 127.0.0.1 and serve from a daemon thread."""
        if self._server is not None:
            raise RuntimeError(f"the OAuth server already runs at {self.url}")
        self._server = http.server.ThreadingHTTPServer((HOST, 0), _handler_class(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="netkafka-oauth",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = self._thread = None

    def issue_token(self, subject: str, *, lifetime_s: Optional[float] = None,
                    scope: Optional[str] = None, forged: bool = False, **claims) -> str:
        """A signed RS256 JWT for subject, as /token would hand it out.

        Args:
            lifetime_s: seconds until exp (negative: already expired); token_lifetime_s if None.
            scope: the scope claim (space-separated scopes), left out if None.
            forged: sign with a key the JWKS does not list (under the same kid).
            claims: further claims, or replacements of iss, aud, iat, exp.
        """
        now = int(time.time())
        payload = {
            "iss": self.issuer,
            "sub": subject,
            "aud": self.audience,
            "iat": now,
            "exp": now + int(self.token_lifetime_s if lifetime_s is None else lifetime_s),
            "jti": secrets.token_hex(8),
        }
        if scope is not None:
            payload["scope"] = scope
        payload.update(claims)
        key = self._forging_key if forged else self._signing_key
        return jwt.encode(payload, key, algorithm="RS256", headers={"kid": self.key_id})

    # -- request handling (runs on the server's handler threads) -------------------------------

    def _serve_jwks(self) -> tuple[int, bytes]:
        with self._lock:
            self._jwks_requests += 1
        return 200, self._jwks_body

    def _serve_token(self, authorization: Optional[str], body: bytes) -> tuple[int, bytes]:
        try:
            form = urllib.parse.parse_qs(body.decode("ascii"), strict_parsing=bool(body))
        except (UnicodeDecodeError, ValueError):
            return _oauth_error(400, "invalid_request", "the body is not a form")
        fields = {name: values[0] for name, values in form.items()}
        if fields.get("grant_type") != "client_credentials":
            return _oauth_error(400, "unsupported_grant_type", "only client_credentials is served")
        client_id, secret = _client_credentials(authorization, fields)
        expected = self.clients.get(client_id) if client_id is not None else None
        if expected is None or not secrets.compare_digest(expected.encode(), secret.encode()):
            return _oauth_error(401, "invalid_client", "unknown client or wrong secret")
        scope = fields.get("scope")
        token = self.issue_token(client_id, scope=scope)
        with self._lock:
            self._token_requests[client_id] += 1
        answer = {"access_token": token, "token_type": "Bearer", "expires_in": self.token_lifetime_s}
        if scope is not None:
            answer["scope"] = scope
        return 200, json.dumps(answer).encode()


def _client_credentials(authorization: Optional[str], fields: Mapping[str, str]) -> tuple[Optional[str], str]:
    """The client's id and secret from HTTP Basic (each part form-encoded, RFC 6749 2.3.1) or
    from the form's client_id and client_secret; (None, "") when neither is there."""
    if authorization and authorization.startswith("Basic "):
        try:
            decoded = base64.b64decode(authorization[len("Basic "):], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None, ""
        client_id, colon, secret = decoded.partition(":")
        if not colon:
            return None, ""
        return urllib.parse.unquote_plus(client_id), urllib.parse.unquote_plus(secret)
    if "client_id" in fields:
        return fields["client_id"], fields.get("client_secret", "")
    return None, ""


def _oauth_error(status: int, error: str, description: str) -> tuple[int, bytes]:
    return status, json.dumps({"error": error, "error_description": description}).encode()


def _handler_class(server: OAuthServer) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == JWKS_PATH:
                self._answer(*server._serve_jwks())
            else:
                self._answer(404, b'{"error": "not_found"}')

        def do_POST(self) -> None:
            if self.path != TOKEN_PATH:
                self._answer(404, b'{"error": "not_found"}')
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_REQUEST_BODY_BYTES:
                self._answer(*_oauth_error(400, "invalid_request", "bad Content-Length"))
                return
            self._answer(*server._serve_token(self.headers.get("Authorization"), self.rfile.read(length)))

        def _answer(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="netkafka-test"')
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:
            # The test run's output is no place for an access log; token_requests() counts.
            pass

    return Handler
