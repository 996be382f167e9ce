"""A short coverage-guided fuzz run of every target in tests/fuzz/targets.py.

Each target (the response decoders, the Reader, the record builder fed hostile records)
runs for FUZZ_SECONDS_PER_TARGET under atheris, over the build of tools/fuzz_build.sh:
the native modules compiled by clang with AddressSanitizer, UBSan and libFuzzer's
coverage hooks (made here if it is not there yet; `make test` makes it first).  The run
starts from the committed seeds (a real broker's answers) and a fresh corpus; any
finding -- an exception the target does not allow, a record read back different, a
sanitizer report -- fails the test with libFuzzer's report.  `make fuzz` runs the same
targets for 10 million executions each.
"""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ_DIR = os.environ.get("NETKAFKA_FUZZ_DIR", os.path.join(REPO, ".fuzz"))
SEEDS = os.path.join(REPO, "tests", "fuzz", "seeds", "responses")
TARGETS = ("responses", "reader", "records")
# About a minute in all.
FUZZ_SECONDS_PER_TARGET = int(os.environ.get("NETKAFKA_FUZZ_SECONDS", "20"))


@pytest.fixture(scope="module")
def fuzz_env():
    """The variables of a run over the sanitized build (FUZZ_DIR/env)."""
    subprocess.run([os.path.join(REPO, "tools", "fuzz_build.sh"), sys.executable, FUZZ_DIR],
                   check=True, timeout=3600)
    env = dict(os.environ)
    with open(os.path.join(FUZZ_DIR, "env")) as f:
        env.update(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    return env


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_finds_nothing(fuzz_env, target, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "fuzz", "targets.py"), target,
         f"-max_total_time={FUZZ_SECONDS_PER_TARGET}", "-print_final_stats=1",
         f"-artifact_prefix={tmp_path}/", str(corpus), SEEDS],
        env=fuzz_env, capture_output=True, text=True, timeout=FUZZ_SECONDS_PER_TARGET + 300)
    report = done.stderr[-6000:]
    assert done.returncode == 0, report
    # The run really went through the sanitized build: netkafka from FUZZ_DIR, the
    # native modules' coverage counters registered with the preloaded libFuzzer (not
    # with the ASan runtime's stand-ins), and the inputs ran.
    assert f"targets: netkafka from {os.path.join(FUZZ_DIR, 'tree', 'netkafka')}\n" in done.stderr
    assert re.search(r"INFO: Loaded \d+ modules +\(\d+ inline 8-bit counters\)", done.stderr)
    assert "other than libFuzzer" not in done.stderr, report
    runs = re.search(r"stat::number_of_executed_units: (\d+)", done.stderr)
    assert runs and int(runs.group(1)) > 1000, report
    assert not list(tmp_path.glob("crash-*")), report
