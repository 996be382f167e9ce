"""Producer settings for netkafka.spark, resolved on the driver.

A sink or emitter is made on the driver; its settings are resolved there, checked by
every check of Producer(), and travel to the executors inside it: the `config` dict
(kafka-python's keyword names, or the Java client's dotted names) over the Spark conf
keys under CONF_PREFIX, e.g. spark.netkafka.producer.bootstrap.servers.  Names and
text values are read by netkafka.config, as netkafka-perf reads them.
"""
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark import cloudpickle

from netkafka.config import ProducerConfig, producer_setting

CONF_PREFIX = "spark.netkafka.producer."
# Executors send in bulk: librdkafka's batch size and linger unless the
# configuration says otherwise (kafka-python's 16 KiB and 0 ms are several times
# slower here).
SPARK_DEFAULTS = {"batch_size": 1024 * 1024, "linger_ms": 5}


@dataclass(frozen=True)
class ProducerSettings:
    """Producer keyword arguments, checked, and a digest naming them.

    Made on the driver by producer_settings(); pickled into the sink or emitter.
    The digest is the key of a worker's producer cache: computed once, it stays
    the same in every task even when a setting is a function."""

    kwargs: dict
    digest: str


def producer_settings(config=None):
    """The producer settings a sink or emitter made now would use.

    Args:
        config: None, a ProducerSettings (returned as is), or a dict of Producer
            keyword arguments; a Java-style dotted name (``bootstrap.servers``,
            ``linger.ms``) stands for its kafka-python name (``bootstrap_servers``,
            ``linger_ms``), and the Java client's PEM TLS settings
            (``ssl.truststore.location``, ...) theirs (config.JAVA_TLS_SETTINGS);
            ``sasl.jaas.config`` carries PLAIN or SCRAM credentials as in Java.
            Strings are read as the setting's type ("5", "true").

    The active Spark session's conf keys under CONF_PREFIX come first (names and
    values as above), then config overrides them, then SPARK_DEFAULTS fill in
    batch_size and linger_ms.

    Raises:
        TypeError: an unknown setting (named, with where it came from, and what to
            use instead for a Java-only one such as ssl.truststore.password).
        ValueError: a bad value, or no bootstrap servers at all (SslConfigError,
            SaslConfigError and JaasConfigError for the security settings).
        NotImplementedError: transactional_id, and the kafka-python settings
            netkafka does not support.
    """
    if isinstance(config, ProducerSettings):
        return config
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"config must be None, a dict of producer settings or a "
                        f"ProducerSettings, not {type(config).__name__}")
    kwargs = {}
    for key, value in _spark_conf_items():
        kwargs.update(producer_setting(key[len(CONF_PREFIX):], value, key))
    for key, value in (config or {}).items():
        if not isinstance(key, str):
            raise TypeError(f"config keys must be str, got {key!r}")
        kwargs.update(producer_setting(key, value, key))
    if "transactional_id" in kwargs:
        # Tasks send through their worker's shared producer (sink.worker_producer):
        # a transactional one refuses every record before init_transactions().
        raise NotImplementedError(
            "transactional_id: the sink and emitters send through each worker's shared "
            "producer, which runs no transactions; for exactly once, write with "
            "format('netkafka') and the option exactlyOnce=true")
    if "bootstrap_servers" not in kwargs:
        raise ValueError(f"no bootstrap servers for netkafka.spark: pass "
                         f"config={{'bootstrap_servers': 'host:port'}} or set "
                         f"{CONF_PREFIX}bootstrap.servers in the Spark conf")
    for name, value in SPARK_DEFAULTS.items():
        kwargs.setdefault(name, value)
    ProducerConfig.from_kwargs(kwargs)  # every check of Producer(), now, on the driver
    digest = hashlib.sha256(cloudpickle.dumps(sorted(kwargs.items()))).hexdigest()
    return ProducerSettings(kwargs, digest)


def _spark_conf_items():
    """(key, value) of the active session's conf under CONF_PREFIX; none without one
    (on an executor, or before a session exists)."""
    from pyspark.sql import SparkSession
    session = SparkSession.getActiveSession()
    if session is None:
        return []
    return [(key, value) for key, value in session.conf.getAll.items()
            if key.startswith(CONF_PREFIX)]
