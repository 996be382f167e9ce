"""What metadata costs a producer: netkafka beside confluent-kafka, same broker, same run.

Two cases, one record of 100 B each time, acks=1 (no idempotence: no InitProducerId
round trip for either client), linger 0:

    first-ack    a fresh producer, from its construction to the acknowledgement of its
                 first record -- what a Spark task, a CLI tool or a serverless function
                 pays on every start -- to a topic that exists ("existing"), and to a
                 topic of its own per round that the broker creates when the producer
                 first asks for it ("auto-created": its first Metadata answer says
                 UNKNOWN_TOPIC_OR_PARTITION, so the client must ask again).  ROUNDS rounds;
                 the producer is closed between rounds, outside the time.  For
                 netkafka, extra_info counts the rounds by Metadata answers received
                 before the ack (1: the topic rode on the bootstrap request).
    new-topics   one producer, bootstrapped on a topic of its own first, then one record
                 to each of NEW_TOPICS topics it has never met (created beforehand, one
                 partition each, and written once by a probe producer so that the
                 broker has its partitions ready), each sent and waited for before the
                 next: the first send of the producer to a topic, metadata included.  extra_info gives the median and the
                 p99 of the first and the last tenth of the topics (flat: the cost of a new
                 topic does not grow with the topics already known) and the total.

    netkafka         send(...).get()
    confluent-kafka  produce(...) then flush() (its delivery report served by flush)

    .venv/bin/python -m pytest bench/test_bench_metadata.py --benchmark-only
"""
import collections
import itertools
import os
import statistics
import time

import pytest
from confluent_kafka.admin import NewTopic

from netkafka.testing.admin import admin_client, create_topic

ROUNDS = int(os.environ.get("NETKAFKA_BENCH_ROUNDS", "20"))
NEW_TOPICS = int(os.environ.get("NETKAFKA_BENCH_NEW_TOPICS", "2000"))
VALUE = b"v" * 100
WAIT_S = 30
ADMIN_TIMEOUT_S = 300
CLIENTS = ("netkafka", "confluent-kafka")


class NetkafkaClient:
    def __init__(self, bootstrap):
        from netkafka import Producer

        self._producer = Producer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)

    def send_and_wait(self, topic):
        self._producer.send(topic, VALUE).get(WAIT_S)

    def metadata_answers(self):
        """Metadata answers applied so far (no public metric counts them)."""
        return self._producer._metadata.updates

    def close(self):
        self._producer.close()


class ConfluentClient:
    def __init__(self, bootstrap):
        from confluent_kafka import Producer

        self._errors = []
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "1",
                                   "enable.idempotence": False, "linger.ms": 0})

    def _on_delivery(self, error, _message):
        if error is not None:
            self._errors.append(error)

    def send_and_wait(self, topic):
        self._producer.produce(topic, VALUE, on_delivery=self._on_delivery)
        if self._producer.flush(WAIT_S) or self._errors:
            raise AssertionError(f"confluent-kafka did not deliver to {topic}: {self._errors}")

    def metadata_answers(self):
        return None  # librdkafka's are not counted here

    def close(self):
        self._producer.flush(WAIT_S)


MAKERS = {"netkafka": NetkafkaClient, "confluent-kafka": ConfluentClient}


@pytest.mark.parametrize("topic", ["existing", "auto-created"])
@pytest.mark.parametrize("client", CLIENTS)
def test_construction_to_first_ack(benchmark, kafka_broker, topic_name, client, topic):
    benchmark.group = f"metadata: construction to first ack, {topic} topic, 100 B, acks=1"
    if topic == "existing":
        create_topic(kafka_broker.bootstrap, topic_name)
        topics = itertools.repeat(topic_name)
    else:  # the broker's auto.create.topics.enable is on (the harness's default)
        topics = (f"{topic_name}-{n}" for n in itertools.count())
    make = MAKERS[client]
    made = []
    answers = collections.Counter()  # Metadata answers before the first ack -> rounds

    def close_previous():
        while made:
            made.pop().close()

    def first_ack():
        producer = make(kafka_broker.bootstrap)
        made.append(producer)
        producer.send_and_wait(next(topics))
        answers[producer.metadata_answers()] += 1

    try:
        benchmark.pedantic(first_ack, setup=close_previous, rounds=ROUNDS, warmup_rounds=1)
    finally:
        close_previous()
    benchmark.extra_info.update(client=client, topic=topic, acks="1", record_bytes=len(VALUE))
    if None not in answers:
        benchmark.extra_info["metadata_answers_before_first_ack"] = {
            str(count): rounds for count, rounds in sorted(answers.items())}


def _admin(bootstrap, call, names):
    admin = admin_client(bootstrap)  # held until the answers: destroying it cancels them
    for future in call(admin, names).values():
        future.result(ADMIN_TIMEOUT_S)


def _written_once(bootstrap, names):
    """One record into every topic by a probe producer (confluent-kafka, its own
    instance): a broker just told to create thousands of topics takes seconds before
    each partition has a leader and takes its first write -- the broker's time, not the
    clients', so it is paid before the timing."""
    from confluent_kafka import Producer

    failed = []
    probe = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 5,
                      "message.timeout.ms": ADMIN_TIMEOUT_S * 1000})
    for name in names:
        probe.produce(name, b"probe", on_delivery=lambda error, _m: error and failed.append(error))
        probe.poll(0)
    if probe.flush(ADMIN_TIMEOUT_S) or failed:
        raise AssertionError(f"the probe producer could not write every new topic: {failed[:3]}")


def _quantiles_ms(seconds):
    ordered = sorted(seconds)
    return (round(statistics.median(ordered) * 1000, 3),
            round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 3))


@pytest.mark.parametrize("client", CLIENTS)
def test_first_send_to_each_of_many_new_topics(benchmark, kafka_broker, topic_name, client):
    benchmark.group = f"metadata: first send to each of {NEW_TOPICS} new topics, 100 B, acks=1"
    bootstrap = kafka_broker.bootstrap
    names = [f"{topic_name}-{i:05d}" for i in range(NEW_TOPICS)]
    create_topic(bootstrap, topic_name)
    _admin(bootstrap, lambda admin, topics: admin.create_topics(
        [NewTopic(t, 1, 1) for t in topics], operation_timeout=ADMIN_TIMEOUT_S), names)
    _written_once(bootstrap, names)
    producer = MAKERS[client](bootstrap)
    seconds = []

    def every_topic():
        for name in names:
            started = time.perf_counter()
            producer.send_and_wait(name)
            seconds.append(time.perf_counter() - started)

    try:
        producer.send_and_wait(topic_name)  # bootstrapped: only new topics are timed
        benchmark.pedantic(every_topic, rounds=1)
    finally:
        producer.close()
        _admin(bootstrap, lambda admin, topics: admin.delete_topics(
            topics, operation_timeout=ADMIN_TIMEOUT_S), names)
    tenth = max(1, len(seconds) // 10)
    first_p50, first_p99 = _quantiles_ms(seconds[:tenth])
    last_p50, last_p99 = _quantiles_ms(seconds[-tenth:])
    benchmark.extra_info.update(
        client=client, topics=NEW_TOPICS, total_s=round(sum(seconds), 3),
        first_tenth_p50_ms=first_p50, first_tenth_p99_ms=first_p99,
        last_tenth_p50_ms=last_p50, last_tenth_p99_ms=last_p99)
