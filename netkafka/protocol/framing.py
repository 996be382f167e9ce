"""What every API module builds on: API keys, request framing, response headers.

Every request is a frame

    size int32 | api_key int16 | api_version int16 | correlation_id int32 |
    client_id (int16-length nullable string) | [tagged fields] | body

The tagged fields after client_id are there when the request version is
flexible (request header v2; v1 otherwise).  A response is

    size int32 | correlation_id int32 | [tagged fields] | body

with the tagged fields when the response version is flexible (response header
v1), except that ApiVersions responses always use header v0.  The connection
reads the size and the correlation id; decoders get the rest.

An API module declares its ApiSpec (key, version range, first flexible
version), frames requests with start_request / finish_request and reads
answers through response_reader.  Nothing here keeps state: any thread may
call any function.
"""
import enum
import struct
import uuid
from dataclasses import dataclass

from netkafka.errors import IllegalArgumentError, ProtocolError
from netkafka.protocol._reader import Reader

# Kafka's "no id" for topic ids.
ZERO_UUID = uuid.UUID(int=0)

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# Kafka's bound on a STRING field's UTF-8 bytes (its int16 length; the Java client
# refuses longer ones in compact strings too).
STRING_MAX_BYTES = 0x7FFF


def wire_string(name, text):
    """text as a Kafka string field carries it: its UTF-8 bytes.

    Called where the caller hands over a string that goes on the wire (a topic, the
    client id, a header key ...), so that a string no request could carry is refused
    there, naming it, before anything keeps it: stored, it would make every later
    request that carries it fail to encode.

    Args:
        name: the argument or setting, as the message names it ("topic").

    Raises:
        TypeError: text is not a str.
        IllegalArgumentError: text cannot be UTF-8 encoded (a lone surrogate) or its
            encoding is longer than STRING_MAX_BYTES.
    """
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, not {type(text).__name__}")
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise IllegalArgumentError(
            f"{name} {_shortened(text)} cannot be sent: Kafka strings are UTF-8, and "
            f"{exc.object[exc.start:exc.end]!r} at index {exc.start} has no UTF-8 form "
            f"({exc.reason})") from None
    if len(data) > STRING_MAX_BYTES:
        raise IllegalArgumentError(
            f"{name} {_shortened(text)} cannot be sent: it is {len(data)} bytes in UTF-8, "
            f"and a Kafka string holds at most {STRING_MAX_BYTES}")
    return data


def _shortened(text):
    # A 40 kB name would bury the message.
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}... ({len(text)} characters)"


class ApiKey(enum.IntEnum):
    """The Kafka APIs netkafka speaks, by their wire number."""

    PRODUCE = 0
    METADATA = 3
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    SASL_AUTHENTICATE = 36
    DESCRIBE_PRODUCERS = 61

    @property
    def kafka_name(self):
        """Kafka's name for the API ("InitProducerId"): the member's name in CamelCase."""
        return "".join(word.capitalize() for word in self.name.split("_"))


def api_name(api_key):
    """Kafka's name for an API key ("Produce"), for messages."""
    try:
        return ApiKey(api_key).kafka_name
    except ValueError:
        return f"API {api_key}"


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """The versions netkafka speaks of one API; each API module declares its own."""

    key: ApiKey
    min_version: int
    max_version: int
    flexible_version: int  # first version with compact types and tagged fields

    @property
    def versions(self):
        """(lowest, highest) version netkafka encodes and decodes."""
        return (self.min_version, self.max_version)

    def check_version(self, version):
        """Raises ValueError for a version netkafka does not speak; returns
        whether the version is flexible."""
        if not self.min_version <= version <= self.max_version:
            raise ValueError(f"{self.key.kafka_name} v{version} is not supported "
                             f"(v{self.min_version}..v{self.max_version})")
        return version >= self.flexible_version


@dataclass(frozen=True, slots=True)
class Node:
    """A broker's address as a response names it (Metadata brokers, Produce NodeEndpoints)."""

    node_id: int  # the broker's id
    host: str  # host name or address its listener advertises
    port: int  # that listener's port
    rack: object = None  # its rack (str), or None if unassigned


_MAX_PORT = 65535


def check_node_address(node_id, host, port):
    """Raises ProtocolError naming what no broker sends for a broker it names (Metadata
    brokers, a FindCoordinator answer): a negative node id (a bootstrap connection's),
    or a host or port that cannot be connected to."""
    who = f"broker {node_id}"
    if node_id < 0:
        raise ProtocolError(f"{who} has a negative node id")
    # A host name or address never holds spaces or control characters; an empty
    # one would connect to the local host.
    if not host or not host.isprintable() or " " in host:
        raise ProtocolError(f"{who} has host {host!r}, not a host name or address")
    if not 0 < port <= _MAX_PORT:
        raise ProtocolError(f"{who} has port {port}, outside 1..{_MAX_PORT}")


# --- requests


class Writer:
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

    def int8(self, value):
        self.buf += _INT8.pack(value)

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
        data = wire_string("a string field", text)
        if compact:
            self.uvarint(len(data) + 1)
        else:
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

    def topic_partition_indexes(self, partitions):
        """Writes {topic: [partition index]} as the array of topics, each its name and
        its int32 partition indexes, that several requests share."""
        self.array_length(len(partitions))
        for topic, indexes in partitions.items():
            self.string(topic)
            self.array_length(len(indexes))
            for index in indexes:
                self.int32(index)
            self.tagged_fields()

    def take(self):
        """Returns the bytes written so far and starts a new buffer."""
        out = self.buf
        self.buf = bytearray()
        return out


def start_request(api, version, correlation_id, client_id):
    """A writer holding a size placeholder and the request header.

    Args:
        api: the ApiSpec of the request's API.
        version: the request version (ValueError if netkafka does not speak it).
        correlation_id: int32 echoed in the response.
        client_id: the client id (str or None).
    """
    w = Writer(api.check_version(version))
    w.int32(0)  # frame size, filled in by finish_request
    w.int16(api.key)
    w.int16(version)
    w.int32(correlation_id)
    # ClientId keeps its int16 length even in header v2, so that any broker can
    # read the header of a request whose version it does not know.
    w.nullable_string(client_id, compact=False)
    w.tagged_fields()
    return w


def finish_request(w):
    """The complete frame written to w, its size filled in."""
    frame = w.take()
    _INT32.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


# --- responses


def response_reader(api, data, version):
    """A Reader over a response (data: after the correlation id), past its
    header's tagged fields (response header v1, flexible versions).

    Not for ApiVersions, whose response header is always v0.
    """
    flexible = api.check_version(version)
    r = Reader(data, flexible)
    if flexible:
        r.skip_tagged_fields()
    return r


@dataclass(frozen=True, slots=True)
class PartitionErrorsResponse:
    """An answer of per-partition error codes: AddPartitionsToTxn (up to v3) and
    TxnOffsetCommit, which share their layout."""

    throttle_time_ms: int
    errors: dict  # (topic, partition) -> error code, for every partition answered


def decode_partition_errors_response(api, data, version):
    """Decodes an answer of api laid out as throttle time, then topics, each a name and
    its partitions, each an index and an error code (data: after the correlation id)."""
    r = response_reader(api, data, version)
    throttle_time_ms = r.int32()
    flexible = r.flexible
    # A topic: name, partition count (and tagged fields); a partition: index, error
    # code (and tagged fields).
    topic_min, partition_min = (3, 7) if flexible else (6, 6)
    codes = {}
    for _ in range(r.required_array_length(topic_min, "topics")):
        topic = r.string()
        for _ in range(r.required_array_length(partition_min, "partitions")):
            partition = r.int32()
            codes[(topic, partition)] = r.int16()
            if flexible:
                r.skip_tagged_fields()
        if flexible:
            r.skip_tagged_fields()
    if flexible:
        r.skip_tagged_fields()
    r.expect_end()
    return PartitionErrorsResponse(throttle_time_ms, codes)
