"""TLS: the producer's TLS settings made into an ssl.SSLContext, and TlsTransport, the
transport (see transport.py for the contract) that speaks TLS over a PlainTransport.

Why ssl.SSLObject over two ssl.MemoryBIOs, not a non-blocking ssl.SSLSocket: the I/O
thread keeps its own loop (a handshake step is a call that returns the selector events
it waits for), and the ciphertext leaves through PlainTransport.write, the same native
sendmsg as plaintext.  SSLSocket has no sendmsg either, so neither way keeps plaintext's
zero copy: encryption copies every byte once anyway, and the outgoing BIO's read()
once more.  Measured on the 2-core reference machine, 512 MiB in 128 KiB writes over a
socketpair, CPU of the writing thread: 0.11 ns per byte through PlainTransport, 0.56
to 0.58 through TlsTransport (AES-GCM, TLS 1.3).  Counted with a uprobe on libc's
memmove (1000 records of 128 KiB to the broker): user-space bytes copied per value byte,
1.0 on plaintext (send() into the batch), 4.0 over TLS (send(), OpenSSL's record buffer,
the outgoing BIO's write, its read()).  A non-blocking SSLSocket would save the last two,
but they are not what TLS costs: over loopback TCP to a TLS server, alternated runs of
256 MiB, writing thread's CPU per byte (medians of 3): 0.167 ns PlainTransport, 0.587
SSLSocket, 0.616 TlsTransport -- 5%, within the shared machine's noise -- while
AES-256-GCM alone (TLS 1.3's first suite; `openssl speed`, 16 KiB blocks) runs at 3.7 GB/s,
0.27 ns per byte.  Kernel TLS (ssl.OP_ENABLE_KTLS) would let the kernel encrypt and
keep sendmsg; it needs an SSLSocket, Python 3.12+ with OpenSSL 3 and the kernel's `tls`
module.  Not used: on the machine this was built on
(Linux 6.18, Python 3.11 in the project's environment; 3.12.1 and 3.13.0 with OpenSSL
3.0.19 beside it, which have OP_ENABLE_KTLS) the kernel refuses the "tls" TCP upper
layer (setsockopt TCP_ULP "tls": ENOENT, no module), so there was nothing to measure.

Threads: build_ssl_context runs where the producer is built; a TlsTransport, like every
transport, is owned by its connection's I/O thread and only that thread calls it.
"""
import selectors
import ssl

from netkafka._validate import check_choice
from netkafka.errors import SslAuthenticationError, SslConfigError

# kafka-python's TLS settings and their defaults (None: not given).
SSL_DEFAULTS = {
    "ssl_context": None,
    "ssl_check_hostname": True,
    "ssl_cafile": None,
    "ssl_certfile": None,
    "ssl_keyfile": None,
    "ssl_password": None,
    "ssl_crlfile": None,
    "ssl_ciphers": None,
}
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
_FILE_SETTINGS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_crlfile")

# Ciphertext a TlsTransport holds back at most: it takes no more plaintext from the
# connection's queue while this much is encrypted and unsent, so bytes the connection
# counts as written are at most this far ahead of the socket and the outbound
# watermarks keep their meaning.  Enough for several TLS records of 16 KiB per call.
HOLD_LIMIT_BYTES = 256 * 1024
# Plaintext views shorter than this are joined before encryption (request headers,
# small batches): one TLS record for several of them, not one each.
_JOIN_BELOW_BYTES = 16 * 1024
# Ciphertext read from the socket per recv (several full TLS records).
_RECV_BYTES = 64 * 1024


def build_ssl_context(settings, security_protocol):
    """The SSLContext a producer's connections use, or None without TLS.

    Args:
        settings: a mapping with kafka-python's names (missing ones take SSL_DEFAULTS;
            other names are ignored here).
        security_protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL (checked by the
            caller).

    A user's ssl_context is used as it is: the other ssl_* settings are then not
    looked at (kafka-python's rule).  Otherwise: Python's client context (TLS 1.2
    or newer, the certificate chain verified against ssl_cafile or the system's
    CAs), the host name checked unless ssl_check_hostname is False, the
    client certificate from ssl_certfile (its key in it or in ssl_keyfile, decrypted
    with ssl_password), ssl_crlfile checked for the broker's certificate, ssl_ciphers
    in OpenSSL's cipher list syntax.  ssl_cafile's CAs replace the system's.

    Raises:
        SslConfigError: naming the setting: a TLS setting with a protocol without TLS,
            a file that is missing or does not load, a key password that does not
            fit, a key without a certificate, ciphers OpenSSL refuses, an
            ssl_check_hostname that is not a bool.
    """
    try:
        # A bool, as every other bool setting, checked before the comparison with the
        # defaults below, where 1 == True would pass as unset.
        check_choice("ssl_check_hostname", settings.get("ssl_check_hostname", True),
                     (True, False))
    except ValueError as error:
        raise SslConfigError(str(error)) from None
    given = {name: settings[name] for name in SSL_DEFAULTS
             if name in settings and settings[name] != SSL_DEFAULTS[name]}
    if security_protocol not in TLS_PROTOCOLS:
        if given:
            name = next(iter(given))
            raise SslConfigError(
                f"{name} is set but security_protocol={security_protocol!r} does not use "
                f"TLS: use SSL or SASL_SSL, or drop {name}")
        return None
    user_context = given.get("ssl_context")
    if user_context is not None:
        if not isinstance(user_context, ssl.SSLContext):
            raise SslConfigError(f"ssl_context must be an ssl.SSLContext, not a "
                                 f"{type(user_context).__name__}")
        if user_context.protocol == ssl.PROTOCOL_TLS_SERVER:
            # OpenSSL refuses it at every connection ("Cannot create a client socket"),
            # which would only show as connection failures until max_block_ms.
            raise SslConfigError("ssl_context is a server's (PROTOCOL_TLS_SERVER): the "
                                 "producer is a TLS client; use ssl.create_default_context() "
                                 "or PROTOCOL_TLS_CLIENT")
        return user_context
    for name in _FILE_SETTINGS:
        if name in given and not isinstance(given[name], (str, bytes)) and not hasattr(
                given[name], "__fspath__"):
            raise SslConfigError(f"{name} must be a file path, not a "
                                 f"{type(given[name]).__name__}")
    check_hostname = given.get("ssl_check_hostname", True)
    if "ssl_certfile" not in given:
        for name in ("ssl_keyfile", "ssl_password"):
            if name in given:
                raise SslConfigError(f"{name} is set without ssl_certfile: the client "
                                     f"certificate it belongs to is missing")
    # Python's client defaults (certificate and host name verified, compression and
    # renegotiation off); TLS 1.2 at least, as Kafka's Java client.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    cafile = given.get("ssl_cafile")
    if cafile is not None:
        # The given CAs replace the system's, as a Java trust store does.
        _load("ssl_cafile", cafile, lambda: context.load_verify_locations(cafile=cafile))
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    certfile = given.get("ssl_certfile")
    if certfile is not None:
        keyfile = given.get("ssl_keyfile")
        # OpenSSL says only "PEM lib" when either part is missing, and the error named
        # ssl_certfile even when ssl_keyfile held no key: looked for first.
        _check_pem("ssl_certfile", certfile, b"-----BEGIN CERTIFICATE-----", "certificate")
        if keyfile is not None:
            _check_pem("ssl_keyfile", keyfile, b"PRIVATE KEY-----", "private key")
        else:
            _check_pem("ssl_certfile", certfile, b"PRIVATE KEY-----",
                       "private key (put the key in it too, or name its file in ssl_keyfile)")
        password = given.get("ssl_password")
        _load("ssl_certfile", certfile, lambda: context.load_cert_chain(
            certfile, keyfile, _password_callback(password)),
            key_setting="ssl_keyfile" if keyfile is not None else "ssl_certfile",
            key_setting_path=certfile if keyfile is None else keyfile)
    crlfile = given.get("ssl_crlfile")
    if crlfile is not None:
        # load_verify_locations takes certificates too: a file of them would pass here
        # and fail every handshake for want of a CRL.
        _check_pem("ssl_crlfile", crlfile, b"-----BEGIN X509 CRL-----", "CRL")
        _load("ssl_crlfile", crlfile, lambda: context.load_verify_locations(cafile=crlfile))
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    ciphers = given.get("ssl_ciphers")
    if ciphers is not None:
        try:
            context.set_ciphers(ciphers)
        except (ssl.SSLError, TypeError) as exc:
            raise SslConfigError(f"ssl_ciphers={ciphers!r}: OpenSSL takes none of these "
                                 f"ciphers ({exc.args[-1]})") from None
    return context


def _password_callback(password):
    """load_cert_chain's password: a callable, so that an encrypted key with no
    password given fails (OpenSSL would otherwise prompt on the terminal).  A callable
    ssl_password (kafka-python's, e.g. a secret store's look-up) is called there."""
    if password is None:
        return lambda: b""
    if callable(password):
        return lambda: _password_bytes(password(), "ssl_password() returned")
    password = _password_bytes(password, "ssl_password is")
    return lambda: password


def _password_bytes(password, source):
    """password as bytes; SslConfigError naming source and the type (never the value)
    unless it is a str or bytes."""
    if isinstance(password, str):
        return password.encode()
    if not isinstance(password, (bytes, bytearray)):
        raise SslConfigError(f"{source} an object of type {type(password).__name__}, not a str "
                             f"or bytes")
    return password


def _file_bytes(name, path):
    """The bytes of setting name's file; SslConfigError naming the setting when it
    cannot be read."""
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise SslConfigError(f"{name}={str(path)!r}: {exc.strerror}") from None


def _check_pem(name, path, marker, what):
    """SslConfigError naming setting name unless its file at path holds marker, the
    PEM header of what it must hold."""
    data = _file_bytes(name, path)
    if marker not in data:
        raise SslConfigError(f"{name}={str(path)!r} holds no PEM {what}"
                             f"{_not_pem_hint(name, data)}")


# The first bytes of the stores Java clients keep keys and certificates in: users
# moving a Java client's configuration here name them where netkafka reads PEM.
_JAVA_STORE_MAGIC = {b"\xfe\xed\xfe\xed": "a JKS key store",
                     b"\xce\xce\xce\xce": "a JCEKS key store"}


def _not_pem_hint(name, data):
    """What setting name's file that is not PEM is, when it looks like a Java, PKCS12 or
    DER store, and how to convert it; else ''.  keytool converts only Java's stores: a
    DER file is openssl's to convert (a CRL with openssl crl, not keytool)."""
    kind = _JAVA_STORE_MAGIC.get(data[:4])
    if kind is not None:
        return (f": it is {kind}, and netkafka reads PEM files; convert it (keytool "
                f"-exportcert -rfc for a trust store's certificates, keytool -importkeystore "
                f"-deststoretype PKCS12 then openssl pkcs12 -nodes for a key and its chain)")
    if data[:1] != b"\x30":  # an ASN.1 SEQUENCE: DER, not text
        return ""
    if name == "ssl_crlfile":
        return (": it is binary DER, and netkafka reads PEM files; convert it (openssl crl "
                "-inform DER -in FILE -out crl.pem)")
    return (": it is binary DER (a PKCS12 store or a DER certificate), and netkafka reads PEM "
            "files; convert it (openssl pkcs12 -in FILE -nodes -out store.pem for a PKCS12 "
            "store, openssl x509 -inform DER -in FILE -out cert.pem for a certificate)")


def _load(name, path, load, key_setting=None, key_setting_path=None):
    """Runs load(), an SSLContext call reading the file of setting name; its failure
    becomes SslConfigError naming the setting (key_setting, at key_setting_path, when
    the private key is what failed)."""
    data = _file_bytes(name, path)  # readable, or named as the setting's
    try:
        load()
    except ssl.SSLError as exc:
        reason = exc.reason or exc.args[-1]
        if key_setting is not None:
            if reason == "KEY_VALUES_MISMATCH":
                raise SslConfigError(f"{key_setting}: the key does not fit the certificate in "
                                     f"ssl_certfile ({reason})") from None
            # OpenSSL 3 reports a wrong password only as "PEM lib": an encrypted key
            # that does not load is taken to be one.
            if _is_encrypted_key(key_setting_path):
                raise SslConfigError(f"{key_setting}: ssl_password does not decrypt the key "
                                     f"(or none was given): {reason}") from None
        raise SslConfigError(f"{name}={str(path)!r} does not load: {reason}"
                             f"{_not_pem_hint(name, data)}") from None


def _is_encrypted_key(path):
    with open(path, "rb") as file:
        text = file.read()
    return b"ENCRYPTED PRIVATE KEY" in text or b"Proc-Type: 4,ENCRYPTED" in text


class TlsTransport:
    """TLS over a connected PlainTransport: an ssl.SSLObject between two memory BIOs,
    the ciphertext moved by the plain transport.

    Owned by the connection's I/O thread (see the module docstring): no locks.
    """

    def __init__(self, plain, context, server_hostname, peer):
        """plain: a connecting or connected PlainTransport (owned from now on);
        server_hostname: the broker's name as configured (SNI, and the name its
        certificate must carry when the context checks host names); peer:
        "host:port", for messages."""
        self._plain = plain
        self._peer = peer
        self._incoming = ssl.MemoryBIO()  # ciphertext read, not yet decrypted
        self._outgoing = ssl.MemoryBIO()  # ciphertext made, not yet taken out
        try:
            self._tls = context.wrap_bio(self._incoming, self._outgoing,
                                         server_side=False, server_hostname=server_hostname)
        except BaseException:
            plain.close()  # this transport owned it: nobody else will close it
            raise
        # Ciphertext taken out of _outgoing and not yet sent: _held[_held_sent:].
        self._held = b""
        self._held_sent = 0
        self._recv_buffer = bytearray(_RECV_BYTES)
        self.output_pending = False

    def fileno(self):
        return self._plain.fileno()

    def connect_error(self):
        return self._plain.connect_error()

    def handshake(self):
        """One step of the TLS handshake: 0 once done and sent, else the selector
        events it waits for.

        Raises:
            SslAuthenticationError: the handshake failed; names the peer and OpenSSL's
                reason (for a certificate: why it did not verify).
            OSError: the socket failed, or the peer closed it mid-handshake.
        """
        while True:
            try:
                self._tls.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            except ssl.SSLEOFError:
                # Closed mid-handshake: a broker going down, a load balancer with no
                # broker behind it -- a connection failure, retried, as Java's
                # EOFException, not a refusal that fails the records at once.  Also what
                # a plaintext Kafka listener does with a ClientHello (a request too large).
                raise ConnectionAbortedError(
                    f"TLS handshake with {self._peer}: the peer closed the connection "
                    f"({_LISTENER_HINT})") from None
            except ssl.SSLCertVerificationError as exc:
                raise SslAuthenticationError(
                    f"TLS handshake with {self._peer}: the broker's certificate did not "
                    f"verify: {exc.verify_message} ({exc.reason})") from None
            except ssl.SSLError as exc:
                raise SslAuthenticationError(
                    f"TLS handshake with {self._peer} failed: {exc.reason or exc}"
                    f"{_alert_hint(exc)}") from None
            if not self._push():
                return selectors.EVENT_WRITE | (0 if done else selectors.EVENT_READ)
            if done:
                self.output_pending = False
                return 0
            if not self._receive():
                return selectors.EVENT_READ

    def write(self, buffers):
        """Encrypts a prefix of buffers (while less than HOLD_LIMIT_BYTES of
        ciphertext is held back) and sends what the socket takes; returns the
        plaintext bytes taken."""
        taken = 0
        if self._push():
            small = []
            small_bytes = 0
            room = HOLD_LIMIT_BYTES
            for view in buffers:
                if room <= 0:
                    break
                part = view if view.nbytes <= room else view[:room]
                room -= part.nbytes
                taken += part.nbytes
                if part.nbytes < _JOIN_BELOW_BYTES:
                    small.append(part)
                    small_bytes += part.nbytes
                    if small_bytes >= _JOIN_BELOW_BYTES:
                        self._tls.write(b"".join(small))
                        small, small_bytes = [], 0
                else:
                    if small:
                        self._tls.write(b"".join(small))
                        small, small_bytes = [], 0
                    self._tls.write(part)
            if small:
                self._tls.write(b"".join(small))
            self._push()
        self.output_pending = bool(self._held) or self._outgoing.pending > 0
        return taken

    def read_into(self, buffer):
        """Decrypts into buffer: bytes read, 0 at the end of the stream, None when
        nothing is there now.  A short count means the socket had no more."""
        size = len(buffer)
        total = 0
        try:
            while total < size:
                try:
                    n = self._tls.read(size - total, buffer[total:])
                    if n == 0:
                        # The broker's close_notify: SSLObject.read() returns 0 for it
                        # rather than raising SSLZeroReturnError (CPython's choice), and
                        # asking again would return 0 forever.
                        return total
                    total += n
                except ssl.SSLWantReadError:
                    received = self._receive()
                    if received is None:
                        break  # EAGAIN: everything the socket had is decrypted
                    if not received:
                        return total  # closed: 0 when nothing came before
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    # The broker's close_notify, or (EOF) the socket's end seen before
                    # without one, as brokers close: the end of the stream either way.
                    return total
                except ssl.SSLError as exc:
                    # TLS 1.3 ends the client's handshake before the broker has judged
                    # the client's certificate: its refusal comes as the first read.
                    raise SslAuthenticationError(
                        f"TLS connection with {self._peer} failed: {exc.reason or exc}"
                        f"{_alert_hint(exc)}") from None
        finally:
            if self._outgoing.pending:
                self.output_pending = True  # e.g. a TLS 1.3 key update to answer
        return total if total else None

    def close(self):
        self._plain.close()

    def _receive(self):
        """Moves what the socket has into the incoming BIO: True, False at the end of
        the stream, None when nothing is there now."""
        view = memoryview(self._recv_buffer)
        n = self._plain.read_into(view)
        if n is None:
            return None
        if n == 0:
            self._incoming.write_eof()
            return False
        self._incoming.write(view[:n])
        return True

    def _push(self):
        """Sends held and newly made ciphertext; True when all of it is sent."""
        while True:
            if self._held_sent == len(self._held):
                if not self._outgoing.pending:
                    self._held, self._held_sent = b"", 0
                    return True
                self._held, self._held_sent = self._outgoing.read(), 0
            sent = self._plain.write([memoryview(self._held)[self._held_sent:]])
            if sent == 0:
                return False
            self._held_sent += sent


_LISTENER_HINT = "is it a TLS listener? security_protocol must match the listener"


def _alert_hint(exc):
    """A hint for the handshake failures users meet most."""
    reason = exc.reason or ""
    if any(alert in reason for alert in ("CERTIFICATE_REQUIRED", "ALERT_BAD_CERTIFICATE",
                                         "ALERT_CERTIFICATE_UNKNOWN", "ALERT_UNKNOWN_CA")):
        return (" (the broker refused this client's certificate, or its absence: the "
                "listener wants mTLS; set ssl_certfile to a certificate its CA trusts)")
    if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG"):
        return f" ({_LISTENER_HINT})"
    return ""
