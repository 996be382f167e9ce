"""DescribeProducers (KIP-664): the producers a partition's leader knows, and the last
sequence it appended from each.

The write-ahead log's replay asks it before re-sending the batches a dead producer
sealed: those whose sequences the broker has appended already are in the log, the
others are sent under their old producer id, epoch and sequences -- and a producer id
the broker no longer knows means the old stamp cannot be used at all.
"""
from dataclasses import dataclass

from netkafka.protocol.framing import (
    ApiKey, ApiSpec, finish_request, response_reader, start_request,
)

API = ApiSpec(ApiKey.DESCRIBE_PRODUCERS, min_version=0, max_version=0, flexible_version=0)


def encode_describe_producers_request(correlation_id, client_id, version, partitions):
    """Encodes a DescribeProducers request (v0) as a complete frame.

    Args:
        partitions: {topic: [partition, ...]}, all led by the broker asked.
    """
    w = start_request(API, version, correlation_id, client_id)
    w.topic_partition_indexes(partitions)
    w.tagged_fields()
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer the partition's leader keeps state for."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1: none appended
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class PartitionProducers:
    """One partition of the answer."""

    topic: str
    partition: int
    error_code: int
    error_message: object  # str or None
    producers: tuple  # ProducerState, as the broker listed them


def decode_describe_producers_response(data, version):
    """Decodes a DescribeProducers response (data: after the correlation id) into a list
    of PartitionProducers."""
    r = response_reader(API, data, version)
    r.int32()  # throttle time: the sender's concern, not this one-off request's
    answers = []
    # Each item's fixed bytes, with one-byte compact lengths: a topic (name, partitions
    # count, tags), a partition (index, error, message, producers count, tags), a
    # producer (id, epoch, sequence, timestamp, coordinator epoch, txn offset, tags).
    for _ in range(r.required_array_length(3, "topics")):
        topic = r.string()
        for _ in range(r.required_array_length(9, "partitions")):
            partition = r.int32()
            error_code = r.int16()
            error_message = r.nullable_string()
            producers = []
            for _ in range(r.required_array_length(33, "active producers")):
                producers.append(ProducerState(
                    producer_id=r.int64(), producer_epoch=r.int32(),
                    last_sequence=r.int32(), last_timestamp_ms=r.int64(),
                    coordinator_epoch=r.int32(), current_txn_start_offset=r.int64()))
                r.skip_tagged_fields()
            r.skip_tagged_fields()
            answers.append(PartitionProducers(topic, partition, error_code, error_message,
                                              tuple(producers)))
        r.skip_tagged_fields()
    r.skip_tagged_fields()
    r.expect_end()
    return answers
