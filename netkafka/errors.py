"""netkafka's exceptions, and the broker's error codes mapped to them.

    KafkaError                  base of every error netkafka raises
    +-- ProtocolError           bytes from a broker that do not parse: the
    |                           connection they came on can no longer be trusted
    +-- IncompatibleBrokerError the broker lacks an API version netkafka needs
    +-- KafkaConnectionError    a broker connection could not be made, or broke
    +-- AuthenticationError     a broker refused this client's credentials (also the
    |                           BrokerErrors SASL_AUTHENTICATION_FAILED,
    |                           UNSUPPORTED_SASL_MECHANISM and ILLEGAL_SASL_STATE):
    |                           not retried
    |   +-- SslAuthenticationError  the TLS handshake failed (certificate, protocol)
    +-- SslConfigError          a TLS or security_protocol setting is wrong (also a
    |                           ValueError)
    +-- KafkaTimeoutError       a configured bound ran out (also a TimeoutError)
    |   +-- RequestTimeoutError a request got no answer in request_timeout_ms
    |   +-- BackpressureTimeoutError  memory or a connection stayed full for
    |                           max_block_ms
    +-- RecordDroppedError      the drop strategy refused a record
    +-- RecordInInvalidBatchError  a good record the broker refused with its batch,
    |                           whose other records it named invalid
    +-- IllegalStateError       a call the object's state does not allow
    |   +-- ProducerClosedError send() after close()
    |       +-- RecordKeptError close() came first; the write-ahead log keeps the
    |                           record for the next producer's replay
    |   +-- TransactionStateError  a transactional call in a state where it makes no sense
    +-- KafkaConfigurationError settings that cannot work together, or a
    |                           kafka-python setting that has no meaning here
    |                           (also a ValueError)
    +-- IllegalArgumentError    a bad argument (also a ValueError)
    |   +-- NoSuchPartitionError  send() named a partition its topic does not have
    +-- UndeliveredRecordsError flush(): records sent with produce() failed
    +-- SentBeforeForkError     a forked child's copy of a record its parent sent
    +-- SerializationError      a serializer failed (also a ValueError)
    +-- DeliveryFailedError     records of a Spark task failed
    +-- BrokerHarnessError      the test harness could not run a broker (also a
    |                           RuntimeError)
    +-- BatchStateError         a batch asked to do what its state forbids (also a
    |                           RuntimeError)
    +-- BufferPoolExhausted     the buffer pool has no room for a record's batch now
    +-- CompressionError        a codec library failed to compress (also a RuntimeError)
    +-- TransactionAbortRequiredError  the open transaction failed: only an abort is left
    +-- TransactionAbortedError the record's transaction was aborted before it was sent
    +-- WalError                the write-ahead log (wal_dir); the message names the
    |   |                       directory or file
    |   +-- WalLockedError      another producer has the directory open
    |   +-- WalVersionError     a segment of another format version
    |   +-- WalCorruptError     a file that is no segment, an entry that does not parse
    |   +-- WalFullError        wal_max_bytes reached (the backoff strategy waits on it)
    |   +-- WalStorageError     the OS refused: disk full, permission, I/O error
    |   +-- RecordSpooledError  delivery timed out; the record is kept and sent again
    +-- BrokerError             an error code a broker returned; one subclass per
        |                       code a producer meets, generic for the rest
        +-- MessageTooLargeError (MESSAGE_TOO_LARGE)
        |   +-- RecordTooLargeError  a record larger than max_request_size or
        |                       buffer_memory, refused by send() before it is
        |                       queued (also a ValueError)
        +-- InvalidTopicError (INVALID_TOPIC_EXCEPTION)
            +-- IllegalTopicNameError  a name against Kafka's rule, refused before
                                it goes on the wire (also a ValueError)

Each BrokerError carries ``code`` (also ``errno``, kafka-python's name for it),
``name`` (Kafka's name for the code), ``retriable`` (the same request may succeed
if sent again) and ``invalid_metadata`` (the cached cluster metadata is stale:
refresh it before retrying).  Both flags follow the Java client's exception hierarchy
(RetriableException, InvalidMetadataException), so netkafka retries exactly
where the Java producer does.

kafka-python 3's names for the same errors are here too (KAFKA_PYTHON_NAMES
lists them), so that ``from kafka.errors import X`` becomes ``from
netkafka.errors import X``: each is the netkafka class meaning the same thing
(``BrokerResponseError`` is BrokerError, ``MessageSizeTooLargeError`` is
MessageTooLargeError, ``KafkaProtocolError`` is ProtocolError, ...).  Where
kafka-python puts a class under RetriableError or InvalidMetadataError,
netkafka says the same with the ``retriable`` and ``invalid_metadata`` flags,
which follow the broker's code rather than the class.
"""


class KafkaError(Exception):
    """Base of every error netkafka raises."""

    retriable = False
    invalid_metadata = False


class ProtocolError(KafkaError):
    """A broker sent bytes that are not a valid response.

    The connection is out of step with the broker and must be closed.
    """


class IncompatibleBrokerError(KafkaError):
    """The broker does not support any version netkafka can use of a required API."""


class KafkaConnectionError(KafkaError):
    """A broker connection could not be made, or broke; the requests handed to
    it were not answered.  Retriable; the broker may have moved, so metadata
    is refreshed (the Java client's NetworkException)."""

    retriable = True
    invalid_metadata = True


class AuthenticationError(KafkaError):
    """A broker refused to authenticate this client: wrong credentials, a SASL
    mechanism its listener does not enable, or a TLS listener answering a client whose
    security_protocol has no TLS.  The message names the mechanism (or the setting) and
    the broker.  Not retriable (as the Java client's AuthenticationException): waiting
    for metadata raises it at once rather than after max_block_ms.  The connection
    is still tried again after the reconnect backoff (credentials may be fixed)."""


class SslAuthenticationError(AuthenticationError):
    """The TLS handshake with a broker failed: its certificate did not verify (the
    message names the host and OpenSSL's reason), it refused ours, or the two sides
    share no protocol version or cipher.  As the Java client's
    SslAuthenticationException, an AuthenticationException: not fixed by waiting."""


class SslConfigError(KafkaError, ValueError):
    """A TLS setting is wrong or does not fit security_protocol: a file that cannot
    be read or loaded, a wrong key password, ciphers OpenSSL does not know, TLS
    settings with a protocol without TLS.  The message names the setting.  Raised
    when the producer is built, before any connection."""


class KafkaTimeoutError(KafkaError, TimeoutError):
    """Something did not happen within its configured bound; the message names
    the bound and what was waited for."""

    retriable = True


class RequestTimeoutError(KafkaTimeoutError):
    """A request got no answer within request_timeout_ms (its connection is
    closed), or could not be sent within it."""

    invalid_metadata = True


class BackpressureTimeoutError(KafkaTimeoutError):
    """The target stayed full for max_block_ms (strategy block or park), or was full
    for a send() on an I/O thread (a callback), which cannot wait for room.  A
    KafkaTimeoutError, as kafka-python's send() raises when it gets no buffer
    memory within max_block_ms (and the Java client's BufferExhaustedException is
    a TimeoutException): code written for kafka-python catches it."""


class RecordDroppedError(KafkaError):
    """The drop strategy refused a record because its target was full."""


class IllegalStateError(KafkaError):
    """A call the object's current state does not allow (kafka-python's name)."""


class KafkaConfigurationError(KafkaError, ValueError):
    """Producer settings that cannot work together (enable_idempotence=True with
    acks=1, say), or a kafka-python setting that has no meaning in netkafka
    (kafka_client, selector); the message names the settings and why.  Also a
    ValueError, which netkafka raised for these before."""


class IllegalArgumentError(KafkaError, ValueError):
    """A bad argument (kafka-python's name); also a ValueError."""


class NoSuchPartitionError(IllegalArgumentError):
    """send(), produce() or send_batch() named a partition its topic does not have
    in the metadata.  Unlike other bad arguments it fails an open transaction: the
    record was meant to be in it, as the Java client's send() fails the transaction
    when such a record's metadata wait ends (a TimeoutException)."""


class ProducerClosedError(IllegalStateError):
    """send() after close(): the record was not taken; or close() came before the
    record was delivered."""


class RecordKeptError(ProducerClosedError):
    """close() came before the record was delivered, and the write-ahead log (wal_dir)
    keeps it: the next producer that opens the directory replays it (its on_replay
    reports the record's fate).  Its future fails with this, not to be sent again by
    the application; the error that ended this producer's attempt is its __cause__."""


class RecordInInvalidBatchError(KafkaError):
    """The broker refused the record's batch because of other records of it, which it
    named (KIP-467's record errors: an INVALID_TIMESTAMP or INVALID_RECORD for each);
    this record itself was not found at fault.  The Java client's KafkaException
    "Failed to append record because it was part of a batch which had one more more
    invalid records".  Not retried, as Java does not: the batch would be refused
    again; the application may send the record again on its own."""


class _RecordsFailedError(KafkaError):
    """Records failed: how many, and the first few errors, named in the message.

    Attributes:
        failed_count: how many records failed.
        first_errors: the first few of their errors, in the order they were met.
    """

    def __init__(self, what_failed, failed_count, first_errors):
        shown = "; ".join(repr(error) for error in first_errors)
        super().__init__(f"{what_failed}; first errors: {shown}")
        self.failed_count = failed_count
        self.first_errors = list(first_errors)


class UndeliveredRecordsError(_RecordsFailedError):
    """Raised by flush(): records sent with produce() (no future) failed since the
    previous flush(); first_errors holds at most FIRST_ERRORS_KEPT of
    producer/accumulator.py."""

    def __init__(self, failed_count, first_errors):
        super().__init__(f"{failed_count} records sent with produce() failed",
                         failed_count, first_errors)


class SentBeforeForkError(KafkaError):
    """In a forked child: the record was sent by the parent before os.fork().  The
    parent delivers it; the child's copy of its future can only fail with this."""


class SerializationError(KafkaError, ValueError):
    """A key_serializer or value_serializer raised, or returned something other
    than bytes, bytearray, memoryview or None."""


class DeliveryFailedError(_RecordsFailedError):
    """Records of a Spark task failed: raised so that Spark retries the task."""

    def __init__(self, topic, failed_count, first_errors):
        super().__init__(f"{failed_count} records to {topic!r} failed in this task",
                         failed_count, first_errors)


class BrokerHarnessError(KafkaError, RuntimeError):
    """The test harness (netkafka.testing) could not fetch, start, reach or stop a
    broker; the message says why.  Not a broker's error code: that is BrokerError."""


# The error code of success (Kafka's NONE): an answer's error_code is compared with it.
NO_ERROR = 0

# --- The record layer's (netkafka.record): batches, their buffers, their codecs.


class BatchStateError(KafkaError, RuntimeError):
    """An operation was asked of a batch in a state that does not allow it."""


class BufferPoolExhausted(KafkaError):
    """The pool cannot hand out the memory asked for right now."""


class CompressionError(KafkaError, RuntimeError):
    """A codec library failed to compress (out of memory, or a bug): nothing was sent."""


# Every error code of Apache Kafka 4.x: code -> (name, retriable, invalid_metadata).
# Names are Kafka's; the two flags are the Java client's (RetriableException,
# InvalidMetadataException) for the exception class of that code.
ERROR_CODES = {
    -1: ("UNKNOWN_SERVER_ERROR", False, False),
    1: ("OFFSET_OUT_OF_RANGE", False, False),
    2: ("CORRUPT_MESSAGE", True, False),
    3: ("UNKNOWN_TOPIC_OR_PARTITION", True, True),
    4: ("INVALID_FETCH_SIZE", False, False),
    5: ("LEADER_NOT_AVAILABLE", True, True),
    6: ("NOT_LEADER_OR_FOLLOWER", True, True),
    7: ("REQUEST_TIMED_OUT", True, False),
    8: ("BROKER_NOT_AVAILABLE", False, False),
    9: ("REPLICA_NOT_AVAILABLE", True, True),
    10: ("MESSAGE_TOO_LARGE", False, False),
    11: ("STALE_CONTROLLER_EPOCH", False, False),
    12: ("OFFSET_METADATA_TOO_LARGE", False, False),
    13: ("NETWORK_EXCEPTION", True, True),
    14: ("COORDINATOR_LOAD_IN_PROGRESS", True, False),
    15: ("COORDINATOR_NOT_AVAILABLE", True, False),
    16: ("NOT_COORDINATOR", True, False),
    17: ("INVALID_TOPIC_EXCEPTION", False, False),
    18: ("RECORD_LIST_TOO_LARGE", False, False),
    19: ("NOT_ENOUGH_REPLICAS", True, False),
    20: ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, False),
    21: ("INVALID_REQUIRED_ACKS", False, False),
    22: ("ILLEGAL_GENERATION", False, False),
    23: ("INCONSISTENT_GROUP_PROTOCOL", False, False),
    24: ("INVALID_GROUP_ID", False, False),
    25: ("UNKNOWN_MEMBER_ID", False, False),
    26: ("INVALID_SESSION_TIMEOUT", False, False),
    27: ("REBALANCE_IN_PROGRESS", False, False),
    28: ("INVALID_COMMIT_OFFSET_SIZE", False, False),
    29: ("TOPIC_AUTHORIZATION_FAILED", False, False),
    30: ("GROUP_AUTHORIZATION_FAILED", False, False),
    31: ("CLUSTER_AUTHORIZATION_FAILED", False, False),
    32: ("INVALID_TIMESTAMP", False, False),
    33: ("UNSUPPORTED_SASL_MECHANISM", False, False),
    34: ("ILLEGAL_SASL_STATE", False, False),
    35: ("UNSUPPORTED_VERSION", False, False),
    36: ("TOPIC_ALREADY_EXISTS", False, False),
    37: ("INVALID_PARTITIONS", False, False),
    38: ("INVALID_REPLICATION_FACTOR", False, False),
    39: ("INVALID_REPLICA_ASSIGNMENT", False, False),
    40: ("INVALID_CONFIG", False, False),
    41: ("NOT_CONTROLLER", True, False),
    42: ("INVALID_REQUEST", False, False),
    43: ("UNSUPPORTED_FOR_MESSAGE_FORMAT", False, False),
    44: ("POLICY_VIOLATION", False, False),
    45: ("OUT_OF_ORDER_SEQUENCE_NUMBER", False, False),
    46: ("DUPLICATE_SEQUENCE_NUMBER", False, False),
    47: ("INVALID_PRODUCER_EPOCH", False, False),
    48: ("INVALID_TXN_STATE", False, False),
    49: ("INVALID_PRODUCER_ID_MAPPING", False, False),
    50: ("INVALID_TRANSACTION_TIMEOUT", False, False),
    51: ("CONCURRENT_TRANSACTIONS", True, False),
    52: ("TRANSACTION_COORDINATOR_FENCED", False, False),
    53: ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, False),
    54: ("SECURITY_DISABLED", False, False),
    55: ("OPERATION_NOT_ATTEMPTED", False, False),
    56: ("KAFKA_STORAGE_ERROR", True, True),
    57: ("LOG_DIR_NOT_FOUND", False, False),
    58: ("SASL_AUTHENTICATION_FAILED", False, False),
    59: ("UNKNOWN_PRODUCER_ID", False, False),
    60: ("REASSIGNMENT_IN_PROGRESS", False, False),
    61: ("DELEGATION_TOKEN_AUTH_DISABLED", False, False),
    62: ("DELEGATION_TOKEN_NOT_FOUND", False, False),
    63: ("DELEGATION_TOKEN_OWNER_MISMATCH", False, False),
    64: ("DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False, False),
    65: ("DELEGATION_TOKEN_AUTHORIZATION_FAILED", False, False),
    66: ("DELEGATION_TOKEN_EXPIRED", False, False),
    67: ("INVALID_PRINCIPAL_TYPE", False, False),
    68: ("NON_EMPTY_GROUP", False, False),
    69: ("GROUP_ID_NOT_FOUND", False, False),
    70: ("FETCH_SESSION_ID_NOT_FOUND", True, False),
    71: ("INVALID_FETCH_SESSION_EPOCH", True, False),
    72: ("LISTENER_NOT_FOUND", True, True),
    73: ("TOPIC_DELETION_DISABLED", False, False),
    74: ("FENCED_LEADER_EPOCH", True, True),
    75: ("UNKNOWN_LEADER_EPOCH", True, False),
    76: ("UNSUPPORTED_COMPRESSION_TYPE", False, False),
    77: ("STALE_BROKER_EPOCH", False, False),
    78: ("OFFSET_NOT_AVAILABLE", True, False),
    79: ("MEMBER_ID_REQUIRED", False, False),
    80: ("PREFERRED_LEADER_NOT_AVAILABLE", True, True),
    81: ("GROUP_MAX_SIZE_REACHED", False, False),
    82: ("FENCED_INSTANCE_ID", False, False),
    83: ("ELIGIBLE_LEADERS_NOT_AVAILABLE", True, True),
    84: ("ELECTION_NOT_NEEDED", True, True),
    85: ("NO_REASSIGNMENT_IN_PROGRESS", False, False),
    86: ("GROUP_SUBSCRIBED_TO_TOPIC", False, False),
    87: ("INVALID_RECORD", False, False),
    88: ("UNSTABLE_OFFSET_COMMIT", True, False),
    89: ("THROTTLING_QUOTA_EXCEEDED", True, False),
    90: ("PRODUCER_FENCED", False, False),
    91: ("RESOURCE_NOT_FOUND", False, False),
    92: ("DUPLICATE_RESOURCE", False, False),
    93: ("UNACCEPTABLE_CREDENTIAL", False, False),
    94: ("INCONSISTENT_VOTER_SET", False, False),
    95: ("INVALID_UPDATE_VERSION", False, False),
    96: ("FEATURE_UPDATE_FAILED", False, False),
    97: ("PRINCIPAL_DESERIALIZATION_FAILURE", False, False),
    98: ("SNAPSHOT_NOT_FOUND", False, False),
    99: ("POSITION_OUT_OF_RANGE", False, False),
    100: ("UNKNOWN_TOPIC_ID", True, True),
    101: ("DUPLICATE_BROKER_REGISTRATION", False, False),
    102: ("BROKER_ID_NOT_REGISTERED", False, False),
    103: ("INCONSISTENT_TOPIC_ID", True, True),
    104: ("INCONSISTENT_CLUSTER_ID", False, False),
    105: ("TRANSACTIONAL_ID_NOT_FOUND", False, False),
    106: ("FETCH_SESSION_TOPIC_ID_ERROR", True, False),
    107: ("INELIGIBLE_REPLICA", False, False),
    108: ("NEW_LEADER_ELECTED", False, False),
    109: ("OFFSET_MOVED_TO_TIERED_STORAGE", False, False),
    110: ("FENCED_MEMBER_EPOCH", False, False),
    111: ("UNRELEASED_INSTANCE_ID", False, False),
    112: ("UNSUPPORTED_ASSIGNOR", False, False),
    113: ("STALE_MEMBER_EPOCH", False, False),
    114: ("MISMATCHED_ENDPOINT_TYPE", False, False),
    115: ("UNSUPPORTED_ENDPOINT_TYPE", False, False),
    116: ("UNKNOWN_CONTROLLER_ID", False, False),
    117: ("UNKNOWN_SUBSCRIPTION_ID", False, False),
    118: ("TELEMETRY_TOO_LARGE", False, False),
    119: ("INVALID_REGISTRATION", False, False),
    120: ("TRANSACTION_ABORTABLE", False, False),
    121: ("INVALID_RECORD_STATE", False, False),
    122: ("SHARE_SESSION_NOT_FOUND", True, False),
    123: ("INVALID_SHARE_SESSION_EPOCH", True, False),
    124: ("FENCED_STATE_EPOCH", False, False),
    125: ("INVALID_VOTER_KEY", False, False),
    126: ("DUPLICATE_VOTER", False, False),
    127: ("VOTER_NOT_FOUND", False, False),
    128: ("INVALID_REGULAR_EXPRESSION", False, False),
    129: ("REBOOTSTRAP_REQUIRED", False, False),
    130: ("STREAMS_INVALID_TOPOLOGY", False, False),
    131: ("STREAMS_INVALID_TOPOLOGY_EPOCH", False, False),
    132: ("STREAMS_TOPOLOGY_FENCED", False, False),
    133: ("SHARE_SESSION_LIMIT_REACHED", True, False),
    134: ("GROUP_DELETION_FAILED", False, False),
    135: ("STREAMS_TOPOLOGY_DESCRIPTION_UPDATE_FAILED", False, False),
    136: ("CONTROLLER_ID_NOT_REGISTERED", False, False),
}


class BrokerError(KafkaError):
    """An error code returned by a broker.

    Subclasses name one code each (set ``code``; the name and flags are taken
    from ERROR_CODES).  Codes without a subclass are raised as BrokerError
    itself, still carrying their code, name and flags.  ``errno`` is ``code``
    (kafka-python's BrokerResponseError calls it that).
    """

    code = None
    errno = None  # kafka-python's name for code, kept equal to it
    name = "UNKNOWN_ERROR_CODE"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.errno = cls.code
        cls.name, cls.retriable, cls.invalid_metadata = ERROR_CODES[cls.code]
        if "code" in cls.__dict__:
            # A subclass keeping its parent's code (RecordTooLargeError) is raised by
            # netkafka itself: the broker's code still maps to the parent.
            _CLASS_FOR_CODE[cls.code] = cls

    def __init__(self, message=None, *, code=None):
        if code is not None:
            self.code = self.errno = code
            self.name, self.retriable, self.invalid_metadata = ERROR_CODES.get(
                code, (f"UNKNOWN_ERROR_CODE_{code}", False, False)
            )
        self.message = message
        detail = message or (self.__doc__ or "").strip().split("\n")[0]
        super().__init__(f"{self.name} (error code {self.code}): {detail}")


    def __reduce__(self):
        # Rebuilt through error_for_code so that pickling (e.g. back from a
        # Spark executor) keeps the code even for the generic class.
        return error_for_code, (self.code, self.message)


# Filled by BrokerError.__init_subclass__: code -> its subclass.
_CLASS_FOR_CODE = {}


def error_for_code(code, message=None):
    """The exception for a broker's error ``code`` (returned, not raised).

    Args:
        code: the int16 error code from a response; 0 (success) is refused.
        message: the broker's error message, if the response carried one.

    Returns:
        An instance of the code's BrokerError subclass, or of BrokerError itself
        for a code without one (codes unknown to this table included).
    """
    if code == NO_ERROR:
        raise ValueError("error code 0 means success, not an error")
    cls = _CLASS_FOR_CODE.get(code)
    if cls is not None:
        return cls(message)
    return BrokerError(message, code=code)


# --- The codes a producer meets, one class each (docstring: what it means to us).


class UnknownServerError(BrokerError):
    """The broker failed with an unexpected error of its own."""

    code = -1


class CorruptMessageError(BrokerError):
    """The broker found the batch corrupt: CRC mismatch, bad size or bad format."""

    code = 2


class UnknownTopicOrPartitionError(BrokerError):
    """The broker does not host this topic-partition (yet, or any more)."""

    code = 3


class LeaderNotAvailableError(BrokerError):
    """The partition has no leader right now: an election is under way."""

    code = 5


class NotLeaderOrFollowerError(BrokerError):
    """The broker is not the partition's leader: the cached leader is stale."""

    code = 6


class RequestTimedOutError(BrokerError):
    """The broker gave up waiting (for the in-sync replicas, with acks=all)."""

    code = 7


class BrokerNotAvailableError(BrokerError):
    """The broker is not available."""

    code = 8


class ReplicaNotAvailableError(BrokerError):
    """A replica of the partition is not available."""

    code = 9


class MessageTooLargeError(BrokerError):
    """A batch is larger than the broker or topic accepts (message.max.bytes, max.message.bytes)."""

    code = 10


class RecordTooLargeError(MessageTooLargeError, ValueError):
    """A record larger than max_request_size or buffer_memory (serialized in a batch),
    refused before it is queued: raised by send() and produce(), a row's error in
    send_batch()'s result; the message gives both sizes.  kafka-python's send() raises
    MessageSizeTooLargeError for it, which this is (so code catching that, or
    KafkaError, still does); also a ValueError, which netkafka raised for it before."""


class NetworkError(BrokerError):
    """The broker lost a connection it needed while handling the request."""

    code = 13


class CoordinatorLoadInProgressError(BrokerError):
    """The coordinator is still loading its state."""

    code = 14


class CoordinatorNotAvailableError(BrokerError):
    """The coordinator is not available."""

    code = 15


class NotCoordinatorError(BrokerError):
    """The broker is not the coordinator asked for."""

    code = 16


class InvalidTopicError(BrokerError):
    """The topic name is invalid, or the topic may not be written to (e.g. an internal one)."""

    code = 17


class IllegalTopicNameError(InvalidTopicError, ValueError):
    """A topic name against Kafka's rule (empty, too long, a character outside a-z A-Z
    0-9 . _ -), refused by send(), produce(), send_batch() and partitions_for() before
    any request carries it; the message names the topic and the fault.  kafka-python's
    send() raises ValueError for it, which this is too (so code catching that still
    does); an InvalidTopicError, as the broker's refusal of a name is."""


class RecordListTooLargeError(BrokerError):
    """A batch is larger than the broker's log segment size."""

    code = 18


class NotEnoughReplicasError(BrokerError):
    """Fewer in-sync replicas than min.insync.replicas: the batch was not written."""

    code = 19


class NotEnoughReplicasAfterAppendError(BrokerError):
    """The leader wrote the batch, but fewer in-sync replicas than required confirmed it."""

    code = 20


class InvalidRequiredAcksError(BrokerError):
    """The acks value is not one of 0, 1 and -1 (all)."""

    code = 21


class IllegalGenerationError(BrokerError):
    """The consumer group generation in the request is not the group's current one."""

    code = 22


class UnknownMemberIdError(BrokerError):
    """The consumer group does not know the member id in the request."""

    code = 25


class TopicAuthorizationFailedError(BrokerError):
    """The client may not write to (or describe) this topic."""

    code = 29


class GroupAuthorizationFailedError(BrokerError):
    """The client may not use this consumer group."""

    code = 30


class ClusterAuthorizationFailedError(BrokerError):
    """The client lacks a cluster-level permission (e.g. IdempotentWrite)."""

    code = 31


class InvalidTimestampError(BrokerError):
    """A record timestamp is outside the range the topic accepts."""

    code = 32


class UnsupportedSaslMechanismError(BrokerError, AuthenticationError):
    """The broker does not offer the requested SASL mechanism."""

    code = 33


class IllegalSaslStateError(BrokerError, AuthenticationError):
    """The request is not valid at this point of the SASL exchange; a listener without
    SASL answers SaslHandshake with it.  An AuthenticationError, as the Java client's
    IllegalSaslStateException: not cured by waiting."""

    code = 34


class UnsupportedVersionError(BrokerError):
    """The broker does not support the version of the API the request used."""

    code = 35


class InvalidRequestError(BrokerError):
    """The broker could not make sense of the request."""

    code = 42


class UnsupportedForMessageFormatError(BrokerError):
    """The topic's message format does not support what the request needs."""

    code = 43


class OutOfOrderSequenceNumberError(BrokerError):
    """The broker received a producer sequence number out of order (idempotence)."""

    code = 45


class DuplicateSequenceNumberError(BrokerError):
    """The broker already has this batch (idempotence): it was written before."""

    code = 46


class InvalidProducerEpochError(BrokerError):
    """The producer epoch is older than the broker's."""

    code = 47


class InvalidTxnStateError(BrokerError):
    """A transactional operation came in an invalid state."""

    code = 48


class InvalidProducerIdMappingError(BrokerError):
    """The producer id is not assigned to this transactional id."""

    code = 49


class InvalidTransactionTimeoutError(BrokerError):
    """The transaction timeout exceeds the broker's transaction.max.timeout.ms."""

    code = 50


class ConcurrentTransactionsError(BrokerError):
    """Another transaction of this producer is still being completed."""

    code = 51


class TransactionalIdAuthorizationFailedError(BrokerError):
    """The client may not use this transactional id."""

    code = 53


class OperationNotAttemptedError(BrokerError):
    """The broker did not try this part of the request because another part failed."""

    code = 55


class KafkaStorageError(BrokerError):
    """The broker met a disk error on the partition's log."""

    code = 56


class SaslAuthenticationFailedError(BrokerError, AuthenticationError):
    """SASL authentication failed."""

    code = 58


class UnknownProducerIdError(BrokerError):
    """The broker no longer has state for this producer id (e.g. its records expired)."""

    code = 59


class ListenerNotFoundError(BrokerError):
    """The partition's leader has no listener matching the one this client used."""

    code = 72


class FencedLeaderEpochError(BrokerError):
    """The leader epoch in the request is older than the broker's."""

    code = 74


class UnknownLeaderEpochError(BrokerError):
    """The leader epoch in the request is newer than the broker's."""

    code = 75


class UnsupportedCompressionTypeError(BrokerError):
    """The broker cannot accept this compression codec at this request version."""

    code = 76


class FencedInstanceIdError(BrokerError):
    """Another consumer with the same group.instance.id took over (static membership)."""

    code = 82


class InvalidRecordError(BrokerError):
    """The broker rejected a record of the batch (e.g. a null key on a compacted topic)."""

    code = 87


class ThrottlingQuotaExceededError(BrokerError):
    """The client exceeded a throttling quota."""

    code = 89


class ProducerFencedError(BrokerError):
    """A newer producer with the same transactional id took over."""

    code = 90


class UnknownTopicIdError(BrokerError):
    """The broker does not host a topic with this topic id."""

    code = 100


class InconsistentTopicIdError(BrokerError):
    """The topic id in the request does not match the partition's log."""

    code = 103


class TransactionAbortableError(BrokerError):
    """The transaction failed on the broker; aborting it lets the producer go on."""

    code = 120


class RebootstrapRequiredError(BrokerError):
    """The broker asks the client to bootstrap its metadata again."""

    code = 129


# --- SASL settings and credentials (netkafka.client.sasl).  A broker's refusal of
# the credentials is SaslAuthenticationFailedError (code 58) above; the client raises
# it too when the broker's own proof fails (a SCRAM server signature that does not
# verify), since either way the two sides do not share the secret.


class SaslConfigError(KafkaError, ValueError):
    """A SASL setting is missing, unknown or invalid, or does not fit the others;
    the message names the setting.  Raised when the producer is built, before any
    connection."""


class JaasConfigError(SaslConfigError):
    """A sasl.jaas.config string does not parse, or lacks what its mechanism needs;
    the message names the position or the option."""


class SaslLibraryMissingError(KafkaError, ImportError):
    """A SASL mechanism needs an optional library that is not installed; the message
    names the extra that installs it (e.g. ``pip install 'netkafka[gssapi]'``)."""


class OAuthTokenError(KafkaError):
    """An OAUTHBEARER token could not be had: the token endpoint was unreachable,
    answered an HTTP error, or answered without a usable token; or a token provider
    failed or returned something that is not a token, or extensions the broker
    would refuse.

    Attributes:
        url: the token endpoint, or None when the token came from elsewhere.
        status: the endpoint's HTTP status, or None when there was no answer.
    Retriable when the endpoint may answer later (no answer, HTTP 429 or 5xx), unless
    the raiser says otherwise (retriable=True: a provider's or signer's own failure,
    which may pass as an unreachable broker does; retriable=False: an endpoint whose
    certificate does not verify, which no later try cures).
    """

    def __init__(self, message, *, url=None, status=None, retriable=None):
        super().__init__(message)
        self.url = url
        self.status = status
        self.retriable = retriable if retriable is not None else (
            url is not None and (status is None or status == 429 or status >= 500))


def refuses_credentials(error):
    """True for a connection failure that waiting does not cure, so that a record or a
    wait for metadata fails with it at once instead of after max_block_ms or
    delivery_timeout_ms: an AuthenticationError, or an OAuthTokenError that is not
    retriable (a token endpoint refusing the client's secret, a token provider that
    failed)."""
    return isinstance(error, AuthenticationError) or (
        isinstance(error, OAuthTokenError) and not error.retriable)


# --- kafka-python 3's names (kafka.errors) for the classes above.

BrokerResponseError = BrokerError
KafkaProtocolError = ProtocolError
UnknownError = UnknownServerError
CorruptRecordError = CorruptRecordException = CorruptMessageError
NotLeaderForPartitionError = NotLeaderOrFollowerError
NetworkExceptionError = NetworkError
MessageSizeTooLargeError = MessageTooLargeError
UnsupportedCodecError = CompressionError
# kafka-python raises it where netkafka raises IncompatibleBrokerError: no version of a
# needed API that both sides speak (there a subclass of UnsupportedVersionError).
IncompatibleBrokerVersion = IncompatibleBrokerError
KAFKA_PYTHON_NAMES = (
    "BrokerResponseError", "CorruptRecordError", "CorruptRecordException",
    "IllegalArgumentError", "IllegalStateError", "IncompatibleBrokerVersion",
    "KafkaConfigurationError", "KafkaConnectionError", "KafkaError", "KafkaProtocolError",
    "KafkaTimeoutError", "MessageSizeTooLargeError", "NetworkExceptionError",
    "NotLeaderForPartitionError", "UnknownError", "UnsupportedCodecError",
)


# --- Transactions: client-side errors (the broker's codes have their classes above).


class TransactionStateError(IllegalStateError):
    """A transactional call came in a state where it makes no sense: begin twice, commit
    with no transaction open, send() outside a transaction of a transactional producer
    (an IllegalStateError, as kafka-python's and the Java client's).  The message names
    the call and the state."""


class TransactionAbortRequiredError(KafkaError):
    """The open transaction failed -- a record of it, or a request for it -- so it cannot
    commit: abort_transaction() is the only way on (then a new transaction).

    Attributes:
        cause: the first failure (also the exception's __cause__).
    """

    def __init__(self, message, cause=None):
        super().__init__(message)
        self.cause = cause


class TransactionAbortedError(KafkaError):
    """The record was not sent: its transaction was aborted first (abort_transaction())."""


# -- The write-ahead log (wal_dir) --------------------------------------------------------


class WalError(KafkaError):
    """Base of the write-ahead log's errors; the message names the directory or file."""


class WalLockedError(WalError):
    """The WAL directory is in use by another producer, in this process or another
    (its lock file is held): one producer per directory."""


class WalVersionError(WalError):
    """A WAL segment was written in a format version this netkafka does not read:
    replay it with the netkafka that wrote it, or move the directory away."""


class WalCorruptError(WalError):
    """A file in the WAL directory is not a netkafka WAL segment, a segment's header is
    bad where no crash leaves one (before later segments, or over entries), or an entry
    passes its checksum but does not parse: not a torn write, which recovery truncates
    and counts."""


class WalFullError(WalError):
    """The WAL is at wal_max_bytes and no segment can be reclaimed yet: records wait
    for acknowledgements, as they wait for buffer_memory."""


class WalStorageError(WalError):
    """The OS refused a WAL file operation (disk full, permission denied, I/O error):
    nothing was reported durable that is not.

    Attributes:
        errno: the OS's error number, or None.
    """

    def __init__(self, message, errno=None):
        super().__init__(message)
        self.errno = errno


class RecordSpooledError(WalError):
    """on_delivery_timeout='spool': the record's delivery timed out, and the record is
    kept in the write-ahead log and sent again when the cluster answers (by this
    producer, or by the next one that opens the WAL).  Its future fails with this; the
    delivery error it stands for is its __cause__."""
