"""The benchmark report: pytest-benchmark JSON of bench/'s end-to-end suite in, Markdown
tables and a PNG chart out.

    python bench/report.py RESULTS.json [--out docs] [--readme README.md]     (make report)

writes OUT/benchmarks.md (the machine, the headline against confluent-kafka, then
throughput, latency, memory and transactions tables: each suite the JSON holds, the
others left out) and
OUT/throughput.png (per record size, records/s and the client's CPU per record of each
client), and with --readme replaces the part of that file between README_BEGIN and
README_END with the machine, the parameters, the headline and the chart.

The headline: on a machine whose cores the broker shares with the client, the broker sets
the pace of a run when it spends more CPU per record than the client does, and records/s
then tells more about the broker's share of the cores than about the client.  There the
client's CPU per record, against confluent-kafka's, is the figure that counts; elsewhere
records/s is.

It reads each benchmark's extra_info (the suite's own measurements, see
bench/e2e_results.py), or each of its "clients" when it has them (a throughput cell: a
row per client): throughput {suite: "throughput", client, mode, record_size, acks,
compression, batch_size, linger_ms, records, seconds, msgs_per_s, mb_per_s; optional:
client_ns_per_record, broker_ns_per_record}; latency {suite: "latency", client, rate,
records, p50_ms, p99_ms, max_ms; optional: acks, linger_ms, client_ns_per_record,
broker_ns_per_record}; memory {suite: "memory", client, mode, records, peak_rss_bytes,
rss_growth_bytes, allocs_per_record, bytes_per_record}; transactions {suite:
"transactions", client, mode, records_per_commit, msgs_per_s; optional:
client_ns_per_record, broker_ns_per_record, commit_p50_ms, commit_p99_ms,
transaction_duration_ms}; spark {suite: "spark", sink, rows, rows_per_s, spark,
spark_kafka_connector; since the data source also acks and executor_cpu_ns_per_row}.
Benchmarks without a suite (the micro-benchmarks) are not part of it.  An optional key
left out (older runs) or None (a broker that was not a local process, or a Java row's
client or broker figure below zero, rounds.summary(); older runs' negative ones alike) shows
as a dash.

A script of bench/ rather than a module of netkafka: it is about this repository's
benchmark runs, and matplotlib stays out of what users install.
"""
import argparse
import json
import math
import os
import sys
from collections import defaultdict
from pathlib import Path

REPORT_NAME = "benchmarks.md"
CHART_NAME = "throughput.png"
README_BEGIN = "<!-- benchmark-report:begin (written by make report) -->"
README_END = "<!-- benchmark-report:end -->"
# The baselines of the ratio columns: confluent-kafka with error-only delivery reports
# (its fastest way), and the Java producer.
CONFLUENT = ("confluent-kafka", "error_only")
JAVA = "java"
NETKAFKA = "netkafka"
# The baseline of the Spark table: Spark's own JVM sink (bench/test_bench_spark.py's name).
SPARK_SINK = "spark kafka sink"
MISSING = "–"
GIB = 2**30
MIB = 2**20


def load(path):
    """(suites {name: [extra_info, ...]}, the JSON's other facts) from a results file."""
    with open(path, encoding="utf-8") as file:
        results = json.load(file)
    suites, others = defaultdict(list), 0
    for benchmark in results.get("benchmarks", []):
        info = benchmark.get("extra_info", {})
        if "suite" in info:
            for row in info.get("clients", [info]):
                for key in ("client_ns_per_record", "broker_ns_per_record"):
                    if (row.get(key) or 0) < 0:
                        # A Java row of a run before rounds.summary() left such a figure
                        # out: noise below zero, not a cost (rounds.JavaContestant).
                        row[key] = None
                suites[row["suite"]].append(row)
        else:
            others += 1
    return dict(suites), {"machine_info": results.get("machine_info", {}),
                          "commit_info": results.get("commit_info", {}),
                          "datetime": results.get("datetime"), "others": others,
                          "source": Path(path).name,
                          # The suites note the load at each benchmark (an optional key).
                          "loads": [info["load_1m"] for rows in suites.values()
                                    for info in rows if "load_1m" in info]}


# ----------------------------------------------------------------------------------
# Markdown.

def machine_lines(facts):
    """The machine and the versions, from the run's own JSON."""
    machine = facts["machine_info"]
    env = machine.get("netkafka_environment")
    if env is None:
        # pytest-benchmark's own facts: no RAM, no client or broker versions.
        cpu = machine.get("cpu", {})
        return [f"- CPU: {cpu.get('brand_raw', 'unknown')}, {cpu.get('count', '?')} cores; "
                f"kernel {machine.get('system', '')} {machine.get('release', '')}; "
                f"Python {machine.get('python_version', '?')}",
                "- RAM, client and broker versions: not recorded in this JSON (the run lacked "
                "the netkafka.testing.environment plugin)"]
    clients = ", ".join(f"{name} {version or 'not installed'}"
                        for name, version in env["clients"].items())
    load = env.get("load_average")
    return [
        f"- CPU: {env['cpu_model']}, {env['cpu_cores']} cores; RAM {_gib(env['ram_bytes'])}; "
        f"kernel {env['kernel']}; {env['python']}",
        f"- netkafka {env['netkafka']}; {clients}; librdkafka {env['librdkafka']}; "
        f"Java producer (kafka-clients) {env['java_client']} on {env['java']}",
        f"- broker: Apache Kafka {env['broker']}, one node on 127.0.0.1"
        + (f"; load average at the end of the run {load[0]:.2f} / {load[1]:.2f} / "
           f"{load[2]:.2f} (1 / 5 / 15 min)" if load else "")
        + (f"; 1-minute load average during the benchmarks {min(facts['loads']):.2f} to "
           f"{max(facts['loads']):.2f}" if facts["loads"] else ""),
    ]


def _gib(size_bytes):
    return "unknown" if size_bytes is None else f"{size_bytes / GIB:.1f} GiB"


def throughput_groups(rows):
    """{(record_size, acks, compression): rows, fastest first}, groups in that order."""
    groups = defaultdict(list)
    for row in rows:
        groups[(row["record_size"], str(row["acks"]), row["compression"])].append(row)
    return {key: sorted(groups[key], key=lambda r: -r["msgs_per_s"])
            for key in sorted(groups, key=lambda k: (k[0], k[1] != "1", k[2] != "none", k[2]))}


def ratio(row, group, is_baseline, key="msgs_per_s"):
    """row's `key` over the baseline's, as the table shows it: the baseline is the group's
    row that is_baseline() picks with row's batch_size and linger_ms (a ratio between
    different batching would say little about the clients)."""
    baseline = next((r for r in group if is_baseline(r) and r["batch_size"] == row["batch_size"]
                     and r["linger_ms"] == row["linger_ms"]), None)
    if baseline is None or not baseline.get(key) or row.get(key) is None:
        return MISSING
    return f"{row[key] / baseline[key]:.2f}×"


def pace(row):
    """Who set the row's pace: "broker" when it spent more CPU per record than the client
    (the headline), "client" otherwise, MISSING without both figures."""
    client, broker = row.get("client_ns_per_record"), row.get("broker_ns_per_record")
    if client is None or broker is None:
        return MISSING
    return "broker" if broker > client else "client"


def _ns(value):
    return MISSING if value is None else f"{value:,.0f}"


def _is_confluent(row):
    return (row["client"], row["mode"]) == CONFLUENT


def _is_java(row):
    return row["client"] == JAVA


def throughput_lines(rows, title="Throughput"):
    lines = [f"## {title}", "",
             "Each round ends when every record is acknowledged; the clients' rounds "
             "alternate, and records/s and CPU per record are medians over a client's rounds. "
             " CPU per record (ns): the client's process, every thread, and the broker's.  "
             "Ratios are to confluent-kafka's `produce()` with error-only delivery reports and "
             "to the Java producer (`ProducerPerformance`) in the same group with the same "
             "batch_size and linger_ms: of records/s (higher is faster) and of CPU per record "
             "(lower is cheaper).  Pace: the broker's when it spent more CPU per record than "
             "the client.", ""]
    for (size, acks, compression), group in throughput_groups(rows).items():
        lines += [f"### {_size(size)}, acks={acks}, compression {compression}", "",
                  "| client | mode | batch_size / linger_ms | records | records/s | MB/s "
                  "| × confluent-kafka | × Java | client ns/record | broker ns/record "
                  "| client CPU × confluent-kafka | broker CPU × confluent-kafka | pace |",
                  "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
        for row in group:
            lines.append(f"| {row['client']} | {row['mode']} | {row['batch_size']:,} / "
                         f"{row['linger_ms']} | {row['records']:,} | {row['msgs_per_s']:,.0f} | "
                         f"{row['mb_per_s']:,.1f} | {ratio(row, group, _is_confluent)} | "
                         f"{ratio(row, group, _is_java)} | "
                         f"{_ns(row.get('client_ns_per_record'))} | "
                         f"{_ns(row.get('broker_ns_per_record'))} | "
                         f"{ratio(row, group, _is_confluent, 'client_ns_per_record')} | "
                         f"{ratio(row, group, _is_confluent, 'broker_ns_per_record')} | "
                         f"{pace(row)} |")
        lines.append("")
    return lines


def headline_lines(rows):
    """Each netkafka row against confluent-kafka's of its group: the pace, both ratios, and
    in bold the one that counts (client CPU where the broker set the pace)."""
    lines = ["| records | netkafka | pace | client CPU per record × confluent-kafka "
             "| records/s × confluent-kafka |", "|---|---|---|--:|--:|"]
    for (size, acks, compression), group in throughput_groups(rows).items():
        for row in group:
            speed = ratio(row, group, _is_confluent)
            if row["client"] != NETKAFKA or speed == MISSING:
                continue  # a cell without confluent-kafka, e.g. kafka-python's defaults
            cpu = ratio(row, group, _is_confluent, "client_ns_per_record")
            who = pace(row)
            if who == "broker" and cpu != MISSING:
                cpu = f"**{cpu}**"
            else:
                speed = f"**{speed}**"
            lines.append(f"| {_size(size)}, acks={acks}, {compression} | {row['mode']} | "
                         f"{who} | {cpu} | {speed} |")
    return lines


def _size(size_bytes):
    return f"{size_bytes // 1024} KiB" if size_bytes >= 1024 and size_bytes % 1024 == 0 \
        else f"{size_bytes} B"


def _batching(rows):
    """The (batch_size, linger_ms) pairs of rows, largest batch first."""
    pairs = sorted({(row["batch_size"], row["linger_ms"]) for row in rows}, reverse=True)
    return ", ".join(f"{batch:,} / {linger}" for batch, linger in pairs)


def latency_lines(rows):
    # acks and linger_ms are optional keys of the suite's: a run that leaves them out
    # shows a dash, and sorts before the runs that name them.
    lines = ["## Latency", "", "From send to acknowledgement, at a fixed rate; CPU per "
             "record (ns) of the client's process and of the broker while it ran.", "",
             "| client | mode | rate (records/s) | linger ms | acks | records | p50 ms "
             "| p99 ms | max ms | client ns/record | broker ns/record |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for row in sorted(rows, key=lambda r: (r["rate"], r.get("linger_ms", -1),
                                           str(r.get("acks", "")), r["client"],
                                           r.get("mode", ""))):
        lines.append(f"| {row['client']} | {row.get('mode', MISSING)} | {row['rate']:,} | "
                     f"{row.get('linger_ms', MISSING)} | {row.get('acks', MISSING)} | "
                     f"{row['records']:,} | "
                     f"{row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['max_ms']:.2f} | "
                     f"{_ns(row.get('client_ns_per_record'))} | "
                     f"{_ns(row.get('broker_ns_per_record'))} |")
    return lines + [""]


def memory_lines(rows):
    lines = ["## Memory", "",
             "| client | mode | records | peak RSS MiB | RSS growth MiB | allocations/record "
             "| bytes/record |",
             "|---|---|--:|--:|--:|--:|--:|"]
    for row in sorted(rows, key=lambda r: (r["client"], r["mode"])):
        lines.append(f"| {row['client']} | {row['mode']} | {row['records']:,} | "
                     f"{row['peak_rss_bytes'] / MIB:,.1f} | {row['rss_growth_bytes'] / MIB:,.1f} | "
                     f"{row['allocs_per_record']:.2f} | {row['bytes_per_record']:.1f} |")
    return lines + [""]


def transactions_lines(rows):
    lines = ["## Transactions", "",
             "Transactional production, 100 B records, acks=all: each transaction's records "
             "produced, then committed; rounds alternated, medians over a client's rounds.  "
             "Commit p50/p99: the wall time of `commit_transaction()` (its flush included).  "
             "The Java tool commits by time (`--transaction-duration-ms`, chosen so that its "
             "expected rate fills it with about as many records) and times no commit.", "",
             "| records per commit | client | mode | records/s | vs confluent-kafka "
             "| client ns/record | broker ns/record | commit p50 ms | commit p99 ms |",
             "|--:|---|---|--:|--:|--:|--:|--:|--:|"]
    by_commit = defaultdict(list)
    for row in rows:
        by_commit[row["records_per_commit"]].append(row)
    for per_commit in sorted(by_commit):
        group = sorted(by_commit[per_commit], key=lambda r: -r["msgs_per_s"])
        confluent = next((r for r in group if _is_confluent(r)), None)
        for row in group:
            versus = (MISSING if confluent is None
                      else f"{row['msgs_per_s'] / confluent['msgs_per_s']:.2f}×")
            java_note = (f" (every {row['transaction_duration_ms']} ms)"
                         if row.get("transaction_duration_ms") else "")
            lines.append(
                f"| {per_commit:,} | {row['client']}{java_note} | {row['mode']} | "
                f"{row['msgs_per_s']:,.0f} | {versus} | {_ns(row.get('client_ns_per_record'))} | "
                f"{_ns(row.get('broker_ns_per_record'))} | {_ms(row.get('commit_p50_ms'))} | "
                f"{_ms(row.get('commit_p99_ms'))} |")
    return lines + [""]


def _ms(value):
    return MISSING if value is None else f"{value:.1f}"


def spark_lines(rows):
    """Rows/s of each sink, and its ratio to Spark's own Kafka sink run on as many rows at
    the same acks (results from before acks was recorded ran at acks=1)."""
    def key(row):
        return row["rows"], str(row.get("acks", 1))

    spark_sink = {key(row): row["rows_per_s"] for row in rows if row["sink"] == SPARK_SINK}
    lines = ["## Spark", "",
             "One cached DataFrame of 100-byte values written to the same broker by each sink "
             "in one Spark session; executor CPU: the Spark JVM's and its Python workers' per "
             "row (local mode).", "",
             "| sink | rows | rows/s | x Spark's sink | Spark | connector | acks | "
             "executor CPU ns/row |",
             "|---|--:|--:|--:|---|---|---|--:|"]
    for row in sorted(rows, key=lambda r: (r["rows"], str(r.get("acks", 1)), -r["rows_per_s"])):
        base = spark_sink.get(key(row))
        ratio_cell = f"{row['rows_per_s'] / base:.2f}" if base else MISSING
        cpu = row.get("executor_cpu_ns_per_row")
        lines.append(f"| {row['sink']} | {row['rows']:,} | {row['rows_per_s']:,.0f} | "
                     f"{ratio_cell} | "
                     f"{row['spark']} | {row['spark_kafka_connector']} | {key(row)[1]} | "
                     f"{MISSING if cpu is None else f'{cpu:,.0f}'} |")
    return lines + [""]


HEADLINE_INTRO = (
    "The figure that counts in bold: where the broker set the pace (it spent more CPU per "
    "record than the client, on cores the two share), records/s follows the broker's share of "
    "the cores, and the client's CPU per record is what the client controls; elsewhere, "
    "records/s.")
def throughput_tls_lines(rows):
    return throughput_lines(rows, "Throughput over TLS (the secured broker's SSL listener)")


def throughput_sasl_ssl_lines(rows):
    return throughput_lines(rows, "Throughput over SASL_SSL (the secured broker's SASL_SSL "
                                  "listener, PLAIN)")


SECTIONS = {"throughput": throughput_lines, "throughput_tls": throughput_tls_lines,
            "throughput_sasl_ssl": throughput_sasl_ssl_lines,
            "latency": latency_lines, "memory": memory_lines,
            "transactions": transactions_lines, "spark": spark_lines}


def report_markdown(suites, facts, chart_name):
    commit = facts["commit_info"]
    lines = ["# Benchmark report", "",
             f"Written by `make report` (bench/report.py) from `{facts['source']}`, a run of "
             f"{facts['datetime'] or 'unknown date'} at commit "
             f"{str(commit.get('id', 'unknown'))[:12]}{' (dirty)' if commit.get('dirty') else ''}.",
             "", *machine_lines(facts), ""]
    if "throughput" in suites:
        lines += ["## Against confluent-kafka", "", HEADLINE_INTRO, "",
                  *headline_lines(suites["throughput"]), "",
                  f"![records/s and CPU per record of each client]({chart_name})", ""]
    for name, section in SECTIONS.items():
        if name in suites:
            lines += section(suites[name])
    absent = [name for name in SECTIONS if name not in suites]
    if absent:
        lines.append(f"Not in this run: {', '.join(absent)}.")
    if facts["others"]:
        lines.append(f"{facts['others']} micro-benchmarks of the JSON are not part of this "
                     f"report.")
    return "\n".join(lines).rstrip() + "\n"


def readme_block(suites, facts, out_dir, readme):
    """What goes between the README's markers: the machine, the parameters, the chart."""
    where = Path(os.path.relpath(out_dir, readme.parent))
    lines = [README_BEGIN, "", *machine_lines(facts), ""]
    if "throughput" in suites:
        params = suites["throughput"]
        lines += [f"Throughput of each client, record sizes "
                  f"{', '.join(_size(s) for s in sorted({r['record_size'] for r in params}))}, "
                  f"batch_size / linger_ms {_batching(params)}.  {HEADLINE_INTRO}", "",
                  *headline_lines(params), "",
                  f"![records/s and CPU per record of each client]"
                  f"({(where / CHART_NAME).as_posix()})", ""]
    lines += [f"Every table, with ratios to confluent-kafka and to Java: "
              f"[{(where / REPORT_NAME).as_posix()}]({(where / REPORT_NAME).as_posix()}).", "",
              README_END]
    return "\n".join(lines)


def update_readme(readme, block):
    text = readme.read_text(encoding="utf-8")
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        raise ValueError(f"{readme} has no {README_BEGIN!r} ... {README_END!r} block")
    readme.write_text(text[:begin] + block + text[end + len(README_END):], encoding="utf-8")


# ----------------------------------------------------------------------------------
# The chart.

def draw_throughput(rows, path):
    """Per record size a row of panels: bars of records/s, and bars of the client's CPU per
    record (log scale: the clients differ a hundredfold) labelled, where the broker set the
    pace, with their ratio to confluent-kafka's.  A cluster per (acks, compression), a bar
    per client and mode.  Without CPU figures (older runs) the records/s panels only."""
    import matplotlib
    matplotlib.use("Agg")  # files only: no display on a CI machine
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    groups = throughput_groups(rows)
    sizes = sorted({key[0] for key in groups})
    # A bar per client, mode and batching: rows batched differently are not one series.
    series = sorted({_series(r) for r in rows})
    batchings = {(batch, linger) for _, _, batch, linger in series}
    with_cpu = any(r.get("client_ns_per_record") is not None for r in rows)
    # tab20 pairs a dark and a light shade: 20 series before two share a colour.
    colors = plt.get_cmap("tab20")
    figure, axes = plt.subplots(len(sizes), 2 if with_cpu else 1,
                                figsize=(18 if with_cpu else 12, 3.4 * len(sizes)),
                                squeeze=False)
    width = 0.8 / len(series)
    for panels, size in zip(axes, sizes):
        keys = [key for key in groups if key[0] == size]
        for index, (client, mode, batch, linger) in enumerate(series):
            found = [next((r for r in groups[key]
                           if _series(r) == (client, mode, batch, linger)), None)
                     for key in keys]
            positions = [k + (index - (len(series) - 1) / 2) * width for k in range(len(keys))]
            label = f"{client} {mode}" + (f" ({batch:,} / {linger} ms)" if len(batchings) > 1
                                          else "")
            panels[0].bar(positions, [math.nan if r is None else r["msgs_per_s"] for r in found],
                          width, label=label, color=colors(index % 20))
            if with_cpu:
                _cpu_bars(panels[1], positions, found, keys, groups, width, colors(index % 20))
        for axis, (title, unit) in zip(panels, (("records", "records/s"),
                                                ("client CPU per record", "ns (log)"))):
            axis.set_xticks(range(len(keys)), [f"acks={acks}, {compression}"
                                               for _, acks, compression in keys])
            axis.set_title(f"{_size(size)} records" if title == "records"
                           else f"{_size(size)} records: {title}, lower is cheaper")
            axis.set_ylabel(unit)
            axis.grid(axis="y", alpha=0.3)
        panels[0].yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    # Beside the first row's last panel, where it covers no bar.
    axes[0, -1].legend(*axes[0, 0].get_legend_handles_labels(), fontsize="small",
                       loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _cpu_bars(axis, positions, found, keys, groups, width, color):
    heights = [math.nan if r is None or r.get("client_ns_per_record") is None
               else r["client_ns_per_record"] for r in found]
    axis.bar(positions, heights, width, color=color)
    axis.set_yscale("log")
    for x, height, row, key in zip(positions, heights, found, keys):
        if row is not None and pace(row) == "broker":
            cpu = ratio(row, groups[key], _is_confluent, "client_ns_per_record")
            if cpu != MISSING:
                axis.annotate(cpu, (x, height), ha="center", va="bottom", rotation=90,
                              fontsize=7)


def _series(row):
    return row["client"], row["mode"], row["batch_size"], row["linger_ms"]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench/report.py", description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="?",
                        help="pytest-benchmark JSON (--benchmark-json or --benchmark-autosave)")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="directory for the "
                        f"report ({REPORT_NAME}) and the chart ({CHART_NAME}); default docs")
    parser.add_argument("--readme", type=Path, help="a README whose report block to rewrite")
    args = parser.parse_args(argv)
    if not args.results:
        parser.error("no results JSON given (make bench saves one; or make report "
                     "BENCH_JSON=path)")
    try:
        suites, facts = load(args.results)
    except (OSError, ValueError) as exc:
        parser.error(f"results {args.results}: {exc}")
    if not suites:
        parser.error(f"results {args.results}: no end-to-end benchmark (extra_info with a "
                     f"'suite') in it")
    args.out.mkdir(parents=True, exist_ok=True)
    chart = args.out / CHART_NAME
    if "throughput" in suites:
        draw_throughput(suites["throughput"], chart)
    elif chart.exists():
        chart.unlink()  # a previous run's, which this report would not describe
    (args.out / REPORT_NAME).write_text(report_markdown(suites, facts, CHART_NAME),
                                        encoding="utf-8")
    if args.readme is not None:
        try:
            update_readme(args.readme, readme_block(suites, facts, args.out, args.readme))
        except (OSError, ValueError) as exc:
            parser.error(f"--readme: {exc}")
    print(f"wrote {args.out / REPORT_NAME}" + (f" and {chart}" if "throughput" in suites else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
