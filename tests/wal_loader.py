"""A producer at steady load until it is killed, for tests/test_wal_kill.py.

    python tests/wal_loader.py BOOTSTRAP TOPIC WAL_DIR FSYNC PROGRESS_FILE RUN [STOP]

Opens a Producer on WAL_DIR (which replays what the previous run left), then sends
records valued b"<RUN>:<i>" for i = 0, 1, ... -- odd i with a key (one of five),
even i without (sticky partitions) -- with acks='all', and after each send() returns
stores i + 1 in PROGRESS_FILE (a u64 in a shared mapping: no syscall, so a SIGKILL
can land anywhere).  With STOP, it sends that many records, flushes, closes and
exits: the last run, which leaves nothing in the WAL.
"""
import mmap
import struct
import sys
import time

PROGRESS = struct.Struct("<QQ")  # 1 once the producer is open (replay done) | sends returned
RECORDS_PER_PAUSE = 200
PAUSE_S = 0.002  # about 50k records/s at most: a load, not a flood to read back


def main(bootstrap, topic, wal_dir, fsync, progress_path, run, stop=None):
    from netkafka import Producer

    with open(progress_path, "r+b") as f:
        progress = mmap.mmap(f.fileno(), PROGRESS.size)
    producer = Producer(bootstrap_servers=bootstrap, wal_dir=wal_dir, wal_fsync=fsync,
                        linger_ms=2, batch_size=4096, acks="all")
    struct.pack_into("<Q", progress, 0, 1)
    i = 0
    while stop is None or i < int(stop):
        producer.send(topic, b"%s:%d" % (run.encode(), i),
                      key=b"k%d" % (i % 5) if i % 2 else None)
        i += 1
        struct.pack_into("<Q", progress, 8, i)
        if i % RECORDS_PER_PAUSE == 0:
            time.sleep(PAUSE_S)
    producer.flush(120)
    producer.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
