"""The Producer's keyword arguments as a TypedDict, for type checkers and IDEs.

Producer takes ``**configs`` (netkafka.config.ProducerConfig checks each at run time);
its stub (producer.pyi) spells them ``**configs: Unpack[ProducerSettings]``, so an IDE
completes the names and mypy checks their types.  tests/test_typing.py keeps this list
equal to the settings netkafka.config accepts.  Types are what each setting takes; a
value the type allows may still be refused at run time (e.g. acks=2).  The *_ms
durations are float, which takes an int too: kafka-python takes either.
"""
import os
import ssl
from typing import Any, Callable, Literal, Optional, TypedDict, Union


class ProducerSettings(TypedDict, total=False):
    """Every keyword argument of netkafka.Producer; defaults are in ProducerConfig."""

    bootstrap_servers: Union[str, list[str]]
    client_id: Optional[str]
    key_serializer: Any  # a callable or a kafka-python Serializer object
    value_serializer: Any
    acks: Union[Literal["all"], int]
    compression_type: Optional[str]
    retries: int
    batch_size: int
    linger_ms: float
    partitioner: Any  # a name ('default', 'round_robin', ...), a Partitioner or a callable
    buffer_memory: int
    max_block_ms: float
    max_request_size: int
    metadata_max_age_ms: float
    metadata_max_idle_ms: float
    retry_backoff_ms: float
    retry_backoff_max_ms: float
    request_timeout_ms: float
    delivery_timeout_ms: float
    max_in_flight_requests_per_connection: int
    enable_idempotence: Optional[bool]
    send_buffer_bytes: Optional[int]
    receive_buffer_bytes: Optional[int]
    connections_max_idle_ms: float
    reconnect_backoff_ms: float
    reconnect_backoff_max_ms: float
    api_version: Optional[Union[tuple[int, ...], str]]
    allow_auto_create_topics: bool
    client_dns_lookup: Literal["use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"]
    receive_message_max_bytes: int
    socket_options: list[tuple[int, int, int]]
    socket_connection_setup_timeout_ms: float
    socket_connection_setup_timeout_max_ms: float
    metadata_recovery_strategy: Literal["none", "rebootstrap"]
    metadata_recovery_rebootstrap_trigger_ms: float
    bootstrap_timeout_ms: float
    metrics_enabled: bool
    interceptors: Optional[list[Any]]  # objects with on_send / on_acknowledgement
    compression_level: Optional[int]
    compression_gzip_level: Optional[int]
    compression_lz4_level: Optional[int]
    compression_zstd_level: Optional[int]
    io_threads: int
    high_watermark_bytes: int
    low_watermark_bytes: int
    backoff: Any  # 'block', 'park', 'drop' or a strategy object
    wal_dir: Optional[Union[str, "os.PathLike[str]"]]
    wal_fsync: Literal["never", "interval", "always"]
    wal_fsync_interval_ms: float
    wal_max_bytes: int
    on_replay: Optional[Callable[[Optional[bytes], Any], object]]  # (context, metadata or error)
    on_delivery_timeout: Literal["fail", "spool"]
    security_protocol: str
    ssl_context: Optional[ssl.SSLContext]
    ssl_check_hostname: bool
    ssl_cafile: Optional[str]
    ssl_certfile: Optional[str]
    ssl_keyfile: Optional[str]
    ssl_crlfile: Optional[str]
    ssl_password: Optional[Union[str, bytes, Callable[[], Union[str, bytes]]]]
    ssl_ciphers: Optional[str]
    sasl_mechanism: Optional[str]
    sasl_plain_username: Optional[str]
    sasl_plain_password: Optional[str]
    sasl_kerberos_name: Any  # a name text or a gssapi.Name
    sasl_kerberos_service_name: str
    sasl_kerberos_domain_name: Optional[str]
    sasl_oauth_token_provider: Any  # an object with token() (kafka-python's interface)
    sasl_jaas_config: Optional[str]  # netkafka's: PLAIN or SCRAM login module, Java's syntax
    transactional_id: Optional[str]
    transaction_timeout_ms: float
    transaction_version: Optional[int]  # netkafka's: None (V2 where the cluster has it) or 1
    # kafka-python 3 machinery, refused unless at its default (KafkaConfigurationError).
    kafka_client: Any
    selector: Any
    # kafka-python 3 settings accepted at their defaults only.
    metric_reporters: Any
    metrics_num_samples: int
    metrics_sample_window_ms: int
    proxy_url: Optional[str]
    socks5_proxy: Optional[str]
