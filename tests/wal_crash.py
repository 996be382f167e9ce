"""Producers that die (SIGKILL) at a chosen moment, for tests/test_wal_replay.py.

    python tests/wal_crash.py MOMENT BOOTSTRAP TOPIC WAL_DIR COUNT

Each sends COUNT records, value b"r<i>", key b"k<i % 7>" (so: several partitions),
context b"c<i>", then kills itself with the WAL in the state MOMENT names:

    open      every batch still open: records logged, nothing sealed
    acked     every batch acknowledged by the broker, but the DONE entries never
              written (the process died between the answers and the log)
    sealed    every batch sealed and logged, never sent
    mixed     the first half acknowledged without DONE entries, the second half
              sealed and never sent
    split     on a topic whose max.message.bytes the batches exceed: killed as the
              first part of a split batch is acknowledged (one request in flight, so
              a partition's later parts are not sent yet)
    restamped on such a topic, with the record in the middle too large alone: the
              batch is split down to it, it fails, the partition starts over under
              a new epoch and the parts behind it are re-stamped; killed as the first
              of them is acknowledged under the new stamp

"Never written" and "never sent" are made by replacing the WAL's log_done and the
sender's send with functions that do nothing: the log then holds exactly what a
process killed at that moment leaves.
"""
import os
import signal
import sys


def main(moment, bootstrap, topic, wal_dir, count):
    from netkafka import Producer
    from netkafka.producer.sender import Sender, _SplitOutcome
    from netkafka.producer.wal import WriteAheadLog

    count = int(count)
    if moment in ("acked", "mixed"):
        WriteAheadLog.log_done = lambda self, batch_id, outcome: None
    if moment == "sealed":
        # Before the producer opens: what it replays is sealed and never sent too.
        Sender.send = lambda self, *args, **kwargs: None
    if moment == "split":
        part_done = _SplitOutcome.part_done

        def part_done_then_die(self, index, first, builder, view, result, error):
            part_done(self, index, first, builder, view, result, error)
            if error is None:
                os.kill(os.getpid(), signal.SIGKILL)

        _SplitOutcome.part_done = part_done_then_die
    if moment == "restamped":
        part_done = _SplitOutcome.part_done
        stamps = set()

        def part_done_then_die_under_a_new_stamp(self, index, first, builder, view, result,
                                                 error):
            stamp = (builder.producer_id, builder.producer_epoch)
            part_done(self, index, first, builder, view, result, error)
            if error is None:
                stamps.add(stamp)
                if len(stamps) > 1:
                    os.kill(os.getpid(), signal.SIGKILL)

        _SplitOutcome.part_done = part_done_then_die_under_a_new_stamp
    # Small batches, several per partition -- but in "open", batches that no record
    # fills, lingering for a minute; in "split", one batch per partition.
    producer = Producer(bootstrap_servers=bootstrap, wal_dir=wal_dir, wal_fsync="never",
                        **({"linger_ms": 60_000, "batch_size": 65536} if moment == "open"
                           else {"linger_ms": 60_000, "batch_size": 65536,
                                 "max_in_flight_requests_per_connection": 1}
                           if moment in ("split", "restamped")
                           else {"linger_ms": 5, "batch_size": 1024}))

    def send(first, last):
        for i in range(first, last):
            producer.send(topic, b"r%d" % i, key=b"k%d" % (i % 7), context=b"c%d" % i)

    if moment == "open":
        send(0, count)
    elif moment == "acked":
        send(0, count)
        producer.flush(60)
    elif moment == "sealed":
        send(0, count)
        _seal_all(producer)
    elif moment == "split":
        send(0, count)
        producer.flush(60)  # killed before it returns
    elif moment == "restamped":
        for i in range(count):
            value = b"r%d" % i + (b"x" * 400 if i == count // 2 else b"")
            producer.send(topic, value, partition=0, context=b"c%d" % i)
        producer.flush(60)  # killed before it returns
    elif moment == "mixed":
        send(0, count // 2)
        producer.flush(60)
        Sender.send = lambda self, *args, **kwargs: None
        send(count // 2, count)
        _seal_all(producer)
    else:
        sys.exit(f"unknown moment {moment!r}")
    os.kill(os.getpid(), signal.SIGKILL)


def _seal_all(producer):
    # flush() seals and hands over every batch, then waits for answers that never come.
    try:
        producer.flush(0.5)
    except Exception:  # noqa: BLE001 -- the timeout is the point
        pass


if __name__ == "__main__":
    main(*sys.argv[1:])
