"""A producer at steady load until it is killed, for tests/test_wal_kill.py.

    python tests/wal_loader.py BOOTSTRAP TOPIC WAL_DIR FSYNC PROGRESS_FILE RUN [STOP]

Opens a Producer on WAL_DIR (which replays what the previous run left), then sends
records valued b"<RUN>:<i>" for i = 0, 1, ... -- odd i with a key (one of five),
even i without (sticky partitions) -- with acks='all', and after each send() returns
stores i + 1 in PROGRESS_FILE (tests/kill_progress.py: a u64 in a shared mapping, so
a SIGKILL can land anywhere).  With STOP, it sends that many records, flushes, closes and
exits: the last run, which leaves nothing in the WAL.
"""
import logging
import sys
import time

import kill_progress

# PROGRESS_FILE's counters: 1 once the producer is open (replay done), and the sends
# that returned.
RECORDS_PER_PAUSE = 200
PAUSE_S = 0.002  # about 50k records/s at most: a load, not a flood to read back


def main(bootstrap, topic, wal_dir, fsync, progress_path, run, stop=None):
    from netkafka import Producer

    # What replay and the producer said, for the test to show when a check fails.
    logging.basicConfig(filename=f"{progress_path}.{run}.log", level=logging.INFO,
                        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("netkafka.producer.replay").setLevel(logging.DEBUG)

    progress = kill_progress.Counters(progress_path)
    producer = Producer(bootstrap_servers=bootstrap, wal_dir=wal_dir, wal_fsync=fsync,
                        linger_ms=2, batch_size=4096, acks="all", on_replay=_log_replayed)
    progress[0] = 1
    i = 0
    while stop is None or i < int(stop):
        value = b"%s:%d" % (run.encode(), i)
        producer.send(topic, value, key=b"k%d" % (i % 5) if i % 2 else None, context=value)
        i += 1
        progress[1] = i
        if i % RECORDS_PER_PAUSE == 0:
            time.sleep(PAUSE_S)
    producer.flush(120)
    logging.info("replay: %s", producer.replay(0))
    producer.close()


def _log_replayed(context, outcome):
    """Each replayed record's fate, by its value (which it carries as its context)."""
    logging.info("replayed %s: %s", context.decode(), outcome)


if __name__ == "__main__":
    main(*sys.argv[1:])
