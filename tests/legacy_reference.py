"""Pure-Python encoder of legacy message sets (v0/v1): the byte-exact oracle for
netkafka.record._legacy in tests. Deliberately naive (struct and zlib.crc32) and never
imported by the package.
"""
import struct
import zlib


def _bytes_field(data):
    if data is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(data)) + bytes(data)


def encode_entry(magic, offset, attributes, timestamp_ms, key, value):
    """One message with its offset and size prefix; timestamp_ms is ignored for v0."""
    body = struct.pack(">bb", magic, attributes)
    if magic == 1:
        body += struct.pack(">q", timestamp_ms)
    body += _bytes_field(key) + _bytes_field(value)
    crc = zlib.crc32(body)
    return struct.pack(">qiI", offset, len(body) + 4, crc) + body


def encode_set(magic, records):
    """Uncompressed set of (key, value, timestamp_ms) records, offsets 0, 1, ..."""
    return b"".join(
        encode_entry(magic, offset, 0, timestamp_ms, key, value)
        for offset, (key, value, timestamp_ms) in enumerate(records)
    )


def encode_wrapper(magic, codec, records, compressed):
    """The wrapper message of a compressed set whose value is `compressed`."""
    max_timestamp_ms = max(timestamp_ms for _, _, timestamp_ms in records)
    return encode_entry(magic, len(records) - 1, codec, max_timestamp_ms, None, compressed)
