"""A real MIT Kerberos KDC on 127.0.0.1, and a Kafka node that authenticates by it (GSSAPI).

The KDC is the OS's own `krb5kdc` (package krb5-kdc; `make test` installs the Kerberos
packages when they are missing), with a realm made at test time in a directory of its own:

    krb5.conf     what clients (the test process, the broker's JVM) read: the realm, its
                  KDC's port, no DNS (the broker's service principal is kafka/127.0.0.1)
    kdc.conf      the KDC's own: its port (TCP and UDP), database, stash, log
    <name>.keytab one per principal made with add_principal

The broker logs in as kafka/127.0.0.1 from its keytab (Krb5LoginModule); a client gets its
tickets from a keytab too: the process environment names the configuration, the client
keytab and a ticket cache of the realm's own (environment()), which MIT Kerberos reads
whenever a GSS-API context is made.
"""
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional

from netkafka.errors import BrokerHarnessError
from netkafka.testing.broker import BROKER_JVM_OPTIONS, HOST, Cluster, Listener, free_ports

REALM = "NETKAFKA.TEST"
SERVICE_NAME = "kafka"
BROKER_PRINCIPAL = f"{SERVICE_NAME}/{HOST}@{REALM}"
GSSAPI_LISTENER = "SASL_PLAINTEXT_GSSAPI"
# The OS packages the KDC and the gssapi library's build need (the Makefile's list too).
KERBEROS_PACKAGES = ("krb5-kdc", "krb5-admin-server", "libkrb5-dev", "krb5-user")
KDC_START_TIMEOUT_S = 15.0
_SBIN = ("/usr/sbin", "/usr/local/sbin")


def _tool(name: str) -> str:
    """The path of an MIT Kerberos program, or BrokerHarnessError naming the packages."""
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(_SBIN))
    if found is None:
        raise BrokerHarnessError(
            f"{name} not found: the Kerberos tests need the packages {' '.join(KERBEROS_PACKAGES)} "
            f"(`make test` installs them with apt-get)")
    return found


class Kdc:
    """An MIT KDC for REALM in `directory`, on a free port.  Use as a context manager."""

    def __init__(self, directory: os.PathLike):
        self.directory = Path(directory)
        self.port = free_ports(1)[0]
        self.krb5_conf = self.directory / "krb5.conf"
        self._kdc_conf = self.directory / "kdc.conf"
        self._process: Optional[subprocess.Popen] = None

    def __enter__(self) -> "Kdc":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def _env(self) -> dict:
        return {**os.environ, "KRB5_CONFIG": str(self.krb5_conf),
                "KRB5_KDC_PROFILE": str(self._kdc_conf)}

    def _run(self, *args: str) -> None:
        result = subprocess.run(args, env=self._env(), capture_output=True, text=True, timeout=60)
        if result.returncode:
            raise BrokerHarnessError(f"{' '.join(args)} failed ({result.returncode}): "
                                     f"{result.stderr.strip() or result.stdout.strip()}")

    def start(self) -> None:
        """Write the configuration, make the realm's database, start krb5kdc, wait for it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        d = self.directory
        self.krb5_conf.write_text(
            "[libdefaults]\n"
            f" default_realm = {REALM}\n"
            " dns_lookup_realm = false\n dns_lookup_kdc = false\n"
            " dns_canonicalize_hostname = false\n rdns = false\n"
            # TCP only: the broker's JVM and the client agree, and a lost datagram
            # cannot slow a test down.
            " udp_preference_limit = 1\n"
            " ticket_lifetime = 1h\n forwardable = false\n"
            "[realms]\n"
            f" {REALM} = {{\n  kdc = {HOST}:{self.port}\n }}\n"
            "[domain_realm]\n"
            f" {HOST} = {REALM}\n")
        self._kdc_conf.write_text(
            "[kdcdefaults]\n"
            f" kdc_ports = {self.port}\n kdc_tcp_ports = {self.port}\n"
            "[realms]\n"
            f" {REALM} = {{\n"
            f"  database_name = {d / 'principal'}\n"
            f"  key_stash_file = {d / 'stash'}\n"
            f"  acl_file = {d / 'kadm5.acl'}\n"
            "  supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n"
            " }\n"
            "[logging]\n"
            f" kdc = FILE:{d / 'kdc.log'}\n")
        (d / "kadm5.acl").write_text("")
        # The master password only protects the stash of a throwaway database.
        self._run(_tool("kdb5_util"), "-r", REALM, "create", "-s", "-P", "netkafka-test-master")
        log = open(d / "krb5kdc.out", "wb")
        try:
            self._process = subprocess.Popen([_tool("krb5kdc"), "-n", "-r", REALM], env=self._env(),
                                             stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        deadline = time.monotonic() + KDC_START_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                raise BrokerHarnessError(f"krb5kdc exited with {self._process.returncode}: "
                                         f"{(d / 'krb5kdc.out').read_text()[-2000:]}")
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise BrokerHarnessError(f"krb5kdc did not listen on {HOST}:{self.port} "
                                             f"within {KDC_START_TIMEOUT_S:.0f} s") from None
                time.sleep(0.05)

    def add_principal(self, principal: str) -> Path:
        """Make `principal` with a random key; return the keytab holding it."""
        keytab = self.directory / (principal.split("@")[0].replace("/", "_") + ".keytab")
        kadmin = _tool("kadmin.local")
        self._run(kadmin, "-r", REALM, "-q", f"addprinc -randkey {principal}")
        self._run(kadmin, "-r", REALM, "-q", f"ktadd -k {keytab} {principal}")
        return keytab

    def environment(self, client_keytab: Path) -> dict:
        """The environment variables under which a process is a client of this realm with
        the keytab's principal (MIT Kerberos gets the tickets from the keytab itself)."""
        return {"KRB5_CONFIG": str(self.krb5_conf), "KRB5_CLIENT_KTNAME": str(client_keytab),
                "KRB5CCNAME": f"FILE:{self.directory / 'client.ccache'}"}

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None


def gssapi_cluster(kdc: Kdc, directory: os.PathLike, broker_keytab: Path,
                   jvm_options=BROKER_JVM_OPTIONS) -> Cluster:
    """A one-node cluster (not started) with a SASL_PLAINTEXT listener taking GSSAPI only,
    its broker logged in as BROKER_PRINCIPAL; PLAINTEXT stays open for readers."""
    prefix = f"listener.name.{GSSAPI_LISTENER.lower()}."
    jaas = ("com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true "
            f'keyTab="{broker_keytab}" principal="{BROKER_PRINCIPAL}";')
    return Cluster(
        1, directory=directory, listeners=[Listener(GSSAPI_LISTENER, "SASL_PLAINTEXT")],
        extra_config={prefix + "sasl.enabled.mechanisms": "GSSAPI",
                      prefix + "gssapi.sasl.jaas.config": jaas,
                      "sasl.kerberos.service.name": SERVICE_NAME},
        jvm_options=(*jvm_options, f"-Djava.security.krb5.conf={kdc.krb5_conf}"))
