# The README's two commands are `make demo` and `make test`; every other target is
# a step they take.  Each step is idempotent and skipped when already done.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
KAFKA_STAMP := .cache/kafka/.fetched
KAFKA_3_9_STAMP := .cache/kafka-3.9/.fetched

.PHONY: all kerberos venv build kafka spark-kafka demo test test-versions chaos soak bench report clean wal-kill big-topic \
	clang fuzz-build fuzz fuzz-seeds

all: test

# MIT Kerberos from the OS packages: the KDC the GSSAPI tests start (tests/test_sasl_gssapi.py,
# part of `make test`: one KDC and one broker, about 25 s) and the headers the gssapi package
# (the test extra) builds against.  apt-get runs only when a package is missing.
KERBEROS_PACKAGES := krb5-kdc krb5-admin-server libkrb5-dev krb5-user
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
kerberos:
	@missing=$$(for package in $(KERBEROS_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q "ok installed" || echo $$package; \
	done); \
	if [ -n "$$missing" ]; then \
		echo "apt-get: installing" $$missing; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

# Virtual environment with the package's and the tests' dependencies.  The
# package itself is installed editable, without build isolation, so that
# `make build` can recompile the native modules in place.
VENV_EXTRA ?= test
$(VENV_STAMP): pyproject.toml setup.py | kerberos
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0"
	$(PY) -m pip install --quiet --no-build-isolation -e ".[$(VENV_EXTRA)]"
	touch $@

venv: $(VENV_STAMP)

# Recompile whatever native module changed (Cython and setuptools skip the rest).
build: $(VENV_STAMP)
	$(PY) setup.py --quiet build_ext --inplace -j 2

# Apache Kafka's jars, from Maven Central, into .cache/ (ignored by git).
$(KAFKA_STAMP): pom.xml
	mvn --batch-mode --quiet -f pom.xml dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory=$(CURDIR)/.cache/kafka/libs
	touch $@

# Kafka 3.9 as well, the last line that takes Produce v0-v2: the tests run on both.
$(KAFKA_3_9_STAMP): kafka-3.9.pom.xml
	mvn --batch-mode --quiet -f kafka-3.9.pom.xml dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory=$(CURDIR)/.cache/kafka-3.9/libs
	touch $@

kafka: $(KAFKA_STAMP) $(KAFKA_3_9_STAMP)

# Spark's own Kafka sink, which bench/test_bench_spark.py measures netkafka against and
# tests/test_spark_datasource.py writes the same DataFrame through (so `make test` needs it): the
# spark-sql-kafka-0-10 connector of the installed pyspark's Spark and Scala versions
# (bench/spark_kafka.py), with what pyspark lacks of its dependencies, into
# .cache/spark-kafka/<spark>_<scala>/.  pyspark can reach pip before its connector reaches
# Maven; until it does, the release named by SPARK_KAFKA_FALLBACK is fetched instead, and the
# benchmark says so.  Delete that directory to fetch again.
SPARK_KAFKA_FALLBACK ?= 4.2.0
spark-kafka: $(VENV_STAMP)
	@dir=$$($(PY) bench/spark_kafka.py directory) || exit 1; \
	test -f $$dir/.fetched && exit 0; \
	for version in $$($(PY) bench/spark_kafka.py spark-version) $(SPARK_KAFKA_FALLBACK); do \
		echo "mvn: spark-sql-kafka-0-10 $$version into $$dir"; \
		mvn --batch-mode --quiet -f bench/spark-kafka.pom.xml dependency:copy-dependencies \
			-DincludeScope=runtime -Dspark.version=$$version \
			-Dscala.binary.version=$$($(PY) bench/spark_kafka.py scala-version) \
			-DoutputDirectory=$$dir >/dev/null && touch $$dir/.fetched && exit 0; \
		echo "spark-sql-kafka-0-10 $$version: not found by mvn"; \
	done; exit 1

# e.g. make demo DEMO_ARGS="--records 100000 --compression zstd"
DEMO_ARGS ?=
demo: build kafka
	$(PY) -m netkafka.tools.demo $(DEMO_ARGS)

# lint-imports first: an upward import between the layers (pyproject.toml's contract) fails
# the run before any broker starts; then mypy --strict on examples/ and tests/typing/ as a
# user's type checker reads the stubs (pyproject.toml's [tool.mypy]).
test: kerberos build kafka spark-kafka fuzz-build
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(PY) -m pytest tests
	$(MAKE) test-versions

# The other supported Pythons (requires-python >= 3.10): each gets a venv .venv-X.Y with
# the package's dependencies and the test-core extra, builds the native modules in place
# for its own ABI, and runs the core subset (CORE_TESTS: native encoder, CRC, protocol,
# real-broker round trips) against its own broker.  The interpreters come from pyenv
# (the CI machine's image has these versions); a missing one fails the run naming it.
PYENV_ROOT ?= /root/.pyenv
OTHER_PYTHONS ?= 3.10.13 3.12.1 3.13.0
CORE_TESTS ?= tests/test_records.py tests/test_crc32c.py tests/test_protocol.py \
	tests/test_producer.py
CORE_SELECT ?= round_trip or keyed or every_acks or callbacks or serializers or \
	kafka_python or not test_producer
test-versions: kafka
	@for version in $(OTHER_PYTHONS); do \
		python=$(PYENV_ROOT)/versions/$$version/bin/python; \
		test -x $$python || { echo "Python $$version is missing: $$python not found" \
			"(pyenv install $$version, or set OTHER_PYTHONS / PYENV_ROOT)"; exit 1; }; \
	done
	@for version in $(OTHER_PYTHONS); do \
		venv=.venv-$${version%.*}; \
		echo "== Python $$version: $(CORE_TESTS) in $$venv"; \
		if [ ! -f $$venv/.installed ] || [ pyproject.toml -nt $$venv/.installed ]; then \
			$(PYENV_ROOT)/versions/$$version/bin/python -m venv $$venv && \
			$$venv/bin/python -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0" \
				$$($(PY) -c "$$CORE_REQUIREMENTS") && touch $$venv/.installed || exit 1; \
		fi; \
		$$venv/bin/python setup.py --quiet build_ext --inplace || exit 1; \
		$$venv/bin/python -m pytest -q $(CORE_TESTS) -k "$(CORE_SELECT)" || exit 1; \
	done

# The requirements of the core subset: the package's and the test-core extra's, installed
# without building netkafka a second time (each venv compiles it in place once).
define CORE_REQUIREMENTS
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(" ".join(project["dependencies"] + project["optional-dependencies"]["test-core"]))
endef
export CORE_REQUIREMENTS

# Coverage-guided fuzzing of the native code (tests/fuzz/targets.py: the response
# decoders, the Reader, the record builder fed hostile records) with atheris, the test
# extra's fuzzer.  clang from the OS packages: the native modules are rebuilt by
# tools/fuzz_build.sh into FUZZ_DIR with AddressSanitizer, UBSan and libFuzzer's coverage
# hooks (-fsanitize=fuzzer-no-link), which gcc does not have.  `make fuzz` runs each
# target for FUZZ_RUNS executions, seeded with a real broker's answers
# (tests/fuzz/seeds, refreshed by `make fuzz-seeds`); a finding stops it, saved under
# FUZZ_DIR/findings.  `make test` fuzzes each target for 20 s (tests/test_fuzz.py).
FUZZ_DIR ?= .fuzz
FUZZ_RUNS ?= 10000000
FUZZ_TARGETS ?= responses reader records
FUZZ_ARGS ?=  # more libFuzzer flags, e.g. -max_total_time=600 -jobs=2
CLANG_PACKAGES := clang-14 libclang-rt-14-dev
clang:
	@missing=$$(for package in $(CLANG_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$package 2>/dev/null | grep -q "ok installed" || echo $$package; \
	done); \
	if [ -n "$$missing" ] && ! command -v clang >/dev/null; then \
		echo "apt-get: installing" $$missing; \
		$(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; \
	fi

fuzz-build: $(VENV_STAMP) clang
	tools/fuzz_build.sh $(PY) $(FUZZ_DIR)

fuzz: fuzz-build
	@mkdir -p $(FUZZ_DIR)/findings
	@for target in $(FUZZ_TARGETS); do \
		mkdir -p $(FUZZ_DIR)/corpus/$$target; \
		echo "== fuzz $$target: $(FUZZ_RUNS) executions"; \
		env $$(cat $(FUZZ_DIR)/env) $(PY) tests/fuzz/targets.py $$target \
			-runs=$(FUZZ_RUNS) -rss_limit_mb=4096 -print_final_stats=1 $(FUZZ_ARGS) \
			-artifact_prefix=$(FUZZ_DIR)/findings/$$target- \
			$(FUZZ_DIR)/corpus/$$target tests/fuzz/seeds/responses || exit 1; \
	done

fuzz-seeds: build kafka
	$(PY) tests/fuzz/capture_seeds.py

# The faults of tests/test_chaos.py (SIGKILL, rolling restart, SIGSTOP, black hole on the
# three-node cluster), each run CHAOS_ROUNDS times: a race may show in one run of several.
# `make test` runs each once.
CHAOS_ROUNDS ?= 5
chaos: build kafka
	NETKAFKA_CHAOS_ROUNDS=$(CHAOS_ROUNDS) $(PY) -m pytest tests/test_chaos.py

# The soak run (netkafka/testing/soak.py): SOAK_RATE records/s for SOAK_MINUTES while the
# broker restarts every SOAK_RESTART_MINUTES; RSS, open files and threads every minute; fails
# if any grows after the first restart (the rule is in the module's docstring) or a record
# is lost.
SOAK_MINUTES ?= 30
SOAK_RESTART_MINUTES ?= 5
SOAK_RATE ?= 1000
soak: build kafka
	$(PY) -m netkafka.testing.soak --minutes $(SOAK_MINUTES) \
		--restart-every-minutes $(SOAK_RESTART_MINUTES) --rate $(SOAK_RATE)

# A topic of BIG_TOPIC_PARTITIONS partitions on a broker of its own, whose heap is sized
# for them (tests/test_metadata_partitions.py::test_a_topic_of_many_partitions): creating
# 10,000 partitions on one broker takes 90-210 s, so `make test` skips it.
BIG_TOPIC_PARTITIONS ?= 10000
big-topic: build kafka
	NETKAFKA_BIG_TOPIC_PARTITIONS=$(BIG_TOPIC_PARTITIONS) $(PY) -m pytest \
		tests/test_metadata_partitions.py -k many_partitions -s

# The write-ahead log's kill harness at length (tests/test_wal_kill.py): a producer at
# steady load SIGKILLed 200 times with wal_fsync='always' (and 50 with 'interval'),
# restarted on its WAL each time; then every returned send must be in the topic
# exactly once, in per-partition order.  `make test` runs it with 20 (and 5).  Then, on
# the three-node cluster, 20 replays each during a broker's kill and restart (2 in `make
# test`).
WAL_KILLS ?= 200
WAL_RESTARTS ?= 20
wal-kill: build kafka
	NETKAFKA_WAL_KILLS=$(WAL_KILLS) NETKAFKA_WAL_RESTARTS=$(WAL_RESTARTS) $(PY) -m pytest \
		tests/test_wal_kill.py -k "killed_again or broker_restart"

# The benchmarks, each against its peers and the session's broker.  Results: tables on the
# terminal, and pytest-benchmark's JSON numbered under .benchmarks/ (make report reads the
# newest; the end-to-end suites' records are in each benchmark's extra_info).  A part:
# make bench BENCH_ARGS="-k e2e_latency" (or "-k 100B", ...); the whole end-to-end matrix:
# NETKAFKA_BENCH_FULL=1 make bench.
BENCH_ARGS ?=
bench: build kafka spark-kafka
	$(PY) -m pytest bench --benchmark-only --benchmark-autosave $(BENCH_ARGS)

# The benchmark report (bench/report.py): docs/benchmarks.md, docs/throughput.png and the
# README's report block, from the newest JSON pytest-benchmark saved under .benchmarks/
# (--benchmark-autosave), or from BENCH_JSON=path.
BENCH_JSON ?= $(lastword $(sort $(wildcard .benchmarks/*/*.json)))
report: $(VENV_STAMP)
	$(PY) bench/report.py $(BENCH_JSON) --out docs --readme README.md

# setup.py's clean removes its build directory (NETKAFKA_BUILD_DIR, outside the tree).
clean:
	find netkafka \( -name "*.so" -o -name "*.c" -o -name "*.html" \) -delete; rm -rf build
	$(PY) setup.py --quiet clean --all
