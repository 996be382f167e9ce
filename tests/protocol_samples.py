"""Valid protocol samples built by kafka-python: responses of every supported
version, and record batches.

Shared by test_protocol.py (decoders against an independent encoder) and
test_protocol_fuzz.py (the valid inputs the fuzzer mutates).  Decoders take a
response after its correlation id, so that is what these return.
"""
import struct
import time
import uuid

from kafka.protocol.metadata import (
    ApiVersionsResponse as KpApiVersionsResponse,
    MetadataResponse as KpMetadataResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorResponse as KpFindCoordinatorResponse,
)
from kafka.protocol.producer import ProduceResponse as KpProduceResponse
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnResponse as KpAddPartitionsToTxnResponse,
    TxnOffsetCommitResponse as KpTxnOffsetCommitResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

from netkafka.protocol.produce import PRODUCE_LEGACY_VERSIONS, PRODUCE_VERSIONS
from netkafka.protocol.versions import SUPPORTED_VERSIONS

CORRELATION_ID = 0x1234567

ALL_VERSIONS = {api: range(low, high + 1) for api, (low, high) in SUPPORTED_VERSIONS.items()}
# Produce as encoded and decoded: the negotiated versions and the legacy ones below them,
# used only when api_version pins them.
PRODUCE_ENCODED_VERSIONS = range(PRODUCE_LEGACY_VERSIONS[0], PRODUCE_VERSIONS[1] + 1)


def kafka_python_response(cls, version, **fields):
    """A response as kafka-python encodes it, after the correlation id (as decoders take it)."""
    response = cls[version](**fields)
    response.with_header(correlation_id=CORRELATION_ID)
    data = bytes(response.encode(header=True))
    assert struct.unpack_from(">i", data)[0] == CORRELATION_ID
    return data[4:]


def kafka_python_decode(cls, data, version):
    """kafka-python's decoding of a response given after its correlation id."""
    return cls.decode(struct.pack(">i", CORRELATION_ID) + bytes(data), version=version, header=True)


def produce_response_fields(version):
    """A Produce response with every field in use at `version`, in kafka-python's classes."""
    Topic = KpProduceResponse.TopicProduceResponse
    Part = Topic.PartitionProduceResponse

    def part(index, error_code, base_offset, leader=None, record_errors=(), message=None):
        fields = dict(index=index, error_code=error_code, base_offset=base_offset,
                      log_append_time_ms=1700000000000 + index, log_start_offset=5 + index,
                      record_errors=[Part.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                                     for i, m in record_errors],
                      error_message=message)
        if leader is not None and version >= 10:
            fields["current_leader"] = Part.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
        return Part(**fields)

    def topic(key, parts):
        return Topic(**({"topic_id": key} if version >= 13 else {"name": key}), partition_responses=parts)

    fields = dict(throttle_time_ms=17, responses=[
        topic(uuid.UUID(int=1) if version >= 13 else "orders", [
            part(0, 0, 1000),
            part(1, 6, -1, leader=(3, 9), message="not the leader"),
        ]),
        topic(uuid.UUID(int=2) if version >= 13 else "\u00e9v\u00e9nements", [
            part(7, 87, -1, record_errors=[(2, "null key"), (5, None)], message="invalid record"),
        ]),
    ])
    if version >= 10:
        fields["node_endpoints"] = [KpProduceResponse.NodeEndpoint(node_id=3, host="b3.example", port=9093, rack="r1"),
                                    KpProduceResponse.NodeEndpoint(node_id=4, host="b4", port=9094, rack=None)]
    return fields


def assert_produce_response_equal(ours, theirs, version):
    assert ours.throttle_time_ms == (theirs.throttle_time_ms if version >= 1 else 0)
    assert len(ours.topics) == len(theirs.responses)
    for t, kt in zip(ours.topics, theirs.responses):
        if version >= 13:
            assert (t.name, t.topic_id) == (None, kt.topic_id)
        else:
            assert (t.name, t.topic_id) == (kt.name, None)
        assert len(t.partitions) == len(kt.partition_responses)
        for p, kp in zip(t.partitions, kt.partition_responses):
            assert (p.partition, p.error_code, p.base_offset, p.log_append_time_ms) == (
                kp.index, kp.error_code, kp.base_offset,
                kp.log_append_time_ms if version >= 2 else -1)
            assert p.log_start_offset == (kp.log_start_offset if version >= 5 else -1)
            if version >= 8:
                assert p.error_message == kp.error_message
                assert p.record_errors == tuple((e.batch_index, e.batch_index_error_message)
                                                for e in kp.record_errors)
            else:
                assert (p.error_message, p.record_errors) == (None, ())
            leader = kp.current_leader if version >= 10 else None
            assert (p.leader_id, p.leader_epoch) == (
                (leader.leader_id, leader.leader_epoch) if leader is not None else (-1, -1))
    endpoints = theirs.node_endpoints if version >= 10 else []
    assert [(n.node_id, n.host, n.port, n.rack) for n in ours.node_endpoints] == [
        (n.node_id, n.host, n.port, n.rack) for n in endpoints]


def metadata_response_fields(version):
    Topic = KpMetadataResponse.MetadataResponseTopic
    Part = Topic.MetadataResponsePartition
    Broker = KpMetadataResponse.MetadataResponseBroker
    topics = [
        Topic(error_code=0, name="orders", topic_id=uuid.UUID(int=99), is_internal=False,
              partitions=[
                  Part(error_code=0, partition_index=0, leader_id=1, leader_epoch=4,
                       replica_nodes=[1, 2, 3], isr_nodes=[1, 2], offline_replicas=[3]),
                  Part(error_code=5, partition_index=1, leader_id=-1, leader_epoch=-1,
                       replica_nodes=[2], isr_nodes=[], offline_replicas=[]),
              ], authorized_operations=set()),
        Topic(error_code=3, name="missing", topic_id=uuid.UUID(int=0), is_internal=False,
              partitions=[], authorized_operations=set()),
        Topic(error_code=0, name="__consumer_offsets", topic_id=uuid.UUID(int=7),
              is_internal=True, partitions=[], authorized_operations=set()),
    ]
    return dict(
        throttle_time_ms=5,
        brokers=[Broker(node_id=1, host="127.0.0.1", port=9092, rack="rack-a"),
                 Broker(node_id=2, host="h\u00f4te-2", port=9093, rack=None)],
        cluster_id="c-1", controller_id=2, topics=topics, authorized_operations=set(),
        error_code=0)


def assert_metadata_equal(ours, theirs, version):
    assert ours.throttle_time_ms == (theirs.throttle_time_ms if version >= 3 else 0)
    assert [(b.node_id, b.host, b.port, b.rack) for b in ours.brokers] == [
        (b.node_id, b.host, b.port, b.rack if version >= 1 else None) for b in theirs.brokers]
    assert ours.cluster_id == (theirs.cluster_id if version >= 2 else None)
    assert ours.controller_id == (theirs.controller_id if version >= 1 else -1)
    assert ours.error_code == (theirs.error_code if version >= 13 else 0)
    assert len(ours.topics) == len(theirs.topics)
    for t, kt in zip(ours.topics, theirs.topics):
        assert (t.error_code, t.name) == (kt.error_code, kt.name)
        assert t.topic_id == (kt.topic_id if version >= 10 else None)
        assert t.is_internal == (kt.is_internal if version >= 1 else False)
        assert len(t.partitions) == len(kt.partitions)
        for p, kp in zip(t.partitions, kt.partitions):
            assert (p.error_code, p.partition, p.leader, p.replicas, p.isr) == (
                kp.error_code, kp.partition_index, kp.leader_id,
                tuple(kp.replica_nodes), tuple(kp.isr_nodes))
            assert p.leader_epoch == (kp.leader_epoch if version >= 7 else -1)
            assert p.offline_replicas == (tuple(kp.offline_replicas) if version >= 5 else ())


# What api_versions_response_fields() finalizes (v3+).
FINALIZED_FEATURES = {"transaction.version": 2, "metadata.version": 27}


def api_versions_response_fields(version):
    Key = KpApiVersionsResponse.ApiVersion
    fields = dict(error_code=0, throttle_time_ms=9, api_keys=[
        Key(api_key=0, min_version=3, max_version=13), Key(api_key=3, min_version=0, max_version=13),
        Key(api_key=18, min_version=0, max_version=4)])
    if version >= 3:  # tagged fields: the finalized features are read, the rest skipped
        fields["finalized_features_epoch"] = 42
        fields["supported_features"] = [KpApiVersionsResponse.SupportedFeatureKey(
            name="metadata.version", min_version=1, max_version=27)]
        fields["finalized_features"] = [
            KpApiVersionsResponse.FinalizedFeatureKey(name=name, max_version_level=level,
                                                      min_version_level=1)
            for name, level in FINALIZED_FEATURES.items()]
    return fields


def init_producer_id_response_fields(version):
    return dict(throttle_time_ms=1, error_code=0, producer_id=1 << 40, producer_epoch=7)


def sasl_handshake_response_fields(version):
    return dict(error_code=0, mechanisms=["PLAIN", "SCRAM-SHA-512"])


def sasl_authenticate_response_fields(version):
    fields = dict(error_code=0, error_message="no", auth_bytes=b"r=nonce,s=salt,i=4096")
    if version >= 1:
        fields["session_lifetime_ms"] = 3000
    return fields


# --- the transaction APIs' responses: a coordinator, and per-partition error codes
# with an error among them.

COORDINATOR = dict(key="txn-\u00e9-1", node_id=2, host="broker-2", port=9093)
PARTITION_ERRORS = {("t1", 0): 0, ("t1", 2): 51, ("t\u00e9", 1): 29}


def find_coordinator_response_fields(version):
    if version <= 3:
        return dict(throttle_time_ms=5, error_code=0, error_message=None,
                    **{k: v for k, v in COORDINATOR.items() if k != "key"})
    return dict(throttle_time_ms=5, coordinators=[KpFindCoordinatorResponse.Coordinator(
        error_code=0, error_message=None, version=version, **COORDINATOR)])


def add_partitions_to_txn_response_fields(version):
    TopicResult = KpAddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    PartitionResult = TopicResult.AddPartitionsToTxnPartitionResult
    by_topic = {}
    for (topic, partition), code in PARTITION_ERRORS.items():
        by_topic.setdefault(topic, []).append(PartitionResult(
            partition_index=partition, partition_error_code=code, version=version))
    return dict(throttle_time_ms=3, results_by_topic_v3_and_below=[
        TopicResult(name=topic, results_by_partition=results, version=version)
        for topic, results in by_topic.items()])


def add_offsets_to_txn_response_fields(version):
    return dict(throttle_time_ms=2, error_code=30)


def txn_offset_commit_response_fields(version):
    Topic = KpTxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    Partition = Topic.TxnOffsetCommitResponsePartition
    by_topic = {}
    for (topic, partition), code in PARTITION_ERRORS.items():
        by_topic.setdefault(topic, []).append(Partition(partition_index=partition,
                                                        error_code=code, version=version))
    return dict(throttle_time_ms=1, topics=[Topic(name=topic, partitions=partitions,
                                                  version=version)
                                            for topic, partitions in by_topic.items()])


def end_txn_response_fields(version):
    return dict(throttle_time_ms=4, error_code=0, producer_id=1 << 41, producer_epoch=8)


def build_batch(records, base_timestamp_ms=None, producer_id=-1, producer_epoch=-1,
                base_sequence=-1, transactional=False):
    """A sealed RecordBatch v2 built by kafka-python: records are (key, value, headers)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=transactional, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 20)
    timestamp_ms = base_timestamp_ms if base_timestamp_ms is not None else int(time.time() * 1000)
    for offset, (key, value, headers) in enumerate(records):
        assert builder.append(offset, timestamp=timestamp_ms + offset, key=key, value=value,
                              headers=headers) is not None
    return bytes(builder.build())
