"""Captures a real broker's answers as seeds of the responses fuzz target.

    .venv/bin/python tests/fuzz/capture_seeds.py [BOOTSTRAP]   (make fuzz-seeds)

Without BOOTSTRAP it starts a broker with the test harness and stops it after.  For
every API netkafka decodes and every version both sides speak, one request goes out on
a plain socket (tests/blocking_wire.py) and the answer -- the bytes after the
correlation id -- is written to tests/fuzz/seeds/responses/<api>-v<version>.bin,
prefixed with the API key and the version as tests/fuzz/targets.py reads them.  The
requests make the broker say something worth mutating: a topic with two partitions,
records with headers, a partition that does not exist, a transaction opened, committed
and then ended again (an error answer).  SASL's two APIs are not captured: the
harness's plaintext listener does not take them.
"""
import os
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # blocking_wire, protocol_samples

from blocking_wire import BlockingWire  # noqa: E402
from protocol_samples import build_batch  # noqa: E402

from netkafka.producer.offsets import ConsumerGroupMetadata, PartitionOffset  # noqa: E402
from netkafka.protocol import (  # noqa: E402
    add_offsets_to_txn, add_partitions_to_txn, api_versions, describe_producers, end_txn,
    find_coordinator, init_producer_id, metadata, produce, txn_offset_commit,
)
from netkafka.protocol.framing import ApiKey  # noqa: E402
from netkafka.testing.admin import create_topic  # noqa: E402

SEEDS = os.path.join(HERE, "seeds", "responses")
CLIENT_ID = "fuzz-seeds"


class _Capture:
    def __init__(self, wire, ranges):
        self.wire = wire
        self.ranges = ranges  # API key -> (lowest, highest) version the broker takes
        self.correlation_id = 0
        self.written = 0

    def versions(self, api):
        low, high = self.ranges[api.key]
        return range(max(low, api.min_version), min(high, api.max_version) + 1)

    def answer(self, api, version, encode):
        """Sends encode(correlation_id) and writes the answer as a seed; returns it."""
        self.correlation_id += 1
        request = encode(self.correlation_id)
        body = self.wire.request(request, self.correlation_id)
        name = ApiKey(api.key).name.lower()
        with open(os.path.join(SEEDS, f"{name}-v{version}.bin"), "wb") as f:
            f.write(bytes([api.key, version]) + body)
        self.written += 1
        return body


def capture(bootstrap):
    os.makedirs(SEEDS, exist_ok=True)
    topic = f"fuzz-seeds-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    with BlockingWire(bootstrap) as wire:
        probe = api_versions.decode_api_versions_response(wire.request(
            api_versions.encode_api_versions_request(0, CLIENT_ID, 0), 0), 0)
        c = _Capture(wire, {key: (low, high) for key, (low, high) in probe.api_versions.items()})
        for v in c.versions(api_versions.API):
            c.answer(api_versions.API, v, lambda cid: api_versions.encode_api_versions_request(
                cid, CLIENT_ID, v))
        answer = None
        for v in c.versions(metadata.API):
            body = c.answer(metadata.API, v, lambda cid: metadata.encode_metadata_request(
                cid, CLIENT_ID, v, [topic]))
            answer = metadata.decode_metadata_response(body, v)
        topic_ids = {topic: answer.topics[0].topic_id}
        for v in c.versions(produce.API):
            # Partition 5 does not exist: the answer carries an error code too.
            batch = build_batch([(b"key", b"value", [("h", b"1")]), (None, b"", [])])
            c.answer(produce.API, v, lambda cid: produce.encode_produce_request(
                cid, CLIENT_ID, v, 1, 10000, {topic: [(0, batch), (1, batch), (5, batch)]},
                topic_ids=topic_ids))
        for v in c.versions(init_producer_id.API):
            c.answer(init_producer_id.API, v,
                     lambda cid: init_producer_id.encode_init_producer_id_request(
                         cid, CLIENT_ID, v))
        for v in c.versions(describe_producers.API):
            c.answer(describe_producers.API, v,
                     lambda cid: describe_producers.encode_describe_producers_request(
                         cid, CLIENT_ID, v, {topic: [0, 1]}))
        _capture_transaction(c, bootstrap, topic)
    return c.written


def _capture_transaction(c, bootstrap, topic):
    txn_id = f"fuzz-seeds-{uuid.uuid4().hex[:8]}"
    group = ConsumerGroupMetadata(f"fuzz-seeds-group-{uuid.uuid4().hex[:8]}")
    coordinator = None
    for v in c.versions(find_coordinator.API):
        key_type = find_coordinator.GROUP if v == 0 else find_coordinator.TRANSACTION
        key = group.group_id if v == 0 else txn_id
        body = c.answer(find_coordinator.API, v,
                        lambda cid: find_coordinator.encode_find_coordinator_request(
                            cid, CLIENT_ID, v, key, key_type))
        if key_type == find_coordinator.TRANSACTION:
            coordinator = find_coordinator.decode_find_coordinator_response(body, v)
    # A one-broker cluster: the coordinator is the broker this socket is connected to.
    assert coordinator is not None
    v = c.versions(init_producer_id.API)[-1]
    ids = init_producer_id.decode_init_producer_id_response(c.answer(
        init_producer_id.API, v, lambda cid: init_producer_id.encode_init_producer_id_request(
            cid, CLIENT_ID, v, txn_id, 60000)), v)
    pid, epoch = ids.producer_id, ids.producer_epoch
    # Transactions V1's calls (a client below Produce v12 adds partitions itself).
    for v in c.versions(add_partitions_to_txn.API):
        c.answer(add_partitions_to_txn.API, v,
                 lambda cid: add_partitions_to_txn.encode_add_partitions_to_txn_request(
                     cid, CLIENT_ID, v, txn_id, pid, epoch, {topic: [0, 1, 7]}))
    for v in c.versions(add_offsets_to_txn.API):
        c.answer(add_offsets_to_txn.API, v,
                 lambda cid: add_offsets_to_txn.encode_add_offsets_to_txn_request(
                     cid, CLIENT_ID, v, txn_id, pid, epoch, group.group_id))
    for v in c.versions(txn_offset_commit.API):
        c.answer(txn_offset_commit.API, v,
                 lambda cid: txn_offset_commit.encode_txn_offset_commit_request(
                     cid, CLIENT_ID, v, txn_id, group, pid, epoch,
                     {topic: [PartitionOffset(0, 1, -1, "m"), PartitionOffset(1, 2, -1, None)]}))
    # The first commits; the next ones answer errors (no transaction open).
    for v in c.versions(end_txn.API):
        c.answer(end_txn.API, v, lambda cid: end_txn.encode_end_txn_request(
            cid, CLIENT_ID, v, txn_id, pid, epoch, True))


def main(argv):
    if len(argv) > 1:
        written = capture(argv[1])
    else:
        from netkafka.testing.broker import Cluster
        with tempfile.TemporaryDirectory(prefix="netkafka-fuzz-seeds-") as state:
            cluster = Cluster(directory=state)
            cluster.start()
            try:
                written = capture(cluster.bootstrap)
            finally:
                cluster.stop()
    print(f"capture_seeds: {written} answers written to {SEEDS}")


if __name__ == "__main__":
    main(sys.argv)
