"""The versions netkafka speaks, and the choice of one per API for a broker.

Each API module declares its own ApiSpec (version range, first flexible
version); APIS collects them, so a new API is its module, its ApiKey member
and one entry here.  negotiate_versions picks, from a broker's ApiVersions
answer, the highest version both sides speak.
"""
from netkafka.errors import IncompatibleBrokerError, error_for_code
from netkafka.protocol import (
    add_offsets_to_txn, add_partitions_to_txn, api_versions, describe_producers, end_txn,
    find_coordinator, init_producer_id, metadata, offset_fetch, produce, sasl_authenticate,
    sasl_handshake, txn_offset_commit,
)
from netkafka.protocol.framing import ApiKey, api_name

# Every API netkafka speaks.
APIS = (produce.API, metadata.API, api_versions.API, init_producer_id.API, sasl_handshake.API,
        sasl_authenticate.API, find_coordinator.API, add_partitions_to_txn.API,
        add_offsets_to_txn.API, end_txn.API, txn_offset_commit.API, describe_producers.API,
        offset_fetch.API)

# {ApiKey: (lowest, highest) version netkafka encodes and decodes}.
SUPPORTED_VERSIONS = {api.key: api.versions for api in APIS}

# A broker must offer a common version of these, or it cannot be used at all.
_REQUIRED_APIS = (ApiKey.PRODUCE, ApiKey.METADATA)
# The first Produce version of Kafka 4.0.  4.x brokers refuse Produce v0..v2 (they
# close the connection: UnsupportedVersionException in their log) although their
# ApiVersions answer still lists v0 (seen with 4.4.0: Produce v0..v13), so a broker
# offering this version is taken as one that cannot take a pinned legacy version.
_PRODUCE_KAFKA_4_VERSION = 12


def negotiate_versions(response, pinned_produce_version=None):
    """Picks, for each API netkafka speaks, the highest version both sides support.

    Args:
        response: the broker's ApiVersionsResponse.
        pinned_produce_version: None, or the legacy Produce version (0..2) an
            api_version below (0, 11) asks for (config.py): then Produce is that
            version, which the broker must offer.

    Returns:
        {ApiKey: version} for every API with a common version.  Produce and
        Metadata are always there; an API the broker lacks is left out (the
        caller fails when it needs it, e.g. InitProducerId for idempotence).

    Raises:
        IncompatibleBrokerError: no common version of Produce or Metadata
            (e.g. a broker older than Produce v3), naming both ranges; or the
            broker does not offer the pinned Produce version (Kafka 4.x has
            no Produce v0..v2).
        BrokerError: the response carries an error code; for
            UNSUPPORTED_VERSION the message names the broker's ApiVersions range
            to retry with.
    """
    if response.error_code:
        theirs = response.api_versions.get(ApiKey.API_VERSIONS)
        hint = (f"; the broker supports ApiVersions v{theirs[0]}..v{theirs[1]}"
                if theirs else "")
        raise error_for_code(response.error_code, f"ApiVersions request refused{hint}")
    chosen = {}
    for api_key, (low, high) in SUPPORTED_VERSIONS.items():
        if api_key == ApiKey.PRODUCE and pinned_produce_version is not None:
            continue  # checked below
        theirs = response.api_versions.get(api_key)
        if theirs is not None and max(low, theirs[0]) <= min(high, theirs[1]):
            chosen[api_key] = min(high, theirs[1])
        elif api_key in _REQUIRED_APIS:
            offered = ("does not offer it" if theirs is None
                       else f"supports v{theirs[0]}..v{theirs[1]}")
            raise IncompatibleBrokerError(
                f"the broker {offered} for {api_name(api_key)}; netkafka needs "
                f"{api_name(api_key)} v{low}..v{high}"
                + (" (Kafka 0.11 or newer)" if api_key == ApiKey.PRODUCE else ""))
    if pinned_produce_version is not None:
        theirs = response.api_versions.get(ApiKey.PRODUCE)
        if theirs is not None and theirs[1] >= _PRODUCE_KAFKA_4_VERSION:
            raise IncompatibleBrokerError(
                f"api_version below (0, 11) needs Produce v{pinned_produce_version} "
                f"(legacy message sets), but the broker is Kafka 4.0 or newer (it offers "
                f"Produce v{theirs[1]}), which refuses v0..v2: leave api_version unset "
                f"(or 'auto') to negotiate")
        if theirs is None or not theirs[0] <= pinned_produce_version <= theirs[1]:
            offered = ("does not offer Produce" if theirs is None
                       else f"supports Produce v{theirs[0]}..v{theirs[1]}")
            raise IncompatibleBrokerError(
                f"api_version below (0, 11) needs Produce v{pinned_produce_version} "
                f"(legacy message sets), but the broker {offered}; Kafka 4.0 removed "
                f"v0..v2: leave api_version unset (or 'auto') to negotiate")
        chosen[ApiKey.PRODUCE] = pinned_produce_version
    return chosen
