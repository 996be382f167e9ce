"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), through ``scramp``.

Four messages, two each way, each one SaslAuthenticate request or answer:

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce + server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<proof>
    server-final   v=<server signature>          (checked: the broker knows the key)

scramp builds and parses the messages and verifies the server signature.  One limit is
added here: Kafka stores SCRAM credentials with 4096 to 16384 iterations (its
ScramMechanism bounds), so a server-first message asking for more is refused before the
key derivation runs -- a hostile broker could otherwise make every connection burn CPU
(scramp alone allows ten million).

Deviation from the Java client: scramp applies SASLprep (RFC 4013) to the username and
password, as the RFC says; Java uses them as given (their UTF-8), and so do the brokers'
stored credentials.  They differ only for text with characters SASLprep maps or forbids
(non-ASCII spaces, control characters, compatibility forms such as a full-width digit, a
soft hyphen): such a username or password is refused at construction, naming the
setting -- taken, it was changed before the key was derived, and the broker answered
"invalid credentials" to a correct password.
"""
import scramp
from scramp.core import saslprep  # 1.4 and 1.5 alike (1.5 moved it to scramp.utils)

from netkafka.client.sasl import PasswordMechanism
from netkafka.errors import SaslAuthenticationFailedError, SaslConfigError

# Kafka's own bounds on a SCRAM credential's iteration count.
KAFKA_MIN_ITERATIONS = 4096
KAFKA_MAX_ITERATIONS = 16384

# Exchange steps, in order.
_EXPECT_SERVER_FIRST, _EXPECT_SERVER_FINAL, _DONE = range(3)


class ScramMechanism(PasswordMechanism):
    """The SCRAM exchange; the subclasses name the hash."""

    def __init__(self, username, password):
        super().__init__()
        # Owned by the I/O thread, like the exchange state.
        self._client = scramp.ScramClient([self.name], username, password)
        self._client_first = self._client.get_client_first().encode("utf-8")
        self._step = _EXPECT_SERVER_FIRST

    @classmethod
    def check_credentials(cls, username, password):
        # scramp refuses what SASLprep forbids when a client is made: made here with
        # one real value at a time, the error names the setting at fault.
        cls._check_saslprep("sasl_plain_username", username, username, "x")
        cls._check_saslprep("sasl_plain_password", password, "x", password)

    @classmethod
    def _check_saslprep(cls, name, value, username, password):
        try:
            scramp.ScramClient([cls.name], username, password)
        except scramp.ScramException as exc:
            raise SaslConfigError(f"{name} cannot be used with {cls.name}: {exc}") from None
        if saslprep(value) != value:
            # The value itself is not shown: it may be a password.
            raise SaslConfigError(
                f"{name} cannot be used with {cls.name}: it has characters SASLprep (RFC "
                f"4013) maps (a non-ASCII space, a compatibility form such as a full-width "
                f"digit or a ligature, a soft hyphen), which the SCRAM library applies "
                f"before deriving the key, where Kafka's brokers stored the credential "
                f"from the text as given: the broker would refuse it as invalid")

    def initial_response(self):
        return self._client_first

    def evaluate(self, challenge):
        if self._step == _EXPECT_SERVER_FIRST:
            self._client_call(self._client.set_server_first, challenge, "server-first")
            iterations = int(self._client.iterations)
            if not KAFKA_MIN_ITERATIONS <= iterations <= KAFKA_MAX_ITERATIONS:
                raise SaslAuthenticationFailedError(
                    f"{self.name}: the broker asks for {iterations} iterations; Kafka's "
                    f"credentials have {KAFKA_MIN_ITERATIONS} to {KAFKA_MAX_ITERATIONS}")
            self._step = _EXPECT_SERVER_FINAL
            return self._client_call(self._client.get_client_final, None, "client-final")
        if self._step != _EXPECT_SERVER_FINAL:
            raise SaslAuthenticationFailedError(
                f"{self.name}: the broker sent a message after the exchange completed")
        self._client_call(self._client.set_server_final, challenge, "server-final")
        self._step = _DONE
        self._complete = True
        return None

    def _client_call(self, method, challenge, message):
        try:
            if challenge is None:
                return method().encode("utf-8")
            return method(_text(self.name, challenge, message))
        except scramp.ScramException as exc:
            raise SaslAuthenticationFailedError(
                f"{self.name} {message} message: {exc}") from None


def _text(mechanism, challenge, message):
    try:
        return bytes(challenge).decode("utf-8")
    except UnicodeDecodeError:
        raise SaslAuthenticationFailedError(
            f"{mechanism}: the broker's {message} message is not UTF-8") from None


class ScramSha256Mechanism(ScramMechanism):
    name = "SCRAM-SHA-256"


class ScramSha512Mechanism(ScramMechanism):
    name = "SCRAM-SHA-512"
