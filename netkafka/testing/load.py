"""A steady stream of records for the chaos tests and the soak run, and the check of what arrived.

A SteadyLoad sends records at a fixed rate from a thread of its own through a netkafka
Producer: keyed records (a few hot keys and a tail of cold ones, so that some partitions are
busier than others) and unkeyed ones.  Each record belongs to a stream -- a key's records, or
the unkeyed records -- and its value says which and where in it: b"<stream>:<seq>".  That is
enough to check what the independent reader returns without keeping the records sent:

- every acknowledged record is read exactly once (and, with keep_placements, at the partition
  and offset its future gave);
- within a partition, each stream's sequence numbers rise: send order is kept;
- all of a key's records are in one partition.

A record that failed may or may not be in the topic (its producer cannot know); failures are
counted and listed, and the chaos tests expect none.

Resume time: mark() notes the moment of a fault; from then on, for each partition, the load
notes the first acknowledgement of a record sent at or after that moment.  The resume time of a
set of partitions is the latest of those, minus the mark: how long the slowest of them went
without taking a new record.

Threads: the load's own thread runs send(); acknowledgements arrive on the producer's I/O
threads (callbacks); the caller's thread marks, waits and checks.  Lock order: _lock only.
"""
import random
import threading
import time
from typing import NamedTuple, Optional

from netkafka import Producer

# The load's clock: records due in each tick of this length are sent together.
TICK_S = 0.01
# A send() that blocked longer than this (backpressure) does not make the load burst to catch
# up: it starts a new schedule, and the time is counted in lagged_s.
MAX_CATCH_UP_S = 0.5
WAIT_POLL_S = 0.02
# Keyed streams, hottest first: key i is chosen in proportion to HOT_KEY_WEIGHT / (i + 1).
KEY_COUNT = 16
HOT_KEY_WEIGHT = 24
UNKEYED_WEIGHT = 24  # about a quarter of all records
UNKEYED_STREAM = b"-"
# At most this many failures are kept with their error, for the report (all are counted).
FAILURES_KEPT = 20
# At most this many examples of each kind of problem are listed by check().
EXAMPLES_KEPT = 10


class Mark(NamedTuple):
    """A moment (a fault), and per partition when a record sent after it was first acknowledged."""

    label: str
    at_s: float  # time.monotonic()
    first_ack_s: dict  # partition -> time.monotonic(); guarded by SteadyLoad._lock


class PartitionStats:
    """Acknowledgements of one partition.  Guarded by SteadyLoad._lock."""

    __slots__ = ("acknowledged", "last_ack_s", "longest_gap_s")

    def __init__(self):
        self.acknowledged = 0
        self.last_ack_s: Optional[float] = None
        self.longest_gap_s = 0.0  # longest time between two acknowledgements


class DeliveryCheck(NamedTuple):
    """What check() found; every list holds up to EXAMPLES_KEPT examples, counts are complete."""

    acknowledged: int
    failed: int
    read: int
    lost: int                      # acknowledged, not read
    duplicated: int                # read more than once
    reordered: int                 # a stream's sequence number not above its predecessor's in a partition
    misplaced: int                 # read elsewhere than where its future said
    unexpected: int                # read but never sent (or not a record of this load)
    split_keys: int                # keys read in more than one partition
    failed_but_written: int        # failed in the producer, yet in the topic (allowed)
    examples: dict                 # kind -> [description, ...]

    @property
    def problems(self) -> str:
        """"" when delivery is exact; else one line per kind of problem, with examples."""
        lines = []
        for kind in ("lost", "duplicated", "reordered", "misplaced", "unexpected", "split_keys"):
            count = getattr(self, kind)
            if count:
                lines.append(f"{kind}: {count}, e.g. {self.examples.get(kind, [])}")
        return "\n".join(lines)

    def summary(self) -> str:
        return (f"{self.acknowledged} acknowledged, {self.failed} failed, {self.read} read "
                f"({self.failed_but_written} of the failed ones written)")


class SteadyLoad:
    """Sends rate_per_s records a second to topic until stop().

    Args:
        producer: the netkafka Producer to send through (the caller closes it).
        topic: an existing topic.
        rate_per_s: records per second.
        keep_placements: remember where each acknowledged record went, for check() to compare
            with the reader's offsets; costs memory per record (the soak run turns it off).
    """

    def __init__(self, producer: Producer, topic: str, rate_per_s: float = 1000.0,
                 keep_placements: bool = True):
        if rate_per_s <= 0:
            raise ValueError(f"rate_per_s must be positive, got {rate_per_s}")
        self.producer = producer  # immutable
        self.topic = topic  # immutable
        self.rate_per_s = rate_per_s  # immutable
        # Stream i is key i (b"k<i>"); the last stream is the unkeyed records.  Immutable.
        self.stream_names = [b"k%d" % i for i in range(KEY_COUNT)] + [UNKEYED_STREAM]
        self._keys = [*self.stream_names[:KEY_COUNT], None]
        self._cycle = _stream_cycle()  # immutable: the stream of record n is _cycle[n % len]
        self.partitions: list[int] = []  # set by start(), then immutable
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        # Owned by the load's thread until stop() has joined it.
        self.next_seq = [0] * len(self.stream_names)  # per stream: records sent so far
        self.send_errors: list[str] = []  # send() raised: the record was not sent
        self._lock = threading.Lock()
        # Guarded by _lock, written by the load's thread:
        self.sent = 0
        self.lagged_s = 0.0  # time behind schedule that send() blocking cost
        # Guarded by _lock, written by the I/O threads' callbacks:
        self.acknowledged = 0
        self.failed = 0
        self._failed_seqs: list[set] = [set() for _ in self.stream_names]
        self.failures: list[str] = []  # the first FAILURES_KEPT, with their errors
        self._stats: dict[int, PartitionStats] = {}
        self._marks: list[Mark] = []
        # (stream, seq) -> (partition, offset) of each acknowledged record, or None.
        self._placements: Optional[dict] = {} if keep_placements else None

    # -- running ------------------------------------------------------------------------------

    def start(self) -> None:
        """Wait for the topic's partitions (the producer's metadata), then start sending."""
        self.partitions = sorted(self.producer.partitions_for(self.topic))
        with self._lock:
            self._stats = {p: PartitionStats() for p in self.partitions}
        self._thread = threading.Thread(target=self._run, name="netkafka-steady-load", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sending (records already sent are the producer's to finish: flush or close it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        due_s = time.monotonic()
        credit = 0.0  # records due but not yet sent (fractions carry over between ticks)
        n = 0
        while not self._stop.is_set():
            credit += self.rate_per_s * TICK_S
            while credit >= 1.0:
                credit -= 1.0
                self._send(n)
                n += 1
            due_s += TICK_S
            wait_s = due_s - time.monotonic()
            if wait_s > 0:
                self._stop.wait(wait_s)
            elif wait_s < -MAX_CATCH_UP_S:
                with self._lock:
                    self.lagged_s -= wait_s
                due_s = time.monotonic()

    def _send(self, n: int) -> None:
        stream = self._cycle[n % len(self._cycle)]
        seq = self.next_seq[stream]
        value = b"%s:%d" % (self.stream_names[stream], seq)
        sent_s = time.monotonic()
        try:
            future = self.producer.send(self.topic, value=value, key=self._keys[stream])
        except Exception as exc:  # noqa: BLE001 -- reported by the tests, which expect none
            if len(self.send_errors) < FAILURES_KEPT:
                self.send_errors.append(f"{value!r}: {exc!r}")
            return
        self.next_seq[stream] = seq + 1
        with self._lock:
            self.sent += 1
        future.add_both(self._done, stream, seq, sent_s)

    def _done(self, stream: int, seq: int, sent_s: float, outcome) -> None:
        """A record's callback, on an I/O thread: outcome is its RecordMetadata or its error."""
        now_s = time.monotonic()
        with self._lock:
            if isinstance(outcome, BaseException):
                self.failed += 1
                self._failed_seqs[stream].add(seq)
                if len(self.failures) < FAILURES_KEPT:
                    self.failures.append(f"{self.stream_names[stream].decode()}:{seq}: {outcome!r}")
                return
            self.acknowledged += 1
            partition = outcome.partition
            stats = self._stats[partition]
            stats.acknowledged += 1
            if stats.last_ack_s is not None:
                stats.longest_gap_s = max(stats.longest_gap_s, now_s - stats.last_ack_s)
            stats.last_ack_s = now_s
            for mark in self._marks:
                if sent_s >= mark.at_s and partition not in mark.first_ack_s:
                    mark.first_ack_s[partition] = now_s
            if self._placements is not None:
                self._placements[stream, seq] = (partition, outcome.offset)

    # -- watching -----------------------------------------------------------------------------

    def mark(self, label: str) -> Mark:
        """Note this moment (call it right before a fault) for resume_s()."""
        mark = Mark(label, time.monotonic(), {})
        with self._lock:
            self._marks.append(mark)
        return mark

    def progress(self) -> tuple[int, int, int, float]:
        """(sent, acknowledged, failed, seconds behind schedule) at one moment."""
        with self._lock:
            return self.sent, self.acknowledged, self.failed, self.lagged_s

    def acknowledged_per_partition(self) -> dict[int, int]:
        with self._lock:
            return {p: stats.acknowledged for p, stats in self._stats.items()}

    def longest_gaps_s(self) -> dict[int, float]:
        """Per partition, the longest time between two acknowledgements so far."""
        with self._lock:
            return {p: stats.longest_gap_s for p, stats in self._stats.items()}

    def wait_acknowledged(self, per_partition: int, timeout_s: float) -> None:
        """Wait until every partition has taken at least per_partition records.

        Raises:
            TimeoutError: not within timeout_s (the counts so far are in the message).
        """
        self._wait(lambda: min(self.acknowledged_per_partition().values()) >= per_partition,
                   timeout_s, lambda: f"{per_partition} acknowledgements in every partition "
                                      f"(have {self.acknowledged_per_partition()})")

    def resume_s(self, mark: Mark, partitions=None) -> Optional[float]:
        """Seconds from the mark until every one of partitions (default: all) acknowledged a
        record sent after it; None while some have not."""
        wanted = self.partitions if partitions is None else partitions
        with self._lock:
            firsts = [mark.first_ack_s.get(p) for p in wanted]
        if None in firsts:
            return None
        return max(firsts) - mark.at_s

    def wait_resumed(self, mark: Mark, timeout_s: float, partitions=None) -> float:
        """Wait for resume_s(mark, partitions) and return it.

        Raises:
            TimeoutError: production did not resume within timeout_s of the mark (a hang).
        """
        def what() -> str:
            with self._lock:
                since = sorted(mark.first_ack_s)
            return f"production to resume after {mark.label!r} (partitions acknowledged since: {since})"

        self._wait(lambda: self.resume_s(mark, partitions) is not None,
                   timeout_s - (time.monotonic() - mark.at_s), what)
        return self.resume_s(mark, partitions)

    def wait_caught_up(self, timeout_s: float) -> float:
        """Wait until every partition has acknowledged a record sent from now on, which means
        the backlog of earlier records is delivered too (a partition's records are acknowledged
        in order); return how long that took."""
        return self.wait_resumed(self.mark("catching up"), timeout_s)

    def _wait(self, condition, timeout_s: float, what) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s:.0f} s for {what()}; {self.describe()}")
            time.sleep(WAIT_POLL_S)

    def describe(self) -> str:
        with self._lock:
            return (f"sent {self.sent}, {self.acknowledged} acknowledged, {self.failed} failed "
                    f"(first: {self.failures[:3]}), send() errors {self.send_errors[:3]}, "
                    f"{self.lagged_s:.1f} s behind schedule")

    # -- checking -----------------------------------------------------------------------------

    def check(self, records) -> DeliveryCheck:
        """Compare what the reader returned (netkafka.testing.reader records, in offset order
        within each partition) with what was sent and acknowledged.  Call after stop() and
        after the producer is flushed or closed."""
        index = {name: i for i, name in enumerate(self.stream_names)}
        # Per stream, how often each sequence number was read (a byte each: memory stays small
        # for the soak run's millions of records).
        times_read = [bytearray(n) for n in self.next_seq]
        last_seq: dict = {}  # (partition, stream) -> the last sequence number read there
        key_partition: dict = {}  # keyed stream -> the partition of its first record
        counts = dict.fromkeys(("duplicated", "reordered", "misplaced", "unexpected",
                                "split_keys", "failed_but_written"), 0)
        examples: dict = {}

        def found(kind: str, description: str) -> None:
            counts[kind] += 1
            kept = examples.setdefault(kind, [])
            if len(kept) < EXAMPLES_KEPT:
                kept.append(description)

        with self._lock:
            failed_seqs = [set(seqs) for seqs in self._failed_seqs]
            placements = None if self._placements is None else dict(self._placements)
            acknowledged, failed = self.acknowledged, self.failed
        for record in records:
            where = f"partition {record.partition} offset {record.offset}"
            name, _, seq_text = (record.value or b"").rpartition(b":")
            stream = index.get(name)
            if stream is None or not seq_text.isdigit() or record.key != self._keys[stream]:
                found("unexpected", f"{where}: key {record.key!r} value {record.value!r}")
                continue
            seq = int(seq_text)
            if seq >= self.next_seq[stream]:
                found("unexpected", f"{where}: {record.value!r} was never sent")
                continue
            times_read[stream][seq] = min(times_read[stream][seq] + 1, 255)
            if times_read[stream][seq] == 2:
                found("duplicated", f"{record.value!r}, again at {where}")
            previous = last_seq.get((record.partition, stream))
            if previous is not None and seq <= previous:
                found("reordered", f"{record.value!r} at {where} after {name.decode()}:{previous}")
            last_seq[record.partition, stream] = seq
            if self._keys[stream] is not None:
                first = key_partition.setdefault(stream, record.partition)
                if first != record.partition:
                    found("split_keys", f"key {name!r} in partitions {first} and {record.partition}")
            if seq in failed_seqs[stream]:
                counts["failed_but_written"] += 1
            elif placements is not None and placements.get((stream, seq)) != (record.partition, record.offset):
                found("misplaced", f"{record.value!r} read at {where}, acknowledged at "
                                   f"{placements.get((stream, seq))}")
        lost = 0
        for stream, counts_read in enumerate(times_read):
            for seq in (s for s, times in enumerate(counts_read) if not times):
                if seq not in failed_seqs[stream]:
                    lost += 1
                    if len(examples.setdefault("lost", [])) < EXAMPLES_KEPT:
                        examples["lost"].append(f"{self.stream_names[stream].decode()}:{seq}")
        return DeliveryCheck(acknowledged=acknowledged, failed=failed, read=len(records),
                             lost=lost, examples=examples, **counts)


def _stream_cycle() -> list[int]:
    """The order in which records pick their stream: weighted, interleaved the same way each run."""
    cycle = [i for i in range(KEY_COUNT) for _ in range(max(1, round(HOT_KEY_WEIGHT / (i + 1))))]
    cycle += [KEY_COUNT] * UNKEYED_WEIGHT
    random.Random(KEY_COUNT).shuffle(cycle)
    return cycle
