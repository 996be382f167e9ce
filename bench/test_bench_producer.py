"""Producing to a real local broker: netkafka vs confluent-kafka vs kafka-python.

Parameters: RECORD_COUNT records of a 100-byte value, no key (sticky partitioning), to
a topic of 3 partitions on one local broker (BROKER_JVM_OPTIONS), acks='all' with
idempotence (every client's default), no compression.  A round is: send every record,
then flush (so it ends when the broker has acknowledged them all).  The producer is
created and connected (one record sent and acknowledged) before the rounds, as a
long-running service would be.  Peers:

    netkafka defaults       Producer(): batch_size 16384, linger_ms 0 (kafka-python's)
    netkafka large batches  batch_size 1 MiB, linger_ms 5 (librdkafka's defaults)
    netkafka produce()      large batches; fire and forget, no future per record
    netkafka send_batch()   large batches; one call with a list of every value
    netkafka send_batch() pyarrow   the same with a pyarrow binary array
    confluent-kafka         Producer({...}): librdkafka's defaults (batch.size 1 MiB,
                            linger.ms 5); produce() per record, poll(0) every 10,000
    kafka-python            KafkaProducer(): its defaults; one round only (slow)

test_produce_acks1 is the same at acks=1 without idempotence (issue 7's targets),
every peer given the same batch size and linger as the netkafka entry it is set
against:

    netkafka send()                 1 MiB, 5 ms; a future per record
    netkafka produce()              1 MiB, 5 ms; fire and forget
    confluent-kafka error-only      1 MiB, 5 ms (its defaults); produce() with a
                                    delivery callback called for failures only
                                    (delivery.report.only.error)
    netkafka send() 16 KiB          batch_size 16384, linger_ms 0 (kafka-python's)
    kafka-python                    its defaults (16 KiB, 0 ms); one round
    kafka-python 1 MiB              batch_size 1 MiB, linger_ms 5; one round

extra_info: krec_per_s from the minimum time.  The machine is shared (and the broker
runs on it too): compare minimum times, and run twice.

    .venv/bin/python -m pytest bench/test_bench_producer.py --benchmark-only \\
        --benchmark-columns=min,median,rounds
"""
import pytest

from netkafka.testing.admin import create_topic

RECORD_COUNT = 200_000
VALUE = b"v" * 100
PARTITIONS = 3
ROUNDS = 5
SLOW_PEER_ROUNDS = 1
POLL_EVERY = 10_000


def _netkafka(bootstrap, method="send", **options):
    from netkafka import Producer

    producer = Producer(bootstrap_servers=bootstrap, **options)

    def produce(topic):
        send = getattr(producer, method)
        for _ in range(RECORD_COUNT):
            send(topic, VALUE)
        producer.flush()

    return produce, producer.close


def _netkafka_send_batch(bootstrap, arrow=False, **options):
    from netkafka import Producer

    producer = Producer(bootstrap_servers=bootstrap, **options)
    values = [VALUE] * RECORD_COUNT
    if arrow:
        import pyarrow
        values = pyarrow.array(values, pyarrow.binary())

    def produce(topic):
        result = producer.send_batch(topic, values)
        producer.flush()
        assert result.get(0).failed_count == 0

    return produce, producer.close


def _confluent(bootstrap, acks="all", errors_only=False):
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "acks": acks,
              "enable.idempotence": acks == "all"}
    failures = []  # the error-only delivery reports
    if errors_only:
        config.update({"delivery.report.only.error": True,
                       "on_delivery": lambda error, message: failures.append(error)})
    producer = Producer(config)

    def produce(topic):
        send = producer.produce
        for i in range(RECORD_COUNT):
            while True:
                try:
                    send(topic, VALUE)
                    break
                except BufferError:  # its queue is full: serve callbacks, try again
                    producer.poll(0.001)
            if i % POLL_EVERY == 0:
                producer.poll(0)
        producer.flush()
        assert not failures, failures[:3]

    return produce, lambda: producer.flush()


def _kafka_python(bootstrap, acks="all", **options):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, **options)

    def produce(topic):
        send = producer.send
        for _ in range(RECORD_COUNT):
            send(topic, VALUE)
        producer.flush()

    return produce, producer.close


PEERS = {
    "netkafka defaults": (lambda bootstrap: _netkafka(bootstrap), ROUNDS),
    "netkafka large batches": (
        lambda bootstrap: _netkafka(bootstrap, batch_size=1 << 20, linger_ms=5), ROUNDS),
    "netkafka produce()": (
        lambda bootstrap: _netkafka(bootstrap, "produce", batch_size=1 << 20, linger_ms=5),
        ROUNDS),
    "netkafka send_batch()": (
        lambda bootstrap: _netkafka_send_batch(bootstrap, batch_size=1 << 20, linger_ms=5),
        ROUNDS),
    "netkafka send_batch() pyarrow": (
        lambda bootstrap: _netkafka_send_batch(bootstrap, arrow=True, batch_size=1 << 20,
                                               linger_ms=5),
        ROUNDS),
    "confluent-kafka": (_confluent, ROUNDS),
    "kafka-python": (_kafka_python, SLOW_PEER_ROUNDS),
}


LARGE = {"batch_size": 1 << 20, "linger_ms": 5}
PEERS_ACKS1 = {
    "netkafka send()": (lambda bootstrap: _netkafka(bootstrap, acks=1, **LARGE), ROUNDS),
    "netkafka produce()": (
        lambda bootstrap: _netkafka(bootstrap, "produce", acks=1, **LARGE), ROUNDS),
    "confluent-kafka error-only": (
        lambda bootstrap: _confluent(bootstrap, acks=1, errors_only=True), ROUNDS),
    "netkafka send() 16 KiB": (lambda bootstrap: _netkafka(bootstrap, acks=1), ROUNDS),
    "kafka-python": (lambda bootstrap: _kafka_python(bootstrap, acks=1), SLOW_PEER_ROUNDS),
    "kafka-python 1 MiB": (
        lambda bootstrap: _kafka_python(bootstrap, acks=1, batch_size=1 << 20, linger_ms=5),
        SLOW_PEER_ROUNDS),
}


@pytest.mark.parametrize("peer", list(PEERS))
def test_produce(benchmark, kafka_broker, topic_name, peer):
    _run(benchmark, kafka_broker, topic_name, *PEERS[peer], acks="all")


@pytest.mark.parametrize("peer", list(PEERS_ACKS1))
def test_produce_acks1(benchmark, kafka_broker, topic_name, peer):
    _run(benchmark, kafka_broker, topic_name, *PEERS_ACKS1[peer], acks=1)


def _run(benchmark, kafka_broker, topic_name, make, rounds, acks):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=PARTITIONS)
    produce, close = make(kafka_broker.bootstrap)
    try:
        benchmark.group = f"produce {RECORD_COUNT} x {len(VALUE)} B, acks={acks}"
        benchmark.pedantic(produce, args=(topic_name,), rounds=rounds, iterations=1,
                           warmup_rounds=1)
        benchmark.extra_info["krec_per_s"] = round(
            RECORD_COUNT / benchmark.stats.stats.min / 1000, 1)
    finally:
        close()
