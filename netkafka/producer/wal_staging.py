"""Shared-memory images of the WAL's segments, for fsync "interval" and "never".

Why: a page of a segment file's mapping that a sync writes back is write-protected by
the kernel, and the next write to it takes a fault -- on a recycled segment, once per
page per use, and with the writeback that is about 100 ns per 100 B record here,
more than the rest of its append (README "Surviving crashes").  A staged segment's
entries go instead to the pages of a shared-memory (tmpfs) file of the same size,
which the kernel never writes back, so they stay writable; each sync copies the
blocks written since the last copy to the segment file with one write (O_DIRECT
where the file system takes it: no page cache) and fdatasync, and with "never" the
housekeeping thread makes the same write every fsync_interval_ms without the
fdatasync.  (A file mapping written with "never" paid the faults too, as the kernel's
flusher wrote its pages back: with four sending threads ~300 ns per 100 B record on
the housekeeping thread, prefaulting.)

A killed process loses nothing: its shared-memory files stay behind, and the next
producer opened on the directory copies each to its segment file, syncs it and
deletes it, before it reads the log (apply_left_over).  A lost machine loses them,
as it loses a file mapping's pages not yet written back: what "interval" and "never"
allow.

Files: the directory's `staging` holds the open producer's token (random, new at
each open); its images are SHM_DIR/netkafka-wal-<token>-<n>, at most SLOTS of them,
each segment_bytes long, reused from segment to segment.  An image begins with the
header of the segment it holds (or held last: once written out, it is that file's
copy, and copying it again changes nothing).

Memory: SLOTS images of segment_bytes stay resident in shared memory while the
producer is open (RAM the kernel cannot reclaim but by swapping).
"""
import errno
import fcntl
import logging
import os
import secrets
import threading

from netkafka.errors import WalStorageError
from netkafka.producer import _wal
from netkafka.producer._wal import MappedSegment

_log = logging.getLogger("netkafka.producer.wal")

SHM_DIR = "/dev/shm"
TOKEN_NAME = "staging"
# The active segment's image and the spare's; a segment rolled over keeps its image
# until its last blocks are synced, and a segment that finds no free image is a plain
# file mapping.
SLOTS = 2
_COPY_CHUNK_BYTES = 1 << 20


class Slot:
    """One shared-memory image: its file (open), path and mapping (a MappedSegment,
    prefaulted once: its pages stay mapped writable while segments come and go)."""

    __slots__ = ("fd", "path", "mapping")

    def __init__(self, fd, path, mapping):
        self.fd = fd  # immutable
        self.path = path  # immutable
        self.mapping = mapping  # immutable


class StagingArea:
    """The images of one open WAL directory.

    Args:
        directory: the WAL's directory (locked by the caller): its `staging` file is
            written with a new token, synced, before any image exists.
        dir_fd: the directory, open (the caller's): synced after the token is written.
        size_bytes: every image's size (the WAL's segment_bytes).

    Raises:
        WalStorageError: the token file cannot be written.
    """

    def __init__(self, directory, dir_fd, size_bytes):
        self.size_bytes = size_bytes  # immutable
        token = secrets.token_hex(16)
        self._prefix = os.path.join(SHM_DIR, f"netkafka-wal-{token}-")  # immutable
        # A leaf lock: nothing is taken while it is held.
        self._lock = threading.Lock()
        self._free = []  # _lock: Slots not holding a segment being written
        self._slots = []  # _lock: every Slot made
        self._refused = False  # _lock: a slot could not be made (logged once)
        self._taken = 0  # _lock: images handed out by take()
        _write_token(directory, dir_fd, token)

    def take(self):
        """A free image, made if fewer than SLOTS exist; None when none can be had
        (the segment is then mapped from its file, as with the other fsync modes)."""
        with self._lock:
            if self._free:
                self._taken += 1
                return self._free.pop()
            if len(self._slots) >= SLOTS or self._refused:
                return None
            path = f"{self._prefix}{len(self._slots)}"
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except OSError as exc:
                self._refuse(path, exc)
                return None
            try:
                # Every page reserved now: shared memory running out under a mapping
                # would be SIGBUS at an append.
                os.posix_fallocate(fd, 0, self.size_bytes)
                mapping = MappedSegment(fd, self.size_bytes, path)
                mapping.prefault()
            except (OSError, WalStorageError) as exc:
                os.close(fd)
                os.unlink(path)
                self._refuse(path, exc)
                return None
            slot = Slot(fd, path, mapping)
            self._slots.append(slot)
            self._taken += 1
            return slot

    def _refuse(self, path, exc):
        self._refused = True
        _log.warning("WAL: no shared-memory image at %s (%s); segments are mapped from "
                     "their files, and appends cost more per record", path,
                     getattr(exc, "strerror", None) or exc)

    def counts(self):
        """(images made, segments staged in them so far)."""
        with self._lock:
            return len(self._slots), self._taken

    def give(self, slot):
        """slot's segment is written out (or gone): the image may hold another."""
        with self._lock:
            self._free.append(slot)

    def close(self, remove):
        """Closes the images; deletes them when remove (everything they held is in
        the segment files), else leaves them for the next producer to copy."""
        with self._lock:
            slots, self._slots, self._free = self._slots, [], []
        for slot in slots:
            slot.mapping.unmap()
            os.close(slot.fd)
            if remove:
                try:
                    os.unlink(slot.path)
                except FileNotFoundError:
                    pass


def direct_writes(fd, on):
    """Turns O_DIRECT on or off for fd; False where the file system refuses it (the
    image's blocks then go through the page cache: still no fault per page).

    Raises:
        WalStorageError: the OS refused otherwise.
    """
    try:
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT if on else flags & ~os.O_DIRECT)
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return False
        raise WalStorageError(f"cannot set O_DIRECT on a WAL segment: {exc.strerror}",
                              errno=exc.errno) from None
    return True


def apply_left_over(directory, segment_path):
    """Copies the images a dead producer left (named by the directory's token) to
    their segment files, syncs those, and deletes the images; returns how many were
    copied.  Called before the log is read, with the directory locked.

    Args:
        segment_path: segment_path(header bytes, image path) -> the path of the
            segment file the image belongs to (its header checked), or None for an
            image to drop; it raises to refuse the image (which is then kept).

    Raises:
        WalStorageError: an image or a segment file cannot be read, written or synced.
        What segment_path raises.
    """
    token = _read_token(directory)
    if token is None:
        return 0
    prefix = f"netkafka-wal-{token}-"
    try:
        names = sorted(name for name in os.listdir(SHM_DIR) if name.startswith(prefix))
    except FileNotFoundError:
        return 0
    copied = 0
    for name in names:
        image = os.path.join(SHM_DIR, name)
        copied += _copy_image(image, segment_path)
        os_call("cannot delete the WAL's shared-memory image", image, os.unlink, image)
    return copied


def _copy_image(image, segment_path):
    reading = "cannot read the WAL's shared-memory image"
    fd = os_call(reading, image, os.open, image, os.O_RDONLY)
    try:
        size = os_call(reading, image, os.fstat, fd).st_size
        path = segment_path(os_call(reading, image, os.pread, fd, _wal.HEADER_BYTES, 0),
                            image)
        if path is None or not os.path.exists(path):
            return 0  # not an image, its segment reclaimed, or a spare never used
        target = os_call("cannot open WAL segment", path, os.open, path, os.O_WRONLY)
        try:
            if os_call("cannot open WAL segment", path, os.fstat, target).st_size != size:
                _log.warning("WAL: image %s does not match %s in size; dropped", image, path)
                return 0
            for offset in range(0, size, _COPY_CHUNK_BYTES):
                chunk = os_call(reading, image, os.pread, fd, _COPY_CHUNK_BYTES, offset)
                os_call("cannot write WAL segment", path, os.pwrite, target, chunk, offset)
            os_call("cannot sync WAL segment", path, os.fsync, target)
        finally:
            os.close(target)
    finally:
        os.close(fd)
    _log.info("WAL: copied the shared-memory image a dead producer left to %s", path)
    return 1


def _read_token(directory):
    path = os.path.join(directory, TOKEN_NAME)
    if not os.path.exists(path):
        return None
    with open(os_call("cannot read", path, os.open, path, os.O_RDONLY), "rb") as f:
        token = os_call("cannot read", path, f.read).decode("ascii", "replace").strip()
    # Torn by a crash while it was written: its images were not made yet.
    return token if len(token) == 32 and all(c in "0123456789abcdef" for c in token) else None


def _write_token(directory, dir_fd, token):
    path = os.path.join(directory, TOKEN_NAME)
    fd = os_call("cannot write", path, os.open, path,
                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os_call("cannot write", path, os.write, fd, f"{token}\n".encode())
        os_call("cannot sync", path, os.fsync, fd)
    finally:
        os.close(fd)
    os_call("cannot sync the WAL directory", directory, os.fsync, dir_fd)


def os_call(what, path, fn, *args):
    """fn(*args), an OSError raised as WalStorageError naming what failed and path."""
    try:
        return fn(*args)
    except OSError as exc:
        raise WalStorageError(f"{what} {path}: {exc.strerror or exc}",
                              errno=exc.errno) from None
