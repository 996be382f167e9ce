"""netkafka.protocol: encoders, decoders, version negotiation, error codes.

Checked against independent parts: kafka-python's protocol classes (generated
from Kafka's message specs) encode the same requests and produce responses for
our decoders; a real Kafka 4.x broker answers our requests; confluent-kafka
(netkafka.testing.reader) reads back what our Produce requests wrote.
"""
import pickle
import struct
import time
import uuid

import kafka.errors as kafka_python_errors
import pytest
from kafka.protocol.consumer.group import OffsetFetchRequest as KpOffsetFetchRequest
from kafka.protocol.admin import (
    DescribeProducersRequest as KpDescribeProducersRequest,
    DescribeProducersResponse as KpDescribeProducersResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest as KpApiVersionsRequest,
    ApiVersionsResponse as KpApiVersionsResponse,
    MetadataRequest as KpMetadataRequest,
    MetadataResponse as KpMetadataResponse,
)
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest as KpFindCoordinatorRequest,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest as KpAddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest as KpAddPartitionsToTxnRequest,
    EndTxnRequest as KpEndTxnRequest,
    TxnOffsetCommitRequest as KpTxnOffsetCommitRequest,
)
from kafka.protocol.producer import (
    InitProducerIdRequest as KpInitProducerIdRequest,
    InitProducerIdResponse as KpInitProducerIdResponse,
    ProduceRequest as KpProduceRequest,
    ProduceResponse as KpProduceResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest as KpSaslAuthenticateRequest,
    SaslAuthenticateResponse as KpSaslAuthenticateResponse,
    SaslHandshakeRequest as KpSaslHandshakeRequest,
    SaslHandshakeResponse as KpSaslHandshakeResponse,
)

from blocking_wire import BlockingWire
from netkafka import errors
from netkafka.protocol._reader import Reader
from netkafka.protocol.api_versions import (
    API_VERSIONS_VERSION, ApiVersionsResponse, decode_api_versions_response,
    encode_api_versions_request,
)
from netkafka.protocol.describe_producers import (
    PartitionProducers, ProducerState, decode_describe_producers_response,
    encode_describe_producers_request,
)
from netkafka.protocol.framing import ApiKey, Node, api_name
from netkafka.protocol.init_producer_id import (
    InitProducerIdResponse, decode_init_producer_id_response, encode_init_producer_id_request,
)
from netkafka.protocol.metadata import decode_metadata_response, encode_metadata_request
from netkafka.protocol.produce import (
    decode_produce_response, encode_produce_request, wire_bytes,
)
from netkafka.protocol.sasl_authenticate import (
    SaslAuthenticateResponse, decode_sasl_authenticate_response, encode_sasl_authenticate_request,
)
from netkafka.protocol.sasl_handshake import (
    SaslHandshakeResponse, decode_sasl_handshake_response, encode_sasl_handshake_request,
)
from netkafka.protocol.versions import APIS, SUPPORTED_VERSIONS, negotiate_versions
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic
from protocol_samples import (
    ALL_VERSIONS, CORRELATION_ID, FINALIZED_FEATURES, PRODUCE_ENCODED_VERSIONS,
    api_versions_response_fields, assert_metadata_equal, assert_produce_response_equal,
    build_batch, init_producer_id_response_fields, kafka_python_decode, kafka_python_response,
    metadata_response_fields, produce_response_fields, sasl_authenticate_response_fields,
    sasl_handshake_response_fields,
)

CLIENT_ID = "netkafka-test"


def joined(buffers):
    return b"".join(bytes(b) for b in buffers)


def kafka_python_request(cls, version, **fields):
    request = cls[version](**fields)
    request.with_header(correlation_id=CORRELATION_ID, client_id=CLIENT_ID)
    return bytes(request.encode(header=True, framed=True))


# --- Reader: every read bounds-checked


def test_reader_reads_big_endian_fixed_width_types():
    data = struct.pack(">bhiq?", -2, -300, -70000, -(1 << 40), True) + uuid.UUID(int=5).bytes
    r = Reader(data, False)
    assert (r.int8(), r.int16(), r.int32(), r.int64(), r.boolean()) == (-2, -300, -70000, -(1 << 40), True)
    assert r.uuid() == uuid.UUID(int=5)
    assert r.remaining == 0
    r.expect_end()


def test_reader_uuids_stay_right_past_the_cache_of_known_ones():
    # Read UUIDs are cached by their bytes (a topic id in every answer), up to a bound:
    # whatever was read before, each read gives the id of its own bytes.
    ids = [uuid.UUID(int=n) for n in range(5000)] + [uuid.UUID(int=7), uuid.UUID(int=4999)]
    r = Reader(b"".join(topic_id.bytes for topic_id in ids), False)
    assert [r.uuid() for _ in ids] == ids


@pytest.mark.parametrize("value, encoded", [
    (0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
    (2 ** 32 - 1, b"\xff\xff\xff\xff\x0f"),
])
def test_reader_unsigned_varint(value, encoded):
    r = Reader(encoded, True)
    assert r.uvarint() == value
    r.expect_end()


@pytest.mark.parametrize("encoded, problem", [
    (b"", "truncated"),
    (b"\x80\x80", "truncated"),
    (b"\xff\xff\xff\xff\x10", "exceeds 32 bits"),
    (b"\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
])
def test_reader_refuses_bad_varints(encoded, problem):
    with pytest.raises(errors.ProtocolError, match=problem):
        Reader(encoded, True).uvarint()


def test_reader_strings_classic_and_compact():
    r = Reader(b"\x00\x03abc\xff\xff", False)
    assert r.string() == "abc"
    assert r.nullable_string() is None
    r = Reader(b"\x04abc\x00\x03\xc3\xa9", True)
    assert r.string() == "abc"
    assert r.nullable_string() is None
    assert r.string() == "\u00e9"


@pytest.mark.parametrize("data, flexible, problem", [
    (b"\x00\x05abc", False, "truncated"),            # length beyond the data
    (b"\xff\xfe", False, "negative string length"),  # -2
    (b"\xff\xff", False, "null string"),             # null where not allowed
    (b"\x00", True, "null string"),
    (b"\x00\x02\xff\xfe", False, "not UTF-8"),
    (b"\xff\xff\xff\xff\x0f", True, "truncated"),    # 4 GiB claimed
])
def test_reader_refuses_bad_strings(data, flexible, problem):
    with pytest.raises(errors.ProtocolError, match=problem):
        Reader(data, flexible).string()


def test_reader_array_length_checked_against_remaining_bytes():
    # 3 elements of at least 4 bytes need 12 bytes; 11 are there.
    with pytest.raises(errors.ProtocolError, match="claims 3 elements"):
        Reader(struct.pack(">i", 3) + bytes(11), False).array_length(4)
    assert Reader(struct.pack(">i", 3) + bytes(12), False).array_length(4) == 3
    assert Reader(struct.pack(">i", -1), False).array_length(4) == -1
    with pytest.raises(errors.ProtocolError, match="negative array length"):
        Reader(struct.pack(">i", -5), False).array_length(1)
    # A count of 2**31 - 1 in five bytes: refused before anything is allocated.
    with pytest.raises(errors.ProtocolError, match="claims"):
        Reader(b"\xff\xff\xff\xff\x07", True).int32_array()
    assert Reader(b"\x03" + struct.pack(">ii", 7, -1), True).int32_array() == [7, -1]


def test_reader_required_array_length_refuses_null_naming_the_array():
    r = Reader(b"\x00\x07\xff\xff\xff\xff", False)
    assert r.int16() == 7
    with pytest.raises(errors.ProtocolError, match="null brokers array at offset 2"):
        r.required_array_length(4, "brokers")
    with pytest.raises(errors.ProtocolError, match="null topics array at offset 0"):
        Reader(b"\x00", True).required_array_length(1, "topics")
    assert Reader(b"\x03" + bytes(4), True).required_array_length(2, "topics") == 2
    with pytest.raises(errors.ProtocolError, match="claims 2 elements"):
        Reader(b"\x03" + bytes(3), True).required_array_length(2, "topics")


def test_reader_tagged_fields_skipped_and_checked():
    # Two fields: tag 0 of 2 bytes, tag 5 of 0 bytes; then an int8.
    r = Reader(b"\x02\x00\x02ab\x05\x00\x09", True)
    r.skip_tagged_fields()
    assert r.int8() == 9
    with pytest.raises(errors.ProtocolError, match="truncated"):
        Reader(b"\x01\x00\x05ab", True).skip_tagged_fields()  # size beyond the data
    with pytest.raises(errors.ProtocolError, match="claims 100 fields"):
        Reader(b"\x64\x00\x00", True).skip_tagged_fields()


def test_reader_expect_end_refuses_trailing_bytes():
    r = Reader(b"\x00\x01\x02", False)
    r.int16()
    with pytest.raises(errors.ProtocolError, match="1 unexpected bytes"):
        r.expect_end()


def test_reader_takes_any_contiguous_buffer():
    backing = bytearray(b"xx\x00\x00\x00\x07yy")
    assert Reader(memoryview(backing)[2:6], False).int32() == 7
    with pytest.raises(BufferError):
        Reader(memoryview(backing)[::2], False)


# --- API keys and the API modules' specs


def test_api_keys_and_names_agree_with_kafka_python():
    requests = (KpApiVersionsRequest, KpMetadataRequest, KpInitProducerIdRequest, KpProduceRequest,
                KpFindCoordinatorRequest, KpAddPartitionsToTxnRequest, KpAddOffsetsToTxnRequest,
                KpEndTxnRequest, KpTxnOffsetCommitRequest, KpSaslHandshakeRequest,
                KpSaslAuthenticateRequest, KpDescribeProducersRequest, KpOffsetFetchRequest)
    assert {key: key.kafka_name for key in ApiKey} == {
        cls.API_KEY: cls.__name__.removesuffix("Request") for cls in requests}
    assert api_name(ApiKey.INIT_PRODUCER_ID) == "InitProducerId"
    assert api_name(1) == "API 1"  # Fetch: not one netkafka speaks


def test_every_api_key_has_one_spec():
    assert sorted(api.key for api in APIS) == sorted(ApiKey)
    for api in APIS:
        low, high = api.versions
        assert low <= api.flexible_version and low <= high
        assert api.check_version(high) == (high >= api.flexible_version)
        with pytest.raises(ValueError, match=f"{api.key.kafka_name} v{high + 1} is not supported"):
            api.check_version(high + 1)


# --- encoders: byte-identical to kafka-python's


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.API_VERSIONS])
def test_api_versions_request_matches_kafka_python(version):
    ours = encode_api_versions_request(
        CORRELATION_ID, CLIENT_ID, version, client_software_name="netkafka",
        client_software_version="1.2.3")
    fields = ({"client_software_name": "netkafka", "client_software_version": "1.2.3"}
              if version >= 3 else {})
    assert ours == kafka_python_request(KpApiVersionsRequest, version, **fields)


def test_api_versions_request_refuses_names_the_broker_would_refuse():
    with pytest.raises(ValueError, match="letters, digits"):
        encode_api_versions_request(1, CLIENT_ID, 3, client_software_name="net kafka")


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.METADATA])
@pytest.mark.parametrize("topics", [None, ["alpha", "b\u00e9ta"]])
def test_metadata_request_matches_kafka_python(version, topics):
    allow = version % 2 == 0  # both values over the versions
    ours = encode_metadata_request(CORRELATION_ID, CLIENT_ID, version, topics,
                                   allow_auto_topic_creation=allow)
    Topic = KpMetadataRequest.MetadataRequestTopic
    kp_topics = None if topics is None else [
        Topic(name=name, topic_id=uuid.UUID(int=0), version=version) for name in topics]
    theirs = kafka_python_request(
        KpMetadataRequest, version, topics=kp_topics, allow_auto_topic_creation=allow,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
    assert ours == theirs


def test_metadata_request_v0_cannot_ask_for_no_topics():
    with pytest.raises(ValueError, match="v0 cannot ask for no topics"):
        encode_metadata_request(1, CLIENT_ID, 0, [])


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.INIT_PRODUCER_ID])
@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
def test_init_producer_id_request_matches_kafka_python(version, transactional_id):
    producer = {"producer_id": 77, "producer_epoch": 3} if version >= 3 else {}
    ours = encode_init_producer_id_request(
        CORRELATION_ID, CLIENT_ID, version, transactional_id, 60000, **producer)
    theirs = kafka_python_request(
        KpInitProducerIdRequest, version, transactional_id=transactional_id,
        transaction_timeout_ms=60000, **producer)
    assert ours == theirs


def test_sasl_handshake_request_matches_kafka_python():
    ours = encode_sasl_handshake_request(CORRELATION_ID, CLIENT_ID, 1, "SCRAM-SHA-256")
    assert ours == kafka_python_request(KpSaslHandshakeRequest, 1, mechanism="SCRAM-SHA-256")


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.SASL_AUTHENTICATE])
@pytest.mark.parametrize("auth_bytes", [b"", b"\0alice\0secret", bytes(range(256)) * 4])
def test_sasl_authenticate_request_matches_kafka_python(version, auth_bytes):
    ours = encode_sasl_authenticate_request(CORRELATION_ID, CLIENT_ID, version, auth_bytes)
    assert ours == kafka_python_request(KpSaslAuthenticateRequest, version, auth_bytes=auth_bytes)


def kafka_python_produce_request(version, acks, timeout_ms, topic_data, topic_ids):
    """kafka-python's encoding of the same Produce request: the reference bytes."""
    Topic = KpProduceRequest.TopicProduceData
    return kafka_python_request(KpProduceRequest, version, transactional_id=None, acks=acks,
                                timeout_ms=timeout_ms, topic_data=[
        Topic(**({"topic_id": topic_ids[name]} if version >= 13 else {"name": name}),
              partition_data=[Topic.PartitionProduceData(index=p, records=bytes(b))
                              for p, b in parts], version=version)
        for name, parts in topic_data.items()])


@pytest.mark.parametrize("version", PRODUCE_ENCODED_VERSIONS)
def test_produce_request_matches_kafka_python_and_copies_no_batch(version):
    batches = {("t1", 0): build_batch([(b"k", b"v0", [])], 1000),
               ("t1", 3): bytearray(build_batch([(None, b"v1", [("h", b"x")])], 2000)),
               ("t\u00e9", 1): build_batch([(b"k2", b"v2" * 100, [])], 3000)}
    topic_data = {}
    for (topic, partition), batch in batches.items():
        topic_data.setdefault(topic, []).append((partition, batch))
    topic_ids = {"t1": uuid.UUID(int=11), "t\u00e9": uuid.UUID(int=12)}
    buffers = encode_produce_request(
        CORRELATION_ID, CLIENT_ID, version, -1, 30000, topic_data, topic_ids=topic_ids)

    theirs = kafka_python_produce_request(version, -1, 30000, topic_data, topic_ids)
    assert joined(buffers) == theirs
    assert struct.unpack_from(">i", buffers[0])[0] == len(theirs) - 4
    # Every batch is in the list as a view of its own memory, not a copy.
    views = [b for b in buffers if isinstance(b, memoryview)]
    assert [v.obj for v in views] == list(batches.values())


def test_produce_request_with_transactional_id_matches_kafka_python():
    batch = build_batch([(b"k", b"v", [])], 1000)
    ours = joined(encode_produce_request(
        CORRELATION_ID, CLIENT_ID, 11, 1, 500, {"t": [(0, batch)]}, transactional_id="tx"))
    Topic = KpProduceRequest.TopicProduceData
    assert ours == kafka_python_request(
        KpProduceRequest, 11, transactional_id="tx", acks=1, timeout_ms=500, topic_data=[
            Topic(name="t", partition_data=[Topic.PartitionProduceData(index=0, records=batch)])])


def test_produce_request_takes_a_slice_of_a_larger_buffer_without_copying():
    backing = bytearray(b"....") + bytearray(build_batch([(b"k", b"v", [])], 1000)) + b"...."
    window = memoryview(backing)[4:-4]
    buffers = encode_produce_request(1, CLIENT_ID, 9, 1, 1000, {"t": [(0, window)]})
    assert buffers[1].obj is backing
    backing[4] = 0x7F  # what goes out is the batch memory itself
    assert bytes(buffers[1])[0] == 0x7F


def test_produce_request_takes_a_batch_in_segments_without_copying_them():
    batch = build_batch([(b"k", b"v" * 3000, []), (None, b"w" * 500, [("h", b"x")])], 1000)
    head, value, tail = bytes(batch[:100]), bytes(batch[100:3100]), bytearray(batch[3100:])
    segments = (memoryview(head), memoryview(value), memoryview(tail))
    buffers = encode_produce_request(1, CLIENT_ID, 9, 1, 1000, {"t": [(0, segments)]})
    assert joined(buffers) == joined(encode_produce_request(1, CLIENT_ID, 9, 1, 1000,
                                                            {"t": [(0, batch)]}))
    assert [b.obj for b in buffers if isinstance(b, memoryview)] == [head, value, tail]
    assert wire_bytes(segments) == wire_bytes(batch) == len(batch)


@pytest.mark.parametrize("kwargs, problem", [
    ({"acks": 2}, "acks must be 0, 1 or -1"),
    ({"version": -1}, "Produce v-1 is not supported"),
    ({"version": 2, "transactional_id": "tx"}, "Produce v2 has no transactional id"),
    ({"version": 14}, "Produce v14 is not supported"),
    ({"version": 13}, "names topics by id"),
    ({"version": 13, "topic_ids": {"other": uuid.uuid4()}}, "needs the topic id of 't'"),
    ({"version": 13, "topic_ids": {"t": uuid.UUID(int=0)}}, "needs the topic id of 't'"),
])
def test_produce_request_refuses_bad_arguments(kwargs, problem):
    args = {"correlation_id": 1, "client_id": CLIENT_ID, "version": 9, "acks": 1,
            "timeout_ms": 1000, "topic_data": {"t": [(0, b"x")]}, **kwargs}
    with pytest.raises(ValueError, match=problem):
        encode_produce_request(**args)


def test_produce_request_refuses_a_non_contiguous_batch():
    with pytest.raises(ValueError, match="not a contiguous buffer"):
        encode_produce_request(1, CLIENT_ID, 9, 1, 1000,
                               {"t": [(0, memoryview(b"abcdef")[::2])]})


@pytest.mark.parametrize("version", PRODUCE_ENCODED_VERSIONS)
def test_produce_request_matches_kafka_python_at_multi_byte_lengths(version):
    # The native encoder's varints and lengths past one byte: 200 partitions (a
    # 2-byte array count), a 20,000-byte batch (a 3-byte compact length), a
    # 150-byte non-ASCII topic name (a 2-byte compact string length).
    small = build_batch([(b"k", b"v", [])], 1000)
    large = build_batch([(None, b"x" * 20000, [])], 2000)
    long_name = "\u00e9" * 75
    topic_data = {"many": [(p, small) for p in range(200)], long_name: [(7, large)]}
    topic_ids = {"many": uuid.UUID(int=21), long_name: uuid.UUID(int=22)}
    buffers = encode_produce_request(
        CORRELATION_ID, CLIENT_ID, version, 1, 1500, topic_data, topic_ids=topic_ids)

    theirs = kafka_python_produce_request(version, 1, 1500, topic_data, topic_ids)
    assert joined(buffers) == theirs
    assert struct.unpack_from(">i", buffers[0])[0] == len(theirs) - 4


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_produce_request_non_ascii_transactional_id_matches_kafka_python(version):
    batch = build_batch([(b"k", b"v", [])], 1000)
    ours = joined(encode_produce_request(
        CORRELATION_ID, CLIENT_ID, version, -1, 500, {"t": [(0, batch)]},
        transactional_id="tx-\u00e9\u4e2d"))
    Topic = KpProduceRequest.TopicProduceData
    assert ours == kafka_python_request(
        KpProduceRequest, version, transactional_id="tx-\u00e9\u4e2d", acks=-1,
        timeout_ms=500, topic_data=[
            Topic(name="t", partition_data=[Topic.PartitionProduceData(index=0, records=batch)])])


@pytest.mark.parametrize("client_id, field", [
    (None, b"\xff\xff"), ("", b"\x00\x00"), ("\u00e9", b"\x00\x02\xc3\xa9"),
])
def test_produce_request_header_client_id(client_id, field):
    # ClientId keeps its int16 length (null: -1) at every version, flexible ones too.
    for version in (3, 9, 13):
        buffers = encode_produce_request(
            5, client_id, version, 1, 1000, {"t": [(0, b"batch")]},
            topic_ids={"t": uuid.UUID(int=3)})
        assert bytes(buffers[0][4:12]) == struct.pack(">hhi", 0, version, 5)
        assert bytes(buffers[0][12:12 + len(field)]) == field


@pytest.mark.parametrize("kwargs, error, problem", [
    ({"client_id": "bad\ud800"}, errors.IllegalArgumentError, "no UTF-8 form"),
    ({"client_id": "c" * 40000}, errors.IllegalArgumentError, "at most 32767"),
    ({"client_id": b"bytes"}, TypeError, "must be a str"),
    ({"transactional_id": "tx\udfff"}, errors.IllegalArgumentError, "no UTF-8 form"),
    ({"transactional_id": "\u00e9" * 20000}, errors.IllegalArgumentError, "at most 32767"),
    ({"topic_data": {"t\ud800": [(0, b"x")]}}, errors.IllegalArgumentError, "no UTF-8 form"),
    ({"topic_data": {None: [(0, b"x")]}}, ValueError, "string may not be None"),
    ({"topic_data": {"t": [(0, "not a buffer")]}}, TypeError, "bytes-like object"),
])
def test_produce_request_refuses_strings_and_buffers_it_cannot_send(kwargs, error, problem):
    args = {"correlation_id": 1, "client_id": CLIENT_ID, "version": 9, "acks": 1,
            "timeout_ms": 1000, "topic_data": {"t": [(0, b"x")]}, **kwargs}
    with pytest.raises(error, match=problem):
        encode_produce_request(**args)


# --- decoders on kafka-python's encodings

@pytest.mark.parametrize("version", PRODUCE_ENCODED_VERSIONS)
def test_produce_response_decoded_as_kafka_python_encodes_it(version):
    data = kafka_python_response(KpProduceResponse, version, **produce_response_fields(version))
    ours = decode_produce_response(data, version)
    theirs = kafka_python_decode(KpProduceResponse, data, version)
    assert_produce_response_equal(ours, theirs, version)
    if version >= 10:  # the tagged fields were really there, not defaults
        assert ours.topics[0].partitions[1].leader_id == 3
        assert ours.node_endpoints[0] == Node(3, "b3.example", 9093, "r1")


def produce_response_v10(partition_tags, response_tags):
    """A v10 Produce response for topic "t" partition 0, with the given tagged sections."""
    partition = struct.pack(">ihqqq", 0, 6, -1, -1, -1) + b"\x01\x00"  # no record errors, no message
    return (b"\x00"                                    # response header: no tagged fields
            + b"\x02" + b"\x02t" + b"\x02" + partition + partition_tags + b"\x00"
            + struct.pack(">i", 0) + response_tags)


# Tag 0 (CurrentLeader), 9 bytes: leader id, leader epoch, its own (empty) tagged fields.
LEADER_3_EPOCH_9 = b"\x00\x09" + struct.pack(">ii", 3, 9) + b"\x00"


def test_produce_response_reads_known_tags_and_skips_unknown_ones():
    data = produce_response_v10(b"\x02" + LEADER_3_EPOCH_9 + b"\x05\x02zz", b"\x01\x07\x03abc")
    response = decode_produce_response(data, 10)
    part = response.topics[0].partitions[0]
    assert (part.error_code, part.leader_id, part.leader_epoch) == (6, 3, 9)
    assert response.node_endpoints == []
    # In v9 tag 0 means nothing yet: skipped.
    part = decode_produce_response(data, 9).topics[0].partitions[0]
    assert (part.leader_id, part.leader_epoch) == (-1, -1)


@pytest.mark.parametrize("tags, problem", [
    (b"\x01\x00\x0a" + struct.pack(">ii", 3, 9) + b"\x00\x00", "CurrentLeader has 1 bytes left"),
    (b"\x01\x00\x08" + struct.pack(">ii", 3, 9) + b"\x00", "truncated"),
    (b"\x01\x00\x20" + struct.pack(">ii", 3, 9) + b"\x00", "truncated"),
])
def test_produce_response_refuses_a_misframed_known_tag(tags, problem):
    with pytest.raises(errors.ProtocolError, match=problem):
        decode_produce_response(produce_response_v10(tags, b"\x00"), 10)


def test_produce_response_refuses_truncation_and_trailing_bytes():
    data = kafka_python_response(KpProduceResponse, 9, **produce_response_fields(9))
    for cut in range(len(data)):
        with pytest.raises(errors.ProtocolError):
            decode_produce_response(data[:cut], 9)
    with pytest.raises(errors.ProtocolError, match="unexpected bytes"):
        decode_produce_response(data + b"\x00", 9)


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.METADATA])
def test_metadata_response_decoded_as_kafka_python_encodes_it(version):
    data = kafka_python_response(KpMetadataResponse, version, **metadata_response_fields(version))
    ours = decode_metadata_response(data, version)
    assert_metadata_equal(ours, kafka_python_decode(KpMetadataResponse, data, version), version)
    assert ours.topics[0].partitions[0].replicas == (1, 2, 3)


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.API_VERSIONS])
def test_api_versions_response_decoded_as_kafka_python_encodes_it(version):
    data = kafka_python_response(KpApiVersionsResponse, version,
                                 **api_versions_response_fields(version))
    ours = decode_api_versions_response(data, version)
    assert ours.error_code == 0
    assert ours.api_versions == {0: (3, 13), 3: (0, 13), 18: (0, 4)}
    assert ours.throttle_time_ms == (9 if version >= 1 else 0)
    assert ours.finalized_features == (FINALIZED_FEATURES if version >= 3 else {})


@pytest.mark.parametrize("asked_version", [1, 3, 4])
def test_api_versions_unsupported_version_answer_is_read_as_v0(asked_version):
    Key = KpApiVersionsResponse.ApiVersion
    data = kafka_python_response(KpApiVersionsResponse, 0, error_code=35, api_keys=[
        Key(api_key=18, min_version=0, max_version=2)])
    response = decode_api_versions_response(data, asked_version)
    assert (response.error_code, response.api_versions) == (35, {18: (0, 2)})
    with pytest.raises(errors.UnsupportedVersionError, match="ApiVersions v0..v2"):
        negotiate_versions(response)


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.INIT_PRODUCER_ID])
def test_init_producer_id_response_decoded_as_kafka_python_encodes_it(version):
    data = kafka_python_response(KpInitProducerIdResponse, version,
                                 **init_producer_id_response_fields(version))
    assert decode_init_producer_id_response(data, version) == \
        InitProducerIdResponse(1, 0, 1 << 40, 7)


def test_describe_producers_request_matches_kafka_python():
    ours = encode_describe_producers_request(CORRELATION_ID, CLIENT_ID, 0,
                                             {"alpha": [0, 2], "b\u00e9ta": [7]})
    Topic = KpDescribeProducersRequest.TopicRequest
    theirs = kafka_python_request(KpDescribeProducersRequest, 0, topics=[
        Topic(name="alpha", partition_indexes=[0, 2], version=0),
        Topic(name="b\u00e9ta", partition_indexes=[7], version=0)])
    assert ours == theirs


def test_describe_producers_response_decoded_as_kafka_python_encodes_it():
    Topic = KpDescribeProducersResponse.TopicResponse
    Partition = Topic.PartitionResponse
    State = Partition.ProducerState
    data = kafka_python_response(KpDescribeProducersResponse, 0, throttle_time_ms=3, topics=[
        Topic(version=0, name="alpha", partitions=[
            Partition(version=0, partition_index=0, error_code=0, error_message=None,
                      active_producers=[
                          State(version=0, producer_id=1 << 40, producer_epoch=7,
                                last_sequence=41, last_timestamp=1_700_000_000_000,
                                coordinator_epoch=-1, current_txn_start_offset=-1)]),
            Partition(version=0, partition_index=1, error_code=6,
                      error_message="not the leader", active_producers=[])])])
    assert decode_describe_producers_response(data, 0) == [
        PartitionProducers("alpha", 0, 0, None, (
            ProducerState(1 << 40, 7, 41, 1_700_000_000_000, -1, -1),)),
        PartitionProducers("alpha", 1, 6, "not the leader", ())]


def test_sasl_handshake_response_decoded_as_kafka_python_encodes_it():
    data = kafka_python_response(KpSaslHandshakeResponse, 1, **sasl_handshake_response_fields(1))
    assert decode_sasl_handshake_response(data, 1) == SaslHandshakeResponse(
        0, ("PLAIN", "SCRAM-SHA-512"))


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.SASL_AUTHENTICATE])
def test_sasl_authenticate_response_decoded_as_kafka_python_encodes_it(version):
    data = kafka_python_response(KpSaslAuthenticateResponse, version,
                                 **sasl_authenticate_response_fields(version))
    assert decode_sasl_authenticate_response(data, version) == SaslAuthenticateResponse(
        0, "no", b"r=nonce,s=salt,i=4096", 3000 if version >= 1 else 0)


@pytest.mark.parametrize("version, data", [
    (0, struct.pack(">hhi", 0, -1, 100) + b"short"),  # auth bytes longer than the answer
    (0, struct.pack(">hhi", 0, -1, -1)),  # null auth bytes
    (2, b"\x00" + struct.pack(">h", 0) + b"\x00" + b"\xff\xff\xff\xff\x0f"),  # huge compact length
])
def test_sasl_authenticate_decoder_refuses_bad_auth_bytes(version, data):
    with pytest.raises(errors.ProtocolError):
        decode_sasl_authenticate_response(data, version)


@pytest.mark.parametrize("decode, versions", [
    # Produce decodes the legacy versions below the negotiated ones too.
    (decode_produce_response, PRODUCE_ENCODED_VERSIONS),
    (decode_describe_producers_response, ALL_VERSIONS[ApiKey.DESCRIBE_PRODUCERS]),
    (decode_sasl_handshake_response, ALL_VERSIONS[ApiKey.SASL_HANDSHAKE]),
    (decode_sasl_authenticate_response, ALL_VERSIONS[ApiKey.SASL_AUTHENTICATE]),
    (decode_metadata_response, ALL_VERSIONS[ApiKey.METADATA]),
    (decode_api_versions_response, ALL_VERSIONS[ApiKey.API_VERSIONS]),
    (decode_init_producer_id_response, ALL_VERSIONS[ApiKey.INIT_PRODUCER_ID]),
])
def test_decoders_refuse_versions_they_do_not_know(decode, versions):
    low, high = versions[0], versions[-1]
    with pytest.raises(ValueError, match="not supported"):
        decode(b"", high + 1)
    with pytest.raises(ValueError, match="not supported"):
        decode(b"", low - 1)


# --- version negotiation


def api_versions(ranges, error_code=0):
    return ApiVersionsResponse(error_code, ranges, 0)


KAFKA_4_RANGES = {0: (0, 13), 3: (0, 13), 18: (0, 5), 22: (0, 6), 1: (4, 18)}


def test_negotiation_picks_highest_common_version():
    assert negotiate_versions(api_versions(KAFKA_4_RANGES)) == {
        ApiKey.PRODUCE: 13, ApiKey.METADATA: 13, ApiKey.API_VERSIONS: 4,
        ApiKey.INIT_PRODUCER_ID: 5}
    older = {0: (3, 9), 3: (1, 11), 18: (0, 3)}
    assert negotiate_versions(api_versions(older)) == {
        ApiKey.PRODUCE: 9, ApiKey.METADATA: 11, ApiKey.API_VERSIONS: 3}


@pytest.mark.parametrize("ranges, expected", [
    ({0: (0, 2), 3: (0, 13)}, "supports v0..v2 for Produce; netkafka needs Produce v3..v13"),
    ({3: (0, 13)}, "does not offer it for Produce"),
    ({0: (3, 13), 3: (14, 20)}, "supports v14..v20 for Metadata"),
    ({0: (14, 15), 3: (0, 13)}, "supports v14..v15 for Produce"),
])
def test_negotiation_fails_naming_the_brokers_range(ranges, expected):
    with pytest.raises(errors.IncompatibleBrokerError, match=expected):
        negotiate_versions(api_versions(ranges))


# Kafka 3.9.2's and 4.4.0's Produce ranges as their ApiVersions answers give them: 4.x
# still lists v0 though it refuses v0..v2.
KAFKA_3_9_RANGES = {**KAFKA_4_RANGES, 0: (0, 11), 3: (0, 12)}


@pytest.mark.parametrize("pinned", [0, 1, 2])
def test_a_pinned_legacy_produce_version_is_used_where_the_broker_takes_it(pinned):
    chosen = negotiate_versions(api_versions(KAFKA_3_9_RANGES), pinned)
    assert chosen[ApiKey.PRODUCE] == pinned
    assert chosen[ApiKey.METADATA] == 12  # the others are negotiated as ever
    # A broker older than 0.11 (no Produce v3) is no obstacle then.
    assert negotiate_versions(api_versions({0: (0, 2), 3: (0, 2)}), pinned)[
        ApiKey.PRODUCE] == pinned


@pytest.mark.parametrize("ranges, expected", [
    (KAFKA_4_RANGES, r"needs Produce v2 \(legacy message sets\), but the broker is Kafka 4\.0 "
                     r"or newer \(it offers Produce v13\), which refuses v0\.\.v2"),
    ({0: (3, 11), 3: (0, 12)}, r"needs Produce v2 .* the broker supports Produce v3\.\.v11"),
    ({3: (0, 12)}, r"needs Produce v2 .* the broker does not offer Produce"),
])
def test_a_pinned_legacy_produce_version_the_broker_refuses_fails_negotiation(ranges, expected):
    with pytest.raises(errors.IncompatibleBrokerError, match=expected):
        negotiate_versions(api_versions(ranges), 2)


# --- error codes


def test_error_codes_map_to_named_errors_with_flags():
    error = errors.error_for_code(6, "broker 2 leads it now")
    assert isinstance(error, errors.NotLeaderOrFollowerError)
    assert isinstance(error, errors.BrokerError) and isinstance(error, errors.KafkaError)
    assert (error.code, error.name, error.retriable, error.invalid_metadata) == (
        6, "NOT_LEADER_OR_FOLLOWER", True, True)
    assert str(error) == "NOT_LEADER_OR_FOLLOWER (error code 6): broker 2 leads it now"
    assert "not the partition's leader" in str(errors.error_for_code(6))
    generic = errors.error_for_code(27)  # REBALANCE_IN_PROGRESS: no class of its own
    assert type(generic) is errors.BrokerError
    assert (generic.code, generic.name, generic.retriable) == (27, "REBALANCE_IN_PROGRESS", False)
    unknown = errors.error_for_code(9999)
    assert (unknown.code, unknown.name, unknown.retriable) == (9999, "UNKNOWN_ERROR_CODE_9999", False)
    with pytest.raises(ValueError):
        errors.error_for_code(0)


def test_errors_survive_pickling():
    for code in (6, 22, 9999):
        error = errors.error_for_code(code, "why")
        copy = pickle.loads(pickle.dumps(error))
        assert (type(copy), copy.code, copy.name, copy.message, str(copy)) == (
            type(error), error.code, error.name, error.message, str(error))


# Where kafka-python's table differs from Kafka 4.x's: codes it still calls by
# their old names, and two flags where we follow the Java client's exception
# classes (CorruptRecordException is a RetriableException; UnknownLeaderEpoch
# is not an InvalidMetadataException).
KAFKA_PYTHON_DIFFERENCES = {
    -1: ("UNKNOWN", False, False), 2: ("CORRUPT_MESSAGE", False, False),
    6: ("NOT_LEADER_FOR_PARTITION", True, True), 10: ("MESSAGE_SIZE_TOO_LARGE", False, False),
    17: ("INVALID_TOPIC", False, False), 39: ("INVALID_REPLICATION_ASSIGNMENT", False, False),
    75: ("UNKNOWN_LEADER_EPOCH", True, True),
}


def test_error_table_agrees_with_kafka_python():
    theirs = {}
    for name in dir(kafka_python_errors):
        cls = getattr(kafka_python_errors, name)
        if (isinstance(cls, type) and issubclass(cls, kafka_python_errors.BrokerResponseError)
                and getattr(cls, "errno", None) not in (None, 0)):
            theirs[cls.errno] = (cls.message, cls.retriable, cls.invalid_metadata)
    assert len(theirs) > 100
    differences = {code: row for code, row in theirs.items() if errors.ERROR_CODES.get(code) != row}
    assert differences == KAFKA_PYTHON_DIFFERENCES


def test_producer_error_codes_have_named_classes():
    named = {
        3: errors.UnknownTopicOrPartitionError, 7: errors.RequestTimedOutError,
        19: errors.NotEnoughReplicasError, 20: errors.NotEnoughReplicasAfterAppendError,
        10: errors.MessageTooLargeError, 18: errors.RecordListTooLargeError,
        2: errors.CorruptMessageError, 87: errors.InvalidRecordError,
        45: errors.OutOfOrderSequenceNumberError, 46: errors.DuplicateSequenceNumberError,
        59: errors.UnknownProducerIdError, 47: errors.InvalidProducerEpochError,
        29: errors.TopicAuthorizationFailedError, 31: errors.ClusterAuthorizationFailedError,
        35: errors.UnsupportedVersionError, 21: errors.InvalidRequiredAcksError,
        13: errors.NetworkError, 5: errors.LeaderNotAvailableError,
        14: errors.CoordinatorLoadInProgressError, 15: errors.CoordinatorNotAvailableError,
        16: errors.NotCoordinatorError,
        # the transactional producer's
        22: errors.IllegalGenerationError, 25: errors.UnknownMemberIdError,
        30: errors.GroupAuthorizationFailedError, 48: errors.InvalidTxnStateError,
        49: errors.InvalidProducerIdMappingError, 50: errors.InvalidTransactionTimeoutError,
        51: errors.ConcurrentTransactionsError, 53: errors.TransactionalIdAuthorizationFailedError,
        55: errors.OperationNotAttemptedError, 82: errors.FencedInstanceIdError,
        90: errors.ProducerFencedError, 120: errors.TransactionAbortableError,
    }
    for code, cls in named.items():
        error = errors.error_for_code(code)
        assert type(error) is cls and error.code == code
        assert error.name == errors.ERROR_CODES[code][0]


# --- against the real broker


@pytest.fixture(scope="module")
def wire(kafka_broker):
    with BlockingWire(kafka_broker.bootstrap) as connection:
        yield connection


@pytest.fixture(scope="module")
def versions(wire):
    data = wire.request(encode_api_versions_request(
        1, CLIENT_ID, API_VERSIONS_VERSION), 1)
    return negotiate_versions(decode_api_versions_response(
        data, API_VERSIONS_VERSION))


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.API_VERSIONS])
def test_api_versions_round_trip(wire, version):
    data = wire.request(encode_api_versions_request(100 + version, CLIENT_ID, version),
                        100 + version)
    ours = decode_api_versions_response(data, version)
    theirs = kafka_python_decode(KpApiVersionsResponse, data, version)
    assert ours.error_code == 0
    assert ours.api_versions == {k.api_key: (k.min_version, k.max_version) for k in theirs.api_keys}
    assert ours.throttle_time_ms == (theirs.throttle_time_ms if version >= 1 else 0)
    # A Kafka 4.x broker: Produce v3+ (it lists 0..2 for old librdkafka, rejecting them).
    produce_low, produce_high = ours.api_versions[ApiKey.PRODUCE]
    assert produce_low <= 3 and produce_high >= 12
    if version >= 3:  # a new 4.x cluster finalizes Transactions V2
        assert ours.finalized_features.get("transaction.version") == 2
    else:
        assert ours.finalized_features == {}
    assert negotiate_versions(ours)[ApiKey.PRODUCE] == min(13, produce_high)


def test_api_versions_unknown_version_answered_with_v0_body(wire):
    # A request version beyond any broker's: it must answer UNSUPPORTED_VERSION
    # with a v0 body (header v2 as for every ApiVersions v3+ request).
    client_id = CLIENT_ID.encode()
    body = struct.pack(">hhih", 18, 999, 77, len(client_id)) + client_id + b"\x00" + b"\x02a\x02b\x00"
    data = wire.request(struct.pack(">i", len(body)) + body, 77)
    response = decode_api_versions_response(data, 4)
    assert response.error_code == 35
    low, high = response.api_versions[ApiKey.API_VERSIONS]
    with pytest.raises(errors.UnsupportedVersionError, match=f"ApiVersions v{low}..v{high}"):
        negotiate_versions(response)


@pytest.fixture(scope="module")
def three_partition_topic(kafka_broker):
    name = f"protocol-metadata-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, name, partitions=3)
    return name


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.METADATA])
def test_metadata_round_trip(wire, kafka_broker, three_partition_topic, version):
    correlation_id = 200 + version
    data = wire.request(encode_metadata_request(
        correlation_id, CLIENT_ID, version, [three_partition_topic]), correlation_id)
    ours = decode_metadata_response(data, version)
    assert_metadata_equal(ours, kafka_python_decode(KpMetadataResponse, data, version), version)

    host, port = kafka_broker.bootstrap.split(",")[0].rsplit(":", 1)
    assert [(b.host, b.port) for b in ours.brokers] == [(host, int(port))]
    node_id = ours.brokers[0].node_id
    assert ours.controller_id == (node_id if version >= 1 else -1)
    [topic] = ours.topics
    assert (topic.error_code, topic.name, topic.is_internal) == (0, three_partition_topic, False)
    assert topic.topic_id is None if version < 10 else topic.topic_id.int != 0
    assert sorted(p.partition for p in topic.partitions) == [0, 1, 2]
    for p in topic.partitions:
        assert (p.error_code, p.leader, p.replicas, p.isr, p.offline_replicas) == (
            0, node_id, (node_id,), (node_id,), ())
        assert p.leader_epoch >= 0 if version >= 7 else p.leader_epoch == -1


def test_metadata_all_topics_and_unknown_topic(wire, three_partition_topic):
    data = wire.request(encode_metadata_request(300, CLIENT_ID, 12, None), 300)
    assert three_partition_topic in {t.name for t in decode_metadata_response(data, 12).topics}
    missing = f"protocol-missing-{uuid.uuid4().hex[:8]}"
    data = wire.request(encode_metadata_request(
        301, CLIENT_ID, 12, [missing], allow_auto_topic_creation=False), 301)
    [topic] = decode_metadata_response(data, 12).topics
    assert (topic.name, topic.error_code, topic.partitions) == (missing, 3, [])
    assert isinstance(errors.error_for_code(topic.error_code), errors.UnknownTopicOrPartitionError)


def init_producer_id(wire, version, correlation_id):
    """InitProducerId, asked again while the broker answers a retriable error (the
    first request makes it create and load its transaction state topic)."""
    deadline = time.monotonic() + 60
    while True:
        data = wire.request(encode_init_producer_id_request(
            correlation_id, CLIENT_ID, version), correlation_id)
        response = decode_init_producer_id_response(data, version)
        if (response.error_code == 0 or not errors.error_for_code(response.error_code).retriable
                or time.monotonic() > deadline):
            return data, response
        time.sleep(0.2)


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.INIT_PRODUCER_ID])
def test_init_producer_id_round_trip(wire, version):
    data, ours = init_producer_id(wire, version, 400 + version)
    theirs = kafka_python_decode(KpInitProducerIdResponse, data, version)
    assert ours == InitProducerIdResponse(
        theirs.throttle_time_ms, theirs.error_code, theirs.producer_id, theirs.producer_epoch)
    assert ours.error_code == 0 and ours.producer_id >= 0 and ours.producer_epoch >= 0


def topic_id_of(wire, topic):
    data = wire.request(encode_metadata_request(500, CLIENT_ID, 12, [topic]), 500)
    return decode_metadata_response(data, 12).topics[0].topic_id


def produce(wire, version, acks, topic_data, correlation_id, topic_ids=None):
    buffers = encode_produce_request(correlation_id, CLIENT_ID, version, acks, 30000,
                                     topic_data, topic_ids=topic_ids)
    if acks == 0:
        wire.send(buffers)
        return None
    return decode_produce_response(wire.request(buffers, correlation_id), version)


MARKER = (None, b"marker", [])


def writable_topic(kafka_broker, wire, prefix, partitions):
    """A new topic whose leader already takes writes, with one MARKER record (offset 0)
    in each partition.

    The broker names a partition's leader in its metadata a moment before that
    leader accepts produce requests (NOT_LEADER_OR_FOLLOWER until then), so the
    markers are written, and retried while the answer is retriable, before the
    test's own records.
    """
    name = f"protocol-{prefix}-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_broker.bootstrap, name, partitions=partitions)
    pending = set(range(partitions))
    deadline = time.monotonic() + 60
    while pending:
        response = produce(wire, 11, 1, {name: [(p, build_batch([MARKER])) for p in sorted(pending)]},
                           550)
        for part in response.topics[0].partitions:
            if part.error_code == 0:
                pending.discard(part.partition)
            elif not errors.error_for_code(part.error_code).retriable or time.monotonic() > deadline:
                raise errors.error_for_code(part.error_code, f"marker in partition {part.partition}")
        if pending:
            time.sleep(0.1)
    return name


@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_round_trip_read_back_by_confluent_kafka(wire, kafka_broker, versions, acks):
    topics = [writable_topic(kafka_broker, wire, f"acks{acks}-{i}", partitions=2) for i in range(2)]
    version = versions[ApiKey.PRODUCE]
    topic_ids = {t: topic_id_of(wire, t) for t in topics} if version >= 13 else None
    timestamp_ms = int(time.time() * 1000)
    expected = {}  # (topic, partition) -> [(key, value, headers)]
    topic_data = {}
    for t, topic in enumerate(topics):
        for partition in range(2):
            records = [(f"k{t}{partition}{i}".encode(), bytes([i]) * (i * 37),
                        [("h", f"{i}".encode())] if i % 2 else [])
                       for i in range(20)]
            records.append((None, None, []))  # null key and null value
            expected[(topic, partition)] = records
            topic_data.setdefault(topic, []).append(
                (partition, build_batch(records, timestamp_ms)))
    response = produce(wire, version, acks, topic_data, 600 + acks, topic_ids)
    if acks == 0:
        assert response is None
    else:
        answered = {}
        for t in response.topics:
            name = t.name if version < 13 else {v: k for k, v in topic_ids.items()}[t.topic_id]
            for p in t.partitions:
                answered[(name, p.partition)] = (p.error_code, p.base_offset)
        assert answered == {key: (0, 1) for key in expected}  # after the marker

    for topic in topics:
        records = read_topic(kafka_broker.bootstrap, topic, expected_count=2 * 22)
        got = {}
        for record in records:
            got.setdefault((topic, record.partition), []).append(
                (record.key, record.value, record.headers, record.timestamp_ms))
        for partition in range(2):
            marker, *written = got[(topic, partition)]
            assert marker[:3] == MARKER
            assert written == [
                (key, value, headers, timestamp_ms + i)
                for i, (key, value, headers) in enumerate(expected[(topic, partition)])]


def test_produce_every_version_round_trip(wire, kafka_broker, versions):
    topic = writable_topic(kafka_broker, wire, "versions", partitions=1)
    topic_ids = {topic: topic_id_of(wire, topic)}
    produced = []
    for offset, version in enumerate(range(3, versions[ApiKey.PRODUCE] + 1), start=1):
        value = f"version {version}".encode()
        produced.append(value)
        response = produce(wire, version, -1, {topic: [(0, build_batch([(None, value, [])]))]},
                           700 + version, topic_ids)
        [answer] = response.topics
        assert (answer.name, answer.topic_id) == (
            (topic, None) if version < 13 else (None, topic_ids[topic]))
        [part] = answer.partitions
        assert (part.partition, part.error_code, part.base_offset) == (0, 0, offset)
        assert part.log_append_time_ms == -1  # CreateTime topic
        assert part.log_start_offset == (0 if version >= 5 else -1)
    assert versions[ApiKey.PRODUCE] == 13  # the 4.x broker of the tests offers v13
    records = read_topic(kafka_broker.bootstrap, topic, 1 + len(produced))
    assert [r.value for r in records] == [MARKER[1]] + produced


def test_idempotent_produce_with_init_producer_id(wire, kafka_broker, versions):
    topic = writable_topic(kafka_broker, wire, "idempotent", partitions=1)
    init_version = versions[ApiKey.INIT_PRODUCER_ID]
    _, producer = init_producer_id(wire, init_version, 800)
    assert producer.error_code == 0
    state = {"producer_id": producer.producer_id, "producer_epoch": producer.producer_epoch}
    first = build_batch([(b"a", b"1", []), (b"b", b"2", [])], base_sequence=0, **state)
    version = 12  # by name; v13 is covered above

    def send(batch, correlation_id):
        [topic_answer] = produce(wire, version, -1, {topic: [(0, batch)]}, correlation_id).topics
        return topic_answer.partitions[0]

    answer = send(first, 801)
    assert (answer.error_code, answer.base_offset) == (0, 1)
    # Sent again: recognised as a duplicate, answered with its offset, not written twice.
    answer = send(first, 802)
    assert (answer.error_code, answer.base_offset) == (0, 1)
    gap = build_batch([(b"c", b"3", [])], base_sequence=5, **state)
    answer = send(gap, 803)
    assert answer.error_code == 45
    assert isinstance(errors.error_for_code(answer.error_code, answer.error_message),
                      errors.OutOfOrderSequenceNumberError)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic, 3)] == [MARKER[1], b"1", b"2"]
    # The leader names the producer and the last sequence it appended (the WAL's replay
    # asks so), and knows no producer on a partition it never wrote.
    data = wire.request(encode_describe_producers_request(804, CLIENT_ID, 0, {topic: [0]}),
                        804)
    [answer] = decode_describe_producers_response(data, 0)
    assert (answer.topic, answer.partition, answer.error_code) == (topic, 0, 0)
    [known] = [p for p in answer.producers if p.producer_id == producer.producer_id]
    assert (known.producer_epoch, known.last_sequence) == (producer.producer_epoch, 1)


def test_produce_errors_from_the_broker(wire, kafka_broker):
    topic = writable_topic(kafka_broker, wire, "errors", partitions=1)
    good = build_batch([(b"k", b"v", [])])
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    response = produce(wire, 11, 1, {topic: [(0, corrupt), (7, good)]}, 900)
    answers = {p.partition: p for p in response.topics[0].partitions}
    assert answers[0].error_code == 2
    assert answers[7].error_code == 3
    assert isinstance(errors.error_for_code(answers[0].error_code), errors.CorruptMessageError)
    assert errors.error_for_code(answers[7].error_code).invalid_metadata
