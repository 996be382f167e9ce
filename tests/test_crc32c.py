"""CRC32C and CRC32 (netkafka.record._crc over csrc/crc32c.c, csrc/crc32.c).

Oracles are independent of our code: the `crc32c` package, zlib, and published
check values. Each kernel (the dispatching one, portable, hardware) is compared on
lengths that cross every internal boundary of the kernels and on every alignment.
"""
import array
import os
import random
import sys
import threading
import zlib

import crc32c as crc32c_package
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netkafka.record import _crc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

requires_hw = pytest.mark.skipif(not _crc.hw_available(), reason="no CRC32C instructions")

CRC32C_KERNELS = [
    pytest.param(_crc.crc32c, id="dispatch"),
    pytest.param(_crc.crc32c_portable, id="portable"),
    pytest.param(_crc.crc32c_hw, id="hw", marks=requires_hw),
]

# Lengths around the kernels' internal boundaries (csrc/crc32c.c): 8-byte words and
# their 4-, 2- and 1-byte tails (every length up to 100), the three streams' 72-byte
# start and each stream's growth by a word at every 24 bytes (every length up to 400),
# the three-stream short (3 x 256) and long (3 x 8192) rounds of the CRC-only kernel,
# the fused kernel's 1024-byte threshold and its 232-byte passes, and the 4096-byte GIL
# threshold.
BOUNDARIES = [8, 72, 3 * 64, 2 * 3 * 64, 768, 1024, 1024 + 232, 1024 + 3 * 232, 4096,
              3 * 8192, 2 * 3 * 8192]
EDGE_LENGTHS = sorted(
    {n + d for n in BOUNDARIES for d in (-9, -8, -1, 0, 1, 7, 8, 9)} | set(range(0, 401))
)

# The largest alignment tried: CRC loads go word- and lane-sized.
MAX_OFFSET = 16


def random_bytes(rng, n):
    return rng.getrandbits(8 * n).to_bytes(n, "little") if n else b""


@pytest.fixture(scope="module")
def data():
    """70 KiB of seeded random bytes plus MAX_OFFSET of slack for offset slices."""
    return random_bytes(random.Random(20240601), 70000 + MAX_OFFSET)


# ---- published check values ----------------------------------------------------------

@pytest.mark.parametrize("kernel", CRC32C_KERNELS)
@pytest.mark.parametrize(
    "payload, expected",
    [
        (b"", 0x00000000),
        (b"123456789", 0xE3069283),  # the CRC catalogue's check value for CRC-32C
        # iSCSI vectors, RFC 3720 appendix B.4
        (bytes(32), 0x8A9136AA),
        (b"\xff" * 32, 0x62A8AB43),
        (bytes(range(32)), 0x46DD794E),
        (bytes(range(31, -1, -1)), 0x113FDB5C),
    ],
)
def test_crc32c_known_vectors(kernel, payload, expected):
    assert kernel(payload) == expected


def test_crc32_known_vector():
    assert _crc.crc32(b"123456789") == 0xCBF43926
    assert _crc.crc32(b"") == 0


# ---- against the crc32c package and zlib: lengths x alignments -------------------------

@pytest.mark.parametrize("kernel", CRC32C_KERNELS)
def test_crc32c_matches_package_at_edge_lengths_and_all_alignments(kernel, data):
    view = memoryview(data)
    for n in EDGE_LENGTHS:
        for offset in range(MAX_OFFSET):
            chunk = view[offset:offset + n]
            assert kernel(chunk) == crc32c_package.crc32c(chunk), (n, offset)


@pytest.mark.parametrize("kernel", CRC32C_KERNELS)
def test_crc32c_matches_package_at_random_lengths(kernel, data):
    rng = random.Random(7)
    view = memoryview(data)
    for _ in range(300):
        n = rng.randrange(0, 70001)
        offset = rng.randrange(MAX_OFFSET)
        chunk = view[offset:offset + n]
        assert kernel(chunk) == crc32c_package.crc32c(chunk), (n, offset)


def test_crc32_matches_zlib_at_edge_and_random_lengths(data):
    rng = random.Random(11)
    view = memoryview(data)
    lengths = EDGE_LENGTHS + [rng.randrange(0, 70001) for _ in range(200)]
    for n in lengths:
        for offset in (0, 1, 3, 7):
            chunk = view[offset:offset + n]
            assert _crc.crc32(chunk) == zlib.crc32(chunk), (n, offset)


@requires_hw
@settings(max_examples=300, deadline=None)
@given(
    payload=st.binary(max_size=4000)
    | st.tuples(st.integers(0, 70000), st.integers(0, 2**32)).map(
        lambda size_seed: random.Random(size_seed[1]).randbytes(size_seed[0])),
    offset=st.integers(0, MAX_OFFSET - 1),
    crc=st.integers(0, 0xFFFFFFFF),
)
def test_hw_equals_portable(payload, offset, crc):
    # Copy behind `offset` bytes so the kernels see the same bytes at a new alignment.
    chunk = memoryview(bytes(offset) + payload)[offset:]
    assert _crc.crc32c_hw(chunk, crc) == _crc.crc32c_portable(chunk, crc)


# ---- chaining ------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel", CRC32C_KERNELS)
@settings(max_examples=150, deadline=None)
@given(payload=st.binary(max_size=9000), cuts=st.lists(st.integers(0, 9000), max_size=5))
def test_crc32c_chained_equals_one_shot(kernel, payload, cuts):
    crc = 0
    start = 0
    for cut in sorted(min(c, len(payload)) for c in cuts) + [len(payload)]:
        crc = kernel(payload[start:cut], crc)
        start = cut
    assert crc == crc32c_package.crc32c(payload)


@settings(max_examples=150, deadline=None)
@given(payload=st.binary(max_size=9000), cut=st.integers(0, 9000), crc=st.integers(0, 0xFFFFFFFF))
def test_crc32_chains_like_zlib(payload, cut, crc):
    cut = min(cut, len(payload))
    assert _crc.crc32(payload[cut:], _crc.crc32(payload[:cut], crc)) == zlib.crc32(payload, crc)


# ---- accepted buffers ----------------------------------------------------------------------

@pytest.mark.parametrize("kernel", CRC32C_KERNELS)
def test_any_contiguous_buffer_is_checksummed_as_its_bytes(kernel):
    raw = bytes(range(256)) * 40  # 10240 bytes: above the GIL threshold
    expected = crc32c_package.crc32c(raw)
    words = array.array("I")
    words.frombytes(raw)
    for buffer in (
        raw,
        bytearray(raw),
        memoryview(raw),
        memoryview(bytearray(raw)).toreadonly(),
        words,  # 4-byte items: the length in bytes counts, not in items
        memoryview(raw).cast("B", shape=[40, 256]),  # 2-D, C-contiguous
    ):
        assert kernel(buffer) == expected, type(buffer)


def test_non_contiguous_buffer_is_refused_with_a_clear_message():
    strided = memoryview(bytes(100))[::2]
    with pytest.raises(ValueError, match=r"crc32c\(\) needs a C-contiguous buffer"):
        _crc.crc32c(strided)
    with pytest.raises(ValueError, match=r"crc32\(\) needs a C-contiguous buffer"):
        _crc.crc32(strided)


@pytest.mark.parametrize("function", [
    _crc.crc32c, _crc.crc32c_portable, pytest.param(_crc.crc32c_hw, marks=requires_hw), _crc.crc32,
])
@pytest.mark.parametrize("bad", ["123456789", 123, None, 1.5, [1, 2, 3]])
def test_non_buffer_is_refused_with_a_clear_message(function, bad):
    with pytest.raises(TypeError, match=r"needs a bytes-like object .*not " + type(bad).__name__):
        function(bad)


@pytest.mark.parametrize("bad_crc, error", [
    (-1, ValueError), (1 << 32, ValueError), (2 ** 100, ValueError), (1.0, TypeError), ("0", TypeError),
])
def test_bad_starting_crc_is_refused(bad_crc, error):
    with pytest.raises(error, match=r"crc32c\(\) crc must be"):
        _crc.crc32c(b"abc", bad_crc)


def test_largest_starting_crc_is_accepted():
    assert _crc.crc32c(b"", 0xFFFFFFFF) == 0xFFFFFFFF
    assert _crc.crc32c(b"abc", 0xFFFFFFFF) == crc32c_package.crc32c(b"abc", 0xFFFFFFFF)


# ---- threads ------------------------------------------------------------------------------

def test_concurrent_checksums_are_correct(data):
    # Large inputs run without the GIL; results must not depend on interleaving.
    sizes = [100, 5000, 65536, 70000]
    expected = {n: crc32c_package.crc32c(data[:n]) for n in sizes}
    failures = []

    def work(seed):
        rng = random.Random(seed)
        for _ in range(200):
            n = rng.choice(sizes)
            got = _crc.crc32c(data[:n])
            if got != expected[n]:
                failures.append((n, got))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


# ---- generated tables ----------------------------------------------------------------------

def test_committed_tables_are_what_the_generator_writes():
    sys.path.insert(0, os.path.join(REPO, "tools"))
    try:
        import gen_crc_tables
    finally:
        sys.path.pop(0)
    for name, text in gen_crc_tables.generate().items():
        with open(os.path.join(REPO, "csrc", name)) as f:
            assert f.read() == text, f"csrc/{name} differs: rerun tools/gen_crc_tables.py"
