"""`make demo`: start a local Apache Kafka broker and show what it knows.

For now this is the harness alone: start a broker (or use $NETKAFKA_BOOTSTRAP), print its
address and the cluster's metadata, create a topic and print that, stop the broker.  A later
issue puts netkafka's producer to work here.
"""
import os

from netkafka.testing.admin import admin_client, create_topic
from netkafka.testing.broker import Cluster

DEMO_TOPIC = "netkafka-demo"
DEMO_PARTITIONS = 3


def print_metadata(metadata) -> None:
    print(f"cluster {metadata.cluster_id}, controller {metadata.controller_id}")
    for broker in sorted(metadata.brokers.values(), key=lambda b: b.id):
        print(f"  broker {broker.id} at {broker.host}:{broker.port}")
    for topic in sorted(metadata.topics.values(), key=lambda t: t.topic):
        print(f"  topic {topic.topic}: {len(topic.partitions)} partition(s)")
        for partition in sorted(topic.partitions.values(), key=lambda p: p.id):
            print(f"    partition {partition.id}: leader {partition.leader}, "
                  f"replicas {partition.replicas}, isr {partition.isrs}")


def run(bootstrap: str) -> None:
    print(f"Kafka broker at {bootstrap}")
    print_metadata(admin_client(bootstrap).list_topics(timeout=10))
    topic = DEMO_TOPIC if "NETKAFKA_BOOTSTRAP" not in os.environ else f"{DEMO_TOPIC}-{os.getpid()}"
    print(f"creating topic {topic} with {DEMO_PARTITIONS} partitions")
    print_metadata(create_topic(bootstrap, topic, partitions=DEMO_PARTITIONS))


def main() -> None:
    bootstrap = os.environ.get("NETKAFKA_BOOTSTRAP")
    if bootstrap:
        run(bootstrap)
        return
    with Cluster(1) as cluster:
        run(cluster.bootstrap)
    print("broker stopped")


if __name__ == "__main__":
    main()
