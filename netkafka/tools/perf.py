"""netkafka-perf: how fast netkafka produces to a real cluster, in the manner of
Kafka's kafka-producer-perf-test (org.apache.kafka.tools.ProducerPerformance).

    netkafka-perf --topic T --num-records 1000000 --record-size 100 --throughput -1 \\
        --bootstrap-servers 127.0.0.1:9092 --producer-config batch.size=1048576 linger.ms=5

Progress goes to stderr: a bar redrawn in place on a terminal, otherwise one line per
--reporting-interval-ms window in the Java tool's words.  The summary goes to stdout in the
Java tool's format, or as JSON with --json.  The clock starts once the topic's metadata has
arrived and stops when every record is acknowledged or failed; a record that failed is
counted, never hidden, and makes the exit status 1.  Ctrl-C stops the run at once, as it
stops the Java tool: records queued or in flight fail then (not after delivery_timeout_ms,
which is the whole wait when the cluster is gone), the summary counts them and the records
never sent, and the exit status is 130.

Latency is from send to acknowledgement, measured on a sample of the records: every
ceil(num_records / LATENCY_SAMPLES)-th, so that at most about ten thousand carry a callback
(a callback on every record slows netkafka's send() several times, which would measure the
tool rather than the producer).  How each mode samples:

    send        a callback on the sampled records' futures
    produce     the sampled records (at most one in PRODUCE_PROBE_EVERY_AT_LEAST) go through
                send() with a callback, the others through produce(); both paths encode
                into the same batches
    send_batch  every call of --rows-per-call rows is timed from the call until its
                BatchSendResult is done (a waiter thread takes the results in call order)
"""
import argparse
import json
import math
import queue
import random
import re
import sys
import threading
import time
from array import array

from jproperties import ParseError, Properties

from netkafka import KafkaError, Producer, UndeliveredRecordsError
from netkafka.client.metadata import check_topic_name
from netkafka.config import JAVA_TLS_SETTINGS, ProducerConfig, producer_setting

# At most about this many records per run carry a latency probe.
LATENCY_SAMPLES = 10_000
# In produce mode at most one record in this many is a probe sent with send(), so that
# produce() is what a small run measures too.
PRODUCE_PROBE_EVERY_AT_LEAST = 10
PERCENTILES = (0.5, 0.95, 0.99, 0.999)
# Payloads read from --payload-file are sent in a random order of this length, repeated.
PAYLOAD_ORDER_LENGTH = 10_000
MIB = 1024 * 1024  # the Java tool's "MB"
BAR_WIDTH = 30
BAR_INTERVAL_S = 0.2
# The throttle sleeps once it is this far ahead of its schedule: shorter sleeps cost a
# syscall each and the scheduler's wake-up is coarser than that anyway.
THROTTLE_MIN_SLEEP_S = 0.001
FIRST_ERRORS_KEPT = 3
DEFAULT_ROWS_PER_CALL = 1000
# A call's rows go out together, at its last row's turn: throttled, a call holds at most
# this long's worth, so the default 1000 rows at --throughput 5 do not wait 200 s.
THROTTLED_CALL_S = 0.1
# The exit status after Ctrl-C: 128 + SIGINT, as a shell reports a process it ended.
EXIT_INTERRUPTED = 130
# Settings whose values are secrets: never printed, in the summary or in an error.
SECRET_SETTINGS = frozenset({"sasl_plain_password", "sasl_jaas_config", "ssl_password"})
HIDDEN = "[hidden]"


# ----------------------------------------------------------------------------------
# Arguments and producer settings.

def parse_args(argv=None):
    """The parsed arguments, with .settings: the Producer's keyword arguments."""
    parser = argparse.ArgumentParser(
        prog="netkafka-perf",
        description="Produce records as fast as allowed and report throughput and latency, "
                    "like kafka-producer-perf-test.")
    parser.add_argument("--topic", required=True, help="topic to produce to")
    parser.add_argument("--num-records", type=int, required=True, metavar="N",
                        help="records to produce")
    payload = parser.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, metavar="BYTES",
                         help="bytes per record value (random capital letters, as the Java tool)")
    payload.add_argument("--payload-file", metavar="FILE",
                         help="values are taken at random from this file's pieces, split at "
                              "--payload-delimiter")
    parser.add_argument("--payload-delimiter", metavar="REGEX",
                        help="separator of the payloads in --payload-file, a regular "
                             "expression as in the Java tool (default: \\n)")
    parser.add_argument("--throughput", type=float, default=-1.0, metavar="RECORDS_PER_S",
                        help="records per second at most; -1 for no limit (default)")
    # extend: given again (or by its other name), the settings add up, later ones
    # overriding, rather than the last group replacing the others unseen.
    parser.add_argument("--producer-config", "--producer-props", nargs="+", action="extend",
                        default=[], metavar="KEY=VALUE",
                        help="Producer settings: kafka-python's names (batch_size=1048576) or "
                             "the Java client's (batch.size=1048576)")
    parser.add_argument("--producer.config", dest="producer_config_file", metavar="FILE",
                        help="a Java properties file of Producer settings (overridden by "
                             "--producer-config)")
    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]",
                        help="the brokers (overrides bootstrap.servers in the settings)")
    parser.add_argument("--mode", choices=("send", "produce", "send_batch"), default="send",
                        help="send(): a future per record (default); produce(): fire and "
                             "forget; send_batch(): --rows-per-call rows per call")
    parser.add_argument("--rows-per-call", type=int, metavar="ROWS",
                        help=f"rows per send_batch() call (default {DEFAULT_ROWS_PER_CALL}; "
                             f"with --throughput, {THROTTLED_CALL_S:g} s of records, at "
                             f"least 1 and at most {DEFAULT_ROWS_PER_CALL})")
    parser.add_argument("--reporting-interval-ms", type=int, default=5000, metavar="MS",
                        help="length of a progress window when stderr is not a terminal "
                             "(default 5000)")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object")
    args = parser.parse_args(argv)

    if args.num_records < 1:
        parser.error(f"--num-records must be at least 1, got {args.num_records}")
    if args.record_size is not None and args.record_size < 0:
        parser.error(f"--record-size must be 0 or more, got {args.record_size}")
    if math.isnan(args.throughput) or (args.throughput <= 0 and args.throughput != -1):
        parser.error(f"--throughput must be more than 0, or -1 for no limit, "
                     f"got {args.throughput:g}")
    if args.payload_delimiter is None:
        args.payload_delimiter = "\\n"
    elif args.payload_file is None:
        parser.error("--payload-delimiter applies to --payload-file only")
    try:
        check_topic_name(args.topic)
    except (TypeError, ValueError) as exc:
        parser.error(f"--topic: {getattr(exc, 'message', exc)}")  # without the error code
    if args.rows_per_call is None:
        args.rows_per_call = DEFAULT_ROWS_PER_CALL
        if args.throughput > 0:
            args.rows_per_call = max(1, min(DEFAULT_ROWS_PER_CALL,
                                            int(args.throughput * THROTTLED_CALL_S)))
    elif args.mode != "send_batch":
        parser.error("--rows-per-call applies to --mode send_batch only")
    elif args.rows_per_call < 1:
        parser.error(f"--rows-per-call must be at least 1, got {args.rows_per_call}")
    if args.reporting_interval_ms < 1:
        parser.error(f"--reporting-interval-ms must be at least 1, "
                     f"got {args.reporting_interval_ms}")
    args.payloads = _payloads(parser, args)
    args.settings = _producer_settings(parser, args)
    return args


def _payloads(parser, args):
    if args.payload_file is None:
        rng = random.Random()
        return Payloads([bytes(rng.randrange(65, 91) for _ in range(args.record_size))])
    # As the Java tool: the delimiter is a regular expression (the default "\\n" a
    # newline, "\\t" a tab, "\\|" a bar), here over the file's bytes.
    try:
        delimiter = re.compile(args.payload_delimiter.encode())
    except re.error as exc:
        parser.error(f"--payload-delimiter {args.payload_delimiter!r} is not a regular "
                     f"expression: {exc}")
    try:
        with open(args.payload_file, "rb") as file:
            data = file.read()
    except OSError as exc:
        parser.error(f"--payload-file {args.payload_file}: {exc.strerror}")
    pieces, start = [], 0
    for match in delimiter.finditer(data):
        if match.end() == match.start():
            parser.error(f"--payload-delimiter {args.payload_delimiter!r} matches an empty "
                         f"string (it is a regular expression, as in the Java tool: a "
                         f"literal | is written \\|)")
        pieces.append(data[start:match.start()])
        start = match.end()
    pieces.append(data[start:])
    # As the Java tool, which reads the file with a Scanner: every piece between two
    # delimiters is a payload, an empty one too; a delimiter at the very start or end of
    # the file only begins or ends the first or last piece.
    if pieces[0] == b"":
        del pieces[0]
    if pieces and pieces[-1] == b"":
        pieces.pop()
    if not pieces:
        parser.error(f"--payload-file {args.payload_file} holds no payload")
    rng = random.Random()
    return Payloads([pieces[rng.randrange(len(pieces))]
                     for _ in range(min(PAYLOAD_ORDER_LENGTH, args.num_records))])


def _producer_settings(parser, args):
    """The Producer's keyword arguments from the properties file, then --producer-config,
    then --bootstrap-servers, each overriding the one before; checked by ProducerConfig
    before any connection, so that a bad setting is an argument error naming its origin."""
    settings, origins = {}, {}
    if args.producer_config_file is not None:
        try:
            pairs = read_properties(args.producer_config_file)
        except (OSError, ValueError) as exc:
            parser.error(f"--producer.config {args.producer_config_file}: {exc}")
        for name, text in pairs:
            _put(parser, settings, origins, name, text,
                 f"--producer.config {args.producer_config_file} "
                 f"({name}={_shown_text(name, text)})")
    for item in args.producer_config:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            parser.error(f"--producer-config {_shown_text(name, item)!r}: expected KEY=VALUE")
        _put(parser, settings, origins, name.strip(), text.strip(),
             f"--producer-config {name.strip()}={_shown_text(name, text.strip())}")
    if args.bootstrap_servers is not None:
        _put(parser, settings, origins, "bootstrap_servers", args.bootstrap_servers,
             f"--bootstrap-servers {args.bootstrap_servers}")
    if "bootstrap_servers" not in settings:
        parser.error("the brokers are needed: give --bootstrap-servers, or bootstrap.servers "
                     "in --producer-config or --producer.config")
    if "transactional_id" in settings:
        # A transactional producer refuses records before init_transactions(): every
        # record of the run would fail, after the topic's metadata had been waited for.
        parser.error(f"{origins['transactional_id']}: netkafka-perf sends without "
                     f"transactions (kafka-producer-perf-test's --transactional-id and "
                     f"--transaction-duration-ms are not supported): drop it")
    try:
        ProducerConfig.from_kwargs(settings)
    except (TypeError, ValueError, NotImplementedError) as exc:
        named = [origin for name, origin in origins.items() if name in str(exc)]
        parser.error(f"{'; '.join(named or origins.values())}: {exc}")
    return settings


def _shown_text(name, text):
    """text as an origin may show it: hidden when name is a secret's (kafka-python's
    name or the Java client's, e.g. ssl.key.password for ssl_password)."""
    java = JAVA_TLS_SETTINGS.get(name.strip().lower())
    keyword = java[0] if java else name.strip().replace(".", "_").replace("-", "_")
    return HIDDEN if keyword in SECRET_SETTINGS else text


def shown_settings(settings):
    """The Producer settings as the summary prints them: secrets hidden."""
    return {name: HIDDEN if name in SECRET_SETTINGS else value
            for name, value in settings.items()}


def _put(parser, settings, origins, name, text, origin):
    try:
        setting = producer_setting(name, text)
    except (TypeError, ValueError) as exc:
        parser.error(f"{origin}: {exc}")
    settings.update(setting)
    origins.update(dict.fromkeys(setting, origin))


def read_properties(path):
    """(key, value) pairs of a Java properties file, as java.util.Properties reads it:
    `key=value`, `key: value` or `key value`, # and ! comments, continued lines,
    backslash and \\uXXXX escapes (jproperties does the parsing).

    Raises:
        OSError: the file cannot be read.
        ValueError: a line that is not a property, or text that is not UTF-8.
    """
    properties = _JavaProperties()
    with open(path, "rb") as file:
        try:
            properties.load(file, "utf-8")
        except ParseError as exc:
            # Its text names no file, and a bad escape only as int()'s complaint.
            what = exc.message
            if "base 16" in what:
                what = (f"a malformed \\uXXXX escape ({what}): a backslash starts an "
                        "escape, as in Java's Properties; write a Windows path with / or \\\\")
            raise ValueError(f"line {exc.line_number}: {what}") from None
    return [(key, value.data) for key, value in properties.items()]


class _JavaProperties(Properties):
    """jproperties with every # or ! line a comment, as Java's Properties has it:
    jproperties reads a line that starts "#:" as metadata of the next property, and
    refuses one without a key ("#:", a "#:::::" banner)."""

    def _parse_comment(self):
        self._getc()  # the # or !
        self._skip_natural_line()


class Payloads:
    """The record values in the order they are sent: `order` repeated."""

    def __init__(self, order):
        self.order = order  # immutable after construction
        self._prefix_bytes = [0]
        for value in order:
            self._prefix_bytes.append(self._prefix_bytes[-1] + len(value))

    def total_bytes(self, count):
        """The bytes of the first `count` values."""
        rounds, rest = divmod(count, len(self.order))
        return rounds * self._prefix_bytes[-1] + self._prefix_bytes[rest]


# ----------------------------------------------------------------------------------
# Measuring.

class LatencyRecorder:
    """Send-to-acknowledgement latencies of the sampled records, in ms.

    record() runs on the I/O threads (callbacks) or the send_batch waiter; the progress
    reporter and the main thread read.  Everything is guarded by _lock.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._latencies_ms = array("d")  # guarded by _lock
        self._weights = array("q")  # guarded by _lock: records each latency stands for
        self._total = [0, 0.0, 0.0]  # guarded by _lock: records, sum of ms, max ms
        self._window = [0, 0.0, 0.0]  # guarded by _lock: the same since take_window()

    def on_ack(self, sent_ns, _metadata):
        """A sampled future's callback (success only: failures are counted elsewhere)."""
        self.record((time.perf_counter_ns() - sent_ns) / 1e6)

    def record(self, latency_ms, weight=1):
        with self._lock:
            self._latencies_ms.append(latency_ms)
            self._weights.append(weight)
            for stats in (self._total, self._window):
                stats[0] += weight
                stats[1] += latency_ms * weight
                stats[2] = max(stats[2], latency_ms)

    def total(self):
        """(records, avg ms, max ms) so far; avg is NaN before the first."""
        with self._lock:
            return _averaged(self._total)

    def take_window(self):
        """(records, avg ms, max ms) since the previous call, and start a new window."""
        with self._lock:
            window, self._window = self._window, [0, 0.0, 0.0]
        return _averaged(window)

    def percentiles(self):
        """{p: ms} for PERCENTILES, as the Java tool picks them: the value at rank
        floor(p * n) of the sorted latencies, each latency counted by its weight."""
        with self._lock:
            pairs = sorted(zip(self._latencies_ms, self._weights))
            count = self._total[0]
        result = {}
        for p in PERCENTILES:
            rank, seen = math.floor(p * count), 0
            result[p] = math.nan
            for latency_ms, weight in pairs:
                seen += weight
                if seen > rank:
                    result[p] = latency_ms
                    break
        return result


def _averaged(stats):
    count, total_ms, max_ms = stats
    return count, (total_ms / count if count else math.nan), (max_ms if count else math.nan)


class Throttle:
    """Holds the send rate to per_s: record i goes no earlier than i / per_s after start
    (an absolute schedule, so that a late sleep is made up for, never accumulated)."""

    def __init__(self, per_s, started_s):
        self._per_s = per_s
        self._started_s = started_s

    def wait(self, index):
        ahead_s = self._started_s + index / self._per_s - time.monotonic()
        if ahead_s >= THROTTLE_MIN_SLEEP_S:
            time.sleep(ahead_s)


class Progress(threading.Thread):
    """Reports progress on stderr until stop(): a bar on a terminal, else the Java tool's
    window lines.  Reads the producer's counters and the recorder; owns its own fields."""

    def __init__(self, producer, recorder, total, payloads, interval_ms, stream=sys.stderr):
        super().__init__(name="netkafka-perf-progress", daemon=True)
        self._producer = producer
        self._recorder = recorder
        self._total = total
        self._mean_bytes = payloads.total_bytes(total) / total
        self._stream = stream
        self._bar = stream.isatty()
        self._interval_s = BAR_INTERVAL_S if self._bar else interval_ms / 1000
        self._stopped = threading.Event()
        self._started_s = time.monotonic()

    def run(self):
        last_s, last_acked = self._started_s, 0
        while not self._stopped.wait(self._interval_s):
            now_s, acked = time.monotonic(), self._acked()
            if self._bar:
                self._draw(acked, now_s - self._started_s)
            else:
                self._window_line(acked - last_acked, now_s - last_s)
            last_s, last_acked = now_s, acked

    def stop(self):
        """Stops reporting; the bar is drawn a last time and its line ended."""
        self._stopped.set()
        self.join()
        if self._bar:
            self._draw(self._acked(), time.monotonic() - self._started_s)
            self._stream.write("\n")
            self._stream.flush()

    def _acked(self):
        metrics = self._producer.metrics()["netkafka"]
        return metrics["records_acknowledged"] + metrics["records_failed"]

    def _draw(self, done, elapsed_s):
        filled = BAR_WIDTH * done // self._total
        _, avg_ms, max_ms = self._recorder.total()
        rate = done / elapsed_s if elapsed_s > 0 else 0.0
        self._stream.write(
            f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {100 * done / self._total:5.1f}% "
            f"{done:,}/{self._total:,} records, {rate:,.0f} records/sec "
            f"({rate * self._mean_bytes / MIB:.2f} MB/sec), {avg_ms:.1f} ms avg latency, "
            f"{max_ms:.1f} ms max latency\033[K")
        self._stream.flush()

    def _window_line(self, done, elapsed_s):
        _, avg_ms, max_ms = self._recorder.take_window()
        rate = done / elapsed_s
        self._stream.write(
            f"{done} records sent, {rate:.1f} records/sec ({rate * self._mean_bytes / MIB:.2f} "
            f"MB/sec), {avg_ms:.1f} ms avg latency, {max_ms:.1f} ms max latency.\n")
        self._stream.flush()


class Failures:
    """Records that failed where the producer's counters do not see them: raised by
    send() or send_batch() (the main thread), or in a send_batch result (the waiter,
    which the main thread joins before reading).  One owner at a time, as stated."""

    def __init__(self):
        self.count = 0
        self.first_errors = []

    def add(self, count, error):
        self.count += count
        if len(self.first_errors) < FIRST_ERRORS_KEPT:
            self.first_errors.append(error if isinstance(error, str) else repr(error))


# ----------------------------------------------------------------------------------
# The three ways of sending.

def run_per_record(producer, args, recorder, throttle, failures):
    """One call per record: send() or produce() by mode; the sampled records go through
    send() with the latency callback on their futures."""
    topic, order, count = args.topic, args.payloads.order, args.num_records
    length, every = len(order), args.latency_sample_every
    send = producer.send
    unsampled = send if args.mode == "send" else producer.produce
    on_ack, clock = recorder.on_ack, time.perf_counter_ns
    for i in range(count):
        if throttle is not None:
            throttle.wait(i)
        try:
            if i % every:
                unsampled(topic, order[i % length])
            else:
                sent_ns = clock()
                send(topic, order[i % length]).add_callback(on_ack, sent_ns)
        except (KafkaError, ValueError, TypeError) as exc:
            failures.add(1, exc)


def run_send_batch(producer, args, recorder, throttle, failures):
    """send_batch() of rows_per_call rows at a time; a waiter thread times each call
    until its result is done and counts the rows that failed."""
    topic, order, count = args.topic, args.payloads.order, args.num_records
    rows = args.rows_per_call
    results = queue.SimpleQueue()
    waiter = threading.Thread(target=_wait_for_results, args=(results, recorder, failures),
                              name="netkafka-perf-waiter", daemon=True)
    waiter.start()
    # The values of one call: the payload order repeated to cover rows_per_call + a phase.
    cycle = order * (rows // len(order) + 2)
    try:
        for start in range(0, count, rows):
            phase = start % len(order)
            values = cycle[phase:phase + min(rows, count - start)]
            if throttle is not None:
                # The call's last record's turn: its first one's would let a call of
                # rows records go rows / per_s early, every record of a short run at once.
                throttle.wait(start + len(values) - 1)
            sent_ns = time.perf_counter_ns()
            try:
                results.put((sent_ns, producer.send_batch(topic, values), len(values)))
            except (KafkaError, ValueError, TypeError) as exc:
                results.put((sent_ns, exc, len(values)))
    finally:
        results.put(None)
        try:
            waiter.join()
        except KeyboardInterrupt:
            # Ctrl-C while the waiter waits for results: their records fail now (see
            # run()), and the waiter, which owns `failures` until joined, counts them.
            producer.close(0)
            waiter.join()
            raise


def _wait_for_results(results, recorder, failures):
    """The waiter: owns `failures` until the main thread joins it."""
    while True:
        item = results.get()
        if item is None:
            return
        sent_ns, result, rows = item
        if isinstance(result, Exception):
            failures.add(rows, result)
            continue
        result.get()  # delivery_timeout_ms bounds every batch
        latency_ms = (time.perf_counter_ns() - sent_ns) / 1e6
        failed = result.failed_count
        if failed:
            failures.add(failed, result.errors[0][1])
        if failed < rows:
            recorder.record(latency_ms, rows - failed)


MODES = {"send": run_per_record, "produce": run_per_record, "send_batch": run_send_batch}


# ----------------------------------------------------------------------------------
# A run, and its summary.

def run(args, progress_stream=sys.stderr):
    """Produces the records and returns the summary dict (see summary_line for the text)."""
    args.latency_sample_every = max(1, math.ceil(args.num_records / LATENCY_SAMPLES))
    if args.mode == "produce":
        args.latency_sample_every = max(args.latency_sample_every, PRODUCE_PROBE_EVERY_AT_LEAST)
    summary = {"topic": args.topic, "mode": args.mode, "records_requested": args.num_records,
               "record_bytes_total": args.payloads.total_bytes(args.num_records),
               "throughput_limit": args.throughput,
               "latency_sample_every": args.latency_sample_every,
               "producer_config": shown_settings(args.settings), "interrupted": False}
    recorder, failures = LatencyRecorder(), Failures()
    undelivered = None
    producer = Producer(**args.settings)
    try:
        try:
            # Metadata first, outside the clock, and a clear failure if there is none.
            producer.partitions_for(args.topic)
        except KafkaError as exc:
            failures.add(args.num_records, exc)
            return _finish(summary, args, 0, failures, recorder, 0.0)
        except KeyboardInterrupt:
            summary["interrupted"] = True
            return _finish(summary, args, 0, failures, recorder, 0.0)
        progress = Progress(producer, recorder, args.num_records, args.payloads,
                            args.reporting_interval_ms, progress_stream)
        started_s = time.monotonic()
        throttle = Throttle(args.throughput, started_s) if args.throughput > 0 else None
        progress.start()
        try:
            MODES[args.mode](producer, args, recorder, throttle, failures)
            try:
                producer.flush()
            except UndeliveredRecordsError as exc:  # produce()'s: also in records_failed
                undelivered = exc
        except KeyboardInterrupt:
            # Ctrl-C stops the run at once, as the Java tool stops: what is queued or
            # in flight fails now rather than at delivery_timeout_ms (the whole wait
            # when the cluster is gone), and the summary counts it with the records
            # never sent.
            summary["interrupted"] = True
            producer.close(0)
        finally:
            elapsed_s = time.monotonic() - started_s
            progress.stop()
        metrics = producer.metrics()["netkafka"]
    finally:
        producer.close()
    counted = 0 if args.mode == "send_batch" else metrics["records_failed"]
    if counted:
        failures.add(counted, undelivered or f"{counted} records failed in their batches "
                                             f"(producer metrics: {_error_counts(metrics)})")
    return _finish(summary, args, metrics["records_acknowledged"], failures, recorder,
                   elapsed_s)


def _error_counts(metrics):
    return {k: v for k, v in metrics.items() if k.startswith("sender_") and v} or "none"


def _finish(summary, args, acknowledged, failures, recorder, elapsed_s):
    unaccounted = args.num_records - acknowledged - failures.count
    if summary["interrupted"]:
        # Not sent, or in the send_batch() call Ctrl-C cut short: its result never
        # came back to be counted (deferring Ctrl-C past the call would wait out
        # max_block_ms when the cluster is gone and the buffer full).
        failures.first_errors.insert(0, f"interrupted: {unaccounted} records not sent or "
                                        f"in a call cut short, {failures.count} failed (those "
                                        f"undelivered when stopped among them)")
    elif unaccounted:
        failures.first_errors.append(f"{unaccounted} records neither acknowledged nor failed")
    sent_bytes = args.payloads.total_bytes(args.num_records) * acknowledged / args.num_records
    samples, avg_ms, max_ms = recorder.total()
    summary.update({
        "records_sent": acknowledged,
        "records_failed": failures.count,
        "records_unaccounted": unaccounted,
        "errors": failures.first_errors,
        "elapsed_s": elapsed_s,
        "records_per_sec": acknowledged / elapsed_s if elapsed_s else 0.0,
        "mb_per_sec": sent_bytes / elapsed_s / MIB if elapsed_s else 0.0,
        "latency_samples": samples,
        "avg_latency_ms": avg_ms,
        "max_latency_ms": max_ms,
    })
    for p, ms in recorder.percentiles().items():
        summary[f"p{p * 100:g}_ms".replace(".", "")] = ms
    return summary


def summary_line(summary):
    """The Java tool's final line (percentiles with two decimals: ours are not whole ms)."""
    return (f"{summary['records_sent']} records sent, {summary['records_per_sec']:f} records/sec "
            f"({summary['mb_per_sec']:.2f} MB/sec), {summary['avg_latency_ms']:.2f} ms avg "
            f"latency, {summary['max_latency_ms']:.2f} ms max latency, "
            f"{summary['p50_ms']:.2f} ms 50th, {summary['p95_ms']:.2f} ms 95th, "
            f"{summary['p99_ms']:.2f} ms 99th, {summary['p999_ms']:.2f} ms 99.9th.")


def main(argv=None):
    args = parse_args(argv)
    summary = run(args)
    if args.json:
        # NaN (no latency sample) is not JSON: null instead.
        print(json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v)
                          for k, v in summary.items()}))
    else:
        print(summary_line(summary))
    sys.stdout.flush()
    if summary["records_failed"] or summary["records_unaccounted"]:
        print(f"netkafka-perf: {summary['records_failed']} of {summary['records_requested']} "
              f"records failed, {summary['records_unaccounted']} unaccounted; first errors: "
              f"{'; '.join(summary['errors'])}", file=sys.stderr)
        return EXIT_INTERRUPTED if summary["interrupted"] else 1
    return EXIT_INTERRUPTED if summary["interrupted"] else 0


if __name__ == "__main__":
    sys.exit(main())
