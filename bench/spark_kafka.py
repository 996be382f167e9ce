"""Spark's own Kafka sink (the spark-sql-kafka-0-10 connector), matched to the installed pyspark.

`make spark-kafka` asks this module which connector to fetch and where, and
bench/test_bench_spark.py asks it for the jars to put on `spark.jars`.  Both versions come
from pyspark itself (its `__version__` and the Scala suffix of its spark-core jar), so that a
pyspark upgrade makes `make spark-kafka` fetch into a new directory instead of running the old
connector in a newer Spark.

The connector reaches Maven some time after pyspark reaches pip: until it does, the Makefile
fetches an older release (SPARK_KAFKA_FALLBACK), and `connector_version()` reports which one
was fetched, so that the benchmark can say so.

    python bench/spark_kafka.py directory | spark-version | scala-version
"""
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_DIR = REPO_ROOT / ".cache" / "spark-kafka"
CONNECTOR = "spark-sql-kafka-0-10"
FETCHED_STAMP = ".fetched"


def installed_spark() -> tuple[str, str]:
    """(Spark version, Scala binary version) of the installed pyspark, e.g. ("4.3.0", "2.13")."""
    try:
        import pyspark
    except ImportError:
        raise RuntimeError("pyspark is not installed: pip install pyspark") from None
    jars = Path(pyspark.__file__).parent / "jars"
    scala = {m.group(1) for jar in jars.glob("spark-core_*.jar")
             if (m := re.fullmatch(r"spark-core_(\d+\.\d+)-.*\.jar", jar.name))}
    if len(scala) != 1:
        raise RuntimeError(f"cannot tell pyspark's Scala version from the spark-core jars in "
                           f"{jars}: found {sorted(scala) or 'none'}")
    return pyspark.__version__, scala.pop()


def jars_directory() -> Path:
    """Where `make spark-kafka` puts the connector for the installed Spark."""
    spark, scala = installed_spark()
    return CACHE_DIR / f"{spark}_{scala}"


def connector_jars() -> list[str]:
    """The jars to put on `spark.jars`: the connector and what pyspark lacks of its dependencies.

    Raises:
        RuntimeError: `make spark-kafka` has not fetched them for the installed Spark.
    """
    directory = jars_directory()
    if not (directory / FETCHED_STAMP).exists():
        raise RuntimeError(f"Spark's Kafka connector for the installed pyspark is not in "
                           f"{directory}: run `make spark-kafka`")
    return sorted(str(jar) for jar in directory.glob("*.jar"))


def connector_version() -> str:
    """The version of the spark-sql-kafka-0-10 jar that was fetched: the installed Spark's,
    unless the Makefile had to fall back to an older release."""
    _, scala = installed_spark()
    prefix = f"{CONNECTOR}_{scala}-"
    versions = [Path(jar).name[len(prefix):-len(".jar")] for jar in connector_jars()
                if Path(jar).name.startswith(prefix)]
    if len(versions) != 1:
        raise RuntimeError(f"expected one {prefix}*.jar in {jars_directory()}, found {versions}")
    return versions[0]


if __name__ == "__main__":
    answers = {"directory": lambda: str(jars_directory()),
               "spark-version": lambda: installed_spark()[0],
               "scala-version": lambda: installed_spark()[1]}
    if len(sys.argv) != 2 or sys.argv[1] not in answers:
        sys.exit(f"usage: {sys.argv[0]} {' | '.join(answers)}")
    print(answers[sys.argv[1]]())
