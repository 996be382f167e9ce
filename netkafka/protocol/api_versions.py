"""ApiVersions: the first request of every connection, asking which versions
of each API the broker speaks (versions.py picks from the answer).

A broker that does not know the request's version answers with a v0 body and
UNSUPPORTED_VERSION (its own ApiVersions range inside), and the response
header of ApiVersions is always v0 (no tagged fields), whatever the version.
"""
import re
from dataclasses import dataclass, field

from netkafka._version import __version__
from netkafka.errors import UnsupportedVersionError
from netkafka.protocol._reader import Reader
from netkafka.protocol.framing import ApiKey, ApiSpec, finish_request, start_request

# v5 (Kafka 4.4: cluster and node id checks, REBOOTSTRAP_REQUIRED) is left out
# until the connection layer can act on REBOOTSTRAP_REQUIRED.
API = ApiSpec(ApiKey.API_VERSIONS, min_version=0, max_version=4, flexible_version=3)

# The ApiVersions version a connection opens with: the highest we speak, which
# every Kafka 4.x broker accepts.
API_VERSIONS_VERSION = API.max_version

# The tag of ApiVersionsResponse's FinalizedFeatures (v3+).
_FINALIZED_FEATURES_TAG = 2

# ClientSoftwareName/Version must match this, or the broker answers INVALID_REQUEST.
_SOFTWARE_NAME_RE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


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
    w = start_request(API, version, correlation_id, client_id)
    if version >= 3:
        if client_software_version is None:
            client_software_version = __version__
        for value in (client_software_name, client_software_version):
            if not _SOFTWARE_NAME_RE.fullmatch(value):
                raise ValueError(f"client software name/version {value!r} would be "
                                 "refused by the broker: use letters, digits, '-' and '.'")
            w.string(value)
        w.tagged_fields()
    return finish_request(w)


@dataclass(frozen=True, slots=True)
class ApiVersionsResponse:
    """A decoded ApiVersions response."""

    error_code: int
    api_versions: dict  # api key -> (min version, max version) the broker supports
    throttle_time_ms: int  # 0 in v0 bodies
    # v3+: feature name -> the cluster-wide finalized max version level (e.g.
    # "transaction.version": 2 where Transactions V2 is on); {} before v3
    finalized_features: dict = field(default_factory=dict)


def decode_api_versions_response(data, version):
    """Decodes an ApiVersions response (data: after the correlation id)."""
    r = Reader(data, API.check_version(version))  # header v0: no tagged fields to skip
    error_code = r.int16()
    if error_code == UnsupportedVersionError.code:
        version = 0
        r.flexible = False
    api_versions = {}
    for _ in range(r.required_array_length(7 if r.flexible else 6, "api keys")):
        api_key = r.int16()
        api_versions[api_key] = (r.int16(), r.int16())
        if r.flexible:
            r.skip_tagged_fields()
    throttle_time_ms = r.int32() if version >= 1 else 0
    finalized_features = {}
    if r.flexible:
        # Of the tagged fields (supported features, finalized features epoch and
        # list, ZK migration) only the finalized features are needed.
        finalized = r.tagged_field_values().get(_FINALIZED_FEATURES_TAG)
        if finalized is not None:
            finalized_features = _finalized_features(finalized)
    r.expect_end()
    return ApiVersionsResponse(error_code, api_versions, throttle_time_ms, finalized_features)


def _finalized_features(data):
    """FinalizedFeatures: name, max version level, min version level, tagged fields."""
    r = Reader(data, True)
    features = {}
    for _ in range(r.required_array_length(6, "finalized features")):
        name = r.string()
        features[name] = r.int16()  # max version level: the level in force
        r.int16()  # min version level
        r.skip_tagged_fields()
    r.expect_end()
    return features
