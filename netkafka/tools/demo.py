"""Produce a million records with netkafka and prove they all arrived.

`make demo` runs it against a local Apache Kafka broker it starts (from the checkout's
jars); `python -m netkafka.tools.demo --bootstrap-servers host:port` runs it against an
existing cluster (or $NETKAFKA_BOOTSTRAP).  It creates a topic, produces --records
records of --record-size bytes with a progress line on stderr (a line per interval
when stderr is not a terminal), reads them all back with an independent reader
(confluent-kafka), and prints the throughput and a verification summary:

    count        as many records in the topic as were sent
    offsets      every partition's offsets run on with no gap (from 0 in a new topic;
                 in an existing one from where they ended: only this run's records
                 are verified)
    no dupes     every record's sequence number appears exactly once
    byte-exact   a sample of records equals, byte for byte, what was sent

Producing needs only netkafka.  Creating the topic with --partitions and the read-back
need confluent-kafka (`pip install confluent-kafka`); without it the demo says so, lets
the cluster create the topic on first use (auto.create.topics.enable, the broker's
default) and skips the verification.

Each value starts with its 8-byte sequence number, then filler derived from it, so any
record can be regenerated from its number and compared.
"""
import argparse
import os
import random
import sys
import time

from netkafka import Producer
from netkafka.record._compression import CODEC_NAMES

DEMO_TOPIC = "netkafka-demo"
SEQUENCE_BYTES = 8
SAMPLE_SIZE = 10_000
PROGRESS_STEPS = 100
# Seconds between progress lines when stderr is not a terminal (a log, a CI job).
PROGRESS_INTERVAL_S = 1.0
DEFAULT_PARTITIONS = 3
MISSING_READER = ("confluent-kafka is not installed (pip install confluent-kafka): "
                  "it is the independent reader that creates the topic and reads it back")


def independent_reader():
    """netkafka.testing's admin and reader modules (confluent-kafka), or None if missing."""
    try:
        from netkafka.testing import admin, reader
    except ImportError as exc:
        if getattr(exc, "name", None) != "confluent_kafka":
            raise
        return None
    return admin, reader


def print_metadata(metadata) -> None:
    print(f"cluster {metadata.cluster_id}, controller {metadata.controller_id}")
    for broker in sorted(metadata.brokers.values(), key=lambda b: b.id):
        print(f"  broker {broker.id} at {broker.host}:{broker.port}")
    for topic in sorted(metadata.topics.values(), key=lambda t: t.topic):
        print(f"  topic {topic.topic}: {len(topic.partitions)} partition(s)")
        for partition in sorted(topic.partitions.values(), key=lambda p: p.id):
            print(f"    partition {partition.id}: leader {partition.leader}, "
                  f"replicas {partition.replicas}, isr {partition.isrs}")


def record_value(sequence: int, size_bytes: int, filler: bytes) -> bytes:
    """The value of record `sequence`: its number, then filler rotated by it."""
    shift = sequence % 251
    body = filler[shift:shift + size_bytes - SEQUENCE_BYTES]
    return sequence.to_bytes(SEQUENCE_BYTES, "big") + body


def produce(bootstrap: str, topic: str, args: argparse.Namespace, filler: bytes) -> float:
    """Sends every record; returns the seconds from the first send to the last ack."""
    producer = Producer(bootstrap_servers=bootstrap, acks=args.acks,
                        compression_type=None if args.compression == "none" else args.compression,
                        batch_size=args.batch_size, linger_ms=args.linger_ms)
    step = max(1, args.records // PROGRESS_STEPS)
    # A terminal gets one line rewritten in place; a file or pipe a plain line per interval.
    terminal = sys.stderr.isatty()
    send = producer.send
    started = last_line = time.monotonic()
    try:
        for sequence in range(args.records):
            send(topic, record_value(sequence, args.record_size, filler))
            if sequence % step == step - 1:
                now = time.monotonic()
                line = (f"producing: {sequence + 1:,}/{args.records:,} records, "
                        f"{(sequence + 1) / (now - started):,.0f} records/s")
                if terminal:
                    sys.stderr.write(f"\r{line} ")
                elif now - last_line >= PROGRESS_INTERVAL_S or sequence + 1 == args.records:
                    sys.stderr.write(f"{line}\n")
                    last_line = now
                sys.stderr.flush()
        producer.flush()
        elapsed = time.monotonic() - started
        if terminal:
            sys.stderr.write("\n")
        metrics = producer.metrics()["netkafka"]
    finally:
        producer.close()
    if metrics["records_failed"]:
        raise SystemExit(f"{metrics['records_failed']} records failed: {metrics}")
    print(f"produced {args.records:,} records of {args.record_size} bytes in {elapsed:.2f} s: "
          f"{args.records / elapsed:,.0f} records/s, "
          f"{args.records * args.record_size / elapsed / 1e6:.1f} MB/s of values "
          f"({metrics['batches_sent']:,} batches, "
          f"{metrics['bytes_sent'] / 1e6:.1f} MB on the wire)")
    return elapsed


def verify(bootstrap: str, topic: str, args: argparse.Namespace, filler: bytes,
           read_topic, start_offsets: dict) -> bool:
    """Checks the records written since start_offsets (partition -> its end offset
    before the run; a partition not in it from offset 0)."""
    started = time.monotonic()
    records = read_topic(bootstrap, topic, args.records, timeout_s=max(60.0, args.records / 10_000),
                         start_offsets=start_offsets)
    print(f"read back {len(records):,} records with confluent-kafka in "
          f"{time.monotonic() - started:.2f} s")
    checks = {}
    checks["count"] = (len(records) == args.records, f"{len(records):,} of {args.records:,}")
    offsets = {}
    for record in records:
        offsets.setdefault(record.partition, []).append(record.offset)
    first = {p: start_offsets.get(p, 0) for p in offsets}
    gaps = [p for p, seen in offsets.items()
            if sorted(seen) != list(range(first[p], first[p] + len(seen)))]
    checks["offsets contiguous"] = (not gaps, ", ".join(
        f"p{p}: {first[p]}..{first[p] + len(seen) - 1}" for p, seen in sorted(offsets.items()))
        + (f"; gaps in {gaps}" if gaps else ""))
    sequences = [int.from_bytes(r.value[:SEQUENCE_BYTES], "big") for r in records]
    unique = set(sequences)
    checks["no duplicates"] = (len(unique) == len(sequences) and unique == set(range(args.records)),
                               f"{len(sequences) - len(unique)} duplicates, "
                               f"{args.records - len(unique & set(range(args.records)))} missing")
    sample = random.sample(records, min(SAMPLE_SIZE, len(records)))
    wrong = [r for r in sample
             if r.value != record_value(int.from_bytes(r.value[:SEQUENCE_BYTES], "big"),
                                        args.record_size, filler)
             or r.key is not None or r.headers]
    checks["sample byte-exact"] = (not wrong, f"{len(sample) - len(wrong):,} of {len(sample):,} "
                                              f"records equal what was sent")
    for name, (ok, detail) in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return all(ok for ok, _ in checks.values())


def run(bootstrap: str, args: argparse.Namespace) -> bool:
    print(f"Kafka broker at {bootstrap}")
    reader = independent_reader()
    topic = args.topic or f"{DEMO_TOPIC}-{os.getpid()}-{int(time.time())}"
    if reader is None:
        print(f"{MISSING_READER}; topic {topic} is left to the cluster's auto-creation "
              f"and the read-back is skipped")
    else:
        admin, _ = reader
        print_metadata(admin.admin_client(bootstrap).list_topics(timeout=10))
        if args.topic is None:
            print(f"creating topic {topic} with {args.partitions} partitions")
            admin.create_topic(bootstrap, topic, partitions=args.partitions)
    print(f"producing {args.records:,} records of {args.record_size} bytes: acks={args.acks}, "
          f"compression={args.compression}, batch_size={args.batch_size}, "
          f"linger_ms={args.linger_ms}")
    filler = random.Random(1).randbytes(max(0, args.record_size - SEQUENCE_BYTES) + 251)
    # An existing topic may hold records already (an earlier run's): only this run's
    # are verified.
    start_offsets = {} if reader is None else reader[1].end_offsets(bootstrap, topic)
    produce(bootstrap, topic, args, filler)
    if reader is None:
        print("not verified: " + MISSING_READER)
        return True
    return verify(bootstrap, topic, args, filler, reader[1].read_topic, start_offsets)


def int_at_least(minimum: int):
    """An argparse type: an int from minimum, refused before any broker starts."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an int, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an int >= {minimum}, got {value}")
        return value
    return parse


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m netkafka.tools.demo", description=__doc__.split("\n\n")[1],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--bootstrap-servers", default=os.environ.get("NETKAFKA_BOOTSTRAP"),
                        metavar="HOST:PORT",
                        help="an existing cluster (default: $NETKAFKA_BOOTSTRAP; unset: start "
                             "a local broker from the checkout's jars, as make demo does)")
    parser.add_argument("--topic", default=None,
                        help="an existing topic, its records of earlier runs left out of the "
                             "verification (default: a new netkafka-demo-* topic)")
    parser.add_argument("--records", type=int_at_least(1), default=1_000_000,
                        help="records to produce")
    parser.add_argument("--record-size", type=int_at_least(SEQUENCE_BYTES), default=100,
                        help=f"bytes per value (>= {SEQUENCE_BYTES})")
    # SUPPRESS tells a --partitions given from the default, to refuse it with --topic.
    parser.add_argument("--partitions", type=int_at_least(1), default=argparse.SUPPRESS,
                        help=f"of the new topic (default: {DEFAULT_PARTITIONS}); refused with "
                             f"--topic, an existing topic keeping its partitions")
    parser.add_argument("--compression", default="none",
                        choices=CODEC_NAMES, help="the producer's compression_type")
    parser.add_argument("--acks", default="all", choices=["0", "1", "all"],
                        help="the producer's acks")
    # The producer's own minimums: batch_size 0 disables batching, as in Java.
    parser.add_argument("--batch-size", type=int_at_least(0), default=16384,
                        help="the producer's batch_size in bytes (its default)")
    parser.add_argument("--linger-ms", type=int_at_least(0), default=0,
                        help="the producer's linger_ms (its default)")
    args = parser.parse_args(argv)
    if args.topic is not None and hasattr(args, "partitions"):
        parser.error("--partitions applies to the new topic only: --topic names an existing "
                     "one, whose partitions stay as they are")
    args.partitions = getattr(args, "partitions", DEFAULT_PARTITIONS)
    if args.acks != "all":
        args.acks = int(args.acks)
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.bootstrap_servers:
        ok = run(args.bootstrap_servers, args)
    else:
        # The local broker needs the checkout's Kafka jars (make kafka) and Java.
        from netkafka.testing.broker import Cluster
        with Cluster(1) as cluster:
            ok = run(cluster.bootstrap, args)
        print("broker stopped")
    if not ok:
        raise SystemExit("verification FAILED")


if __name__ == "__main__":
    main()
