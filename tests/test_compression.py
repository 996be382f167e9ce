"""Compression into callers' buffers, each codec's output read by an independent decoder.

The decoders are other packages' (the stdlib's gzip, cramjam's raw snappy, the lz4
package's frame reader, zstandard's decompressor), so a framing mistake in netkafka
cannot hide behind a matching mistake in a netkafka decoder.  The Kafka consumers'
view of whole batches is tested with the record encoder.
"""
import gzip
import random
import threading
import time

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from netkafka.record import _compression
from netkafka.record._compression import CODEC_NAMES, Compressor, codec_id

CODECS = CODEC_NAMES  # in codec id order: the table test_codec_id checks

DECODERS = {
    "none": bytes,
    "gzip": gzip.decompress,
    "snappy": lambda data: bytes(cramjam.snappy.decompress_raw(data)),
    "lz4": lz4.frame.decompress,
    "zstd": lambda data: zstandard.ZstdDecompressor().decompress(data),
}

# Every level each codec accepts (the Java client's ranges), for hypothesis to draw from.
LEVELS = {
    "none": st.none(),
    "snappy": st.none(),
    "gzip": st.one_of(st.just(-1), st.integers(1, 9)),
    "lz4": st.integers(1, 17),
    "zstd": st.integers(_compression.ZSTD_MIN_LEVEL, _compression.ZSTD_MAX_LEVEL),
}

MIB = 1 << 20


def text_like(size_bytes, seed=7):
    """Compressible bytes, JSON-like lines of words and numbers."""
    rnd = random.Random(seed)
    words = ("click", "view", "cart", "login", "search", "home", "help", "news")
    out = bytearray()
    while len(out) < size_bytes:
        out += (f'{{"user":"u-{rnd.randrange(10**8):08d}","event":"{rnd.choice(words)}",'
                f'"amount":{rnd.randrange(10**5)}}}\n').encode()
    return bytes(out[:size_bytes])


def incompressible(size_bytes, seed=11):
    return random.Random(seed).randbytes(size_bytes)


def compress_checked(compressor, data):
    """Compress into a buffer of exactly the bound with guard bytes behind it; check
    nothing was written past the bound and return the output."""
    bound = compressor.max_compressed_size(len(data))
    guard = b"\xa5" * 64
    buf = bytearray(bound) + guard
    written = compressor.compress_into(data, memoryview(buf)[:bound])
    assert written <= bound
    assert buf[bound:] == guard
    return bytes(buf[:written])


payloads = st.one_of(
    st.binary(max_size=100_000),
    # Repeats: long matches, and inputs crossing the 64 KiB lz4 block and 8 KiB GIL lines.
    st.builds(lambda chunk, times: chunk * times,
              st.binary(min_size=1, max_size=64), st.integers(0, 3000)),
)


@pytest.mark.parametrize("codec", CODECS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_through_an_independent_decoder(codec, data):
    payload = data.draw(payloads, label="payload")
    level = data.draw(LEVELS[codec], label="level")
    compressor = Compressor(codec, level)
    assert DECODERS[codec](compress_checked(compressor, payload)) == payload


EDGE_PAYLOADS = {
    "empty": b"",
    "one-byte": b"x",
    "1MiB-text": text_like(MIB),
    "1MiB-incompressible": incompressible(MIB),
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("name", EDGE_PAYLOADS)
def test_round_trip_edge_sizes(codec, name):
    payload = EDGE_PAYLOADS[name]
    assert DECODERS[codec](compress_checked(Compressor(codec), payload)) == payload


@pytest.mark.parametrize("codec", CODECS[1:])
def test_text_shrinks_and_random_bytes_stay_near_their_size(codec):
    compressor = Compressor(codec)
    assert len(compressor.compress(EDGE_PAYLOADS["1MiB-text"])) < MIB // 2
    assert MIB <= len(compressor.compress(EDGE_PAYLOADS["1MiB-incompressible"])) < MIB * 1.01


@pytest.mark.parametrize("codec,level", [("gzip", -1), ("gzip", 1), ("gzip", 9), ("lz4", 1),
                                         ("lz4", 17), ("zstd", 22), ("zstd", -131072)])
def test_extreme_levels_round_trip(codec, level):
    payload = text_like(200_000)
    assert DECODERS[codec](compress_checked(Compressor(codec, level), payload)) == payload


def test_higher_levels_compress_smaller():
    payload = text_like(MIB)
    for codec, low, high in [("gzip", 1, 9), ("lz4", 9, 10), ("zstd", 1, 12)]:
        assert len(Compressor(codec, high).compress(payload)) < len(Compressor(codec, low).compress(payload))


@pytest.mark.parametrize("level", [9, 12])
def test_lz4_writes_the_frame_kafka_reads(level):
    # Java's reader refuses linked blocks; both Java and librdkafka write 64 KiB
    # independent blocks without checksums or content size.
    payload = text_like(300_000)
    out = Compressor("lz4", level).compress(payload)
    assert out[:4] == b"\x04\x22\x4d\x18"          # frame magic
    assert out[4] == 0x60                           # version 1, independent blocks, no flags
    assert out[5] == 0x40                           # 64 KiB maximum block size
    info = lz4.frame.get_frame_info(out)
    assert info["block_size"] == 64 * 1024
    assert not info["block_linked"]
    assert not info["content_checksum"] and not info["block_checksum"]
    assert info["content_size"] == 0
    assert bytes(cramjam.lz4.decompress(out)) == payload


def test_snappy_writes_a_raw_block_not_xerial_framing():
    payload = text_like(100_000)
    out = Compressor("snappy").compress(payload)
    assert not out.startswith(b"\x82SNAPPY\x00")
    # A raw block opens with the uncompressed length as a varint: 100000 = a0 8d 06.
    assert out[:3] == bytes([0xA0, 0x8D, 0x06])
    assert bytes(cramjam.snappy.decompress_raw(out)) == payload


def test_gzip_writes_a_gzip_stream():
    out = Compressor("gzip").compress(text_like(10_000))
    assert out[:3] == b"\x1f\x8b\x08"               # gzip magic, deflate


def test_zstd_frame_carries_the_content_size():
    # librdkafka sizes its decompression buffer from it.
    payload = text_like(50_000)
    params = zstandard.get_frame_parameters(Compressor("zstd").compress(payload))
    assert params.content_size == len(payload)


@pytest.mark.parametrize("n", [0, 1, 5, 6, 7, 100, 65_536, MIB, 10 * MIB])
def test_snappy_bound_is_cramjams(n):
    # cramjam refuses an output buffer below its own bound, whatever the data.
    assert Compressor("snappy").max_compressed_size(n) == cramjam.snappy.compress_raw_max_len(bytes(n))


@pytest.mark.parametrize("codec", CODECS)
def test_output_below_the_bound_raises_and_writes_nothing(codec):
    compressor = Compressor(codec)
    payload = text_like(10_000)
    bound = compressor.max_compressed_size(len(payload))
    buf = bytearray(b"\xa5" * (bound + 64))
    with pytest.raises(ValueError, match=rf"{bound - 1} bytes is too small.*{bound} bytes"):
        compressor.compress_into(payload, memoryview(buf)[:bound - 1])
    assert buf == b"\xa5" * (bound + 64)


@pytest.mark.parametrize("codec", CODECS)
def test_output_overlapping_the_input_raises(codec):
    compressor = Compressor(codec)
    buf = bytearray(text_like(1000)) + bytearray(compressor.max_compressed_size(1000) + 10)
    view = memoryview(buf)
    with pytest.raises(ValueError, match="overlaps"):
        compressor.compress_into(view[:1000], view[500:])


def test_read_only_output_raises():
    with pytest.raises(BufferError):
        Compressor("zstd").compress_into(b"abc", bytes(100))


@pytest.mark.parametrize("n", [-1, 2**31, 2**40])
def test_size_out_of_range_raises(n):
    with pytest.raises(ValueError, match=rf"cannot compress {n} bytes"):
        Compressor("gzip").max_compressed_size(n)


@pytest.mark.parametrize("codec,expected", [
    (None, 0), ("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3), ("zstd", 4), (0, 0), (4, 4),
])
def test_codec_id(codec, expected):
    assert codec_id(codec) == expected
    assert Compressor(codec).codec == expected


@pytest.mark.parametrize("codec", ["GZIP", "gzip2", "lzo", "", b"gzip", 5, -1, True, 3.0])
def test_unknown_codec_raises_value_error_listing_the_codecs(codec):
    with pytest.raises(ValueError, match=r"unknown compression codec .*none, gzip, snappy, lz4, zstd"):
        Compressor(codec)


GZIP_RANGE = r"-1 \(zlib's default\) or 1 to 9"


@pytest.mark.parametrize("codec,level,allowed", [
    ("gzip", 10, GZIP_RANGE), ("gzip", 0, GZIP_RANGE), ("gzip", -2, GZIP_RANGE),
    ("lz4", 18, "1 to 17"), ("lz4", 0, "1 to 17"), ("lz4", -1, "1 to 17"),
    ("zstd", 23, "-131072 to 22"), ("zstd", -131073, "-131072 to 22"),
])
def test_level_out_of_range_raises_value_error_naming_the_java_range(codec, level, allowed):
    # The Java client's KIP-390 ranges: a level Java refuses is refused here too.
    expected = (rf"{codec} level {level} is out of range \(level={level}\): expected {allowed} "
                rf"as the Java client's compression.{codec}.level")
    with pytest.raises(ValueError, match=expected):
        Compressor(codec, level)


def lz4_frame_at(payload, frame_level):
    """The lz4 package's own frame of `payload` at liblz4's frame level, in Kafka's layout."""
    return lz4.frame.compress(payload, compression_level=frame_level,
                              block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                              store_size=False)


@pytest.mark.parametrize("java_level,frame_level", [
    (9, 0),                        # Java's default: lz4-java's fast compressor
    (1, 3), (2, 3),                # HC below the frame API's lowest HC level
    (3, 3), (8, 8), (10, 10), (12, 12),
    (13, 12), (17, 12),            # HC above liblz4's maximum, which clamps them
])
def test_lz4_levels_run_as_the_java_client_runs_them(java_level, frame_level):
    payload = text_like(200_000)
    assert Compressor("lz4", java_level).compress(payload) == lz4_frame_at(payload, frame_level)


def test_gzip_minus_one_is_zlibs_default_level():
    payload = text_like(200_000)
    assert Compressor("gzip", -1).compress(payload) == Compressor("gzip", 6).compress(payload)


@pytest.mark.parametrize("codec", ["none", "snappy"])
def test_codecs_without_levels_refuse_one(codec):
    with pytest.raises(ValueError, match=f"codec {codec} has no compression level"):
        Compressor(codec, 1)


@pytest.mark.parametrize("level", ["6", 6.0, True])
def test_level_of_the_wrong_type_raises_type_error(level):
    with pytest.raises(TypeError, match="compression level must be an int"):
        Compressor("gzip", level)


def test_default_levels():
    assert [Compressor(c).level for c in CODECS] == [0, -1, 0, 9, 3]
    assert repr(Compressor("zstd", 7)) == "Compressor('zstd', level=7)"


@pytest.mark.parametrize("codec", CODECS[1:])
def test_one_compressor_shared_by_threads(codec):
    # gzip and zstd keep a context per Compressor: concurrent use must serialise on it.
    compressor = Compressor(codec)
    payloads = [text_like(300_000, seed=s) for s in range(4)]
    failures = []

    def work(payload):
        for _ in range(5):
            if DECODERS[codec](compressor.compress(payload)) != payload:
                failures.append(codec)

    threads = [threading.Thread(target=work, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


@pytest.mark.parametrize("codec,level", [("gzip", 9), ("lz4", 12), ("zstd", 12)])
def test_compression_releases_the_gil(codec, level):
    # A thread that needs the GIL every millisecond stamps the time; if compress_into
    # kept the GIL, no stamp could fall in the middle half of the call.  (snappy is
    # left out: cramjam releases the GIL itself, and too briefly to observe here.)
    payload = text_like(MIB)
    compressor = Compressor(codec, level)
    out = bytearray(compressor.max_compressed_size(len(payload)))
    stamps = []
    stop = threading.Event()

    def stamp():
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0.001)

    stamper = threading.Thread(target=stamp)
    stamper.start()
    try:
        while not stamps:
            time.sleep(0.001)
        start = time.perf_counter()
        compressor.compress_into(payload, out)
        end = time.perf_counter()
    finally:
        stop.set()
        stamper.join()
    quarter = (end - start) / 4
    assert any(start + quarter < s < end - quarter for s in stamps), (
        f"no other thread ran during {end - start:.3f} s of {codec} compression")
