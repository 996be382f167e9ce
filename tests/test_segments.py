"""netkafka.testing.segments: batch headers read from log segment files.

The files here are written by the reference encoder (tests/reference_encoder.py), laid
out as a broker's log directory; test_producer.py reads a real broker's."""
import pytest

from netkafka.testing.segments import stored_batches
from reference_encoder import encode_batch

RECORDS = [(None, b"value-%d" % i, [], 1_700_000_000_000 + i) for i in range(5)]


def write_segment(data_dir, topic, partition, *batches):
    directory = data_dir / f"{topic}-{partition}"
    directory.mkdir(parents=True)
    (directory / "00000000000000000000.log").write_bytes(b"".join(batches))


def test_every_batch_of_every_partition_in_order(tmp_path):
    plain, lz4 = encode_batch(RECORDS), encode_batch(RECORDS[:2], attributes=3)
    write_segment(tmp_path, "t", 0, plain, lz4)
    write_segment(tmp_path, "t", 1, lz4)
    write_segment(tmp_path, "t-other", 0, plain)  # another topic, though its name starts alike
    batches = stored_batches(tmp_path, "t")
    assert [(b.partition, b.record_count, b.codec, b.size_bytes) for b in batches] == [
        (0, 5, 0, len(plain)), (0, 2, 3, len(lz4)), (1, 2, 3, len(lz4))]
    assert [b.partition for b in stored_batches(tmp_path, "t", 1)] == [1]


@pytest.mark.parametrize("cut", [30, 80])
def test_a_batch_cut_short_is_named(tmp_path, cut):
    batch = encode_batch(RECORDS)
    write_segment(tmp_path, "t", 0, batch, batch[:cut])
    with pytest.raises(ValueError, match=rf"t-0/00000000000000000000\.log: a batch .*at byte {len(batch)}"):
        stored_batches(tmp_path, "t")


def test_a_batch_not_v2_is_refused(tmp_path):
    batch = bytearray(encode_batch(RECORDS))
    batch[16] = 1
    write_segment(tmp_path, "t", 0, bytes(batch))
    with pytest.raises(ValueError, match="magic 1 at byte 0; only v2 batches are read"):
        stored_batches(tmp_path, "t")
