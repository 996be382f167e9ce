"""FindCoordinator: which broker coordinates a transactional id (or a consumer group).

Up to v3 the request names one key and the answer one coordinator; from v4
(KIP-699) the request carries a list of keys and the answer one coordinator per
key.  netkafka asks for one key at every version and reads either answer into
one FindCoordinatorResponse.
"""
from dataclasses import dataclass

from netkafka.errors import ProtocolError
from netkafka.protocol.framing import (
    ApiKey, ApiSpec, finish_request, response_reader, start_request,
)

API = ApiSpec(ApiKey.FIND_COORDINATOR, min_version=0, max_version=6, flexible_version=3)

# KeyType: what the key names.
GROUP = 0
TRANSACTION = 1

# v4+ answers per key: key, node id, host, port, error code, error message, tagged
# fields -- at least this many bytes each.
_COORDINATOR_MIN_BYTES = 1 + 4 + 1 + 4 + 2 + 1 + 1


def encode_find_coordinator_request(correlation_id, client_id, version, key, key_type):
    """Encodes a FindCoordinator request (v0..v6) for one key as a complete frame.

    Args:
        correlation_id, client_id, version: as for every request.
        key: the transactional id or group id.
        key_type: TRANSACTION or GROUP (v0 knows groups only).
    """
    if key_type not in (GROUP, TRANSACTION):
        raise ValueError(f"key_type must be GROUP (0) or TRANSACTION (1), not {key_type!r}")
    if version == 0 and key_type != GROUP:
        raise ValueError("FindCoordinator v0 finds group coordinators only")
    w = start_request(API, version, correlation_id, client_id)
    if version <= 3:
        w.string(key)
    if version >= 1:
        w.int8(key_type)
    if version >= 4:
        w.array_length(1)
        w.string(key)
    w.tagged_fields()
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class FindCoordinatorResponse:
    """A decoded FindCoordinator response: the coordinator of the one key asked for."""

    throttle_time_ms: int  # 0 in v0
    error_code: int
    error_message: object  # str or None (always None in v0)
    key: object  # the key answered (v4+), None before: the caller compares it
    node_id: int  # -1 with an error
    host: str
    port: int


def decode_find_coordinator_response(data, version):
    """Decodes a FindCoordinator response (data: after the correlation id).

    Raises:
        ProtocolError: malformed, or a v4+ answer not for exactly one key.
    """
    r = response_reader(API, data, version)
    throttle_time_ms = r.int32() if version >= 1 else 0
    if version <= 3:
        error_code = r.int16()
        error_message = r.nullable_string() if version >= 1 else None
        key = None
        node_id, host, port = r.int32(), r.string(), r.int32()
    else:
        count = r.required_array_length(_COORDINATOR_MIN_BYTES, "coordinators")
        if count != 1:
            raise ProtocolError(f"FindCoordinator v{version} answered {count} coordinators "
                                f"for one key")
        key = r.string()
        node_id, host, port = r.int32(), r.string(), r.int32()
        error_code = r.int16()
        error_message = r.nullable_string()
        r.skip_tagged_fields()
    if r.flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return FindCoordinatorResponse(throttle_time_ms, error_code, error_message, key, node_id,
                                   host, port)
