"""Fuzzing the response decoders: only a decoded value or ProtocolError may come out.

Inputs, per decoder and version: random bytes; valid responses (kafka-python's
encodings, and the real broker's answers) mutated by truncation, bit flips,
lengths and counts overwritten with huge or negative values, insertions and
deletions.  Any other exception fails the test; a crash in the native code
kills the run.  A differential test also feeds random *valid* Produce and
Metadata responses, encoded by kafka-python, and compares every field.

Examples per test: FUZZ_EXAMPLES (default 300, a third of that for the
differential tests: the file's tests take 7 to 25 s on two shared cores,
besides the broker's start; NETKAFKA_FUZZ_EXAMPLES=20000 for a long run).

An out-of-bounds read inside a small Python buffer need not crash, so for a
run that reports one, use a sanitizer build of netkafka.protocol._reader and _produce
(NETKAFKA_SANITIZE=address,undefined) with Python's own allocator off, so
that AddressSanitizer sees every buffer's bounds:

    PYTHONMALLOC=malloc LD_PRELOAD=$(gcc -print-file-name=libasan.so) \
    ASAN_OPTIONS=detect_leaks=0 NETKAFKA_FUZZ_EXAMPLES=2000 \
    .venv/bin/python -m pytest tests/test_protocol_fuzz.py
"""
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata import (
    ApiVersionsResponse as KpApiVersionsResponse,
    MetadataResponse as KpMetadataResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorResponse as KpFindCoordinatorResponse,
)
from kafka.protocol.producer import (
    InitProducerIdResponse as KpInitProducerIdResponse,
    ProduceResponse as KpProduceResponse,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnResponse as KpAddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse as KpAddPartitionsToTxnResponse,
    EndTxnResponse as KpEndTxnResponse,
    TxnOffsetCommitResponse as KpTxnOffsetCommitResponse,
)

from blocking_wire import BlockingWire
from netkafka.errors import ProtocolError
from kafka.protocol.sasl import SaslAuthenticateResponse as KpSaslAuthenticateResponse
from kafka.protocol.sasl import SaslHandshakeResponse as KpSaslHandshakeResponse
from netkafka.protocol import (
    add_offsets_to_txn, add_partitions_to_txn, api_versions, end_txn, find_coordinator,
    framing, init_producer_id, metadata, produce, sasl_authenticate, sasl_handshake,
    txn_offset_commit,
)
from netkafka.protocol.framing import ApiKey
from netkafka.testing.admin import create_topic
from protocol_samples import (
    ALL_VERSIONS, add_offsets_to_txn_response_fields, add_partitions_to_txn_response_fields,
    api_versions_response_fields, assert_metadata_equal, assert_produce_response_equal,
    build_batch, end_txn_response_fields, find_coordinator_response_fields,
    init_producer_id_response_fields, kafka_python_decode, kafka_python_response,
    metadata_response_fields, produce_response_fields, sasl_authenticate_response_fields,
    sasl_handshake_response_fields, txn_offset_commit_response_fields,
)

FUZZ_EXAMPLES = int(os.environ.get("NETKAFKA_FUZZ_EXAMPLES", "300"))

FUZZ_SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,  # a shared 2-core machine: example times vary, and speed is not the point
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# The differential tests spend their time in kafka-python's encoder: a third as many.
DIFFERENTIAL_SETTINGS = settings(FUZZ_SETTINGS, max_examples=max(50, FUZZ_EXAMPLES // 3))

# decoder, its API, the kafka-python class and sample builder for valid responses
DECODERS = {
    "produce": (produce.decode_produce_response, ApiKey.PRODUCE,
                KpProduceResponse, produce_response_fields),
    "metadata": (metadata.decode_metadata_response, ApiKey.METADATA,
                 KpMetadataResponse, metadata_response_fields),
    "api_versions": (api_versions.decode_api_versions_response, ApiKey.API_VERSIONS,
                     KpApiVersionsResponse, api_versions_response_fields),
    "init_producer_id": (init_producer_id.decode_init_producer_id_response, ApiKey.INIT_PRODUCER_ID,
                         KpInitProducerIdResponse, init_producer_id_response_fields),
    "sasl_handshake": (sasl_handshake.decode_sasl_handshake_response, ApiKey.SASL_HANDSHAKE,
                       KpSaslHandshakeResponse, sasl_handshake_response_fields),
    "sasl_authenticate": (sasl_authenticate.decode_sasl_authenticate_response,
                          ApiKey.SASL_AUTHENTICATE, KpSaslAuthenticateResponse,
                          sasl_authenticate_response_fields),
    "find_coordinator": (find_coordinator.decode_find_coordinator_response,
                         ApiKey.FIND_COORDINATOR, KpFindCoordinatorResponse,
                         find_coordinator_response_fields),
    "add_partitions_to_txn": (add_partitions_to_txn.decode_add_partitions_to_txn_response,
                              ApiKey.ADD_PARTITIONS_TO_TXN, KpAddPartitionsToTxnResponse,
                              add_partitions_to_txn_response_fields),
    "add_offsets_to_txn": (add_offsets_to_txn.decode_add_offsets_to_txn_response,
                           ApiKey.ADD_OFFSETS_TO_TXN, KpAddOffsetsToTxnResponse,
                           add_offsets_to_txn_response_fields),
    "txn_offset_commit": (txn_offset_commit.decode_txn_offset_commit_response,
                          ApiKey.TXN_OFFSET_COMMIT, KpTxnOffsetCommitResponse,
                          txn_offset_commit_response_fields),
    "end_txn": (end_txn.decode_end_txn_response, ApiKey.END_TXN, KpEndTxnResponse,
                end_txn_response_fields),
}
RESULT_TYPES = {
    "produce": produce.ProduceResponse,
    "metadata": metadata.MetadataResponse,
    "api_versions": api_versions.ApiVersionsResponse,
    "init_producer_id": init_producer_id.InitProducerIdResponse,
    "sasl_handshake": sasl_handshake.SaslHandshakeResponse,
    "sasl_authenticate": sasl_authenticate.SaslAuthenticateResponse,
    "find_coordinator": find_coordinator.FindCoordinatorResponse,
    "add_partitions_to_txn": framing.PartitionErrorsResponse,
    "add_offsets_to_txn": add_offsets_to_txn.AddOffsetsToTxnResponse,
    "txn_offset_commit": framing.PartitionErrorsResponse,
    "end_txn": end_txn.EndTxnResponse,
}

# kafka-python's valid encodings, per (decoder, version): built once.
VALID_SAMPLES = {
    (name, version): kafka_python_response(cls, version, **fields(version))
    for name, (_, api, cls, fields) in DECODERS.items()
    for version in ALL_VERSIONS[api]
}


def decode_or_protocol_error(name, data, version):
    """The fuzz oracle: a value of the decoder's type, or ProtocolError; nothing else."""
    decode = DECODERS[name][0]
    try:
        result = decode(data, version)
    except ProtocolError:
        return None
    assert isinstance(result, RESULT_TYPES[name])
    return result


# Values that break length and count fields: huge, negative, the int16/int32
# limits, and varints at and past 32 bits.
HOSTILE_BYTES = [
    b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xfe",
    b"\xff\xff", b"\x7f\xff", b"\x80\x00", b"\xff\xfe", b"\x00\x00",
    b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\xff", b"\x80\x80\x80\x80\x10", b"\xfe",
    b"\x00", b"\x01", b"\x7f",
]


@st.composite
def mutated(draw, data):
    """`data` changed by one to four mutations."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["truncate", "flip", "hostile", "insert", "delete"]))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "hostile":
            value = draw(st.sampled_from(HOSTILE_BYTES))
            data[at:at + len(value)] = value
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


@pytest.mark.parametrize("name", DECODERS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_decoder_on_random_bytes(name, data):
    version = data.draw(st.sampled_from(ALL_VERSIONS[DECODERS[name][1]]))
    decode_or_protocol_error(name, data.draw(st.binary(max_size=300)), version)


@pytest.mark.parametrize("name", DECODERS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_decoder_on_mutated_valid_responses(name, data):
    version = data.draw(st.sampled_from(ALL_VERSIONS[DECODERS[name][1]]))
    sample = VALID_SAMPLES[(name, version)]
    # The sample itself decodes; mutations of it decode or raise ProtocolError.
    assert decode_or_protocol_error(name, sample, version) is not None
    decode_or_protocol_error(name, data.draw(mutated(sample)), version)


@pytest.mark.parametrize("name", DECODERS)
def test_decoder_on_every_truncation_of_valid_responses(name):
    for version in ALL_VERSIONS[DECODERS[name][1]]:
        sample = VALID_SAMPLES[(name, version)]
        for end in range(len(sample)):
            # A prefix can still be a valid response only by coincidence (an
            # ApiVersions v0 cut right after a shorter array): mostly it raises.
            decode_or_protocol_error(name, sample[:end], version)


# --- the real broker's answers, mutated


@pytest.fixture(scope="module")
def broker_responses(kafka_broker):
    """Real answers of the broker: (decoder name, version, bytes after the correlation id)."""
    topic = f"protocol-fuzz-{os.getpid()}"
    create_topic(kafka_broker.bootstrap, topic, partitions=2)
    captured = []
    with BlockingWire(kafka_broker.bootstrap) as wire:
        for version in ALL_VERSIONS[ApiKey.API_VERSIONS]:
            captured.append(("api_versions", version, wire.request(
                api_versions.encode_api_versions_request(1, "fuzz", version), 1)))
        for version in ALL_VERSIONS[ApiKey.METADATA]:
            captured.append(("metadata", version, wire.request(
                metadata.encode_metadata_request(2, "fuzz", version, [topic]), 2)))
        answer = metadata.decode_metadata_response(captured[-1][2], captured[-1][1])
        topic_ids = {topic: answer.topics[0].topic_id}
        for version in ALL_VERSIONS[ApiKey.PRODUCE]:
            # Partition 5 does not exist: the answer carries an error code too.
            batch = build_batch([(b"key", b"value", [("h", b"1")])])
            captured.append(("produce", version, wire.request(produce.encode_produce_request(
                3, "fuzz", version, 1, 10000, {topic: [(0, batch), (1, batch), (5, batch)]},
                topic_ids=topic_ids), 3)))
    for name, version, data in captured:
        assert decode_or_protocol_error(name, data, version) is not None, (name, version)
    return captured


@FUZZ_SETTINGS
@given(data=st.data())
def test_decoders_on_mutated_broker_responses(broker_responses, data):
    name, version, sample = data.draw(st.sampled_from(broker_responses))
    decode_or_protocol_error(name, data.draw(mutated(sample)), version)


# --- differential: random valid responses, encoded by kafka-python

INT16 = st.integers(-(1 << 15), (1 << 15) - 1)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@st.composite
def produce_responses(draw, version):
    Topic = KpProduceResponse.TopicProduceResponse
    Part = Topic.PartitionProduceResponse
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        parts = []
        for _ in range(draw(st.integers(0, 3))):
            fields = dict(
                index=draw(INT32), error_code=draw(INT16), base_offset=draw(INT64),
                log_append_time_ms=draw(INT64), log_start_offset=draw(INT64),
                record_errors=[Part.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                               for i, m in draw(st.lists(st.tuples(INT32, st.none() | TEXT), max_size=2))],
                error_message=draw(st.none() | TEXT))
            if version >= 10 and draw(st.booleans()):
                fields["current_leader"] = Part.LeaderIdAndEpoch(leader_id=draw(INT32),
                                                                 leader_epoch=draw(INT32))
            parts.append(Part(**fields))
        key = {"topic_id": draw(st.uuids())} if version >= 13 else {"name": draw(TEXT)}
        topics.append(Topic(**key, partition_responses=parts))
    fields = dict(responses=topics, throttle_time_ms=draw(INT32))
    if version >= 10 and draw(st.booleans()):
        fields["node_endpoints"] = [
            KpProduceResponse.NodeEndpoint(node_id=draw(INT32), host=draw(TEXT), port=draw(INT32),
                                           rack=draw(st.none() | TEXT))
            for _ in range(draw(st.integers(1, 2)))]
    return fields


@DIFFERENTIAL_SETTINGS
@given(data=st.data())
def test_random_valid_produce_responses_decode_as_kafka_python_reads_them(data):
    version = data.draw(st.sampled_from(ALL_VERSIONS[ApiKey.PRODUCE]))
    encoded = kafka_python_response(KpProduceResponse, version, **data.draw(produce_responses(version)))
    assert_produce_response_equal(produce.decode_produce_response(encoded, version),
                                  kafka_python_decode(KpProduceResponse, encoded, version), version)


@st.composite
def metadata_responses(draw, version):
    Topic = KpMetadataResponse.MetadataResponseTopic
    Part = Topic.MetadataResponsePartition
    Broker = KpMetadataResponse.MetadataResponseBroker
    int32_lists = st.lists(INT32, max_size=4)
    topics = [
        Topic(error_code=draw(INT16), name=draw(TEXT), topic_id=draw(st.uuids()),
              is_internal=draw(st.booleans()), authorized_operations=set(), partitions=[
                  Part(error_code=draw(INT16), partition_index=draw(INT32), leader_id=draw(INT32),
                       leader_epoch=draw(INT32), replica_nodes=draw(int32_lists),
                       isr_nodes=draw(int32_lists), offline_replicas=draw(int32_lists))
                  for _ in range(draw(st.integers(0, 3)))])
        for _ in range(draw(st.integers(0, 3)))]
    brokers = [Broker(node_id=draw(INT32), host=draw(TEXT), port=draw(INT32),
                      rack=draw(st.none() | TEXT))
               for _ in range(draw(st.integers(0, 3)))]
    return dict(throttle_time_ms=draw(INT32), brokers=brokers, cluster_id=draw(st.none() | TEXT),
                controller_id=draw(INT32), topics=topics, authorized_operations=set(),
                error_code=draw(INT16))


@DIFFERENTIAL_SETTINGS
@given(data=st.data())
def test_random_valid_metadata_responses_decode_as_kafka_python_reads_them(data):
    version = data.draw(st.sampled_from(ALL_VERSIONS[ApiKey.METADATA]))
    encoded = kafka_python_response(KpMetadataResponse, version, **data.draw(metadata_responses(version)))
    assert_metadata_equal(metadata.decode_metadata_response(encoded, version),
                          kafka_python_decode(KpMetadataResponse, encoded, version), version)


def test_hostile_counts_are_refused_before_allocation():
    # Produce v9: a topic array claiming 2**32 - 2 topics in a 6-byte response.
    with pytest.raises(ProtocolError, match="claims 4294967294 elements"):
        produce.decode_produce_response(b"\x00" + b"\xff\xff\xff\xff\x0f" + struct.pack(">i", 0), 9)
    # Metadata v1: 2**31 - 1 brokers claimed.
    with pytest.raises(ProtocolError, match="claims 2147483647 elements"):
        metadata.decode_metadata_response(struct.pack(">i", 0x7FFFFFFF), 1)
