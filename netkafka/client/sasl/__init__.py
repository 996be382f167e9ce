"""SASL mechanisms behind one small interface, and the registry the connection asks.

A SASL_PLAINTEXT or SASL_SSL connection, once its transport is up, sends SaslHandshake
naming ``mechanism.name`` and then one SaslAuthenticate request per message of the
mechanism's exchange.  The connection never names a mechanism: it asks the registry
for one built from the producer's settings and drives it through this loop::

    mechanism = create_mechanism(settings, host)    # cheap, any thread
    mechanism.prepare()                             # setup thread: may block
    out = mechanism.initial_response()              # I/O thread from here on
    while out is not None:
        answer = <SaslAuthenticate(out)>            # error code -> SaslAuthenticationFailedError
        out = mechanism.evaluate(answer.auth_bytes)
    # mechanism.is_complete is now True
    delay_ms = mechanism.reauthenticate_after_ms(answer.session_lifetime_ms)

Threads: ``prepare()`` does whatever may block (an HTTP call to a token endpoint, a
Kerberos ticket from the KDC, AWS credentials) and is called on the connection's setup
thread -- the one that resolves DNS -- never on an I/O thread.  The object is then
handed to the I/O thread that owns the socket, which alone calls ``initial_response``,
``evaluate`` and ``reauthenticate_after_ms``: they only compute (SCRAM's key derivation,
a few milliseconds at Kafka's highest iteration count, is the most expensive).  One
mechanism object serves one exchange; a KIP-368 re-authentication builds a new one.

Settings are a mapping with kafka-python's names (``sasl_mechanism``,
``sasl_plain_username``, ...; missing names take the defaults in SASL_DEFAULTS), and
the Java client's ``sasl_jaas_config``: the PLAIN or SCRAM login module's username and
password in one string, as Spark and properties files pass them (jaas.py).
``check_sasl_settings`` is what the Producer calls at construction: each mechanism
checks its own settings, so a bad one is refused there, naming the setting, not at the
first connection.
"""
import abc
import random

from netkafka.client.sasl import jaas
from netkafka.errors import SaslConfigError

# kafka-python's SASL settings and their defaults (None: not given).
SASL_DEFAULTS = {
    "sasl_mechanism": None,
    "sasl_plain_username": None,
    "sasl_plain_password": None,
    "sasl_kerberos_name": None,
    "sasl_kerberos_service_name": "kafka",
    "sasl_kerberos_domain_name": None,
    "sasl_oauth_token_provider": None,
    # netkafka's, the Java client's sasl.jaas.config: instead of the two above.
    "sasl_jaas_config": None,
}
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
NON_SASL_PROTOCOLS = ("PLAINTEXT", "SSL")

# KIP-368 as the Java client does it: re-authenticate after 85% of the session the
# broker granted (room for network latency and clock drift) plus up to 10% of random
# jitter, so that connections made together do not all re-authenticate together.
REAUTH_WINDOW_FRACTION = 0.85
REAUTH_JITTER_FRACTION = 0.10

# Names that users of other clients may try, with what to use here instead.
_MECHANISM_HINTS = {
    "AWS_MSK_IAM": "for MSK IAM use sasl_mechanism='OAUTHBEARER' with sasl_oauth_token_provider="
                   "netkafka.client.sasl.msk_iam.MskIamTokenProvider(region)",
}


def setting(settings, name):
    """The value of SASL setting ``name`` in ``settings``, or its default."""
    return settings.get(name, SASL_DEFAULTS[name])


def _require_text(settings, name, mechanism):
    """The value of setting ``name``: a non-empty str, or SaslConfigError naming it."""
    value = setting(settings, name)
    if value is None:
        raise SaslConfigError(f"sasl_mechanism={mechanism!r} needs {name}")
    if not isinstance(value, str) or not value:
        # The type only, never the value: it may be a password.
        found = "an empty str" if value == "" else f"a {type(value).__name__}"
        raise SaslConfigError(
            f"{name} must be a non-empty str for sasl_mechanism={mechanism!r}, not {found}")
    return value


class SaslMechanism(abc.ABC):
    """One SASL exchange with one broker: an authentication or a re-authentication.

    Subclasses set ``name`` (the name in SaslHandshake and in ``sasl_mechanism``) and
    implement the classmethods ``check_settings`` and ``from_settings`` and the
    exchange.  ``_complete`` is set by ``evaluate`` on the I/O thread once the broker's
    last message is accepted.
    """

    name = None
    # The SASL settings (SASL_DEFAULTS names) this mechanism reads besides
    # sasl_mechanism: check_sasl_settings refuses the others when set, since they
    # would be ignored.  A mechanism that does not say is taken to read them all.
    settings_read = tuple(SASL_DEFAULTS)

    def __init__(self):
        self._complete = False  # owned by the I/O thread (see the module docstring)

    @classmethod
    @abc.abstractmethod
    def check_settings(cls, settings):
        """Raise SaslConfigError (or SaslLibraryMissingError) naming the setting that is
        missing or wrong for this mechanism; return None when all is well."""

    @classmethod
    @abc.abstractmethod
    def from_settings(cls, settings, host):
        """A new exchange with the broker at ``host`` (its name as configured, for the
        mechanisms that address the broker: GSSAPI's service principal).  Settings
        passed check_settings."""

    def prepare(self):
        """Blocking work before the first message (token, ticket, credentials).
        Called on the setup thread, never on an I/O thread; the default does nothing."""

    @abc.abstractmethod
    def initial_response(self):
        """The bytes of the first SaslAuthenticate request."""

    @abc.abstractmethod
    def evaluate(self, challenge):
        """Take the broker's ``auth_bytes`` from a successful SaslAuthenticate answer.

        Returns:
            The bytes of the next SaslAuthenticate request, or None when the exchange is
            complete (``is_complete`` is then True).

        Raises:
            SaslAuthenticationFailedError: the broker's bytes prove that the exchange
                failed (a SCRAM server signature that does not verify, an error the
                broker sent inside the exchange), or are not what this step expects.
        """

    @property
    def is_complete(self):
        """True once the broker's last message has been accepted."""
        return self._complete

    def reauthenticate_after_ms(self, session_lifetime_ms, jitter=random.random):
        """KIP-368: how long after this exchange to re-authenticate.

        Args:
            session_lifetime_ms: SessionLifetimeMs of the last SaslAuthenticate answer
                (v1+; 0 when the broker does not re-authenticate, or before v1).
            jitter: a function returning a float in [0, 1) (tests fix it).

        Returns:
            Milliseconds until the next re-authentication (85% to 95% of the lifetime),
            or None when the broker set no lifetime.
        """
        if session_lifetime_ms <= 0:
            return None
        fraction = REAUTH_WINDOW_FRACTION + REAUTH_JITTER_FRACTION * jitter()
        return max(1, int(session_lifetime_ms * fraction))


class PasswordMechanism(SaslMechanism):
    """A mechanism that authenticates with sasl_plain_username and sasl_plain_password,
    or the same from sasl_jaas_config (PLAIN, SCRAM): subclasses take ``(username,
    password)`` and check what their encoding needs of them in ``check_credentials``."""

    settings_read = ("sasl_plain_username", "sasl_plain_password", "sasl_jaas_config")

    @classmethod
    def check_settings(cls, settings):
        cls.check_credentials(*cls.credentials(settings))

    @classmethod
    def credentials(cls, settings):
        """``(username, password)``: the two settings, or sasl_jaas_config's.

        Raises:
            SaslConfigError: neither way given, both, or a malformed value (named).
        """
        jaas_config = setting(settings, "sasl_jaas_config")
        if jaas_config is None:
            return (_require_text(settings, "sasl_plain_username", cls.name),
                    _require_text(settings, "sasl_plain_password", cls.name))
        given = [name for name in ("sasl_plain_username", "sasl_plain_password")
                 if setting(settings, name) is not None]
        if given:
            # Two sources of one credential: which one wins would be a guess.
            raise SaslConfigError(
                f"sasl_jaas_config and {' and '.join(given)} are both set: give the "
                f"username and password one way")
        return jaas.credentials_from_jaas(jaas_config, cls.name)

    @classmethod
    def check_credentials(cls, username, password):
        """Raise SaslConfigError naming the setting whose value this mechanism cannot
        carry; the default accepts any non-empty str."""

    @classmethod
    def from_settings(cls, settings, host):
        return cls(*cls.credentials(settings))


# name -> SaslMechanism subclass; filled at import time below, read-only afterwards
# (so any thread may read it without a lock).
_REGISTRY = {}


def register_mechanism(cls, *, replace=False):
    """Make ``cls`` (a SaslMechanism subclass) available under ``cls.name``.

    Raises:
        ValueError: the name is taken (and replace is False), or cls is not a mechanism.
    """
    if not (isinstance(cls, type) and issubclass(cls, SaslMechanism) and cls.name):
        raise ValueError(f"{cls!r} is not a SaslMechanism subclass with a name")
    if cls.name in _REGISTRY and not replace:
        raise ValueError(f"a SASL mechanism named {cls.name!r} is already registered "
                         f"({_REGISTRY[cls.name].__qualname__})")
    _REGISTRY[cls.name] = cls
    return cls


def mechanism_names():
    """The registered mechanism names, sorted."""
    return sorted(_REGISTRY)


def mechanism_class(name):
    """The registered class for ``sasl_mechanism=name``.

    Raises:
        SaslConfigError: no mechanism of that name (the known ones are listed).
    """
    cls = _REGISTRY.get(name)
    if cls is not None:
        return cls
    hint = _MECHANISM_HINTS.get(name)
    if hint is None and isinstance(name, str) and name.upper() in _REGISTRY:
        hint = f"mechanism names are upper case: {name.upper()!r}"
    raise SaslConfigError(
        f"sasl_mechanism={name!r} is not a SASL mechanism netkafka knows; known: "
        f"{', '.join(mechanism_names())}" + (f" ({hint})" if hint else ""))


def create_mechanism(settings, host):
    """A new exchange for the mechanism named by ``settings['sasl_mechanism']`` with
    the broker at ``host``; settings passed check_sasl_settings."""
    return mechanism_class(setting(settings, "sasl_mechanism")).from_settings(settings, host)


def check_sasl_settings(settings, security_protocol="PLAINTEXT"):
    """Check the SASL settings as the Producer is built.

    Args:
        settings: a mapping with kafka-python's names (the other names in it are
            ignored here).
        security_protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.

    Raises:
        SaslConfigError: naming the setting: a SASL protocol without sasl_mechanism, an
            unknown mechanism, missing or malformed credentials for it, a token
            provider without token(); or a SASL setting given with a protocol that
            does not use SASL, or with a mechanism that does not read it (it would be
            silently ignored).
        SaslLibraryMissingError: the mechanism needs an optional library that is not
            installed.
    """
    if security_protocol not in SASL_PROTOCOLS:
        if security_protocol not in NON_SASL_PROTOCOLS:
            raise SaslConfigError(
                f"security_protocol={security_protocol!r} is not one of "
                f"{', '.join(NON_SASL_PROTOCOLS + SASL_PROTOCOLS)}")
        for name, default in SASL_DEFAULTS.items():
            if settings.get(name, default) != default:
                raise SaslConfigError(
                    f"{name} is set but security_protocol={security_protocol!r} does not "
                    f"use SASL: use SASL_PLAINTEXT or SASL_SSL, or drop {name}")
        return
    name = setting(settings, "sasl_mechanism")
    if name is None:
        raise SaslConfigError(
            f"security_protocol={security_protocol!r} needs sasl_mechanism, one of "
            f"{', '.join(mechanism_names())}")
    cls = mechanism_class(name)
    if setting(settings, "sasl_jaas_config") is not None and not issubclass(
            cls, PasswordMechanism):
        # The other mechanisms' login modules hold keytabs, token endpoints or AWS
        # roles, which their own settings carry here.
        raise SaslConfigError(
            f"sasl_jaas_config is read for the PLAIN and SCRAM login modules only, not "
            f"for sasl_mechanism={name!r}: give that mechanism's settings instead "
            f"(sasl_kerberos_* for GSSAPI, sasl_oauth_token_provider for OAUTHBEARER)")
    for other, default in SASL_DEFAULTS.items():
        if (other != "sasl_mechanism" and other not in cls.settings_read
                and settings.get(other, default) != default):
            # Most likely meant for another mechanism: used with this one it would be
            # silently ignored, and the exchange fail or authenticate someone else.
            raise SaslConfigError(
                f"{other} is set but sasl_mechanism={name!r} does not use it: drop it, or "
                f"choose the mechanism it belongs to")
    cls.check_settings(settings)


# The mechanisms.  Imported here, after the interface they build on, so that importing
# the package registers all of them; the optional libraries (gssapi, AWS's signer) are
# imported only when their mechanism or provider is used.
from netkafka.client.sasl import gssapi, oauthbearer, plain, scram  # noqa: E402

register_mechanism(plain.PlainMechanism)
register_mechanism(scram.ScramSha256Mechanism)
register_mechanism(scram.ScramSha512Mechanism)
register_mechanism(oauthbearer.OAuthBearerMechanism)
register_mechanism(gssapi.GssapiMechanism)
