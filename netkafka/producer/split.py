"""A batch a broker refused as larger than it takes, cut in two.

A broker answers MESSAGE_TOO_LARGE for a batch above the topic's max.message.bytes
(or its own message.max.bytes).  The sender (sender.py) then sends the batch's
records again in two batches of half its records each, as kafka-python 3 does; a
half still too large is cut again, until a single record too large fails alone.
Halves rather than the Java client's pieces of batch_size: netkafka's batches never
exceed batch_size (the Java client estimates compressed sizes and overshoots), so a
refused batch cut to batch_size would be the same batch again.

Each half keeps the batch's producer id and epoch, its transactional flag, and its
part of the batch's sequences: the broker appended none of the batch, so its next
expected sequence is still the batch's base sequence, and the halves, sent in
order, are what it expects.  Records keep their timestamps, keys, values and
headers; the halves are encoded anew (offset and timestamp deltas start again) and
compressed with the batch's codec: at the producer's compression_level when it is
the producer's codec, else (a batch replayed from a WAL written under another
compression_type) at the codec's default level.

Memory: a half's bytes come from a pool of its own, outside buffer_memory (as the
Java client allocates its split batches off its pool): the answer's I/O thread
must never wait for memory, and the refused batch, whose memory they replace, is
released once both halves are done.
"""
from netkafka.record._batch import (BATCH_HEADER_BYTES, TIMESTAMP_CREATE_TIME,
                                    TIMESTAMP_LOG_APPEND_TIME, RecordBatchBuilder,
                                    pool_buffer_size_bytes)
from netkafka.record._pool import BufferPool
from netkafka.record.reader import read_batch

_SEQUENCE_LIMIT = 2**31  # sequences wrap to 0 after Int.MAX_VALUE


def split_in_halves(data, max_records_bytes, compressor=None):
    """The records of the sealed RecordBatch v2 in data (two or more, at most
    max_records_bytes of them uncompressed) as two sealed batches: [(builder, view,
    first record index, record count)].  compressor: the producer's Compressor, or
    None; the halves of a batch of its codec are compressed with it.

    Raises:
        ValueError: data is not such a batch (netkafka.record.reader names why).
    """
    batch = read_batch(data, max_records_bytes)
    if batch.record_count < 2:
        raise ValueError("a batch of one record cannot be split")
    middle = (batch.record_count + 1) // 2
    compression = batch.codec or None
    if compressor is not None and compressor.codec == batch.codec:
        compression = compressor
    return [_sealed_part(batch, 0, middle, compression),
            _sealed_part(batch, middle, batch.record_count, compression)]


def _sealed_part(batch, first, end, compression):
    records = batch.records[first:end]
    size = BATCH_HEADER_BYTES + sum(
        RecordBatchBuilder.size_upper_bound_bytes(record.key, record.value, record.headers)
        for record in records)
    # Room for the compressed copy too (pool_buffer_size_bytes), or the part would go
    # uncompressed.
    pool_bytes = pool_buffer_size_bytes(size, compression)
    buffer = BufferPool(pool_bytes, 2 * pool_bytes).try_acquire(size)
    builder = RecordBatchBuilder(
        buffer, size, size, compression,
        timestamp_type=(TIMESTAMP_LOG_APPEND_TIME if batch.log_append_time
                        else TIMESTAMP_CREATE_TIME),
        transactional=batch.transactional)
    for record in records:
        if builder.append(record.key, record.value, record.headers, record.timestamp_ms) < 0:
            raise ValueError(f"a record did not fit its part's {size}-byte bound")
    if batch.producer_id >= 0:
        builder.set_producer_state(batch.producer_id, batch.producer_epoch,
                                   (batch.base_sequence + first) % _SEQUENCE_LIMIT)
    return builder, builder.seal(), first, end - first
