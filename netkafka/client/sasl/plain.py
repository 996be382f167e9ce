"""SASL/PLAIN (RFC 4616): the username and password in one message.

    message = authzid NUL username NUL password       (UTF-8)

The authorization id sent is the username, as kafka-python sends it.  The Java client
sends it empty: its SaslClientAuthenticator names an authorization id for GSSAPI only, and
the JDK's PLAIN client then writes none.  Kafka's PlainSaslServer takes both, an empty one
or one equal to the username, and refuses any other.  The broker answers with empty bytes,
or fails the SaslAuthenticate request.  The password crosses the wire as it is: use it over
SASL_SSL.
"""
from netkafka.client.sasl import PasswordMechanism
from netkafka.errors import SaslAuthenticationFailedError, SaslConfigError


class PlainMechanism(PasswordMechanism):
    name = "PLAIN"

    def __init__(self, username, password):
        super().__init__()
        self._message = b"\0".join(
            part.encode("utf-8") for part in (username, username, password))

    @classmethod
    def check_credentials(cls, username, password):
        for name, value in (("sasl_plain_username", username), ("sasl_plain_password", password)):
            if "\0" in value:
                # NUL separates the fields: a NUL inside one would shift the others.
                raise SaslConfigError(f"{name} must not contain a NUL character (PLAIN)")

    def initial_response(self):
        return self._message

    def evaluate(self, challenge):
        if challenge:
            raise SaslAuthenticationFailedError(
                f"PLAIN: the broker answered the credentials with {len(challenge)} bytes; "
                f"PLAIN has no server message")
        self._complete = True
        return None
