"""Certificates for the secured test broker, made at test time and written as PEM files.

One CA signs the broker's certificate (for 127.0.0.1 and localhost, CN=broker) and a client
certificate per user (CN=<user>); the broker maps a certificate's CN to its principal.  A
second CA signs nothing here: a client that trusts only it must fail to verify the broker.

trustme makes the CA and the certificates.  Its keys come as "EC PRIVATE KEY" PEM, which
Kafka's PEM key store does not read, so cryptography rewrites every key as PKCS#8, and once
more encrypted with a password for the clients that take ssl_password / ssl.key.password.

    <directory>/ca.pem              the CA certificate, every client's trust store
                /untrusted-ca.pem   a CA that signed nothing the broker shows
                /broker.pem         the broker's key and certificate chain (its key store)
                /<user>.crt         a user's certificate
                /<user>.key         its key, PKCS#8, not encrypted
                /<user>.encrypted.key   the same key, PKCS#8, encrypted with the key password
"""
import secrets
from pathlib import Path
from typing import NamedTuple, Sequence

import trustme
from cryptography.hazmat.primitives import serialization

# The broker's address as clients dial it, and as its own client to the controller does:
# hostname verification needs one of these in the certificate.
BROKER_IDENTITIES = ("127.0.0.1", "localhost")
BROKER_COMMON_NAME = "broker"


class ClientCertificate(NamedTuple):
    """A user's certificate for mTLS, signed by the CA; the broker's principal is User:<CN>."""

    cert_file: Path           # the certificate, PEM
    key_file: Path            # its private key, PKCS#8 PEM, not encrypted
    encrypted_key_file: Path  # the same key, PKCS#8 PEM, encrypted with key_password
    key_password: str


class TlsFiles(NamedTuple):
    """Where the files of one CA and the certificates it signed are."""

    ca_file: Path               # the CA's certificate: what clients trust
    untrusted_ca_file: Path     # another CA's certificate, which signed nothing here
    broker_keystore_file: Path  # the broker's PKCS#8 key, then its certificate chain
    clients: dict[str, ClientCertificate]  # per user name


def make_tls_files(directory: Path, users: Sequence[str]) -> TlsFiles:
    """Make a CA, the broker's certificate and one client certificate per user, in directory."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="netkafka tests")
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    untrusted_ca_file = directory / "untrusted-ca.pem"
    trustme.CA(organization_name="netkafka tests, untrusted").cert_pem.write_to_path(str(untrusted_ca_file))

    broker = ca.issue_cert(*BROKER_IDENTITIES, common_name=BROKER_COMMON_NAME)
    broker_keystore_file = directory / "broker.pem"
    _write_private(broker_keystore_file, _pkcs8(broker.private_key_pem.bytes())
                   + b"".join(blob.bytes() for blob in broker.cert_chain_pems))

    clients = {}
    for user in users:
        # A client certificate still needs a subject alternative name for trustme; an
        # e-mail address names a person without claiming a host.
        leaf = ca.issue_cert(f"{user}@netkafka.test", common_name=user)
        cert_file, key_file = directory / f"{user}.crt", directory / f"{user}.key"
        encrypted_key_file = directory / f"{user}.encrypted.key"
        password = secrets.token_urlsafe(12)
        cert_file.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        _write_private(key_file, _pkcs8(leaf.private_key_pem.bytes()))
        _write_private(encrypted_key_file, _pkcs8(leaf.private_key_pem.bytes(), password))
        clients[user] = ClientCertificate(cert_file, key_file, encrypted_key_file, password)
    return TlsFiles(ca_file, untrusted_ca_file, broker_keystore_file, clients)


def _pkcs8(key_pem: bytes, password: str = "") -> bytes:
    key = serialization.load_pem_private_key(key_pem, password=None)
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _write_private(path: Path, data: bytes) -> None:
    """Write a file that holds a private key: readable by this user only."""
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_bytes(data)
