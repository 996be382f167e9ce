"""Pure-Python RecordBatch v2 encoder: the byte-exact oracle for netkafka.record._batch.

Written from the protocol description with struct and the `crc32c` package, sharing
no code with the native encoder, so a mistake would have to be made twice, the same
way, to pass unnoticed.  Test-only; the package never uses it.
"""
import struct

import crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")


def zigzag_varint(value):
    """Zigzag varint/varlong bytes of a signed integer."""
    n = (value << 1) ^ (value >> 63)
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _nullable(data):
    if data is None:
        return zigzag_varint(-1)
    data = bytes(data)
    return zigzag_varint(len(data)) + data


def encode_record(offset_delta, timestamp_delta, key, value, headers):
    """One record: varint length, then attributes .. headers."""
    body = bytearray(b"\x00")
    body += zigzag_varint(timestamp_delta)
    body += zigzag_varint(offset_delta)
    body += _nullable(key)
    body += _nullable(value)
    headers = headers or []
    body += zigzag_varint(len(headers))
    for h_key, h_value in headers:
        if isinstance(h_key, str):
            h_key = h_key.encode("utf-8")
        body += _nullable(h_key)
        body += _nullable(h_value)
    return zigzag_varint(len(body)) + bytes(body)


def encode_records(records):
    """The records region of a batch of (key, value, headers, timestamp_ms)."""
    first_ts = records[0][3]
    return b"".join(
        encode_record(i, ts - first_ts, key, value, headers)
        for i, (key, value, headers, ts) in enumerate(records)
    )


def encode_batch(records, *, attributes=0, producer_id=-1, producer_epoch=-1,
                 base_sequence=-1, payload=None):
    """A whole batch.  payload replaces the records region (a compressed one); the
    codec bits are then the caller's to put in attributes."""
    if payload is None:
        payload = encode_records(records)
    timestamps = [r[3] for r in records]
    size = HEADER.size + len(payload)
    header = HEADER.pack(
        0, size - 12, -1, 2, 0, attributes, len(records) - 1, timestamps[0],
        max(timestamps), producer_id, producer_epoch, base_sequence, len(records),
    )
    crc = crc32c.crc32c(header[21:] + payload)
    return header[:17] + struct.pack(">I", crc) + header[21:] + payload
