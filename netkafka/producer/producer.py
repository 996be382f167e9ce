"""netkafka.Producer: kafka-python's KafkaProducer, with native hot paths.

The life of a record in send():

    1. serialize key and value (the optional serializers), stamp the time
    2. find the topic's partitions (metadata, waited for once per topic)
    3. choose the partition: the caller's, or the partitioner's
    4. encode the record into that partition's open batch (the accumulator), which
       may first wait for memory (backoff) -- and may ask for a new sticky partition
       if the record would open a new batch there (KIP-480)
    5. return the record's future

produce() is the same story returning nothing (no future: its failures are
counted for flush() to raise); send_batch() tells it for many rows at once, a
partition's rows appended in bulk (batch_send.py).  send() and produce()
themselves are ProducerCore's, in C (_accumulator.pyx), so that a record costs
its caller one Python call; they come back here only for serializers and, in a
forked child, for the child's own stack.

Everything after that happens elsewhere: a full or lingered batch is sealed and
handed to the sender, the I/O threads write it and read the answer, and the
batch's result resolves the futures of all its records.

A producer with a transactional_id takes records only inside a transaction
(init_transactions() once, then begin_transaction() ... commit_transaction() or
abort_transaction()); the transactional calls are transaction_manager.py's story.

Threads: send(), flush(), close() and the rest may be called from any number of
threads; the accumulator and the partitioner have their own locks, and the
producer's own state (_closer, whether close() has begun, and whether a forked child
has started) is guarded by _close_lock.
"""
import atexit
import functools
import inspect
import logging
import math
import numbers
import os
import threading
import time
import weakref

from netkafka import errors
from netkafka.errors import (KafkaConfigurationError, KafkaTimeoutError, ProducerClosedError,
                             SentBeforeForkError, SerializationError, TransactionStateError,
                             UndeliveredRecordsError)
from netkafka.producer._accumulator import ProducerCore
from netkafka.producer.accumulator import RecordAccumulator
from netkafka.producer.backoff import NoWaitOnIOThreads, backoff_strategy
from netkafka.producer.batch_send import send_batch
from netkafka.config import ProducerConfig
from netkafka.producer.idempotence import ProducerIdManager, TransactionalProducerIds
from netkafka.producer.interceptors import InterceptorChain, ProducerRecord, failed_metadata
from netkafka.client.coordinator import Coordinators
from netkafka.client.group_offsets import fetch_committed_offsets
from netkafka.client.io_pool import IOPool
from netkafka.client.metadata import Metadata, check_topic_name
from netkafka.producer.metrics import ProducerMetrics
from netkafka.producer.partitioner import make_partitioner
from netkafka.producer.sender import Sender
from netkafka.producer.replay import Replay, ReplayReport
from netkafka.producer.wal import WriteAheadLog
from netkafka.producer.transaction_manager import TransactionManager
from netkafka.record._columns import Rows, binary_source
from netkafka.record._compression import Compressor

_log = logging.getLogger("netkafka.producer.producer")
_BYTES_TYPES = (bytes, bytearray, memoryview)
# close() at interpreter exit waits this long for records still on their way
# (kafka-python's choice); what is left then fails, and is logged.
_EXIT_CLOSE_TIMEOUT_S = 1.0


class Producer(ProducerCore):
    """A Kafka producer, drop-in for kafka-python's KafkaProducer.

    Keyword arguments are kafka-python's (see netkafka.config.ProducerConfig for
    every name, its default and its checks) plus netkafka's own: io_threads (I/O
    threads, each owning a share of the broker connections; default 1),
    high_watermark_bytes / low_watermark_bytes (per-connection bounds on bytes
    queued for a broker; default 8 MiB / 4 MiB) and backoff ('block', 'park',
    'drop' or a strategy object: what send() does when memory or a connection is
    full; default 'block', waiting up to max_block_ms), interceptors (Java's
    ProducerInterceptor: netkafka/producer/interceptors.py) and compression_level
    (KIP-390).  ProducerConfig's docstring tables the kafka-python 3 settings that
    are accepted but not honoured.

    Defaults that matter: acks='all' with enable_idempotence=True, as the Java
    client and kafka-python 3 (acks 0 or 1, retries=0 or more than 5 requests in
    flight turn idempotence off unless it is asked for, which is then an error);
    linger_ms=0; batch_size=16384; buffer_memory=32 MiB; compression_type=None.
    Without idempotence a resent batch can land behind a later one of its
    partition unless max_in_flight_requests_per_connection=1, as with the Java
    client; with it, retries neither duplicate nor reorder.  Throughput grows with
    batch_size and linger_ms (1 MiB and 5 ms, librdkafka's defaults, are several
    times faster than these).

    Transactions: transactional_id (default None) makes a transactional producer,
    whose records are sent in transactions (init_transactions(), then
    begin_transaction() / commit_transaction() or abort_transaction(), see
    below), committed or aborted as a whole for read_committed consumers;
    transaction_timeout_ms (default 60000) is how long its coordinator lets a
    transaction stay open before aborting it; transaction_version (netkafka's,
    default None) None uses Transactions V2 (KIP-890) where the cluster has it,
    1 keeps to V1.

    With wal_dir (a directory, one producer at a time), every record is logged in a
    write-ahead log before send(), produce() or send_batch() returns
    (producer/wal.py): wal_fsync 'never' (written to its files every
    wal_fsync_interval_ms, default 10, never synced), 'interval' (a sync every
    wal_fsync_interval_ms) or 'always' (the call returns once it is on disk);
    wal_max_bytes (default 1 GiB) bounds the directory, the backoff strategy applying
    when it is full.  A producer opened on the directory of one that died replays
    what it left before it returns (producer/replay.py): what was sealed is sent again
    byte-identical under its old producer id, epoch and sequences, so the broker drops
    what it has; on_replay(context, metadata_or_error) hears of each of those records,
    and replay() reports the whole.  A replayed record whose delivery times out with
    on_delivery_timeout='spool' is spooled as a sent one is: on_replay gets the
    RecordSpooledError (kept, sent again), and its final fate is reported by the
    producer that delivers it (on_replay again: this one's spool, or the next
    producer's replay).

    Raises:
        TypeError: an unknown keyword argument (named).
        ValueError: a bad value (the key and what it allows are named); a bad
            security setting is an SslConfigError or SaslConfigError naming it.
        WalError: the write-ahead log cannot be opened (in use, another format
            version, the directory not writable).
        KafkaError: the replay of a WAL could not hand its batches over (the WAL keeps
            them for the next try); not for a partition the topic no longer has, whose
            batches fail (on_replay hears NoSuchPartitionError).
    """

    def __init__(self, **configs):
        config = ProducerConfig.from_kwargs(configs)
        self.config = config  # immutable
        # Immutable: (topic, headers, data) -> bytes, for a Serializer or a callable.
        self._key_serializer = _serializer_function(config.key_serializer)
        self._value_serializer = _serializer_function(config.value_serializer)
        self._interceptors = (InterceptorChain(config.interceptors) if config.interceptors
                              else None)  # immutable; None keeps send() off its path
        self._max_block_s = config.max_block_ms / 1000  # immutable
        self._idle_ns = config.metadata_max_idle_ms * 1_000_000  # immutable
        self._close_lock = threading.Lock()
        # Guarded by _close_lock: the thread running close(), whose own callbacks and
        # hooks may call close() again (they return at once); not None: the producer is
        # closed (the accumulator refuses records itself).
        self._closer = None
        # Set when close() has finished: a close() from another thread waits for it.
        self._close_done = threading.Event()
        # Guarded by _close_lock: a forked child's stack is started on first use.
        self._needs_start = False
        self._abandoned = []  # the parents' stacks, in a forked child (see _after_fork_in_child)
        self._start()
        self._exit_hook = _exit_hook(self)
        atexit.register(self._exit_hook)
        with _live_lock:
            _live_producers.add(self)
        self._replay = None  # immutable once set: the Replay of what the WAL held
        if self._wal is not None and self._wal.recovery().batches:
            try:
                self._replay = self._replay_wal()
            except BaseException:
                self.close(0)
                raise

    def _replay_wal(self):
        """Hands what a dead producer left in the WAL to the sender: before any new
        record, so that in each partition the new ones follow."""
        config = self.config
        return Replay(self._wal.recovery(), accumulator=self._accumulator,
                      sender=self._sender, idempotence=self._idempotence,
                      metadata=self._metadata, pool=self._pool, wal=self._wal,
                      on_replay=config.on_replay, max_block_ms=config.max_block_ms,
                      retry_backoff=config.retry_backoff(),
                      max_request_size=config.max_request_size).start()

    def replay(self, timeout=None):
        """What replaying the WAL came to: a ReplayReport (records, deduplicated,
        resent, reencoded, possibly_duplicated, failed, pending,
        batches_not_byte_identical, spooled), once every replayed record is done or
        timeout seconds have passed (then pending says how many are not).  All zeros
        when the WAL held nothing to replay.

        Raises:
            KafkaError: the producer has no write-ahead log (wal_dir).
        """
        if self._wal is None:
            raise errors.KafkaError("replay() needs a write-ahead log: set wal_dir")
        if self._replay is None:
            return ReplayReport(*(0 for _ in ReplayReport._fields))
        return self._replay.report(timeout)

    def _start(self):
        """Builds the I/O threads, metadata, sender and accumulator: in __init__,
        and in a forked child on first use."""
        config = self.config
        backoff = backoff_strategy(config.backoff)
        # First: a WAL that cannot be opened (another producer has it, a bad directory)
        # fails the producer before any thread starts.
        wal = None if config.wal_dir is None else WriteAheadLog(
            config.wal_dir, fsync=config.wal_fsync,
            fsync_interval_ms=config.wal_fsync_interval_ms, max_bytes=config.wal_max_bytes,
            max_record_bytes=config.max_request_size)
        try:
            pool = IOPool(config.connection_config(), io_threads=config.io_threads)
        except BaseException:
            if wal is not None:
                wal.close()
            raise
        stats = ProducerMetrics()
        try:
            metadata = Metadata(pool, config.bootstrap_servers,
                                metadata_max_age_ms=config.metadata_max_age_ms,
                                retry_backoff_ms=config.retry_backoff_ms,
                                retry_backoff_max_ms=config.retry_backoff_max_ms,
                                allow_auto_topic_creation=config.allow_auto_create_topics,
                                metadata_recovery_strategy=config.metadata_recovery_strategy,
                                metadata_recovery_rebootstrap_trigger_ms=(
                                    config.metadata_recovery_rebootstrap_trigger_ms))
            transaction = None
            if config.transactional_id is not None:
                idempotence = TransactionalProducerIds(
                    pool, metadata, retry_backoff=config.retry_backoff(),
                    max_block_ms=config.max_block_ms)
                transaction = TransactionManager(
                    config.transactional_id, config.transaction_timeout_ms,
                    config.transaction_version, pool, metadata, idempotence,
                    retry_backoff=config.retry_backoff(), max_block_ms=config.max_block_ms,
                    delivery_timeout_ms=config.delivery_timeout_ms)
            elif config.enable_idempotence:
                idempotence = ProducerIdManager(pool, metadata,
                                                retry_backoff=config.retry_backoff(),
                                                max_block_ms=config.max_block_ms, wal=wal)
            else:
                idempotence = None
            # One for every batch, and the parts of a batch split as too large.
            compressor = (None if config.compression_type in (None, "none")
                          else Compressor(config.compression_type,
                                          config.effective_compression_level))
            sender = Sender(pool, metadata, acks=config.acks,
                            max_block_ms=config.max_block_ms, backoff=backoff,
                            retries=config.retries, retry_backoff_ms=config.retry_backoff_ms,
                            retry_backoff_max_ms=config.retry_backoff_max_ms,
                            delivery_timeout_ms=config.delivery_timeout_ms,
                            max_request_size=config.max_request_size,
                            idempotence=idempotence, stats=stats, transaction=transaction,
                            compressor=compressor, guarantee_order=(
                                config.max_in_flight_requests_per_connection == 1))
            partitioner = make_partitioner(config.partitioner,
                                           leaders_for=functools.partial(_leaders_for, metadata))
            back = _WeakProducer(self)
            accumulator = RecordAccumulator(
                partitioner, sender, back.wait_for_partition,
                batch_size=config.batch_size_bytes, max_request_size=config.max_request_size,
                compressor=compressor,
                buffer_memory=config.buffer_memory, linger_ms=config.linger_ms,
                max_block_ms=config.max_block_ms,
                delivery_timeout_ms=config.delivery_timeout_ms,
                backoff=NoWaitOnIOThreads(backoff, pool.on_io_thread),
                idempotence=idempotence, stats=stats, legacy_magic=config.legacy_magic,
                transaction=transaction, wal=wal,
                spool=config.on_delivery_timeout == "spool",
                retry_backoff_ms=config.retry_backoff_ms)
            if transaction is not None:
                transaction.start(sender, accumulator)
        except BaseException:
            pool.close()
            if wal is not None:
                wal.close()
            raise
        self._wal = wal
        self._pool, self._metadata, self._sender = pool, metadata, sender
        self._idempotence, self._accumulator = idempotence, accumulator
        self._transaction = transaction
        self._stats = stats
        self._records = accumulator  # send() and produce() go there (ProducerCore)
        metadata.add_listener(back)

    # ------------------------------------------------------------------
    # The story of a record.

    # send() and produce() are ProducerCore's (in C, _accumulator.pyx): steps 1-5
    # above, with these hooks for what is not per-record work.

    def _serialize_record(self, topic, key, value, headers):
        """Step 1 with serializers set: (key, value, headers) serialized, key first.
        A Serializer sees the headers list (kafka-python gives it one even when
        send() got none) and may add to it."""
        if headers is None:
            headers = []
        if self._key_serializer is not None:
            key = self._serialize(self._key_serializer, "key_serializer", topic, headers, key)
        if self._value_serializer is not None:
            value = self._serialize(self._value_serializer, "value_serializer", topic,
                                    headers, value)
        return key, value, headers or None

    def _send_intercepted(self, topic, value, key, headers, partition, timestamp_ms,
                          wants_future, context):
        """send() (wants_future) and produce() with interceptors set: on_send, the
        record as send() takes it, on_acknowledgement when it is done.  produce()'s
        failures are counted for flush() as without interceptors.  context: the WAL's,
        as given (interceptors do not see it)."""
        chain = self._interceptors
        record = chain.on_send(ProducerRecord(topic, value, key, headers, partition,
                                              timestamp_ms))
        try:
            if wants_future and record.key is None and record.value is None:
                self._refuse_empty_record()
            future = self._send_record(*record, context=context)
        except Exception as exc:
            chain.on_acknowledgement(failed_metadata(record.topic, record.partition), exc)
            if wants_future or not self._counts_as_undelivered(exc):
                raise
            self._accumulator.count_untracked_failure(exc)
            return None
        chain.acknowledge_future(future)
        if not wants_future:
            future.add_errback(self._accumulator.count_untracked_delivery_failure)
        if self._accumulator.wal_always:
            try:
                self._wal.appender.sync_appended_entries()
            except errors.WalStorageError:
                # The record is in its batch, which the failed log refuses to seal: that
                # failure reaches the future, on_acknowledgement and produce()'s count.
                if wants_future:
                    raise
        return future if wants_future else None

    def _restarted(self):
        """The accumulator of a forked child's own stack, started on first use."""
        self._start_if_forked()
        records = self._records
        if records is None:  # closed in the child before it was used
            raise ProducerClosedError("the producer is closed: it takes no more records")
        return records

    def _counts_as_undelivered(self, error):
        """produce()'s rule: a refusal of the record by the running producer (no
        metadata or memory in time, a partition the topic does not have, the WAL) is
        counted (flush() raises it later); what can never be written is raised, as
        send() raises it, and leaves an open transaction as it was -- a bad argument
        (its type, a negative partition or timestamp, a context too long), a
        serializer's failure, a topic name Kafka refuses, a record larger than any
        request or buffer_memory may hold (confluent-kafka's produce() raises
        MSG_SIZE_TOO_LARGE at once too) -- and so is a refusal of every record (a
        closed producer, a transactional one between transactions)."""
        if isinstance(error, errors.IllegalArgumentError):
            return isinstance(error, errors.NoSuchPartitionError)
        return (isinstance(error, errors.KafkaError)
                and not isinstance(error, (errors.SerializationError, errors.InvalidTopicError,
                                           errors.RecordTooLargeError))
                and not self._accumulator.refuses_every_record(error))

    def send_batch(self, topic, values, keys=None, headers=None, partitions=None,
                   timestamps_ms=None):
        """Queues many records at once and returns one BatchSendResult for them all:
        no future per record, and no Python object per row in netkafka's code.

        Rows are placed as send() places them: the row's entry of `partitions`, else
        the partitioner's choice -- murmur2 of the key, bit-identical to send(), and
        sticky batches for rows without a key (another partitioner is asked row by
        row).  Each partition's rows are appended in bulk, in row order, whatever
        mix of keyed, unkeyed and explicitly placed rows the call holds.

        Args:
            topic: the topic's name.
            values: per row bytes-like or None (a tombstone): a list or tuple, a
                BinaryColumn, or a pyarrow Binary, String, LargeBinary or
                LargeString Array or ChunkedArray (read in place), or a BinaryView,
                StringView, FixedSizeBinary or dictionary-encoded one (converted).
            keys: None, or per row bytes-like or None, in any form values takes.
            headers: None; or a list or tuple with per row None or a list of
                (str, bytes) pairs; or a dict {name: column}, each row getting
                every name with the column's value at the row (a column in any form
                values takes; null: a null header value).
            partitions: None, an int (every row), or a list or tuple of ints or
                None (the partitioner's choice), an array('i') (-1: None), or a
                pyarrow integer Array or ChunkedArray (null: None).  An integer of
                another type with __index__ (numpy's), alone or in a list, is its
                int; a bool is refused.
            timestamps_ms: None (now), or per row CreateTime in ms: a list or tuple
                of int (or __index__ integers, as partitions) or None (now), a
                buffer of int64, or a pyarrow timestamp
                (any unit, any time zone) or integer (ms) Array or ChunkedArray
                without nulls.

        With key_serializer / value_serializer set, they are applied row by row
        (Python calls, by nature), each seeing the row's headers as a list, and
        values/keys must be lists or tuples.

        Returns:
            A BatchSendResult: get(timeout) / wait(timeout), then errors [(row,
            exception)], failed_count, partitions() and offsets() per row.  A row
            refused by the encoder (an element of the wrong type, larger than
            max_request_size, a bad timestamp) fails alone and the others are sent.
            With wal_dir, rows the log cannot take (its disk full as it rolls over to
            a new segment) fail with WalStorageError and are not sent.

        Raises:
            ProducerClosedError: after close().  A close() (or, transactional, an
                abort) during the call once some rows went does not raise: the rows
                left fail with its error, in the result.
            TypeError, ValueError: an argument of the wrong kind or length (named);
                nothing was sent.
            SerializationError: a serializer failed on a row (named); nothing was sent.
            KafkaTimeoutError: no metadata for the topic within max_block_ms.
            InvalidTopicError: a topic name Kafka's rule or the broker refuses.
            NotImplementedError: api_version below (0, 11): the bulk path writes
                RecordBatch v2 columns only; send() and produce() write legacy sets.
        """
        if self.config.legacy_magic is not None:
            raise NotImplementedError(
                f"send_batch() writes RecordBatch v2 only; with api_version="
                f"{self.config.api_version} (message format v{self.config.legacy_magic}) "
                f"use send() or produce()")
        self._start_if_forked()
        if self._interceptors is not None:
            raise KafkaConfigurationError(
                "send_batch() has no per-record step to call interceptors from; with "
                "interceptors set, use send() or produce()")
        if self._key_serializer is not None or self._value_serializer is not None:
            values, keys, headers = self._serialize_rows(topic, values, keys, headers)
        try:
            result = send_batch(self._accumulator, topic, values, keys, headers, partitions,
                                timestamps_ms)
        except errors.KafkaError as exc:
            # Raised before the rows' appends too (the topic's name, its metadata):
            # told to the transaction as a refused send() is.
            self._accumulator.append_failed(exc)
            raise
        if self._accumulator.wal_always:
            self._wal.appender.sync_appended_entries()  # one sync for the call's rows
        return result

    def _serialize_rows(self, topic, values, keys, headers):
        for name, rows in (("values", values), ("keys", keys)):
            if rows is not None and not isinstance(rows, (list, tuple)):
                raise TypeError(f"with a serializer set, {name} must be a list or tuple, "
                                f"not {type(rows).__name__}")
        for name, rows in (("keys", keys), ("headers", headers)):
            if rows is not None and not isinstance(rows, dict) and len(rows) != len(values):
                raise ValueError(f"{name} has {len(rows)} rows, values {len(values)}")
        if keys is None and self._key_serializer is not None:
            keys = [None] * len(values)  # as send(), the serializer sees a null key
        # Each row's headers as a list the serializers may add to, as send()'s.
        if headers is None:
            row_headers = [[] for _ in values]
        elif isinstance(headers, dict):
            row_headers = _headers_by_row(values, headers)
        else:
            row_headers = [[] if h is None else list(h) for h in headers]
        if self._value_serializer is not None:
            values = self._serialize_each(self._value_serializer, "value_serializer", topic,
                                          values, row_headers)
        if self._key_serializer is not None:
            keys = self._serialize_each(self._key_serializer, "key_serializer", topic, keys,
                                        row_headers)
        if headers is None and not any(row_headers):
            return values, keys, None
        return values, keys, [h or None for h in row_headers]

    def _serialize_each(self, serializer, name, topic, rows, row_headers):
        """rows serialized; a failure names its row (nothing of the call is sent)."""
        serialized = []
        for row, (data, headers) in enumerate(zip(rows, row_headers)):
            try:
                serialized.append(self._serialize(serializer, name, topic, headers, data))
            except SerializationError as exc:
                raise SerializationError(f"send_batch() row {row}: {exc}") from exc.__cause__
        return serialized

    def _serialize(self, serializer, name, topic, headers, data):
        # As kafka-python, the serializer sees None too: it decides what a null
        # key or value becomes.
        try:
            serialized = serializer(topic, headers, data)
        except Exception as exc:
            raise SerializationError(
                f"{name} {_name_of(serializer)} failed on a {type(data).__name__} for "
                f"topic {topic!r}: {exc!r}") from exc
        if serialized is not None and not isinstance(serialized, _BYTES_TYPES):
            raise SerializationError(
                f"{name} {_name_of(serializer)} returned a {type(serialized).__name__} "
                f"for topic {topic!r}: it must return bytes, bytearray, memoryview or None")
        return serialized

    def _wait_for_partition(self, topic, partition):
        """The accumulator's topic_waiter: waits up to max_block_ms until metadata
        knows topic (and partition, if not None) and gives the accumulator the
        topic's partitions.

        Raises:
            KafkaTimeoutError: no metadata in time (names the topic and why).
            ProducerClosedError: close() came first (before or during the wait).
            NoSuchPartitionError: the topic has no such partition.
            KafkaError: called from a callback (an I/O thread), at once.
        """
        if self._pool.on_io_thread():
            # Waiting here would hold up the thread that fetches the metadata and
            # delivers its connections' batches: every record of it stalled for
            # max_block_ms, and then this one failed anyway.
            raise errors.KafkaError(
                f"a record for topic {topic!r} sent from a callback before the topic's "
                f"partitions are known: callbacks run on the I/O thread that would fetch "
                f"them, so it would wait for itself; send the topic a first record (or call "
                f"partitions_for()) from another thread")
        try:
            if partition is None:
                info = self._metadata.wait_for_topic(topic, self._max_block_s)
            else:
                info = self._metadata.wait_for_partition(topic, partition, self._max_block_s)
        except KafkaTimeoutError:
            self._refuse_if_closed_waiting(topic)
            raise
        self._give_partitions(topic, info)

    def _refuse_if_closed_waiting(self, topic):
        """A wait for topic's metadata that ended in KafkaTimeoutError: if close() cut
        it short (closed metadata gives up at once), the error says so rather than
        "after max_block_ms" of a wait that did not happen."""
        with self._close_lock:
            if self._closer is not None:
                raise ProducerClosedError(
                    f"the producer is closed: the partitions of topic {topic!r} are not "
                    f"known") from None

    def _give_partitions(self, topic, info, create=True):
        """Gives the accumulator the topic's partitions as info (a TopicInfo) says, then
        as every newer answer about the topic says, until none is newer.

        A send() thread back from waiting for the topic and the I/O threads' on_metadata
        call this in any order, each with the answer it read; the last to write checks
        last, so the table ends as the newest answer has it.  (It used to keep the
        partitions of whichever wrote last: a send() thread that read the topic before
        partitions were added, and wrote after on_metadata had skipped the topic, not
        known yet, left the new partitions unused, since the answers after it moved
        no leader and on_metadata never looked at the topic again.)  create False: only
        a table the accumulator has is updated (on_metadata: one dropped as idle
        meanwhile stays dropped)."""
        while True:
            if info.error_code == errors.NO_ERROR and info.partitions:
                ids = sorted(info.partitions)
                self._accumulator.set_partitions(
                    topic, ids, [p for p in ids if info.partitions[p].leader >= 0], create)
            # An answer that does not name the topic keeps its TopicInfo object.
            newest = self._metadata.snapshot().topics.get(topic)
            if newest is None or newest is info:
                return
            info = newest

    # ------------------------------------------------------------------
    # Transactions (transactional_id set): kafka-python's calls.

    def init_transactions(self):
        """Gets the producer id and epoch of the transactional id from its transaction
        coordinator -- which first aborts a transaction a previous producer with the
        same id left open, and fences that producer.  Once, before the first
        transaction.

        Raises:
            TransactionStateError: not a transactional producer, or called twice.
            KafkaTimeoutError: not done within max_block_ms (call it again).
            ProducerFencedError, TransactionalIdAuthorizationFailedError,
                InvalidTransactionTimeoutError, ...: the producer cannot go on.
        """
        self._transactions("init_transactions()").init_transactions()

    def begin_transaction(self):
        """Opens a transaction: send(), produce() and send_batch() take records
        until commit_transaction() or abort_transaction().

        Raises:
            TransactionStateError: not a transactional producer, before
                init_transactions(), or with a transaction open.
            TransactionAbortRequiredError: the last transaction failed and was not
                aborted.
        """
        self._transactions("begin_transaction()").begin_transaction()

    def send_offsets_to_transaction(self, offsets, consumer_group_id=None, *,
                                    group_metadata=None):
        """Commits a consumer group's offsets as part of the open transaction: they
        count only if it commits (consume-transform-produce).

        Args:
            offsets: {TopicPartition: OffsetAndMetadata} (netkafka's or kafka-python's
                names, or (topic, partition) -> an int), or confluent-kafka's list of
                TopicPartition with offsets (Consumer.position()).  Each offset is the
                next one to read: the last processed record's offset + 1.
            consumer_group_id: the group id (kafka-python 2's argument), or the
                group's metadata -- kafka-python's KafkaConsumer.group_metadata() or
                confluent-kafka's Consumer.consumer_group_metadata() -- which lets the
                broker refuse offsets of a consumer that left the group.
            group_metadata: the same, as kafka-python 3 names it.

        Raises:
            TypeError, ValueError: offsets or the group are not what they should be.
            TransactionStateError: not a transactional producer, or no transaction
                open.
            TransactionAbortRequiredError: the transaction failed earlier.
            KafkaTimeoutError: not done within max_block_ms (call it again, or abort).
            BrokerError: refused by a coordinator (IllegalGenerationError,
                UnknownMemberIdError, GroupAuthorizationFailedError, ...: the
                transaction must be aborted; ProducerFencedError: the producer cannot
                go on).
        """
        if (consumer_group_id is None) == (group_metadata is None):
            raise TypeError("send_offsets_to_transaction() takes the consumer group once: "
                            "as consumer_group_id or as group_metadata")
        group = consumer_group_id if group_metadata is None else group_metadata
        self._transactions("send_offsets_to_transaction()").send_offsets_to_transaction(
            offsets, group)

    def commit_transaction(self):
        """Sends every record of the transaction (a flush), then commits it: its
        records and offsets become visible to read_committed consumers at once.

        Raises:
            TransactionStateError: not a transactional producer, or no transaction
                open.
            TransactionAbortRequiredError: a record or a request of the transaction
                failed (the first failure is its cause): call abort_transaction().
            KafkaTimeoutError: not done within max_block_ms (call it again: the
                commit goes on where it stopped).
            ProducerFencedError, ...: the producer cannot go on.
        """
        self._transactions("commit_transaction()").commit_transaction()

    def abort_transaction(self):
        """Aborts the open transaction (or one that failed): read_committed consumers
        never see its records or offsets.  Records not sent yet fail with
        TransactionAbortedError.

        Raises:
            TransactionStateError: not a transactional producer, or no transaction
                open.
            KafkaTimeoutError: not done within max_block_ms (call it again).
            ProducerFencedError, ...: the producer cannot go on.
        """
        self._transactions("abort_transaction()").abort_transaction()

    def committed_offsets(self, group_id, partitions, timeout=None):
        """The offsets group_id has committed for partitions, stable ones: an open
        transaction's offsets (send_offsets_to_transaction) are waited out, so a
        caller sees them once it commits, or never (it aborts).

        Args:
            group_id: the consumer group.
            partitions: iterable of (topic, partition).
            timeout: seconds (default max_block_ms).

        Returns:
            {(topic, partition): the next offset to read, or None if none committed}.

        Raises:
            KafkaTimeoutError: not answered in time; BrokerError: refused (named).
            ProducerClosedError: after close().
        """
        self._start_if_forked()
        # Its connections are gone: asked anyway, it waited the whole timeout and
        # then named a coordinator not found.
        self._refuse_if_closed("committed_offsets()")
        config = self.config
        timeout_s = config.max_block_ms / 1000 if timeout is None else timeout
        return fetch_committed_offsets(
            Coordinators(self._pool, self._metadata, config.retry_backoff()), group_id,
            partitions, time.monotonic() + timeout_s, config.retry_backoff())

    def _transactions(self, what):
        """The TransactionManager a transactional call goes to."""
        self._start_if_forked()
        if self.config.transactional_id is None:
            raise TransactionStateError(
                f"{what} needs a transactional producer: create it with transactional_id")
        self._refuse_if_closed(what)
        self._refuse_on_io_thread(what)
        return self._transaction

    def _refuse_if_closed(self, what):
        with self._close_lock:
            if self._closer is not None:
                raise ProducerClosedError(f"{what} after close(): the producer is closed")

    # ------------------------------------------------------------------
    # Flush, close, and the rest of kafka-python's interface.

    def flush(self, timeout=None):
        """Sends every buffered record now (whatever linger_ms says) and waits until
        each record sent before this call is acknowledged or failed.

        Raises:
            KafkaTimeoutError: not all done within timeout seconds.
            UndeliveredRecordsError: records sent with produce() failed since the
                previous flush() (their count and first errors; the count restarts).
            KafkaError: called from a callback, on the I/O thread that would have to
                deliver what it waits for.
        """
        timeout = _timeout_s("flush()", timeout)
        self._start_if_forked()
        self._refuse_on_io_thread("flush()")
        self._accumulator.flush(timeout)

    def close(self, timeout=None):
        """Flushes for up to timeout seconds (None: until every record is done),
        then fails whatever is left and stops every thread.  A transaction still
        open is aborted first, a commit that ran out of time finished, a transactional
        call another thread runs waited for (each within max_block_ms and timeout).
        send() raises ProducerClosedError from now on.
        Calling it again does nothing once it has returned; a call racing it from
        another thread waits (up to its own timeout) until the first one is done.

        Raises:
            TypeError, ValueError: timeout is not a number of seconds or None (the
                producer is left open).
            UndeliveredRecordsError: records sent with produce() failed since the
                previous flush(), as flush() raises it when the flush ends within
                timeout; raised once the producer is closed.
        """
        # Checked before the producer counts as closed: a timeout that raised later
        # left it closed to close() but with its threads running and records pending.
        timeout = _timeout_s("close()", timeout)
        if not self._needs_start:
            self._refuse_on_io_thread("close()")
        with self._close_lock:
            closer = self._closer
            if closer is None:
                self._closer = threading.get_ident()
            never_started = self._needs_start
        if closer is None:
            try:
                self._close_once(timeout, never_started)
            finally:
                self._close_done.set()
        elif closer != threading.get_ident():
            self._close_done.wait(timeout)

    def _close_once(self, timeout, never_started):
        atexit.unregister(self._exit_hook)
        with _live_lock:
            _live_producers.discard(self)
        if never_started:
            return  # a forked child that did not use the producer: nothing of its own
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._transaction is not None:
            # Before the flush: what an aborted transaction has not sent fails
            # instead of going out into it for nothing.
            self._transaction.end_for_close(_remaining_s(deadline))
        undelivered = None
        try:
            self._accumulator.close(_remaining_s(deadline))
        except KafkaTimeoutError:
            pass  # what is left fails below
        except UndeliveredRecordsError as error:
            # produce()'s failures, which the flush reports: raised once the producer
            # is closed, not in place of closing it (its threads would run on, and a
            # second close() would do nothing).
            undelivered = error
        if self._wal is not None:
            # What fails from here on stays in the WAL, the next producer replays it:
            # its records are told so (RecordKeptError).
            self._accumulator.keep_failures_in_wal()
        self._sender.close(_remaining_s(deadline))
        if self._transaction is not None:
            # Within close()'s time left: it waited 5 s for a thread stuck in a
            # coordinator request whatever the timeout (close(4) took 9 s).
            self._transaction.close(_remaining_s(deadline))
        self._metadata.close()
        self._accumulator.fail_incomplete(ProducerClosedError(
            "the producer was closed before the record was delivered"))
        self._pool.close()
        if self._wal is not None:
            self._wal.close()
        self._close_hooks()
        if undelivered is not None:
            raise undelivered

    def _close_hooks(self):
        """close() of the Serializer objects and interceptors given, once."""
        for serializer in (self.config.key_serializer, self.config.value_serializer):
            close = getattr(serializer, "close", None)
            if callable(getattr(serializer, "serialize", None)) and callable(close):
                close()
        if self._interceptors is not None:
            self._interceptors.close()

    def _refuse_on_io_thread(self, what):
        if self._pool.on_io_thread():
            raise errors.KafkaError(
                f"{what} called from a callback: callbacks run on the I/O thread that "
                f"delivers the records, so it would wait for itself forever")

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __del__(self):
        # Dropped without close(), as kafka-python closes it: its stack refers back to
        # it only weakly (_WeakProducer), so this runs, and its threads and sockets
        # would be left running otherwise.  On a thread of its own: the last reference
        # may go on an I/O thread (a callback), or while the collector runs in a
        # thread holding one of the stack's locks.  Not a daemon: an interpreter
        # exiting waits for the flush, as the exit hook would have.
        # _closer unlocked: no other thread refers to the producer any more.
        if getattr(self, "_exit_hook", None) is None or self._closer is not None:
            return  # __init__ failed before the stack started, or closed already
        threading.Thread(target=_close_forgotten, args=(self, "once dropped without close()"),
                         name="netkafka-close").start()

    def sync_wal(self):
        """Returns once every record logged so far is on disk (whatever wal_fsync says).

        Raises:
            KafkaError: the producer has no write-ahead log (wal_dir).
            WalStorageError: the sync failed.
            WalError: the producer is closed, and with wal_fsync 'never' its last
                records were not synced.
        """
        self._start_if_forked()
        if self._wal is None:
            raise errors.KafkaError("sync_wal() needs a write-ahead log: set wal_dir")
        self._wal.sync()

    def partitions_for(self, topic):
        """The set of the topic's partition ids (waits up to max_block_ms for them).

        Raises:
            KafkaTimeoutError: the topic is not known within max_block_ms.
            KafkaError: called from a callback (an I/O thread) before the topic's
                partitions are known, at once.
            ProducerClosedError: after close(), for a topic whose partitions were not
                known by then (a known one's are still given, as kafka-python does).
            InvalidTopicError, TopicAuthorizationFailedError: the topic is refused.
        """
        self._start_if_forked()
        check_topic_name(topic)  # before the accumulator keeps the name
        self._accumulator.note_asked(topic)
        on_io_thread = self._pool.on_io_thread()
        try:
            # From a callback, only what the cache knows: waiting held up the thread
            # that would fetch it, every record of it stalled for max_block_ms.
            info = self._metadata.wait_for_topic(topic, 0 if on_io_thread else self._max_block_s)
        except KafkaTimeoutError:
            self._refuse_if_closed_waiting(topic)
            if on_io_thread:
                raise errors.KafkaError(
                    f"partitions_for({topic!r}) called from a callback before the topic's "
                    f"partitions are known: callbacks run on the I/O thread that would fetch "
                    f"them, so it would wait for itself; ask from another thread first") from None
            raise
        return set(info.partitions)

    def bootstrap_connected(self):
        """True once a broker has answered (kafka-python's: the bootstrap is
        connected): netkafka has cluster metadata."""
        self._start_if_forked()
        return self._metadata.snapshot() is not None

    def metrics(self, raw=False):
        """kafka-python's KafkaProducer.metrics(): {group: {name: value}}; None
        with metrics_enabled=False, as kafka-python.

        raw=True gives the same values keyed by (group, name) pairs, flat:
        kafka-python's raw form is its own KafkaMetric objects, which netkafka
        does not have.

        Groups: "producer-metrics" (record-send-rate / -total, record-error-rate /
        -total, record-retry-rate / -total, byte-rate, batch-size-avg / -max,
        compression-rate-avg, record-queue-time-avg / -max, records-per-request-avg,
        request-rate, request-latency-avg / -max, throttle-time-avg / -max,
        buffer-total-bytes, buffer-available-bytes, batch-split-total: batches refused
        as too large and split), "producer-topic-metrics.<topic>"
        and "producer-node-metrics.node-<id>" (see netkafka/producer/metrics.py for each
        name's window and what it counts), and "netkafka": netkafka's own counters
        -- the accumulator's (batches_created, records_sent, records_acknowledged,
        records_failed, records_dropped, records_untracked_failed -- those of
        produce() --, buffer_*, and with the spool records_spooled,
        records_spool_sent -- each resend of a spooled batch --,
        records_spool_delivered, records_spool_failed, spool_batches), the
        sender's prefixed "sender_" (batches acknowledged, failed, retried -- every
        resend, after an error code or a request left unanswered --, dropped at a
        full connection, split, errors per broker error code), and with idempotence
        producer_id, producer_epoch,
        producer_ids_fetched, producer_epoch_bumps,
        partitions_restarted; a transactional producer's transactions_committed,
        transactions_aborted, transaction_partitions_added and
        transaction_add_partitions_requests (AddPartitionsToTxn, Transactions V1).
        """
        self._start_if_forked()
        if not self.config.metrics_enabled:
            return None
        own = self._accumulator.metrics()
        for name, value in self._sender.metrics().items():
            own["sender_" + name] = value
        if self._idempotence is not None:
            own.update(self._idempotence.metrics())
        if self._transaction is not None:
            own.update(self._transaction.metrics())
        groups = self._stats.groups()
        groups["producer-metrics"]["buffer-total-bytes"] = own["buffer_total_bytes"]
        groups["producer-metrics"]["buffer-available-bytes"] = own["buffer_available_bytes"]
        # The Java client's count of batches split after MESSAGE_TOO_LARGE (sender.py).
        groups["producer-metrics"]["batch-split-total"] = own["sender_batches_split"]
        groups["netkafka"] = own
        if self._wal is not None:
            groups["netkafka-wal"] = self._wal.metrics()
            if self._replay is not None:
                groups["netkafka-wal"].update(self._replay.metrics())
        if raw:
            return {(group, name): value for group, values in groups.items()
                    for name, value in values.items()}
        return groups

    # ------------------------------------------------------------------
    # os.fork(): a child has no I/O threads, and the parent's sockets and batches.

    def _after_fork_in_child(self):
        """Runs in the child right after os.fork(), on its only thread.

        The parent's threads did not come along, and every lock one of them held at
        the fork stays held here.  So nothing of the parent's stack is used again:
        its batches fail in the child's copies of their futures (the parent
        delivers them), its sockets and its hold on the WAL directory's lock file
        are closed in this process only, and the stack is kept referenced --
        freeing it could take such a lock.  The producer
        starts a stack of its own (threads, connections, producer id, partitioner)
        when the child first uses it."""
        self._close_lock = threading.Lock()
        self._close_done = threading.Event()  # the parent's may be held by a thread left behind
        if self._closer is not None:
            # A close() the parent had begun never finishes here: nothing left to wait for.
            self._close_done.set()
            return
        self._abandoned.append((self._pool, self._metadata, self._sender,
                                self._idempotence, self._accumulator, self._transaction))
        if self._wal is not None:
            self._wal.release_lock_after_fork()
        self._accumulator.fail_after_fork(SentBeforeForkError(
            "the record was sent in the parent process before os.fork(); the parent "
            "delivers it, this process's copy of its future cannot know the outcome"))
        self._pool.abandon_after_fork()
        self._needs_start = True
        self._records = None  # send() and produce() come to _restarted()

    def _start_if_forked(self):
        with self._close_lock:
            if self._needs_start and self._closer is None:
                if self.config.transactional_id is not None:
                    # Its own stack would init_transactions() with the parent's id,
                    # fencing the parent: a child makes a producer of its own.
                    raise TransactionStateError(
                        f"a transactional producer cannot be used in a forked child: its "
                        f"transactional id {self.config.transactional_id!r} is the "
                        f"parent's; create a producer in the child, with an id of its own")
                self._start()
                self._needs_start = False

    # ------------------------------------------------------------------
    # Metadata listener (I/O thread).

    def on_metadata(self, snapshot, moved):
        """Gives the accumulator fresh partitions of the topics send() has met whose
        partitions or leaders changed (only those: with many topics, an answer about
        one new topic must not cost a pass over all), and drops the topics idle for
        metadata_max_idle_ms (RecordAccumulator.remove_idle_tables): their refreshes
        stop asking for them, as the Java producer's do."""
        accumulator = self._accumulator
        accumulator.remove_idle_tables(self._idle_ns, self._metadata.forget_topics)
        for topic in {topic for topic, _ in moved}:
            with accumulator.lock:
                known = accumulator.table_locked(topic) is not None
            if known:  # else send() gives it when it first meets the topic
                self._give_partitions(topic, snapshot.topics[topic], create=False)


KafkaProducer = Producer


# Every producer not closed yet, for the fork hook.  _live_lock guards it, except in a
# forked child's hook, which runs alone (and must not wait on a lock a parent thread
# may have held at the fork).
_live_lock = threading.Lock()
_live_producers = weakref.WeakSet()


def _after_fork_in_child():
    global _live_lock
    _live_lock = threading.Lock()
    for producer in list(_live_producers):
        producer._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _serializer_function(serializer):
    """(topic, headers, data) -> bytes for a key_serializer / value_serializer: a
    Serializer's serialize, kafka-python 2's serialize(topic, data), or a plain
    callable's (data) -> bytes; None for none."""
    if serializer is None:
        return None
    serialize = getattr(serializer, "serialize", None)
    if callable(serialize):
        if not _takes_two_arguments(serialize):
            return serialize

        def serialize_topic_data(topic, headers, data):
            return serialize(topic, data)

        serialize_topic_data.__qualname__ = _name_of(serialize)
        return serialize_topic_data

    def serialize_data(topic, headers, data):
        return serializer(data)

    serialize_data.__qualname__ = _name_of(serializer)  # errors name the user's function
    return serialize_data


def _takes_two_arguments(function):
    """Whether function is called (topic, data) and not (topic, headers, data):
    kafka-python 3 still calls a kafka-python 2 Serializer that way.  Asked once, of
    the signature, rather than retrying a call that raised TypeError as kafka-python
    does (a TypeError from inside a serializer would run it twice)."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # no signature to read (some builtins): as given
        return False
    try:
        signature.bind(None, None, None)
        return False
    except TypeError:
        pass
    try:
        signature.bind(None, None)
        return True
    except TypeError:
        return False


def _headers_by_row(values, columns):
    """send_batch()'s headers={name: column} as each row's list of (name, value)
    pairs, for the serializers to see and add to as send()'s: the columns checked
    as send_batch() checks them (Rows), then read row by row."""
    Rows([None] * len(values), headers=columns)
    readers = [(name, binary_source(column, "headers")) for name, column in columns.items()]
    return [[(name, column.item(row)) for name, column in readers]
            for row in range(len(values))]


def _name_of(fn):
    return getattr(fn, "__qualname__", None) or repr(fn)


def _timeout_s(what, timeout):
    """flush()'s or close()'s timeout as the waits take it: None for no bound --
    None, or one longer than threading can wait (math.inf: "until done") --, else
    the number of seconds.

    Raises:
        TypeError: timeout is not a real number or None.
        ValueError: timeout is NaN or negative (kafka-python's close() refuses a
            negative one too; it closed at once, as close(0)).
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"{what} timeout must be a number of seconds or None, not "
                        f"{type(timeout).__name__}")
    if math.isnan(timeout) or timeout < 0:
        raise ValueError(f"{what} timeout must be a number of seconds >= 0 or None, "
                         f"got {timeout!r}")
    return None if timeout >= threading.TIMEOUT_MAX else timeout


def _remaining_s(deadline):
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _exit_hook(producer):
    # A weak reference: the hook must not keep a forgotten producer alive.
    ref = weakref.ref(producer)

    def close_at_exit():
        producer = ref()
        if producer is not None:
            _close_forgotten(producer, "at interpreter exit without flush()")

    return close_at_exit


def _close_forgotten(producer, how):
    """close() of a producer its user did not close: a short flush, and a warning
    naming how many records failed undelivered."""
    before = producer._accumulator.metrics()["records_failed"]
    try:
        producer.close(_EXIT_CLOSE_TIMEOUT_S)
    except UndeliveredRecordsError:
        pass  # produce()'s failures: counted below, and nobody is left to catch it
    lost = producer._accumulator.metrics()["records_failed"] - before
    if lost:
        _log.warning("netkafka producer %s closed %s: %d records failed undelivered",
                     producer.config.client_id, how, lost)


class _WeakProducer:
    """The producer as its own stack calls back into it (the metadata listener, the
    accumulator's topic_waiter), without keeping it alive: a producer dropped without
    close() is then freed, and its __del__ closes the stack."""

    __slots__ = ("_ref",)

    def __init__(self, producer):
        self._ref = weakref.ref(producer)

    def on_metadata(self, snapshot, moved):
        producer = self._ref()
        if producer is not None:  # else its __del__ is closing the stack
            producer.on_metadata(snapshot, moved)

    def wait_for_partition(self, topic, partition):
        # Only the producer's own calls (send(), send_batch(), ...) append records:
        # it is alive while they run.
        self._ref()._wait_for_partition(topic, partition)


def _leaders_for(metadata, topic):
    """The broker-aware partitioner's view: {partition: leader id} of topic."""
    snapshot = metadata.snapshot()
    info = None if snapshot is None else snapshot.topics.get(topic)
    if info is None:
        return {}
    return {p: part.leader for p, part in info.partitions.items()}
