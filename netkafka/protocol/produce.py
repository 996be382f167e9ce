"""Produce: sealed record batches out, each partition's offset or error back.

Both directions are native (_produce.pyx): the encoder returns a list of
buffers for socket.sendmsg, so that sealed batches go out as they are, and the
answer's decoder needs the version numbers as C constants, which it also holds.
"""
from netkafka.protocol._produce import (  # noqa: F401 -- the codec and types, for callers
    PRODUCE_FLEXIBLE_VERSION, PRODUCE_LEGACY_VERSIONS, PRODUCE_TOPIC_ID_VERSION, PRODUCE_VERSIONS,
    ProduceResponse, decode_produce_response, encode_produce_request, wire_bytes,
)
from netkafka.protocol.framing import ApiKey, ApiSpec

# The numbers and why they are these: _produce.pyx.  API's range is the negotiated
# one (RecordBatch v2); the legacy versions below it are only ever pinned.
API = ApiSpec(ApiKey.PRODUCE, *PRODUCE_VERSIONS, flexible_version=PRODUCE_FLEXIBLE_VERSION)
