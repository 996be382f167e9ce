"""Partitioners with kafka-python 3's names and interface (``kafka.partitioner``).

DefaultPartitioner and StickyPartitioner are netkafka's native partitioner: the
Java client's placement, murmur2 for keys and one partition per batch for
records without a key (KIP-480).  That is kafka-python's StickyPartitioner;
kafka-python's DefaultPartitioner differs only for records without a key, which it
places at random record by record -- netkafka keeps them sticky, which fills
batches and is what the Java client does.

Partitioner is kafka-python's interface for one's own: subclass it, implement
partition(topic, key, serialized_key, value, serialized_value, cluster) and
optionally on_new_batch(topic, cluster, prev_partition), and pass an instance as
partitioner=.  netkafka's native path chooses the partition before the record is
encoded and knows only its serialized key there: it passes the serialized key as
both key and serialized_key, and None for value and serialized_value.  cluster
answers topics(), partitions_for_topic(topic) and
available_partitions_for_topic(topic) for the record's topic.

The names netkafka had before (netkafka.producer.partitioner) stay as they are.
"""
from abc import ABC, abstractmethod

from netkafka.producer._partitioner import DefaultPartitioner
from netkafka.producer._partitioner import Partitioner as _NativePartitioner
from netkafka.producer._partitioner import murmur2

__all__ = ["DefaultPartitioner", "Partitioner", "StickyPartitioner", "murmur2"]

StickyPartitioner = DefaultPartitioner


class Partitioner(ABC):
    """kafka-python 3's partitioner interface (see the module docstring)."""

    @abstractmethod
    def partition(self, topic, key, serialized_key, value, serialized_value, cluster):
        """The partition id for a record of topic."""


# netkafka's own partitioners count as Partitioners, as kafka-python's do.
Partitioner.register(_NativePartitioner)
