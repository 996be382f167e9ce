"""What a local broker stored: the record batches in a topic's log segments, as written.

The broker appends a v2 batch it can assign offsets to in place as the client sent it, so
its headers on disk show a client's request shape: records per batch, the codec, bytes per
record.  Only the batch header is read (offsets of the v2 layout below); the records are
the independent reader's business (reader.py).

    base offset int64 | length int32 | leader epoch int32 | magic int8 | crc uint32 |
    attributes int16 (codec: the low 3 bits) | last offset delta int32 | ... |
    record count int32 at byte 57 | records from byte 61
"""
import struct
from pathlib import Path
from typing import NamedTuple, Optional

_LENGTH_AT, _MAGIC_AT, _ATTRIBUTES_AT, _COUNT_AT = 8, 16, 21, 57
_HEADER_BYTES = 61
_LENGTH_EXCLUDED = 12  # base offset and length precede what the length counts
_CODEC_MASK = 0x07


class StoredBatch(NamedTuple):
    """One batch's header fields as the broker stored them."""

    partition: int
    record_count: int
    attributes: int
    size_bytes: int  # the whole batch, header included

    @property
    def codec(self) -> int:
        """0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return self.attributes & _CODEC_MASK


def stored_batches(data_dir: Path, topic: str,
                   partition: Optional[int] = None) -> list[StoredBatch]:
    """Every batch in the segments of topic's partition (every partition: None) under a
    broker node's log directory (Node.data_dir), in file and offset order.  The broker
    may be running: what it has appended is in the files.

    Raises:
        ValueError: a batch that is not v2 or whose length runs past its file (named).
    """
    pattern = f"{topic}-{'*' if partition is None else partition}/*.log"
    batches = []
    for segment in sorted(Path(data_dir).glob(pattern)):
        # "t-*" matches topic "t-other"'s directories too: the rest must be a number.
        suffix = segment.parent.name[len(topic) + 1:]
        if not suffix.isdigit():
            continue
        number = int(suffix)
        data, position = segment.read_bytes(), 0
        while position < len(data):
            if position + _HEADER_BYTES > len(data):
                raise ValueError(f"{segment}: a batch header cut short at byte {position}")
            (length,) = struct.unpack_from(">i", data, position + _LENGTH_AT)
            size = _LENGTH_EXCLUDED + length
            if size < _HEADER_BYTES or position + size > len(data):
                raise ValueError(f"{segment}: a batch of length {length} at byte {position} "
                                 f"does not fit the file's {len(data)} bytes")
            if data[position + _MAGIC_AT] != 2:
                raise ValueError(f"{segment}: magic {data[position + _MAGIC_AT]} at byte "
                                 f"{position}; only v2 batches are read")
            (attributes,) = struct.unpack_from(">h", data, position + _ATTRIBUTES_AT)
            (count,) = struct.unpack_from(">i", data, position + _COUNT_AT)
            batches.append(StoredBatch(number, count, attributes, size))
            position += size
    return batches
