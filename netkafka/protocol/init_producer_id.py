"""InitProducerId: the producer id and epoch an idempotent (or transactional)
producer stamps on its batches."""
from dataclasses import dataclass

from netkafka.protocol.framing import (
    ApiKey, ApiSpec, finish_request, response_reader, start_request,
)

# v6 (two-phase commit, KIP-939) is marked unstable in Kafka 4.x and not
# offered by brokers unless unstable versions are switched on.
API = ApiSpec(ApiKey.INIT_PRODUCER_ID, min_version=0, max_version=5, flexible_version=2)


def encode_init_producer_id_request(correlation_id, client_id, version, transactional_id=None,
                                    transaction_timeout_ms=-1, producer_id=-1,
                                    producer_epoch=-1):
    """Encodes an InitProducerId request (v0..v5) as a complete frame.

    Args:
        correlation_id, client_id, version: as for every request.
        transactional_id: None for an idempotent (non-transactional) producer.
        transaction_timeout_ms: only meaningful with a transactional id.
        producer_id, producer_epoch: the current id and epoch when asking to
            bump the epoch (v3+), else -1.
    """
    w = start_request(API, version, correlation_id, client_id)
    w.nullable_string(transactional_id)
    w.int32(transaction_timeout_ms)
    if version >= 3:
        w.int64(producer_id)
        w.int16(producer_epoch)
    elif (producer_id, producer_epoch) != (-1, -1):
        raise ValueError(f"InitProducerId v{version} cannot carry a producer id (v3+)")
    w.tagged_fields()
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    """A decoded InitProducerId response."""

    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int


def decode_init_producer_id_response(data, version):
    """Decodes an InitProducerId response (data: after the correlation id)."""
    r = response_reader(API, data, version)
    response = InitProducerIdResponse(
        throttle_time_ms=r.int32(),
        error_code=r.int16(),
        producer_id=r.int64(),
        producer_epoch=r.int16(),
    )
    if r.flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return response
