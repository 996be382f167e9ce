"""What a round of an end-to-end benchmark cost, and clients' rounds run alternated.

One round of any suite (throughput, latency; TLS, transactions, WAL and Spark rows alike):

    measured = rounds.measure(lambda: runner.run(topic, values), len(values), broker_pids)

broker_pids is the bench session's fixture (bench/conftest.py), or broker_pids(broker) for
another broker.  A Round holds:

    records        what the round sent
    seconds        wall time of run() (perf_counter)
    client_cpu_s   this process's CPU, user + system, every thread (time.process_time()),
                   plus that of its child processes which ended during the round (getrusage
                   RUSAGE_CHILDREN, as os.wait4 reports them): a client run as a subprocess,
                   such as the Java producer's JVM, is the client; and that of client_pids,
                   a client's processes that live on past the round (/proc, 10 ms ticks).
                   Producers of other clients kept idle in this process between their
                   rounds cost 0.3 ms of CPU per second, all seven Python runners together
                   (measured): below the noise.
    broker_cpu_s   user + system CPU of the broker's processes, every thread, from
                   /proc/<pid>/stat after the round minus before it, in clock ticks (10 ms:
                   coarse for rounds much shorter than a second); None when the broker is no
                   process of this machine
    load_1m        the machine's 1-minute load average at the end of the round
    others_cores   how many cores other processes kept busy during the round, on average:
                   the machine's busy time (/proc/stat) minus the client's and the broker's,
                   over the wall time -- the shared machine's interference, as measured

Alternated rounds: alternate({key: contestant}, rounds) warms every contestant up once,
then runs their rounds A B C A B C ..., so that a change in the broker's pace (its JIT,
its phases, other jobs) hits each client alike rather than one client's block; summary()
gives a client's medians over its rounds.  A contestant is a Contestant (a callable run in
this process, which may drive a process kept for every round: client_pids) or a
JavaContestant (ProducerPerformance, a JVM per round).
"""
import os
import resource
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")  # the unit of /proc's CPU times
_TCP_LISTEN = "0A"  # the state column of /proc/net/tcp{,6}
NS = 1e9


@dataclass(frozen=True)
class Round:
    """What one round cost (the fields: the module's docstring)."""

    records: int
    seconds: float
    client_cpu_s: float
    broker_cpu_s: Optional[float]
    load_1m: float
    others_cores: float

    @property
    def client_ns_per_record(self) -> float:
        return self.client_cpu_s * NS / self.records

    @property
    def broker_ns_per_record(self) -> Optional[float]:
        return None if self.broker_cpu_s is None else self.broker_cpu_s * NS / self.records


def measure(run: Callable[[], object], records: int, broker_pids: Sequence[int],
            client_pids: Sequence[int] = ()) -> Round:
    """Runs run() once and returns what it cost: records is what it sends; client_pids:
    the client's processes beyond this one and its ended children (a JVM kept for every
    round), whose CPU is the client's too."""
    broker_before = _processes_cpu_s(broker_pids)
    machine_before = machine_busy_s()
    client_before = _client_cpu_s() + (_processes_cpu_s(client_pids) or 0.0)
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    client_cpu_s = _client_cpu_s() + (_processes_cpu_s(client_pids) or 0.0) - client_before
    machine_cpu_s = machine_busy_s() - machine_before
    broker_after = _processes_cpu_s(broker_pids)
    broker_cpu_s = None if broker_before is None else broker_after - broker_before
    others_cpu_s = machine_cpu_s - client_cpu_s - (broker_cpu_s or 0.0)
    return Round(records, seconds, client_cpu_s, broker_cpu_s, os.getloadavg()[0],
                 others_cpu_s / seconds)


def _client_cpu_s() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of every thread of process pid, ended threads included."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # The command name (field 2) may hold spaces and parentheses: fields are counted after
    # its closing one, from field 3 (state); utime and stime are fields 14 and 15.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def process_tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process pid and its live descendants, with the children
    each of them has reaped: e.g. a local-mode Spark JVM, its Python worker daemon and the
    workers it forks (a worker that ended was reaped by its parent, whose children's times
    hold it; a live process's own times are counted once, by itself)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, of in parents.items() if of == parent and child not in tree]
        tree.update(children)
        frontier.extend(children)
    total = 0.0
    for member in tree:
        try:
            stat = Path(f"/proc/{member}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        # utime, stime, cutime, cstime: fields 14 to 17.
        total += sum(int(value) for value in fields[11:15]) * _TICK_S
    return total


def _processes_cpu_s(pids: Sequence[int]) -> Optional[float]:
    return sum(process_cpu_s(pid) for pid in pids) if pids else None


def machine_busy_s() -> float:
    """CPU seconds the machine's cores have been busy since boot, all cores together: user,
    nice, system, irq and softirq of /proc/stat (not idle, not I/O wait, not time stolen by
    the hypervisor for other machines)."""
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, irq, softirq = map(int, stat.readline().split()[1:8])
    return (user + nice + system + irq + softirq) * _TICK_S


def broker_pids(broker) -> tuple[int, ...]:
    """The pids of a broker fixture's JVMs: a harness Cluster's nodes know theirs; any other
    broker (NETKAFKA_BOOTSTRAP) is looked for among this machine's processes listening on
    its bootstrap ports -- () when none is, e.g. a remote broker."""
    nodes = getattr(broker, "nodes", None)
    if nodes is not None:
        return tuple(node.pid for node in nodes if node.pid is not None)
    ports = {int(address.rsplit(":", 1)[1]) for address in broker.bootstrap.split(",")}
    return tuple(sorted({pid for port in ports for pid in listening_pids(port)}))


def listening_pids(port: int) -> set[int]:
    """The pids of this user's processes holding a TCP socket that listens on port."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:  # no IPv6 on this machine
            continue
        for line in lines:
            # sl, local address (hex address:hex port), remote address, state, ..., inode
            fields = line.split()
            if fields[3] == _TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    pids = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                pids.add(int(fd_dir.parent.name))
        except OSError:  # another user's process, or one that ended meanwhile
            continue
    return pids


# -- alternated rounds -------------------------------------------------------------------------


class Contestant:
    """A client whose round is a call of run() in this process; warmed up by one unmeasured
    run (connections made, metadata known, pools grown).  runner: the peers runner behind
    run, if any, for figures of a suite's own (a transactional runner's commit times);
    client_pids: processes run() drives whose CPU is the client's (measure())."""

    def __init__(self, run: Callable[[], object], records: int, broker_pids: Sequence[int],
                 runner=None, client_pids: Sequence[int] = ()):
        self.records_sent = 0  # by the warm-up and the rounds so far
        self.records = records  # per round
        self.runner = runner
        self._run = run
        self._broker_pids = broker_pids
        self._client_pids = client_pids

    def warm_up(self) -> None:
        self._run()
        self.records_sent += self.records

    def round(self) -> Round:
        measured = measure(self._run, self.records, self._broker_pids, self._client_pids)
        self.records_sent += self.records
        return measured


class JavaContestant:
    """Kafka's ProducerPerformance (peers.JavaProducerPerformance), a JVM per round of
    records + warmup_records, its figures those of the steady-state records alone.

    Its records/s are its own steady-state numbers (after the warm-up records).  Its CPU,
    and the broker's, are a round's minus those of a run of the warm-up records only, made
    once as this contestant's warm-up: a JVM's start and exit alone cost 1.5 s of CPU on the
    reference machine, as much as 700,000 records of 100 B, and its first records pay for
    JIT compilation -- costs a long-lived producer does not pay per record.  That run's
    own CPU varies by about 0.1 s from one JVM to the next: rounds of less than a few
    hundred thousand records give Java figures that mean little (even below zero: such a
    figure per record, the client's or the broker's, is then left out, summary()).
    """

    def __init__(self, java, topic: str, records: int, warmup_records: int,
                 broker_pids: Sequence[int], throughput: int = -1):
        self.summaries = []  # ProducerPerformance's summary of each round
        self.records_sent = 0  # by the warm-up and the rounds so far
        self.baseline: Optional[Round] = None  # the warm-up records' run alone, by warm_up()
        self._java = java
        self._topic = topic
        self._records = records
        self._warmup_records = warmup_records
        self._throughput = throughput
        self._broker_pids = broker_pids

    def warm_up(self) -> None:
        self.baseline = measure(
            lambda: self._java.run(self._topic, self._warmup_records, 0, self._throughput),
            self._warmup_records, self._broker_pids)
        self.records_sent += self._warmup_records

    def round(self) -> Round:
        if self.baseline is None:
            raise RuntimeError("JavaContestant.round() before warm_up(): no baseline to "
                               "subtract")
        whole = measure(lambda: self.summaries.append(self._java.run(
            self._topic, self._records, self._warmup_records, self._throughput)),
            self._records + self._warmup_records, self._broker_pids)
        self.records_sent += self._records + self._warmup_records
        summary, base = self.summaries[-1], self.baseline
        return Round(self._records, summary.records / summary.records_per_s,
                     whole.client_cpu_s - base.client_cpu_s,
                     None if whole.broker_cpu_s is None
                     else whole.broker_cpu_s - base.broker_cpu_s,
                     whole.load_1m, whole.others_cores)


def alternate(contestants: Mapping, rounds: int) -> dict:
    """{key: [Round, ...]}: every contestant warmed up, then `rounds` rounds each, taken in
    turn (A B C A B C ...).

    Raises:
        ValueError: rounds < 1 (NETKAFKA_BENCH_ROUNDS=0 would leave no median to report).
    """
    if rounds < 1:
        raise ValueError(f"alternated rounds: at least 1 per contestant, got {rounds}")
    for contestant in contestants.values():
        contestant.warm_up()
    measured = {key: [] for key in contestants}
    for _ in range(rounds):
        for key, contestant in contestants.items():
            measured[key].append(contestant.round())
    return measured


def summary(measured: Sequence[Round]) -> dict:
    """A client's rounds as extra_info keys: medians over the rounds (msgs/s from the median
    round's time), and each round's own figures after them.  client_ns_per_record and
    broker_ns_per_record are None when their median is below zero (a JavaContestant's, a
    round's minus its warm-up run's: noise, not a cost), the broker's also without a broker
    figure in every round."""
    broker = [r.broker_ns_per_record for r in measured]
    broker_ns = None if None in broker else statistics.median(broker)
    client_ns = statistics.median(r.client_ns_per_record for r in measured)
    seconds = statistics.median(r.seconds for r in measured)
    records = measured[0].records
    return {
        "records": records, "seconds": round(seconds, 6),
        "msgs_per_s": round(records / seconds, 1),
        "client_ns_per_record": None if client_ns < 0 else round(client_ns, 1),
        "broker_ns_per_record": None if broker_ns is None or broker_ns < 0
        else round(broker_ns, 1),
        "load_1m": round(statistics.median(r.load_1m for r in measured), 2),
        "others_cores": round(statistics.median(r.others_cores for r in measured), 2),
        "rounds": len(measured),
        "round_seconds": [round(r.seconds, 6) for r in measured],
        "round_client_cpu_s": [round(r.client_cpu_s, 6) for r in measured],
        "round_broker_cpu_s": [None if r.broker_cpu_s is None else round(r.broker_cpu_s, 3)
                               for r in measured],
    }
