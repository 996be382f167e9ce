"""SASL/OAUTHBEARER (RFC 7628) with Kafka's extensions, and token providers.

The client's one message (^A is the byte 0x01; extensions sorted by key)::

    n,,^Aauth=Bearer <token>[^A<key>=<value>]...^A^A

The broker answers empty bytes on success.  On a bad token it answers a JSON error
instead; RFC 7628 has the client answer that with a lone ^A, and the broker then fails
the SaslAuthenticate request (the connection raises SaslAuthenticationFailedError with
the broker's message).  The characters allowed are the broker's: a token of
``[-_.A-Za-z0-9]`` (a JWT, or MSK's signed URL), extension keys of letters, values of
printable ASCII, space and tab/CR/LF, and no ``auth`` key.

Tokens come from ``sasl_oauth_token_provider``: any object with ``token() -> str`` and
optionally ``extensions() -> dict[str, str]`` (kafka-python's AbstractTokenProvider
interface; its subclasses work as they are).  Both are called from
``OAuthBearerMechanism.prepare()``, i.e. on the connection's setup thread, never on an
I/O thread, once per authentication and possibly from several connections at once: a
provider must be thread-safe and should cache its token.

``OidcClientCredentialsProvider`` is the built-in provider: the OAuth 2 client
credentials grant against an OIDC token endpoint (what Java's
OAuthBearerLoginCallbackHandler does with ``sasl.oauthbearer.token.endpoint.url``).
"""
import abc
import base64
import binascii
import http.client
import json
import logging
import math
import random
import re
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from netkafka.client.sasl import SaslMechanism, setting
from netkafka.errors import OAuthTokenError, SaslAuthenticationFailedError, SaslConfigError

log = logging.getLogger(__name__)

SEPARATOR = "\x01"
# The broker's patterns (OAuthBearerClientInitialResponse): what it accepts, we send.
_TOKEN = re.compile(r"[-_.A-Za-z0-9]+")
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")
_RESERVED_KEY = "auth"
# A lifetime in a string: ASCII digits only (str.isdigit takes other scripts' too), few
# enough for int() to read (beyond a day, the lifetime is cut to MAX_TOKEN_LIFETIME_S).
_DIGITS = re.compile(r"[0-9]{1,30}")

# Java's default sasl.login.refresh.window.factor: a token is replaced once this
# fraction of its lifetime has passed.
DEFAULT_REFRESH_WINDOW_FACTOR = 0.8
# Java's sasl.login.refresh.window.jitter: up to this fraction of the lifetime is added at
# random, so that clients started together do not all ask the endpoint at one instant.
DEFAULT_REFRESH_WINDOW_JITTER = 0.05
# A token endpoint's answer is a small JSON object; more than this is refused unread.
MAX_TOKEN_RESPONSE_BYTES = 1 << 20
# The longest a token is cached, whatever lifetime its endpoint or its exp claim states:
# the longest access-token lifetime the common identity providers allow by default is a
# day.  A longer one (an opaque token with expires_in 1e300, or a typo) would be kept
# and trusted practically for ever, never fetched again, never checked against its
# endpoint; refreshed at least daily, it costs one request a day.
MAX_TOKEN_LIFETIME_S = 24 * 3600


def client_first_message(token, extensions=None, source="the token provider"):
    """The OAUTHBEARER client message for ``token`` and ``extensions``.

    Raises:
        OAuthTokenError: the token is not a str of the characters the broker accepts
            (the error names ``source``).
        SaslConfigError: an extension key or value the broker would refuse.
    """
    check_token(token, source)
    parts = [f"auth=Bearer {token}"]
    for key, value in sorted(check_extensions(extensions or {}).items()):
        parts.append(f"{key}={value}")
    return ("n,," + SEPARATOR + SEPARATOR.join(parts) + SEPARATOR + SEPARATOR).encode("ascii")


def check_token(token, source):
    """Raise OAuthTokenError naming ``source`` unless ``token`` is a str the broker
    accepts as a bearer token."""
    if not isinstance(token, str):
        raise OAuthTokenError(f"{source} returned a {type(token).__name__}, not a str token")
    if not _TOKEN.fullmatch(token):
        # The token itself is a secret: say what is wrong with it, not what it is.
        bad = sorted({c for c in token if not _TOKEN.fullmatch(c)})
        raise OAuthTokenError(
            f"{source} returned an empty token" if not token else
            f"{source} returned a token with characters Kafka does not accept in a bearer "
            f"token: {''.join(bad)!r} (allowed: A-Z a-z 0-9 - _ .)")


def check_extensions(extensions):
    """``extensions`` if every key and value is one the broker accepts, else
    SaslConfigError naming the extension."""
    if not isinstance(extensions, dict):
        raise SaslConfigError(
            f"OAUTHBEARER extensions must be a dict of str to str, not "
            f"{type(extensions).__name__}")
    for key, value in extensions.items():
        if not isinstance(key, str) or not _EXTENSION_KEY.fullmatch(key):
            raise SaslConfigError(
                f"OAUTHBEARER extension name {key!r} is invalid: letters A-Z a-z only")
        if key == _RESERVED_KEY:
            raise SaslConfigError("OAUTHBEARER extension name 'auth' is reserved for the token")
        if not isinstance(value, str) or not _EXTENSION_VALUE.fullmatch(value):
            raise SaslConfigError(
                f"OAUTHBEARER extension {key!r} has an invalid value {value!r}: printable "
                f"ASCII, space, tab, CR or LF, at least one character")
    return extensions


class OAuthBearerMechanism(SaslMechanism):
    name = "OAUTHBEARER"
    settings_read = ("sasl_oauth_token_provider",)

    def __init__(self, token_provider):
        super().__init__()
        self._provider = token_provider
        # Set by prepare() on the setup thread, read by the I/O thread after the
        # hand-over; the I/O thread alone writes _failure.
        self._message = None
        self._failure = None  # the broker's JSON error, once it sent one

    @classmethod
    def check_settings(cls, settings):
        provider = setting(settings, "sasl_oauth_token_provider")
        if provider is None:
            raise SaslConfigError(
                "sasl_mechanism='OAUTHBEARER' needs sasl_oauth_token_provider: an object "
                "with token() (e.g. netkafka.client.sasl.oauthbearer."
                "OidcClientCredentialsProvider)")
        if not callable(getattr(provider, "token", None)):
            raise SaslConfigError(
                f"sasl_oauth_token_provider ({type(provider).__name__}) has no token() method")
        extensions = getattr(provider, "extensions", None)
        if extensions is not None and not callable(extensions):
            raise SaslConfigError(
                f"sasl_oauth_token_provider ({type(provider).__name__}).extensions is not "
                f"a method")

    @classmethod
    def from_settings(cls, settings, host):
        return cls(settings["sasl_oauth_token_provider"])

    def prepare(self):
        """Ask the provider for its token and extensions (may block: setup thread)."""
        name = type(self._provider).__name__
        try:
            token = self._provider.token()
            extensions = (self._provider.extensions()
                          if hasattr(self._provider, "extensions") else {})
        except OAuthTokenError:
            raise
        except Exception as exc:
            # Retriable: what a provider raises cannot be told apart from a passing
            # failure (its identity provider unreachable for a moment); the records wait
            # for it as for an unreachable broker, and time out naming it.
            raise OAuthTokenError(f"sasl_oauth_token_provider ({name}) failed: {exc!r}",
                                  retriable=True) from exc
        try:
            self._message = client_first_message(
                token, extensions, f"sasl_oauth_token_provider ({name}).token()")
        except SaslConfigError as exc:
            # Not a setting but what the provider returned: an OAuthTokenError, which
            # fails the records at once, as a bad token does -- every reconnect would
            # ask the provider and meet the same extensions.
            raise OAuthTokenError(
                f"sasl_oauth_token_provider ({name}).extensions() returned extensions the "
                f"broker would refuse: {exc}") from None

    def initial_response(self):
        if self._message is None:
            raise RuntimeError("OAUTHBEARER: prepare() must run before initial_response()")
        return self._message

    def evaluate(self, challenge):
        if self._failure is not None:
            # The broker must fail the request we answered its error with.
            raise SaslAuthenticationFailedError(
                f"OAUTHBEARER: the broker refused the token: {self._failure}")
        if challenge:
            self._failure = bytes(challenge).decode("utf-8", "replace")
            log.debug("OAUTHBEARER: the broker refused the token (%s); answering ^A",
                      self._failure)
            return SEPARATOR.encode("ascii")
        self._complete = True
        return None


class RefreshingTokenProvider(abc.ABC):
    """A token provider that caches its token and fetches a new one once
    ``refresh_window_factor`` of the token's lifetime, plus up to ``refresh_window_jitter``
    of it at random (Java's 0.8 and 0.05), has passed.

    Subclasses implement ``_fetch_token`` and set ``_source`` (named in errors) and
    ``_wait_s`` (how long ``token()`` waits for a fetch by default).  ``token()`` is
    thread-safe and at most one fetch runs at a time, on a thread of its own, never
    under ``_lock``: a fetch that hangs (an endpoint that accepts and never answers)
    keeps no caller beyond its timeout, and the later callers do not queue up behind
    it, each to fetch again.  A caller that finds the token due starts the fetch or,
    when one runs already, takes the cached token if it is still valid, else waits
    for that fetch (up to its timeout).  If a refresh fails, or has not answered in
    the caller's time, while the cached token has not expired yet, the cached token is
    returned (and that logged); the next call after a failure tries again.
    """

    _source = "the token provider"
    # Seconds token() waits for a fetch when its caller gives no timeout.
    _wait_s = 10.0

    def __init__(self, *, extensions=None, refresh_window_factor=DEFAULT_REFRESH_WINDOW_FACTOR,
                 refresh_window_jitter=DEFAULT_REFRESH_WINDOW_JITTER, clock=time.time):
        if not (isinstance(refresh_window_factor, (int, float))
                and 0 < refresh_window_factor <= 1):
            raise SaslConfigError(
                f"refresh_window_factor must be a number in (0, 1], not {refresh_window_factor!r}")
        # Java's bounds for sasl.login.refresh.window.jitter.
        if not (isinstance(refresh_window_jitter, (int, float))
                and 0 <= refresh_window_jitter <= 0.25):
            raise SaslConfigError(f"refresh_window_jitter must be a number in [0, 0.25], "
                                  f"not {refresh_window_jitter!r}")
        self._refresh_window_jitter = refresh_window_jitter
        self._extensions = dict(check_extensions(extensions or {}))
        self._refresh_window_factor = refresh_window_factor
        self._clock = clock  # wall-clock seconds: JWT exp claims are wall-clock times
        self._init_state()

    def _init_state(self):
        # A leaf lock: held only to read or change the state below, never during a fetch.
        self._lock = threading.Lock()
        self._fetched = threading.Condition(self._lock)  # notified when a fetch ends
        self._token = None  # guarded by _lock
        self._refresh_at_s = 0.0  # guarded by _lock
        self._expires_at_s = 0.0  # guarded by _lock
        # Guarded by _lock: fetches started and ended (one runs while they differ), and
        # the error of the last one to end, None when it brought a token.
        self._fetches_started = 0
        self._fetches_ended = 0
        self._fetch_error = None

    def __getstate__(self):
        """Pickled (netkafka.spark's settings travel to the executors in the sink or
        emitter) without the lock and the cached token: each copy fetches its own."""
        state = self.__dict__.copy()
        for name in ("_lock", "_fetched", "_token", "_refresh_at_s", "_expires_at_s",
                     "_fetches_started", "_fetches_ended", "_fetch_error"):
            del state[name]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_state()

    @abc.abstractmethod
    def _fetch_token(self, now_s):
        """A new token and the wall-clock second it expires at: ``(token, expires_at_s)``.
        Raises OAuthTokenError naming ``_source`` when there is none to be had.  Runs on
        the fetch thread, without the lock."""

    def token(self, timeout_s=None):
        """The cached token, or a fresh one when it is due (may block: setup thread).

        Args:
            timeout_s: seconds to wait for a fetch (started by this call, or running
                already when no valid token is cached); None: the provider's own.

        Raises:
            OAuthTokenError: the fetch failed, or (retriable) did not end within
                timeout_s, and no valid token is cached.
        """
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(
                timeout_s, (int, float)) or not timeout_s >= 0):
            raise ValueError(f"timeout_s must be a number >= 0 or None, got {timeout_s!r}")
        wait_s = self._wait_s if timeout_s is None else timeout_s
        deadline_s = time.monotonic() + wait_s
        with self._lock:
            now_s = self._clock()
            if self._token is not None and now_s < self._refresh_at_s:
                return self._token
            if self._fetches_started == self._fetches_ended:
                self._fetches_started += 1
                try:
                    threading.Thread(target=self._fetch, args=(now_s,), daemon=True,
                                     name="netkafka-token-fetch").start()
                except BaseException:
                    self._fetches_started -= 1  # none runs: the next call starts one
                    raise
            elif self._token is not None and now_s < self._expires_at_s:
                return self._token  # being refreshed; still valid meanwhile
            awaited = self._fetches_started
            while self._fetches_ended < awaited:
                remaining_s = deadline_s - time.monotonic()
                if remaining_s <= 0:
                    break
                self._fetched.wait(remaining_s)
            if self._fetches_ended < awaited:
                problem = OAuthTokenError(f"{self._source}: no token within {wait_s:g} s: "
                                          f"its fetch has not ended", url=self._url(),
                                          retriable=True)
            else:
                problem = self._fetch_error  # of the last fetch to end, this one or later
            if problem is None:
                return self._token
            now_s = self._clock()
            if self._token is not None and now_s < self._expires_at_s:
                log.warning("%s: refreshing the token failed (%s); the cached one is "
                            "valid for %.0f s more", self._source, problem,
                            self._expires_at_s - now_s)
                return self._token
            raise problem

    def _fetch(self, now_s):
        """The fetch thread: one _fetch_token call, its outcome kept under the lock."""
        try:
            token, expires_at_s = self._fetch_token(now_s)
            check_token(token, self._source)
            lifetime_s = expires_at_s - now_s
            if lifetime_s <= 0:
                raise OAuthTokenError(f"{self._source} returned a token that has already "
                                      f"expired ({-lifetime_s:.0f} s ago)", url=self._url())
            if lifetime_s > MAX_TOKEN_LIFETIME_S:
                log.info("%s: the token's stated lifetime of %.0f s is beyond %d s; it is "
                         "refreshed as if it ended then", self._source, lifetime_s,
                         MAX_TOKEN_LIFETIME_S)
                lifetime_s = MAX_TOKEN_LIFETIME_S
                expires_at_s = now_s + lifetime_s
            error = None
        except Exception as exc:  # noqa: BLE001 -- raised to the callers waiting for it
            error = exc
        with self._lock:
            self._fetches_ended += 1
            self._fetch_error = error
            if error is None:
                self._token = token
                self._expires_at_s = expires_at_s
                # Never beyond the expiry, whatever factor and jitter add up to.
                fraction = min(1.0, self._refresh_window_factor
                               + self._refresh_window_jitter * random.random())
                self._refresh_at_s = now_s + lifetime_s * fraction
            self._fetched.notify_all()

    def extensions(self):
        """The SASL extensions given at construction."""
        return dict(self._extensions)

    def _url(self):
        return None


class OidcClientCredentialsProvider(RefreshingTokenProvider):
    """Tokens from an OAuth 2 / OIDC token endpoint by the client credentials grant.

    Args:
        token_endpoint_url: the endpoint (http or https) that issues the tokens.
        client_id: the client's id at the identity provider.
        client_secret: the client's secret.
        scope: the scope to ask for, or None to ask for the default.
        extensions: SASL extensions sent with the token (e.g. Confluent Cloud's
            ``logicalCluster`` and ``identityPoolId``).
        refresh_window_factor: fetch a new token once this fraction of the token's
            lifetime has passed (default 0.8, Java's).
        refresh_window_jitter: plus up to this fraction of it at random, so that clients
            started together refresh apart (default 0.05, Java's; 0 to 0.25).
        timeout_s: the HTTP request's timeout, in seconds, and how long ``token()``
            waits for a fetch unless its caller says otherwise.
        ssl_context: the TLS context for an https endpoint (default: the system's
            trust store, host name checked).
        clock: wall-clock time in seconds (tests inject one).

    The request is a POST of ``grant_type=client_credentials`` (and ``scope``) with
    the client id and secret in an HTTP Basic Authorization header, as Java's
    HttpAccessTokenRetriever sends it.  The token's lifetime is the answer's
    ``expires_in`` or the JWT's ``exp`` claim, the earlier if both are there (the
    claim is read, not verified: verifying is the broker's job), and a day at most
    (MAX_TOKEN_LIFETIME_S).  HTTP runs on a
    fetch thread of its own, one at a time (see RefreshingTokenProvider).
    """

    def __init__(self, token_endpoint_url, client_id, client_secret, scope=None, *,
                 extensions=None, refresh_window_factor=DEFAULT_REFRESH_WINDOW_FACTOR,
                 refresh_window_jitter=DEFAULT_REFRESH_WINDOW_JITTER,
                 timeout_s=10.0, ssl_context=None, clock=time.time):
        super().__init__(extensions=extensions, refresh_window_factor=refresh_window_factor,
                         refresh_window_jitter=refresh_window_jitter, clock=clock)
        scheme = urllib.parse.urlsplit(token_endpoint_url).scheme if isinstance(
            token_endpoint_url, str) else None
        if scheme not in ("http", "https"):
            raise SaslConfigError(
                f"token_endpoint_url must be an http or https URL, not {token_endpoint_url!r}")
        for name, value in (("client_id", client_id), ("client_secret", client_secret)):
            if not isinstance(value, str) or not value:
                raise SaslConfigError(f"{name} must be a non-empty str")
        if scope is not None and not isinstance(scope, str):
            raise SaslConfigError(f"scope must be a str or None, not {type(scope).__name__}")
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise SaslConfigError(f"timeout_s must be a positive number, not {timeout_s!r}")
        self.token_endpoint_url = token_endpoint_url
        self._source = f"token endpoint {token_endpoint_url}"
        credentials = f"{client_id}:{client_secret}".encode("utf-8")
        self._headers = {
            "Authorization": "Basic " + base64.b64encode(credentials).decode("ascii"),
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
            "Cache-Control": "no-cache",
        }
        form = {"grant_type": "client_credentials"}
        if scope:
            form["scope"] = scope
        self._body = urllib.parse.urlencode(form).encode("ascii")
        # A fetch is one HTTP request, and token() waits for one as long by default.
        self._wait_s = timeout_s
        self._ssl_context = ssl_context

    def _url(self):
        return self.token_endpoint_url

    def _fail(self, message, status=None, retriable=None):
        return OAuthTokenError(f"{self._source}: {message}", url=self.token_endpoint_url,
                               status=status, retriable=retriable)

    def _fetch_token(self, now_s):
        request = urllib.request.Request(self.token_endpoint_url, data=self._body,
                                         headers=self._headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self._wait_s,
                                        context=self._ssl_context) as answer:
                body = answer.read(MAX_TOKEN_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            detail = exc.read(500).decode("utf-8", "replace").strip()
            raise self._fail(f"HTTP {exc.code} {exc.reason}" + (f": {detail}" if detail else ""),
                             status=exc.code) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ssl.SSLCertVerificationError):
                # The same certificate at every try: failing at once, as a refused secret.
                raise self._fail(f"its TLS certificate did not verify: {reason} (trust its "
                                 f"CA through the provider's ssl_context)",
                                 retriable=False) from None
            raise self._fail(f"no answer: {reason}") from None
        if len(body) > MAX_TOKEN_RESPONSE_BYTES:
            raise self._fail(f"answer larger than {MAX_TOKEN_RESPONSE_BYTES} bytes", status=200)
        try:
            answer = json.loads(body)
        except ValueError:
            raise self._fail(_not_json(body), status=200) from None
        if not isinstance(answer, dict) or not isinstance(answer.get("access_token"), str):
            keys = sorted(answer) if isinstance(answer, dict) else type(answer).__name__
            raise self._fail(f"answer has no access_token (found: {keys})", status=200)
        token = answer["access_token"]
        expiries = []
        stated = answer.get("expires_in")
        if stated is not None:
            expires_in = _digits_as_int(stated)
            if not _finite(expires_in) or expires_in <= 0:
                raise self._fail(f"expires_in {stated!r} is not a positive, finite number "
                                 f"nor a string of digits", status=200)
            expiries.append(now_s + expires_in)
        exp = jwt_expiry_s(token)
        if exp is not None:
            expiries.append(exp)
        if not expiries:
            raise self._fail("the token's lifetime is unknown: the answer has no expires_in "
                             "and the token is not a JWT with an exp claim", status=200)
        return token, min(expiries)


def _not_json(body):
    """Why an answer that is not JSON was refused: its first bytes (an HTML error page
    says what went wrong), unless it names access_token -- form-encoded, or JSON but not
    quite --, whose token is a secret that errors and logs must not carry: then its
    field names at most.  Asked of the bytes, not of a parse: one that failed (a
    trailing &, a byte beyond ASCII) quoted the token."""
    if b"access_token" not in body:
        return f"answer is not JSON: {body[:100]!r}"
    try:
        fields = urllib.parse.parse_qsl(body.decode("ascii"), keep_blank_values=True,
                                        strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        return ("answer is not JSON, and names access_token (its bytes withheld): the "
                "endpoint must answer JSON (RFC 6749)")
    names = ", ".join(name for name, _ in fields)
    return (f"answer is not JSON but form-encoded (fields: {names}; their values "
            f"withheld): the endpoint must answer JSON (RFC 6749)")


def jwt_expiry_s(token):
    """The ``exp`` claim (seconds since the epoch) of a JWT, or None when ``token`` is
    not a JWT with a finite numeric exp.  The signature is not checked."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if _finite(exp) else None


def _digits_as_int(value):
    """``value`` as an int when it is a str of ASCII digits, else as it is: RFC 6749 has
    expires_in a JSON number, but some identity providers (Azure AD's v1 endpoints)
    send it as a string ("3600")."""
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    return value


def _finite(value):
    """True for a JSON number that is finite: Python's json reads Infinity and NaN, and
    a lifetime of either would never refresh the token, or refresh it at every call."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond a float's range: no time a token lives to
        return False
