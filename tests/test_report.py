"""bench/report.py on the JSON of a real (tiny) pytest-benchmark run: every table cell and
ratio must come from that input, and the chart must be a PNG of the right shape.

The run is tests/report_sample_bench.py against the session's broker, made once per module
in a subprocess, as `make bench` makes its JSON.
"""
import copy
import importlib.metadata
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib.image
import pytest

import netkafka

REPO = Path(netkafka.__file__).resolve().parents[1]
REPORT = REPO / "bench" / "report.py"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def results(kafka_broker, tmp_path_factory):
    """(the JSON as a dict, its path) of one run of the sample benchmarks."""
    directory = tmp_path_factory.mktemp("sample-bench")
    path = directory / "results.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "bench")]),
               NETKAFKA_BOOTSTRAP=kafka_broker.bootstrap)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", str(REPO / "tests" / "report_sample_bench.py"), "-q",
         "-p", "netkafka.testing.environment", "-p", "no:cacheprovider",
         f"--benchmark-json={path}", f"--basetemp={directory / 'tmp'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(path.read_text()), path


def run_report(results_path, out, *extra):
    return subprocess.run([sys.executable, str(REPORT), str(results_path), "--out", str(out),
                           *map(str, extra)], capture_output=True, text=True, timeout=120)


def write_json(data, path):
    path.write_text(json.dumps(data))
    return path


def suite(data, name):
    """The rows of a suite: a throughput benchmark holds a row per client."""
    return [row for b in data["benchmarks"] if b["extra_info"].get("suite") == name
            for row in b["extra_info"].get("clients", [b["extra_info"]])]


def ns(value):
    return "–" if value is None else f"{value:,.0f}"


def times(value, baseline):
    # As bench/report.ratio: a baseline of 0 (a tiny run's CPU below the clock's grain)
    # gives no ratio.
    return "–" if value is None or not baseline else f"{value / baseline:.2f}×"


def pace(info):
    client, broker = info["client_ns_per_record"], info["broker_ns_per_record"]
    if client is None or broker is None:  # a Java row's figure below zero (rounds.summary())
        return "–"
    return "broker" if broker > client else "client"


def tables(markdown):
    """{heading: [row cells]} for every table, under the nearest heading above it."""
    found, heading = defaultdict(list), None
    for line in markdown.splitlines():
        if line.startswith("#"):
            heading = line
        elif line.startswith("| ") and not line.startswith("| client"):
            found[heading].append([cell.strip() for cell in line.strip("|").split("|")])
    return found


@pytest.fixture(scope="module")
def report(results, tmp_path_factory):
    """The Markdown and the output directory of the report of the whole run."""
    out = tmp_path_factory.mktemp("docs")
    done = run_report(results[1], out)
    assert done.returncode == 0, done.stderr
    return (out / "benchmarks.md").read_text(), out


def test_throughput_rows_and_ratios_come_from_the_input(results, report):
    data, markdown = results[0], report[0]
    groups = defaultdict(list)
    for info in suite(data, "throughput"):
        groups[info["record_size"], info["acks"], info["compression"]].append(info)
    assert len(groups) == 2  # the sample's: acks=1 without compression, acks=all with lz4
    found = tables(markdown)
    for (size, acks, compression), infos in groups.items():
        rows = found.pop(f"### {size} B, acks={acks}, compression {compression}")
        confluent = next(i for i in infos if i["client"] == "confluent-kafka")
        java = next((i["msgs_per_s"] for i in infos if i["client"] == "java"), None)
        expected = [[i["client"], i["mode"], f"{i['batch_size']:,} / {i['linger_ms']}",
                     f"{i['records']:,}", f"{i['msgs_per_s']:,.0f}", f"{i['mb_per_s']:,.1f}",
                     times(i["msgs_per_s"], confluent["msgs_per_s"]), times(i["msgs_per_s"], java),
                     ns(i["client_ns_per_record"]), ns(i["broker_ns_per_record"]),
                     times(i["client_ns_per_record"], confluent["client_ns_per_record"]),
                     times(i["broker_ns_per_record"], confluent["broker_ns_per_record"]),
                     pace(i)]
                    for i in sorted(infos, key=lambda i: -i["msgs_per_s"])]
        assert rows == expected
    assert set(found) == {"## Against confluent-kafka", "## Latency", "## Memory"}


def test_every_row_was_measured_with_both_cpus(results):
    """The sample's broker was found by its port, and each round cost its client CPU.
    Java's broker figure, its rounds' minus its warm-up run's, may be below zero in so
    short a run, and then left out (rounds.summary())."""
    rows = suite(results[0], "throughput") + suite(results[0], "latency")
    assert all(row["broker_ns_per_record"] is not None for row in rows if row["client"] != "java")
    assert all(row["client_ns_per_record"] > 0 for row in rows if row["client"] != "java")
    throughput = suite(results[0], "throughput")
    assert {row["rounds"] for row in throughput} == {2}
    assert all(len(row["round_client_cpu_s"]) == 2 for row in throughput)


def test_headline_bolds_client_cpu_where_the_broker_set_the_pace(results, tmp_path):
    data = copy.deepcopy(results[0])
    rows = suite(data, "throughput")
    netkafka = [row for row in rows if row["client"] == "netkafka"]
    broker_paced, client_paced = netkafka[0], netkafka[1]
    broker_paced["broker_ns_per_record"] = broker_paced["client_ns_per_record"] * 2
    client_paced["broker_ns_per_record"] = client_paced["client_ns_per_record"] / 2
    done = run_report(write_json(data, tmp_path / "paced.json"), tmp_path / "docs")
    assert done.returncode == 0, done.stderr
    header, *headline = tables((tmp_path / "docs" / "benchmarks.md").read_text())[
        "## Against confluent-kafka"]
    assert header[:3] == ["records", "netkafka", "pace"]
    assert len(headline) == len(netkafka)  # a line per netkafka row, none for the others
    for row, line in ((broker_paced, "broker"), (client_paced, "client")):
        confluent = next(r for r in rows if r["client"] == "confluent-kafka"
                         and (r["record_size"], r["acks"], r["compression"])
                         == (row["record_size"], row["acks"], row["compression"]))
        cpu = times(row["client_ns_per_record"], confluent["client_ns_per_record"])
        speed = times(row["msgs_per_s"], confluent["msgs_per_s"])
        where = (f"{row['record_size']} B, acks={row['acks']}, {row['compression']}",
                 row["mode"], line)
        expected = [*where, f"**{cpu}**", speed] if line == "broker" else [*where, cpu,
                                                                           f"**{speed}**"]
        assert expected in headline


def test_rows_of_older_runs_without_cpu_show_dashes(results, tmp_path):
    """A run of before the CPU columns: a benchmark per row, no CPU keys."""
    data = copy.deepcopy(results[0])
    flat = []
    for benchmark in data["benchmarks"]:
        for row in benchmark["extra_info"].get("clients", [benchmark["extra_info"]]):
            for key in ("client_ns_per_record", "broker_ns_per_record"):
                row.pop(key, None)
            flat.append({**benchmark, "extra_info": row})
    data["benchmarks"] = flat
    out = tmp_path / "docs"
    done = run_report(write_json(data, tmp_path / "old.json"), out)
    assert done.returncode == 0, done.stderr
    found = tables((out / "benchmarks.md").read_text())
    throughput = [row for heading, rows in found.items() if heading.startswith("### ")
                  for row in rows]
    assert len(throughput) == len(suite(results[0], "throughput"))
    assert all(row[8:] == ["–"] * 5 for row in throughput)
    assert all(row[9:] == ["–", "–"] for row in found["## Latency"])
    # Only the records/s panel: one 12 x 3.4 inch panel at 100 dpi.
    assert matplotlib.image.imread(out / "throughput.png").shape[:2] == (340, 1200)


@pytest.mark.parametrize("key, columns", [
    ("client_ns_per_record", (8, 10, 12)), ("broker_ns_per_record", (9, 11, 12))])
def test_a_cpu_below_zero_of_an_older_run_shows_a_dash(results, tmp_path, key, columns):
    """A Java row's client or broker CPU per record, a round's minus its warm-up run's,
    could be below zero (rounds.JavaContestant); runs from before rounds.summary() left it
    out have it in their JSON, and the report printed a negative cost, its ratio and a
    pace."""
    data = copy.deepcopy(results[0])
    (java,) = [row for row in suite(data, "throughput") if row["client"] == "java"]
    java[key] = -1234.5
    done = run_report(write_json(data, tmp_path / "negative.json"), tmp_path / "docs")
    assert done.returncode == 0, done.stderr
    rows = tables((tmp_path / "docs" / "benchmarks.md").read_text())[
        f"### {java['record_size']} B, acks={java['acks']}, compression {java['compression']}"]
    (row,) = [row for row in rows if row[0] == "java"]
    # the ns/record, its ratio to confluent-kafka's, and the pace that needs it
    assert tuple(row[column] for column in columns) == ("–", "–", "–")


def test_ratios_compare_rows_of_equal_batching(results, tmp_path):
    data = copy.deepcopy(results[0])
    (java,) = [row for row in suite(data, "throughput") if row["client"] == "java"]
    java["batch_size"] *= 2  # the same run, said to batch differently: no longer comparable
    done = run_report(write_json(data, tmp_path / "java-batching.json"), tmp_path / "docs")
    assert done.returncode == 0, done.stderr
    rows = tables((tmp_path / "docs" / "benchmarks.md").read_text())[
        f"### {java['record_size']} B, acks={java['acks']}, compression {java['compression']}"]
    by_client = {(row[0], row[1]): row for row in rows}
    assert by_client["java", java["mode"]][6:8] == ["–", "1.00×"]
    assert by_client["java", java["mode"]][10:12] == ["–", "–"]  # CPU ratios alike
    assert all(row[7] == "–" for key, row in by_client.items() if key[0] != "java")
    assert by_client["confluent-kafka", "error_only"][6] == "1.00×"
    # The broker's CPU is read in clock ticks (10 ms): in this tiny run it may have used
    # none during confluent-kafka's rounds, and there is no ratio to nothing.
    (confluent,) = [row for row in suite(data, "throughput") if row["client"] == "confluent-kafka"
                    and row["record_size"] == java["record_size"] and row["acks"] == java["acks"]
                    and row["compression"] == java["compression"]]
    broker_ratio = "1.00×" if confluent["broker_ns_per_record"] else "–"
    assert by_client["confluent-kafka", "error_only"][10:12] == ["1.00×", broker_ratio]


def test_latency_and_memory_tables_come_from_the_input(results, report):
    data, found = results[0], tables(report[0])
    assert found["## Latency"] == [
        [i["client"], i["mode"], f"{i['rate']:,}", str(i["linger_ms"]), i["acks"],
         f"{i['records']:,}", f"{i['p50_ms']:.2f}", f"{i['p99_ms']:.2f}", f"{i['max_ms']:.2f}",
         ns(i["client_ns_per_record"]), ns(i["broker_ns_per_record"])]
        for i in sorted(suite(data, "latency"), key=lambda i: (i["rate"], i["client"]))]
    (memory,) = suite(data, "memory")
    assert found["## Memory"] == [[
        memory["client"], memory["mode"], f"{memory['records']:,}",
        f"{memory['peak_rss_bytes'] / 2**20:,.1f}", f"{memory['rss_growth_bytes'] / 2**20:,.1f}",
        f"{memory['allocs_per_record']:.2f}", f"{memory['bytes_per_record']:.1f}"]]


def test_latency_rows_differing_in_linger_and_acks_are_told_apart(results, tmp_path):
    data = copy.deepcopy(results[0])
    latency = [b for b in data["benchmarks"] if b["extra_info"]["suite"] == "latency"]
    busy = copy.deepcopy(latency[0])  # the same rate, said to linger and to wait for all
    busy["extra_info"].update(linger_ms=5, acks="all", p50_ms=123.456)
    bare = copy.deepcopy(latency[0])  # an older run's row, without the optional keys
    del bare["extra_info"]["linger_ms"], bare["extra_info"]["acks"]
    bare["extra_info"]["p50_ms"] = 654.321
    data["benchmarks"] += [busy, bare]
    done = run_report(write_json(data, tmp_path / "lingers.json"), tmp_path / "docs")
    assert done.returncode == 0, done.stderr
    rows = tables((tmp_path / "docs" / "benchmarks.md").read_text())["## Latency"]
    client = busy["extra_info"]["client"]
    assert [(row[3], row[4], row[6]) for row in rows if row[0] == client] == [
        ("–", "–", "654.32"), ("0", "1", f"{latency[0]['extra_info']['p50_ms']:.2f}"),
        ("5", "all", "123.46")]


def test_the_chart_is_a_png_with_a_row_of_panels_per_record_size(report):
    chart = report[1] / "throughput.png"
    assert chart.read_bytes()[:8] == PNG_SIGNATURE
    pixels = matplotlib.image.imread(chart)
    # One record size: records/s and CPU per record, an 18 x 3.4 inch row at 100 dpi.
    assert pixels.shape[:2] == (340, 1800)
    assert pixels[:, :900, :3].std() > 0.05 and pixels[:, 900:, :3].std() > 0.05  # both drawn
    assert "![records/s and CPU per record of each client](throughput.png)" in report[0]


def test_machine_and_versions_are_stated(results, report):
    environment = results[0]["machine_info"]["netkafka_environment"]
    markdown = report[0]
    assert f"CPU: {environment['cpu_model']}, {os.cpu_count()} cores" in markdown
    assert f"confluent-kafka {importlib.metadata.version('confluent-kafka')}" in markdown
    assert f"aiokafka {importlib.metadata.version('aiokafka')}" in markdown
    assert f"kafka-python {importlib.metadata.version('kafka-python')}" in markdown
    assert environment["broker"].startswith("4.")
    assert f"Apache Kafka {environment['broker']}" in markdown
    assert f"RAM {environment['ram_bytes'] / 2**30:.1f} GiB" in markdown
    assert "load average at the end of the run" in markdown
    # Every suite's rows note their load (the sample run has several suites).
    loads = [row["load_1m"] for b in results[0]["benchmarks"] if "suite" in b["extra_info"]
             for row in b["extra_info"].get("clients", [b["extra_info"]]) if "load_1m" in row]
    assert f"load average during the benchmarks {min(loads):.2f} to {max(loads):.2f}" in markdown


def test_spark_rows_are_ratioed_to_spark_sink_of_equal_rows(results, tmp_path):
    # The Spark benchmark takes minutes, so its rows are written here in its extra_info
    # schema (bench/test_bench_spark.py) beside the real run's.
    data = copy.deepcopy(results[0])
    versions = {"spark": "4.3.0", "spark_kafka_connector": "4.2.0"}
    sinks = [("spark kafka sink", 1000, 300.0), ("netkafka arrow emitter", 1000, 1200.0),
             ("netkafka partition sink", 1000, 150.0), ("netkafka arrow emitter", 50, 99.0)]
    data["benchmarks"] += [{**data["benchmarks"][0], "extra_info": dict(
        suite="spark", sink=sink, rows=rows, rows_per_s=rate, **versions)}
        for sink, rows, rate in sinks]
    # The data source's rows carry acks and the executor's CPU: ratioed at equal acks.
    data["benchmarks"] += [{**data["benchmarks"][0], "extra_info": dict(
        suite="spark", sink=sink, rows=1000, rows_per_s=rate, acks="all",
        executor_cpu_ns_per_row=cpu, **versions)}
        for sink, rate, cpu in (("spark kafka sink", 200.0, 900.0),
                                ("netkafka data source", 500.0, 400.0))]
    done = run_report(write_json(data, tmp_path / "spark.json"), tmp_path / "docs")
    assert done.returncode == 0, done.stderr
    header, *rows = tables((tmp_path / "docs" / "benchmarks.md").read_text())["## Spark"]
    assert header[:4] == ["sink", "rows", "rows/s", "x Spark's sink"]
    assert [row[:4] for row in rows] == [
        ["netkafka arrow emitter", "50", "99", "–"],
        ["netkafka arrow emitter", "1,000", "1,200", "4.00"],
        ["spark kafka sink", "1,000", "300", "1.00"],
        ["netkafka partition sink", "1,000", "150", "0.50"],
        ["netkafka data source", "1,000", "500", "2.50"],
        ["spark kafka sink", "1,000", "200", "1.00"]]
    assert rows[0][4:] == ["4.3.0", "4.2.0", "1", "–"]
    assert rows[-1][4:] == ["4.3.0", "4.2.0", "all", "900"]


def test_absent_suites_are_left_out(results, tmp_path):
    data = copy.deepcopy(results[0])
    data["benchmarks"] = [b for b in data["benchmarks"] if b["extra_info"]["suite"] == "latency"]
    del data["machine_info"]["netkafka_environment"]
    out = tmp_path / "docs"
    out.mkdir()
    (out / "throughput.png").write_bytes(PNG_SIGNATURE)  # a previous report's chart
    done = run_report(write_json(data, tmp_path / "latency-only.json"), out)
    assert done.returncode == 0, done.stderr
    markdown = (out / "benchmarks.md").read_text()
    assert "## Latency" in markdown
    assert "## Throughput" not in markdown and "## Memory" not in markdown
    assert ("Not in this run: throughput, throughput_tls, throughput_sasl_ssl, memory, "
            "transactions, spark.") in markdown
    assert not (out / "throughput.png").exists() and "throughput.png" not in markdown
    # Without the environment plugin, pytest-benchmark's own facts are stated.
    assert data["machine_info"]["cpu"]["brand_raw"] in markdown
    assert "not recorded in this JSON" in markdown


def test_readme_block_is_rewritten_in_place(results, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# project\n\nbefore\n\n<!-- benchmark-report:begin (written by make "
                      "report) -->\nold numbers\n<!-- benchmark-report:end -->\n\nafter\n")
    done = run_report(results[1], tmp_path / "docs", "--readme", readme)
    assert done.returncode == 0, done.stderr
    text = readme.read_text()
    assert text.startswith("# project\n\nbefore\n\n<!-- benchmark-report:begin")
    assert text.endswith("<!-- benchmark-report:end -->\n\nafter\n")
    assert "old numbers" not in text
    assert "![records/s and CPU per record of each client](docs/throughput.png)" in text
    assert "| records | netkafka | pace | client CPU per record × confluent-kafka" in text
    assert "[docs/benchmarks.md](docs/benchmarks.md)" in text
    assert "batch_size / linger_ms 262,144 / 5." in text  # the sample's parameters


@pytest.mark.parametrize("case", ["no json", "no suite", "readme without block"])
def test_bad_input_is_an_argument_error(results, tmp_path, case):
    readme = tmp_path / "README.md"
    readme.write_text("# no report block here\n")
    if case == "no json":
        done = subprocess.run([sys.executable, str(REPORT)], capture_output=True, text=True)
        named = "no results JSON"
    elif case == "no suite":
        empty = write_json(dict(results[0], benchmarks=[]), tmp_path / "empty.json")
        done = run_report(empty, tmp_path / "docs")
        named = "no end-to-end benchmark"
    else:
        done = run_report(results[1], tmp_path / "docs", "--readme", readme)
        named = "--readme"
    assert done.returncode == 2
    assert named in done.stderr
