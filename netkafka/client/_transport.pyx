"""The plain transport: a connected TCP socket, bytes as they are (see transport.py for
the contract every transport keeps).

Native so that the write path costs the connection no Python frame: write() is one C
call that hands the connection's queue of memoryviews to ``socket.sendmsg`` as they
are -- the sealed batches' own memory, never copied -- and turns EAGAIN into 0.  A
Python method here would add a frame to every flush, i.e. to every request.  Counted
with a profiler on the I/O thread, one acks=1 Produce request at a time: 117.13
Python calls per request with sendmsg called from the connection, 117.04 with this.

Owned by the I/O thread of its connection, like the connection's ``_io_*`` state: no
method takes a lock, and only that thread calls them (close() also from a forked child,
where no other thread exists).
"""
import itertools
import os
import socket

from cpython.memoryview cimport PyMemoryView_GET_BUFFER

# At most this many buffers per sendmsg() call (the kernel refuses more).
try:
    IOV_MAX = min(os.sysconf("SC_IOV_MAX"), 1024)
except (ValueError, OSError):
    IOV_MAX = 64

cdef Py_ssize_t _iov_max = IOV_MAX


cdef class PlainTransport:
    """A TCP socket, non-blocking and connecting or connected; nothing between it and
    the Kafka frames, so the handshake is done at once and nothing is held back."""

    cdef object _sock  # the socket.socket this transport owns (closes)
    cdef object _sendmsg  # _sock.sendmsg, bound once: the hot path skips the lookup
    cdef object _recv_into  # _sock.recv_into, likewise
    # Always False: every byte write() accepts is in the kernel's send buffer.
    cdef readonly bint output_pending

    def __init__(self, sock):
        self._sock = sock
        self._sendmsg = sock.sendmsg
        self._recv_into = sock.recv_into
        self.output_pending = False

    def fileno(self):
        """The socket's descriptor, for the selector (-1 once closed)."""
        return self._sock.fileno()

    def connect_error(self):
        """After the selector reported a connecting socket writable: the errno of the
        connect (0 when connected)."""
        return self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)

    def handshake(self):
        """Nothing to agree on over plain TCP: done at once."""
        return 0

    def write(self, buffers):
        """Writes a prefix of the concatenated buffers (a sequence of 1-D byte
        memoryviews; at most IOV_MAX of them are looked at) and returns its length
        in bytes, 0 when the socket takes nothing now (EAGAIN)."""
        if len(buffers) > _iov_max:
            buffers = list(itertools.islice(buffers, _iov_max))
        try:
            # sendmsg takes any sequence and exports each buffer, uncopied.
            return self._sendmsg(buffers)
        except BlockingIOError:  # EINTR is retried inside sendmsg (PEP 475)
            return 0

    def read_into(self, buffer):
        """Reads what the socket has into buffer (a writable memoryview): the number
        of bytes read, 0 when the peer closed the stream, None when there is nothing
        to read now (EAGAIN).  A count short of len(buffer) means nothing is left
        buffered here: the selector reports the next bytes."""
        try:
            return self._recv_into(buffer)
        except BlockingIOError:
            return None

    def close(self):
        """Closes the socket, with no shutdown(): also right for a forked child's
        copy of a connection its parent still uses."""
        self._sock.close()


# -- the connection's write queue (a deque of 1-D byte memoryviews)
#
# Native for the reason write() is: the connection runs both once per request (and
# per write), and in Python their loops over the request's buffers were a seventh of
# the bytecodes the I/O thread ran per Produce request (bench/io_thread_probe.py).


cdef bint _is_byte_view(object view):
    # A 1-D memoryview of unsigned bytes ("B" format, or none given): sendmsg and
    # the queue's slicing count it in bytes.
    cdef Py_buffer *info = PyMemoryView_GET_BUFFER(view)
    return info.ndim == 1 and (info.format == NULL or (info.format[0] == b"B"
                                                         and info.format[1] == 0))


def queue_buffers(queue, buffers):
    """Appends each of buffers (objects with the buffer protocol) to queue as a 1-D
    byte memoryview, leaving out empty ones; returns their total length in bytes."""
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t length
    append = queue.append
    for buf in buffers:
        view = memoryview(buf)  # of a memoryview too: the queue's own, however it ends
        if not _is_byte_view(view):
            view = view.cast("B")
        length = PyMemoryView_GET_BUFFER(view).len
        if length:
            append(view)
            total += length
    return total


def drop_written(queue, Py_ssize_t sent):
    """Takes the first sent bytes off queue: whole memoryviews, then the written
    front of the next one."""
    cdef Py_ssize_t length
    while sent:
        head = queue[0]
        length = PyMemoryView_GET_BUFFER(head).len
        if sent >= length:
            sent -= length
            queue.popleft()
        else:
            queue[0] = head[sent:]
            sent = 0

