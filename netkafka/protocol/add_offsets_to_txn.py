"""AddOffsetsToTxn: a consumer group's offsets are about to be committed in a
transaction (Transactions V1; with V2, TxnOffsetCommit v5+ does it)."""
from dataclasses import dataclass

from netkafka.protocol.framing import (
    ApiKey, ApiSpec, finish_request, response_reader, start_request,
)

API = ApiSpec(ApiKey.ADD_OFFSETS_TO_TXN, min_version=0, max_version=4, flexible_version=3)


def encode_add_offsets_to_txn_request(correlation_id, client_id, version, transactional_id,
                                      producer_id, producer_epoch, group_id):
    """Encodes an AddOffsetsToTxn request (v0..v4) as a complete frame."""
    w = start_request(API, version, correlation_id, client_id)
    w.string(transactional_id)
    w.int64(producer_id)
    w.int16(producer_epoch)
    w.string(group_id)
    w.tagged_fields()
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class AddOffsetsToTxnResponse:
    """A decoded AddOffsetsToTxn response."""

    throttle_time_ms: int
    error_code: int


def decode_add_offsets_to_txn_response(data, version):
    """Decodes an AddOffsetsToTxn response (data: after the correlation id)."""
    r = response_reader(API, data, version)
    response = AddOffsetsToTxnResponse(throttle_time_ms=r.int32(), error_code=r.int16())
    if r.flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return response
