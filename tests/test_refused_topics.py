"""A topic the cluster refuses for good fails at once, naming the topic, rather than
after max_block_ms: a name against Kafka's rule before anything goes on the wire, and
an INVALID_TOPIC_EXCEPTION or TOPIC_AUTHORIZATION_FAILED in the Metadata answer."""
import pytest

from broker_proxy import MetadataProxy
from netkafka import Producer, errors
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic

# max_block_ms stays at its default (60 s): a refusal that waited for it would show as
# a KafkaTimeoutError, not as the error expected.
ILLEGAL_NAMES = {
    "empty": ("", r"topic '' is not a valid Kafka topic name: it is empty"),
    "250-chars": ("t" * 250, r"topic 'tttt.*\.\.\. \(250 characters\) .*: it has 250 characters, "
                             r"more than 249"),
    "dot": (".", r"'\.' and '\.\.' are reserved"),
    "dot-dot": ("..", r"'\.' and '\.\.' are reserved"),
    "space": ("my topic", r"topic 'my topic' .*' ' is not allowed"),
    "slash": ("a/b", r"'/' is not allowed"),
    "non-ascii": ("caf\u00e9", r"'\u00e9' is not allowed"),
    "lone-surrogate": ("t\ud800", r"'\\ud800' is not allowed"),
}


@pytest.fixture(scope="module")
def producer(kafka_broker):
    with Producer(bootstrap_servers=kafka_broker.bootstrap) as producer:
        yield producer


@pytest.mark.parametrize("name, message", ILLEGAL_NAMES.values(), ids=ILLEGAL_NAMES.keys())
def test_illegal_name_is_refused_by_every_way_in(kafka_broker, producer, topic_name, name,
                                                 message):
    with pytest.raises(errors.InvalidTopicError, match=message):
        producer.send(name, b"x")
    with pytest.raises(errors.InvalidTopicError, match=message):
        producer.produce(name, b"x")  # raised, not counted for flush()
    with pytest.raises(errors.InvalidTopicError, match=message):
        producer.send_batch(name, [b"x", b"y"])
    with pytest.raises(errors.InvalidTopicError, match=message):
        producer.partitions_for(name)
    # The producer is not poisoned: the next topic resolves and its record lands.
    producer.produce(topic_name, b"fine")
    producer.flush(30)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"fine"]


@pytest.mark.parametrize("topic", [None, 5, b"topic"], ids=["None", "int", "bytes"])
def test_a_topic_that_is_no_str_is_a_type_error_naming_it(kafka_broker, producer, topic_name,
                                                           topic):
    # kafka-python's partitions_for() says "All topics must be strings"; netkafka's
    # failed on len(None), or with a regex's complaint about bytes.
    for call in (producer.partitions_for, lambda t: producer.send(t, b"x"),
                 lambda t: producer.send_batch(t, [b"x"])):
        with pytest.raises(TypeError, match=rf"^topic must be a str, not {type(topic).__name__}$"):
            call(topic)
    producer.send(topic_name, b"fine").get(30)
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"fine"]


def test_names_at_the_rules_edges_are_written(kafka_broker, producer):
    """The longest name, and every punctuation the rule allows, reach the broker."""
    names = ["e" * 249, "._-Az09"]
    for name in names:
        create_topic(kafka_broker.bootstrap, name)
        producer.send(name, name.encode()[:8]).get(30)
    for name in names:
        assert [r.value for r in read_topic(kafka_broker.bootstrap, name, 1)] == [
            name.encode()[:8]]


def _refuse_topic(topic, code):
    """A rewrite: the answer says `code` for topic, as a broker refusing it does."""
    def rewrite(fields):
        topics = [t if t.name != topic else type(t)(**{
            **{name: getattr(t, name) for name in t.fields},
            "error_code": code, "partitions": []}) for t in fields["topics"]]
        return {**fields, "topics": topics}
    return rewrite


@pytest.mark.parametrize("error_class, message", [
    (errors.InvalidTopicError, r"the broker refuses the name \(INVALID_TOPIC_EXCEPTION\)"),
    (errors.TopicAuthorizationFailedError, r"this principal may not Describe it"),
], ids=["invalid-topic", "authorization"])
def test_topic_the_broker_refuses_fails_the_waiting_send_at_once(
        kafka_broker, topic_name, error_class, message):
    """A locally valid name the broker refuses: no Kafka 4 broker refuses one in a
    Metadata answer (a name colliding with another by '.' / '_' comes back as
    UNKNOWN_TOPIC_OR_PARTITION), so the fake broker in front of the real one says it."""
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    proxy = MetadataProxy((host, int(port)))
    refused = f"{topic_name}-refused"
    proxy.set_rewrite(_refuse_topic(refused, error_class.code))
    try:
        with Producer(bootstrap_servers=proxy.bootstrap) as producer:
            with pytest.raises(error_class, match=rf"topic '{refused}': {message}"):
                producer.send(refused, b"x")
            # The other topics of the same answers are served.
            producer.send(topic_name, b"fine").get(30)
            # Refused for good: asked again, refused again, not waited for.
            with pytest.raises(error_class):
                producer.send(refused, b"x")
    finally:
        proxy.close()
    assert [r.value for r in read_topic(kafka_broker.bootstrap, topic_name, 1)] == [b"fine"]
