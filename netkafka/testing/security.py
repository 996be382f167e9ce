"""A Kafka node with a secured listener per security protocol and SASL mechanism.

One JVM serves every listener a client of a secured cluster meets, each on its own port, so
that a client configured for one mechanism cannot pass by speaking another:

    PLAINTEXT                        open, principal ANONYMOUS (also the readiness probe's)
    SSL                              TLS, the broker's certificate signed by the test CA
    MTLS                             TLS with a client certificate required: principal User:<CN>
    SASL_PLAINTEXT_<MECHANISM>       SASL without TLS, one mechanism each:
    SASL_SSL_<MECHANISM>               PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER
    SASL_SSL_REAUTH                  SASL_SSL with all four mechanisms and a session lifetime of
                                     REAUTH_MS: a client must re-authenticate (KIP-368)
    SASL_PLAINTEXT_REAUTH            the same without TLS (re-authentication on its own)

PLAIN users are in the listeners' JAAS config; SCRAM users are written into the metadata log
by the storage tool (`format --add-scram`); OAUTHBEARER tokens are RS256 JWTs that the broker
checks against the key set of an OAuthServer run by the test process (netkafka.testing.oauth),
which also hands out tokens by the client-credentials grant.  The quorum's CONTROLLER listener
and the inter-broker traffic (over MTLS by default) authenticate the broker by its certificate,
CN=broker; with a SASL_SSL SCRAM listener between brokers (the secured_cluster fixture's) a
broker logs in as SCRAM user "broker", made at format time with the others.

The StandardAuthorizer guards everything.  Super users: User:broker and User:admin.  Every
principal (User:*) is allowed everything on every topic, group and transactional id and
IdempotentWrite on the cluster, so plain produce and consume work as on an open cluster; a
test denies something with acls(deny(...)) or acls(*deny_idempotent_writes(user)), a DENY
binding winning over those grants.

Users: admin (super user), alice and bob, each with a password per PLAIN and SCRAM mechanism,
an OAuth client secret (client id = user name) and a client certificate.
"""
import contextlib
import os
import secrets
import time
from pathlib import Path
from typing import Iterator, NamedTuple, Optional, Sequence

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialDeletion, UserScramCredentialUpsertion)

from netkafka.testing.broker import (BROKER_JVM_OPTIONS, DEFAULT_KAFKA_VERSION, PLAINTEXT_LISTENER,
                                     START_TIMEOUT_S, STOP_TIMEOUT_S, Cluster, Listener, kafka_line)
from netkafka.testing.oauth import OAuthServer
from netkafka.testing.tls import BROKER_COMMON_NAME, ClientCertificate, make_tls_files

ADMIN_USER = "admin"
USERS = (ADMIN_USER, "alice", "bob")
PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SASL_MECHANISMS = (*PASSWORD_MECHANISMS, "OAUTHBEARER")
# Every token's aud claim, which the broker requires.
OAUTH_AUDIENCE = "netkafka-test-cluster"
# Session lifetime on SASL_SSL_REAUTH: short enough that a test sees re-authentication within
# seconds, long enough for a SCRAM exchange on a loaded 2-core machine.
REAUTH_MS = 3000
REAUTH_LISTENER = "SASL_SSL_REAUTH"
PLAINTEXT_REAUTH_LISTENER = "SASL_PLAINTEXT_REAUTH"
# The listener the admin config uses: the fewest moving parts (no TLS, PLAIN).
ADMIN_LISTENER = "SASL_PLAINTEXT_PLAIN"
# Java's name of a TLS peer is its subject's RFC 2253 DN, most specific part first:
# "CN=alice,OU=...,O=...".  The principal is the CN alone.
PRINCIPAL_MAPPING_RULES = "RULE:^CN=([^,]+).*$/$1/,DEFAULT"
# Within the JVM: which OAuth URLs the broker may fetch (4.0+ allows none by default, 3.9.1+ all).
ALLOWED_URLS_PROPERTY = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
# The mechanisms a broker may replicate with over SASL_SSL: their credentials live in the
# metadata log, which the quorum (over SSL, by certificate) delivers first.
INTER_BROKER_SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
ACL_WAIT_S = 30.0
ACL_POLL_S = 0.05
# A SCRAM credential changed at run time is in force once a client can (or can no longer)
# authenticate with it: probed this often, for up to this long.
SCRAM_WAIT_S = 30.0
SCRAM_POLL_S = 0.2
SCRAM_ITERATIONS = 4096  # the storage tool's and kafka-configs' default
_SCRAM_MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
                     "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
_OAUTH_VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"


class SecuredListener(NamedTuple):
    """One client listener of the secured node."""

    name: str                         # the broker's listener name, e.g. "SASL_SSL_SCRAM_SHA_512"
    security_protocol: str            # what a client sets: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL
    sasl_mechanisms: tuple[str, ...]  # the mechanisms it takes, () without SASL
    client_auth: bool                 # True: a client certificate is required (mTLS)
    bootstrap: Optional[str] = None   # "127.0.0.1:PORT" once the broker runs (LISTENERS: None)

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl_mechanism(self) -> Optional[str]:
        """The one mechanism of a single-mechanism SASL listener (None on the others)."""
        return self.sasl_mechanisms[0] if len(self.sasl_mechanisms) == 1 else None

    @property
    def authenticates(self) -> bool:
        """True when a client has a name here (certificate or SASL), not ANONYMOUS."""
        return self.client_auth or bool(self.sasl_mechanisms)


def listener_name(security_protocol: str, sasl_mechanism: str) -> str:
    """The name of the listener for one SASL protocol and mechanism, e.g. SASL_SSL_SCRAM_SHA_256."""
    return f"{security_protocol}_{sasl_mechanism.replace('-', '_')}"


# Every client listener, known before the broker runs (tests parametrize over it).
LISTENERS = (
    SecuredListener(PLAINTEXT_LISTENER, "PLAINTEXT", (), False),
    SecuredListener("SSL", "SSL", (), False),
    SecuredListener("MTLS", "SSL", (), True),
    *(SecuredListener(listener_name(protocol, mechanism), protocol, (mechanism,), False)
      for protocol in ("SASL_PLAINTEXT", "SASL_SSL") for mechanism in SASL_MECHANISMS),
    SecuredListener(REAUTH_LISTENER, "SASL_SSL", SASL_MECHANISMS, False),
    SecuredListener(PLAINTEXT_REAUTH_LISTENER, "SASL_PLAINTEXT", SASL_MECHANISMS, False),
)


def deny(user: str, resource_type: ResourceType, resource_name: str,
         operation: AclOperation = AclOperation.ALL) -> AclBinding:
    """A binding that denies User:<user> an operation on one resource (a literal name; "*" is
    every resource of the type).  The cluster resource is ResourceType.BROKER "kafka-cluster"."""
    return AclBinding(resource_type, resource_name, ResourcePatternType.LITERAL, f"User:{user}", "*",
                      operation, AclPermissionType.DENY)


def binding_filter(binding: AclBinding) -> AclBindingFilter:
    """The filter that matches exactly this binding (what delete_acls takes)."""
    return AclBindingFilter(binding.restype, binding.name, binding.resource_pattern_type, binding.principal,
                            binding.host, binding.operation, binding.permission_type)


def deny_idempotent_writes(user: str) -> list[AclBinding]:
    """Bindings under which User:<user> gets no producer id: InitProducerId fails with
    CLUSTER_AUTHORIZATION_FAILED.

    Since Kafka 3.0 (KIP-679) WRITE on any topic also grants a producer id, so IdempotentWrite
    on the cluster is denied together with WRITE on every topic.
    """
    return [deny(user, ResourceType.BROKER, "kafka-cluster", AclOperation.IDEMPOTENT_WRITE),
            deny(user, ResourceType.TOPIC, "*", AclOperation.WRITE)]


def _grants_to_everyone() -> list[AclBinding]:
    everyone = "User:*"
    grants = [AclBinding(resource_type, "*", ResourcePatternType.LITERAL, everyone, "*",
                         AclOperation.ALL, AclPermissionType.ALLOW)
              for resource_type in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID)]
    grants.append(AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, everyone, "*",
                             AclOperation.IDEMPOTENT_WRITE, AclPermissionType.ALLOW))
    return grants


class SecuredBroker:
    """The secured node (or cluster), its certificates, its users and its OAuth server.

    Use as a context manager, or call start() and stop().

    Args:
        directory: where the certificates (tls/) and the node (kafka/, emptied first) go.
        jvm_options: the broker JVM's options (the allowed-URLs property is added).
        kafka_version: "4" (the secured_broker fixture's) or "3.9", which takes the same settings.
        node_count: nodes of the cluster; brokers replicate over inter_broker_listener.
        listener_names: the client listeners each node has (names of LISTENERS; default all).
            Fewer start faster; PLAINTEXT and ADMIN_LISTENER are always there (the harness's).
        inter_broker_listener: the listener brokers replicate over: MTLS (default; the broker
            is User:broker by its certificate) or a SASL_SSL SCRAM listener (the broker logs
            in as SCRAM user "broker", made at format time; see INTER_BROKER_SCRAM).

    Attributes (the public ones, fixed once constructed; the bootstraps once started):
        listeners: listener name -> SecuredListener (PLAINTEXT and the secured ones).
        ca_file: the CA certificate that signed the broker's and the clients' certificates.
        untrusted_ca_file: a CA's certificate that signed nothing here.
        client_certs: user -> ClientCertificate (cert, key, encrypted key and its password).
        passwords: SASL mechanism ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512") -> user -> password.
        oauth: the OAuthServer: token_url, jwks_url, clients (client id = user -> secret),
            issue_token(); the broker expects its issuer and OAUTH_AUDIENCE.
        cluster: the Cluster underneath (its nodes' logs, failover methods, ...), once started.
    """

    def __init__(self, directory: os.PathLike, *, jvm_options: Sequence[str] = BROKER_JVM_OPTIONS,
                 kafka_version: str = DEFAULT_KAFKA_VERSION, node_count: int = 1,
                 listener_names: Optional[Sequence[str]] = None,
                 inter_broker_listener: str = "MTLS"):
        self.directory = Path(directory)
        self.kafka_version = kafka_line(kafka_version).name
        self.node_count = node_count
        wanted = set(listener_names or (spec.name for spec in LISTENERS))
        wanted |= {PLAINTEXT_LISTENER, ADMIN_LISTENER, inter_broker_listener}
        unknown = wanted - {spec.name for spec in LISTENERS}
        if unknown:
            raise ValueError(f"no listeners {sorted(unknown)}; known: {[spec.name for spec in LISTENERS]}")
        self._specs = tuple(spec for spec in LISTENERS if spec.name in wanted)
        inter_broker = next(spec for spec in self._specs if spec.name == inter_broker_listener)
        if not (inter_broker.client_auth or (inter_broker.tls and inter_broker.sasl_mechanism
                                             in INTER_BROKER_SCRAM)):
            raise ValueError(f"inter_broker_listener={inter_broker_listener!r}: brokers replicate over "
                             f"MTLS or a SASL_SSL listener of {INTER_BROKER_SCRAM}")
        self.inter_broker_listener = inter_broker_listener
        self._inter_broker_spec = inter_broker
        tls = make_tls_files(self.directory / "tls", USERS)
        self.ca_file = tls.ca_file
        self.untrusted_ca_file = tls.untrusted_ca_file
        self.client_certs: dict[str, ClientCertificate] = tls.clients
        self.passwords = {mechanism: {user: secrets.token_urlsafe(12) for user in USERS}
                          for mechanism in PASSWORD_MECHANISMS}
        # The brokers' own SCRAM password, for an inter-broker SCRAM listener.
        self._broker_password = secrets.token_urlsafe(12)
        self.oauth = OAuthServer({user: secrets.token_urlsafe(16) for user in USERS}, OAUTH_AUDIENCE)
        self._keystore_file = tls.broker_keystore_file
        self._jvm_options = tuple(jvm_options)
        self.cluster: Optional[Cluster] = None  # made by start(), once the OAuth server has its port
        self.listeners: dict[str, SecuredListener] = {}  # LISTENERS with their bootstraps, by start()

    def __enter__(self) -> "SecuredBroker":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the OAuth server, then the node; grant everyone the everyday operations.

        Raises:
            BrokerHarnessError: the node did not start (the OAuth server is stopped again).
        """
        self.oauth.start()
        try:
            self.cluster = Cluster(
                self.node_count, directory=self.directory / "kafka",
                # PLAINTEXT is every node's own; the others are this node's additions.
                listeners=[Listener(spec.name, spec.security_protocol) for spec in self._specs
                           if spec.name != PLAINTEXT_LISTENER],
                controller_protocol="SSL", inter_broker_listener=self.inter_broker_listener,
                format_options=self._scram_format_options(), extra_config=self._broker_settings(),
                jvm_options=(*self._jvm_options, f"-D{ALLOWED_URLS_PROPERTY}={self.oauth.jwks_url}"),
                kafka_version=self.kafka_version,
            )
            self.cluster.start(timeout_s=timeout_s)
            self.listeners = {spec.name: spec._replace(bootstrap=self.cluster.listener_bootstrap(spec.name))
                              for spec in self._specs}
            self._create_acls(_grants_to_everyone())
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        if self.cluster is not None:
            self.cluster.stop(timeout_s)
        self.oauth.stop()

    def listener(self, security_protocol: str, sasl_mechanism: Optional[str] = None) -> SecuredListener:
        """The single-mechanism listener of a SASL protocol, or the SSL / PLAINTEXT one."""
        return self._listener(listener_name(security_protocol, sasl_mechanism) if sasl_mechanism
                              else security_protocol)

    def _listener(self, name: str) -> SecuredListener:
        if not self.listeners:
            raise RuntimeError("the secured broker is not running: its listeners have no ports yet")
        try:
            return self.listeners[name]
        except KeyError:
            raise KeyError(f"no listener {name!r}; the broker has {sorted(self.listeners)}") from None

    # -- client settings ---------------------------------------------------------------------

    def client_config(self, listener: str, user: str = "alice", *, sasl_mechanism: Optional[str] = None,
                      encrypted_key: bool = False) -> dict:
        """confluent-kafka (librdkafka) settings that reach `listener` as `user`.

        Args:
            listener: a listener name (see `listeners`).
            user: who connects: on MTLS by certificate, on SASL listeners by the mechanism's
                credentials (OAUTHBEARER: librdkafka's OIDC client-credentials flow against
                the token endpoint).  PLAINTEXT and SSL have no identity: there it is ignored.
            sasl_mechanism: which of a multi-mechanism listener's mechanisms (the REAUTH ones).
            encrypted_key: on MTLS, the encrypted key file and its password.
        """
        spec = self._listener(listener)
        if user not in USERS:
            raise KeyError(f"no user {user!r}; the broker has {USERS}")
        config: dict = {"bootstrap.servers": spec.bootstrap, "security.protocol": spec.security_protocol}
        if spec.tls:
            config["ssl.ca.location"] = str(self.ca_file)
        if spec.client_auth:
            cert = self.client_certs[user]
            config["ssl.certificate.location"] = str(cert.cert_file)
            if encrypted_key:
                config["ssl.key.location"] = str(cert.encrypted_key_file)
                config["ssl.key.password"] = cert.key_password
            else:
                config["ssl.key.location"] = str(cert.key_file)
        if spec.sasl_mechanisms:
            mechanism = sasl_mechanism or spec.sasl_mechanism
            if mechanism not in spec.sasl_mechanisms:
                raise ValueError(f"listener {listener} takes {spec.sasl_mechanisms}; name one "
                                 f"with sasl_mechanism= (got {mechanism!r})")
            config["sasl.mechanism"] = mechanism
            if mechanism == "OAUTHBEARER":
                config.update({
                    "sasl.oauthbearer.method": "oidc",
                    "sasl.oauthbearer.client.id": user,
                    "sasl.oauthbearer.client.secret": self.oauth.clients[user],
                    "sasl.oauthbearer.token.endpoint.url": self.oauth.token_url,
                })
            else:
                config["sasl.username"] = user
                config["sasl.password"] = self.passwords[mechanism][user]
        return config

    def java_client_config(self, listener: str, user: str = "alice",
                           sasl_mechanism: Optional[str] = None) -> dict:
        """The Java client's settings that reach `listener` as `user`, as a client.properties
        file or Spark options hold them: PEM trust store, host names checked; on MTLS a PEM
        key store (the encrypted key and the certificate in one file, written next to the
        certificates) with ssl.key.password; on PLAIN and SCRAM listeners the credentials
        in sasl.jaas.config.  OAUTHBEARER has no such form here (netkafka takes its token
        endpoint as a provider object).
        """
        spec = self._listener(listener)
        config = {"bootstrap.servers": spec.bootstrap, "security.protocol": spec.security_protocol}
        if spec.tls:
            config.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file),
                           "ssl.endpoint.identification.algorithm": "https"})
        if spec.client_auth:
            cert = self.client_certs[user]
            keystore = self.directory / "tls" / f"{user}-keystore.pem"
            keystore.write_bytes(cert.encrypted_key_file.read_bytes() + cert.cert_file.read_bytes())
            config.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
                           "ssl.key.password": cert.key_password})
        if spec.sasl_mechanisms:
            mechanism = sasl_mechanism or spec.sasl_mechanism
            if mechanism not in PASSWORD_MECHANISMS or mechanism not in spec.sasl_mechanisms:
                raise ValueError(f"listener {listener} with {mechanism!r}: sasl.jaas.config carries "
                                 f"the credentials of {PASSWORD_MECHANISMS} only")
            config["sasl.mechanism"] = mechanism
            config["sasl.jaas.config"] = (f'{_LOGIN_MODULES[mechanism]} required username="{user}" '
                                          f'password="{self.passwords[mechanism][user]}";')
        return config

    @property
    def admin_config(self) -> dict:
        """confluent-kafka settings of the super user admin (on ADMIN_LISTENER)."""
        return self.client_config(ADMIN_LISTENER, ADMIN_USER)

    def admin(self) -> AdminClient:
        """An AdminClient acting as the super user admin."""
        return AdminClient(self.admin_config)

    # -- ACLs --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def acls(self, *bindings: AclBinding) -> Iterator[None]:
        """Create ACL bindings (e.g. deny(...)) for the block's duration, then delete them.

        Returns once the broker's authorizer holds them, and again once it has dropped them, so
        that a test's requests meet exactly the ACLs it set.
        """
        try:
            self._create_acls(bindings)
            yield
        finally:
            # Also after a failed creation: deleting a binding that was never made is no error.
            admin = self.admin()
            for future in admin.delete_acls([binding_filter(binding) for binding in bindings]).values():
                future.result()
            self._wait_for_acls(admin, bindings, present=False)

    def _create_acls(self, bindings: Sequence[AclBinding]) -> None:
        admin = self.admin()
        for future in admin.create_acls(list(bindings)).values():
            future.result()
        self._wait_for_acls(admin, bindings, present=True)

    @staticmethod
    def _wait_for_acls(admin: AdminClient, bindings: Sequence[AclBinding], present: bool) -> None:
        # DescribeAcls is answered from the broker's authorizer: what it lists is in force.
        deadline = time.monotonic() + ACL_WAIT_S
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        while True:
            listed = set(admin.describe_acls(everything).result())
            if all((binding in listed) == present for binding in bindings):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the broker's ACLs still {'lack' if present else 'hold'} some of "
                                   f"{list(bindings)} after {ACL_WAIT_S:.0f} s")
            time.sleep(ACL_POLL_S)

    # -- SCRAM users at run time -------------------------------------------------------------

    def set_scram_password(self, user: str, mechanism: str, password: str) -> None:
        """Create SCRAM user `user` for `mechanism`, or change its password, as
        `kafka-configs --alter --add-config SCRAM-SHA-512=[password=...]` does (the admin
        API's AlterUserScramCredentials); returns once the broker authenticates it.

        A user made here is no USERS entry: client_config() does not know it.
        """
        self._alter_scram(UserScramCredentialUpsertion(
            user, ScramCredentialInfo(_SCRAM_MECHANISMS[mechanism], SCRAM_ITERATIONS),
            password.encode()))
        self._wait_for_scram(user, mechanism, password, accepted=True)

    def delete_scram_user(self, user: str, mechanism: str, password: str) -> None:
        """Delete `user`'s credential for `mechanism` (`kafka-configs --alter
        --delete-config`); returns once the broker refuses `password` for it.  Connections
        already authenticated stay so until their session ends (a re-authentication on
        the REAUTH listeners) or they close."""
        self._alter_scram(UserScramCredentialDeletion(user, _SCRAM_MECHANISMS[mechanism]))
        self._wait_for_scram(user, mechanism, password, accepted=False)

    def _alter_scram(self, alteration) -> None:
        admin = self.admin()  # kept until the answer: a dropped client fails its futures
        for future in admin.alter_user_scram_credentials([alteration]).values():
            future.result()

    def _wait_for_scram(self, user: str, mechanism: str, password: str, accepted: bool) -> None:
        # The admin's answer means the controller took the change; the broker applies it
        # from the metadata log a moment later.  A login is what shows it applied.
        # Any listener of this node (or cluster) that takes the mechanism.
        spec = next(spec for spec in self.listeners.values() if mechanism in spec.sasl_mechanisms)
        config = {"bootstrap.servers": spec.bootstrap, "security.protocol": spec.security_protocol,
                  "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
        if spec.tls:
            config["ssl.ca.location"] = str(self.ca_file)
        deadline = time.monotonic() + SCRAM_WAIT_S
        while True:
            try:
                AdminClient(config).list_topics(timeout=SCRAM_POLL_S * 10)
                works = True
            except KafkaException:
                works = False
            if works == accepted:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the broker still {'refuses' if accepted else 'accepts'} "
                                   f"{mechanism} user {user!r} after {SCRAM_WAIT_S:.0f} s")
            time.sleep(SCRAM_POLL_S)

    # -- the broker's settings ---------------------------------------------------------------

    def _scram_format_options(self) -> list[str]:
        options = []
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            users = {**self.passwords[mechanism], BROKER_COMMON_NAME: self._broker_password}
            for user, password in users.items():
                options += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
        return options

    def _broker_settings(self) -> dict:
        settings: dict = {
            # One key store and trust store for every TLS listener, PEM files.
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": self._keystore_file,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": self.ca_file,
            "ssl.client.auth": "none",
            "ssl.principal.mapping.rules": PRINCIPAL_MAPPING_RULES,
            # The broker's own connections (to the controller, to other brokers over MTLS)
            # show its certificate: that is what makes it User:broker.
            "listener.name.controller.ssl.client.auth": "required",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{BROKER_COMMON_NAME};User:{ADMIN_USER}",
            "allow.everyone.if.no.acl.found": "false",
            "sasl.oauthbearer.jwks.endpoint.url": self.oauth.jwks_url,
            "sasl.oauthbearer.expected.audience": OAUTH_AUDIENCE,
            "sasl.oauthbearer.expected.issuer": self.oauth.issuer,
            # A broker with a dozen listeners: one network thread each is plenty for tests.
            "num.network.threads": 1,
        }
        if self._inter_broker_spec.sasl_mechanism:
            settings["sasl.mechanism.inter.broker.protocol"] = self._inter_broker_spec.sasl_mechanism
        for spec in self._specs:
            prefix = f"listener.name.{spec.name.lower()}."
            if spec.client_auth:
                settings[prefix + "ssl.client.auth"] = "required"
            if spec.sasl_mechanisms:
                settings[prefix + "sasl.enabled.mechanisms"] = ",".join(spec.sasl_mechanisms)
            for mechanism in spec.sasl_mechanisms:
                mechanism_prefix = f"{prefix}{mechanism.lower()}."
                settings[mechanism_prefix + "sasl.jaas.config"] = self._jaas_config(
                    mechanism, as_client=spec.name == self.inter_broker_listener)
                if mechanism == "OAUTHBEARER":
                    settings[mechanism_prefix + "sasl.server.callback.handler.class"] = _OAUTH_VALIDATOR
                if spec.name in (REAUTH_LISTENER, PLAINTEXT_REAUTH_LISTENER):
                    settings[mechanism_prefix + "connections.max.reauth.ms"] = REAUTH_MS
        return settings

    def _jaas_config(self, mechanism: str, as_client: bool = False) -> str:
        options = ""
        if mechanism == "PLAIN":
            # The PLAIN server's users: user_<name>="<password>".
            options = "".join(f' user_{user}="{password}"' for user, password in self.passwords["PLAIN"].items())
        if as_client:
            # The inter-broker listener's: how a broker logs in to the others (a SCRAM
            # server reads no options, its users are in the metadata log).
            options += f' username="{BROKER_COMMON_NAME}" password="{self._broker_password}"'
        return f"{_LOGIN_MODULES[mechanism]} required{options};"

