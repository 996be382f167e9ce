"""SASL/GSSAPI (Kerberos, RFC 4752) through the ``gssapi`` library (extra ``gssapi``).

The exchange, each step one SaslAuthenticate request and answer:

1. security context: the client's Kerberos tokens for the service principal
   ``<sasl_kerberos_service_name>@<broker host>`` (the host is
   ``sasl_kerberos_domain_name`` when set), answered by the broker's, until the
   context is established (mutual authentication: the broker proves itself too);
2. security layer: the broker sends a wrapped 4-byte message (the layers it offers,
   its maximum buffer size); the client answers, wrapped, "no security layer"
   (Kafka uses none), a maximum buffer size of 0 (RFC 4752 requires 0 without a
   layer) and the authorization id: the client's own principal, as the Java client
   sends it;
3. the broker answers empty bytes: done.

The client's credentials are the usual Kerberos ones: the ticket cache (``kinit``) or
the keytab in KRB5_CLIENT_KTNAME.  ``prepare()`` builds the context and its first token,
which may ask the KDC for a service ticket: it runs on the setup thread.
"""
import importlib

from netkafka.client.sasl import SASL_DEFAULTS, SaslMechanism, setting
from netkafka.errors import SaslAuthenticationFailedError, SaslConfigError, SaslLibraryMissingError

# RFC 4752 security layer bits: Kafka speaks only the first.
_NO_SECURITY_LAYER = 1
_LAYER_MESSAGE_BYTES = 4

# Exchange steps, in order.
_CONTEXT, _LAYER, _EXPECT_END, _DONE = range(4)


def import_gssapi():
    """The ``gssapi`` module, or SaslLibraryMissingError saying how to install it."""
    try:
        return importlib.import_module("gssapi")
    except ImportError as exc:  # also the library's own, when libgssapi_krb5 is missing
        raise SaslLibraryMissingError(
            f"sasl_mechanism='GSSAPI' needs the gssapi library: pip install "
            f"'netkafka[gssapi]' (it needs MIT Kerberos' libgssapi_krb5; building it needs "
            f"krb5-config, e.g. the libkrb5-dev package): {exc}") from exc


class GssapiMechanism(SaslMechanism):
    name = "GSSAPI"
    settings_read = ("sasl_kerberos_name", "sasl_kerberos_service_name",
                     "sasl_kerberos_domain_name")

    def __init__(self, service_name):
        """``service_name``: the broker's service principal as a host-based service
        name (``kafka@broker1.example.com``), or a gssapi.Name."""
        super().__init__()
        self._gssapi = import_gssapi()
        if isinstance(service_name, self._gssapi.Name):
            self._target = service_name
        else:
            self._target = self._gssapi.Name(
                service_name, name_type=self._gssapi.NameType.hostbased_service)
        # Built by prepare() on the setup thread, then used by the I/O thread alone.
        self._context = None
        self._first_token = None
        self._step = _CONTEXT

    @classmethod
    def check_settings(cls, settings):
        gssapi = import_gssapi()
        name = setting(settings, "sasl_kerberos_name")
        if name is not None and not isinstance(name, (str, gssapi.Name)):
            raise SaslConfigError(
                f"sasl_kerberos_name must be a str or gssapi.Name, not {type(name).__name__}")
        if name is not None:
            # The full principal: the service and domain names would be ignored.
            for other in ("sasl_kerberos_service_name", "sasl_kerberos_domain_name"):
                if setting(settings, other) != SASL_DEFAULTS[other]:
                    raise SaslConfigError(
                        f"sasl_kerberos_name and {other} are both set: sasl_kerberos_name "
                        f"names the broker's whole principal; give one or the other")
        else:
            service = setting(settings, "sasl_kerberos_service_name")
            if not isinstance(service, str) or not service or "@" in service:
                raise SaslConfigError(
                    f"sasl_kerberos_service_name must be the broker's service name without "
                    f"a host (e.g. 'kafka'), not {service!r}")
            domain = setting(settings, "sasl_kerberos_domain_name")
            if domain is not None and (not isinstance(domain, str) or not domain):
                raise SaslConfigError(
                    f"sasl_kerberos_domain_name must be a host name or None, not {domain!r}")

    @classmethod
    def from_settings(cls, settings, host):
        name = setting(settings, "sasl_kerberos_name")
        if name is None:
            service = setting(settings, "sasl_kerberos_service_name")
            name = f"{service}@{setting(settings, 'sasl_kerberos_domain_name') or host}"
        return cls(name)

    def prepare(self):
        """Build the security context and its first token (may reach the KDC)."""
        try:
            self._context = self._gssapi.SecurityContext(
                name=self._target, mech=self._gssapi.MechType.kerberos, usage="initiate")
            self._first_token = self._context.step()
        except self._gssapi.exceptions.GSSError as exc:
            raise SaslAuthenticationFailedError(
                f"GSSAPI: no Kerberos token for {self._target}: {exc}") from exc
        if self._context.complete:
            # Without mutual authentication the broker has nothing to prove: its first
            # answer is already the security layer offer.
            self._step = _LAYER

    def initial_response(self):
        if self._context is None:
            raise RuntimeError("GSSAPI: prepare() must run before initial_response()")
        return self._first_token or b""

    def evaluate(self, challenge):
        try:
            if self._step == _CONTEXT:
                token = self._context.step(bytes(challenge))
                if self._context.complete:
                    self._step = _LAYER
                return token or b""
            if self._step == _LAYER:
                self._step = _EXPECT_END
                return self._answer_layers(bytes(challenge))
        except self._gssapi.exceptions.GSSError as exc:
            raise SaslAuthenticationFailedError(f"GSSAPI with {self._target}: {exc}") from exc
        if self._step != _EXPECT_END:
            raise SaslAuthenticationFailedError("GSSAPI: evaluate() after the exchange ended")
        if challenge:
            raise SaslAuthenticationFailedError(
                f"GSSAPI: {len(challenge)} unexpected bytes after the security layer was agreed")
        self._step = _DONE
        self._complete = True
        return None

    def _answer_layers(self, challenge):
        offer = self._context.unwrap(challenge).message
        if len(offer) != _LAYER_MESSAGE_BYTES:
            raise SaslAuthenticationFailedError(
                f"GSSAPI: the broker's security layer message has {len(offer)} bytes, "
                f"not {_LAYER_MESSAGE_BYTES}")
        if not offer[0] & _NO_SECURITY_LAYER:
            raise SaslAuthenticationFailedError(
                f"GSSAPI: the broker offers security layers {offer[0]:#04x} without "
                f"'none', the only one Kafka clients speak")
        authzid = str(self._context.initiator_name).encode("utf-8")
        reply = bytes((_NO_SECURITY_LAYER, 0, 0, 0)) + authzid
        return self._context.wrap(reply, False).message
