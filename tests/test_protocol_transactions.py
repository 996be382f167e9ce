"""The transaction APIs' encoders and decoders (FindCoordinator, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn; InitProducerId is test_protocol.py's):
requests byte for byte as kafka-python encodes them from Kafka's own JSON message
specs, responses decoded as kafka-python encodes them, at every version netkafka
speaks; then one round trip of each against the real broker, in the order a
transaction takes them."""
import time
import uuid

import kafka
import pytest
from kafka.protocol.metadata.find_coordinator import (
    FindCoordinatorRequest as KpFindCoordinatorRequest,
    FindCoordinatorResponse as KpFindCoordinatorResponse,
)
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest as KpAddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse as KpAddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest as KpAddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse as KpAddPartitionsToTxnResponse,
    EndTxnRequest as KpEndTxnRequest,
    EndTxnResponse as KpEndTxnResponse,
    TxnOffsetCommitRequest as KpTxnOffsetCommitRequest,
    TxnOffsetCommitResponse as KpTxnOffsetCommitResponse,
)

from answering import AnsweringConnection
from blocking_wire import BlockingWire
from netkafka import errors
from netkafka.client.coordinator import Coordinators
from netkafka.client.retry import RetryBackoff
from netkafka.errors import ProtocolError
from netkafka.producer.offsets import ConsumerGroupMetadata, PartitionOffset
from netkafka.protocol.add_offsets_to_txn import (
    AddOffsetsToTxnResponse, decode_add_offsets_to_txn_response,
    encode_add_offsets_to_txn_request,
)
from netkafka.protocol.add_partitions_to_txn import (
    decode_add_partitions_to_txn_response, encode_add_partitions_to_txn_request,
)
from netkafka.protocol.end_txn import EndTxnResponse, decode_end_txn_response, encode_end_txn_request
from netkafka.protocol.find_coordinator import (
    GROUP, TRANSACTION, FindCoordinatorResponse, decode_find_coordinator_response,
    encode_find_coordinator_request,
)
from netkafka.producer.transaction_manager import TransactionManager, _partition_error
from netkafka.producer.transactions import TransactionState, TransactionStateMachine
from netkafka.protocol.framing import ApiKey, PartitionErrorsResponse
from netkafka.protocol.init_producer_id import (
    InitProducerIdResponse, decode_init_producer_id_response, encode_init_producer_id_request,
)
from netkafka.protocol.txn_offset_commit import (
    decode_txn_offset_commit_response, encode_txn_offset_commit_request,
)
from netkafka.protocol.produce import decode_produce_response, encode_produce_request
from netkafka.testing.reader import read_topic
from protocol_samples import (
    ALL_VERSIONS, COORDINATOR, CORRELATION_ID, PARTITION_ERRORS,
    add_offsets_to_txn_response_fields, add_partitions_to_txn_response_fields, build_batch,
    end_txn_response_fields, find_coordinator_response_fields, kafka_python_response,
    txn_offset_commit_response_fields,
)
from test_protocol import CLIENT_ID, kafka_python_request, writable_topic

TXN_ID = "txn-\u00e9-1"
_BACKOFF = RetryBackoff(10, 10)  # 10 ms, constant
GROUP_METADATA = ConsumerGroupMetadata("group-1", 4, "member-1", "instance-1")
OFFSETS = {"t1": [PartitionOffset(0, 10, 3, "meta"), PartitionOffset(2, 12, -1, None)],
           "t\u00e9": [PartitionOffset(1, 11, 5, "")]}


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.FIND_COORDINATOR])
@pytest.mark.parametrize("key_type", [GROUP, TRANSACTION])
def test_find_coordinator_request_matches_kafka_python(version, key_type):
    if version == 0 and key_type == TRANSACTION:
        with pytest.raises(ValueError, match="v0 finds group coordinators only"):
            encode_find_coordinator_request(1, CLIENT_ID, version, TXN_ID, key_type)
        return
    ours = encode_find_coordinator_request(CORRELATION_ID, CLIENT_ID, version, TXN_ID, key_type)
    fields = {"key": TXN_ID} if version <= 3 else {"coordinator_keys": [TXN_ID]}
    if version >= 1:
        fields["key_type"] = key_type
    assert ours == kafka_python_request(KpFindCoordinatorRequest, version, **fields)


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.FIND_COORDINATOR])
def test_find_coordinator_response_decoded_as_kafka_python_encodes_it(version):
    data = kafka_python_response(KpFindCoordinatorResponse, version,
                                 **find_coordinator_response_fields(version))
    assert decode_find_coordinator_response(data, version) == FindCoordinatorResponse(
        5 if version >= 1 else 0, 0, None, COORDINATOR["key"] if version >= 4 else None,
        COORDINATOR["node_id"], COORDINATOR["host"], COORDINATOR["port"])


def test_find_coordinator_response_for_more_than_one_key_is_refused():
    Coordinator = KpFindCoordinatorResponse.Coordinator
    one = dict(node_id=2, host="h", port=1, error_code=0, error_message=None, version=4)
    data = kafka_python_response(KpFindCoordinatorResponse, 4, throttle_time_ms=0,
                                 coordinators=[Coordinator(key="a", **one),
                                               Coordinator(key="b", **one)])
    with pytest.raises(ProtocolError, match="answered 2 coordinators for one key"):
        decode_find_coordinator_response(data, 4)


@pytest.mark.parametrize("node_id, host, port", [
    (-1, "", -1),            # what a broker sends with COORDINATOR_NOT_AVAILABLE, sent without it
    (-1, "broker-2", 9093),  # -1: the first bootstrap connection's id
    (2, "", 9093),           # an empty host would connect to the local host
    (2, "broker-2", 0),
    (2, "broker-2", 65536),
    (2, "broker 2", 9093),
])
def test_find_coordinator_answer_naming_no_usable_broker_is_refused(node_id, host, port):
    fake = AnsweringConnection(FindCoordinatorResponse(0, 0, None, "txn", node_id, host, port))
    with pytest.raises(ProtocolError, match="node 0 answered FindCoordinator for the "
                       "transaction coordinator of 'txn' with broker"):
        Coordinators(fake, fake, _BACKOFF).find(TRANSACTION, "txn", time.monotonic() + 1)
    assert fake.connections == []  # no connection was made or moved
    fake.response = FindCoordinatorResponse(0, 0, None, "txn", 2, "broker-2", 9093)
    assert Coordinators(fake, fake, _BACKOFF).find(TRANSACTION, "txn", time.monotonic() + 1) is fake
    assert fake.connections == [(2, "broker-2", 9093)]


class _TransactionCoordinator(AnsweringConnection):
    """As AnsweringConnection, and the coordinator it names answers InitProducerId
    `init_response`."""

    def __init__(self, init_response):
        super().__init__(FindCoordinatorResponse(0, 0, None, "txn", 2, "broker-2", 9093))
        self.init_response = init_response

    def call(self, api_key, encode, decode, timeout_s, max_api_version=None):
        return self.init_response if api_key == ApiKey.INIT_PRODUCER_ID else self.response


def test_transactional_init_producer_id_answer_without_an_id_fails_the_producer():
    # No error code, yet producer id -1: no transaction can be written with it.
    fake = _TransactionCoordinator(InitProducerIdResponse(0, 0, -1, -1))
    manager = TransactionManager("txn", 60000, None, fake, fake, None, retry_backoff=_BACKOFF,
                                 max_block_ms=1000, delivery_timeout_ms=1000)
    manager.states = TransactionStateMachine("txn", lambda refusal: None)
    with pytest.raises(ProtocolError, match="InitProducerId for 'txn' answered no error but "
                       "producer id -1, epoch -1"):
        manager.init_transactions()
    assert manager.states.state == TransactionState.FATAL_ERROR


def test_partition_errors_answer_missing_a_partition_asked_is_refused():
    # AddPartitionsToTxn and TxnOffsetCommit: an answer without error codes for a
    # partition asked is no sign that it was added (or its offset committed).
    asked = {("t1", 0), ("t1", 2)}
    answered = PartitionErrorsResponse(0, {("t1", 0): 0, ("t1", 2): 0})
    assert _partition_error(asked, answered, "AddPartitionsToTxn") is None
    # A partition not asked about, with an error code of its own, is none of the
    # request's (taken for its error, it would fail the transaction or the producer).
    assert _partition_error(asked, PartitionErrorsResponse(
        0, {("t1", 0): 0, ("t1", 2): 0, ("other", 5): 29}), "AddPartitionsToTxn") is None
    for errors_answered in ({("t1", 0): 0}, {}, {("t1", 0): 0, ("t1", 3): 0}):
        error = _partition_error(asked, PartitionErrorsResponse(0, errors_answered),
                                 "AddPartitionsToTxn from node 0")
        assert isinstance(error, ProtocolError)
        assert "AddPartitionsToTxn from node 0: no answer for [('t1', " in str(error)
    error = _partition_error(asked, PartitionErrorsResponse(0, {("t1", 0): 0, ("t1", 2): 51}),
                             "AddPartitionsToTxn")
    assert error.code == 51


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.ADD_PARTITIONS_TO_TXN])
def test_add_partitions_to_txn_request_matches_kafka_python(version):
    ours = encode_add_partitions_to_txn_request(
        CORRELATION_ID, CLIENT_ID, version, TXN_ID, 1 << 40, 7, {"t1": [0, 2], "t\u00e9": [1]})
    Topic = KpAddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    theirs = kafka_python_request(
        KpAddPartitionsToTxnRequest, version, v3_and_below_transactional_id=TXN_ID,
        v3_and_below_producer_id=1 << 40, v3_and_below_producer_epoch=7,
        v3_and_below_topics=[Topic(name="t1", partitions=[0, 2], version=version),
                             Topic(name="t\u00e9", partitions=[1], version=version)])
    assert ours == theirs


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.ADD_PARTITIONS_TO_TXN])
def test_add_partitions_to_txn_response_decoded_as_kafka_python_encodes_it(version):
    data = kafka_python_response(KpAddPartitionsToTxnResponse, version,
                                 **add_partitions_to_txn_response_fields(version))
    response = decode_add_partitions_to_txn_response(data, version)
    assert (response.throttle_time_ms, response.errors) == (3, PARTITION_ERRORS)


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.ADD_OFFSETS_TO_TXN])
def test_add_offsets_to_txn_matches_kafka_python(version):
    ours = encode_add_offsets_to_txn_request(CORRELATION_ID, CLIENT_ID, version, TXN_ID, 1 << 40, 7,
                                             "group-\u00e9")
    assert ours == kafka_python_request(KpAddOffsetsToTxnRequest, version,
                                        transactional_id=TXN_ID, producer_id=1 << 40,
                                        producer_epoch=7, group_id="group-\u00e9")
    data = kafka_python_response(KpAddOffsetsToTxnResponse, version,
                                 **add_offsets_to_txn_response_fields(version))
    assert decode_add_offsets_to_txn_response(data, version) == AddOffsetsToTxnResponse(2, 30)


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.TXN_OFFSET_COMMIT])
def test_txn_offset_commit_request_matches_kafka_python(version):
    ours = encode_txn_offset_commit_request(CORRELATION_ID, CLIENT_ID, version, TXN_ID,
                                            GROUP_METADATA, 1 << 40, 7, OFFSETS)
    Topic = KpTxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    Partition = Topic.TxnOffsetCommitRequestPartition
    topics = [Topic(name=topic, partitions=[
        Partition(partition_index=p.partition, committed_offset=p.offset,
                  committed_leader_epoch=p.leader_epoch, committed_metadata=p.metadata,
                  version=version) for p in partitions], version=version)
        for topic, partitions in OFFSETS.items()]
    member = ({"generation_id": 4, "member_id": "member-1", "group_instance_id": "instance-1"}
              if version >= 3 else {})
    theirs = kafka_python_request(KpTxnOffsetCommitRequest, version, transactional_id=TXN_ID,
                                  group_id="group-1", producer_id=1 << 40, producer_epoch=7,
                                  topics=topics, **member)
    assert ours == theirs


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.TXN_OFFSET_COMMIT])
def test_txn_offset_commit_response_decoded_as_kafka_python_encodes_it(version):
    data = kafka_python_response(KpTxnOffsetCommitResponse, version,
                                 **txn_offset_commit_response_fields(version))
    response = decode_txn_offset_commit_response(data, version)
    assert (response.throttle_time_ms, response.errors) == (1, PARTITION_ERRORS)


@pytest.mark.parametrize("version", ALL_VERSIONS[ApiKey.END_TXN])
@pytest.mark.parametrize("committed", [True, False])
def test_end_txn_matches_kafka_python(version, committed):
    ours = encode_end_txn_request(CORRELATION_ID, CLIENT_ID, version, TXN_ID, 1 << 40, 7, committed)
    assert ours == kafka_python_request(KpEndTxnRequest, version, transactional_id=TXN_ID,
                                        producer_id=1 << 40, producer_epoch=7,
                                        committed=committed)
    data = kafka_python_response(KpEndTxnResponse, version, **end_txn_response_fields(version))
    assert decode_end_txn_response(data, version) == EndTxnResponse(
        4, 0, (1 << 41) if version >= 5 else -1, 8 if version >= 5 else -1)


# --- against the real broker: a V1 transaction and a V2 one, request by request


@pytest.fixture(scope="module")
def wire(kafka_broker):
    with BlockingWire(kafka_broker.bootstrap) as connection:
        yield connection


def until_not_retriable(ask, what):
    """ask() -> (response, error code) again while the code is retriable (a first
    transaction makes the broker create and load __transaction_state; a commit's
    markers make the next request of the id wait: CONCURRENT_TRANSACTIONS)."""
    deadline = time.monotonic() + RETRY_S
    while True:
        response, code = ask()
        if code == 0 or not errors.error_for_code(code).retriable:
            return response, code
        assert time.monotonic() < deadline, f"{what}: still {errors.error_for_code(code)}"
        time.sleep(0.1)


RETRY_S = 60


class Exchange:
    """Requests of one test on the wire, each with a correlation id of its own."""

    def __init__(self, wire):
        self.wire = wire
        self.correlation_id = 1000

    def __call__(self, encode, decode, version, *args):
        self.correlation_id += 1
        cid = self.correlation_id
        return decode(self.wire.request(encode(cid, CLIENT_ID, version, *args), cid), version)

    def coordinator(self, version, key, key_type):
        response, code = until_not_retriable(
            lambda: (r := self(encode_find_coordinator_request, decode_find_coordinator_response,
                               version, key, key_type), r.error_code)[0:2],
            "FindCoordinator")
        assert code == 0
        return response

    def producer_id(self, version, txn_id):
        response, code = until_not_retriable(
            lambda: (r := self(encode_init_producer_id_request, decode_init_producer_id_response,
                               version, txn_id, 60000), r.error_code)[0:2],
            "InitProducerId")
        assert code == 0
        return response.producer_id, response.producer_epoch


def group_offsets(bootstrap, group, until=None, timeout_s=60.0):
    """{(topic, partition): (offset, metadata)} the group has committed, as the broker
    tells kafka-python's admin client (confluent-kafka 2.16 reads a committed offset's
    metadata a byte past its end).

    until: None, read once; else read again until until(offsets) holds, or return the
    last read after timeout_s.  A transaction's offsets show once the coordinator has
    written its commit markers, which it does after answering EndTxn: read at once
    after commit_transaction(), they were missing in 2 of 6 runs on a loaded machine."""
    deadline = time.monotonic() + timeout_s
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        while True:
            committed = admin.list_group_offsets({group: None})[group]
            offsets = {(tp.topic, tp.partition): (om.offset, om.metadata)
                       for tp, om in committed.items()}
            if until is None or until(offsets) or time.monotonic() > deadline:
                return offsets
            time.sleep(0.1)
    finally:
        admin.close()


@pytest.mark.parametrize("protocol", ["v1", "v2"])
def test_a_transaction_round_trip(wire, kafka_broker, protocol):
    """FindCoordinator, InitProducerId, (V1: AddPartitionsToTxn), Produce,
    (V1: AddOffsetsToTxn), TxnOffsetCommit, EndTxn: the records and the group's offset
    are there for a read_committed consumer afterwards; with V2 EndTxn bumps the epoch."""
    v2 = protocol == "v2"
    exchange = Exchange(wire)
    topic = writable_topic(kafka_broker, wire, f"txn-{protocol}", partitions=2)
    txn_id = f"protocol-{protocol}-{uuid.uuid4().hex[:8]}"
    group = f"protocol-group-{uuid.uuid4().hex[:8]}"
    top = {api: ALL_VERSIONS[api][-1] for api in ALL_VERSIONS}
    coordinator = exchange.coordinator(top[ApiKey.FIND_COORDINATOR], txn_id, TRANSACTION)
    assert coordinator.key == txn_id
    assert f"{coordinator.host}:{coordinator.port}" == kafka_broker.bootstrap
    producer_id, epoch = exchange.producer_id(top[ApiKey.INIT_PRODUCER_ID], txn_id)
    if not v2:
        response, code = until_not_retriable(
            lambda: (r := exchange(encode_add_partitions_to_txn_request,
                                   decode_add_partitions_to_txn_response,
                                   top[ApiKey.ADD_PARTITIONS_TO_TXN], txn_id, producer_id,
                                   epoch, {topic: [0, 1]}),
                     max(r.errors.values()))[0:2], "AddPartitionsToTxn")
        assert response.errors == {(topic, 0): 0, (topic, 1): 0}
    produce_version = 12 if v2 else 11  # v12+ adds the partitions itself (V2)
    values = {p: [b"txn-%d-%d" % (p, i) for i in range(3)] for p in range(2)}
    batches = [(p, build_batch([(None, v, []) for v in values[p]], producer_id=producer_id,
                               producer_epoch=epoch, base_sequence=0, transactional=True))
               for p in range(2)]
    response = exchange(lambda cid, client_id, version: encode_produce_request(
        cid, client_id, version, -1, 30000, {topic: batches}, transactional_id=txn_id),
        decode_produce_response, produce_version)
    assert [p.error_code for p in response.topics[0].partitions] == [0, 0]
    if not v2:
        response, code = until_not_retriable(
            lambda: (r := exchange(encode_add_offsets_to_txn_request,
                                   decode_add_offsets_to_txn_response,
                                   top[ApiKey.ADD_OFFSETS_TO_TXN], txn_id, producer_id, epoch,
                                   group), r.error_code)[0:2], "AddOffsetsToTxn")
        assert code == 0
    group_coordinator = exchange.coordinator(top[ApiKey.FIND_COORDINATOR], group, GROUP)
    assert group_coordinator.key == group
    commit_version = 5 if v2 else 4  # v5+ adds the group's offsets itself (V2)
    response, code = until_not_retriable(
        lambda: (r := exchange(encode_txn_offset_commit_request,
                               decode_txn_offset_commit_response, commit_version, txn_id,
                               ConsumerGroupMetadata(group), producer_id, epoch,
                               {topic: [PartitionOffset(0, 3, -1, "done")]}),
                 max(r.errors.values()))[0:2], "TxnOffsetCommit")
    assert response.errors == {(topic, 0): 0}
    response, code = until_not_retriable(
        lambda: (r := exchange(encode_end_txn_request, decode_end_txn_response,
                               5 if v2 else 4, txn_id, producer_id, epoch, True),
                 r.error_code)[0:2], "EndTxn")
    assert code == 0
    if v2:
        assert (response.producer_id, response.producer_epoch) == (producer_id, epoch + 1)
    else:
        assert (response.producer_id, response.producer_epoch) == (-1, -1)
    records = read_topic(kafka_broker.bootstrap, topic, 2 + 6, isolation_level="read_committed")
    assert sorted(r.value for r in records) == sorted(
        [b"marker", b"marker"] + values[0] + values[1])
    assert group_offsets(kafka_broker.bootstrap, group, until=bool) == {(topic, 0): (3, "done")}


def test_end_txn_of_another_epoch_is_refused(wire):
    """The broker's fencing, as the producer meets it: EndTxn with an epoch older than
    the coordinator's (a newer producer initialized the id) is PRODUCER_FENCED."""
    exchange = Exchange(wire)
    txn_id = f"protocol-fenced-{uuid.uuid4().hex[:8]}"
    version = ALL_VERSIONS[ApiKey.INIT_PRODUCER_ID][-1]
    exchange.coordinator(ALL_VERSIONS[ApiKey.FIND_COORDINATOR][-1], txn_id, TRANSACTION)
    old_id, old_epoch = exchange.producer_id(version, txn_id)
    new_id, new_epoch = exchange.producer_id(version, txn_id)
    assert (new_id, new_epoch) == (old_id, old_epoch + 1)
    response = exchange(encode_end_txn_request, decode_end_txn_response, 4, txn_id, old_id,
                        old_epoch, True)
    assert response.error_code == errors.ProducerFencedError.code
