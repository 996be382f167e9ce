"""Kafka wire protocol: request encoders, response decoders, version negotiation.

Covers the APIs a producer needs: ApiVersions, Metadata, Produce and
InitProducerId.  Every request is a frame

    size int32 | api_key int16 | api_version int16 | correlation_id int32 |
    client_id (int16-length nullable string) | [tagged fields] | body

The tagged fields after client_id are there when the request version is
flexible (request header v2; v1 otherwise).  A response is

    size int32 | correlation_id int32 | [tagged fields] | body

with the tagged fields when the response version is flexible (response header
v1), except that ApiVersions responses always use header v0.

Decoders take a response *after* its correlation id (the connection reads that
to match the response with its request) and read through
netkafka.protocol._produce.Reader, which bounds-checks every length and count; the hot
one, Produce, is native.  Malformed input raises ProtocolError.

Encoders return bytes, except encode_produce_request, which returns a list of
buffers for socket.sendmsg so that sealed record batches go out as they are.

Nothing here keeps state: any thread may call any function.
"""
import enum
import re
import struct
import uuid
from dataclasses import dataclass

import netkafka
from netkafka.protocol._produce import (
    PRODUCE_FLEXIBLE_VERSION, PRODUCE_TOPIC_ID_VERSION, PRODUCE_VERSIONS, Node, ProduceResponse,
    Reader, decode_produce_response,
)
from netkafka.errors import (
    IncompatibleBrokerError, ProtocolError, UnsupportedVersionError, error_for_code,
)

__all__ = [
    "API_VERSIONS", "API_VERSIONS_VERSION", "INIT_PRODUCER_ID", "METADATA", "PRODUCE",
    "PRODUCE_TOPIC_ID_VERSION", "SUPPORTED_VERSIONS", "ApiKey", "ApiVersionsResponse",
    "InitProducerIdResponse", "MetadataResponse", "Node", "PartitionMetadata",
    "ProduceResponse", "TopicMetadata", "api_name", "decode_api_versions_response",
    "decode_init_producer_id_response", "decode_metadata_response",
    "decode_produce_response", "encode_api_versions_request",
    "encode_init_producer_id_request", "encode_metadata_request", "encode_produce_request",
    "negotiate_versions",
]


class ApiKey(enum.IntEnum):
    """The Kafka APIs netkafka speaks, by their wire number."""

    PRODUCE = 0
    METADATA = 3
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22


PRODUCE = ApiKey.PRODUCE
METADATA = ApiKey.METADATA
API_VERSIONS = ApiKey.API_VERSIONS
INIT_PRODUCER_ID = ApiKey.INIT_PRODUCER_ID

_API_NAMES = {
    PRODUCE: "Produce",
    METADATA: "Metadata",
    API_VERSIONS: "ApiVersions",
    INIT_PRODUCER_ID: "InitProducerId",
}

# Versions netkafka encodes and decodes, per API: (lowest, highest).
SUPPORTED_VERSIONS = {
    # 3..13 (the native decoder's): v3 is the first with RecordBatch v2 and
    # Kafka 4.x's floor; v13 names topics by id (encode_produce_request needs
    # topic_ids there).
    PRODUCE: PRODUCE_VERSIONS,
    METADATA: (0, 13),
    # v5 (Kafka 4.4: cluster and node id checks, REBOOTSTRAP_REQUIRED) is left
    # out until the connection layer can act on REBOOTSTRAP_REQUIRED.
    API_VERSIONS: (0, 4),
    # v6 (two-phase commit, KIP-939) is marked unstable in Kafka 4.x and not
    # offered by brokers unless unstable versions are switched on.
    INIT_PRODUCER_ID: (0, 5),
}

# A broker must offer a common version of these, or it cannot be used at all.
_REQUIRED_APIS = (PRODUCE, METADATA)

# First flexible version of each API (compact types, tagged fields).
_FLEXIBLE_FROM = {PRODUCE: PRODUCE_FLEXIBLE_VERSION, METADATA: 9, API_VERSIONS: 3,
                  INIT_PRODUCER_ID: 2}

# The ApiVersions version a connection opens with: the highest we speak, which
# every Kafka 4.x broker accepts.
API_VERSIONS_VERSION = SUPPORTED_VERSIONS[API_VERSIONS][1]

_UNSUPPORTED_VERSION = UnsupportedVersionError.code

# ClientSoftwareName/Version must match this, or the broker answers INVALID_REQUEST.
_SOFTWARE_NAME_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_ZERO_UUID = uuid.UUID(int=0)


def api_name(api_key):
    """Kafka's name for an API key ("Produce"), for messages."""
    return _API_NAMES.get(api_key, f"API {api_key}")


def _check_version(api_key, version):
    """Raises ValueError for a version netkafka does not speak; returns whether
    the version is flexible."""
    low, high = SUPPORTED_VERSIONS[api_key]
    if not low <= version <= high:
        raise ValueError(f"{api_name(api_key)} v{version} is not supported (v{low}..v{high})")
    return version >= _FLEXIBLE_FROM[api_key]


# --- encoding


class _Writer:
    """Appends Kafka wire types to a bytearray.

    Requests other than Produce are small and rare, and Produce batches never
    pass through here (only the framing around them), so plain Python does.
    """

    __slots__ = ("buf", "flexible")

    def __init__(self, flexible):
        self.buf = bytearray()   # bytes written so far
        self.flexible = flexible  # compact lengths and tagged fields

    def boolean(self, value):
        self.buf.append(1 if value else 0)

    def int16(self, value):
        self.buf += _INT16.pack(value)

    def int32(self, value):
        self.buf += _INT32.pack(value)

    def int64(self, value):
        self.buf += _INT64.pack(value)

    def uvarint(self, value):
        if not 0 <= value <= 0xFFFFFFFF:
            raise ValueError(f"unsigned varint out of range: {value}")
        while value >= 0x80:
            self.buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self.buf.append(value)

    def uuid(self, value):
        self.buf += value.bytes

    def nullable_string(self, text, compact=None):
        """Writes a string or None; compact defaults to the writer's flexibility."""
        compact = self.flexible if compact is None else compact
        if text is None:
            if compact:
                self.uvarint(0)
            else:
                self.int16(-1)
            return
        data = text.encode("utf-8")
        if compact:
            self.uvarint(len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise ValueError(f"string of {len(data)} bytes is too long (at most 32767)")
            self.int16(len(data))
        self.buf += data

    def string(self, text):
        if text is None:
            raise ValueError("string may not be None")
        self.nullable_string(text)

    def array_length(self, count):
        """Writes an array's count; None writes a null array."""
        if self.flexible:
            self.uvarint(0 if count is None else count + 1)
        else:
            self.int32(-1 if count is None else count)

    def bytes_length(self, size_bytes):
        """Writes the length of a bytes / records field (never null here)."""
        if self.flexible:
            self.uvarint(size_bytes + 1)
        else:
            self.int32(size_bytes)

    def tagged_fields(self):
        """Writes an empty tagged-field section (flexible versions only)."""
        if self.flexible:
            self.buf.append(0)

    def take(self):
        """Returns the bytes written so far and starts a new buffer."""
        out = self.buf
        self.buf = bytearray()
        return out


def _start_request(api_key, version, correlation_id, client_id):
    """A writer holding a size placeholder and the request header."""
    flexible = _check_version(api_key, version)
    w = _Writer(flexible)
    w.int32(0)  # frame size, filled in by _finish_request
    w.int16(api_key)
    w.int16(version)
    w.int32(correlation_id)
    # ClientId keeps its int16 length even in header v2, so that any broker can
    # read the header of a request whose version it does not know.
    w.nullable_string(client_id, compact=False)
    w.tagged_fields()
    return w


def _finish_request(w):
    frame = w.take()
    struct.pack_into(">i", frame, 0, len(frame) - 4)
    return bytes(frame)


def encode_api_versions_request(correlation_id, client_id, version,
                                client_software_name="netkafka",
                                client_software_version=None):
    """Encodes an ApiVersions request (v0..v4) as a complete frame.

    Args:
        correlation_id: int32 echoed in the response.
        client_id: the client id (str or None).
        version: the request version; a broker that does not know it answers
            UNSUPPORTED_VERSION with a v0 body naming its range.
        client_software_name, client_software_version: reported to the broker
            from v3 on; letters, digits, '-' and '.', starting and ending with
            a letter or digit.  The version defaults to netkafka's.
    """
    w = _start_request(API_VERSIONS, version, correlation_id, client_id)
    if version >= 3:
        if client_software_version is None:
            client_software_version = netkafka.__version__
        for value in (client_software_name, client_software_version):
            if not _SOFTWARE_NAME_RE.fullmatch(value):
                raise ValueError(f"client software name/version {value!r} would be "
                                 "refused by the broker: use letters, digits, '-' and '.'")
            w.string(value)
        w.tagged_fields()
    return _finish_request(w)


def encode_metadata_request(correlation_id, client_id, version, topics=None,
                            allow_auto_topic_creation=False):
    """Encodes a Metadata request (v0..v13) as a complete frame.

    Args:
        correlation_id, client_id, version: as for every request.
        topics: topic names to describe, or None for all topics.  v0 cannot ask
            for no topics (its empty list means all).
        allow_auto_topic_creation: let the broker create missing topics, if its
            auto.create.topics.enable allows (v4+; older versions always may).
    """
    w = _start_request(METADATA, version, correlation_id, client_id)
    if version == 0:
        if topics is not None and not topics:
            raise ValueError("Metadata v0 cannot ask for no topics (an empty list means all)")
        topics = topics or []
    if topics is None:
        w.array_length(None)
    else:
        w.array_length(len(topics))
        for name in topics:
            if version >= 10:
                w.uuid(_ZERO_UUID)  # by name, not by id
            w.string(name)
            w.tagged_fields()
    if version >= 4:
        w.boolean(allow_auto_topic_creation)
    if 8 <= version <= 10:
        w.boolean(False)  # include cluster authorized operations
    if version >= 8:
        w.boolean(False)  # include topic authorized operations
    w.tagged_fields()
    return _finish_request(w)


def encode_init_producer_id_request(correlation_id, client_id, version, transactional_id=None,
                                    transaction_timeout_ms=-1, producer_id=-1,
                                    producer_epoch=-1):
    """Encodes an InitProducerId request (v0..v5) as a complete frame.

    Args:
        correlation_id, client_id, version: as for every request.
        transactional_id: None for an idempotent (non-transactional) producer.
        transaction_timeout_ms: only meaningful with a transactional id.
        producer_id, producer_epoch: the current id and epoch when asking to
            bump the epoch (v3+), else -1.
    """
    w = _start_request(INIT_PRODUCER_ID, version, correlation_id, client_id)
    w.nullable_string(transactional_id)
    w.int32(transaction_timeout_ms)
    if version >= 3:
        w.int64(producer_id)
        w.int16(producer_epoch)
    elif (producer_id, producer_epoch) != (-1, -1):
        raise ValueError(f"InitProducerId v{version} cannot carry a producer id (v3+)")
    w.tagged_fields()
    return _finish_request(w)


def encode_produce_request(correlation_id, client_id, version, acks, timeout_ms, topic_data,
                           transactional_id=None, topic_ids=None):
    """Encodes a Produce request (v3..v13) around the batches, without copying them.

    Args:
        correlation_id, client_id, version: as for every request.
        acks: 0 (no response), 1 (leader) or -1 (all in-sync replicas).
        timeout_ms: how long the broker may wait for the replicas (acks=-1).
        topic_data: {topic name: [(partition, batch), ...]}; a batch is any
            contiguous buffer holding sealed RecordBatch bytes (one or more
            batches of that partition).
        transactional_id: the transactional id, or None.
        topic_ids: {topic name: uuid.UUID}; required from v13, which names
            topics by id (the ids come from Metadata v10+).

    Returns:
        A list of buffers for socket.sendmsg: framing bytes, then each batch's
        memory as given (a memoryview of it), with the framing between and
        after.  The first buffer starts with the frame size, computed up
        front.  A batch must not change until the list has been written.
    """
    if acks not in (0, 1, -1):
        raise ValueError(f"acks must be 0, 1 or -1 (all), not {acks!r}")
    w = _start_request(PRODUCE, version, correlation_id, client_id)
    if version >= PRODUCE_TOPIC_ID_VERSION and topic_ids is None:
        raise ValueError(f"Produce v{version} names topics by id: pass topic_ids")
    w.nullable_string(transactional_id)
    w.int16(acks)
    w.int32(timeout_ms)
    w.array_length(len(topic_data))
    buffers = []
    for topic, partitions in topic_data.items():
        if version >= PRODUCE_TOPIC_ID_VERSION:
            topic_id = topic_ids.get(topic)
            if topic_id is None or topic_id == _ZERO_UUID:
                raise ValueError(f"Produce v{version} needs the topic id of {topic!r}")
            w.uuid(topic_id)
        else:
            w.string(topic)
        w.array_length(len(partitions))
        for partition, batch in partitions:
            view = memoryview(batch)
            if not view.contiguous:
                raise ValueError(f"the batch for {topic!r} partition {partition} is not "
                                 "a contiguous buffer")
            if view.ndim != 1 or view.format != "B":
                view = view.cast("B")
            w.int32(partition)
            w.bytes_length(view.nbytes)
            buffers.append(w.take())
            buffers.append(view)
            w.tagged_fields()  # partition
        w.tagged_fields()  # topic
    w.tagged_fields()  # request
    tail = w.take()
    if tail or not buffers:
        buffers.append(tail)
    size = sum(len(b) if isinstance(b, bytearray) else b.nbytes for b in buffers) - 4
    if size > 0x7FFFFFFF:
        raise ValueError(f"Produce request of {size} bytes exceeds the int32 frame size")
    struct.pack_into(">i", buffers[0], 0, size)
    return buffers


# --- decoding


@dataclass(frozen=True, slots=True)
class ApiVersionsResponse:
    """A decoded ApiVersions response."""

    error_code: int
    api_versions: dict  # api key -> (min version, max version) the broker supports
    throttle_time_ms: int  # 0 in v0 bodies


def decode_api_versions_response(data, version):
    """Decodes an ApiVersions response (data: after the correlation id).

    A broker that does not know the request's version answers with a v0 body
    and UNSUPPORTED_VERSION (its ApiVersions range inside), and the response
    header of ApiVersions is always v0 (no tagged fields).
    """
    flexible = _check_version(API_VERSIONS, version)
    r = Reader(data, flexible)
    error_code = r.int16()
    if error_code == _UNSUPPORTED_VERSION:
        version = 0
        r.flexible = False
    api_versions = {}
    for _ in range(_required_array(r, 7 if r.flexible else 6, "api keys")):
        api_key = r.int16()
        api_versions[api_key] = (r.int16(), r.int16())
        if r.flexible:
            r.skip_tagged_fields()
    throttle_time_ms = r.int32() if version >= 1 else 0
    if r.flexible:
        r.skip_tagged_fields()  # supported and finalized features: not needed
    r.expect_end()
    return ApiVersionsResponse(error_code, api_versions, throttle_time_ms)


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition as a Metadata response describes it."""

    error_code: int
    partition: int
    leader: int  # broker id of the leader, -1 if none
    leader_epoch: int  # -1 before v7
    replicas: tuple  # broker ids hosting the partition
    isr: tuple  # broker ids in sync with the leader
    offline_replicas: tuple  # broker ids of offline replicas; () before v5


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic as a Metadata response describes it."""

    error_code: int
    name: object  # str; None only for a topic asked for by id (v12+)
    topic_id: object  # uuid.UUID from v10; None before, or if the broker gave none
    is_internal: bool
    partitions: list  # PartitionMetadata


@dataclass(frozen=True, slots=True)
class MetadataResponse:
    """A decoded Metadata response."""

    throttle_time_ms: int
    brokers: list  # Node
    cluster_id: object  # str or None (v2+)
    controller_id: int  # -1 if unknown or before v1
    topics: list  # TopicMetadata
    error_code: int  # top-level error (v13+), else 0


def decode_metadata_response(data, version):
    """Decodes a Metadata response (data: after the correlation id)."""
    flexible = _check_version(METADATA, version)
    r = Reader(data, flexible)
    if flexible:
        r.skip_tagged_fields()  # response header v1
    # Each length/count field is 1 byte compact, else 2 (strings) or 4 (arrays).
    string_min, array_min, tags_min = (1, 1, 1) if flexible else (2, 4, 0)
    throttle_time_ms = r.int32() if version >= 3 else 0

    broker_min = 4 + string_min + 4 + (string_min if version >= 1 else 0) + tags_min
    brokers = []
    for _ in range(_required_array(r, broker_min, "brokers")):
        node_id = r.int32()
        host = r.string()
        port = r.int32()
        rack = r.nullable_string() if version >= 1 else None
        if flexible:
            r.skip_tagged_fields()
        brokers.append(Node(node_id, host, port, rack))
    cluster_id = r.nullable_string() if version >= 2 else None
    controller_id = r.int32() if version >= 1 else -1

    partition_min = (2 + 4 + 4 + (4 if version >= 7 else 0)
                     + array_min * (3 if version >= 5 else 2) + tags_min)
    topic_min = (2 + string_min + (16 if version >= 10 else 0) + (1 if version >= 1 else 0)
                 + array_min + (4 if version >= 8 else 0) + tags_min)
    topics = []
    for _ in range(_required_array(r, topic_min, "topics")):
        error_code = r.int16()
        name = r.nullable_string() if version >= 12 else r.string()
        topic_id = r.uuid() if version >= 10 else None
        if topic_id == _ZERO_UUID:
            topic_id = None  # Kafka's "no id"
        is_internal = r.boolean() if version >= 1 else False
        partitions = []
        for _ in range(_required_array(r, partition_min, "partitions")):
            partitions.append(PartitionMetadata(
                error_code=r.int16(),
                partition=r.int32(),
                leader=r.int32(),
                leader_epoch=r.int32() if version >= 7 else -1,
                replicas=tuple(r.int32_array()),
                isr=tuple(r.int32_array()),
                offline_replicas=tuple(r.int32_array()) if version >= 5 else (),
            ))
            if flexible:
                r.skip_tagged_fields()
        if version >= 8:
            r.int32()  # topic authorized operations: not asked for
        if flexible:
            r.skip_tagged_fields()
        topics.append(TopicMetadata(error_code, name, topic_id, is_internal, partitions))
    if 8 <= version <= 10:
        r.int32()  # cluster authorized operations: not asked for
    error_code = r.int16() if version >= 13 else 0
    if flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return MetadataResponse(throttle_time_ms, brokers, cluster_id, controller_id, topics,
                            error_code)


@dataclass(frozen=True, slots=True)
class InitProducerIdResponse:
    """A decoded InitProducerId response."""

    throttle_time_ms: int
    error_code: int
    producer_id: int
    producer_epoch: int


def decode_init_producer_id_response(data, version):
    """Decodes an InitProducerId response (data: after the correlation id)."""
    flexible = _check_version(INIT_PRODUCER_ID, version)
    r = Reader(data, flexible)
    if flexible:
        r.skip_tagged_fields()  # response header v1
    response = InitProducerIdResponse(
        throttle_time_ms=r.int32(),
        error_code=r.int16(),
        producer_id=r.int64(),
        producer_epoch=r.int16(),
    )
    if flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return response


def _required_array(r, min_item_bytes, what):
    at = r.position
    count = r.array_length(min_item_bytes)
    if count < 0:
        raise ProtocolError(f"null {what} array at offset {at}")
    return count


# --- negotiation


def negotiate_versions(response):
    """Picks, for each API netkafka speaks, the highest version both sides support.

    Args:
        response: the broker's ApiVersionsResponse.

    Returns:
        {ApiKey: version} for every API with a common version.  Produce and
        Metadata are always there; an API the broker lacks is left out (the
        caller fails when it needs it, e.g. InitProducerId for idempotence).

    Raises:
        IncompatibleBrokerError: no common version of Produce or Metadata
            (e.g. a broker older than Produce v3), naming both ranges.
        BrokerError: the response carries an error code; for
            UNSUPPORTED_VERSION the message names the broker's ApiVersions range
            to retry with.
    """
    if response.error_code:
        theirs = response.api_versions.get(API_VERSIONS)
        hint = (f"; the broker supports ApiVersions v{theirs[0]}..v{theirs[1]}"
                if theirs else "")
        raise error_for_code(response.error_code, f"ApiVersions request refused{hint}")
    chosen = {}
    for api_key, (low, high) in SUPPORTED_VERSIONS.items():
        theirs = response.api_versions.get(api_key)
        if theirs is not None and max(low, theirs[0]) <= min(high, theirs[1]):
            chosen[api_key] = min(high, theirs[1])
        elif api_key in _REQUIRED_APIS:
            offered = ("does not offer it" if theirs is None
                       else f"supports v{theirs[0]}..v{theirs[1]}")
            raise IncompatibleBrokerError(
                f"the broker {offered} for {api_name(api_key)}; netkafka needs "
                f"{api_name(api_key)} v{low}..v{high}"
                + (" (Kafka 0.11 or newer)" if api_key == PRODUCE else ""))
    return chosen
