"""TxnOffsetCommit: a consumer group's offsets, committed as part of a transaction (to
the group's coordinator).  From v5 (Transactions V2) it also adds the group's offsets
to the transaction, which AddOffsetsToTxn does before it with V1 -- a V1 transaction
must not use v5 or later."""
from netkafka.protocol.framing import (
    ApiKey, ApiSpec, decode_partition_errors_response, finish_request, start_request,
)

API = ApiSpec(ApiKey.TXN_OFFSET_COMMIT, min_version=0, max_version=5, flexible_version=3)

# The last version a Transactions V1 transaction may use.
LAST_V1_VERSION = 4


def encode_txn_offset_commit_request(correlation_id, client_id, version, transactional_id,
                                     group, producer_id, producer_epoch, offsets):
    """Encodes a TxnOffsetCommit request (v0..v5) as a complete frame.

    Args:
        correlation_id, client_id, version: as for every request.
        transactional_id, producer_id, producer_epoch: the transaction's producer.
        group: a ConsumerGroupMetadata (producer/offsets.py); its generation, member
            and instance id go out from v3 (the broker's fencing of stale members).
        offsets: {topic: [PartitionOffset]}; the leader epochs go out from v2.
    """
    w = start_request(API, version, correlation_id, client_id)
    w.string(transactional_id)
    w.string(group.group_id)
    w.int64(producer_id)
    w.int16(producer_epoch)
    if version >= 3:
        w.int32(group.generation_id)
        w.string(group.member_id)
        w.nullable_string(group.group_instance_id)
    w.array_length(len(offsets))
    for topic, partitions in offsets.items():
        w.string(topic)
        w.array_length(len(partitions))
        for entry in partitions:
            w.int32(entry.partition)
            w.int64(entry.offset)
            if version >= 2:
                w.int32(entry.leader_epoch)
            w.nullable_string(entry.metadata)
            w.tagged_fields()
        w.tagged_fields()
    w.tagged_fields()
    return finish_request(w)


def decode_txn_offset_commit_response(data, version):
    """Decodes a TxnOffsetCommit response (data: after the correlation id): a
    PartitionErrorsResponse."""
    return decode_partition_errors_response(API, data, version)
