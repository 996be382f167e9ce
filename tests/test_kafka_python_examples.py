"""kafka-python 3's documented producer examples (its README's KafkaProducer section,
and its usage page's producer: synchronous get(), callbacks, retries) run with only
the import changed -- `kafka` became `netkafka` -- and the topics read back by the
independent reader.  Only the broker address and topic names are the test's: the
examples' 'localhost:1234' and 'foobar' become the session broker and a fresh topic.
"""
import json
import logging

import pytest

from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

log = logging.getLogger(__name__)


@pytest.fixture
def topic(kafka_broker, topic_name):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=3)
    return topic_name


def test_readme_fire_and_forget_get_and_flush(kafka_broker, topic):
    from netkafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    for _ in range(100):
        producer.send(topic, b'some_message_bytes')
    future = producer.send(topic, b'another_message')
    result = future.get(timeout=60)
    producer.flush()
    producer.close()
    assert result.topic == topic and result.offset >= 0
    values = sorted(r.value for r in read_topic(kafka_broker.bootstrap, topic, 101))
    assert values == [b'another_message'] + [b'some_message_bytes'] * 100


def test_readme_keyed_send_lands_where_kafka_python_puts_it(kafka_broker, topic):
    from netkafka import KafkaProducer
    from kafka.partitioner.default import murmur2  # kafka-python's own placement
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    metadata = producer.send(topic, key=b'foo', value=b'bar').get(timeout=60)
    producer.close()
    assert metadata.partition == (murmur2(b'foo') & 0x7fffffff) % 3
    [record] = read_topic(kafka_broker.bootstrap, topic, 1)
    assert (record.key, record.value, record.partition) == (b'foo', b'bar', metadata.partition)


def test_readme_json_serializer(kafka_broker, topic):
    from netkafka import KafkaProducer, JsonSerializer
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap,
                             value_serializer=JsonSerializer())
    producer.send(topic, {'foo': 'bar'})
    producer.flush()
    producer.close()
    [record] = read_topic(kafka_broker.bootstrap, topic, 1)
    assert json.loads(record.value) == {'foo': 'bar'}


def test_readme_string_key_serializer(kafka_broker, topic):
    from netkafka import KafkaProducer, DefaultSerializer
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap,
                             key_serializer=DefaultSerializer())
    producer.send(topic, key='ping', value=b'1234')
    producer.flush()
    producer.close()
    [record] = read_topic(kafka_broker.bootstrap, topic, 1)
    assert (record.key, record.value) == (b'ping', b'1234')


def test_readme_gzip_compression(kafka_broker, topic):
    from netkafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, compression_type='gzip')
    for i in range(1000):
        producer.send(topic, b'msg %d' % i)
    producer.flush()
    producer.close()
    records = read_topic(kafka_broker.bootstrap, topic, 1000)
    assert sorted(r.value for r in records) == sorted(b'msg %d' % i for i in range(1000))


def test_readme_headers_and_metrics(kafka_broker, topic):
    from netkafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    producer.send(topic, value=b'c29tZSB2YWx1ZQ==', headers=[('content-encoding', b'base64')])
    producer.flush()
    metrics = producer.metrics()
    producer.close()
    assert metrics['producer-metrics']['record-send-total'] == 1
    [record] = read_topic(kafka_broker.bootstrap, topic, 1)
    assert record.headers == [('content-encoding', b'base64')]


def test_usage_synchronous_send_and_callbacks_with_retries(kafka_broker, topic):
    from netkafka import KafkaProducer
    from netkafka.errors import KafkaError
    producer = KafkaProducer(bootstrap_servers=[kafka_broker.bootstrap], retries=5,
                             value_serializer=lambda m: json.dumps(m).encode('ascii'))
    future = producer.send(topic, {'key': 'value'})
    try:
        record_metadata = future.get(timeout=10)
    except KafkaError:
        log.exception("send failed")
        raise
    successes, errors = [], []

    def on_send_success(record_metadata):
        successes.append((record_metadata.topic, record_metadata.partition,
                          record_metadata.offset))

    def on_send_error(excp):
        errors.append(excp)

    producer.send(topic, {'key': 'value'}).add_callback(on_send_success).add_errback(
        on_send_error)
    producer.flush()
    producer.close()
    assert record_metadata.topic == topic and record_metadata.offset >= 0
    assert len(successes) == 1 and successes[0][0] == topic and errors == []
    assert [json.loads(r.value) for r in read_topic(kafka_broker.bootstrap, topic, 2)] == [
        {'key': 'value'}] * 2
