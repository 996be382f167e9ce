"""Coverage-guided fuzz targets (atheris, libFuzzer underneath) for the native code that
reads what a broker sends and the encoder that takes what a caller hands it.

    responses  a response body for one decoder: byte 0 the API key (one netkafka
               decodes, else picked by index), byte 1 the version (folded into the
               API's range), the rest what follows the correlation id.  Only a
               decoded value or ProtocolError may come out.
    reader     protocol/_reader.pyx's Reader alone: byte 0 says how many of the next
               bytes are operations (int8 ... tagged_field_values), each run in turn
               over the rest.  Only values or ProtocolError.
    records    the RecordBatch v2 builder fed hostile records: keys, values and
               headers of odd sizes and types (bytes-likes, memoryviews of other
               item sizes, str, int, None, bad pairs, non-UTF-8 and surrogate header
               keys), odd timestamps, small batch sizes, every codec, one by one or
               in bulk (append_many, send_batch's path).  A refused record may raise
               TypeError, ValueError or a KafkaError only; what was appended is read
               back from the sealed batch by kafka-python's decoder (an independent
               one) and must be exactly what went in.

The seeds (tests/fuzz/seeds/responses) are a real broker's answers, captured by
tests/fuzz/capture_seeds.py (make fuzz-seeds); reader and records start from them too
and from nothing.

Run over the build of tools/fuzz_build.sh (AddressSanitizer, UBSan, libFuzzer's
coverage hooks in the native modules); the Makefile's fuzz target does, with the
variables that build writes to FUZZ_DIR/env:

    env $(cat .fuzz/env) .venv/bin/python tests/fuzz/targets.py records \\
        -runs=10000000 .fuzz/corpus/records tests/fuzz/seeds/responses

Measured (make fuzz FUZZ_ARGS=-max_total_time=360, 2 cores shared with other work, the
run getting about 38 % of one core; no finding): responses 462 755 executions, 1 281/s,
2 136 edges; reader 890 788, 2 467/s, 1 162 edges; records 104 418, 289/s, 3 495
edges.  10 million each at those rates: about 2.2 h, 1.1 h and 9.6 h.

Anything else than the allowed outcomes -- an exception of another type, a record
read back different, a sanitizer report -- stops the run with the input saved as
crash-*.  Python code under netkafka is instrumented by atheris.instrument_imports,
the targets' own input shaping by atheris.instrument_func (so that the choices of
types and forms count as coverage), the native modules by clang's
-fsanitize=fuzzer-no-link.
"""
import array
import os
import shlex
import sys

import atheris

# kafka-python's decoder, the independent reader of the records target: not
# instrumented (its branches are not what is explored).
from kafka.record.default_records import DefaultRecordBatch

with atheris.instrument_imports(include=["netkafka"]):
    import netkafka
    from netkafka.errors import KafkaError, ProtocolError
    from netkafka.protocol import (
        add_offsets_to_txn, add_partitions_to_txn, api_versions, describe_producers,
        end_txn, find_coordinator, init_producer_id, metadata, produce, sasl_authenticate,
        sasl_handshake, txn_offset_commit,
    )
    from netkafka.protocol._reader import Reader
    from netkafka.protocol.versions import SUPPORTED_VERSIONS
    from netkafka.record._batch import RecordBatchBuilder
    from netkafka.record._pool import BufferPool

# API key -> (decoder, lowest version, highest version)
DECODERS = {}
for _module, _decode in (
        (produce, produce.decode_produce_response),
        (metadata, metadata.decode_metadata_response),
        (api_versions, api_versions.decode_api_versions_response),
        (init_producer_id, init_producer_id.decode_init_producer_id_response),
        (find_coordinator, find_coordinator.decode_find_coordinator_response),
        (sasl_handshake, sasl_handshake.decode_sasl_handshake_response),
        (sasl_authenticate, sasl_authenticate.decode_sasl_authenticate_response),
        (add_partitions_to_txn, add_partitions_to_txn.decode_add_partitions_to_txn_response),
        (add_offsets_to_txn, add_offsets_to_txn.decode_add_offsets_to_txn_response),
        (txn_offset_commit, txn_offset_commit.decode_txn_offset_commit_response),
        (end_txn, end_txn.decode_end_txn_response),
        (describe_producers, describe_producers.decode_describe_producers_response)):
    _low, _high = SUPPORTED_VERSIONS.get(_module.API.key, (_module.API.min_version,
                                                           _module.API.max_version))
    # Produce decodes the legacy versions too (api_version pins them).
    DECODERS[int(_module.API.key)] = (_decode, min(_low, _module.API.min_version),
                                      max(_high, _module.API.max_version))
_KEYS = sorted(DECODERS)


@atheris.instrument_func
def responses(data):
    if len(data) < 2:
        return
    key = data[0] if data[0] in DECODERS else _KEYS[data[0] % len(_KEYS)]
    decode, low, high = DECODERS[key]
    version = low + data[1] % (high - low + 1)
    try:
        decode(data[2:], version)
    except ProtocolError:
        pass


_READS = (
    lambda r: r.int8(), lambda r: r.boolean(), lambda r: r.int16(), lambda r: r.int32(),
    lambda r: r.int64(), lambda r: r.uvarint(), lambda r: r.uuid(),
    lambda r: r.nullable_string(), lambda r: r.string(), lambda r: r.bytes_field(),
    lambda r: r.array_length(1), lambda r: r.array_length(12),
    lambda r: r.required_array_length(4, "things"), lambda r: r.int32_array(),
    lambda r: r.skip_tagged_fields(), lambda r: r.tagged_field_values(),
    lambda r: r.expect_end(),
)


@atheris.instrument_func
def reader(data):
    if len(data) < 2:
        return
    count = min(data[0] >> 1, len(data) - 1)
    reader = Reader(data[1 + count:], bool(data[0] & 1))
    try:
        for op in data[1:1 + count]:
            _READS[op % len(_READS)](reader)
    except ProtocolError:
        pass
    if not 0 <= reader.position <= len(data) - 1 - count or reader.remaining < 0:
        raise AssertionError(f"reader position {reader.position}, remaining {reader.remaining}")


CODECS = (None, "gzip", "snappy", "lz4", "zstd")
_POOL = BufferPool(1 << 16, 1 << 22)
# What a refused record may raise: the builder's documented refusals.
REFUSALS = (TypeError, ValueError, KafkaError)


@atheris.instrument_func
def _blob(fdp, kind):
    """A key, value or header value of some type: mostly bytes-likes, sometimes not."""
    size = fdp.ConsumeIntInRange(0, 2048) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 9)
    raw = fdp.ConsumeBytes(size)
    if kind == 0:
        return raw
    if kind == 1:
        return None
    if kind == 2:
        return bytearray(raw)
    if kind == 3:
        return memoryview(raw)[1:]  # a slice of a view
    if kind == 4:
        # Items of 8 bytes: the record holds the buffer's bytes (or it is refused).
        return memoryview(array.array("q", raw[:len(raw) // 8 * 8]))
    if kind == 5:
        return memoryview(raw)[::2]  # not contiguous
    if kind == 6:
        return raw.decode("latin-1")  # a str: refused
    return len(raw)  # an int: refused


@atheris.instrument_func
def _header_key(fdp):
    kind = fdp.ConsumeIntInRange(0, 5)
    raw = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 16))
    if kind == 0:
        return raw.decode("utf-8", "replace")
    if kind == 1:
        return raw  # bytes: UTF-8 or refused
    if kind == 2:
        return raw.decode("utf-8", "surrogateescape")  # lone surrogates: refused
    if kind == 3:
        return None
    return raw.decode("latin-1")


@atheris.instrument_func
def _headers(fdp):
    shape = fdp.ConsumeIntInRange(0, 4)
    if shape == 0:
        return None
    pairs = []
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        form = fdp.ConsumeIntInRange(0, 6)
        value = _blob(fdp, fdp.ConsumeIntInRange(0, 7))
        if form == 5:
            pairs.append((_header_key(fdp),))  # not a pair
        elif form == 6:
            pairs.append([_header_key(fdp), value])
        else:
            pairs.append((_header_key(fdp), value))
    return tuple(pairs) if shape == 1 else pairs if shape != 4 else iter(pairs)


@atheris.instrument_func
def _timestamp(fdp):
    kind = fdp.ConsumeIntInRange(0, 4)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeIntInRange(0, 1 << 45)
    if kind == 2:
        return fdp.ConsumeInt(9)  # any sign, beyond int64
    if kind == 3:
        return True
    return float(fdp.ConsumeIntInRange(0, 1 << 20))


def _as_bytes(blob):
    return None if blob is None else bytes(blob)


def _expected_headers(headers):
    return [(k.decode("utf-8") if isinstance(k, bytes) else k, _as_bytes(v))
            for k, v in headers or ()]


@atheris.instrument_func
def records(data):
    fdp = atheris.FuzzedDataProvider(data)
    codec = CODECS[fdp.ConsumeIntInRange(0, len(CODECS) - 1)]
    batch_size = fdp.ConsumeIntInRange(128, 1 << 16)
    max_request_size = fdp.ConsumeIntInRange(batch_size, 2 * batch_size)
    buffer = _POOL.try_acquire()
    builder = RecordBatchBuilder(buffer, batch_size, max_request_size, codec)
    appended = []  # (key, value, headers, timestamp or None) as they should read back
    try:
        for _ in range(fdp.ConsumeIntInRange(0, 12)):
            if fdp.ConsumeIntInRange(0, 3) == 0:
                _append_bulk(fdp, builder, appended)
                continue
            key = _blob(fdp, fdp.ConsumeIntInRange(0, 7))
            value = _blob(fdp, fdp.ConsumeIntInRange(0, 7))
            headers = _headers(fdp)
            timestamp = _timestamp(fdp)
            try:
                delta = builder.append(key, value, headers, timestamp)
            except REFUSALS:
                if builder.record_count != len(appended):
                    raise AssertionError("a refused record was counted in the batch")
                continue
            if delta >= 0:
                if delta != len(appended):
                    raise AssertionError(f"offset delta {delta}, {len(appended)} appended")
                appended.append((_as_bytes(key), _as_bytes(value), _expected_headers(headers),
                                 timestamp))
        if not appended:
            return
        _check_read_back(bytes(builder.seal()), appended)
    finally:
        builder.mark_failed()  # done with: its buffer goes back to the pool
        builder.release()


@atheris.instrument_func
def _append_bulk(fdp, builder, appended):
    """append_many: the rows of send_batch(), a column per argument."""
    count = fdp.ConsumeIntInRange(0, 8)
    kind = fdp.ConsumeIntInRange(0, 7)
    values = [_blob(fdp, kind if fdp.ConsumeBool() else 0) for _ in range(count)]
    keys = None if fdp.ConsumeBool() else [_blob(fdp, 0) for _ in range(count)]
    headers = None
    if fdp.ConsumeBool():
        headers = [_headers(fdp) for _ in range(count)]
    elif fdp.ConsumeBool():
        headers = {_header_key(fdp): [_blob(fdp, fdp.ConsumeIntInRange(0, 2))
                                      for _ in range(count)]}
    start = fdp.ConsumeIntInRange(0, count)
    try:
        done = builder.append_many(values, keys, headers, None, start)
    except REFUSALS:
        # A bad column: nothing; a bad element: the rows before it are in.
        done = builder.record_count - len(appended)
    if not 0 <= done <= count - start or builder.record_count != len(appended) + done:
        raise AssertionError(f"append_many from {start} of {count}: {done} appended, "
                             f"{builder.record_count - len(appended)} counted")
    for i in range(start, start + done):
        if isinstance(headers, dict):
            (name, column), = headers.items()
            row_headers = [(name.decode("utf-8") if isinstance(name, bytes) else name,
                            _as_bytes(column[i]))]
        else:
            row_headers = _expected_headers(None if headers is None else headers[i])
        appended.append((_as_bytes(None if keys is None else keys[i]), _as_bytes(values[i]),
                         row_headers, None))


def _check_read_back(batch, appended):
    parsed = DefaultRecordBatch(batch)
    if not parsed.validate_crc():
        raise AssertionError("the sealed batch's CRC does not match")
    got = list(parsed)
    if len(got) != len(appended):
        raise AssertionError(f"{len(got)} records read back, {len(appended)} appended")
    for record, (key, value, headers, timestamp) in zip(got, appended):
        read = (record.key, record.value, [(k, v) for k, v in record.headers])
        if read != (key, value, headers):
            raise AssertionError(f"read back {read!r}, appended {(key, value, headers)!r}")
        if type(timestamp) is int and record.timestamp != timestamp:
            raise AssertionError(f"timestamp {record.timestamp}, appended {timestamp}")


TARGETS = {"responses": responses, "reader": reader, "records": records}


def main(argv):
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: {argv[0]} {'|'.join(TARGETS)} [libFuzzer flags] [corpus dirs]")
    target = TARGETS[argv[1]]
    # Which build is fuzzed: tests/test_fuzz.py checks it is the sanitized one.
    print(f"targets: netkafka from {os.path.dirname(netkafka.__file__)}", file=sys.stderr)
    # libFuzzer's -jobs / -fork start more fuzzers by running argv[0] through the
    # shell: make that this interpreter, this script and this target.
    command = " ".join(shlex.quote(word)
                       for word in (sys.executable, os.path.abspath(argv[0]), argv[1]))
    atheris.Setup([command] + argv[2:], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
