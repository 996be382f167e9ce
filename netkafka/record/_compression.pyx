# distutils: libraries = z
"""Compression of a batch's records section, written into the caller's buffer.

Kafka compresses a RecordBatch's records (everything after the 61-byte header) as
one unit and names the codec in the low three bits of the attributes.  Each codec
here writes its output straight into a buffer the caller sized with
max_compressed_size(n), with the GIL released while it works:

    gzip    RFC 1952 gzip stream (zlib's deflate, 32 KiB window, memLevel 8, as
            the Java client's Deflater), through zlib.h
    snappy  one raw snappy block, no xerial framing (the Java and librdkafka
            consumers read both), through cramjam, which releases the GIL itself
    lz4     one LZ4 frame as the Java client and librdkafka write it: 64 KiB
            independent blocks (Java's reader refuses linked ones), no block or
            content checksum, no content size; through liblz4's frame API, which
            the lz4 package's extension exports
    zstd    one zstd frame with its content size, through libzstd's functions in
            the zstandard package's cffi backend

Levels are the Java client's (KIP-390's compression.<codec>.level), so a level
copied from a Java config means what it meant there:

    gzip    -1 (the default: zlib's own, which is 6) or 1-9; Java refuses 0
    lz4     1-17, default 9.  Java (Lz4BlockOutputStream) runs lz4-java's fast
            compressor at 9 and its HC compressor at every other level, which
            lz4-java hands to liblz4's LZ4_compress_HC, which clamps above 12.
            Here 9 is the frame API's fast mode (level 0) and the others HC at
            the same level, clamped to 3-12: the frame API has no HC level below 3
    zstd    -131072 to 22 (libzstd's range, which is Java's), default 3

Each route won a measurement on 1 MiB of records (16-byte keys, 100-byte values)
against the other ways to write into a caller's buffer: zlib's C API ran about 1.6x
cramjam's gzip; cramjam's LZ4 frames link their blocks (Java's reader refuses them)
and its block API ignores the level; libzstd through a function pointer ran as fast
as zstandard's own compress and cramjam's.  Only snappy (Rust, no C API) costs a
Python call per batch.  bench/test_bench_compression.py compares every codec with
its library called directly.
"""
import os

import cramjam

from netkafka.errors import CompressionError

cimport cython
from cpython.buffer cimport (
    PyBUF_READ, PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_WRITE, PyBuffer_Release, PyObject_GetBuffer,
)
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.pythread cimport (
    NOWAIT_LOCK, WAIT_LOCK, PyThread_acquire_lock, PyThread_allocate_lock, PyThread_free_lock,
    PyThread_release_lock, PyThread_type_lock,
)
from libc.limits cimport UINT_MAX
from libc.stdint cimport uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, memset
from posix.dlfcn cimport RTLD_LOCAL, RTLD_NOW, dlerror, dlopen, dlsym


cdef extern from "zlib.h" nogil:
    ctypedef struct z_stream:
        unsigned char *next_in          # const in use: zlib only reads the input
        unsigned int avail_in
        unsigned char *next_out
        unsigned int avail_out
        unsigned long total_out
        const char *msg
    enum:
        Z_OK
        Z_STREAM_END
        Z_MEM_ERROR
        Z_FINISH
        Z_DEFLATED
        Z_DEFAULT_STRATEGY
    int deflateInit2(z_stream *stream, int level, int method, int window_bits,
                     int mem_level, int strategy)
    int deflateReset(z_stream *stream)
    int deflate(z_stream *stream, int flush)
    int deflateEnd(z_stream *stream)
    unsigned long deflateBound(z_stream *stream, unsigned long n)


cdef enum:
    # A RecordBatch's length is an int32: no records section is larger.
    MAX_INPUT_BYTES = 0x7FFFFFFF
    # Below this the codec work is short (at default levels about 15 us for lz4, 40
    # for zstd, 250 for gzip): dropping and re-taking the GIL would cost more than
    # it frees, and a contended re-take waits up to the interpreter's switch interval.
    # (cramjam decides for snappy: it always drops the GIL.)
    GIL_RELEASE_MIN_BYTES = 8192
    # deflateInit2's window bits: a 2**15-byte window; +16 asks for the gzip wrapper.
    GZIP_WINDOW_BITS = 15 + 16
    # zlib's default memLevel, the one java.util.zip.Deflater uses.
    GZIP_MEM_LEVEL = 8
    # Z_DEFAULT_COMPRESSION, java.util.zip.Deflater's DEFAULT_COMPRESSION: zlib runs it as 6.
    GZIP_DEFAULT_LEVEL = -1
    GZIP_MIN_LEVEL = 1
    GZIP_MAX_LEVEL = 9
    # The Java client's lz4 levels; its default selects the fast compressor.
    LZ4_DEFAULT_LEVEL = 9
    LZ4_MIN_LEVEL = 1
    LZ4_MAX_LEVEL = 17
    # liblz4's HC levels as its frame API offers them (LZ4HC_CLEVEL_MIN, _MAX).
    LZ4_HC_MIN_LEVEL = 3
    LZ4_HC_MAX_LEVEL = 12
    ZSTD_DEFAULT_LEVEL = 3
    # liblz4's frame-API version (LZ4F_VERSION) whose structures are declared below.
    LZ4F_VERSION = 100
    LZ4F_MAX64KB = 4
    LZ4F_BLOCK_INDEPENDENT = 1


# liblz4's LZ4F_frameInfo_t and LZ4F_preferences_t (lz4frame.h; the same layout
# since lz4 1.8).  There is no header to include: the functions come from the lz4
# package's extension, so the structures are declared here.
cdef struct LZ4FrameInfo:
    int block_size_id                   # LZ4F_blockSizeID_t
    int block_mode                      # LZ4F_blockMode_t
    int content_checksum                # LZ4F_contentChecksum_t
    int frame_type                      # LZ4F_frameType_t
    unsigned long long content_size     # 0: not written
    unsigned dict_id
    int block_checksum                  # LZ4F_blockChecksum_t

cdef struct LZ4FramePreferences:
    LZ4FrameInfo frame_info
    int compression_level
    unsigned auto_flush
    unsigned favor_dec_speed
    unsigned reserved[3]


ctypedef size_t (*lz4f_compress_frame_f)(void *dst, size_t capacity, const void *src, size_t n,
                                         const LZ4FramePreferences *preferences) noexcept nogil
ctypedef size_t (*lz4f_compress_frame_bound_f)(size_t n,
                                               const LZ4FramePreferences *preferences) noexcept nogil
ctypedef unsigned (*lz4f_is_error_f)(size_t code) noexcept nogil
ctypedef const char *(*lz4f_error_name_f)(size_t code) noexcept nogil
ctypedef unsigned (*lz4f_version_f)() noexcept nogil

ctypedef void *(*zstd_create_cctx_f)() noexcept nogil
ctypedef size_t (*zstd_free_cctx_f)(void *cctx) noexcept nogil
ctypedef size_t (*zstd_compress_cctx_f)(void *cctx, void *dst, size_t capacity, const void *src,
                                        size_t n, int level) noexcept nogil
ctypedef size_t (*zstd_compress_bound_f)(size_t n) noexcept nogil
ctypedef unsigned (*zstd_is_error_f)(size_t code) noexcept nogil
ctypedef const char *(*zstd_error_name_f)(size_t code) noexcept nogil
ctypedef int (*zstd_level_f)() noexcept nogil

# liblz4's frame API and libzstd: set once while the module is imported (under the
# import lock) and only read afterwards, from any thread.
cdef lz4f_compress_frame_f lz4f_compress_frame
cdef lz4f_compress_frame_bound_f lz4f_compress_frame_bound
cdef lz4f_is_error_f lz4f_is_error
cdef lz4f_error_name_f lz4f_error_name
cdef zstd_create_cctx_f zstd_create_cctx
cdef zstd_free_cctx_f zstd_free_cctx
cdef zstd_compress_cctx_f zstd_compress_cctx
cdef zstd_compress_bound_f zstd_compress_bound
cdef zstd_is_error_f zstd_is_error
cdef zstd_error_name_f zstd_error_name


# Codec names by id, as Kafka's compression.type names them.
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

# Looked up once, not per batch.
_snappy_compress_raw_into = cramjam.snappy.compress_raw_into


cdef void *_exported_function(void *library, str library_name, str name) except NULL:
    cdef void *function = dlsym(library, name.encode())
    if function == NULL:
        raise ImportError(
            f"{library_name} does not export {name}(), which netkafka needs "
            f"(install lz4>=4.0 from its wheels: their extension carries liblz4)")
    return function


cdef int _resolve_lz4() except -1:
    global lz4f_compress_frame, lz4f_compress_frame_bound, lz4f_is_error, lz4f_error_name
    import lz4.frame
    # The extension holding liblz4's frame API; importing it loaded it, so dlopen only
    # finds the loaded copy (the handle is kept for the life of the process).
    path = lz4.frame._frame.__file__
    cdef void *library = dlopen(os.fsencode(path), RTLD_NOW | RTLD_LOCAL)
    if library == NULL:
        raise ImportError(f"cannot open the lz4 package's extension {path}: "
                          f"{(<bytes>dlerror()).decode(errors='replace')}")
    cdef unsigned version = (<lz4f_version_f>_exported_function(library, path, "LZ4F_getVersion"))()
    if version != LZ4F_VERSION:
        raise ImportError(f"the lz4 package's liblz4 has frame API version {version}; "
                          f"netkafka is written for version {LZ4F_VERSION}")
    lz4f_compress_frame = <lz4f_compress_frame_f>_exported_function(
        library, path, "LZ4F_compressFrame")
    lz4f_compress_frame_bound = <lz4f_compress_frame_bound_f>_exported_function(
        library, path, "LZ4F_compressFrameBound")
    lz4f_is_error = <lz4f_is_error_f>_exported_function(library, path, "LZ4F_isError")
    lz4f_error_name = <lz4f_error_name_f>_exported_function(library, path, "LZ4F_getErrorName")
    return 0


cdef void *_cffi_function(object ffi, object lib, str name) except NULL:
    try:
        address = int(ffi.cast("uintptr_t", ffi.addressof(lib, name)))
    except AttributeError as exc:
        raise ImportError(f"zstandard's cffi backend has no {name}(), which netkafka needs "
                          f"(install zstandard>=0.22)") from exc
    return <void *><uintptr_t>address


cdef int _resolve_zstd() except -1:
    global zstd_create_cctx, zstd_free_cctx, zstd_compress_cctx, zstd_compress_bound
    global zstd_is_error, zstd_error_name, ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL
    try:
        from zstandard import backend_cffi
    except ImportError as exc:
        raise ImportError(f"netkafka reaches libzstd through zstandard's cffi backend, "
                          f"which does not load ({exc}); install zstandard>=0.22 and cffi") from exc
    ffi, lib = backend_cffi.ffi, backend_cffi.lib
    zstd_create_cctx = <zstd_create_cctx_f>_cffi_function(ffi, lib, "ZSTD_createCCtx")
    zstd_free_cctx = <zstd_free_cctx_f>_cffi_function(ffi, lib, "ZSTD_freeCCtx")
    zstd_compress_cctx = <zstd_compress_cctx_f>_cffi_function(ffi, lib, "ZSTD_compressCCtx")
    zstd_compress_bound = <zstd_compress_bound_f>_cffi_function(ffi, lib, "ZSTD_compressBound")
    zstd_is_error = <zstd_is_error_f>_cffi_function(ffi, lib, "ZSTD_isError")
    zstd_error_name = <zstd_error_name_f>_cffi_function(ffi, lib, "ZSTD_getErrorName")
    ZSTD_MIN_LEVEL = (<zstd_level_f>_cffi_function(ffi, lib, "ZSTD_minCLevel"))()
    ZSTD_MAX_LEVEL = (<zstd_level_f>_cffi_function(ffi, lib, "ZSTD_maxCLevel"))()
    return 0


# libzstd's level range (negative levels are its faster modes); set by _resolve_zstd.
ZSTD_MIN_LEVEL = ZSTD_MAX_LEVEL = None
_resolve_lz4()
_resolve_zstd()


def codec_id(codec):
    """The Kafka codec id (the attributes' codec bits) of a codec.

    Args:
        codec: None, a name from CODEC_NAMES ("none", "gzip", "snappy", "lz4",
            "zstd") or an id 0-4.

    Raises:
        ValueError: naming the codec and the ones allowed.
    """
    if codec is None:
        return CODEC_NONE
    if isinstance(codec, str) and codec in CODEC_NAMES:
        return CODEC_NAMES.index(codec)
    if isinstance(codec, int) and not isinstance(codec, bool) and CODEC_NONE <= codec <= CODEC_ZSTD:
        return codec
    raise ValueError(f"unknown compression codec {codec!r}: expected None, one of "
                     f"{', '.join(CODEC_NAMES)}, or a codec id 0-4")


def checked_level(codec, level, setting=None):
    """The level a Compressor of `codec` runs at, from a Java-style `level` (None: the
    codec's default).

    Args:
        codec: a codec id 0-4.
        level: an int in the codec's range (see the module's docstring), or None.
        setting: the setting `level` came from, named in the errors.

    Raises:
        ValueError: a level out of the codec's range (naming it), or one for a codec
            without levels.
        TypeError: a level that is not an int.
    """
    name = CODEC_NAMES[codec]
    given = f"{setting}={level!r}" if setting else f"level={level!r}"
    if codec == CODEC_NONE or codec == CODEC_SNAPPY:
        if level is not None:
            raise ValueError(f"codec {name} has no compression level; got {given}, pass None")
        return 0
    if codec == CODEC_GZIP:
        lowest, highest, default = GZIP_MIN_LEVEL, GZIP_MAX_LEVEL, GZIP_DEFAULT_LEVEL
        allowed = f"-1 (zlib's default) or {lowest} to {highest}"
    elif codec == CODEC_LZ4:
        lowest, highest, default = LZ4_MIN_LEVEL, LZ4_MAX_LEVEL, LZ4_DEFAULT_LEVEL
        allowed = f"{lowest} to {highest}"
    else:
        lowest, highest, default = ZSTD_MIN_LEVEL, ZSTD_MAX_LEVEL, ZSTD_DEFAULT_LEVEL
        allowed = f"{lowest} to {highest}"
    if level is None:
        return default
    if not isinstance(level, int) or isinstance(level, bool):
        raise TypeError(f"compression level must be an int or None, not {type(level).__name__} "
                        f"({given})")
    if not (lowest <= level <= highest or level == default):
        raise ValueError(f"{name} level {level} is out of range ({given}): expected {allowed} "
                         f"as the Java client's compression.{name}.level, or None for the "
                         f"default {default}")
    return level


cdef inline int _lz4_frame_level(int level) noexcept nogil:
    # The frame API's level for a Java lz4 level (see the module's docstring).
    if level == LZ4_DEFAULT_LEVEL:
        return 0
    if level < LZ4_HC_MIN_LEVEL:
        return LZ4_HC_MIN_LEVEL
    if level > LZ4_HC_MAX_LEVEL:
        return LZ4_HC_MAX_LEVEL
    return level


cdef z_stream *_new_gzip_stream(int level) except NULL:
    # Zeroed: zalloc, zfree and opaque NULL make zlib use malloc and free.
    cdef z_stream *stream = <z_stream *>calloc(1, sizeof(z_stream))
    if stream == NULL:
        raise MemoryError("cannot allocate a zlib stream")
    cdef int rc = deflateInit2(stream, level, Z_DEFLATED, GZIP_WINDOW_BITS, GZIP_MEM_LEVEL,
                               Z_DEFAULT_STRATEGY)
    if rc != Z_OK:
        free(stream)
        if rc == Z_MEM_ERROR:
            raise MemoryError("cannot allocate zlib's deflate state")
        raise CompressionError(f"zlib's deflateInit2 failed with code {rc}")
    return stream


cdef void _lz4_preferences(LZ4FramePreferences *preferences, int level) noexcept nogil:
    # Zero is: no checksums, no content size, no dictionary, a plain frame.
    memset(preferences, 0, sizeof(LZ4FramePreferences))
    preferences.frame_info.block_size_id = LZ4F_MAX64KB
    preferences.frame_info.block_mode = LZ4F_BLOCK_INDEPENDENT
    preferences.compression_level = _lz4_frame_level(level)


cdef Py_ssize_t _gzip_into(z_stream *stream, const unsigned char *src, Py_ssize_t n,
                           unsigned char *dst, Py_ssize_t capacity,
                           const char **error) noexcept nogil:
    cdef Py_ssize_t written
    stream.next_in = <unsigned char *>src
    stream.avail_in = <unsigned int>n
    stream.next_out = dst
    # The bound of the largest input is below 4 GiB; a larger buffer is used in part.
    stream.avail_out = <unsigned int>capacity if capacity < UINT_MAX else UINT_MAX
    if deflate(stream, Z_FINISH) == Z_STREAM_END:
        written = <Py_ssize_t>stream.total_out
    else:
        # capacity >= deflateBound() guarantees Z_STREAM_END: this is zlib failing.
        error[0] = stream.msg
        if error[0] == NULL:
            error[0] = b"deflate did not finish the stream"
        written = -1
    # Fresh again at once: a finished stream also gives deflateBound() a wrong
    # answer (it no longer counts the gzip wrapper).
    deflateReset(stream)
    return written


cdef Py_ssize_t _lz4_into(int level, const unsigned char *src, Py_ssize_t n,
                          unsigned char *dst, Py_ssize_t capacity,
                          const char **error) noexcept nogil:
    cdef LZ4FramePreferences preferences
    _lz4_preferences(&preferences, level)
    cdef size_t result = lz4f_compress_frame(dst, <size_t>capacity, src, <size_t>n, &preferences)
    if lz4f_is_error(result):
        error[0] = lz4f_error_name(result)
        return -1
    return <Py_ssize_t>result


cdef Py_ssize_t _zstd_into(void *cctx, int level, const unsigned char *src, Py_ssize_t n,
                           unsigned char *dst, Py_ssize_t capacity,
                           const char **error) noexcept nogil:
    cdef size_t result = zstd_compress_cctx(cctx, dst, <size_t>capacity, src, <size_t>n, level)
    if zstd_is_error(result):
        error[0] = zstd_error_name(result)
        return -1
    return <Py_ssize_t>result


cdef Py_ssize_t _snappy_into(const unsigned char *src, Py_ssize_t n,
                             unsigned char *dst, Py_ssize_t capacity) except -1:
    # memoryviews over the caller's memory: cramjam takes buffer objects, and it
    # releases the GIL itself while it compresses.
    cdef unsigned char empty = 0
    if n == 0:
        src = &empty    # a NULL pointer would not make a valid buffer, even an empty one
    source = PyMemoryView_FromMemory(<char *>src, n, PyBUF_READ)
    target = PyMemoryView_FromMemory(<char *>dst, capacity, PyBUF_WRITE)
    try:
        return _snappy_compress_raw_into(source, target)
    except cramjam.CompressionError as exc:
        raise CompressionError(f"snappy compression of {n} bytes failed: {exc}") from exc
    finally:
        # They point into the caller's memory: neither may outlive this call.
        source.release()
        target.release()


cdef inline void _acquire(PyThread_type_lock lock) noexcept:
    # Free: take it keeping the GIL.  Held: its holder may be compressing without the
    # GIL; wait for it without the GIL too, or neither thread could go on.
    if not PyThread_acquire_lock(lock, NOWAIT_LOCK):
        with nogil:
            PyThread_acquire_lock(lock, WAIT_LOCK)


@cython.final
cdef class Compressor:
    """Compresses records sections with one codec and level, into callers' buffers.

    Args:
        codec: None, "none", "gzip", "snappy", "lz4", "zstd", or a codec id 0-4.
        level: the codec's level as the Java client's compression.<codec>.level takes
            it, None for its default: gzip -1 (zlib's default, 6) or 1-9; lz4 1-17,
            default 9 (fast mode; the others are HC modes, an order of magnitude
            slower, above 12 as 12); zstd -131072 to 22 (ZSTD_MIN_LEVEL to
            ZSTD_MAX_LEVEL), default 3; none and snappy take None only.

    Raises:
        ValueError: an unknown codec, or a level out of the codec's range.
        TypeError: a level that is not an int.

    One Compressor may be shared by threads: their compressions run one at a time.
    For "none", compress_into copies (callers skip it for uncompressed batches).
    """

    def __cinit__(self, codec, level=None):
        self.codec = codec_id(codec)
        self.level = checked_level(self.codec, level)
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError("cannot allocate a lock")
        if self.codec == CODEC_GZIP:
            self._context = _new_gzip_stream(self.level)
        elif self.codec == CODEC_ZSTD:
            self._context = zstd_create_cctx()
            if self._context == NULL:
                raise MemoryError("cannot allocate a zstd compression context")

    def __dealloc__(self):
        if self._context != NULL:
            if self.codec == CODEC_GZIP:
                deflateEnd(<z_stream *>self._context)
                free(self._context)
            else:
                zstd_free_cctx(self._context)
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    def __repr__(self):
        return f"Compressor({CODEC_NAMES[self.codec]!r}, level={self.level})"

    cpdef Py_ssize_t max_compressed_size(self, Py_ssize_t n) except -1:
        """The most bytes compressing `n` bytes may produce; size the output by it.

        Raises:
            ValueError: `n` is negative or above 2**31 - 1.
        """
        cdef LZ4FramePreferences preferences
        cdef Py_ssize_t bound
        if n < 0 or n > MAX_INPUT_BYTES:
            raise ValueError(f"cannot compress {n} bytes: records sections are 0 to "
                             f"{MAX_INPUT_BYTES} bytes (a batch's length is an int32)")
        if self.codec == CODEC_GZIP:
            # deflateBound reads the stream's state (fresh between compressions): not
            # while another thread deflates with it.
            _acquire(self._lock)
            bound = <Py_ssize_t>deflateBound(<z_stream *>self._context, <unsigned long>n)
            PyThread_release_lock(self._lock)
            return bound
        if self.codec == CODEC_SNAPPY:
            # Snappy's MaxCompressedLength: literals cost at most one tag byte per six.
            return 32 + n + n // 6
        if self.codec == CODEC_LZ4:
            _lz4_preferences(&preferences, self.level)
            return <Py_ssize_t>lz4f_compress_frame_bound(<size_t>n, &preferences)
        if self.codec == CODEC_ZSTD:
            return <Py_ssize_t>zstd_compress_bound(<size_t>n)
        return n

    cdef Py_ssize_t compress_into(self, const unsigned char *src, Py_ssize_t n,
                                  unsigned char *dst, Py_ssize_t capacity) except -1:
        cdef Py_ssize_t bound = self.max_compressed_size(n)
        cdef Py_ssize_t written
        cdef const char *error = NULL
        if capacity < bound:
            raise ValueError(f"an output buffer of {capacity} bytes is too small: "
                             f"{CODEC_NAMES[self.codec]} needs up to {bound} bytes for {n} bytes")
        if n and <uintptr_t>src < <uintptr_t>dst + <uintptr_t>capacity \
                and <uintptr_t>dst < <uintptr_t>src + <uintptr_t>n:
            raise ValueError("the output buffer overlaps the input")
        if self.codec == CODEC_SNAPPY:
            return _snappy_into(src, n, dst, capacity)
        _acquire(self._lock)
        if n >= GIL_RELEASE_MIN_BYTES:
            with nogil:
                written = self._compress_locked(src, n, dst, capacity, &error)
        else:
            written = self._compress_locked(src, n, dst, capacity, &error)
        PyThread_release_lock(self._lock)
        if written < 0:
            raise CompressionError(f"{CODEC_NAMES[self.codec]} compression of {n} bytes failed: "
                                   f"{(<bytes>error).decode(errors='replace')}")
        return written

    cdef Py_ssize_t _compress_locked(self, const unsigned char *src, Py_ssize_t n,
                                     unsigned char *dst, Py_ssize_t capacity,
                                     const char **error) noexcept nogil:
        # The caller holds _lock and checked capacity >= max_compressed_size(n).
        if self.codec == CODEC_GZIP:
            return _gzip_into(<z_stream *>self._context, src, n, dst, capacity, error)
        if self.codec == CODEC_LZ4:
            return _lz4_into(self.level, src, n, dst, capacity, error)
        if self.codec == CODEC_ZSTD:
            return _zstd_into(self._context, self.level, src, n, dst, capacity, error)
        memcpy(dst, src, <size_t>n)
        return n

    def _compress_buffers_into(self, src, dst):
        """compress_into(src, dst) for buffer-protocol objects: compresses all of `src`
        into the writable `dst` (at least max_compressed_size(len(src)) bytes) and
        returns the compressed length."""
        cdef Py_buffer source
        cdef Py_buffer target
        PyObject_GetBuffer(src, &source, PyBUF_SIMPLE)
        try:
            PyObject_GetBuffer(dst, &target, PyBUF_SIMPLE | PyBUF_WRITABLE)
            try:
                return self.compress_into(<const unsigned char *>source.buf, source.len,
                                          <unsigned char *>target.buf, target.len)
            finally:
                PyBuffer_Release(&target)
        finally:
            PyBuffer_Release(&source)

    def __getattr__(self, name):
        # Cython keeps the cdef compress_into (raw pointers, for the encoders) out of
        # Python's sight; Python callers get its buffer-protocol twin by the same name.
        if name == "compress_into":
            return self._compress_buffers_into
        raise AttributeError(f"'Compressor' object has no attribute {name!r}")

    def compress(self, data):
        """Compress `data` and return the bytes.  A convenience for tests: it allocates."""
        out = bytearray(self.max_compressed_size(memoryview(data).nbytes))
        del out[self._compress_buffers_into(data, out):]
        return bytes(out)
