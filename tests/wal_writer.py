"""A process that writes a WriteAheadLog until it is killed, for tests/test_wal.py.

    python tests/wal_writer.py DIRECTORY PROGRESS_FILE FSYNC

It runs a fixed script of operations -- batch k: open it, append RECORDS_PER_BATCH
records, seal it, then mark batch k - LIVE_BATCHES done (a slow batch, one in
SLOW_EVERY, only SLOW_BATCHES later: meanwhile the log moves it forward, so that it
does not pin the segments after it) -- and after each operation
stores how many it has completed in PROGRESS_FILE (tests/kill_progress.py: a u64 in a
shared mapping, so a SIGKILL can land anywhere, inside a WAL append included).  The WAL's
segments are small, so the script rolls over, reclaims and recycles segments all the
time.  expected_state() computes what the log must hold after a number of operations.
"""
import hashlib
import sys

import kill_progress

RECORDS_PER_BATCH = 7
LIVE_BATCHES = 5  # batch k - LIVE_BATCHES is done once batch k is sealed
SLOW_EVERY = 40  # batches k with k % SLOW_EVERY == 1 are slow: done once batch
SLOW_BATCHES = 150  # k + SLOW_BATCHES is sealed (about six segments later)
WAL_OPTIONS = dict(segment_bytes=64 * 1024, max_bytes=1024 * 1024, max_record_bytes=1024,
                   max_context_bytes=64)
TOPIC = "kill-test"
# PROGRESS_FILE's counters: the WAL id of the script's batch 0 (0 until known), and the
# operations completed.


def record(batch, index):
    """Record bytes of 20..700 bytes, each different and checkable."""
    seed = hashlib.sha256(f"{batch}:{index}".encode()).digest()
    return (seed * 22)[:20 + seed[0] * 680 // 255]


def context(batch, index):
    return None if index % 2 else f"ctx {batch}.{index}".encode()


def seal(batch):
    """(producer id, epoch, base sequence, attributes, batch crc, batch bytes) of batch k."""
    return batch * 3 + 1, batch % 7, batch * RECORDS_PER_BATCH, 0, batch * 101 % 2**32, batch * 9


def operations():
    """The script, as (kind, batch, index) tuples: "open", "record", "seal", "done"."""
    batch = 0
    while True:
        yield "open", batch, None
        for index in range(RECORDS_PER_BATCH):
            yield "record", batch, index
        yield "seal", batch, None
        for gone in (batch - LIVE_BATCHES, batch - SLOW_BATCHES):
            if gone >= 0 and (gone % SLOW_EVERY == 1) == (gone == batch - SLOW_BATCHES):
                yield "done", gone, None
        batch += 1


def expected_state(completed):
    """{batch: (records appended, sealed)} of the live batches after `completed`
    operations of the script (batch numbers are the script's, from 0); a batch opened
    but without a record has left no entry."""
    live = {}
    for count, (kind, batch, _) in enumerate(operations()):
        if count == completed:
            return {batch: state for batch, state in live.items() if state[0]}
        if kind == "open":
            live[batch] = (0, False)
        elif kind == "record":
            live[batch] = (live[batch][0] + 1, False)
        elif kind == "seal":
            live[batch] = (live[batch][0], True)
        else:
            del live[batch]


def main(directory, progress_path, fsync):
    from netkafka.producer.wal import OUTCOME_ACKNOWLEDGED, WriteAheadLog

    wal = WriteAheadLog(directory, fsync=fsync, **WAL_OPTIONS)
    recovery = wal.recovery()
    if recovery.batches:
        sys.exit(f"the parent left live batches: {recovery}")
    progress = kill_progress.Counters(progress_path)
    ids = {}
    for done, (kind, batch, index) in enumerate(operations(), start=1):
        if kind == "open":
            ids[batch] = wal.open_batch()
            if batch == 0:
                progress[0] = ids[0]
        elif kind == "record":
            wal.append_record(ids[batch], index, TOPIC, batch % 3, 1_700_000_000_000 + batch,
                              record(batch, index), context(batch, index))
        elif kind == "seal":
            wal.log_seal(ids[batch], TOPIC, batch % 3, *seal(batch)[:3], RECORDS_PER_BATCH,
                         *seal(batch)[3:])
        else:
            wal.log_done(ids.pop(batch), OUTCOME_ACKNOWLEDGED)
        progress[1] = done


if __name__ == "__main__":
    main(*sys.argv[1:])
