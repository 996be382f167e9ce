"""Name resolution for broker connections, kept off the I/O threads.

``getaddrinfo()`` blocks for as long as the system resolver takes -- seconds when a DNS
server does not answer -- and an I/O thread serves every connection it owns, so it never
calls it for a name.  A connection (connection.py) hands the name to a short-lived
resolver thread, sits in RESOLVING meanwhile, and takes the addresses when the thread
hands them back.  An IP literal needs nobody's answer (``AI_NUMERICHOST``) and is
resolved on the spot.

client_dns_lookup, the Java client's ``client.dns.lookup``:

- ``use_all_dns_ips`` (default): every address of a name is tried in turn until one
  connects; the name given is the host TLS verifies and SASL names.
- ``resolve_canonical_bootstrap_servers_only``: each address of a *bootstrap* name is
  looked up in reverse, and that canonical name becomes the bootstrap host TLS and SASL
  see (Kerberos principals and certificates name the host behind a DNS alias); an
  address without a reverse entry, or whose reverse name does not resolve back to it,
  keeps its literal, as Java's getCanonicalHostName().
  Brokers named by metadata are resolved as with use_all_dns_ips.
"""
import ipaddress
import socket
import threading
from typing import NamedTuple

USE_ALL_DNS_IPS = "use_all_dns_ips"
RESOLVE_CANONICAL_BOOTSTRAP_SERVERS_ONLY = "resolve_canonical_bootstrap_servers_only"
CLIENT_DNS_LOOKUPS = (USE_ALL_DNS_IPS, RESOLVE_CANONICAL_BOOTSTRAP_SERVERS_ONLY)


class ResolvedAddress(NamedTuple):
    """One address to try: the name TLS and SASL see, and where to connect."""

    host: str  # the name given, or (canonical mode) the address's canonical name
    family: int  # socket.AF_INET or AF_INET6
    sockaddr: tuple  # as getaddrinfo() gives it, for connect()


def host_port(host, port):
    """'host:port', with an IPv6 literal in brackets ('[::1]:9092') as Kafka writes it."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def numeric_addresses(host, port):
    """The address of an IP literal, without a lookup; None for a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return None  # a name: never looked up here, whatever the caller's thread
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                               flags=socket.AI_NUMERICHOST)
    return _addresses(host, infos)


def resolve(host, port, canonical):
    """Every address of host, in the resolver's order (blocking: a resolver thread's).

    Raises:
        socket.gaierror: the name does not resolve.
    """
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = _addresses(host, infos)
    if not canonical:
        return addresses
    return [address._replace(host=_canonical_name(address.sockaddr)) for address in addresses]


def start_resolving(host, port, canonical, name, deliver):
    """Starts a daemon thread that resolves host and calls deliver(addresses, error) on it:
    a list of ResolvedAddress, or the exception.  A daemon: a lookup that hangs must not keep
    the process from exiting."""
    def run():
        try:
            addresses, error = resolve(host, port, canonical), None
        except Exception as exc:  # noqa: BLE001 -- handed to the connection, which fails
            addresses, error = None, exc
        deliver(addresses, error)

    threading.Thread(target=run, name=name, daemon=True).start()


def _addresses(host, infos):
    seen = set()
    addresses = []
    for family, _, _, _, sockaddr in infos:
        if sockaddr not in seen:  # one per address, whatever the protocol rows
            seen.add(sockaddr)
            addresses.append(ResolvedAddress(host, family, sockaddr))
    return addresses


def _canonical_name(sockaddr):
    """The address's reverse entry if that name resolves forward to the address again,
    else the address's literal (as Java's getCanonicalHostName): whoever controls the
    reverse zone must not choose, alone, the name TLS verifies and Kerberos asks for."""
    literal = sockaddr[0]
    try:
        name, _ = socket.getnameinfo(sockaddr, socket.NI_NAMEREQD)
        forward = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except OSError:  # no reverse entry, or its name does not resolve
        return literal
    if not any(info[4][0] == literal for info in forward):
        return literal
    return name
