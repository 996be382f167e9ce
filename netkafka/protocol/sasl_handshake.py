"""SaslHandshake: names the SASL mechanism a connection will authenticate with.

Only v1 is spoken: after it the exchange travels in SaslAuthenticate requests.  (v0
meant raw SASL tokens on the socket with no Kafka framing; Kafka 4 dropped it.)  The
answer lists the mechanisms the listener has enabled, which an error names.

    request   Mechanism string
    response  ErrorCode int16, Mechanisms [string]
"""
from dataclasses import dataclass

from netkafka.protocol.framing import (
    ApiKey, ApiSpec, finish_request, response_reader, start_request,
)

# Never flexible: flexible_version lies past the last version.
API = ApiSpec(ApiKey.SASL_HANDSHAKE, min_version=1, max_version=1, flexible_version=2)


def encode_sasl_handshake_request(correlation_id, client_id, version, mechanism):
    """Encodes a SaslHandshake request (v1) naming ``mechanism`` as a complete frame."""
    w = start_request(API, version, correlation_id, client_id)
    w.string(mechanism)
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class SaslHandshakeResponse:
    """A decoded SaslHandshake response."""

    error_code: int
    mechanisms: tuple  # the mechanisms the broker's listener enabled


def decode_sasl_handshake_response(data, version):
    """Decodes a SaslHandshake response (data: after the correlation id)."""
    r = response_reader(API, data, version)
    error_code = r.int16()
    # A string takes at least its 2-byte length.
    mechanisms = tuple(r.string() for _ in range(r.required_array_length(2, "mechanisms")))
    r.expect_end()
    return SaslHandshakeResponse(error_code, mechanisms)
