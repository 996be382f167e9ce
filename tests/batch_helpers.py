"""Sealed record batches and I/O-layer plumbing shared by the connection, I/O pool,
metadata and backpressure tests.

Batches come from netkafka's own encoder (netkafka.record._batch); what reaches the broker is
checked by the independent reader (confluent-kafka), never by our decoder.
"""
import os
import time
from typing import NamedTuple

from netkafka.record import _batch, _pool
from netkafka.client.connection import ConnectionConfig
from netkafka.client.io_pool import IOPool
from netkafka.client.metadata import Metadata
from netkafka.client.retry import RetryBackoff
from netkafka.producer.idempotence import ProducerIdManager
from netkafka.producer.sender import Sender

BATCH_SIZE_BYTES = 64 * 1024
MAX_REQUEST_SIZE_BYTES = 1024 * 1024


def wait_for(condition, timeout_s=30, what="the condition"):
    """Polls condition() until it is true; fails the test naming `what` after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} never came"
        time.sleep(0.01)


class Written(NamedTuple):
    """One record as appended: what the reader must give back."""

    key: object
    value: object
    headers: list
    timestamp_ms: int


class SealedBatch(NamedTuple):
    builder: object  # the RecordBatchBuilder, sealed
    view: memoryview  # its wire bytes (read-only view of the pooled buffer)
    records: list  # Written, in offset order

    @property
    def record_count(self):
        return len(self.records)


def new_buffer_pool(total_bytes=64 * 1024 * 1024):
    return _pool.BufferPool(BATCH_SIZE_BYTES, total_bytes)


def make_batch(pool, tag, count, value_bytes=100, with_headers=True, stamp=None):
    """A sealed batch of `count` records; keys, values and headers name `tag` and the
    record's index, so a lost, duplicated or reordered record shows in a comparison.
    stamp: None, or (producer id, epoch, base sequence) for an idempotent sender."""
    builder = _batch.RecordBatchBuilder(pool.acquire(), BATCH_SIZE_BYTES, MAX_REQUEST_SIZE_BYTES)
    written = []
    now_ms = int(time.time() * 1000)
    for i in range(count):
        key = None if i % 5 == 4 else f"{tag}-k{i}".encode()
        prefix = f"{tag}-v{i}-".encode()
        value = prefix + os.urandom(max(0, value_bytes - len(prefix)))
        headers = [("h", f"{tag}-{i}".encode()), ("empty", b"")] if with_headers else []
        timestamp_ms = now_ms + i
        if builder.append(key, value, headers, timestamp_ms) < 0:
            raise AssertionError(f"batch {tag} full after {i} records: lower the count")
        written.append(Written(key, value, headers, timestamp_ms))
    if stamp is not None:
        builder.set_producer_state(*stamp)
    return SealedBatch(builder, builder.seal(), written)


def release_batches(batches):
    """Gives every batch's memory back to its pool.  Called by the tests once the I/O
    layer is done with the batches, so that none is left for the garbage collector
    (and it proves the I/O layer holds no view of them any more)."""
    for batch in batches:
        batch.view.release()
        if batch.builder.state == "sealed":
            batch.builder.mark_failed()  # done with it, whatever the outcome
        if batch.builder.state == "done":
            batch.builder.release()  # raises BufferError if a view is still alive


def as_read(records):
    """(key, value, headers, timestamp_ms) tuples, comparable with reader.Record."""
    return [(r.key, r.value, list(r.headers), r.timestamp_ms) for r in records]


class IOStack(NamedTuple):
    """The I/O layer wired as a producer wires it."""

    pool: IOPool
    metadata: Metadata
    sender: Sender
    idempotence: object = None  # the sender's ProducerIdManager, if idempotent

    def stamped_batch(self, pool, topic, tag, count):
        """make_batch() for partition 0 of topic, numbered there if idempotent."""
        stamp = (None if self.idempotence is None
                 else self.idempotence.next_sequence(topic, 0, count))
        return make_batch(pool, tag, count, stamp=stamp)

    def send(self, topic, batch, **options):
        """sender.send() of a SealedBatch to partition 0: its builder if idempotent
        (the sender may re-stamp it), else its view."""
        return self.sender.send(topic, 0, batch.view if self.idempotence is None
                                else batch.builder, batch.record_count, **options)

    def close(self, timeout_s=10.0):
        # Order matters: the sender fails what is left, then the threads stop.
        self.sender.close(timeout_s)
        self.metadata.close()
        self.pool.close(timeout_s)


def io_stack(bootstrap, io_threads=1, metadata_max_age_ms=300000, sender_options=None,
             idempotent=False, **connection_options):
    pool = IOPool(ConnectionConfig(**connection_options), io_threads=io_threads)
    try:
        metadata = Metadata(pool, bootstrap, metadata_max_age_ms=metadata_max_age_ms)
        idempotence = (ProducerIdManager(pool, metadata, retry_backoff=RetryBackoff(100, 1000),
                                         max_block_ms=30000) if idempotent else None)
        sender = Sender(pool, metadata, idempotence=idempotence, **(sender_options or {}))
    except BaseException:
        pool.close()
        raise
    return IOStack(pool, metadata, sender, idempotence)


def rss_bytes():
    """This process's resident set size, from /proc."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def io_threads_alive():
    import threading

    return [t.name for t in threading.enumerate() if t.name.startswith("netkafka-io-")]


def connection_states(caplog, address):
    """The states the connection to address entered, in order, read from its DEBUG
    log (caplog set to DEBUG for netkafka.client.connection)."""
    return [record.args[2] for record in caplog.records
            if record.name == "netkafka.client.connection" and address in record.args[0]]
