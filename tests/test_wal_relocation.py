"""A batch that does not complete for long pins no WAL segments (relocation, wal.py),
against a real three-node cluster.

The leader of one topic's partition is stopped (replication factor 1: that partition
has no leader at all), so the records sent to it stay unacknowledged -- spooled
(on_delivery_timeout='spool') once max_block_ms passes without a leader -- while another
topic streams eight times wal_max_bytes through the log.  Before relocation, the
stuck batches held the segment of their first record and every later one: the log
filled, and every send() met the backoff (here: max_block_ms, then
BackpressureTimeoutError).  Now they are copied forward and the directory stays
within its bound.  Then the producer stops with the stuck records still in the log,
the node comes back, a new producer replays them, and confluent-kafka reads both
topics back: everything once, in send order.
"""
import os
import threading

from netkafka import Producer
from netkafka.errors import RecordSpooledError
from netkafka.testing.admin import admin_client, create_topic, wait_for_serving_leaders
from netkafka.testing.reader import read_topic

SEGMENT_BYTES = 128 * 1024
WAL_MAX_BYTES = 3 * SEGMENT_BYTES  # the smallest log: segments are wal_max_bytes // 3
STUCK_RECORDS = 20
BUSY_RECORDS = 3000  # of 1 KiB: eight times wal_max_bytes


def directory_bytes(path):
    total = 0
    for name in os.listdir(path):
        try:
            total += os.path.getsize(os.path.join(path, name))
        except FileNotFoundError:  # reclaimed while listed
            pass
    return total


class DirectoryWatch:
    """Samples the WAL directory's bytes every few milliseconds; keeps the peak."""

    def __init__(self, path):
        self.path = path
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.wait(0.003):
            self.peak_bytes = max(self.peak_bytes, directory_bytes(self.path))


def test_a_partition_without_a_leader_pins_no_segments_and_is_replayed_exactly_once(
        failover_cluster, topic_name, tmp_path):
    cluster = failover_cluster
    busy, slow = f"{topic_name}-busy", f"{topic_name}-slow"
    busy_leader = create_topic(cluster.bootstrap, busy).topics[busy].partitions[0].leader
    slow_partitions = create_topic(cluster.bootstrap, slow, partitions=3).topics[slow].partitions
    stuck_partition, stuck_node = next(
        (number, partition.leader) for number, partition in sorted(slow_partitions.items())
        if partition.leader != busy_leader)
    wal_dir = tmp_path / "wal"
    settings = dict(bootstrap_servers=cluster.bootstrap, wal_dir=str(wal_dir),
                    wal_fsync="interval", wal_max_bytes=WAL_MAX_BYTES,
                    max_request_size=64 * 1024, batch_size=16 * 1024, linger_ms=5, acks="all",
                    delivery_timeout_ms=600_000, request_timeout_ms=5000,
                    max_block_ms=30_000, reconnect_backoff_max_ms=500,
                    on_delivery_timeout="spool")
    busy_values = [b"%06d:" % i + b"b" * 1000 for i in range(BUSY_RECORDS)]
    stuck_values = [b"stuck-%d" % i for i in range(STUCK_RECORDS)]
    producer = Producer(**settings)
    try:
        producer.send(slow, b"before", partition=stuck_partition).get(30)
        cluster.node(stuck_node).stop()
        stuck = [producer.send(slow, value, partition=stuck_partition)
                 for value in stuck_values]
        with DirectoryWatch(wal_dir) as watch:
            # Would raise BackpressureTimeoutError if the stuck batches pinned the log.
            for future in [producer.send(busy, value) for value in busy_values]:
                future.get(60)
        metrics = producer.metrics()["netkafka-wal"]
        # Waiting for a leader, or spooled: kept in the log either way.
        assert all(isinstance(future.exception, RecordSpooledError)
                   for future in stuck if future.is_done)
        assert metrics["live_batches"] >= 1, metrics
        assert metrics["batches_relocated"] >= 1 and metrics["moves_logged"] >= 1, metrics
        assert metrics["bytes_logged"] > 4 * WAL_MAX_BYTES, metrics
        assert watch.peak_bytes <= WAL_MAX_BYTES, (watch.peak_bytes, metrics)
        assert metrics["disk_bytes"] <= WAL_MAX_BYTES, metrics
    finally:
        producer.close(0)  # the stuck records stay in the log, for the next producer
        cluster.node(stuck_node).restart()
    wait_for_serving_leaders(admin_client(cluster.bootstrap), slow, 3, 60)

    with Producer(**settings) as again:
        report = again.replay(120)
        assert report.records == STUCK_RECORDS, report
        assert report.failed == report.pending == report.possibly_duplicated == 0, report
        again.flush(60)
        assert again.metrics()["netkafka-wal"]["live_batches"] == 0

    stuck_read = [r for r in read_topic(cluster.bootstrap, slow, STUCK_RECORDS + 1)
                  if r.partition == stuck_partition]
    assert [r.value for r in stuck_read] == [b"before"] + stuck_values
    assert [r.value for r in read_topic(cluster.bootstrap, busy, BUSY_RECORDS)] == busy_values
