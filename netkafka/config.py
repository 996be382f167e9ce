"""The Producer's keyword arguments: names, defaults, validation.

The names and meanings are kafka-python's KafkaProducer's (which follow the Java
client's settings); the defaults are kafka-python 3's where they agree with the Java
client, and the Java client's otherwise (noted below).  netkafka adds io_threads,
high_watermark_bytes, low_watermark_bytes, backoff and transaction_version, and the
write-ahead log's settings (wal_dir, wal_fsync, wal_fsync_interval_ms, wal_max_bytes,
on_replay, on_delivery_timeout).  A keyword may be given Java's dotted way too
(``wal.dir``).

An unknown keyword raises TypeError naming it; a bad value raises ValueError naming
the key and what it allows (for the security settings SslConfigError or
SaslConfigError, both ValueErrors).

Settings given as text (Spark conf, a properties file, a command line) reach the
Producer through producer_setting(): the Java client's dotted names and typed
values (trimmed, as Java trims them), read one way for every tool (and its PEM key
and trust store settings, JAVA_TLS_SETTINGS, turned into kafka-python's).
"""
import itertools
import math
import os
import re
import dataclasses
import selectors
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from netkafka._validate import check_choice, check_int, check_ms
from netkafka.client.connection import ConnectionConfig
from netkafka.client.metadata import METADATA_RECOVERY_STRATEGIES, parse_bootstrap_servers
from netkafka.client.resolver import CLIENT_DNS_LOOKUPS
from netkafka.client.retry import RetryBackoff
from netkafka.client.sasl import SASL_DEFAULTS, SASL_PROTOCOLS, check_sasl_settings
from netkafka.client.tls import SSL_DEFAULTS, build_ssl_context
from netkafka.errors import KafkaConfigurationError, SslConfigError
from netkafka.protocol.framing import wire_string
from netkafka.record._batch import SMALLEST_BATCH_BYTES
from netkafka.record._compression import CODEC_NAMES, checked_level, codec_id

_MiB = 1024 * 1024
_INT32_MAX = 2**31 - 1
# compression_type's values: None or a codec's name, as the record layer knows them.
COMPRESSION_TYPES = (None, *CODEC_NAMES)
ACKS = (0, 1, "all", -1)
WAL_FSYNC_MODES = ("never", "interval", "always")
# What happens to a record whose delivery timed out: it fails, or (with a WAL) it
# stays in the log and is sent again when the cluster answers.
DELIVERY_TIMEOUT_ACTIONS = ("fail", "spool")
_client_ids = itertools.count(1)

# kafka-python's security settings and their defaults: the TLS ones are
# netkafka.client.tls's, the SASL ones netkafka.client.sasl's.
SECURITY_DEFAULTS = {"security_protocol": "PLAINTEXT", **SSL_DEFAULTS, **SASL_DEFAULTS}
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# kafka-python 3 settings that are its own machinery: netkafka has its own network
# client and one selector per I/O thread, so a replacement cannot be plugged in.
# Given any value but these, they are refused (KafkaConfigurationError) saying so.
PLUMBING_OPTIONS = {
    "kafka_client": None,
    "selector": selectors.DefaultSelector,
}
# kafka-python 3 settings netkafka accepts at their defaults only: another value
# asks for something netkafka does not do, which ignoring would hide.
UNSUPPORTED_OPTIONS = {
    "metric_reporters": (),
    "metrics_num_samples": 2,
    "metrics_sample_window_ms": 30000,
    "proxy_url": None,
    "socks5_proxy": None,
}
# KIP-390's per-codec levels (the Java client's compression.<codec>.level).
CODEC_LEVEL_OPTIONS = {"gzip": "compression_gzip_level", "lz4": "compression_lz4_level",
                       "zstd": "compression_zstd_level"}
# transaction_version: None lets each transaction use Transactions V2 where the
# cluster finalizes it (KIP-890, Kafka 4.0+), V1 elsewhere; 1 keeps to V1.
TRANSACTION_VERSIONS = (None, 1)


@dataclass(frozen=True)
class ProducerConfig(Mapping):
    """Every setting of a Producer, validated.  Immutable.

    Read as attributes (``config.acks``) or, as kafka-python's
    ``KafkaProducer.config`` dict, by key (``config['acks']``, ``dict(config)``):
    every kafka-python 3 setting is a key, with the value in use (acks as -1/0/1).

    kafka-python 3 settings accepted and what becomes of them:

    ================================== =============================================
    setting                            in netkafka
    ================================== =============================================
    allow_auto_create_topics           honoured (Metadata requests ask for it)
    receive_message_max_bytes          honoured: a larger response is refused
    socket_options                     honoured: setsockopt() on every broker socket
    socket_connection_setup_timeout_ms honoured: bound on connect + handshakes,
                                       growing with failures up to
                                       socket_connection_setup_timeout_max_ms
    metrics_enabled                    honoured: False makes metrics() return None
    client_dns_lookup                  honoured: names resolved off the I/O
                                       threads, every address tried in turn
                                       (client/resolver.py)
    bootstrap_timeout_ms               checked, not honoured: __init__ does not
                                       connect; the first send() waits up to
                                       max_block_ms for metadata instead
    api_version                        honoured (below (0, 11): legacy formats)
    metric_reporters, metrics_num_     default only: netkafka's metrics keep
    samples, metrics_sample_window_ms  kafka-python's 2 x 30 s window and have no
                                       reporters (another value: NotImplementedError)
    proxy_url, socks5_proxy            None only (no proxy support:
                                       NotImplementedError)
    kafka_client, selector             refused unless default
                                       (KafkaConfigurationError): kafka-python's own
                                       network machinery, which netkafka replaces
    ================================== =============================================

    netkafka's own: io_threads, high_watermark_bytes, low_watermark_bytes,
    backoff, interceptors, compression_level (and the Java client's per-codec
    compression_gzip_level / compression_lz4_level / compression_zstd_level).
    The Java client's socket_connection_setup_timeout_max_ms, retry_backoff_max_ms
    (KIP-580, client/retry.py), metadata_max_idle_ms (RecordAccumulator.
    remove_idle_tables), metadata_recovery_strategy (KIP-899 re-bootstrap,
    client/metadata.py) and metadata_recovery_rebootstrap_trigger_ms (KIP-1102).
    """

    bootstrap_servers: object = "localhost:9092"
    client_id: object = None  # None: "netkafka-producer-<n>"
    key_serializer: object = None  # callable(key) -> bytes, or None
    value_serializer: object = None  # callable(value) -> bytes, or None
    # Java's and kafka-python 3's default: 'all' (-1), with idempotence on.
    acks: object = "all"
    compression_type: object = None
    # kafka-python 3 says float('inf'); Kafka's int32 ceiling means the same:
    # delivery_timeout_ms bounds retrying in practice.
    retries: object = _INT32_MAX
    batch_size: int = 16384
    # kafka-python's default (Java 4.x has 5).  A batch whose partition still has batches
    # queued for the broker stays open past it (as Java's do), up to 100 ms more.  The
    # one duration kept as given, fraction and all (the other *_ms: whole ms, check_ms).
    linger_ms: float = 0
    partitioner: object = "default"
    buffer_memory: int = 32 * _MiB
    max_block_ms: int = 60000
    max_request_size: int = _MiB
    metadata_max_age_ms: int = 300000
    # The Java producer's metadata.max.idle.ms: a topic that opened no batch for this
    # long is dropped from metadata (its refreshes stop naming it) until sent to again.
    metadata_max_idle_ms: int = 300000
    retry_backoff_ms: int = 100
    # KIP-580: retry_backoff_ms doubles with each retry up to this (the Java client's
    # default; kafka-python 3 has no such setting and waits retry_backoff_ms each time).
    retry_backoff_max_ms: int = 1000
    request_timeout_ms: int = 30000
    delivery_timeout_ms: int = 120000
    max_in_flight_requests_per_connection: int = 5
    enable_idempotence: object = True
    send_buffer_bytes: object = None  # None: the OS default (kafka-python's)
    receive_buffer_bytes: object = None  # None: the OS default
    connections_max_idle_ms: int = 540000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000  # the Java client's (kafka-python: 30000)
    # As kafka-python: None or 'auto' negotiates every API's version with the broker
    # (ApiVersions); a tuple below (0, 11) pins legacy Produce and message sets
    # (legacy_produce()); a higher one is checked and versions are negotiated.
    api_version: object = None
    allow_auto_create_topics: object = True
    client_dns_lookup: object = "use_all_dns_ips"
    receive_message_max_bytes: int = 100_000_000
    socket_options: object = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)
    # Not a kafka-python 3 producer setting (its network manager's); the Java name.
    socket_connection_setup_timeout_ms: int = ConnectionConfig.connect_timeout_ms
    socket_connection_setup_timeout_max_ms: int = ConnectionConfig.connect_timeout_max_ms
    # KIP-899: 'none' (the Java 3.x default) or 'rebootstrap': when every known broker
    # is unreachable, metadata is fetched from bootstrap_servers again.
    metadata_recovery_strategy: str = "none"
    # KIP-1102: with 'rebootstrap', also re-bootstrap when no Metadata request has been
    # answered for this long.
    metadata_recovery_rebootstrap_trigger_ms: int = 300000
    bootstrap_timeout_ms: int = 30000
    metrics_enabled: object = True
    # Java's ProducerInterceptor: objects with on_send(record) and
    # on_acknowledgement(metadata, exception); see netkafka/producer/interceptors.py.
    interceptors: object = ()
    # KIP-390: the codec's level; None its default.  The per-codec ones are the Java
    # client's names; compression_level applies to whichever codec is chosen.  Levels
    # mean what they mean to Java: gzip -1 (zlib's default, 6) or 1-9; lz4 1-17,
    # default 9 (fast; the others HC, above 12 as 12); zstd -131072 to 22, default 3.
    compression_level: object = None
    compression_gzip_level: object = None
    compression_lz4_level: object = None
    compression_zstd_level: object = None
    io_threads: int = 1
    high_watermark_bytes: int = ConnectionConfig.high_watermark_bytes
    low_watermark_bytes: int = ConnectionConfig.low_watermark_bytes
    backoff: object = "block"  # 'block' | 'park' | 'drop' | a strategy object
    # A transactional id makes a transactional producer (idempotence needed, and on).
    transactional_id: object = None
    transaction_timeout_ms: int = 60000  # the Java client's and kafka-python's
    transaction_version: object = None  # netkafka's: TRANSACTION_VERSIONS above
    # security_protocol and the ssl_* / sasl_* settings given (SECURITY_DEFAULTS
    # names; missing ones take its defaults), as Producer(**kwargs) takes them one
    # by one.  Checked at construction; the SSLContext is built then, once.  Not in
    # the repr: it holds passwords.
    security: object = dataclasses.field(default=None, repr=False)
    # The write-ahead log (producer/wal.py): None, or the directory every record is
    # logged in before send() returns, and replayed from by the next producer.
    wal_dir: object = None
    wal_fsync: str = "interval"  # 'never' | 'interval' | 'always'
    wal_fsync_interval_ms: int = 10
    wal_max_bytes: int = 1 << 30
    on_replay: object = None  # callable(context, metadata_or_error), with wal_dir
    on_delivery_timeout: str = "fail"  # 'fail' | 'spool' (with wal_dir)

    @classmethod
    def from_kwargs(cls, kwargs):
        """The config for a Producer(**kwargs) call.

        Raises:
            TypeError: an unknown keyword (named), or a setting given under both its
                names (``linger.ms`` and ``linger_ms``) with different values.
            ValueError: a bad value (key and allowed values named); SslConfigError
                and SaslConfigError for the security settings.
        """
        fields = cls.__dataclass_fields__
        settings = {}
        security = {}
        given_as = {}  # keyword: (the name it was given under first, the value read)
        for given, value in kwargs.items():
            if "." in given:
                # The Java client's names as a properties file gives them: text read as
                # the setting's type, its TLS stores as kafka-python's settings.
                setting = producer_setting(given, value)
                if not setting:
                    continue  # ssl.truststore.type=PEM: what netkafka reads anyway
                ((name, value),) = setting.items()
            else:
                name = given
            first, first_value = given_as.setdefault(name, (given, value))
            if first != given:
                _check_same_value(name, first, first_value, given, value)
            if name in SECURITY_DEFAULTS:
                security[name] = value
            elif name == "security":
                raise TypeError(f"Producer() got an unexpected keyword argument {name!r}")
            elif name in PLUMBING_OPTIONS:
                _check_plumbing_option(name, value)
            elif name in UNSUPPORTED_OPTIONS:
                _check_unsupported_option(name, value)
            elif name not in fields:
                raise TypeError(f"Producer() got an unexpected keyword argument {name!r}")
            else:
                settings[name] = value
        if ("enable_idempotence" not in settings and settings.get("transactional_id") is None
                and _conflicts_with_idempotence(settings)):
            # As the Java client: idempotence is on by default only where it can be,
            # so settings it cannot work with quietly turn the default off (asked for
            # explicitly, or by a transactional id, they are an error).
            settings["enable_idempotence"] = False
        return cls(**settings, security=security)

    def __post_init__(self):
        _check_bootstrap(self.bootstrap_servers)
        if self.client_id is None:
            object.__setattr__(self, "client_id", f"netkafka-producer-{next(_client_ids)}")
        elif not isinstance(self.client_id, str):
            raise ValueError(f"client_id must be a str or None, got {self.client_id!r}")
        else:
            # Every request's header carries it: refused now, not as a silent failure
            # to encode the first request (which looked like a broker that never answered).
            wire_string("client_id", self.client_id)
        for name in ("key_serializer", "value_serializer"):
            value = getattr(self, name)
            if value is not None and not callable(value) and not callable(
                    getattr(value, "serialize", None)):
                raise ValueError(f"{name} must be a Serializer (serialize(topic, headers, "
                                 f"data) -> bytes), a callable (data) -> bytes or None, "
                                 f"got {value!r}")
        object.__setattr__(self, "acks", acks_value(self.acks))
        check_choice("compression_type", self.compression_type, COMPRESSION_TYPES)
        if isinstance(self.retries, float) and math.isinf(self.retries) and self.retries > 0:
            object.__setattr__(self, "retries", _INT32_MAX)
        check_int("retries", self.retries, 0)
        object.__setattr__(self, "retries", min(self.retries, _INT32_MAX))
        # kafka-python's and Java's "a batch size of zero will disable batching":
        # any batch_size from 0.  One too small for a record gives batches of the
        # smallest size, which hold one record each (the accumulator's rule); one
        # above max_request_size, see batch_size_bytes.
        check_int("batch_size", self.batch_size, 0)
        # Kept in nanoseconds by the accumulator: 0.5 is half a millisecond.
        self._set_ms("linger_ms", 0, fraction_kept=True)
        self._set_ms("max_block_ms", 0)
        # As retries: Long.MAX_VALUE, the Java client's "block without bound", or any
        # wait longer than threading takes (TIMEOUT_MAX) raised OverflowError from the
        # first send(); 2**31-1 ms (24.8 days) is as unbounded in practice.
        object.__setattr__(self, "max_block_ms", min(self.max_block_ms, _INT32_MAX))
        # A request holds at least one batch: the 61-byte header and a small record.
        check_int("max_request_size", self.max_request_size, SMALLEST_BATCH_BYTES,
                  maximum=_INT32_MAX)
        check_int("buffer_memory", self.buffer_memory, self.batch_size_bytes,
                  minimum_text=f"the largest batch ({self.batch_size_bytes} bytes: "
                               f"batch_size, at most max_request_size)")
        self._set_ms("metadata_max_age_ms", 1)
        self._set_ms("metadata_max_idle_ms", 5000)  # the Java client's minimum
        self._set_ms("retry_backoff_ms", 0)
        self._set_ms("retry_backoff_max_ms", 0)
        # Every Produce request carries it as an int32 (the Java client's type).
        self._set_ms("request_timeout_ms", 1, maximum=_INT32_MAX)
        self._set_ms("delivery_timeout_ms", 1)
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            # The Java client's rule: a batch must be able to linger and then wait
            # for one answer before its delivery time runs out.  Settings that cannot
            # work together: KafkaConfigurationError, as kafka-python raises here.
            raise KafkaConfigurationError(
                f"delivery_timeout_ms ({self.delivery_timeout_ms}) must be at least "
                f"linger_ms + request_timeout_ms ({self.linger_ms} + "
                f"{self.request_timeout_ms})")
        check_int("max_in_flight_requests_per_connection",
                  self.max_in_flight_requests_per_connection, 1)
        check_choice("enable_idempotence", self.enable_idempotence, (True, False))
        for name in ("send_buffer_bytes", "receive_buffer_bytes"):
            check_int(name, getattr(self, name), 1, none_allowed=True)
        self._set_ms("connections_max_idle_ms", 0)
        self._set_ms("reconnect_backoff_ms", 0)
        self._set_ms("reconnect_backoff_max_ms", 1)
        object.__setattr__(self, "api_version", api_version_value(self.api_version))
        self._check_legacy()
        check_choice("allow_auto_create_topics", self.allow_auto_create_topics, (True, False))
        check_choice("metrics_enabled", self.metrics_enabled, (True, False))
        check_choice("client_dns_lookup", self.client_dns_lookup, CLIENT_DNS_LOOKUPS)
        check_int("receive_message_max_bytes", self.receive_message_max_bytes, 4)
        self._set_ms("socket_connection_setup_timeout_ms", 1)
        self._set_ms("socket_connection_setup_timeout_max_ms", 1)
        check_choice("metadata_recovery_strategy", self.metadata_recovery_strategy,
                     METADATA_RECOVERY_STRATEGIES)
        self._set_ms("metadata_recovery_rebootstrap_trigger_ms", 0)
        self._set_ms("bootstrap_timeout_ms", 0)
        _check_socket_options(self.socket_options)
        _check_interceptors(self.interceptors)
        self._check_compression_levels()
        check_int("io_threads", self.io_threads, 1)
        check_int("low_watermark_bytes", self.low_watermark_bytes, 0)
        check_int("high_watermark_bytes", self.high_watermark_bytes, self.low_watermark_bytes,
                  minimum_text=f"low_watermark_bytes ({self.low_watermark_bytes})")
        self._check_transactions()
        self._check_idempotence()
        self._check_wal()
        self._check_security()

    def _set_ms(self, name, minimum, maximum=None, *, fraction_kept=False):
        """Checks a duration setting and keeps what check_ms makes of it: whole ms,
        or the float as given where fraction_kept."""
        object.__setattr__(self, name, check_ms(name, getattr(self, name), minimum, maximum,
                                                fraction_kept=fraction_kept))

    @property
    def batch_size_bytes(self):
        """The bytes a batch may reach (a single larger record still gets a batch of
        its own, up to max_request_size): batch_size, at most max_request_size.

        Java's documentation calls max.request.size "effectively a cap on the
        maximum uncompressed record batch size"; kafka-python and Java accept a
        larger batch_size but then send such a batch alone in a request above
        max_request_size, which a broker at its default message.max.bytes refuses."""
        return min(self.batch_size, self.max_request_size)

    def _check_wal(self):
        # The sizes that depend on each other (segments within wal_max_bytes) are the
        # WAL's to check when it opens: it names these settings too.
        if self.wal_dir is not None and not isinstance(self.wal_dir, (str, os.PathLike)):
            raise ValueError(f"wal_dir must be a directory path or None, got {self.wal_dir!r}")
        check_choice("wal_fsync", self.wal_fsync, WAL_FSYNC_MODES)
        self._set_ms("wal_fsync_interval_ms", 1)
        check_int("wal_max_bytes", self.wal_max_bytes, 1)
        check_choice("on_delivery_timeout", self.on_delivery_timeout, DELIVERY_TIMEOUT_ACTIONS)
        if self.on_replay is not None and not callable(self.on_replay):
            raise ValueError(f"on_replay must be a callable (context, metadata_or_error) or "
                             f"None, got {self.on_replay!r}")
        if self.wal_dir is not None and self.transactional_id is not None:
            raise KafkaConfigurationError(
                f"wal_dir with transactional_id={self.transactional_id!r}: a transaction "
                f"commits or aborts its records as a whole, which the WAL's replay of "
                f"single batches cannot keep; use one or the other")
        if self.wal_dir is not None and self.legacy_magic is not None:
            raise KafkaConfigurationError(
                f"wal_dir needs RecordBatch v2 (Kafka 0.11+): api_version={self.api_version} "
                f"writes message format v{self.legacy_magic}, which the WAL cannot replay")
        if self.wal_dir is None:
            # Each asks for something only a WAL gives: wal_fsync="always" without
            # wal_dir (left out, or misspelt) ran with no durability at all, silently.
            fields = type(self).__dataclass_fields__
            for name in ("on_replay", "on_delivery_timeout", "wal_fsync",
                         "wal_fsync_interval_ms", "wal_max_bytes"):
                if getattr(self, name) != fields[name].default:
                    raise KafkaConfigurationError(
                        f"{name}={getattr(self, name)!r} needs wal_dir: it is about the "
                        f"write-ahead log, and without wal_dir there is none")

    def _check_security(self):
        security = dict(self.security or {})
        object.__setattr__(self, "security", security)
        protocol = security.get("security_protocol", "PLAINTEXT")
        if protocol not in SECURITY_PROTOCOLS:
            raise SslConfigError(f"security_protocol={protocol!r} is not one of "
                                 f"{', '.join(SECURITY_PROTOCOLS)}")
        check_sasl_settings(security, protocol)
        # Built once here: a bad file or password is refused now, naming the setting,
        # and every connection shares the context (and its loaded certificates).
        object.__setattr__(self, "_ssl_context", build_ssl_context(security, protocol))

    @property
    def security_protocol(self):
        return self.security.get("security_protocol", "PLAINTEXT")

    def _check_legacy(self):
        if self.legacy_magic is None:
            return
        if self.compression_type == "zstd":
            raise ValueError(f"compression_type='zstd' needs RecordBatch v2 (Kafka 2.1+); "
                             f"api_version={self.api_version} writes message format "
                             f"v{self.legacy_magic}")
        if self.compression_type == "lz4" and self.api_version < (0, 8, 2):
            raise ValueError(f"compression_type='lz4' needs Kafka 0.8.2+; "
                             f"api_version={self.api_version}")
        if self.enable_idempotence:
            raise ValueError(f"enable_idempotence=True needs RecordBatch v2 (Kafka 0.11+); "
                             f"api_version={self.api_version} writes message format "
                             f"v{self.legacy_magic}, which has no producer id or sequence")

    @property
    def legacy_magic(self):
        """0 or 1: the message format an api_version below (0, 11) writes; None
        for RecordBatch v2 (negotiated)."""
        legacy = legacy_produce(self.api_version)
        return None if legacy is None else legacy[1]

    def _check_transactions(self):
        if self.transactional_id is not None:
            if not isinstance(self.transactional_id, str) or not self.transactional_id:
                raise ValueError(f"transactional_id must be None or a non-empty str, "
                                 f"got {self.transactional_id!r}")
            wire_string("transactional_id", self.transactional_id)
        self._set_ms("transaction_timeout_ms", 1, maximum=_INT32_MAX)
        check_choice("transaction_version", self.transaction_version, TRANSACTION_VERSIONS)
        if self.transactional_id is not None and not self.enable_idempotence:
            # The Java client's rule: a transaction's batches carry the producer id
            # and sequences its coordinator fences zombies by.
            raise KafkaConfigurationError(
                "transactional_id needs enable_idempotence=True (its default)")

    def _check_idempotence(self):
        if not self.enable_idempotence:
            return
        # The Java client's requirements: without them sequence numbers cannot keep
        # retries free of duplicates and reordering.
        needs = ("transactional_id" if self.transactional_id is not None
                 else "enable_idempotence=True")
        if self.acks != -1:
            raise KafkaConfigurationError(f"{needs} needs acks='all', got acks={self.acks}")
        if self.max_in_flight_requests_per_connection > 5:
            raise KafkaConfigurationError(
                f"{needs} needs max_in_flight_requests_per_connection <= 5, "
                f"got {self.max_in_flight_requests_per_connection}")
        if self.retries == 0:
            raise KafkaConfigurationError(f"{needs} needs retries > 0, got 0")

    def _check_compression_levels(self):
        for name in ("compression_level", *CODEC_LEVEL_OPTIONS.values()):
            level = getattr(self, name)
            if level is not None and (isinstance(level, bool) or not isinstance(level, int)):
                raise ValueError(f"{name} must be an int or None, got {level!r}")
        # Each codec's own level is checked whichever codec is chosen, as Java checks
        # compression.<codec>.level: a bad one fails here, not when the codec changes.
        for codec, name in CODEC_LEVEL_OPTIONS.items():
            checked_level(codec_id(codec), getattr(self, name), name)
        if self.compression_level is None:
            return
        if self.compression_type not in CODEC_LEVEL_OPTIONS:
            raise KafkaConfigurationError(
                f"compression_level={self.compression_level} needs compression_type gzip, "
                f"lz4 or zstd (KIP-390), got {self.compression_type!r}")
        checked_level(self.codec, self.compression_level, "compression_level")
        own = getattr(self, CODEC_LEVEL_OPTIONS[self.compression_type])
        if own is not None and own != self.compression_level:
            raise KafkaConfigurationError(
                f"compression_level={self.compression_level} and "
                f"{CODEC_LEVEL_OPTIONS[self.compression_type]}={own} disagree")

    @property
    def effective_compression_level(self):
        """The level of compression_type's codec: compression_level, else the
        codec's own compression_<codec>_level, else None (the codec's default)."""
        if self.compression_level is not None:
            return self.compression_level
        option = CODEC_LEVEL_OPTIONS.get(self.compression_type)
        return None if option is None else getattr(self, option)

    # kafka-python's config dict: every setting by name.

    def __getitem__(self, name):
        if name in SECURITY_DEFAULTS:
            return self.security.get(name, SECURITY_DEFAULTS[name])
        if name in self.__dataclass_fields__ and name not in _NOT_SETTINGS:
            return getattr(self, name)
        if name in _OPTIONS_AT_DEFAULT:
            return _OPTIONS_AT_DEFAULT[name]
        raise KeyError(name)

    def __iter__(self):
        yield from (name for name in self.__dataclass_fields__ if name not in _NOT_SETTINGS)
        yield from SECURITY_DEFAULTS
        yield from _OPTIONS_AT_DEFAULT

    def __len__(self):
        return (len(self.__dataclass_fields__) - len(_NOT_SETTINGS) + len(SECURITY_DEFAULTS)
                + len(_OPTIONS_AT_DEFAULT))

    @property
    def codec(self):
        """The Kafka codec id of compression_type."""
        return codec_id(self.compression_type)

    def retry_backoff(self):
        """The RetryBackoff of requests asked again after retriable answers."""
        return RetryBackoff(self.retry_backoff_ms, self.retry_backoff_max_ms)

    def connection_config(self):
        """The settings every broker connection shares."""
        return ConnectionConfig(
            client_id=self.client_id,
            request_timeout_ms=self.request_timeout_ms,
            max_in_flight_requests_per_connection=self.max_in_flight_requests_per_connection,
            send_buffer_bytes=-1 if self.send_buffer_bytes is None else self.send_buffer_bytes,
            receive_buffer_bytes=(-1 if self.receive_buffer_bytes is None
                                  else self.receive_buffer_bytes),
            reconnect_backoff_ms=self.reconnect_backoff_ms,
            reconnect_backoff_max_ms=max(self.reconnect_backoff_max_ms,
                                         self.reconnect_backoff_ms, 1),
            connections_max_idle_ms=self.connections_max_idle_ms,
            high_watermark_bytes=self.high_watermark_bytes,
            low_watermark_bytes=self.low_watermark_bytes,
            max_response_bytes=self.receive_message_max_bytes,
            connect_timeout_ms=self.socket_connection_setup_timeout_ms,
            connect_timeout_max_ms=self.socket_connection_setup_timeout_max_ms,
            client_dns_lookup=self.client_dns_lookup,
            socket_options=tuple(tuple(option) for option in self.socket_options),
            produce_version=(None if legacy_produce(self.api_version) is None
                             else legacy_produce(self.api_version)[0]),
            security_protocol=self.security_protocol,
            ssl_context=self._ssl_context,
            sasl_settings=({name: self.security.get(name, default)
                            for name, default in SASL_DEFAULTS.items()}
                           if self.security_protocol in SASL_PROTOCOLS else None),
        )


# The settings a ProducerConfig holds only at their defaults (others are refused),
# as its mapping shows them.
_OPTIONS_AT_DEFAULT = {**PLUMBING_OPTIONS, **UNSUPPORTED_OPTIONS}
# Fields that are not settings of their own: `security` holds the security settings
# given, which the mapping shows one by one.
_NOT_SETTINGS = frozenset({"security"})
# Every setting a Producer takes, by keyword, with its default.
_SETTING_DEFAULTS = {**{name: field.default
                        for name, field in ProducerConfig.__dataclass_fields__.items()
                        if name not in _NOT_SETTINGS},
                     **SECURITY_DEFAULTS, **_OPTIONS_AT_DEFAULT}
# Settings whose text is read as a number though their default is not one: acks
# ('all' or a number), the socket buffers (None keeps the OS default) and the
# compression levels (None: the codec's default).
_NUMBERS_WITHOUT_INT_DEFAULT = frozenset({"acks", "send_buffer_bytes", "receive_buffer_bytes",
                                          "compression_level", *CODEC_LEVEL_OPTIONS.values()})
_WHOLE_NUMBER = re.compile(r"\s*-?\d+\s*")

# The Java client's TLS settings for PEM files, as kafka-python's: Java name ->
# (keyword, {text: value} for a setting whose text means something else, or None).
# A store type only confirms that the files are PEM, which is all netkafka reads
# (keyword None: nothing to set).  ssl.keystore.location is a PEM file holding the
# private key and the certificate chain, which is what ssl_certfile may be.
JAVA_TLS_SETTINGS = {
    "ssl.truststore.location": ("ssl_cafile", None),
    "ssl.keystore.location": ("ssl_certfile", None),
    "ssl.key.password": ("ssl_password", None),
    "ssl.endpoint.identification.algorithm": ("ssl_check_hostname",
                                              {"https": True, "": False}),
    "ssl.truststore.type": (None, {"PEM": None}),
    "ssl.keystore.type": (None, {"PEM": None}),
}
# Java client settings netkafka has no keyword for, that client configurations carry
# often: what to do instead (the error for an unknown setting adds it).
JAVA_SETTING_HINTS = {
    "ssl.truststore.password": "a PEM trust store has no password (the Java client "
                               "refuses one too): drop it",
    "ssl.keystore.password": "a PEM key store has no store password (the Java client "
                             "refuses one too); an encrypted key's password is "
                             "ssl.key.password",
    "ssl.truststore.certificates": "put the certificates in a PEM file and name it in "
                                   "ssl.truststore.location",
    "ssl.keystore.certificate.chain": "put the key and the chain in one PEM file and name "
                                      "it in ssl.keystore.location",
    "ssl.keystore.key": "put the key and the chain in one PEM file and name it in "
                        "ssl.keystore.location",
    "sasl.login.callback.handler.class": "Java classes cannot run here: for OAUTHBEARER "
                                         "pass sasl_oauth_token_provider (an OIDC or MSK "
                                         "IAM provider) to Producer",
    "sasl.client.callback.handler.class": "Java classes cannot run here: for MSK IAM pass "
                                          "sasl_oauth_token_provider=netkafka.client.sasl."
                                          "msk_iam.MskIamTokenProvider(region) to Producer",
    "sasl.oauthbearer.token.endpoint.url": "pass sasl_oauth_token_provider=netkafka.client."
                                           "sasl.oauthbearer.OidcClientCredentialsProvider("
                                           "url, client_id, client_secret) to Producer",
    "key.serializer": "serializers are Python callables: key_serializer= of Producer",
    "value.serializer": "serializers are Python callables: value_serializer= of Producer",
}


def producer_setting(name, value, origin=None):
    """The Producer keyword argument a setting given by name stands for, as a dict:
    {keyword: value}, or {} for a Java setting that only confirms what netkafka does
    (ssl.truststore.type=PEM).  Names are read by producer_keyword, values by
    setting_from_text, text trimmed first as Java's ConfigDef trims it; the Java TLS
    settings (JAVA_TLS_SETTINGS) become kafka-python's.

    Raises:
        TypeError: not a setting of Producer (named).
        ValueError: a value the setting cannot take (named as origin=value).
    """
    if isinstance(value, str):
        # Java's ConfigDef trims every value it parses (passwords too): a properties
        # file's trailing blanks, invisible, are not part of the setting.
        value = value.strip()
    java = JAVA_TLS_SETTINGS.get(name.strip().lower())
    if java is None:
        keyword = producer_keyword(name, origin)
        return {keyword: setting_from_text(keyword, value, origin or name)}
    keyword, meanings = java
    if meanings is not None:
        text = value.strip() if isinstance(value, str) else value
        # Read as Java reads them: store types and the algorithm in any case.
        if isinstance(text, str):
            key = text.upper() if keyword is None else text.lower()
        else:
            key = text
        if key not in meanings:
            allowed = " or ".join(repr(text) for text in meanings)
            hint = (": netkafka reads PEM files; convert a JKS or PKCS12 store with "
                    "keytool and openssl" if keyword is None else "")
            raise ValueError(f"{origin or name}={value!r}: must be {allowed}{hint}")
        value = meanings[key]
    return {} if keyword is None else {keyword: value}


def _check_same_value(keyword, first, first_value, second, second_value):
    """A setting given under both its names ("linger.ms" and "linger_ms") must say the same
    thing: one of two values taken silently (the later) dropped the other, a user's
    explicit choice (idempotence off, one request in flight) among them."""
    if first_value is not second_value and first_value != second_value:
        raise TypeError(
            f"Producer() got {keyword} twice, with different values: {first}={first_value!r} "
            f"and {second}={second_value!r}")


def producer_keyword(name, origin=None):
    """The Producer keyword a setting's name stands for: kafka-python's own
    (``batch_size``), or the Java client's dotted one (``batch.size``).

    Args:
        name: the name as given; dots and dashes read as underscores.
        origin: where it was given, for the message (default: name).

    Raises:
        TypeError: not a setting of Producer (named as given and as read).
    """
    keyword = name.strip().replace(".", "_").replace("-", "_")
    if keyword not in _SETTING_DEFAULTS:
        hint = JAVA_SETTING_HINTS.get(name.strip().lower())
        raise TypeError(f"unknown producer setting {origin or name!r} (read as {keyword!r}): "
                        f"not one of netkafka.Producer's keyword arguments"
                        + (f"; {hint}" if hint else ""))
    return keyword


def setting_from_text(keyword, value, origin=None):
    """value as the Producer takes it for keyword: text is read as the setting's type,
    as it comes from a Spark conf, a properties file or a command line; any other value
    is returned as it is.

    Text is true/false for a setting whose default is a bool, a whole number for one
    whose default is an int (and for acks and the socket buffer sizes, where it may
    be); security_protocol in any case, as Java reads it; empty text for a list
    setting is the empty list; anything else stays text.
    The Producer checks the values it gets.

    Args:
        keyword: a Producer keyword (see producer_keyword).
        origin: where the value was given, for the message (default: keyword).

    Raises:
        ValueError: text that is not a bool or an int where one is needed (named as
            origin=text).
    """
    if not isinstance(value, str):
        return value
    if keyword == "security_protocol":
        # As the Java client (SecurityProtocol.forName): 'sasl_ssl' is SASL_SSL.
        return value.strip().upper()
    default = _SETTING_DEFAULTS[keyword]
    if isinstance(default, tuple) and not value.strip():
        # A list setting (metric.reporters, interceptor.classes) left empty: Java's
        # ConfigDef reads it as the empty list, the default -- not text to refuse.
        return ()
    if isinstance(default, bool):
        if value.strip().lower() not in ("true", "false"):
            raise ValueError(f"{origin or keyword}={value!r}: must be true or false")
        return value.strip().lower() == "true"
    number = _WHOLE_NUMBER.fullmatch(value) is not None
    if isinstance(default, int):
        if not number:
            raise ValueError(f"{origin or keyword}={value!r}: must be an integer")
        return int(value)
    if number and keyword in _NUMBERS_WITHOUT_INT_DEFAULT:
        return int(value)
    return value


def api_version_value(api_version):
    """api_version as kafka-python reads it: None or 'auto' (negotiate), a tuple of
    ints, or (deprecated there) a dotted str such as '0.10.1'.  Returns None or
    the tuple.

    Raises:
        ValueError: anything else (named).
    """
    if api_version is None or api_version == "auto":
        return None
    value = api_version
    if isinstance(value, str):
        try:
            value = tuple(int(part) for part in value.split("."))
        except ValueError:
            value = None
    if (isinstance(value, tuple) and value
            and all(type(part) is int and part >= 0 for part in value)):
        return value
    raise ValueError(f"api_version must be None, 'auto' or a tuple of ints such as "
                     f"(0, 10, 1), got {api_version!r}")


def legacy_produce(api_version):
    """(Produce version, message format) that an api_version below (0, 11) pins, as
    kafka-python maps it: the highest Produce of that Kafka release, and magic 1
    from 0.10 (timestamps), 0 before.  None for anything else (RecordBatch v2,
    versions negotiated).  api_version as api_version_value() returns it."""
    if api_version is None or api_version >= (0, 11):
        return None
    if api_version >= (0, 10):
        return (2, 1)
    if api_version >= (0, 9):
        return (1, 0)
    return (0, 0)


def _conflicts_with_idempotence(settings):
    """acks other than 'all', no retries, more than 5 requests in flight, or an
    api_version below (0, 11) (legacy message sets carry no producer id)."""
    # Bad values are left for __post_init__ to name.
    try:
        if legacy_produce(api_version_value(settings.get("api_version"))) is not None:
            return True
    except ValueError:
        pass
    in_flight = settings.get("max_in_flight_requests_per_connection", 5)
    return (settings.get("acks", "all") not in ("all", -1)
            or settings.get("retries", 1) == 0
            or (isinstance(in_flight, int) and in_flight > 5))


def acks_value(acks):
    """The wire value of an acks setting: 0, 1, or -1 for 'all'.

    Raises:
        ValueError: not one of ACKS.
    """
    check_choice("acks", acks, ACKS)
    return -1 if acks == "all" else acks


def _check_bootstrap(servers):
    # The shape first, so that a bad type names the option; then each entry, as the
    # metadata cache reads them, so that every caller of ProducerConfig (the Spark
    # driver, netkafka-perf) refuses a bad one before anything starts.
    if isinstance(servers, str):
        if not servers.strip():
            raise ValueError("bootstrap_servers must name at least one 'host:port'")
    elif not (isinstance(servers, (list, tuple)) and servers):
        raise ValueError(f"bootstrap_servers must be 'host:port[,host:port...]' or a list of "
                         f"them, got {servers!r}")
    parse_bootstrap_servers(servers)


def _check_plumbing_option(name, value):
    if value is PLUMBING_OPTIONS[name]:
        return
    raise KafkaConfigurationError(
        f"{name}={value!r} does not apply to netkafka: it replaces kafka-python's network "
        f"client and selector with its own I/O threads (each with its own selector); "
        f"leave {name} unset")


def _check_unsupported_option(name, value):
    default = UNSUPPORTED_OPTIONS[name]
    if value == default or (default == () and value == []):
        return
    raise NotImplementedError(
        f"{name}={value!r}: netkafka supports only {default!r} (see ProducerConfig's "
        f"table of kafka-python settings)")


def _check_socket_options(options):
    # The types setsockopt(level, option, value) takes: a wrong one raised TypeError
    # at every connection attempt, never reaching the user as a setting error.
    if isinstance(options, (list, tuple)) and all(
            isinstance(option, (list, tuple)) and len(option) == 3
            and all(isinstance(part, int) for part in option[:2])
            and isinstance(option[2], (int, bytes, bytearray)) for option in options):
        return
    raise ValueError(f"socket_options must be a list of (level, option, value) for "
                     f"socket.setsockopt (ints; the value an int or bytes), got {options!r}")


def _check_interceptors(interceptors):
    if not isinstance(interceptors, (list, tuple)):
        raise ValueError(f"interceptors must be a list of objects with on_send(record) and "
                         f"on_acknowledgement(metadata, exception), got {interceptors!r}")
    for interceptor in interceptors:
        for method in ("on_send", "on_acknowledgement"):
            if not callable(getattr(interceptor, method, None)):
                raise ValueError(f"interceptor {interceptor!r} has no {method}() method")
