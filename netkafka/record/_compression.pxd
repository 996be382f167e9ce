# Compression of a batch's records into a caller's buffer.  See _compression.pyx for
# the codecs, their wire formats and the libraries behind them.

cimport cython
from cpython.pythread cimport PyThread_type_lock


cdef enum:
    # The codec bits (0-2) of a RecordBatch's attributes, and of a legacy message's.
    CODEC_NONE = 0
    CODEC_GZIP = 1
    CODEC_SNAPPY = 2
    CODEC_LZ4 = 3
    CODEC_ZSTD = 4


@cython.final
cdef class Compressor:
    # Safe to share between threads: compressions through one Compressor take _lock
    # and so run one at a time; codec and level never change after construction.
    cdef readonly int codec             # CODEC_* of this compressor
    cdef readonly int level             # Java-style codec level; 0 for none and snappy (no levels)
    cdef PyThread_type_lock _lock       # guards _context: one compression at a time
    cdef void *_context                 # reusable codec state (_lock): z_stream * for gzip,
                                        # ZSTD_CCtx * for zstd, NULL for the stateless codecs

    # The most bytes compress_into may write for n input bytes: size dst by this.
    cpdef Py_ssize_t max_compressed_size(self, Py_ssize_t n) except -1
    # Compresses src[0:n] into dst[0:capacity]; returns the compressed length; raises on
    # error (capacity below max_compressed_size(n) included), never writing past capacity.
    # Called WITH the GIL held; releases it internally for the codec work when n is large.
    cdef Py_ssize_t compress_into(self, const unsigned char *src, Py_ssize_t n,
                                  unsigned char *dst, Py_ssize_t capacity) except -1
    # The codec work of compress_into, run holding _lock (and maybe not the GIL);
    # returns -1 and sets error on failure.
    cdef Py_ssize_t _compress_locked(self, const unsigned char *src, Py_ssize_t n,
                                     unsigned char *dst, Py_ssize_t capacity,
                                     const char **error) noexcept nogil
