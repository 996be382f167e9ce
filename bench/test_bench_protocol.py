"""Produce framing: netkafka's request encoder and native response decoder vs
kafka-python's and aiokafka's protocol classes.

Parameters: Produce v8 (the newest aiokafka speaks; every peer runs it) and
v11 (flexible, netkafka and kafka-python); one request for 10 topics x 10
partitions, each partition one sealed 16 KiB batch (its bytes are never
looked at, only framed); the response for it (every partition written, no
errors).  netkafka's encoder returns the list of buffers for sendmsg (batches
not copied); the peers return one bytes object with the batches copied in.

    .venv/bin/python -m pytest bench/test_bench_protocol.py --benchmark-only \\
        --benchmark-columns=min,median,rounds
"""
import io

import pytest
from aiokafka.protocol.produce import ProduceRequest_v8 as AiokafkaProduceRequest_v8
from aiokafka.protocol.produce import ProduceResponse_v8 as AiokafkaProduceResponse_v8
from kafka.protocol.producer import ProduceRequest as KpProduceRequest
from kafka.protocol.producer import ProduceResponse as KpProduceResponse

from netkafka.protocol import produce

TOPICS = 10
PARTITIONS = 10
BATCH_BYTES = 16 * 1024
VERSIONS = (8, 11)
CLIENT_ID = "bench"

BATCH = bytes(BATCH_BYTES)
TOPIC_DATA = {f"topic-{t}": [(p, BATCH) for p in range(PARTITIONS)] for t in range(TOPICS)}


def kafka_python_request(version):
    Topic = KpProduceRequest.TopicProduceData
    request = KpProduceRequest[version](transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        Topic(name=name, partition_data=[Topic.PartitionProduceData(index=p, records=b)
                                         for p, b in parts])
        for name, parts in TOPIC_DATA.items()])
    request.with_header(correlation_id=1, client_id=CLIENT_ID)
    return request


def response_bytes(version):
    """The answer to TOPIC_DATA, as kafka-python encodes it, after the correlation id."""
    Topic = KpProduceResponse.TopicProduceResponse
    Part = Topic.PartitionProduceResponse
    response = KpProduceResponse[version](throttle_time_ms=0, responses=[
        Topic(name=name, partition_responses=[
            Part(index=p, error_code=0, base_offset=1000 * p, log_append_time_ms=-1,
                 log_start_offset=0, record_errors=[], error_message=None)
            for p, _ in parts])
        for name, parts in TOPIC_DATA.items()])
    response.with_header(correlation_id=1)
    return bytes(response.encode(header=True))[4:]


@pytest.mark.benchmark(group="produce-request-encode")
@pytest.mark.parametrize("version", VERSIONS)
def test_encode_netkafka(benchmark, version):
    buffers = benchmark(produce.encode_produce_request, 1, CLIENT_ID, version, -1, 30000,
                        TOPIC_DATA)
    assert b"".join(bytes(b) for b in buffers) == kafka_python_request(version).encode(
        header=True, framed=True)


@pytest.mark.benchmark(group="produce-request-encode")
@pytest.mark.parametrize("version", VERSIONS)
def test_encode_kafka_python(benchmark, version):
    request = kafka_python_request(version)
    frame = benchmark(request.encode, header=True, framed=True)
    assert len(frame) > TOPICS * PARTITIONS * BATCH_BYTES


@pytest.mark.benchmark(group="produce-request-encode")
def test_encode_aiokafka_v8(benchmark):
    def encode():
        request = AiokafkaProduceRequest_v8(
            None, -1, 30000, [(name, [(p, b) for p, b in parts]) for name, parts in TOPIC_DATA.items()])
        return request.encode()
    body = benchmark(encode)
    assert len(body) > TOPICS * PARTITIONS * BATCH_BYTES


@pytest.mark.benchmark(group="produce-response-decode")
@pytest.mark.parametrize("version", VERSIONS)
def test_decode_netkafka(benchmark, version):
    data = response_bytes(version)
    response = benchmark(produce.decode_produce_response, data, version)
    assert sum(len(t.partitions) for t in response.topics) == TOPICS * PARTITIONS


@pytest.mark.benchmark(group="produce-response-decode")
@pytest.mark.parametrize("version", VERSIONS)
def test_decode_kafka_python(benchmark, version):
    data = response_bytes(version)
    framed = (1).to_bytes(4, "big") + data
    response = benchmark(KpProduceResponse.decode, framed, version=version, header=True)
    assert sum(len(t.partition_responses) for t in response.responses) == TOPICS * PARTITIONS


@pytest.mark.benchmark(group="produce-response-decode")
def test_decode_aiokafka_v8(benchmark):
    data = response_bytes(8)
    response = benchmark(lambda: AiokafkaProduceResponse_v8.decode(io.BytesIO(data)))
    assert sum(len(parts) for _, parts in response.topics) == TOPICS * PARTITIONS
