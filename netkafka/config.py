"""The Producer's keyword arguments: names, defaults, validation.

The names and meanings are kafka-python's KafkaProducer's (which follow the Java
client's settings); the defaults are kafka-python 3's where they agree with the Java
client, and the Java client's otherwise (noted below).  netkafka adds io_threads,
high_watermark_bytes, low_watermark_bytes and backoff, and the write-ahead log's
settings (wal_dir, wal_fsync, wal_fsync_interval_ms, wal_max_bytes, on_replay,
on_delivery_timeout).  A keyword may be given Java's dotted way too (``wal.dir``).

An unknown keyword raises TypeError naming it; a bad value raises ValueError naming
the key and what it allows; a security option (anything but PLAINTEXT) or a
transactional id raises NotImplementedError until netkafka speaks TLS and SASL, and
transactions.

Settings given as text (Spark conf, a properties file, a command line) reach the
Producer through producer_keyword() and setting_from_text(): the Java client's
dotted names and typed values, read one way for every tool.
"""
import itertools
import math
import os
import re
from dataclasses import dataclass

from netkafka._validate import check_choice, check_int
from netkafka.client.connection import ConnectionConfig
from netkafka.record._compression import CODEC_NAMES, codec_id

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

# kafka-python's security options, with the values that mean "not used".  Any other
# value asks for TLS or SASL, which netkafka does not speak yet.
SECURITY_OPTIONS = {
    "security_protocol": "PLAINTEXT",
    "ssl_context": None,
    "ssl_check_hostname": True,
    "ssl_cafile": None,
    "ssl_certfile": None,
    "ssl_keyfile": None,
    "ssl_crlfile": None,
    "ssl_password": None,
    "ssl_ciphers": None,
    "sasl_mechanism": None,
    "sasl_plain_username": None,
    "sasl_plain_password": None,
    "sasl_kerberos_name": None,
    "sasl_kerberos_service_name": "kafka",
    "sasl_kerberos_domain_name": None,
    "sasl_oauth_token_provider": None,
}
# kafka-python's transaction options, with the values that mean "no transactions".
TRANSACTION_OPTIONS = {
    "transactional_id": None,
    "transaction_timeout_ms": 60000,
}


@dataclass(frozen=True)
class ProducerConfig:
    """Every setting of a Producer, validated.  Immutable."""

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
    linger_ms: int = 0  # kafka-python's default (Java 4.x has 5)
    partitioner: object = "default"
    buffer_memory: int = 32 * _MiB
    max_block_ms: int = 60000
    max_request_size: int = _MiB
    metadata_max_age_ms: int = 300000
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30000
    delivery_timeout_ms: int = 120000
    max_in_flight_requests_per_connection: int = 5
    enable_idempotence: object = True
    send_buffer_bytes: object = None  # None: the OS default (kafka-python's)
    receive_buffer_bytes: object = None  # None: the OS default
    connections_max_idle_ms: int = 540000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1000  # the Java client's (kafka-python: 30000)
    # kafka-python pins the protocol version with this; netkafka negotiates every
    # API's version with the broker (ApiVersions), so the value is checked and unused.
    api_version: object = None
    io_threads: int = 1
    high_watermark_bytes: int = ConnectionConfig.high_watermark_bytes
    low_watermark_bytes: int = ConnectionConfig.low_watermark_bytes
    backoff: object = "block"  # 'block' | 'park' | 'drop' | a strategy object
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
            TypeError: an unknown keyword (named).
            ValueError: a bad value (key and allowed values named).
            NotImplementedError: a TLS or SASL setting.
        """
        fields = cls.__dataclass_fields__
        settings = {}
        for name, value in kwargs.items():
            if "." in name:
                name = producer_keyword(name)
            if name in SECURITY_OPTIONS:
                _check_security_option(name, value)
            elif name in TRANSACTION_OPTIONS:
                _check_transaction_option(name, value)
            elif name not in fields:
                raise TypeError(f"Producer() got an unexpected keyword argument {name!r}")
            else:
                settings[name] = value
        if "enable_idempotence" not in settings and _conflicts_with_idempotence(settings):
            # As the Java client: idempotence is on by default only where it can be,
            # so settings it cannot work with quietly turn the default off (asked for
            # explicitly, they are an error).
            settings["enable_idempotence"] = False
        return cls(**settings)

    def __post_init__(self):
        _check_bootstrap(self.bootstrap_servers)
        if self.client_id is None:
            object.__setattr__(self, "client_id", f"netkafka-producer-{next(_client_ids)}")
        elif not isinstance(self.client_id, str):
            raise ValueError(f"client_id must be a str or None, got {self.client_id!r}")
        for name in ("key_serializer", "value_serializer"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ValueError(f"{name} must be a callable (data) -> bytes or None, "
                                 f"got {value!r}")
        object.__setattr__(self, "acks", acks_value(self.acks))
        check_choice("compression_type", self.compression_type, COMPRESSION_TYPES)
        if isinstance(self.retries, float) and math.isinf(self.retries) and self.retries > 0:
            object.__setattr__(self, "retries", _INT32_MAX)
        check_int("retries", self.retries, 0)
        object.__setattr__(self, "retries", min(self.retries, _INT32_MAX))
        # A batch holds the 61-byte header and at least one small record.
        check_int("batch_size", self.batch_size, 128)
        check_int("linger_ms", self.linger_ms, 0)
        check_int("max_block_ms", self.max_block_ms, 0)
        check_int("max_request_size", self.max_request_size, 1, maximum=_INT32_MAX)
        if self.batch_size > self.max_request_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be at most "
                             f"max_request_size ({self.max_request_size})")
        check_int("buffer_memory", self.buffer_memory, self.batch_size,
                  minimum_text=f"batch_size ({self.batch_size})")
        check_int("metadata_max_age_ms", self.metadata_max_age_ms, 1)
        check_int("retry_backoff_ms", self.retry_backoff_ms, 0)
        check_int("request_timeout_ms", self.request_timeout_ms, 1)
        check_int("delivery_timeout_ms", self.delivery_timeout_ms, 1)
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            # The Java client's rule: a batch must be able to linger and then wait
            # for one answer before its delivery time runs out.
            raise ValueError(
                f"delivery_timeout_ms ({self.delivery_timeout_ms}) must be at least "
                f"linger_ms + request_timeout_ms ({self.linger_ms} + "
                f"{self.request_timeout_ms})")
        check_int("max_in_flight_requests_per_connection",
                  self.max_in_flight_requests_per_connection, 1)
        check_choice("enable_idempotence", self.enable_idempotence, (True, False))
        for name in ("send_buffer_bytes", "receive_buffer_bytes"):
            check_int(name, getattr(self, name), 1, none_allowed=True)
        check_int("connections_max_idle_ms", self.connections_max_idle_ms, 0)
        check_int("reconnect_backoff_ms", self.reconnect_backoff_ms, 0)
        check_int("reconnect_backoff_max_ms", self.reconnect_backoff_max_ms, 1)
        if self.api_version is not None and not (
                isinstance(self.api_version, tuple)
                and all(isinstance(p, int) for p in self.api_version)):
            raise ValueError(f"api_version must be None or a tuple of ints such as "
                             f"(2, 8, 0), got {self.api_version!r}")
        check_int("io_threads", self.io_threads, 1)
        check_int("low_watermark_bytes", self.low_watermark_bytes, 0)
        check_int("high_watermark_bytes", self.high_watermark_bytes, self.low_watermark_bytes,
                  minimum_text=f"low_watermark_bytes ({self.low_watermark_bytes})")
        self._check_idempotence()
        self._check_wal()

    def _check_wal(self):
        # The sizes that depend on each other (segments within wal_max_bytes) are the
        # WAL's to check when it opens: it names these settings too.
        if self.wal_dir is not None and not isinstance(self.wal_dir, (str, os.PathLike)):
            raise ValueError(f"wal_dir must be a directory path or None, got {self.wal_dir!r}")
        check_choice("wal_fsync", self.wal_fsync, WAL_FSYNC_MODES)
        check_int("wal_fsync_interval_ms", self.wal_fsync_interval_ms, 1)
        check_int("wal_max_bytes", self.wal_max_bytes, 1)
        check_choice("on_delivery_timeout", self.on_delivery_timeout, DELIVERY_TIMEOUT_ACTIONS)
        if self.on_replay is not None and not callable(self.on_replay):
            raise ValueError(f"on_replay must be a callable (context, metadata_or_error) or "
                             f"None, got {self.on_replay!r}")
        if self.wal_dir is None:
            for name, unset in (("on_replay", None), ("on_delivery_timeout", "fail")):
                if getattr(self, name) != unset:
                    raise ValueError(f"{name}={getattr(self, name)!r} needs wal_dir: the "
                                     f"records it is about are kept in the write-ahead log")

    def _check_idempotence(self):
        if not self.enable_idempotence:
            return
        # The Java client's requirements: without them sequence numbers cannot keep
        # retries free of duplicates and reordering.
        if self.acks != -1:
            raise ValueError(f"enable_idempotence=True needs acks='all', got acks={self.acks}")
        if self.max_in_flight_requests_per_connection > 5:
            raise ValueError(
                f"enable_idempotence=True needs max_in_flight_requests_per_connection <= 5, "
                f"got {self.max_in_flight_requests_per_connection}")
        if self.retries == 0:
            raise ValueError("enable_idempotence=True needs retries > 0, got 0")

    @property
    def codec(self):
        """The Kafka codec id of compression_type."""
        return codec_id(self.compression_type)

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
        )


# Every setting a Producer takes, by keyword, with its default.
_SETTING_DEFAULTS = {**{name: field.default
                        for name, field in ProducerConfig.__dataclass_fields__.items()},
                     **SECURITY_OPTIONS, **TRANSACTION_OPTIONS}
# Settings whose text is read as a number though their default is not one: acks
# ('all' or a number), and the socket buffers (None keeps the OS default).
_NUMBERS_WITHOUT_INT_DEFAULT = frozenset({"acks", "send_buffer_bytes", "receive_buffer_bytes"})
_WHOLE_NUMBER = re.compile(r"\s*-?\d+\s*")


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
        raise TypeError(f"unknown producer setting {origin or name!r} (read as {keyword!r}): "
                        f"not one of netkafka.Producer's keyword arguments")
    return keyword


def setting_from_text(keyword, value, origin=None):
    """value as the Producer takes it for keyword: text is read as the setting's type,
    as it comes from a Spark conf, a properties file or a command line; any other value
    is returned as it is.

    Text is true/false for a setting whose default is a bool, a whole number for one
    whose default is an int (and for acks and the socket buffer sizes, where it may
    be); anything else stays text.  The Producer checks the values it gets.

    Args:
        keyword: a Producer keyword (see producer_keyword).
        origin: where the value was given, for the message (default: keyword).

    Raises:
        ValueError: text that is not a bool or an int where one is needed (named as
            origin=text).
    """
    if not isinstance(value, str):
        return value
    default = _SETTING_DEFAULTS[keyword]
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


def _conflicts_with_idempotence(settings):
    """acks other than 'all', no retries, or more than 5 requests in flight."""
    # Bad values are left for __post_init__ to name.
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
    # metadata.parse_bootstrap_servers checks each entry when the producer starts;
    # here only the shape, so that a bad type names the option.
    if isinstance(servers, str):
        if not servers.strip():
            raise ValueError("bootstrap_servers must name at least one 'host:port'")
        return
    if isinstance(servers, (list, tuple)) and servers:
        return
    raise ValueError(f"bootstrap_servers must be 'host:port[,host:port...]' or a list of "
                     f"them, got {servers!r}")


def _check_transaction_option(name, value):
    if value == TRANSACTION_OPTIONS[name]:
        return
    raise NotImplementedError(
        f"{name}={value!r}: netkafka has no transactions yet (idempotence, on by default, "
        f"keeps retries free of duplicates); leave the transaction options unset")


def _check_security_option(name, value):
    if value == SECURITY_OPTIONS[name]:
        return
    raise NotImplementedError(
        f"{name}={value!r}: netkafka speaks PLAINTEXT only for now (no TLS or SASL); "
        f"leave the security options at their defaults")
