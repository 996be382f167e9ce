"""Produce: sealed record batches out, each partition's offset or error back.

The encoder returns a list of buffers for socket.sendmsg, so that sealed
batches go out as they are; the answer is decoded natively (_produce.pyx),
which also holds the version numbers: its decoder needs them as C constants.
"""
import struct

from netkafka.protocol._produce import (  # noqa: F401 -- the answer's decoder and type, for callers
    PRODUCE_FLEXIBLE_VERSION, PRODUCE_LEGACY_VERSIONS, PRODUCE_TOPIC_ID_VERSION, PRODUCE_VERSIONS,
    ProduceResponse, decode_produce_response,
)
from netkafka.protocol.framing import ZERO_UUID, ApiKey, ApiSpec, start_request

# The numbers and why they are these: _produce.pyx.  API's range is the negotiated
# one (RecordBatch v2); the legacy versions below it are only ever pinned.
API = ApiSpec(ApiKey.PRODUCE, *PRODUCE_VERSIONS, flexible_version=PRODUCE_FLEXIBLE_VERSION)
# What the encoder writes: the negotiated range and the pinned legacy versions.
_ENCODED = ApiSpec(ApiKey.PRODUCE, PRODUCE_LEGACY_VERSIONS[0], PRODUCE_VERSIONS[1],
                   flexible_version=PRODUCE_FLEXIBLE_VERSION)
# Produce v3 added the transactional id.
_TRANSACTIONAL_ID_VERSION = PRODUCE_VERSIONS[0]


def encode_produce_request(correlation_id, client_id, version, acks, timeout_ms, topic_data,
                           transactional_id=None, topic_ids=None):
    """Encodes a Produce request (v0..v13) around the batches, without copying them.

    Args:
        correlation_id, client_id, version: as for every request.
        acks: 0 (no response), 1 (leader) or -1 (all in-sync replicas).
        timeout_ms: how long the broker may wait for the replicas (acks=-1).
        topic_data: {topic name: [(partition, batch), ...]}; a batch is any
            contiguous buffer holding sealed RecordBatch bytes (one or more
            batches of that partition) -- a legacy message set for v0..v2.
        transactional_id: the transactional id, or None (always before v3).
        topic_ids: {topic name: uuid.UUID}; required from v13, which names
            topics by id (the ids come from Metadata v10+).

    Returns:
        A list of buffers for socket.sendmsg: framing bytes, then each batch's
        memory as given (a memoryview of it), with the framing between and
        after.  The first buffer starts with the frame size, computed up
        front.  A batch must not change until the list has been written.
    """
    if acks not in (0, 1, -1):
        raise ValueError(f"acks must be 0, 1 or -1 (all), not {acks!r}")
    if version < _TRANSACTIONAL_ID_VERSION and transactional_id is not None:
        raise ValueError(f"Produce v{version} has no transactional id (v3+)")
    w = start_request(_ENCODED, version, correlation_id, client_id)
    if version >= PRODUCE_TOPIC_ID_VERSION and topic_ids is None:
        raise ValueError(f"Produce v{version} names topics by id: pass topic_ids")
    if version >= _TRANSACTIONAL_ID_VERSION:
        w.nullable_string(transactional_id)
    w.int16(acks)
    w.int32(timeout_ms)
    w.array_length(len(topic_data))
    buffers = []
    for topic, partitions in topic_data.items():
        if version >= PRODUCE_TOPIC_ID_VERSION:
            topic_id = topic_ids.get(topic)
            if topic_id is None or topic_id == ZERO_UUID:
                raise ValueError(f"Produce v{version} needs the topic id of {topic!r}")
            w.uuid(topic_id)
        else:
            w.string(topic)
        w.array_length(len(partitions))
        for partition, batch in partitions:
            view = memoryview(batch)
            if not view.contiguous:
                raise ValueError(f"the batch for {topic!r} partition {partition} is not "
                                 "a contiguous buffer")
            if view.ndim != 1 or view.format != "B":
                view = view.cast("B")
            w.int32(partition)
            w.bytes_length(view.nbytes)
            buffers.append(w.take())
            buffers.append(view)
            w.tagged_fields()  # partition
        w.tagged_fields()  # topic
    w.tagged_fields()  # request
    tail = w.take()
    if tail or not buffers:
        buffers.append(tail)
    size = sum(len(b) if isinstance(b, bytearray) else b.nbytes for b in buffers) - 4
    if size > 0x7FFFFFFF:
        raise ValueError(f"Produce request of {size} bytes exceeds the int32 frame size")
    struct.pack_into(">i", buffers[0], 0, size)
    return buffers
