"""EndTxn: commit or abort a transaction.  From v5 (KIP-890, Transactions V2) the
coordinator bumps the producer epoch at every end and answers the producer id and
epoch the next transaction uses."""
from dataclasses import dataclass

from netkafka.protocol.framing import (
    ApiKey, ApiSpec, finish_request, response_reader, start_request,
)

API = ApiSpec(ApiKey.END_TXN, min_version=0, max_version=5, flexible_version=3)

# The first version whose end bumps the epoch (Transactions V2).
EPOCH_BUMP_VERSION = 5


def encode_end_txn_request(correlation_id, client_id, version, transactional_id, producer_id,
                           producer_epoch, committed):
    """Encodes an EndTxn request (v0..v5) as a complete frame; committed: commit (True)
    or abort (False)."""
    w = start_request(API, version, correlation_id, client_id)
    w.string(transactional_id)
    w.int64(producer_id)
    w.int16(producer_epoch)
    w.boolean(committed)
    w.tagged_fields()
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class EndTxnResponse:
    """A decoded EndTxn response."""

    throttle_time_ms: int
    error_code: int
    producer_id: int  # v5+: the producer id of the next transaction; -1 before
    producer_epoch: int  # v5+: its (bumped) epoch; -1 before


def decode_end_txn_response(data, version):
    """Decodes an EndTxn response (data: after the correlation id)."""
    r = response_reader(API, data, version)
    throttle_time_ms = r.int32()
    error_code = r.int16()
    producer_id, producer_epoch = ((r.int64(), r.int16()) if version >= EPOCH_BUMP_VERSION
                                   else (-1, -1))
    if r.flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return EndTxnResponse(throttle_time_ms, error_code, producer_id, producer_epoch)
