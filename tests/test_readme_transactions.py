"""The README's "Transactions" example runs: its code block is executed as it stands,
on the real broker, and what it wrote is read back read_committed."""
import os
import re
import uuid

from netkafka import Producer
from netkafka.testing.admin import create_topic
from netkafka.testing.reader import read_topic
from test_protocol_transactions import group_offsets

README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")


def readme_example(section):
    """The first python code block of the README section `section`."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", body, re.S).group(1)


def test_the_consume_transform_produce_example(kafka_broker, topic_name):
    source, destination = f"{topic_name}-in", f"{topic_name}-out"
    create_topic(kafka_broker.bootstrap, source, partitions=2)
    create_topic(kafka_broker.bootstrap, destination, partitions=2)
    records = [(b"k%d" % i, b"value-%04d" % i) for i in range(3000)]
    with Producer(bootstrap_servers=kafka_broker.bootstrap) as plain:
        for key, value in records:
            plain.produce(source, value, key=key)
    namespace = {}
    exec(compile(readme_example("Transactions"), "README.md", "exec"), namespace)
    group = f"enrich-{uuid.uuid4().hex[:8]}"
    namespace["enrich"](kafka_broker.bootstrap, source, destination, group,
                        f"enrich-{uuid.uuid4().hex[:8]}", idle_s=5.0)
    written = read_topic(kafka_broker.bootstrap, destination, len(records),
                         isolation_level="read_committed")
    assert sorted((r.key, r.value) for r in written) == sorted(
        (key, value.upper()) for key, value in records)
    def total(offsets):
        return sum(offset for offset, _ in offsets.values())
    committed = group_offsets(kafka_broker.bootstrap, group,
                              until=lambda offsets: total(offsets) == len(records))
    assert total(committed) == len(records)
