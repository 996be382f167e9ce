"""OffsetFetch: the request byte for byte as kafka-python encodes it from Kafka's JSON
message spec, the response decoded as kafka-python encodes it, at every version
netkafka speaks; then Producer.committed_offsets() against the real broker, checked
against kafka-python's admin client: an open transaction's offsets are waited out
(require_stable), an aborted one's never appear, a committed one's do."""
import time
import uuid

import pytest
from kafka.protocol.consumer.group import (
    OffsetFetchRequest as KpOffsetFetchRequest,
    OffsetFetchResponse as KpOffsetFetchResponse,
)

from netkafka import Producer
from netkafka.client.group_offsets import fetch_committed_offsets
from netkafka.client.retry import RetryBackoff
from netkafka.errors import KafkaTimeoutError, ProtocolError
from netkafka.protocol.framing import ApiKey
from netkafka.protocol.offset_fetch import (
    NO_OFFSET, OffsetFetchResponse, PartitionOffsetFetched, decode_offset_fetch_response,
    encode_offset_fetch_request,
)
from netkafka.testing.admin import create_topic
from protocol_samples import ALL_VERSIONS, CORRELATION_ID, kafka_python_response
from test_protocol import CLIENT_ID, kafka_python_request
from test_protocol_transactions import group_offsets

PARTITIONS = {"topic-\u00e9": [0, 3], "other": [1]}


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.OFFSET_FETCH])
def test_offset_fetch_request_matches_kafka_python(version):
    ours = encode_offset_fetch_request(CORRELATION_ID, CLIENT_ID, version, "group-\u00e9",
                                       PARTITIONS, require_stable=True)
    Topic = KpOffsetFetchRequest.OffsetFetchRequestTopic
    topics = [Topic(name=name, partition_indexes=indexes, version=version)
              for name, indexes in PARTITIONS.items()]
    stable = {"require_stable": True} if version >= 7 else {}
    assert ours == kafka_python_request(KpOffsetFetchRequest, version, group_id="group-\u00e9",
                                        topics=topics, **stable)


def test_offset_fetch_request_needs_a_partition():
    with pytest.raises(ValueError, match="at least one partition"):
        encode_offset_fetch_request(CORRELATION_ID, CLIENT_ID, 7, "g", {}, True)


def offset_fetch_response(version, topic, partitions, **fields):
    """An OffsetFetch response as kafka-python encodes it: partitions are (index, offset,
    leader epoch, metadata, error code)."""
    Topic = KpOffsetFetchResponse.OffsetFetchResponseTopic
    Partition = Topic.OffsetFetchResponsePartition
    topics = [Topic(name=topic, version=version, partitions=[
        Partition(partition_index=index, committed_offset=offset, committed_leader_epoch=epoch,
                  metadata=metadata, error_code=code, version=version)
        for index, offset, epoch, metadata, code in partitions])]
    return kafka_python_response(KpOffsetFetchResponse, version, topics=topics, **fields)


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.OFFSET_FETCH])
def test_offset_fetch_response_decoded_as_kafka_python_encodes_it(version):
    data = offset_fetch_response(version, "topic-\u00e9",
                                 [(0, 42, 3, "m", 0), (3, -1, -1, None, 88)],
                                 throttle_time_ms=5, error_code=15)
    epoch = 3 if version >= 5 else -1
    assert decode_offset_fetch_response(data, version) == OffsetFetchResponse(
        5 if version >= 3 else 0, 15 if version >= 2 else 0,
        {("topic-\u00e9", 0): PartitionOffsetFetched(42, epoch, "m", 0),
         ("topic-\u00e9", 3): PartitionOffsetFetched(NO_OFFSET, -1, None, 88)})


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.OFFSET_FETCH])
def test_a_truncated_offset_fetch_response_is_refused(version):
    data = offset_fetch_response(version, "t", [(0, 1, 0, "", 0)], throttle_time_ms=0,
                                 error_code=0)
    for cut in (1, len(data) // 2, len(data) - 1):
        with pytest.raises(ProtocolError):
            decode_offset_fetch_response(data[:cut], version)


def test_committed_offsets_follow_the_transaction(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=2)
    group = f"group-{uuid.uuid4().hex[:8]}"
    asked = [(topic_name, 0), (topic_name, 1)]
    with Producer(bootstrap_servers=kafka_broker.bootstrap,
                  transactional_id=f"txn-{uuid.uuid4().hex[:8]}") as producer:
        producer.init_transactions()
        assert producer.committed_offsets(group, asked) == {(topic_name, 0): None,
                                                            (topic_name, 1): None}
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(topic_name, 1): 7}, group)
        producer.abort_transaction()
        assert producer.committed_offsets(group, asked)[(topic_name, 1)] is None
        producer.begin_transaction()
        producer.send(topic_name, b"x", partition=0)
        producer.send_offsets_to_transaction({(topic_name, 1): 9}, group)
        # Open: the stable offset is not known until the transaction ends.
        with pytest.raises(KafkaTimeoutError, match="UNSTABLE_OFFSET_COMMIT"):
            producer.committed_offsets(group, asked, timeout=1.0)
        producer.commit_transaction()
        assert producer.committed_offsets(group, asked) == {(topic_name, 0): None,
                                                            (topic_name, 1): 9}
    assert group_offsets(kafka_broker.bootstrap, group) == {(topic_name, 1): (9, "")}


class _AnsweringCoordinators:
    """Coordinators whose every request is answered `response` (error_of applied)."""

    def __init__(self, response):
        self.response = response

    def request(self, key_type, key, deadline, timeout_s, what, api_key, encode, decode,
                error_of):
        error = error_of(self.response, what)
        if error is not None:
            raise error
        return self.response


def test_committed_offsets_of_partitions_not_asked_are_left_out():
    # The coordinator answers for the partition asked and for one nobody asked about
    # (with an error code of its own): neither reaches the caller.
    response = OffsetFetchResponse(0, 0, {
        ("t", 0): PartitionOffsetFetched(7, -1, None, 0),
        ("t", 1): PartitionOffsetFetched(NO_OFFSET, -1, None, 0),
        ("other", 3): PartitionOffsetFetched(99, -1, None, 16)})
    assert fetch_committed_offsets(_AnsweringCoordinators(response), "g", [("t", 0), ("t", 1)],
                                   time.monotonic() + 5, RetryBackoff(10, 10)) == {
        ("t", 0): 7, ("t", 1): None}
    with pytest.raises(ProtocolError, match=r"no answer for \[\('t', 2\)\]"):
        fetch_committed_offsets(_AnsweringCoordinators(response), "g", [("t", 2)],
                                time.monotonic() + 5, RetryBackoff(10, 10))
