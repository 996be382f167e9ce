"""Partitioners by name: what the Producer's `partitioner=` option accepts.

The partitioners themselves are native (netkafka.producer._partitioner, whose docstring
describes the interface the accumulator calls); this module maps the option's
values onto them:

    'default' or 'murmur2'  DefaultPartitioner: the Java client's placement --
                            murmur2 for keys, sticky (one partition per batch) for
                            records without a key.  'murmur2' names the same thing
                            (it is not librdkafka's 'murmur2', which sends every
                            unkeyed record to one partition).
    'round_robin'           RoundRobinPartitioner: every record to the next
                            partition, key ignored, as Java's RoundRobinPartitioner.
    'broker_aware'          BrokerAwarePartitioner: murmur2 for keys; unkeyed
                            batches stay on one broker's partitions, then the next.
    a Partitioner instance  used as it is.
    a callable              kafka-python's `(key_bytes, all_partitions,
                            available_partitions) -> partition`, result checked.
    another object with     kafka-python 3's Partitioner interface
    partition()             (netkafka.partitioner), through ObjectPartitioner.
"""
from netkafka._validate import check_choice
from netkafka.producer._partitioner import (
    BrokerAwarePartitioner,
    CallablePartitioner,
    DefaultPartitioner,
    ObjectPartitioner,
    Partitioner,
    RoundRobinPartitioner,
    default_partition,
    murmur2,
)

__all__ = [
    "BrokerAwarePartitioner",
    "CallablePartitioner",
    "DefaultPartitioner",
    "ObjectPartitioner",
    "Partitioner",
    "RoundRobinPartitioner",
    "default_partition",
    "make_partitioner",
    "murmur2",
]

PARTITIONER_NAMES = ("default", "murmur2", "round_robin", "broker_aware")


def make_partitioner(spec="default", *, leaders_for=None):
    """The partitioner for the `partitioner=` option's value.

    Args:
        spec: one of PARTITIONER_NAMES, a Partitioner, an object with kafka-python
            3's partition(topic, key, serialized_key, value, serialized_value,
            cluster), or a callable
            `(key_bytes, all_partitions, available_partitions) -> partition`.
            Default: 'default'.
        leaders_for: callable(topic) -> {partition: leader broker id}, the
            metadata cache's view; needed by 'broker_aware' only.

    Raises:
        ValueError: an unknown name or a value of another kind, or 'broker_aware'
            without leaders_for.
    """
    if isinstance(spec, Partitioner):
        return spec
    if not isinstance(spec, str) and callable(getattr(spec, "partition", None)):
        return ObjectPartitioner(spec)
    if callable(spec):
        return CallablePartitioner(spec)
    check_choice("partitioner", spec, PARTITIONER_NAMES,
                 others=["a Partitioner", "an object with partition()", "a callable"])
    if spec == "round_robin":
        return RoundRobinPartitioner()
    if spec == "broker_aware":
        if leaders_for is None:
            raise ValueError(
                "partitioner 'broker_aware' needs leaders_for(topic) -> "
                "{partition: leader broker id}")
        return BrokerAwarePartitioner(leaders_for)
    return DefaultPartitioner()  # 'default' or 'murmur2'
