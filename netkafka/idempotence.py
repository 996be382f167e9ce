"""Idempotence: producer ids, epochs and each partition's sequence numbers.

A broker keeps, per (producer id, partition), the sequence number of the last batch
it appended and the offsets of the last five.  A batch whose base sequence is not
the next one expected is refused (OUT_OF_ORDER_SEQUENCE_NUMBER); a resend of one it
has already appended is answered with the first append's offsets.  So retries
neither duplicate nor reorder, provided a partition's batches carry consecutive
sequences in the order they are sent -- which the accumulator guarantees by
assigning them here, at seal time, on the one thread draining that partition.

The producer id and epoch come from InitProducerId (no transactional id), asked of
any broker the first time a batch is sealed, and retried on retriable errors.

After a batch fails for good, its partition's sequence has a hole the broker will
never fill: every later batch would be refused.  That partition is then marked
broken.  Its next batch waits until every batch it had outstanding is done (so none
can be overtaken), then starts again at sequence 0 under a fresh producer id; the
other partitions carry on under theirs.  (The Java client bumps the epoch and
renumbers unsent batches instead, KIP-360; a sealed batch here cannot be
renumbered, its header being under the CRC.)

Threads: next_sequence() runs on the thread draining the partition; batch_done() on
whichever thread completes a batch.  Every field is guarded by _lock; _changed is
notified when a partition's outstanding count drops.  Lock order: _lock alone (the
InitProducerId request goes out without it).
"""
import threading
import time

from netkafka import errors, protocol
from netkafka.errors import KafkaTimeoutError

_SEQUENCE_LIMIT = 2**31  # sequences wrap to 0 after Int.MAX_VALUE, as in the Java client


class _PartitionSequence:
    """One partition's idempotence state; fields guarded by ProducerIdManager._lock."""

    __slots__ = ("producer_id", "epoch", "next_sequence", "outstanding", "broken")

    def __init__(self, producer_id, epoch):
        self.producer_id = producer_id  # the id its batches are sealed under
        self.epoch = epoch
        self.next_sequence = 0  # base sequence of its next batch
        self.outstanding = 0  # batches sealed and not yet done
        self.broken = False  # a batch failed for good: start over under a fresh id


class ProducerIdManager:
    """Producer ids from the brokers and per-partition sequence numbers.

    Args:
        pool: the IOPool whose connections carry InitProducerId.
        metadata: the Metadata cache (which brokers there are).
        retry_backoff_ms: wait between InitProducerId attempts.
        max_block_ms: bound on next_sequence() waiting for an id or for a broken
            partition's outstanding batches.
    """

    def __init__(self, pool, metadata, retry_backoff_ms, max_block_ms):
        self._pool = pool  # immutable
        self._metadata = metadata  # immutable
        self._retry_backoff_s = retry_backoff_ms / 1000  # immutable
        self._max_block_s = max_block_ms / 1000  # immutable
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._current = None  # guarded by _lock: (producer id, epoch) for new partitions
        self._partitions = {}  # guarded by _lock: (topic, partition) -> _PartitionSequence
        self._ids_fetched = 0  # guarded by _lock: InitProducerId answers so far
        self._fetch_lock = threading.Lock()  # one InitProducerId at a time; guards no field

    def next_sequence(self, topic, partition, record_count):
        """(producer id, epoch, base sequence) for the next batch of the partition,
        which is counted as outstanding until batch_done().  Called by the thread
        draining the partition.

        Raises:
            KafkaTimeoutError: no producer id, or a broken partition still waiting for
                its outstanding batches, within max_block_ms.
            KafkaError: a broker refused InitProducerId for good.
        """
        deadline = time.monotonic() + self._max_block_s
        key = (topic, partition)
        with self._changed:
            state = self._partitions.get(key)
            if state is not None and not state.broken:
                return self._number_locked(state, record_count)
            stale = None
            if state is not None:
                # Broken: let its outstanding batches finish first, so that none of
                # them can be overtaken by a batch under the fresh id.
                if not self._changed.wait_for(lambda: state.outstanding == 0,
                                              max(0.0, deadline - time.monotonic())):
                    raise KafkaTimeoutError(
                        f"{topic}-{partition}: {state.outstanding} batches still outstanding "
                        f"after a failed one when max_block_ms="
                        f"{self._max_block_s * 1000:.0f} ran out; the partition starts over "
                        f"once they are done")
                stale = (state.producer_id, state.epoch)
        # Only this thread adds batches to this partition, so it stays as it was.
        producer_id, epoch = self._producer_id(deadline, avoid=stale)
        with self._lock:
            state = self._partitions[key] = _PartitionSequence(producer_id, epoch)
            return self._number_locked(state, record_count)

    @staticmethod
    def _number_locked(state, record_count):
        base = state.next_sequence
        state.next_sequence = (base + record_count) % _SEQUENCE_LIMIT
        state.outstanding += 1
        return state.producer_id, state.epoch, base

    def batch_done(self, topic, partition, ok):
        """A batch next_sequence() numbered is done: acknowledged (ok) or failed for
        good, which breaks the partition's sequence."""
        with self._changed:
            state = self._partitions.get((topic, partition))
            if state is None:
                return
            state.outstanding -= 1
            if not ok:
                state.broken = True
            self._changed.notify_all()

    def metrics(self):
        with self._lock:
            current = self._current
            return {"producer_id": -1 if current is None else current[0],
                    "producer_epoch": -1 if current is None else current[1],
                    "producer_ids_fetched": self._ids_fetched,
                    "partitions_broken": sum(s.broken for s in self._partitions.values())}

    # ------------------------------------------------------------------

    def _producer_id(self, deadline, avoid=None):
        """The current (producer id, epoch), asking a broker for one if there is none
        or if it is `avoid`."""
        with self._fetch_lock:
            with self._lock:
                current = self._current
            if current is not None and current != avoid:
                return current
            current = self._fetch(deadline)
            with self._lock:
                self._current = current
                self._ids_fetched += 1
            return current

    def _fetch(self, deadline):
        last_error = None
        while True:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                raise KafkaTimeoutError(
                    f"no producer id (InitProducerId) within max_block_ms="
                    f"{self._max_block_s * 1000:.0f}"
                    + (f": last error {last_error}" if last_error else ""))
            try:
                return self._init_producer_id(remaining_s)
            except errors.KafkaError as exc:
                if not exc.retriable:
                    raise
                last_error = exc
            time.sleep(min(self._retry_backoff_s, max(0.0, deadline - time.monotonic())))

    def _init_producer_id(self, timeout_s):
        snapshot = self._metadata.wait_for_bootstrap(timeout_s)
        # Any broker answers an idempotent producer; the one with least queued helps.
        brokers = sorted(snapshot.brokers.values())
        connections = [self._pool.connection(b.node_id, b.host, b.port) for b in brokers]
        conn = min(connections, key=lambda c: (c.state != "ready", c.outbound_bytes))
        client_id = conn.config.client_id
        future = conn.request(
            protocol.INIT_PRODUCER_ID,
            lambda cid, version: protocol.encode_init_producer_id_request(cid, client_id,
                                                                          version),
            protocol.decode_init_producer_id_response)
        try:
            response = future.result(timeout_s)
        except TimeoutError:
            raise KafkaTimeoutError(
                f"InitProducerId to {conn.describe()} not answered in {timeout_s:.1f} s") from None
        if response.error_code:
            raise errors.error_for_code(response.error_code,
                                        f"InitProducerId from {conn.describe()}")
        return response.producer_id, response.producer_epoch
