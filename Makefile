# The README's two commands are `make demo` and `make test`; every other target is
# a step they take.  Each step is idempotent and skipped when already done.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
KAFKA_STAMP := .cache/kafka/.fetched
KAFKA_3_9_STAMP := .cache/kafka-3.9/.fetched

.PHONY: all venv build kafka spark-kafka demo test bench report clean wal-kill

all: test

# Virtual environment with the package's and the tests' dependencies.  The
# package itself is installed editable, without build isolation, so that
# `make build` can recompile the native modules in place.
$(VENV_STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "setuptools>=77" wheel "Cython>=3.0"
	$(PY) -m pip install --quiet --no-build-isolation -e ".[test]"
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

# Spark's own Kafka sink, which bench/test_bench_spark.py measures netkafka against: the
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
# the run before any broker starts.
test: build kafka
	$(VENV)/bin/lint-imports
	$(PY) -m pytest tests

# The write-ahead log's kill harness at length (tests/test_wal_kill.py): a producer at
# steady load SIGKILLed 200 times with wal_fsync='always' (and 50 with 'interval'),
# restarted on its WAL each time; then every returned send must be in the topic
# exactly once, in per-partition order.  `make test` runs it with 20 (and 5).
WAL_KILLS ?= 200
wal-kill: build kafka
	NETKAFKA_WAL_KILLS=$(WAL_KILLS) $(PY) -m pytest tests/test_wal_kill.py -k killed_again

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

clean:
	find netkafka \( -name "*.so" -o -name "*.c" -o -name "*.html" \) -delete; rm -rf build
