"""Transports: what carries a broker connection's bytes over its TCP socket.

The connection (connection.py) frames requests and parses answers; its transport owns
the socket and moves bytes, never blocking.  PlainTransport (in _transport.pyx, native
so that a write costs no Python frame) carries PLAINTEXT and SASL_PLAINTEXT;
tls.TlsTransport, ``ssl.SSLObject`` over ``ssl.MemoryBIO``s, keeps the same contract
for SSL and SASL_SSL by holding a PlainTransport for the ciphertext.  Kernel TLS would
let the socket stay a PlainTransport once the handshake handed the keys to the kernel
(``sendmsg`` and zero copy kept): see tls.py for why it is not used.

The contract, called only on the connection's I/O thread:

    fileno()          the descriptor the selector watches (the connection registers
                      the transport itself).
    connect_error()   once the selector reports the connecting socket writable: the
                      errno of the TCP connect, 0 when connected.
    handshake()       one step of what must happen before Kafka frames flow (a TLS
                      handshake).  Returns 0 when done, else the selector events it
                      waits for (selectors.EVENT_READ and/or EVENT_WRITE): the
                      connection registers exactly those and calls again when one
                      comes.  Raises on failure: an OSError (ssl.SSLError is one) is
                      reported naming this stage, a KafkaError as it is.  Plain: 0
                      at once.
    write(buffers)    takes a prefix of the concatenated buffers (a sequence of 1-D
                      byte memoryviews, at most IOV_MAX of them looked at) and returns
                      its length; 0 when it takes nothing now (EAGAIN).  Accepted bytes
                      are the transport's: sent, or (TLS) encrypted and held back.  The
                      caller drops the prefix from its queue (drop_written(); its
                      queue_buffers() makes the 1-D byte memoryviews).  Called with an empty
                      sequence, it pushes held-back bytes and returns 0.
    output_pending    attribute: True while accepted bytes are held back.  The
                      connection then asks for EVENT_WRITE even with an empty queue,
                      and calls write() when it comes.  Plain: always False.
    read_into(buf)    reads into buf (a writable memoryview): bytes read, 0 when the
                      peer closed the stream, None when nothing is there now.  A count
                      short of len(buf) promises that nothing is left buffered inside
                      the transport (TLS: no decrypted bytes pending), so waiting for
                      EVENT_READ is safe.  A read that makes the transport owe the peer
                      bytes (a TLS key update) sets output_pending.
    close()           closes the socket with no shutdown() and no goodbye of its own
                      (no TLS close_notify): also right in a forked child, on its copy
                      of the parent's connection.
"""
import socket

from netkafka.client._transport import IOV_MAX, PlainTransport, drop_written, queue_buffers

__all__ = ["IOV_MAX", "PlainTransport", "connect_tcp", "drop_written", "queue_buffers"]


def connect_tcp(family, sockaddr, send_buffer_bytes, receive_buffer_bytes,
                socket_options=((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)):
    """Starts a non-blocking TCP connect to sockaddr, one resolved address (resolver.py:
    names are resolved before, never here, so that an I/O thread does not block on
    DNS); returns (PlainTransport, errno of connect_ex).  socket_options: (level,
    option, value) triples for setsockopt().

    Raises:
        OSError: the socket cannot be made or set up (it is closed then, as on any
            other exception).
    """
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        for level, option, value in socket_options:
            sock.setsockopt(level, option, value)
        # Buffer sizes before connect(), so the window scale is negotiated for them.
        if send_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
        if receive_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        err = sock.connect_ex(sockaddr)
    except BaseException:
        sock.close()  # not returned: nobody else would close it
        raise
    return PlainTransport(sock), err
