"""Serializers with kafka-python 3's interface (``kafka.serializer``).

A Serializer's serialize(topic, headers, data) turns a key or value into bytes
(or None); it sees the record's topic and its headers list, which it may append
to (a schema id, say).  The Producer takes such an object as key_serializer /
value_serializer, or a plain callable (data) -> bytes as before.  close() is
called once when the producer closes.

Deserializer is here too, so that kafka-python code importing both keeps
working; netkafka itself only produces.
"""
import json
from abc import ABC, abstractmethod

__all__ = ["DefaultSerializer", "Deserializer", "JsonSerializer", "Serializer"]


class Serializer(ABC):
    """serialize(topic, headers, data) -> bytes-like or None."""

    @abstractmethod
    def serialize(self, topic, headers, data):
        """data as bytes for a record of topic with headers (a list of (str,
        bytes) pairs the serializer may add to)."""

    def close(self):
        """Called once by the producer's close()."""


class Deserializer(ABC):
    """deserialize(topic, headers, data) -> object: the reading side."""

    @abstractmethod
    def deserialize(self, topic, headers, data):
        """data (bytes or None) as an object."""

    def close(self):
        """Called once when the consumer closes."""


class DefaultSerializer(Serializer, Deserializer):
    """Bytes-like and None pass as they are; str is encoded (and decoded) with
    `encoding`; anything else without an encode() method is a TypeError."""

    def __init__(self, encoding="utf-8"):
        self.encoding = encoding

    def serialize(self, topic, headers, data):
        if data is None or isinstance(data, (bytes, bytearray, memoryview)):
            return data
        return data.encode(self.encoding)

    def deserialize(self, topic, headers, data):
        return None if data is None else bytes(data).decode(self.encoding)


class JsonSerializer(DefaultSerializer):
    """JSON text of the data, encoded; None stays None (a null key or tombstone)."""

    def serialize(self, topic, headers, data):
        if data is None:
            return None
        return super().serialize(topic, headers, json.dumps(data))

    def deserialize(self, topic, headers, data):
        text = super().deserialize(topic, headers, data)
        return None if text is None else json.loads(text)
