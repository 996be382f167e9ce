"""A TCP proxy in front of one broker listener that can turn into a black hole.

The chaos tests put one in front of each node's client listener and let the node advertise
the proxy's port, so that every connection a client makes to that node passes through it.
Forwarding, it copies bytes both ways.  Black-holed, it behaves like a broker that is reachable
but never answers: connections are still accepted, whatever the client writes is read and
thrown away, and nothing comes back -- no reset, no close, so only the client's own request
timeout can tell.  Connections open when the black hole starts are swallowed from then on.

Returning to forwarding serves new connections again; a swallowed connection stays swallowed
until its client closes it, since bytes are missing from the middle of its stream.

Retargeted, it forwards new connections to another port and closes the open ones: a load
balancer behind a stable bootstrap address that now points at another listener or cluster.

Threads: one accepts; each connection has one pump thread per direction, blocking on recv.
Lock order: _lock only (no other lock is taken while holding it).
"""
import socket
import threading
from typing import Optional

from netkafka.testing.broker import HOST, Cluster

RECV_BYTES = 65536
# How long a new connection may take to reach the target before it is given up (and the
# client's connection closed, as a refused connection would be).
CONNECT_TIMEOUT_S = 5.0


class _Connection:
    """A client's connection and, when forwarded, its connection to the target."""

    def __init__(self, client: socket.socket, upstream: Optional[socket.socket]):
        self.client = client      # immutable
        self.upstream = upstream  # immutable; None: accepted during a black hole
        # Guarded by TcpProxy._lock: once True, bytes are no longer passed on either way.
        self.swallowed = upstream is None

    def close(self) -> None:
        for sock in (self.client, self.upstream):
            if sock is not None:
                _close_socket(sock)


class TcpProxy:
    """Forwards connections on 127.0.0.1:`port` to `target_port`, or black-holes them.

    The listening socket is bound in the constructor, so `port` can be advertised before the
    proxy's threads start.  Use as a context manager, or call start() and close().

    Args:
        target_port: where connections are forwarded to, on 127.0.0.1.
        port: the port to listen on; by default a free one (see .port).
    """

    def __init__(self, target_port: int, port: int = 0):
        self.target = (HOST, target_port)  # guarded by _lock (retarget() changes it)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # the acceptor's
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((HOST, port))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]  # immutable
        self._lock = threading.Lock()
        self._blackholed = False  # guarded by _lock
        self._closed = False  # guarded by _lock
        self._connections: "set[_Connection]" = set()  # guarded by _lock
        self._threads: "list[threading.Thread]" = []  # guarded by _lock
        # Counters, guarded by _lock: what the tests check the black hole really met.
        self.accepted = 0
        self.swallowed_connections = 0
        self.swallowed_bytes = 0

    def __repr__(self) -> str:
        mode = "black hole" if self._blackholed else "forwarding"
        return f"<TcpProxy {HOST}:{self.port} -> {self.target[0]}:{self.target[1]} {mode}>"

    def __enter__(self) -> "TcpProxy":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def address(self) -> str:
        """"127.0.0.1:PORT" of the proxy, what clients are given instead of the target."""
        return f"{HOST}:{self.port}"

    def start(self) -> None:
        self._spawn(self._accept_loop, "accept")

    def blackhole(self) -> None:
        """From now on nothing passes: open connections and new ones are swallowed."""
        with self._lock:
            self._blackholed = True
            for connection in self._connections:
                if not connection.swallowed:
                    connection.swallowed = True
                    self.swallowed_connections += 1

    def retarget(self, target_port: int) -> None:
        """New connections go to target_port from now on; open ones are closed (their
        clients reconnect, and reach the new target)."""
        with self._lock:
            self.target = (HOST, target_port)
            connections = list(self._connections)
            self._connections.clear()
        for connection in connections:
            connection.close()

    def forward(self) -> None:
        """New connections are forwarded again; swallowed ones stay swallowed."""
        with self._lock:
            self._blackholed = False

    def close(self) -> None:
        """Close the listener and every connection, and wait for the threads to end."""
        with self._lock:
            self._closed = True
            connections = list(self._connections)
            self._connections.clear()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # never accepted anything: nothing to wake
        self._listener.close()
        for connection in connections:
            connection.close()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()

    def _spawn(self, target, name: str, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True,
                                  name=f"netkafka-proxy-{self.port}-{name}")
        with self._lock:
            # Drop the finished ones, so that a long run does not collect dead threads.
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                blackholed = self._blackholed
                self.accepted += 1
            upstream = None if blackholed else self._connect_upstream()
            if upstream is None and not blackholed:
                client.close()  # the target refused: so does the proxy, as closely as it can
                continue
            connection = _Connection(client, upstream)
            with self._lock:
                if self._closed:
                    connection.close()
                    return
                if blackholed:
                    self.swallowed_connections += 1
                self._connections.add(connection)
            self._spawn(self._pump, "up", connection, client, upstream)
            if upstream is not None:
                self._spawn(self._pump, "down", connection, upstream, client)

    def _connect_upstream(self) -> Optional[socket.socket]:
        with self._lock:
            target = self.target
        try:
            upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT_S)
        except OSError:
            return None
        upstream.settimeout(None)
        return upstream

    def _pump(self, connection: _Connection, source: socket.socket,
              destination: Optional[socket.socket]) -> None:
        """Copies source to destination until either end closes; drops bytes once swallowed."""
        try:
            while True:
                data = source.recv(RECV_BYTES)
                if not data:
                    break
                with self._lock:
                    swallowed = connection.swallowed
                    if swallowed:
                        self.swallowed_bytes += len(data)
                if not swallowed:
                    destination.sendall(data)
        except OSError:
            pass  # either end went away: the connection ends below
        with self._lock:
            # A black hole says nothing, not even that the target hung up: the client's side
            # stays open (and swallowing) until the client closes it.
            keep_client = connection.swallowed and source is connection.upstream and not self._closed
            if not keep_client:
                self._connections.discard(connection)
        if keep_client:
            _close_socket(source)
        else:
            connection.close()


def _close_socket(sock: socket.socket) -> None:
    try:
        # shutdown() wakes a pump blocked in recv() on this socket; close() alone may not.
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more
    sock.close()


def proxy_listener(cluster: Cluster, listener_name: str) -> "dict[int, TcpProxy]":
    """Put a started TcpProxy in front of listener_name on every node of a cluster that has
    not started yet; each node advertises its proxy's port for that listener.

    Returns:
        {node id: proxy}; the caller closes them once the cluster has stopped.
    """
    proxies = {}
    try:
        for node in cluster.nodes:
            proxy = proxies[node.node_id] = TcpProxy(node.listener_ports[listener_name])
            node.advertised_ports[listener_name] = proxy.port
            proxy.start()
    except BaseException:
        for proxy in proxies.values():
            proxy.close()
        raise
    return proxies
