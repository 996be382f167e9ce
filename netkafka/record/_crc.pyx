"""CRC32C and CRC32 of any bytes-like object, for Python callers and tests.

Thin layer over the C kernels in csrc/ (crc32c.h, crc32.h): argument checks, the
buffer protocol, and the GIL released for large inputs. The record encoder calls the
kernels directly from Cython; this module is for everything else.

Every function takes the running CRC (0 to start) and returns the new one, so
crc32c(b, crc32c(a)) == crc32c(a + b); crc32(data) == zlib.crc32(data).
"""
from cpython.buffer cimport (
    PyBUF_FULL_RO,
    PyBuffer_IsContiguous,
    PyBuffer_Release,
    PyObject_CheckBuffer,
    PyObject_GetBuffer,
)
from libc.stdint cimport uint32_t

from netkafka.csrc cimport (
    nk_crc32,
    nk_crc32c,
    nk_crc32c_hw,
    nk_crc32c_hw_available,
    nk_crc32c_portable,
)

__all__ = ["crc32c", "crc32c_portable", "crc32c_hw", "hw_available", "crc32"]

cdef enum:
    # Below this the kernel takes well under a microsecond: releasing and re-taking
    # the GIL would cost more than the other threads could gain.
    GIL_RELEASE_MIN_BYTES = 4096

ctypedef uint32_t (*crc_kernel)(uint32_t crc, const void *data, size_t length) noexcept nogil


cdef uint32_t _start_value(str name, object crc) except? 0:
    if not isinstance(crc, int):
        raise TypeError(f"{name}() crc must be an int, not {type(crc).__name__}")
    if not 0 <= crc <= 0xFFFFFFFF:
        raise ValueError(f"{name}() crc must be in 0..0xFFFFFFFF, got {crc}")
    return <uint32_t>crc


cdef object _checksum(str name, crc_kernel kernel, object data, object crc):
    cdef uint32_t result = _start_value(name, crc)
    cdef Py_buffer view
    if not PyObject_CheckBuffer(data):
        raise TypeError(
            f"{name}() needs a bytes-like object (bytes, bytearray, memoryview, ...), "
            f"not {type(data).__name__}")
    # FULL_RO: any exporter answers it, read-only ones included; contiguity is
    # checked below so that the message says what is wrong.
    PyObject_GetBuffer(data, &view, PyBUF_FULL_RO)
    try:
        if not PyBuffer_IsContiguous(&view, c'C'):
            raise ValueError(
                f"{name}() needs a C-contiguous buffer; this {type(data).__name__} "
                f"is strided (copy it first, e.g. bytes(view))")
        if view.len >= GIL_RELEASE_MIN_BYTES:
            # The exported view pins the memory (a bytearray cannot be resized while
            # exported), so other threads may run meanwhile.
            with nogil:
                result = kernel(result, view.buf, <size_t>view.len)
        else:
            result = kernel(result, view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return result


def crc32c(data, crc=0):
    """CRC32C (Castagnoli) of data, continuing from crc; the fastest kernel this CPU runs.

    Args:
        data: a C-contiguous bytes-like object (bytes, bytearray, memoryview, ...).
        crc: the CRC of the bytes before data (0 to start).

    Raises:
        TypeError: data is not bytes-like, or crc is not an int.
        ValueError: data is not C-contiguous, or crc is outside 0..0xFFFFFFFF.
    """
    return _checksum("crc32c", nk_crc32c, data, crc)


def crc32c_portable(data, crc=0):
    """CRC32C by the table-driven kernel, whatever the CPU; arguments as crc32c()."""
    return _checksum("crc32c_portable", nk_crc32c_portable, data, crc)


def crc32c_hw(data, crc=0):
    """CRC32C by the CRC instructions (SSE4.2 / ARMv8); arguments as crc32c().

    Raises:
        RuntimeError: this CPU has no CRC32C instructions (see hw_available()).
    """
    if not nk_crc32c_hw_available():
        raise RuntimeError(
            "crc32c_hw(): this CPU has no CRC32C instructions (SSE4.2 or ARMv8 CRC); "
            "crc32c() uses the portable kernel instead")
    return _checksum("crc32c_hw", nk_crc32c_hw, data, crc)


def hw_available():
    """True if this CPU runs the hardware CRC32C kernel (crc32c() then uses it)."""
    return nk_crc32c_hw_available() != 0


def crc32(data, crc=0):
    """CRC32 (IEEE, as zlib.crc32) of data, continuing from crc; arguments as crc32c()."""
    return _checksum("crc32", nk_crc32, data, crc)
