"""Producer interceptors: the Java client's ProducerInterceptor, for Python.

An interceptor is any object with

    on_send(record) -> record
        Called in send() / produce() before the key and value are serialized and
        the partition chosen, on the caller's thread.  record is a ProducerRecord
        (topic, value, key, headers, partition, timestamp_ms); it returns the
        record to send -- the same one, or a changed copy (record._replace(...)),
        e.g. with a trace header added.  None keeps the record as it was.
    on_acknowledgement(metadata, exception)
        Called once per record when it is acknowledged (exception None) or has
        failed (metadata then has the topic, the partition or -1, and offset -1),
        on the thread that completes it -- usually an I/O thread, so it must be
        quick.  Also called, on the caller's thread, when send() itself refuses
        the record after on_send.
    close() (optional)
        Called once when the producer closes.

Interceptors run in list order, each on_send seeing the record the previous one
returned.  As in the Java client, an exception raised by an interceptor is
logged and does not stop the record: on_send's input goes on to the next one.

Cost: none unless interceptors are set.  send() and produce() test one field
(in C) and take this path only when it is not None; with interceptors every
record gets a future and a callback, as kafka-python's records always do.
send_batch() refuses to run with interceptors (it has no per-record step to call
them from) rather than skip them.
"""
import logging
from collections import namedtuple

from netkafka.client.own_threads import callback_error_is_contained
from netkafka.producer._futures import RecordMetadata, TopicPartition

_log = logging.getLogger("netkafka.producer.interceptors")

__all__ = ["InterceptorChain", "ProducerRecord"]


class ProducerRecord(namedtuple("ProducerRecord", [
        "topic", "value", "key", "headers", "partition", "timestamp_ms"])):
    """A record as send() was given it (its arguments, in send()'s order)."""

    __slots__ = ()


class InterceptorChain:
    """The producer's interceptors, called in order.  Immutable; thread-safe as far
    as the interceptors themselves are."""

    def __init__(self, interceptors):
        self.interceptors = tuple(interceptors)

    def on_send(self, record):
        for interceptor in self.interceptors:
            try:
                changed = interceptor.on_send(record)
            except Exception:  # noqa: BLE001 -- the Java client's rule: log, go on
                _log.exception("interceptor %r on_send raised; record sent as it was",
                               interceptor)
                continue
            if changed is not None:
                if not isinstance(changed, ProducerRecord):
                    _log.error("interceptor %r on_send returned a %s, not a ProducerRecord; "
                               "record sent as it was", interceptor, type(changed).__name__)
                    continue
                record = changed
        return record

    def on_acknowledgement(self, metadata, exception):
        for interceptor in self.interceptors:
            try:
                interceptor.on_acknowledgement(metadata, exception)
            except BaseException as exc:  # noqa: BLE001 -- on an I/O thread: must not stop it
                if not callback_error_is_contained(exc):
                    raise
                _log.exception("interceptor %r on_acknowledgement raised", interceptor)

    def acknowledge_future(self, future):
        """Calls on_acknowledgement when future (a FutureRecordMetadata) completes."""
        def done(outcome):
            if isinstance(outcome, BaseException):
                self.on_acknowledgement(failed_metadata(*future.topic_partition), outcome)
            else:
                self.on_acknowledgement(outcome, None)
        future.add_both(done)

    def close(self):
        for interceptor in self.interceptors:
            close = getattr(interceptor, "close", None)
            if close is None:
                continue
            try:
                close()
            except Exception:  # noqa: BLE001 -- close the others regardless
                _log.exception("interceptor %r close raised", interceptor)


def failed_metadata(topic, partition):
    """The metadata on_acknowledgement gets for a failed record: no offset, no time,
    no sizes (the Java client's for a failure)."""
    partition = -1 if partition is None else partition
    return RecordMetadata(topic, partition, TopicPartition(topic, partition), -1, -1, None, -1, -1, -1)
