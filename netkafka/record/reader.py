"""A sealed RecordBatch v2 read back into its records.

The producer reads its own batch back when a broker refuses it as larger than it
takes (MESSAGE_TOO_LARGE): the records go again in smaller batches
(producer/split.py).  The bytes are the producer's, but they are read as any input:
the CRC32C first, then every length against the bytes that are there; what does not
agree is named (ValueError).  A compressed batch's records are decompressed first, by
the libraries that compress them (_compression.pyx), into no more than the caller's
bound: a size a codec's header claims is checked before anything is allocated.
"""
import struct
import zlib
from typing import NamedTuple, Optional

import cramjam
import lz4.frame
import zstandard

from netkafka.record._batch import BATCH_HEADER_BYTES
from netkafka.record._crc import crc32c

# The header's fields: BATCH_HEADER_BYTES bytes.
_HEADER = struct.Struct(">qiibIhiqqqhii")
_MAGIC_V2 = 2
_CRC_START = 21  # the CRC32C covers the batch from its attributes on
_LENGTH_EXCLUDED = 12  # base offset and batch length are not counted in the length
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


class Record(NamedTuple):
    timestamp_ms: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: list  # [(name bytes, value bytes or None)]


class SealedBatch(NamedTuple):
    codec: int
    log_append_time: bool
    transactional: bool
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    records: list  # [Record], in offset order


def read_batch(data, max_records_bytes) -> SealedBatch:
    """The records of the RecordBatch v2 in data (any buffer), whose records section
    is at most max_records_bytes uncompressed.

    Raises:
        ValueError: data is not one whole RecordBatch v2 (what does not agree is
            named), or a control batch.
    """
    view = memoryview(data).cast("B")
    size = view.nbytes
    if size < BATCH_HEADER_BYTES:
        raise ValueError(f"{size} bytes are shorter than a RecordBatch header")
    (_, length, _, magic, crc, attributes, last_delta, first_ts, _, producer_id,
     producer_epoch, base_sequence, count) = _HEADER.unpack_from(view)
    if magic != _MAGIC_V2:
        raise ValueError(f"magic {magic}: not a RecordBatch v2")
    if length != size - _LENGTH_EXCLUDED:
        raise ValueError(f"batch length {length} for {size} bytes")
    if crc32c(view[_CRC_START:]) != crc:
        raise ValueError("the batch's CRC32C does not match its bytes")
    if attributes & _CONTROL:
        raise ValueError("a control batch")
    codec = attributes & _CODEC_MASK
    if count < 1 or last_delta != count - 1:
        raise ValueError(f"record count {count} with last offset delta {last_delta}")
    if codec:
        view = memoryview(_decompress(codec, view[BATCH_HEADER_BYTES:], max_records_bytes))
        size = view.nbytes
        pos = 0
    else:
        pos = BATCH_HEADER_BYTES
    records = []
    for index in range(count):
        record_length, pos = read_varint(view, pos, size)
        end = pos + record_length
        if record_length < 1 or end > size:
            raise ValueError(f"record {index}: length {record_length} past the batch")
        pos += 1  # attributes (unused)
        ts_delta, pos = read_varint(view, pos, end)
        offset_delta, pos = read_varint(view, pos, end)
        if offset_delta != index:
            raise ValueError(f"record {index} has offset delta {offset_delta}")
        key, pos = _nullable_bytes(view, pos, end)
        value, pos = _nullable_bytes(view, pos, end)
        header_count, pos = read_varint(view, pos, end)
        if header_count < 0 or header_count > end - pos:
            raise ValueError(f"record {index}: {header_count} headers")
        headers = []
        for _ in range(header_count):
            name, pos = _nullable_bytes(view, pos, end)
            if name is None:
                raise ValueError(f"record {index}: a header with a null name")
            header_value, pos = _nullable_bytes(view, pos, end)
            headers.append((name, header_value))
        if pos != end:
            raise ValueError(f"record {index}: {end - pos} bytes past its fields")
        records.append(Record(first_ts + ts_delta, key, value, headers))
    if pos != size:
        raise ValueError(f"{size - pos} bytes past the batch's {count} records")
    return SealedBatch(codec, bool(attributes & _LOG_APPEND_TIME),
                       bool(attributes & _TRANSACTIONAL), producer_id, producer_epoch,
                       base_sequence, count, records)


def _decompress(codec, data, limit):
    """The records section compressed with codec (as _compression.pyx writes it), if
    it is at most limit bytes."""
    try:
        if codec == 1:  # gzip
            stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = stream.decompress(data, limit + 1)
            complete = stream.eof and not stream.unused_data
        elif codec == 2:  # one raw snappy block
            if cramjam.snappy.decompress_raw_len(data) > limit:
                raise ValueError(f"snappy records of more than {limit} bytes")
            out = bytes(cramjam.snappy.decompress_raw(data))
            complete = True
        elif codec == 3:  # one LZ4 frame
            stream = lz4.frame.LZ4FrameDecompressor()
            out = stream.decompress(data, max_length=limit + 1)
            complete = stream.eof and not stream.unused_data
        elif codec == 4:  # one zstd frame with its content size
            content_size = zstandard.frame_content_size(data)
            if not 0 <= content_size <= limit:
                raise ValueError(f"a zstd frame of {content_size} bytes (limit {limit})")
            out = zstandard.ZstdDecompressor().decompress(data)
            complete = True
        else:
            raise ValueError(f"unknown codec {codec}")
    except (RuntimeError, zlib.error, zstandard.ZstdError, cramjam.DecompressionError) as exc:
        raise ValueError(f"the records do not decompress (codec {codec}): {exc}") from exc
    if len(out) > limit or not complete:
        raise ValueError(f"the compressed records (codec {codec}) are not one whole "
                         f"stream of at most {limit} bytes")
    return out


def read_varint(view, pos, end):
    """A zigzag varint (at most 10 bytes) at pos, before end: (value, next pos)."""
    value = shift = 0
    while shift < 70:
        if pos >= end:
            raise ValueError("a varint runs past its record")
        byte = view[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    raise ValueError("a varint longer than 10 bytes")


def _nullable_bytes(view, pos, end):
    length, pos = read_varint(view, pos, end)
    if length < 0:
        if length != -1:
            raise ValueError(f"a length of {length}")
        return None, pos
    if pos + length > end:
        raise ValueError(f"{length} bytes past the record")
    return bytes(view[pos:pos + length]), pos + length
