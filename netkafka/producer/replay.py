"""Replay: what a dead producer left in the write-ahead log, sent before anything new.

A Producer opened on a WAL directory with live batches in it replays them in its
constructor, partition by partition:

  1. The partition's sealed batches (perhaps sent, perhaps in the topic already), in
     the order they were sealed.  The partition's leader is asked what it has of
     their producer id (DescribeProducers; the answer is taken only from a broker
     that names itself the leader, at one epoch, just before and just after it,
     since a follower answers too, from a log it may yet cut):
       - it knows the id, at the same epoch: the batches whose sequences it has
         appended are in the topic, and those before the last five of them are
         deduplicated (nothing is sent, their offsets are unknown); the others are
         rebuilt from their records -- byte-identical, checked against the CRC32C
         their SEAL entry kept -- and sent under their old producer id, epoch and
         sequences, which the partition adopts (ProducerIdManager.adopt) so that its
         next batches follow them.  The broker drops those of its last five batches
         it has, answering with their offsets once they are committed: its
         DescribeProducers answer counts batches no follower has fetched yet, and a
         leader cut off from the controllers answers for a log its successor may
         lack; resent, they are acknowledged only once they are safe;
       - it does not know the id (expired) or the batches carry none (idempotence was
         off, or a part of a split batch was re-stamped: idempotence.py's
         _log_restamp_locked): the old stamp cannot keep them from being written
         twice, so they are re-encoded under this producer's own and their records
         counted as possibly duplicated (at-least-once, reported, never silent);
       - it does not answer the question (the API is not offered, or not allowed: it
         needs READ on the topic; or, for max_block_ms shared by every partition, no
         leader took it: while a broker restarts, the leader the metadata names is
         down, or says it is not the leader any more, and the question is asked
         again of the next): the batches are sent under their old stamp and the
         broker's idempotence drops what it has among its last five batches -- if it
         still knows the id: one that expired it appends any sequence, so their
         records count as possibly duplicated.  A batch it refuses as out of
         sequence makes the sender start the partition over under a new stamp.
  2. The partition's batches never sealed: their records (kept as they were
     encoded) are re-encoded into batches numbered after those, logged with a SEAL
     entry under their old ids (a crash now replays them byte-identical), and sent.

A partition the topic no longer has (made again with fewer) fails its batches once a
second metadata answer says so too: on_replay gets NoSuchPartitionError, and their DONE
entries take them out of the log.
So do a topic's batches when the metadata answers say it does not exist (deleted,
and the cluster creates none on demand): UnknownTopicOrPartitionError, once a second
answer, asked for retry_backoff_ms after the first, says so too.

Replayed batches take their memory from the producer's buffer pool and are handed to
the sender before the constructor returns, so a partition's new records queue behind
them.  Their outcomes come back on I/O threads: each batch's DONE entry, then
on_replay(context, metadata_or_error) for each of its records, then the report's
counts.  A batch whose delivery times out with on_delivery_timeout='spool' goes to
the spool, as this producer's own batches do: on_replay gets RecordSpooledError
(kept, sent again), and later the outcome of the spool's send; a producer stopped
before that leaves the batch to the next one, whose on_replay reports it.
ReplayReport is what Producer.replay() returns.

Threads: start() runs on the constructor's thread; _on_delivered on I/O threads (and
on the constructor's, for a batch the sender refused), _on_spool_delivered on I/O
threads.  _lock guards the counts and _pending.
"""
import collections
import functools
import logging
import struct
import threading
import time
from typing import NamedTuple

from netkafka import errors
from netkafka.client.metadata import request_metadata
from netkafka.client.own_threads import callback_error_is_contained
from netkafka.producer._futures import RecordMetadata, TopicPartition, part_of
from netkafka.producer.accumulator import release_batch
from netkafka.protocol.describe_producers import (
    API as DESCRIBE_PRODUCERS, decode_describe_producers_response,
    encode_describe_producers_request,
)
from netkafka.record._batch import BATCH_HEADER_BYTES, RecordBatchBuilder
from netkafka.record._compression import CODEC_NAMES, Compressor
from netkafka.record.reader import read_varint

_log = logging.getLogger("netkafka.producer.replay")

_SEQUENCE_LIMIT = 2**31
_CRC = struct.Struct(">I")  # a RecordBatch v2's CRC32C, at offset 17
_CODEC_MASK = 0x07  # the codec's bits of a batch's attributes


class ReplayReport(NamedTuple):
    """What replaying a WAL came to, in records.

    records: live in the WAL when the producer started.
    deduplicated: in the topic already (their batch's sequences appended by the
        broker, before its last five): not written again.
    resent: sealed batches' records sent again under their old stamp, the leader
        having said it knows it, and acknowledged -- exactly once: appended now, or
        dropped by its idempotence, which had them.
    reencoded: never sealed, re-encoded and acknowledged.
    possibly_duplicated: acknowledged under a new stamp after the old one could not
        be used, or under the old one with no word from the broker that it still
        knew it: at-least-once.
    failed: failed for good (on_replay got the error).
    pending: not done yet.
    batches_not_byte_identical: sealed batches whose rebuilt bytes did not match the
        CRC32C logged (a codec library that changed); sent under their stamp all the
        same, which is what the broker's idempotence looks at.
    spooled: delivery timed out with on_delivery_timeout='spool': kept in the WAL
        and sent again by the spool (on_replay got the RecordSpooledError, and hears
        the final outcome from the producer that has it: this one's spool, or the
        next producer's replay).
    """

    records: int
    deduplicated: int
    resent: int
    reencoded: int
    possibly_duplicated: int
    failed: int
    pending: int
    batches_not_byte_identical: int
    spooled: int = 0


# How a batch is replayed, and what its acknowledged records count as.
_RESENT = "resent"
_REENCODED = "reencoded"
_AT_LEAST_ONCE = "possibly_duplicated"
# Sent under its old stamp with no word from the leader that it still knows the id: a
# broker that expired it appends any sequence, so this counts as at-least-once.
_RESENT_UNASKED = "resent unasked"
_UNDER_OLD_STAMP = (_RESENT, _RESENT_UNASKED)
# The broker keeps the offsets of a producer id's last five batches in a partition,
# and answers a resend of one of them with those (Kafka's ProducerStateEntry).
_BATCHES_A_BROKER_KEEPS = 5


class Replay:
    """Replays a Recovery through the producer's sender.

    Args:
        recovery: the WriteAheadLog's Recovery.
        accumulator: the RecordAccumulator (its buffer pool, compressor, batch_size,
            and the DONE entries it logs, log_wal_outcome()).
        sender: the Sender.
        idempotence: the ProducerIdManager, or None.
        metadata, pool: the Metadata cache and IOPool (DescribeProducers).
        wal: the WriteAheadLog.
        on_replay: callable(context, metadata_or_error), or None.
        max_block_ms, max_request_size: the producer's.
    """

    def __init__(self, recovery, *, accumulator, sender, idempotence, metadata, pool, wal,
                 on_replay, max_block_ms, retry_backoff, max_request_size):
        self._recovery = recovery  # immutable
        self._accumulator = accumulator  # immutable
        self._sender = sender  # immutable
        self._idempotence = idempotence  # immutable
        self._metadata = metadata  # immutable
        self._pool = pool  # immutable
        self._wal = wal  # immutable
        self._on_replay = on_replay  # immutable
        self._max_block_s = max_block_ms / 1000  # immutable
        self._retry_backoff = retry_backoff  # immutable: a RetryBackoff (client/retry.py)
        self._max_request_size = max_request_size  # immutable
        self._compressors = {}  # the start() thread's: codec id -> Compressor
        # The start() thread's: (topic, partition) -> the node id of the leader whose
        # DescribeProducers answer was taken.
        self._answered_by = {}
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)  # notified as _pending drops
        self._counts = collections.Counter()  # guarded by _lock
        self._pending = recovery.record_count  # guarded by _lock: records not done

    # ------------------------------------------------------------------
    # The constructor's thread.

    def start(self):
        """Hands every recovered batch to the sender, partition by partition.

        Raises:
            KafkaError: a batch could not be handed over (no metadata, no memory
                within max_block_ms, ...): the producer closes and the WAL keeps
                everything not done.
        """
        if self._idempotence is not None:
            # Before any partition adopts an old stamp: one that has to start over
            # takes this producer's id, which must be there to take.
            self._idempotence.fetch_producer_id()
        partitions = collections.OrderedDict()
        for batch in self._recovery.sealed + self._recovery.unsealed:
            partitions.setdefault((batch.topic, batch.partition), []).append(batch)
        for key, batches in list(partitions.items()):
            gone = self._gone(key[0]) or self._missing(*key)
            if gone is not None:
                for batch in batches:
                    self._fail(batch, gone)
                del partitions[key]
        sealed = {key: [b for b in batches if b.seal is not None]
                  for key, batches in partitions.items()}
        stamps = {key: (batches[0].seal.producer_id, batches[0].seal.producer_epoch)
                  for key, batches in sealed.items()
                  if self._idempotence is not None and batches
                  and batches[0].seal.producer_id >= 0 and _consecutive(batches)}
        # One budget for every partition's question to its leader: bounded as any
        # blocking call, not max_block_ms for each partition.
        known = self._last_sequences(stamps, time.monotonic() + self._max_block_s)
        for key, batches in partitions.items():
            deduplicated, kind, held = self._plan(key, sealed[key], stamps.get(key),
                                                  known.get(key, _UNKNOWN_PRODUCER))
            for batch in deduplicated:
                self._deduplicated(batch)
            for i, batch in enumerate(sealed[key][len(deduplicated):]):
                # The leader has the first `held` of them: refused by it for a sequence
                # it keeps no offsets of any more, they are in the log all the same.
                self._hand_over(batch, kind, self._answered_by[key] if i < held else None)
            for batch in batches:
                if batch.seal is None:
                    self._hand_over(batch, _REENCODED)
        return self

    def _hand_over(self, batch, kind, appended_on=None):
        """The batch to the sender (_send); one for a partition its topic no longer has
        (deleted and made again with fewer) fails alone, as a record sent to such a
        partition does: it can never be delivered, and raised it would refuse every
        producer opened on the directory, for good."""
        try:
            self._send(batch, kind, appended_on)
        except errors.NoSuchPartitionError as exc:
            self._fail(batch, exc)

    def _gone(self, topic):
        """The UnknownTopicOrPartitionError the batches of topic fail with when two
        answers of the cluster say it has no such topic (deleted, and not created on
        demand), else None.  Waiting for it to come back held up the constructor for
        max_block_ms and then raised: every producer opened on the directory failed."""
        unknown = errors.UnknownTopicOrPartitionError.code
        info = self._metadata.topic_answer(topic, self._max_block_s)
        if info is not None and info.error_code == unknown:
            # One answer may be a broker's that has not yet heard of a topic created
            # moments before the crash: what fails batches for good is asked again.
            time.sleep(self._retry_backoff.ms(0) / 1000)
            info = self._metadata.fresh_topic_answer(topic, info, self._max_block_s)
        if info is None or info.error_code != unknown:
            return None  # no answer: the sender's own look-up says why
        return errors.UnknownTopicOrPartitionError(
            f"replay: topic {topic!r} does not exist (two metadata answers say "
            f"UNKNOWN_TOPIC_OR_PARTITION): its batches in the WAL cannot be delivered")

    def _missing(self, topic, partition):
        """The NoSuchPartitionError the batches of topic-partition fail with when two
        answers say the topic has no such partition (made again with fewer), else
        None.  One answer may be a broker's not yet told of partitions added moments
        before the crash: taken at its word, their batches failed for good."""
        info = self._metadata.topic_answer(topic, self._max_block_s)
        if info is None or info.error_code or partition in info.partitions:
            return None  # the sender's look-up says what there is to say
        try:
            self._metadata.wait_for_partition(topic, partition, self._max_block_s)
        except errors.NoSuchPartitionError as exc:
            return exc
        except errors.KafkaError:
            return None  # no fresh answer: as above
        return None

    def _fail(self, batch, exc):
        """A batch that can never be delivered: done in the WAL, failed to on_replay."""
        _, error = self._accumulator.log_wal_outcome(batch.batch_id, exc)
        self._finish(batch, "failed", error=error)

    def _plan(self, key, sealed, stamp, known):
        """(the sealed batches not to send again, how the rest go: _RESENT,
        _RESENT_UNASKED or _AT_LEAST_ONCE, how many of the rest the leader said it
        has), the partition's stamp adopted when they go under it.  stamp: the
        batches' (producer id, epoch), None when they share none; known: what the
        leader said of it (_last_sequences).

        Of the batches the leader has appended, the last five are sent again all the
        same when they are its last five: the broker answers a resend of one of its
        last batches with its offsets, and only once the batch is committed
        (acks=all), which the leader's word alone does not say -- a leader cut off
        from the controllers answers for a log its successor may not have.  (It
        keeps five; one, after loading a snapshot: that leader refusing the sequence
        of one it said it has means it is in the log, SequencedBatch.appended_on.)
        The batches before them, and all it has when batches done in the log came
        after them, are not sent again, and count as deduplicated."""
        if stamp is None or known is _UNKNOWN_PRODUCER:
            # None, or an id the broker does not know (expired, never written):
            # nothing says what it has.
            return [], _AT_LEAST_ONCE, 0
        if known is None:
            # No answer: the broker's idempotence drops what it has among its last
            # five batches -- if it still knows the id.  One that expired it appends
            # any sequence, so what is acknowledged counts as possibly duplicated.
            skipped, kind, appended = [], _RESENT_UNASKED, []
        else:
            appended = [b for b in sealed
                        if _appended(b.seal, known, sealed[0].seal.base_sequence)]
            # Its last five are these only if its last sequence ends the last of them
            # (not when batches done in the log, or a part of a split one, came after).
            keeps = _BATCHES_A_BROKER_KEEPS if appended and known == (
                appended[-1].seal.base_sequence + appended[-1].seal.record_count
                - 1) % _SEQUENCE_LIMIT else 0
            skipped = appended[:max(0, len(appended) - keeps)]
            kind = _RESENT
        _log.debug("replay: %s-%d: producer %d epoch %d, sealed sequences %d-%d, the "
                   "leader's last %s: %d batches not sent again, %d sent again", *key,
                   *stamp, sealed[0].seal.base_sequence,
                   sealed[-1].seal.base_sequence + sealed[-1].seal.record_count - 1,
                   "unknown" if known is None else known, len(skipped),
                   len(sealed) - len(skipped))
        after = sealed[len(skipped):]
        last = sealed[-1].seal
        self._idempotence.adopt(
            *key, *stamp,
            after[0].seal.base_sequence if after
            else (last.base_sequence + last.record_count) % _SEQUENCE_LIMIT)
        return skipped, kind, len(appended) - len(skipped)

    def _last_sequences(self, stamps, deadline):
        """{(topic, partition): the last sequence its leader appended from the
        (producer id, epoch) stamps names; _UNKNOWN_PRODUCER if it has no state for it
        (or another epoch's); None if no leader answered by deadline, or one refused
        for good}.  One DescribeProducers request per leader, for all its partitions.

        A retriable failure is asked again, of the leader the next metadata answer
        names, after the retry backoff (growing to retry_backoff_max_ms): taken for no
        answer, the batches would count as possibly duplicated when a broker
        restarting was all that kept the answer.  Not ask_until (client/retry.py):
        the first question is asked even with the deadline passed, of the leader the
        cache knows.
        """
        pending, answers, retries = set(stamps), {}, 0
        while pending:
            failed = {}
            for broker, keys in self._by_leader(pending, deadline, failed).items():
                try:
                    answered = self._describe_producers(broker, keys, deadline)
                except (errors.KafkaError, TimeoutError, ValueError) as exc:
                    answered = dict.fromkeys(keys, exc)
                for key, answer in answered.items():
                    if isinstance(answer, Exception):
                        failed[key] = answer
                    else:
                        answers[key] = answer
                        self._answered_by[key] = broker.node_id
            pending = set(failed)
            wait_s = min(self._retry_backoff.ms(retries) / 1000, deadline - time.monotonic())
            for key, exc in failed.items():
                if not getattr(exc, "retriable", False) or wait_s <= 0:
                    _log.warning("replay: %s-%d: DescribeProducers not answered (%s); "
                                 "the sealed batches go under their producer id for the "
                                 "broker to deduplicate, counted as possibly duplicated",
                                 *key, exc)
                    pending.discard(key)
                    answers[key] = None
                else:
                    _log.debug("replay: %s-%d: DescribeProducers asked again in %.3f s: "
                               "%s", *key, wait_s, exc)
            if pending:
                self._metadata.request_update()
                time.sleep(wait_s)
                retries += 1
        return {key: None if answer is None else _last_sequence(answer, *stamps[key])
                for key, answer in answers.items()}

    def _by_leader(self, keys, deadline, failed):
        """{leader's BrokerInfo: [its keys (topic, partition)]}, waiting for leaders
        until deadline; a key with none gets its error in failed."""
        leaders, by_node = {}, {}
        for key in sorted(keys):
            try:
                broker = self._metadata.leader_for(*key, max(0.0, deadline - time.monotonic()))
            except (errors.KafkaError, TimeoutError, ValueError) as exc:
                failed[key] = exc
                continue
            by_node.setdefault(broker.node_id, []).append(key)
            leaders[broker.node_id] = broker
        return {leaders[node_id]: node_keys for node_id, node_keys in by_node.items()}

    def _describe_producers(self, broker, keys, deadline):
        """{key: broker's DescribeProducers answer (PartitionProducers) for the
        partition, or the error it failed with} for keys (topic, partition) the
        metadata names broker the leader of.

        A broker answers DescribeProducers from its own replica of the partition,
        leader or follower, appended or committed alike: a restarted leader that is a
        follower now answers with batches its new leader never had, which it is about
        to cut from its log (taken as in the topic, they were lost: seen in a test's
        broker restart).  So the question goes between two Metadata requests on the
        same connection, which a broker answers in order: both must name the broker
        the partition's leader at one leader epoch, no older than the one this
        producer's metadata knows -- a leader keeps its log through its epoch.  What
        it appended but no follower has fetched yet counts too: _plan sends its last
        five batches again, which the broker answers once they are committed.

        Errors: a partition's error code (NOT_LEADER_OR_FOLLOWER, ...); a broker that
        is not the partition's leader throughout (NotLeaderOrFollowerError, asked
        again); no answer about the partition (ProtocolError).

        Raises:
            KafkaError: no connection, no answer.
        """
        conn = self._pool.connection(broker.node_id, broker.host, broker.port)
        client_id = conn.config.client_id
        partitions = {}
        for topic, partition in keys:
            partitions.setdefault(topic, []).append(partition)
        topics = list(partitions)
        before = request_metadata(conn, topics, allow_auto_topic_creation=False)
        future = conn.request(
            DESCRIBE_PRODUCERS.key,
            lambda cid, version: encode_describe_producers_request(
                cid, client_id, version, partitions),
            decode_describe_producers_response)
        after = request_metadata(conn, topics, allow_auto_topic_creation=False)
        # Once asked, the answers are waited for as any request's (request_timeout_ms
        # fails them first): a budget spent on another leader is no reason to give up
        # on this one's.
        epochs = self._leader_epochs(conn, broker.node_id, keys,
                                     before.result(self._max_block_s))
        answers = {(a.topic, a.partition): a for a in future.result(self._max_block_s)}
        epochs_after = self._leader_epochs(conn, broker.node_id, keys,
                                           after.result(self._max_block_s))
        result = {}
        for key in keys:
            answer = answers.get(key)
            if isinstance(epochs[key], Exception):
                result[key] = epochs[key]
            elif answer is None:
                # Another partition's producers say nothing of this one's: taken for
                # it, batches never appended would count as deduplicated, and be lost.
                result[key] = errors.ProtocolError(
                    f"{conn.describe()} answered DescribeProducers without {key[0]}-"
                    f"{key[1]} (for {sorted(answers)})")
            elif answer.error_code:
                result[key] = errors.error_for_code(answer.error_code, answer.error_message)
            elif isinstance(epochs_after[key], Exception):
                result[key] = epochs_after[key]
            elif epochs_after[key] != epochs[key]:
                result[key] = errors.NotLeaderOrFollowerError(
                    f"{conn.describe()} changed leader epoch of {key[0]}-{key[1]} while "
                    f"it answered DescribeProducers: its answer may not be its log's as "
                    f"leader")
            else:
                _log.debug("replay: %s-%d: %s, its leader at epoch %d, knows %d "
                           "producers", *key, conn.describe(), epochs[key],
                           len(answer.producers))
                result[key] = answer
        return result

    def _leader_epochs(self, conn, node_id, keys, response):
        """{key: the leader epoch of the partition in conn's Metadata answer, which
        must name node_id its leader at an epoch no older than the metadata cache's;
        else the error: NotLeaderOrFollowerError (another leader, none, or an older
        epoch: the broker has not heard of an election yet), or the topic's error in
        the answer (asked again if retriable; not allowed to describe it: asked no
        more)}."""
        topics = {info.name: info for info in response.topics}
        epochs = {}
        for topic, partition in keys:
            info = topics.get(topic)
            part = None if info is None else next(
                (p for p in info.partitions if p.partition == partition), None)
            known = self._metadata.leader_epoch(topic, partition)
            if info is not None and info.error_code:
                epochs[topic, partition] = errors.error_for_code(
                    info.error_code, f"{conn.describe()}'s metadata for {topic!r}")
            elif part is None:
                epochs[topic, partition] = errors.NotLeaderOrFollowerError(
                    f"{conn.describe()} said nothing of {topic}-{partition} in its "
                    f"metadata")
            elif part.leader == node_id and part.leader_epoch >= known:
                epochs[topic, partition] = part.leader_epoch
            else:
                epochs[topic, partition] = errors.NotLeaderOrFollowerError(
                    f"{conn.describe()} names broker {part.leader} the leader of "
                    f"{topic}-{partition} at epoch {part.leader_epoch} (this producer "
                    f"knows epoch {known}): its DescribeProducers answer is a "
                    f"follower's, whose log may be cut")
        return epochs

    def _deduplicated(self, batch):
        """A sealed batch the broker has appended: done, offsets unknown."""
        self._accumulator.log_wal_outcome(batch.batch_id, None)
        self._finish(batch, "deduplicated", base_offset=-1, log_append_time_ms=-1)

    def _send(self, batch, kind, appended_on=None):
        builder = self._rebuild(batch, kind)
        record_count = len(batch.records)
        if kind in _UNDER_OLD_STAMP:
            stamp = self._idempotence.next_sequence(batch.topic, batch.partition, record_count)
            if stamp != (batch.seal.producer_id, batch.seal.producer_epoch,
                         batch.seal.base_sequence):
                raise errors.KafkaError(
                    f"replay of {batch.topic}-{batch.partition}: the partition numbers the "
                    f"batch {stamp}, its SEAL entry says {batch.seal[:3]}")
            builder.set_producer_state(*stamp)
        elif self._idempotence is not None:
            builder.set_producer_state(*self._idempotence.next_sequence(
                batch.topic, batch.partition, record_count))
        view = builder.seal()
        (batch_crc,) = _CRC.unpack_from(view, 17)
        if kind in _UNDER_OLD_STAMP and batch_crc != batch.seal.batch_crc:
            with self._lock:
                self._counts["batches_not_byte_identical"] += 1
        if kind not in _UNDER_OLD_STAMP:
            # The new bytes, logged under the batch's old id: replayed again, they go
            # out byte-identical.
            (attributes,) = struct.unpack_from(">h", view, 21)
            self._wal.log_seal(batch.batch_id, batch.topic, batch.partition,
                               builder.producer_id, builder.producer_epoch,
                               builder.base_sequence, record_count, attributes, batch_crc,
                               view.nbytes)
        stamp = (builder.producer_id, builder.producer_epoch)
        on_done = functools.partial(self._on_delivered, batch, builder, view, kind, stamp)
        try:
            self._sender.send(batch.topic, batch.partition, builder, record_count,
                              on_done=on_done, wal_id=batch.batch_id,
                              appended_on=appended_on)
        except BaseException:
            release_batch(builder, view, False)
            raise

    def _rebuild(self, batch, kind):
        """A builder holding batch's records as they were encoded: with the codec its
        SEAL entry says (resent), else the producer's."""
        size = BATCH_HEADER_BYTES + sum(len(r.record) for r in batch.records)
        compressor = self._accumulator.compressor
        if kind in _UNDER_OLD_STAMP:
            # The codec the batch was sealed with: at the producer's level when it is
            # the producer's codec (a level changed since shows in the CRC check).
            codec = batch.seal.attributes & _CODEC_MASK
            if compressor is None or compressor.codec != codec:
                compressor = self._compressors.get(codec)
                if compressor is None and codec:
                    compressor = self._compressors[codec] = Compressor(CODEC_NAMES[codec])
        pool = self._accumulator.buffer_pool
        buffer = pool.acquire(size, timeout_ms=self._max_block_s * 1000)
        if buffer is None:
            raise errors.BackpressureTimeoutError(
                f"replay of {batch.topic}-{batch.partition}: no memory for a batch of "
                f"{size} bytes within max_block_ms ({pool.available_bytes} of "
                f"{pool.total_bytes} bytes free, buffer_memory)")
        builder = RecordBatchBuilder(buffer, size, max(size, self._max_request_size),
                                     compressor)
        for record in batch.records:
            builder.append_encoded(record.record, record.timestamp_ms)
        return builder

    # ------------------------------------------------------------------
    # Outcomes: I/O threads.

    def _on_delivered(self, batch, builder, view, kind, stamp, result, error):
        if kind == _RESENT_UNASKED or (
                kind == _RESENT and (builder.producer_id, builder.producer_epoch) != stamp):
            # Unasked; or the broker refused the old stamp and the sender started the
            # partition over: the batch was written under a new one, perhaps a second
            # time.
            kind = _AT_LEAST_ONCE
        parts = () if result is None else result.parts
        if error is not None and not self._accumulator.wal_keeps_failures:
            # A delivery timeout with the spool on (a split batch's: every part's):
            # kept in the WAL and sent again, as this producer's own records are --
            # and said so, as their futures say it; failed, the batch would stay in
            # the WAL all the same, and the next producer would replay it, on_replay
            # hearing of it twice.
            spooled = self._accumulator.spool_replayed(
                batch.batch_id, batch.topic, batch.partition, builder, view, error, parts,
                functools.partial(self._on_spool_delivered, batch))
            if spooled is not None:
                self._finish(batch, "spooled", error=spooled)
                return
        # A split batch some of whose parts are in is done in the WAL, its failed
        # records reported failed (as this producer's own are).
        _, error = self._accumulator.log_wal_outcome(batch.batch_id, error, parts)
        release_batch(builder, view, error is None)
        if error is None:
            self._finish(batch, kind, result.base_offset, result.log_append_time_ms,
                         parts=parts)
        elif not self._accumulator.wal_keeps_failures:
            # A split batch some of whose parts failed: the others' records are in.
            self._finish(batch, "failed" if not parts else kind, error=error, parts=parts)
        # else: the producer is closing and the WAL keeps the batch; the next producer
        # replays it, and on_replay hears of it then.

    def _on_spool_delivered(self, batch, result, error):
        """A replayed batch the spool kept: its outcome, to on_replay (the report
        counted it as spooled already)."""
        if result is not None:
            self._tell(batch, result.base_offset, result.log_append_time_ms, error,
                       result.parts)
        else:
            self._tell(batch, -1, -1, error)

    def _finish(self, batch, kind, base_offset=-1, log_append_time_ms=-1, error=None,
                parts=()):
        """parts: a split batch's (ProduceResult.parts): its records that failed count
        as failed, the others as kind."""
        _log.debug("replay: batch %d of %s-%d, %d records, sequence %s: %s%s",
                   batch.batch_id, batch.topic, batch.partition, len(batch.records),
                   "-" if batch.seal is None else batch.seal.base_sequence, kind,
                   "" if error is None else f" ({error!r})")
        self._tell(batch, base_offset, log_append_time_ms, error, parts)
        failed = 0
        if parts:
            failed = sum(1 for record in batch.records
                         if part_of(parts, record.index)[3] is not None)
        with self._lock:
            self._counts[kind] += len(batch.records) - failed
            self._counts["failed"] += failed
            self._pending -= len(batch.records)
            if not self._pending:
                self._done.notify_all()

    def _tell(self, batch, base_offset, log_append_time_ms, error, parts=()):
        """on_replay(context, metadata or error) for each record of batch (of a split
        batch: its part's)."""
        if self._on_replay is not None:
            for record in batch.records:
                if parts:
                    first, base_offset, log_append_time_ms, error = part_of(parts,
                                                                            record.index)
                    if base_offset >= 0:
                        base_offset -= first  # _metadata adds the record's index
                outcome = error if error is not None else _metadata(
                    batch, record, base_offset, log_append_time_ms)
                try:
                    self._on_replay(record.context, outcome)
                except BaseException as exc:  # noqa: BLE001 -- the others still hear theirs
                    if not callback_error_is_contained(exc):
                        raise
                    _log.exception("on_replay raised for a record of %s-%d", batch.topic,
                                   batch.partition)

    # ------------------------------------------------------------------
    # Any thread.

    def report(self, timeout_s=None):
        """The ReplayReport once every replayed record is done, or as it stands after
        timeout_s (its pending count says what is left)."""
        with self._done:
            self._done.wait_for(lambda: not self._pending, timeout_s)
            return self._report_locked()

    def metrics(self):
        with self._lock:
            report = self._report_locked()
        return {f"replay_{name}": value for name, value in report._asdict().items()}

    def _report_locked(self):
        counts = self._counts
        return ReplayReport(
            records=self._recovery.record_count, deduplicated=counts["deduplicated"],
            resent=counts[_RESENT], reencoded=counts[_REENCODED],
            possibly_duplicated=counts[_AT_LEAST_ONCE], failed=counts["failed"],
            pending=self._pending,
            batches_not_byte_identical=counts["batches_not_byte_identical"],
            spooled=counts["spooled"])


_UNKNOWN_PRODUCER = object()  # the leader keeps no state for the producer id (epoch)


def _last_sequence(answer, producer_id, epoch):
    """The last sequence of producer_id at epoch in a DescribeProducers answer, or
    _UNKNOWN_PRODUCER."""
    for state in answer.producers:
        if state.producer_id == producer_id:
            return state.last_sequence if state.producer_epoch == epoch \
                else _UNKNOWN_PRODUCER
    return _UNKNOWN_PRODUCER


def _consecutive(sealed):
    """Whether the sealed batches share one stamp and follow each other's sequences
    (else a crash came in the middle of re-stamping them: no stamp is theirs)."""
    first = sealed[0].seal
    expected = first.base_sequence
    for batch in sealed:
        seal = batch.seal
        if ((seal.producer_id, seal.producer_epoch) != (first.producer_id, first.producer_epoch)
                or seal.base_sequence != expected):
            return False
        expected = (seal.base_sequence + seal.record_count) % _SEQUENCE_LIMIT
    return True


def _appended(seal, last, origin):
    """Whether the broker, whose last sequence appended is `last`, has the batch:
    sequences counted from origin, the first sealed batch's (they wrap at 2**31).  A
    last sequence behind origin -- the broker has none of the sealed batches -- is
    more than half the sequence space away from it."""
    if last < 0:
        return False
    ahead = (last - origin) % _SEQUENCE_LIMIT
    if ahead >= _SEQUENCE_LIMIT // 2:
        return False
    end = (seal.base_sequence + seal.record_count - 1 - origin) % _SEQUENCE_LIMIT
    return end <= ahead


def _metadata(batch, record, base_offset, log_append_time_ms):
    key_size, value_size, header_size = _serialized_sizes(record.record)
    return RecordMetadata(
        batch.topic, batch.partition, TopicPartition(batch.topic, batch.partition),
        -1 if base_offset < 0 else base_offset + record.index,
        log_append_time_ms if log_append_time_ms >= 0 else record.timestamp_ms, None,
        key_size, value_size, header_size)


def _serialized_sizes(record):
    """(key, value, headers) sizes of an encoded record, as RecordMetadata gives them:
    -1 for a null key or value and for no headers."""
    end = len(record)
    _, pos = read_varint(record, 0, end)  # length
    _, pos = read_varint(record, pos + 1, end)  # attributes, timestamp delta
    _, pos = read_varint(record, pos, end)  # offset delta
    key_size, pos = _nullable_length(record, pos, end)
    value_size, pos = _nullable_length(record, pos, end)
    count, pos = read_varint(record, pos, end)
    header_size = -1 if count == 0 else 0
    for _ in range(count):
        name_size, pos = _nullable_length(record, pos, end)
        size, pos = _nullable_length(record, pos, end)
        header_size += name_size + max(size, 0)
    return key_size, value_size, header_size


def _nullable_length(record, pos, end):
    length, pos = read_varint(record, pos, end)
    return length, pos + max(length, 0)
