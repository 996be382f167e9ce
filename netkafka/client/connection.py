"""One broker connection: a non-blocking socket owned by one I/O thread.

Wire framing (both directions): a 4-byte big-endian size, then that many bytes.
A request starts with api_key (int16), api_version (int16) and correlation_id
(int32); a response starts with the correlation_id of its request.  Kafka
answers the requests of one connection in the order they were sent, so the
connection keeps them in a FIFO and checks each answer against the oldest.

Setup: from DISCONNECTED to READY a connection passes, in this order, RESOLVING
(the host's addresses, looked up on a resolver thread, resolver.py: an I/O thread
never waits for DNS; an IP literal skips it) -> CONNECTING (TCP, to one address)
-> TRANSPORT_HANDSHAKE (the transport's own, e.g. TLS; plain TCP
has none) -> NEGOTIATING_VERSIONS (ApiVersions) -> AUTHENTICATING (SASL, on SASL_PLAINTEXT
and SASL_SSL; others pass it at once) -> READY.  _io_advance() is the one place that moves it along; a stage with
nothing to do passes at once.  Versions come before authentication because the
SASL requests' versions are negotiated, and brokers answer one ApiVersions
request before authentication for that reason.  A failure names the stage it
happened in.  A connection failing in setup moves on to the host's next address:
at once when it did not reach the broker (TCP, a setup timeout), after the reconnect
backoff when the broker refused it (the TLS or SASL handshake, authentication), as
Java's ClusterConnectionStates takes the next address at each attempt; once every
address failed, the round ends, and the next one (after the reconnect backoff)
resolves the name again.  Each attempt's setup (the lookup, or
one address from TCP connect to READY) is bounded by a setup timeout that doubles
with consecutive failed setups, from connect_timeout_ms up to connect_timeout_max_ms,
with +-20% jitter (the Java client's socket.connection.setup.timeout.ms and its
max), as the reconnect backoff grows: exponential_ms() computes both.

SASL (client/sasl/ holds the mechanisms): SaslHandshake v1 names the mechanism,
then SaslAuthenticate carries each of its messages.  A mechanism's prepare() may
block (a token endpoint, a KDC), so it runs on a short-lived thread of its own
that hands the mechanism back and wakes the I/O thread; PLAIN and SCRAM have
nothing to prepare and start at once.  KIP-368: when the broker's last answer
gives a session lifetime, the connection re-authenticates after 85-95% of it,
while READY: a new mechanism is prepared while requests keep flowing; from its
SaslHandshake until the exchange ends no new request is framed (the broker must
see the exchange uninterrupted), but requests already in flight stay in flight
and are answered in order, before the SASL answers.  A re-authentication whose
prepare() fails (a token endpoint down), or has not ended within request_timeout_ms
(a provider that hangs), leaves the connection and its session as they are while the
session lasts: it is tried again, with a warning, within half the time the session has
left; only a failure once the session has ended fails the connection, and a prepare()
still running then fails it at the session's end.

Write path (modelled on uvloop's stream transport): requests are framed into a
queue of memoryviews -- the request header bytes and, for Produce, the sealed
record batches' own memory -- handed to the transport (transport.py), which for
plain TCP passes them to ``socket.sendmsg`` as they are.  EAGAIN counts as 0
bytes written; a partial write slices the head view, so batch bytes are never
copied.  Every byte accepted for this broker and not yet taken by the transport
counts as outbound: above ``high_watermark_bytes`` the connection is unwritable
until it drains to ``low_watermark_bytes``.

Threads: everything named ``_io_*`` or documented "I/O thread" runs only on
the owning I/O thread (see io_pool.py).  The few fields other threads touch
are guarded by ``_lock`` and say so.  Lock order: ``_lock``, then the lock of a
BackgroundResult (the resolver's and SASL's hand-overs, background.py), a leaf
that is taken with or without ``_lock`` held and never holds another.
"""
import collections
import errno
import functools
import logging
import operator
import os
import selectors
import socket
import struct
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from netkafka import errors
from netkafka._validate import check_choice, check_int
from netkafka.client.background import BackgroundResult
from netkafka.client.tls import TLS_PROTOCOLS, TlsTransport
from netkafka.client.sasl import (
    SASL_PROTOCOLS, SaslMechanism, check_sasl_settings, create_mechanism,
)
from netkafka.client.resolver import (
    CLIENT_DNS_LOOKUPS, RESOLVE_CANONICAL_BOOTSTRAP_SERVERS_ONLY, USE_ALL_DNS_IPS, host_port,
    numeric_addresses, start_resolving,
)
from netkafka.client.retry import exponential_ms
from netkafka.client.transport import connect_tcp, drop_written, queue_buffers
from netkafka.errors import KafkaConnectionError, KafkaTimeoutError, RequestTimeoutError
from netkafka.protocol.api_versions import (
    API_VERSIONS_VERSION, decode_api_versions_response, encode_api_versions_request,
)
from netkafka.protocol.framing import ApiKey, api_name
from netkafka.protocol.sasl_authenticate import (
    decode_sasl_authenticate_response, encode_sasl_authenticate_request,
)
from netkafka.protocol.sasl_handshake import (
    decode_sasl_handshake_response, encode_sasl_handshake_request,
)
from netkafka.protocol.versions import SUPPORTED_VERSIONS, negotiate_versions

_MiB = 1024 * 1024
_log = logging.getLogger("netkafka.client.connection")

_SIZE = struct.Struct(">i")
# A request's deadline, as a C callable: io_next_deadline_ns() runs on every turn of
# the I/O loop, and a generator there cost a Python call per request in flight.
_DEADLINE_NS = operator.attrgetter("deadline_ns")
# A TLS record's first two bytes (content type: alert or handshake; major version 3):
# what a TLS listener answers a plaintext client with, read as a response size.
_TLS_RECORD_TYPES = (0x15, 0x16)
_TLS_MAJOR_VERSION = 0x03
# A re-authentication whose prepare() failed is tried again at most this much later:
# the Java client's wait before retrying a failed login refresh (10 s), which is what
# fetches its next token.
_REAUTH_RETRY_MAX_NS = 10_000_000_000
# The receive buffer's usual size: a few Produce answers at once.  For a larger
# response it doubles towards the response's size while the response is read.
_RX_BUFFER_BYTES = 64 * 1024

# Connection states.  Owned by the I/O thread; published copies under _lock.
DISCONNECTED = "disconnected"
RESOLVING = "resolving"  # the host's addresses being looked up on a resolver thread
CONNECTING = "connecting"  # TCP connect in progress
TRANSPORT_HANDSHAKE = "transport_handshake"  # the transport's handshake steps
NEGOTIATING_VERSIONS = "negotiating_versions"  # ApiVersions sent, answer awaited
AUTHENTICATING = "authenticating"  # SASL exchange (passed at once without SASL)
READY = "ready"
CLOSED = "closed"  # terminal: the pool shut down

# The setup stages in order (each one's successor), and how errors name them.
_NEXT_STAGE = {
    CONNECTING: TRANSPORT_HANDSHAKE,
    TRANSPORT_HANDSHAKE: NEGOTIATING_VERSIONS,
    NEGOTIATING_VERSIONS: AUTHENTICATING,
    AUTHENTICATING: READY,
}
_STAGE_NAMES = {
    RESOLVING: "name resolution",
    CONNECTING: "TCP connect",
    # Plain TCP has no handshake and passes this stage at once: only TLS is ever in it.
    TRANSPORT_HANDSHAKE: "the TLS handshake",
    NEGOTIATING_VERSIONS: "the ApiVersions handshake (is it a Kafka broker?)",
    AUTHENTICATING: "authentication",
}


@dataclass(frozen=True)
class ConnectionConfig:
    """Settings of every broker connection; defaults follow the Java client.

    Attributes:
        client_id: sent in every request header.
        request_timeout_ms: a request with no answer this long after it was
            handed to the connection fails, and the connection is closed
            (its later answers would be stuck behind the missing one).
            Default 30000.
        connect_timeout_ms / connect_timeout_max_ms: the setup timeout (the
            Producer's socket_connection_setup_timeout_ms and _max_ms): bound on
            one attempt's setup -- name resolution, or TCP connect, the
            TLS handshake, the ApiVersions handshake and authentication --
            so a port that accepts but does not speak Kafka fails within it.  It
            doubles with each consecutive failed setup (a READY connection
            that fails starts it again), up to the max, +-20% jitter.
            Defaults 10000 / 30000.
        client_dns_lookup: use_all_dns_ips or
            resolve_canonical_bootstrap_servers_only (resolver.py).
        max_in_flight_requests_per_connection: requests written and not yet
            answered, per connection.  Default 5.
        send_buffer_bytes / receive_buffer_bytes: SO_SNDBUF / SO_RCVBUF;
            -1 keeps the OS default.  Defaults 131072 / 32768.
        reconnect_backoff_ms / reconnect_backoff_max_ms: wait before the
            n-th reconnect attempt is reconnect_backoff_ms * 2**(n-1), capped
            at the max, with +-20% jitter.  Defaults 50 / 1000.
        connections_max_idle_ms: a connection with nothing to do for this
            long is closed (and reopened when work comes).  Default 540000.
        high_watermark_bytes / low_watermark_bytes: outbound bytes above
            high make the connection unwritable until they drain to low.
            Defaults 8 MiB / 4 MiB: high covers max_in_flight (5) requests of
            the default max_request_size (1 MiB) with room to spare, and a
            low of half the high keeps the state from flapping.
        max_response_bytes: a response size prefix above this is refused
            before anything is allocated (a non-Kafka peer's first bytes
            read as a size are usually huge).  Default 100 MiB, the broker's
            own socket.request.max.bytes.
        socket_options: (level, option, value) triples given to setsockopt()
            on every broker socket before connect (kafka-python's
            socket_options).  Default: TCP_NODELAY on.
        produce_version: None negotiates Produce as every API; 0..2 pins that
            legacy version (a producer's api_version below (0, 11)): a broker
            that does not offer it fails the handshake (IncompatibleBrokerError).
        security_protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
        ssl_context: the ssl.SSLContext of SSL and SASL_SSL connections (built
            and checked by config.ProducerConfig), None without TLS.
        sasl_settings: kafka-python's SASL settings (client.sasl.SASL_DEFAULTS
            names), checked by config.ProducerConfig; None without SASL.
    """

    client_id: str = "netkafka"
    request_timeout_ms: int = 30000
    connect_timeout_ms: int = 10000
    connect_timeout_max_ms: int = 30000
    client_dns_lookup: str = USE_ALL_DNS_IPS
    max_in_flight_requests_per_connection: int = 5
    send_buffer_bytes: int = 131072
    receive_buffer_bytes: int = 32768
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000
    connections_max_idle_ms: int = 540000
    high_watermark_bytes: int = 8 * _MiB
    low_watermark_bytes: int = 4 * _MiB
    max_response_bytes: int = 100 * _MiB
    socket_options: tuple = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)
    produce_version: object = None
    security_protocol: str = "PLAINTEXT"
    ssl_context: object = None
    sasl_settings: object = field(default=None, repr=False)  # holds passwords

    @property
    def uses_sasl(self):
        """True when connections authenticate with SASL (SASL_PLAINTEXT, SASL_SSL)."""
        return self.security_protocol in SASL_PROTOCOLS

    def __post_init__(self):
        if self.uses_sasl != (self.sasl_settings is not None):
            raise ValueError(f"security_protocol={self.security_protocol!r} needs "
                             f"{'no ' if self.sasl_settings is not None else ''}sasl_settings")
        check_sasl_settings(self.sasl_settings or {}, self.security_protocol)
        if not isinstance(self.client_id, str):
            raise ValueError(f"client_id must be a str, got {self.client_id!r}")
        for name in (
            "request_timeout_ms",
            "connect_timeout_ms",
            "connect_timeout_max_ms",
            "max_in_flight_requests_per_connection",
            "reconnect_backoff_max_ms",
            "max_response_bytes",
        ):
            check_int(name, getattr(self, name), 1)
        for name in ("reconnect_backoff_ms", "connections_max_idle_ms"):
            check_int(name, getattr(self, name), 0)
        for name in ("send_buffer_bytes", "receive_buffer_bytes"):
            value = getattr(self, name)
            check_int(name, value, -1)
            if value == 0:
                raise ValueError(f"{name} must be -1 (OS default) or > 0, got 0")
        check_int("low_watermark_bytes", self.low_watermark_bytes, 0)
        check_int("high_watermark_bytes", self.high_watermark_bytes, self.low_watermark_bytes,
                  minimum_text=f"low_watermark_bytes ({self.low_watermark_bytes})")
        check_int("produce_version", self.produce_version, 0, maximum=2, none_allowed=True)
        check_choice("client_dns_lookup", self.client_dns_lookup, CLIENT_DNS_LOOKUPS)
        if (self.ssl_context is not None) != (self.security_protocol in TLS_PROTOCOLS):
            raise ValueError(f"security_protocol={self.security_protocol!r} needs "
                             f"{'an' if self.ssl_context is None else 'no'} ssl_context")


class Request:
    """A request as the connection sees it.

    encode(correlation_id, api_version) returns the wire buffers, size prefix
    included; it runs on the I/O thread when the request is framed.
    decode(body, api_version) turns the response bytes after the correlation
    id into a response object.  on_done(response, error) is called exactly
    once, on the I/O thread.  A request with expects_response False (Produce
    with acks=0) is done once written.  api_version None means the version
    negotiated with this broker, chosen when the request is framed, and at most
    max_api_version if that is not None (a Transactions V1 Produce must not
    use v12+, which would ask the leader to add its partitions).

    reserved_bytes: outbound bytes its payload already reserved on the
    connection (the Sender reserves a batch's bytes when it queues it), so
    framing reserves only the rest.
    """

    __slots__ = (
        "api_key",
        "api_version",
        "max_api_version",
        "encode",
        "decode",
        "expects_response",
        "on_done",
        "reserved_bytes",
        "deadline_ns",  # set by the connection: answer due by then
        "correlation_id",  # set by the connection when framed
    )

    def __init__(self, api_key, encode, decode, on_done, api_version=None,
                 expects_response=True, reserved_bytes=0, max_api_version=None):
        self.api_key = api_key
        self.api_version = api_version
        self.max_api_version = max_api_version
        self.encode = encode
        self.decode = decode
        self.expects_response = expects_response
        self.on_done = on_done
        self.reserved_bytes = reserved_bytes
        self.deadline_ns = 0
        self.correlation_id = -1

    def describe(self):
        name = api_name(self.api_key)
        if self.correlation_id < 0:  # not framed yet: no version or correlation id
            return f"a {name} request"
        return f"{name} v{self.api_version} (correlation id {self.correlation_id})"


class BrokerConnection:
    """A connection to one broker (or one bootstrap address).

    Created by the IOPool; owned by one IOThread, which calls the ``io_*``
    methods (and runs every ``_io_*`` helper).  Any thread may call submit(),
    request(), reserve_outbound(), release_outbound(), has_room(), join_line(),
    leave_line(), has_room_in_line(), wait_for_room_in_line(), describe(), stats(),
    wakeup(), set_request_source(),
    update_address() and read address, attempt_address, consecutive_failures,
    state, outbound_bytes, writable and api_versions.  A resolver thread hands its
    answer to _resolved, and a SASL prepare thread (_prepare_sasl()) its mechanism
    to _sasl_prepared (background.py).

    Callers that find no room wait in line (join_line()): a drain lets them go in the
    order they came, each once the one before it is done (the sender's
    _ConnectionRoom, a backoff target).
    """

    def __init__(self, node_id, host, port, config, io_thread, request_source=None,
                 listener=None):
        self.node_id = node_id  # immutable; < 0 for bootstrap addresses
        self.config = config  # immutable
        self._io_thread = io_thread  # immutable: the owner
        # Called on the I/O thread: on_ready(conn), on_failure(conn, error).
        self._listener = listener  # immutable

        # Guarded by _lock: state other threads read or hand over.
        self._lock = threading.Lock()
        # Notified when writable again, or when the first caller in line leaves it.
        self._room = threading.Condition(self._lock)
        self._host = host  # guarded by _lock; the I/O thread applies changes
        self._port = port  # guarded by _lock
        self._address_changed = False  # guarded by _lock
        self._submitted = collections.deque()  # guarded by _lock: Requests handed over
        # Guarded by _lock; its has_pending(conn) / next_request(conn) are
        # called on the I/O thread, without the lock.
        self._request_source = request_source
        self._outbound_bytes = 0  # guarded by _lock
        self._writable = True  # guarded by _lock
        # Guarded by _lock: the places (join_line(), compared by identity) of the callers
        # waiting for room, in the order they came: room is the first one's.
        self._line = collections.deque()
        self._published_state = DISCONNECTED  # guarded by _lock
        # {api_key: version to use}: written by the I/O thread under _lock, so
        # that thread alone may read it without the lock.  Kept from the last
        # handshake while reconnecting.
        self._api_versions = None
        # {feature: finalized level} of the last handshake (ApiVersions v3+), as
        # _api_versions.
        self._finalized_features = None
        self._last_error = None  # guarded by _lock: why the last connection ended
        self._published_failures = 0  # guarded by _lock: the I/O thread's _failures
        self._stats = {"connect_attempts": 0, "connections_ready": 0, "requests_sent": 0,
                       "in_flight_peak": 0, "reauthentications": 0,
                       "in_flight_at_reauthentication": 0}  # guarded by _lock
        # Hand-overs from threads of their own (background.py, each with its own leaf
        # lock): the SASL mechanism whose prepare() runs now (the mechanism is its
        # token), and (mechanism, error) once it ends; the name lookup under way on a
        # resolver thread, and (addresses, error) once it ends.  Started, taken and
        # cancelled by the I/O thread; delivered by those threads, only while still
        # the one wanted.
        self._sasl_prepared = BackgroundResult(io_thread.wakeup)
        self._resolved = BackgroundResult(io_thread.wakeup)
        # Owned by the I/O thread: ((host, port, canonical), token) of the latest name
        # lookup started, which resume() may want again (_io_connect).
        self._io_lookup = None
        # Owned by the I/O thread: (host, mechanism) of the latest SASL prepare() started,
        # which resume() may want again (_io_start_sasl).
        self._io_preparing = None
        # Guarded by _lock: (host TLS and SASL see, IP address) of the latest attempt.
        self._attempt = None

        # Owned by the I/O thread.
        self._state = DISCONNECTED
        # The transport (transport.py) owning the socket from connect() until the
        # connection ends, else None; registered in the selector itself.
        self._transport = None
        self._registered_events = 0  # selector interest currently registered
        self._connect_deadline_ns = 0
        self._setup_timeout_ms = 0  # the current attempt's setup timeout
        # The round of attempts: the resolved addresses not tried yet, and the one of
        # the current attempt (a resolver.ResolvedAddress, None before the first).
        self._io_addresses = collections.deque()
        self._io_address = None
        self._next_attempt_ns = 0  # reconnect backoff: no attempt before this
        self._failures = 0  # consecutive failed connections: the reconnect backoff's count
        # Consecutive failed setups, the setup timeout's count: as in the Java client, a
        # READY connection that fails starts it again from 0 (the broker was reachable).
        self._setup_failures = 0
        self._last_activity_ns = 0
        self._next_correlation_id = 0
        self._in_flight = collections.deque()  # Requests awaiting an answer, oldest first
        self._write_queue = collections.deque()  # memoryviews not yet written
        self._unwritten = collections.deque()  # (end_offset, Request) not fully written
        self._queued_total = 0  # bytes ever put in _write_queue (this transport)
        self._written_total = 0  # bytes ever taken by the transport
        # Bytes received and not handled yet: _rx[:_rx_len], whole responses and
        # the start of the next.  One recv() takes as much as the socket has, so
        # a small answer costs one call, not one for its size and one for its body.
        self._rx = bytearray(_RX_BUFFER_BYTES)
        self._rx_len = 0
        # SASL, owned by the I/O thread: the mechanism of the exchange under way
        # (authentication or KIP-368 re-authentication), else None; whether its
        # SaslHandshake went out (no other request is framed until it ends); when
        # to re-authenticate, and when the session ends, as far as the client can tell
        # (the answer's arrival plus its lifetime; both 0: the broker set no lifetime).
        self._io_sasl = None
        self._io_sasl_exchanging = False
        self._io_reauth_at_ns = 0
        self._io_session_ends_ns = 0
        # Owned by the I/O thread: while a re-authentication's prepare() runs, when it is
        # given up on (request_timeout_ms, or the session's end if sooner), else 0.
        self._io_prepare_deadline_ns = 0
        # Owned by the I/O thread: responses taken since the connection became READY
        # (none when the broker closes it at once: see _io_read).
        self._io_answers_since_ready = 0

    # ------------------------------------------------------------------
    # Any thread.

    @property
    def address(self):
        with self._lock:
            return host_port(self._host, self._port)

    @property
    def attempt_address(self):
        """(host TLS and SASL see, IP address) of the latest connection attempt, or None.
        The host differs from the address's name in resolve_canonical_bootstrap_servers_only
        mode (the canonical name of a bootstrap address)."""
        with self._lock:
            return self._attempt

    @property
    def consecutive_failures(self):
        """Connection attempts (and READY connections) that failed since the last one that
        became READY: 0 while the broker answers."""
        with self._lock:
            return self._published_failures

    @property
    def state(self):
        with self._lock:
            return self._published_state

    @property
    def outbound_bytes(self):
        with self._lock:
            return self._outbound_bytes

    @property
    def writable(self):
        with self._lock:
            return self._writable

    @property
    def api_versions(self):
        """{api_key: negotiated version} once the handshake is done, else None."""
        with self._lock:
            return None if self._api_versions is None else dict(self._api_versions)

    @property
    def finalized_features(self):
        """{feature name: finalized level} the broker reported in its handshake
        (e.g. "transaction.version"), else None."""
        with self._lock:
            return None if self._finalized_features is None else dict(self._finalized_features)

    def stats(self):
        """Counters: connect_attempts, connections_ready (handshakes done),
        requests_sent, in_flight_peak (most requests outstanding at once),
        reauthentications (KIP-368 exchanges completed on a READY connection),
        in_flight_at_reauthentication (requests awaiting answers when those
        exchanges began, summed: they are answered, not dropped)."""
        with self._lock:
            return dict(self._stats)

    def describe(self):
        """Names this connection in errors: node, address, state and last error."""
        with self._lock:
            address = host_port(self._host, self._port)
            who = (f"bootstrap server {address}" if self.node_id < 0
                   else f"broker {self.node_id} at {address}")
            text = (f"{who} (outbound {self._outbound_bytes} bytes, high watermark "
                    f"{self.config.high_watermark_bytes}, state {self._published_state}")
            if self._last_error is not None:
                text += f", last error: {self._last_error}"
            return text + ")"

    def has_room(self):
        """False while outbound bytes are above the high watermark and have not
        yet drained to the low one, or while callers wait in line for room (they go
        first: join_line()).  True once closed: waiting is pointless, and the
        caller's next step reports the close."""
        with self._lock:
            return (self._writable and not self._line) or self._published_state == CLOSED

    def join_line(self):
        """A place at the back of the line of callers waiting for room, for
        has_room_in_line() and wait_for_room_in_line(); give it up with leave_line()
        once done, served or not (the next one's turn comes then)."""
        place = object()  # compared by identity
        with self._lock:
            self._line.append(place)
        return place

    def leave_line(self, place):
        with self._lock:
            if self._line and self._line[0] is place:
                self._line.popleft()
                self._room.notify_all()  # the next one's turn
            elif place in self._line:
                self._line.remove(place)

    def has_room_in_line(self, place):
        """Whether place's caller may go on: writable (or closed), and first in line."""
        with self._lock:
            return self._room_in_line_locked(place)

    def wait_for_room_in_line(self, place, timeout_s):
        """Blocks until has_room_in_line(place) or timeout_s passes; returns it."""
        with self._room:
            return self._room.wait_for(lambda: self._room_in_line_locked(place), timeout_s)

    def _room_in_line_locked(self, place):
        return self._published_state == CLOSED or (
            self._writable and bool(self._line) and self._line[0] is place)

    def reserve_outbound(self, nbytes):
        """Counts nbytes more outbound (queued for this broker, not yet written)."""
        with self._lock:
            self._reserve_outbound_locked(nbytes)

    def _reserve_outbound_locked(self, nbytes):
        self._outbound_bytes += nbytes
        if self._outbound_bytes > self.config.high_watermark_bytes:
            self._writable = False

    def release_outbound(self, nbytes):
        """Counts nbytes less outbound: written, failed, or moved elsewhere."""
        if not nbytes:
            return
        with self._lock:
            self._outbound_bytes -= nbytes
            if not self._writable and self._outbound_bytes <= self.config.low_watermark_bytes:
                self._writable = True
                self._room.notify_all()

    def submit(self, request):
        """Hands a Request to the I/O thread; its on_done runs there later."""
        with self._lock:
            if self._published_state == CLOSED:
                closed = True
            else:
                closed = False
                request.deadline_ns = (time.monotonic_ns()
                                       + self.config.request_timeout_ms * 1_000_000)
                self._submitted.append(request)
        if closed:
            request.on_done(None, KafkaConnectionError(
                f"{self.describe()} is closed: {request.describe()} not sent"))
            return
        self.wakeup()

    def request(self, api_key, encode, decode, api_version=None, expects_response=True,
                max_api_version=None):
        """Submits a request and returns a Future of its decoded response."""
        future = Future()

        def on_done(response, error):
            if error is None:
                future.set_result(response)
            else:
                future.set_exception(error)

        self.submit(Request(api_key, encode, decode, on_done, api_version=api_version,
                            expects_response=expects_response,
                            max_api_version=max_api_version))
        return future

    def call(self, api_key, encode, decode, timeout_s, max_api_version=None):
        """Submits a request and waits up to timeout_s for its decoded response.
        Not on an I/O thread: it would wait for itself.

        Raises:
            KafkaTimeoutError: no answer within timeout_s (named).
            KafkaError: the request failed (its connection, or a request timeout).
        """
        future = self.request(api_key, encode, decode, max_api_version=max_api_version)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            if future.done():
                raise  # the request's own failure (a RequestTimeoutError)
            raise KafkaTimeoutError(f"{api_name(api_key)} to {self.describe()} not answered "
                                    f"in {timeout_s:.1f} s") from None

    def wakeup(self):
        """Asks the owning I/O thread to look at this connection again: what hands this
        connection work must call it (the thread services only connections woken, with
        socket events, or due)."""
        self._io_thread.wakeup(self)

    def set_request_source(self, source):
        """The producer's sender, asked for Produce requests when there is room."""
        with self._lock:
            self._request_source = source
        self.wakeup()

    def update_address(self, host, port):
        """A broker moved (metadata says so): reconnect to the new address."""
        with self._lock:
            if (host, port) == (self._host, self._port):
                return
            self._host, self._port = host, port
            self._address_changed = True
        self.wakeup()

    def abandon_after_fork(self):
        """In a forked child only: closes this process's copy of the socket.  The
        socket is the parent's connection: no shutdown, nothing sent, and no lock
        taken (one held by a parent thread at the fork stays held here forever)."""
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    # ------------------------------------------------------------------
    # I/O thread only.

    def io_service(self, now_ns):
        """Moves the connection along: applies address changes, connects when
        there is work, frames requests while in-flight room lasts, enforces
        timeouts and idle close."""
        if self._state == CLOSED:
            return
        with self._lock:
            moved = self._address_changed
            self._address_changed = False
        if moved:
            self._io_addresses.clear()  # the old host's: the next attempt resolves the new one
            if self._state != DISCONNECTED:
                self._io_fail(KafkaConnectionError(
                    f"{self._who()}: broker address changed, reconnecting"), now_ns,
                    count_failure=False)
        try:
            self._io_check_deadlines(now_ns)
            if self._state == RESOLVING:
                self._io_take_resolved(now_ns)
            if self._io_sasl is not None and not self._io_sasl_exchanging:
                self._io_take_prepared(now_ns)
            elif (self._state == READY and self._io_reauth_at_ns
                    and now_ns >= self._io_reauth_at_ns):
                self._io_reauth_at_ns = 0
                self._io_start_sasl(now_ns)
            if self._state == DISCONNECTED:
                if now_ns >= self._next_attempt_ns and self._io_has_work():
                    self._io_connect(now_ns)
            elif self._state == READY:
                self._io_pump(now_ns)
                if (self._state == READY and not self._in_flight and not self._write_queue
                        and now_ns - self._last_activity_ns
                        >= self.config.connections_max_idle_ms * 1_000_000
                        and not self._io_has_work()):
                    self._io_close_transport()
                    self._io_set_state(DISCONNECTED)
        except Exception as exc:  # noqa: BLE001 -- see _as_kafka_error
            self._io_fail(_as_kafka_error(exc, self), now_ns)

    def io_next_deadline_ns(self):
        """The earliest time io_service() must run again, or None."""
        if self._state == CLOSED:
            return None
        deadline = None
        if self._state in _STAGE_NAMES:  # setting up
            deadline = self._connect_deadline_ns
        elif self._state == READY:
            if self._in_flight:
                deadline = min(map(_DEADLINE_NS, self._in_flight))
            elif not self._write_queue and not self._io_has_work():
                deadline = (self._last_activity_ns
                            + self.config.connections_max_idle_ms * 1_000_000)
            for at_ns in (self._io_reauth_at_ns, self._io_prepare_deadline_ns):
                if at_ns:
                    deadline = at_ns if deadline is None else min(deadline, at_ns)
        with self._lock:
            if self._submitted:
                oldest = min(map(_DEADLINE_NS, self._submitted))
                deadline = oldest if deadline is None else min(deadline, oldest)
        if self._state == DISCONNECTED and self._io_has_work():
            deadline = (self._next_attempt_ns if deadline is None
                        else min(deadline, self._next_attempt_ns))
        return deadline

    def io_on_events(self, mask, now_ns):
        """The selector reported the socket readable and/or writable."""
        try:
            if self._state == CONNECTING:
                if mask & selectors.EVENT_WRITE:
                    self._io_finish_connect(now_ns)
                return
            if self._state == TRANSPORT_HANDSHAKE:
                self._io_transport_handshake(now_ns)
                return
            if mask & selectors.EVENT_READ:
                self._io_read(now_ns)
            if mask & selectors.EVENT_WRITE and self._transport is not None:
                self._io_flush(now_ns)
            if self._transport is not None:
                self._io_update_events()
        except Exception as exc:  # noqa: BLE001 -- see _as_kafka_error
            self._io_fail(_as_kafka_error(exc, self), now_ns)

    def io_close(self, error):
        """Terminal close (pool shutdown): everything pending fails with error."""
        if self._state == CLOSED:
            return
        # CLOSED first: submit() checks it under _lock, so nothing can slip
        # into _submitted after the failing below.
        self._io_set_state(CLOSED)
        self._io_close_transport()
        self._io_fail_pending(error, include_submitted=True)
        with self._room:
            self._room.notify_all()  # blocked callers re-check and see the close

    # -- connecting

    def _io_has_work(self):
        with self._lock:
            if self._submitted:
                return True
            source = self._request_source
        return source is not None and source.has_pending(self)

    def _io_connect(self, now_ns):
        """The next attempt: to the next address of this round, or a new round, which
        resolves the host first (on a resolver thread unless it is an IP literal)."""
        if self._io_addresses:
            self._io_connect_next(now_ns)
            return
        with self._lock:
            host, port = self._host, self._port
        canonical = (self.node_id < 0 and self.config.client_dns_lookup
                     == RESOLVE_CANONICAL_BOOTSTRAP_SERVERS_ONLY)
        addresses = None if canonical else numeric_addresses(host, port)
        if addresses is not None:
            self._io_addresses.extend(addresses)
            self._io_connect_next(now_ns)
            return
        self._io_start_setup_timer(now_ns)
        self._io_set_state(RESOLVING)
        lookup = self._io_lookup
        if (lookup is not None and lookup[0] == (host, port, canonical)
                and self._resolved.resume(lookup[1])):
            # An earlier attempt's lookup of the same name is still running (a DNS
            # server not answering): its answer is waited for again, rather than one
            # more resolver thread left hanging per attempt.
            return
        token = object()
        self._resolved.start(token)
        # The resolver thread hands its answer over, if the connection still wants it.
        start_resolving(host, port, canonical, f"netkafka-resolve-{self.node_id}",
                        lambda addresses, error: self._resolved.deliver(
                            token, (addresses, error)))
        self._io_lookup = ((host, port, canonical), token)  # once its thread runs

    def _io_take_resolved(self, now_ns):
        resolved = self._resolved.take()
        if resolved is None:
            return  # still looking up
        with self._lock:
            host, port = self._host, self._port
        addresses, error = resolved
        if error is not None or not addresses:
            raise KafkaConnectionError(
                f"cannot resolve {host_port(host, port)} for {self._who()}: "
                f"{error or 'no address'}")
        self._io_addresses.extend(addresses)
        self._io_connect_next(now_ns)

    def _io_start_setup_timer(self, now_ns):
        self._setup_timeout_ms = exponential_ms(
            self.config.connect_timeout_ms, self.config.connect_timeout_max_ms,
            self._setup_failures)
        self._connect_deadline_ns = now_ns + int(self._setup_timeout_ms * 1_000_000)

    def _io_connect_next(self, now_ns):
        """Starts a TCP connect to the next address of the round."""
        address = self._io_address = self._io_addresses.popleft()
        with self._lock:
            self._attempt = (address.host, address.sockaddr[0])
        port = address.sockaddr[1]
        self._io_start_setup_timer(now_ns)
        with self._lock:
            self._stats["connect_attempts"] += 1
        # CONNECTING before the socket exists: a socket that cannot be made (no IPv6
        # here) is this address's failure, and the round moves on to the next.
        self._io_set_state(CONNECTING)
        try:
            transport, err = connect_tcp(address.family, address.sockaddr,
                                         self.config.send_buffer_bytes,
                                         self.config.receive_buffer_bytes,
                                         self.config.socket_options)
        except OSError as exc:
            self._io_fail(_as_kafka_error(exc, self), now_ns)
            return
        if self.config.ssl_context is not None:
            transport = TlsTransport(transport, self.config.ssl_context, address.host,
                                     host_port(address.host, port))
        self._transport = transport
        self._registered_events = 0
        self._queued_total = self._written_total = 0
        if err in (0, errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            self._io_set_events(selectors.EVENT_WRITE)
        else:
            self._io_fail(KafkaConnectionError(
                f"cannot connect to {self._who()}{self._io_at_address()}: "
                f"{os.strerror(err)}"), now_ns)

    def _io_finish_connect(self, now_ns):
        err = self._transport.connect_error()
        if err:
            raise KafkaConnectionError(
                f"cannot connect to {self._who()}{self._io_at_address()}: {os.strerror(err)}")
        self._last_activity_ns = now_ns
        self._io_advance(now_ns)

    def _io_advance(self, now_ns):
        """Enters the setup stage after the current one and starts it: the one
        place a connection moves from CONNECTING towards READY.  Runs when the
        current stage is done; a stage with nothing to do passes on at once."""
        state = _NEXT_STAGE[self._state]
        self._io_set_state(state)
        if state == TRANSPORT_HANDSHAKE:
            self._io_transport_handshake(now_ns)
        elif state == NEGOTIATING_VERSIONS:
            self._io_send_api_versions(API_VERSIONS_VERSION, now_ns)
        elif state == AUTHENTICATING:
            if self.config.uses_sasl:
                self._io_start_sasl(now_ns)
            else:
                self._io_advance(now_ns)
        else:
            with self._lock:
                self._stats["connections_ready"] += 1
            self._io_answers_since_ready = 0
            self._io_count_failures(0)
            self._setup_failures = 0
            # The round is over: the next connection resolves the name again (as Java, which
            # resolves again once a connection that was up goes down: the IPs may change).
            self._io_addresses.clear()
            if self._listener is not None:
                self._listener.on_ready(self)

    def _io_transport_handshake(self, now_ns):
        """One step of the transport's handshake; the next runs when the selector
        reports what this one waits for."""
        wanted_events = self._transport.handshake()
        if wanted_events:
            self._io_set_events(wanted_events)
        else:
            self._io_advance(now_ns)

    def _io_send_api_versions(self, version, now_ns):
        self._io_send_now(Request(
            ApiKey.API_VERSIONS,
            lambda cid, v: encode_api_versions_request(cid, self.config.client_id, v),
            decode_api_versions_response,
            functools.partial(self._io_on_api_versions, version),
            api_version=version), now_ns)

    def _io_send_now(self, request, now_ns):
        """Frames and writes one of the connection's own requests (setup, SASL),
        ahead of the in-flight limit: during setup it is due by the connect
        deadline, on a READY connection (re-authentication) by request_timeout_ms."""
        request.deadline_ns = (self._connect_deadline_ns if self._state != READY
                               else now_ns + self.config.request_timeout_ms * 1_000_000)
        self._io_frame(request)
        self._io_flush(now_ns)
        if self._transport is not None:
            self._io_update_events()

    def _io_on_api_versions(self, version, response, error):
        """Completion of the handshake request sent at version (runs inside
        _complete, which only logs exceptions: so every failure here fails the
        connection)."""
        if error is not None:
            return  # the connection failure already reported it
        now_ns = time.monotonic_ns()
        try:
            theirs = response.api_versions.get(ApiKey.API_VERSIONS)
            if (response.error_code == _UNSUPPORTED_VERSION and theirs is not None
                    and SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][0] <= theirs[1] < version):
                # An older broker: ask again at the newest version it knows.  Only
                # lower: one refusing the version it offers would be asked in a loop.
                self._io_send_api_versions(theirs[1], now_ns)
                return
            # Raises for a broker without Produce v3 (IncompatibleBrokerError).
            versions = negotiate_versions(response, self.config.produce_version)
            with self._lock:
                self._api_versions = versions
                self._finalized_features = response.finalized_features
            self._io_advance(now_ns)
        except Exception as exc:  # noqa: BLE001 -- see _as_kafka_error
            self._io_fail(_as_kafka_error(exc, self), now_ns)

    # -- SASL

    def _io_start_sasl(self, now_ns):
        """Starts an exchange with a new mechanism: at once when it has nothing
        to prepare, else once its prepare thread hands it back."""
        host = self._io_address.host
        preparing = self._io_preparing
        if (preparing is not None and preparing[0] == host
                and self._sasl_prepared.resume(preparing[1])):
            # An earlier attempt's prepare() is still running (a token provider or KDC
            # not answering): it is waited for again, rather than one more thread left
            # hanging in the provider per attempt.
            self._io_sasl = preparing[1]
            self._io_bound_reauth_prepare(now_ns)
            return
        mechanism = create_mechanism(self.config.sasl_settings, host)
        self._io_sasl = mechanism
        if type(mechanism).prepare is SaslMechanism.prepare:
            self._io_sasl_handshake(mechanism, now_ns)
            return
        self._io_bound_reauth_prepare(now_ns)
        self._sasl_prepared.start(mechanism)
        self._io_preparing = (host, mechanism)
        threading.Thread(target=self._prepare_sasl, args=(mechanism,),
                         name=f"netkafka-sasl-prepare-{self.node_id}", daemon=True).start()

    def _io_bound_reauth_prepare(self, now_ns):
        """A re-authentication's prepare() is waited for request_timeout_ms, as its SASL
        requests would be, and not beyond the session's end (in setup the setup timeout
        bounds it): one that hangs would otherwise keep the connection on until the
        broker closed the expired session, under the next request sent."""
        if self._state == READY:
            self._io_prepare_deadline_ns = min(
                now_ns + self.config.request_timeout_ms * 1_000_000, self._io_session_ends_ns)

    def _prepare_sasl(self, mechanism):
        """The prepare thread: runs the blocking part, hands the result over."""
        error = None
        try:
            mechanism.prepare()
        except Exception as exc:  # noqa: BLE001 -- handed to the I/O thread, which fails
            error = exc
        self._sasl_prepared.deliver(mechanism, (mechanism, error))

    def _io_take_prepared(self, now_ns):
        prepared = self._sasl_prepared.take()
        if prepared is None:
            if self._io_prepare_deadline_ns and now_ns >= self._io_prepare_deadline_ns:
                # Given up on: its thread goes on, and the retry waits for it again.
                self._sasl_prepared.cancel()
                self._io_prepare_failed(KafkaTimeoutError(
                    f"{self._who()}: re-authentication's {self._io_sasl.name} preparation "
                    f"(its token provider or KDC) did not finish within request_timeout_ms="
                    f"{self.config.request_timeout_ms} or by the end of the session"), now_ns)
            return
        self._io_prepare_deadline_ns = 0
        mechanism, error = prepared
        if error is None:
            self._io_sasl_handshake(mechanism, now_ns)
            return
        if isinstance(error, errors.SaslAuthenticationFailedError):
            failure = self._sasl_failure(error)
        elif isinstance(error, errors.KafkaError):
            failure = error  # names its source itself (OAuthTokenError: the endpoint)
        else:
            failure = errors.AuthenticationError(
                f"{self._who()}: preparing {mechanism.name} failed: {error!r}")
            failure.__cause__ = error
        self._io_prepare_failed(failure, now_ns)

    def _io_prepare_failed(self, failure, now_ns):
        """prepare() failed, or was given up on: a re-authentication is tried again while
        the session lasts; otherwise failure fails the connection."""
        self._io_prepare_deadline_ns = 0
        if self._state == READY and now_ns < self._io_session_ends_ns:
            self._io_retry_reauthentication(failure, now_ns)
            return
        raise failure

    def _io_retry_reauthentication(self, failure, now_ns):
        """A re-authentication's prepare() failed while the session it would renew is still
        valid.  The Java client's re-authentication takes the credential its login last
        obtained, refreshed apart from any connection: a failed fetch never touches a
        connection while its session lasts.  So here: the connection and the requests on
        it carry on, and the re-authentication is tried again within half the time left."""
        self._io_sasl = None
        left_ns = self._io_session_ends_ns - now_ns
        delay_ns = max(1_000_000, min(left_ns // 2, _REAUTH_RETRY_MAX_NS))
        self._io_reauth_at_ns = now_ns + delay_ns
        _log.warning("%s: re-authentication not started, its preparation failed: %s; the "
                     "session stays valid for %.1f s more, trying again in %.1f s",
                     self._who(), failure, left_ns / 1e9, delay_ns / 1e9)

    def _sasl_failure(self, error):
        """A mechanism's SaslAuthenticationFailedError (which names the mechanism)
        naming the broker too."""
        return errors.SaslAuthenticationFailedError(f"{self._who()}: {error.message}")

    def _io_sasl_handshake(self, mechanism, now_ns):
        versions = self._api_versions
        if (ApiKey.SASL_HANDSHAKE not in versions
                or ApiKey.SASL_AUTHENTICATE not in versions):
            raise errors.IncompatibleBrokerError(
                f"{self._who()} lacks SaslHandshake v1 or SaslAuthenticate, which "
                f"security_protocol={self.config.security_protocol!r} needs")
        self._io_sasl_exchanging = True
        if self._state == READY:
            with self._lock:
                self._stats["in_flight_at_reauthentication"] += len(self._in_flight)
        client_id = self.config.client_id
        self._io_send_now(Request(
            ApiKey.SASL_HANDSHAKE,
            lambda cid, v: encode_sasl_handshake_request(cid, client_id, v, mechanism.name),
            decode_sasl_handshake_response,
            lambda response, error: self._io_sasl_step(
                self._io_on_sasl_handshake, mechanism, response, error)), now_ns)

    def _io_send_sasl_bytes(self, mechanism, auth_bytes, now_ns):
        client_id = self.config.client_id
        self._io_send_now(Request(
            ApiKey.SASL_AUTHENTICATE,
            lambda cid, v: encode_sasl_authenticate_request(cid, client_id, v, auth_bytes),
            decode_sasl_authenticate_response,
            lambda response, error: self._io_sasl_step(
                self._io_on_sasl_authenticate, mechanism, response, error)), now_ns)

    def _io_sasl_step(self, handler, mechanism, response, error):
        """Completion of a SASL request (inside _complete, which only logs: so a
        failure here fails the connection)."""
        if mechanism is not self._io_sasl:
            return  # the connection ended: its failure already reported this
        now_ns = time.monotonic_ns()
        try:
            if error is not None:
                raise error
            handler(mechanism, response, now_ns)
        except Exception as exc:  # noqa: BLE001 -- see _as_kafka_error
            self._io_fail(_as_kafka_error(exc, self), now_ns)

    def _io_on_sasl_handshake(self, mechanism, response, now_ns):
        if response.error_code == errors.IllegalSaslStateError.code and self._state != READY:
            # The broker's answer to a first handshake where the listener authenticated
            # the connection already, i.e. has no SASL (PLAINTEXT or SSL): no mechanism
            # would do.  (During a re-authentication it means something else.)
            raise errors.IllegalSaslStateError(
                f"{self._who()} does not use SASL on this listener: "
                f"security_protocol={self.config.security_protocol!r} must match the "
                f"listener (PLAINTEXT or SSL, without sasl_* settings)")
        if response.error_code:
            raise errors.error_for_code(
                response.error_code,
                f"{self._who()} does not enable sasl_mechanism={mechanism.name!r} on this "
                f"listener; it offers {', '.join(response.mechanisms) or 'none'}")
        self._io_send_sasl_bytes(mechanism, mechanism.initial_response(), now_ns)

    def _io_on_sasl_authenticate(self, mechanism, response, now_ns):
        if response.error_code:
            raise errors.error_for_code(
                response.error_code,
                f"{self._who()} refused {mechanism.name} authentication: "
                f"{response.error_message or 'no reason given'}")
        try:
            out = mechanism.evaluate(response.auth_bytes)
        except errors.SaslAuthenticationFailedError as exc:
            raise self._sasl_failure(exc) from None
        if out is not None:
            self._io_send_sasl_bytes(mechanism, out, now_ns)
            return
        delay_ms = mechanism.reauthenticate_after_ms(response.session_lifetime_ms)
        self._io_reauth_at_ns = 0 if delay_ms is None else now_ns + delay_ms * 1_000_000
        self._io_session_ends_ns = (0 if delay_ms is None
                                    else now_ns + response.session_lifetime_ms * 1_000_000)
        self._io_sasl = None
        self._io_sasl_exchanging = False
        if self._state == READY:
            with self._lock:
                self._stats["reauthentications"] += 1
            self._io_pump(now_ns)
        else:
            self._io_advance(now_ns)

    # -- writing

    def _io_pump(self, now_ns):
        """Frames submitted requests, then the request source's, while fewer
        than max_in_flight are outstanding; then writes."""
        limit = self.config.max_in_flight_requests_per_connection
        while (len(self._in_flight) < limit and self._state == READY
               and not self._io_sasl_exchanging):
            with self._lock:
                request = self._submitted.popleft() if self._submitted else None
                source = self._request_source
            if request is None:
                # Produce requests are built only once everything before them
                # is written, so one request gathers as many batches as are
                # ready by then.
                if self._write_queue or source is None:
                    break
                request = source.next_request(self)
                if request is None:
                    break
                request.deadline_ns = now_ns + self.config.request_timeout_ms * 1_000_000
            self._io_frame(request)
            self._io_flush(now_ns)
        if self._transport is not None:
            self._io_update_events()

    def _io_frame(self, request):
        """Puts the request's buffers on the write queue, counted as outbound."""
        request.correlation_id = self._next_correlation_id
        self._next_correlation_id = (self._next_correlation_id + 1) & 0x7FFFFFFF
        try:
            if request.api_version is None:
                request.api_version = self._api_versions.get(request.api_key)
                if request.api_version is None:
                    raise errors.IncompatibleBrokerError(
                        f"{self._who()} does not support "
                        f"{api_name(request.api_key)}")
                if request.max_api_version is not None:
                    request.api_version = min(request.api_version, request.max_api_version)
            buffers = request.encode(request.correlation_id, request.api_version)
            # Framed once: drop the encoder, so that once written no reference
            # to the payload (a batch's memory) stays behind in the request.
            request.encode = None
            if not isinstance(buffers, list):  # encoders of small requests return one buffer
                buffers = [buffers]
        except Exception as exc:  # a request that cannot be encoded fails alone
            self.release_outbound(request.reserved_bytes)
            _complete(request, None, errors.KafkaError(
                f"cannot encode {request.describe()}: {exc!r}"))
            return
        total = queue_buffers(self._write_queue, buffers)
        self._queued_total += total
        self._unwritten.append((self._queued_total, request))
        if request.expects_response:
            self._in_flight.append(request)
        with self._lock:
            self._stats["requests_sent"] += 1
            if len(self._in_flight) > self._stats["in_flight_peak"]:
                self._stats["in_flight_peak"] = len(self._in_flight)
            self._reserve_outbound_locked(total - request.reserved_bytes)

    def _io_flush(self, now_ns):
        """Hands as much of the write queue to the transport as it takes now (and
        lets it push bytes it holds back)."""
        queue = self._write_queue
        transport = self._transport
        while queue or transport.output_pending:
            sent = transport.write(queue)
            if sent == 0:
                break  # EAGAIN: the transport takes nothing now; wait for EVENT_WRITE
            self._last_activity_ns = now_ns
            self._written_total += sent
            self.release_outbound(sent)
            drop_written(queue, sent)
        unwritten = self._unwritten
        while unwritten and unwritten[0][0] <= self._written_total:
            request = unwritten.popleft()[1]
            if not request.expects_response:
                _complete(request, None, None)

    def _io_update_events(self):
        wanted = selectors.EVENT_READ | (
            selectors.EVENT_WRITE if self._write_queue or self._transport.output_pending
            else 0)
        if wanted != self._registered_events:  # the usual case needs no call
            self._io_set_events(wanted)

    def _io_set_events(self, events):
        if events == self._registered_events:
            return
        selector = self._io_thread.selector
        if self._registered_events == 0:
            selector.register(self._transport, events, self)
        else:
            selector.modify(self._transport, events, self)
        self._registered_events = events

    # -- reading

    def _io_read(self, now_ns):
        transport = self._transport
        # A completion may close the connection (the transport goes) mid-loop.
        while transport is self._transport and transport is not None:
            rx = self._rx
            n = transport.read_into(memoryview(rx)[self._rx_len:])
            if n is None:
                return  # nothing there now (EAGAIN)
            if n == 0:
                hint = ""
                if (self._state == READY and not self._io_answers_since_ready
                        and not self.config.uses_sasl):
                    # A SASL listener answers ApiVersions, then closes a connection
                    # whose next request is not SaslHandshake.
                    hint = (f" before answering any request after ApiVersions (a SASL "
                            f"listener does that: does security_protocol="
                            f"{self.config.security_protocol!r} match the listener?)")
                raise KafkaConnectionError(
                    f"{self._who()} closed the connection{self._io_during()}{hint}")
            self._last_activity_ns = now_ns
            self._rx_len += n
            filled = self._rx_len == len(rx)
            self._io_take_responses(transport)
            if not filled:
                return  # the transport had no more; the selector says when it has

    def _io_take_responses(self, transport):
        """Hands every whole response in _rx to _io_on_response, keeps the rest at
        the front, and makes room for a response larger than the buffer."""
        rx, end, pos = self._rx, self._rx_len, 0
        view = memoryview(rx)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(rx, pos)
            if size < 4 or size > self.config.max_response_bytes:
                if (self.config.ssl_context is None and rx[pos] in _TLS_RECORD_TYPES
                        and rx[pos + 1] == _TLS_MAJOR_VERSION):
                    # A TLS listener's alert for our plaintext: it stays a TLS listener,
                    # so retrying until max_block_ms would only hide the cause.
                    raise errors.AuthenticationError(
                        f"{self._who()} answered with a TLS record (first bytes "
                        f"{bytes(view[pos:pos + 4])!r}): the listener speaks TLS, but "
                        f"security_protocol={self.config.security_protocol!r}; use SSL or "
                        f"SASL_SSL (with ssl_cafile) to match the listener")
                raise errors.ProtocolError(
                    f"{self._who()} sent a response size of {size} bytes (first bytes "
                    f"{bytes(view[pos:pos + 4])!r}; allowed 4..{self.config.max_response_bytes}"
                    "): the peer does not speak the Kafka protocol or the stream is corrupt")
            if end - pos - 4 < size:
                break
            body = bytes(view[pos + 4:pos + 4 + size])
            pos += 4 + size
            self._io_on_response(body)
            if self._transport is not transport:
                return  # a completion closed the connection: its buffer was reset
        rest = end - pos
        if rest >= 4:
            needed = 4 + _SIZE.unpack_from(rx, pos)[0]
        else:
            needed = _RX_BUFFER_BYTES
        if needed > len(rx) == rest:
            # A response larger than the buffer, which its bytes have filled: the
            # buffer doubles towards its size as they arrive, not to the size at once,
            # so a size prefix alone (a broken or hostile peer's, up to
            # max_response_bytes) costs no memory.
            grown = bytearray(min(needed, 2 * len(rx)))
        elif len(rx) > _RX_BUFFER_BYTES and needed <= _RX_BUFFER_BYTES:
            grown = bytearray(_RX_BUFFER_BYTES)  # back to the usual size after one
        else:
            grown = None
        if grown is not None:
            grown[:rest] = view[pos:end]
            view.release()
            self._rx = grown
        elif pos:
            view[:rest] = view[pos:end]
        self._rx_len = rest

    def _io_on_response(self, body):
        (correlation_id,) = _SIZE.unpack_from(body, 0)
        if not self._in_flight:
            raise errors.ProtocolError(
                f"{self._who()} sent a response (correlation id {correlation_id}) "
                "with no request in flight")
        request = self._in_flight[0]
        if correlation_id != request.correlation_id:
            raise errors.ProtocolError(
                f"{self._who()} answered correlation id {correlation_id} while the "
                f"oldest request in flight is {request.describe()}: responses out of order")
        self._in_flight.popleft()
        if self._state == READY:
            self._io_answers_since_ready += 1
        try:
            response = request.decode(memoryview(body)[4:], request.api_version)
        except errors.KafkaError as exc:
            # The request fails with the decode error; raising on closes the
            # connection, since the rest of the stream can't be trusted.
            _complete(request, None, exc)
            raise
        _complete(request, response, None)

    # -- timeouts and failure

    def _io_check_deadlines(self, now_ns):
        if self._state in _STAGE_NAMES:  # setting up
            if now_ns >= self._connect_deadline_ns:
                stage = _STAGE_NAMES[self._state]
                if self._io_sasl is not None and not self._io_sasl_exchanging:
                    # Its prepare thread still out: the token endpoint or the KDC, not
                    # the broker, is what did not answer.
                    stage += (f" ({self._io_sasl.name}'s preparation, its token provider "
                              f"or KDC, had not finished)")
                self._io_fail(KafkaTimeoutError(
                    f"{self._who()}{self._io_at_address()}: {stage} did "
                    f"not complete within this attempt's setup timeout of "
                    f"{self._setup_timeout_ms:.0f} ms (socket_connection_setup_timeout_ms="
                    f"{self.config.connect_timeout_ms}, doubling per consecutive failed setup up "
                    f"to socket_connection_setup_timeout_max_ms="
                    f"{self.config.connect_timeout_max_ms})"), now_ns)
        elif self._state == READY:
            for request in self._in_flight:
                if now_ns >= request.deadline_ns:
                    self._io_fail(RequestTimeoutError(
                        f"{self._who()} did not answer {request.describe()} within "
                        f"request_timeout_ms={self.config.request_timeout_ms}; "
                        "connection closed"), now_ns)
                    break
        expired = []
        with self._lock:
            if self._submitted:
                keep = collections.deque()
                for request in self._submitted:
                    (expired if now_ns >= request.deadline_ns else keep).append(request)
                self._submitted = keep
            last_error = self._last_error
        if expired:
            if last_error is not None:
                why = f"the last attempt failed: {last_error}"
            elif self._state in _STAGE_NAMES:
                why = f"the connection is still in {_STAGE_NAMES[self._state]}, no error yet"
            else:
                why = f"the connection is {self._state}, no error yet"
        for request in expired:
            _complete(request, None, RequestTimeoutError(
                f"{request.describe()} was not sent to {self._who()} within "
                f"request_timeout_ms={self.config.request_timeout_ms}: {why}"))

    def _io_fail(self, error, now_ns, count_failure=True):
        """Closes the socket; every request handed to this connection fails
        with error.  A setup that failed to reach the broker moves on to the
        round's next address at once; any other failure waits for the reconnect
        backoff, and a failed setup leaves the round's later addresses to the
        next attempts (a READY connection ended its round when it became READY)."""
        with self._lock:
            self._last_error = str(error)
        was_ready = self._state == READY
        setting_up = self._state in _STAGE_NAMES
        next_address = (setting_up and bool(self._io_addresses)
                        and isinstance(error, (KafkaConnectionError, KafkaTimeoutError)))
        self._io_close_transport()
        if count_failure:
            self._setup_failures = self._setup_failures + 1 if setting_up else 0
            self._io_count_failures(self._failures + 1)
            self._next_attempt_ns = now_ns + (0 if next_address else int(exponential_ms(
                self.config.reconnect_backoff_ms, self.config.reconnect_backoff_max_ms,
                self._failures - 1) * 1_000_000))
        self._io_set_state(DISCONNECTED)
        self._io_fail_pending(error, include_submitted=True)
        if self._listener is not None:
            self._listener.on_failure(self, error, was_ready)

    def _io_count_failures(self, failures):
        self._failures = failures
        with self._lock:
            self._published_failures = failures

    def _io_close_transport(self):
        self._io_sasl = None
        self._io_sasl_exchanging = False
        self._io_reauth_at_ns = self._io_session_ends_ns = self._io_prepare_deadline_ns = 0
        self._sasl_prepared.cancel()
        self._resolved.cancel()
        if self._transport is None:
            return
        if self._registered_events:
            self._io_thread.selector.unregister(self._transport)
        self._registered_events = 0
        self._transport.close()
        self._transport = None
        unwritten_bytes = self._queued_total - self._written_total
        self._write_queue.clear()
        self.release_outbound(unwritten_bytes)
        self._queued_total = self._written_total = 0
        self._rx_len = 0
        if len(self._rx) > _RX_BUFFER_BYTES:
            self._rx = bytearray(_RX_BUFFER_BYTES)

    def _io_fail_pending(self, error, include_submitted):
        failed = list(self._in_flight)
        failed += [r for _, r in self._unwritten if not r.expects_response]
        self._in_flight.clear()
        self._unwritten.clear()
        if include_submitted:
            with self._lock:
                failed += self._submitted
                self._submitted = collections.deque()
        for request in failed:
            _complete(request, None, error)

    def _io_set_state(self, state):
        if _log.isEnabledFor(logging.DEBUG):  # the setup's steps, when debugging one
            _log.debug("%s: %s -> %s", self._who(), self._state, state)
        self._state = state
        with self._lock:
            self._published_state = state

    def _io_during(self):
        """For error messages: ' during <setup stage>' while setting up, else ''."""
        stage = _STAGE_NAMES.get(self._state)
        return "" if stage is None else f" during {stage}"

    def _who(self):
        with self._lock:
            address = host_port(self._host, self._port)
        if self.node_id < 0:
            return f"bootstrap server {address}"
        return f"broker {self.node_id} at {address}"

    def _io_at_address(self):
        """For setup errors: ' (address <ip>)' when the host is a name, so that a failure
        names which of its addresses failed; else ''."""
        address = self._io_address
        if self._state == RESOLVING or address is None:
            return ""
        with self._lock:
            host = self._host
        ip = address.sockaddr[0]
        if ip == host:
            return ""
        name = "" if address.host == host else f"{address.host}, "
        return f" ({name}address {ip})"


_UNSUPPORTED_VERSION = errors.UnsupportedVersionError.code


def _complete(request, response, error):
    """Runs a request's completion; a failing callback must not take the I/O
    thread down with it."""
    try:
        request.on_done(response, error)
    except Exception:  # noqa: BLE001 -- reported, the I/O thread carries on
        _log.exception("completion callback of %s raised", request.describe())


def _as_kafka_error(exc, conn):
    """The error a connection fails with.  Socket errors become
    KafkaConnectionError; anything else that is not a KafkaError is a bug,
    logged with its traceback, and fails only this connection, not the I/O
    thread and the other connections it serves."""
    if isinstance(exc, errors.KafkaError):
        return exc
    if isinstance(exc, OSError):
        return KafkaConnectionError(f"{conn._who()}{conn._io_during()}: {exc}")
    _log.error("internal error on the connection to %s", conn._who(), exc_info=exc)
    return errors.KafkaError(f"internal error on the connection to {conn._who()}: {exc!r}")
