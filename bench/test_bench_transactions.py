"""Transactional production: netkafka beside confluent-kafka and the Java producer, rounds
alternated (bench/rounds.py), against the session's broker.

Cells: 100 B records, acks=all (transactions need idempotence), no compression, batch
size 1 MiB and linger 5 ms for every client, PARTITIONS partitions; one commit per
10,000 records and one per 100,000.  netkafka (produce()) and confluent-kafka (produce()
with error-only delivery reports) open a transaction, send its records and commit,
round after round; a round ends with its last commit.  The Java producer
(ProducerPerformance) commits by time only: --transaction-duration-ms is set to the time
its expected rate (JAVA_EXPECTED_MSGS_PER_S) takes to send the cell's records per commit,
so its commits are about as frequent, not exactly.

Each row: msgs/s and CPU per record (client, broker) as bench/rounds.py measures them,
medians over the rounds; for netkafka and confluent-kafka the p50 and p99 of their
commit_transaction() calls over the measured rounds (ProducerPerformance reports none).
Every topic must end up holding exactly what its client committed (counted by a
read_committed confluent-kafka consumer), or the benchmark fails.

    .venv/bin/python -m pytest bench/test_bench_transactions.py --benchmark-only
"""
import contextlib
import os
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

import e2e_results
import peers
import rounds
from netkafka.testing.admin import create_topic

PARTITIONS = 3
RECORD_SIZE = 100
COMMITS = {"commit-per-10k": 10_000, "commit-per-100k": 100_000}
CLIENTS = (("netkafka", "produce"), ("confluent-kafka", "error_only"), ("java", "send"))
ROUND_SECONDS = float(os.environ.get("NETKAFKA_BENCH_SECONDS", "1.5"))
ROUNDS = int(os.environ.get("NETKAFKA_BENCH_ROUNDS", "3"))
# Only to size the rounds (and the Java tool's transaction duration): what each client
# reaches on the reference machine, transactions included.
EXPECTED_MSGS_PER_S = {("netkafka", "produce"): 1_000_000,
                       ("confluent-kafka", "error_only"): 500_000, ("java", "send"): 600_000}
COMMITS_PER_ROUND_MIN = 3
READ_TIMEOUT_S = 300


def records_per_round(client_mode, records_per_commit):
    """A whole number of transactions, at least COMMITS_PER_ROUND_MIN, about ROUND_SECONDS
    long at the client's expected rate."""
    commits = round(EXPECTED_MSGS_PER_S[client_mode] * ROUND_SECONDS / records_per_commit)
    return max(COMMITS_PER_ROUND_MIN, commits) * records_per_commit


@pytest.mark.parametrize("records_per_commit", list(COMMITS.values()), ids=list(COMMITS))
def test_transactional_throughput(benchmark, kafka_broker, broker_pids, topic_name, tmp_path,
                                  records_per_commit):
    java_duration_ms = max(1, round(records_per_commit * 1000
                                    / EXPECTED_MSGS_PER_S[("java", "send")]))
    benchmark.group = f"transactions 100B acks=all {records_per_commit} records per commit"
    bootstrap = kafka_broker.bootstrap
    with contextlib.ExitStack() as stack:  # runners closed, then topics deleted
        topics, contestants, runners = {}, {}, {}
        for client, mode in CLIENTS:
            settings = peers.Settings(
                RECORD_SIZE, "all", records_per_commit=records_per_commit,
                transaction_duration_ms=java_duration_ms if client == "java" else None)
            topic = topics[client, mode] = f"{topic_name}-{client}"
            create_topic(bootstrap, topic, partitions=PARTITIONS)
            stack.callback(peers.delete_topic, bootstrap, topic)
            records = records_per_round((client, mode), records_per_commit)
            contestants[client, mode] = peers.contestant(
                client, mode, bootstrap, topic, settings, records, broker_pids, tmp_path, stack)
            if client != "java":
                runners[client, mode] = contestants[client, mode].runner
        measured = benchmark.pedantic(rounds.alternate, args=(contestants, ROUNDS), rounds=1,
                                      iterations=1)
        commit_seconds = {}
        for key, runner in runners.items():
            commits_per_round = contestants[key].records // records_per_commit
            commit_seconds[key] = runner.commit_seconds[commits_per_round:]  # not the warm-up's
        e2e_results.record_transactions(benchmark, RECORD_SIZE, records_per_commit,
                                        java_duration_ms, measured, commit_seconds)
        for key, contestant in contestants.items():
            assert committed_records(bootstrap, topics[key]) == contestant.records_sent


def committed_records(bootstrap, topic):
    """How many records of topic a read_committed consumer reads (counted, not kept:
    millions of them)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{topic}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        count, at_end = 0, set()
        deadline = time.monotonic() + READ_TIMEOUT_S
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: {count} records read, not at the end"
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is None:
                    count += 1
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                else:
                    raise KafkaException(error)
        return count
    finally:
        consumer.close()
