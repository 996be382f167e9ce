"""SaslAuthenticate: one message of a SASL exchange each way (after SaslHandshake v1).

    request   AuthBytes bytes
    response  ErrorCode int16, ErrorMessage nullable string, AuthBytes bytes,
              SessionLifetimeMs int64 (v1+: KIP-368, 0 = no re-authentication)

v2 is the flexible version.  A broker refuses credentials with an error code
(SASL_AUTHENTICATION_FAILED) and says why in ErrorMessage.
"""
from dataclasses import dataclass

from netkafka.protocol.framing import (
    ApiKey, ApiSpec, finish_request, response_reader, start_request,
)

API = ApiSpec(ApiKey.SASL_AUTHENTICATE, min_version=0, max_version=2, flexible_version=2)


def encode_sasl_authenticate_request(correlation_id, client_id, version, auth_bytes):
    """Encodes a SaslAuthenticate request carrying ``auth_bytes`` as a complete frame."""
    w = start_request(API, version, correlation_id, client_id)
    w.bytes_length(len(auth_bytes))
    w.buf += auth_bytes
    w.tagged_fields()
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class SaslAuthenticateResponse:
    """A decoded SaslAuthenticate response."""

    error_code: int
    error_message: object  # str or None
    auth_bytes: bytes
    session_lifetime_ms: int  # 0 before v1, or when the broker sets no lifetime


def decode_sasl_authenticate_response(data, version):
    """Decodes a SaslAuthenticate response (data: after the correlation id)."""
    r = response_reader(API, data, version)
    error_code = r.int16()
    error_message = r.nullable_string()
    auth_bytes = r.bytes_field()
    session_lifetime_ms = r.int64() if version >= 1 else 0
    if r.flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return SaslAuthenticateResponse(error_code, error_message, auth_bytes, session_lifetime_ms)
