"""AddPartitionsToTxn: the partitions a transaction is about to write to (Transactions
V1; with V2 the partition leader adds them itself).

Versions 0..3 are the client's: v4 and later carry several transactions and are
sent by brokers to the transaction coordinator (KIP-890), so netkafka stops at v3.
"""
from netkafka.protocol.framing import (
    ApiKey, ApiSpec, decode_partition_errors_response, finish_request, start_request,
)

API = ApiSpec(ApiKey.ADD_PARTITIONS_TO_TXN, min_version=0, max_version=3, flexible_version=3)


def encode_add_partitions_to_txn_request(correlation_id, client_id, version, transactional_id,
                                         producer_id, producer_epoch, partitions):
    """Encodes an AddPartitionsToTxn request (v0..v3) as a complete frame.

    Args:
        correlation_id, client_id, version: as for every request.
        transactional_id, producer_id, producer_epoch: the transaction's producer.
        partitions: {topic: [partition, ...]} to add.
    """
    w = start_request(API, version, correlation_id, client_id)
    w.string(transactional_id)
    w.int64(producer_id)
    w.int16(producer_epoch)
    w.topic_partition_indexes(partitions)
    w.tagged_fields()
    return finish_request(w)


def decode_add_partitions_to_txn_response(data, version):
    """Decodes an AddPartitionsToTxn response (data: after the correlation id): a
    PartitionErrorsResponse."""
    return decode_partition_errors_response(API, data, version)
