"""The versions netkafka speaks, and the choice of one per API for a broker.

Each API module declares its own ApiSpec (version range, first flexible
version); APIS collects them, so a new API is its module, its ApiKey member
and one entry here.  negotiate_versions picks, from a broker's ApiVersions
answer, the highest version both sides speak.
"""
from netkafka.errors import IncompatibleBrokerError, error_for_code
from netkafka.protocol import (api_versions, describe_producers, init_producer_id, metadata,
                               produce)
from netkafka.protocol.framing import ApiKey, api_name

# Every API netkafka speaks.
APIS = (produce.API, metadata.API, api_versions.API, init_producer_id.API,
        describe_producers.API)

# {ApiKey: (lowest, highest) version netkafka encodes and decodes}.
SUPPORTED_VERSIONS = {api.key: api.versions for api in APIS}

# A broker must offer a common version of these, or it cannot be used at all.
_REQUIRED_APIS = (ApiKey.PRODUCE, ApiKey.METADATA)


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
        theirs = response.api_versions.get(ApiKey.API_VERSIONS)
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
                + (" (Kafka 0.11 or newer)" if api_key == ApiKey.PRODUCE else ""))
    return chosen
