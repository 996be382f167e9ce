"""How far a process got before it was SIGKILLed: two u64 counters in a small file the
child maps shared and stores into (no syscall, so the kill can land anywhere), and the
parent reads once the child is dead.  For tests/wal_writer.py and tests/wal_loader.py.

Each counter is stored by one aligned 8-byte write (a ctypes c_uint64), never with
struct.pack_into: that is not one store, and a SIGKILL landing inside it left the
counter 0 (in a CI run, and in 3 to 10 of every 300 kills of a bare store loop here).
"""
import ctypes
import mmap
import struct

_LAYOUT = struct.Struct("=QQ")  # native order, as the ctypes stores write them


def reset(path):
    """Creates (or empties) the file: both counters 0.  Before the child starts."""
    with open(path, "wb") as f:
        f.write(bytes(_LAYOUT.size))


def read(path):
    """(counter 0, counter 1) as the file holds them."""
    with open(path, "rb") as f:
        return _LAYOUT.unpack(f.read())


class Counters:
    """The child's side: counters[0] and counters[1], each set by one store."""

    def __init__(self, path):
        with open(path, "r+b") as f:
            self._mapping = mmap.mmap(f.fileno(), _LAYOUT.size)
        self._cells = [ctypes.c_uint64.from_buffer(self._mapping, offset)
                       for offset in (0, 8)]

    def __setitem__(self, index, value):
        self._cells[index].value = value
