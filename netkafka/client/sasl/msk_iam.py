"""AWS MSK IAM authentication, as OAUTHBEARER, with AWS's own signer (extra ``aws``).

Amazon MSK accepts IAM identities over SASL/OAUTHBEARER: the bearer token is a SigV4
presigned URL for the action ``kafka-cluster:Connect`` (base64url, no padding), valid
for 15 minutes.  ``aws-msk-iam-sasl-signer-python`` makes it from the AWS credentials
(default chain, a named profile, an assumed role or a botocore credential provider);
this module only chooses the signer call, caches the token and refreshes it before it
expires.  Use it as::

    Producer(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
             sasl_oauth_token_provider=MskIamTokenProvider("eu-west-1"), ...)

Signing needs no network with static credentials; the default chain may ask the
instance metadata service, and an assumed role asks STS: ``token()`` runs on the
connection's setup thread, never on an I/O thread (see oauthbearer.py).
"""
import importlib
import time

from netkafka.client.sasl.oauthbearer import DEFAULT_REFRESH_WINDOW_FACTOR, RefreshingTokenProvider
from netkafka.errors import OAuthTokenError, SaslConfigError, SaslLibraryMissingError

SIGNER_MODULE = "aws_msk_iam_sasl_signer.MSKAuthTokenProvider"


def import_signer():
    """AWS's MSKAuthTokenProvider module, or SaslLibraryMissingError saying how to
    install it."""
    try:
        return importlib.import_module(SIGNER_MODULE)
    except ImportError as exc:
        raise SaslLibraryMissingError(
            f"MskIamTokenProvider needs AWS's MSK IAM signer: pip install 'netkafka[aws]' "
            f"(aws-msk-iam-sasl-signer-python): {exc}") from exc


class MskIamTokenProvider(RefreshingTokenProvider):
    """OAUTHBEARER tokens for Amazon MSK's IAM access control.

    Args:
        region: the cluster's AWS region; None takes the region of the AWS
            configuration (AWS_REGION, AWS_DEFAULT_REGION, the profile).
        aws_profile: a named profile of the AWS configuration to take credentials from.
        role_arn: an IAM role to assume (through STS) for the credentials.
        sts_session_name: the session name for role_arn (the signer's default if None).
        aws_credentials_provider: a botocore CredentialProvider to take them from.
        refresh_window_factor: fetch a new token once this fraction of its 15 minutes
            has passed (default 0.8).
        clock: wall-clock time in seconds (tests inject one).

    At most one credential source may be given; with none, the default chain is used.
    """

    def __init__(self, region=None, *, aws_profile=None, role_arn=None, sts_session_name=None,
                 aws_credentials_provider=None,
                 refresh_window_factor=DEFAULT_REFRESH_WINDOW_FACTOR, clock=time.time):
        super().__init__(refresh_window_factor=refresh_window_factor, clock=clock)
        signer = import_signer()
        sources = {name: value for name, value in (
            ("aws_profile", aws_profile), ("role_arn", role_arn),
            ("aws_credentials_provider", aws_credentials_provider)) if value is not None}
        if len(sources) > 1:
            raise SaslConfigError(
                f"MskIamTokenProvider takes one credential source, not {', '.join(sources)}")
        if sts_session_name is not None and role_arn is None:
            raise SaslConfigError("MskIamTokenProvider: sts_session_name needs role_arn")
        if region is None:
            region = importlib.import_module("botocore.session").Session().get_config_variable(
                "region")
            if region is None:
                raise SaslConfigError(
                    "MskIamTokenProvider needs region: none given and none in the AWS "
                    "configuration (AWS_REGION, AWS_DEFAULT_REGION or the profile)")
        if not isinstance(region, str) or not region:
            raise SaslConfigError(f"MskIamTokenProvider: region must be a non-empty str, "
                                  f"not {region!r}")
        self.region = region
        self._source = f"AWS MSK IAM signer ({region})"
        # The signer call for the chosen source, with its arguments.
        if aws_profile is not None:
            self._sign = lambda: signer.generate_auth_token_from_profile(region, aws_profile)
        elif role_arn is not None:
            extra = () if sts_session_name is None else (sts_session_name,)
            self._sign = lambda: signer.generate_auth_token_from_role_arn(region, role_arn, *extra)
        elif aws_credentials_provider is not None:
            self._sign = lambda: signer.generate_auth_token_from_credentials_provider(
                region, aws_credentials_provider)
        else:
            self._sign = lambda: signer.generate_auth_token(region)

    def _fetch_token(self, now_s):
        try:
            token, expiry_ms = self._sign()
        except Exception as exc:  # botocore's errors have no common base worth naming
            # Retriable: a credentials source or STS may fail for a moment (as
            # OAuthBearerMechanism.prepare says); the records wait, then time out naming it.
            raise OAuthTokenError(f"{self._source}: no token: {exc!r}",
                                  retriable=True) from exc
        return token, expiry_ms / 1000
