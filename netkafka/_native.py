"""Loads netkafka's native modules, or fails saying which one and how to build it.

netkafka has no pure-Python fallback: a missing extension module is an install
error, reported at import time rather than discovered as a slow path later.
"""
import importlib

# Every compiled module the package needs; each is built from the .pyx of its dotted path.
NATIVE_MODULES = (
    "netkafka.client._transport",
    "netkafka.producer._accumulator",
    "netkafka.producer._batch_send",
    "netkafka.producer._futures",
    "netkafka.producer._metrics",
    "netkafka.producer._mutex",
    "netkafka.producer._partitioner",
    "netkafka.producer._wal",
    "netkafka.protocol._produce",
    "netkafka.protocol._reader",
    "netkafka.record._batch",
    "netkafka.record._columns",
    "netkafka.record._compression",
    "netkafka.record._crc",
    "netkafka.record._legacy",
    "netkafka.record._pool",
)

BUILD_HINT = (
    "netkafka's native modules are built from source: run `pip install .` "
    "(or `pip install -e .` in a checkout, or `make build`) with a C compiler "
    "and Cython available"
)


def load_native_modules():
    """Import every native module and return them by dotted name.

    Raises:
        ImportError: naming the first module that cannot be loaded and how to build it.
    """
    modules = {}
    for name in NATIVE_MODULES:
        try:
            modules[name] = importlib.import_module(name)
        except ImportError as exc:
            raise ImportError(
                f"native module {name} is not available ({exc}); {BUILD_HINT}"
            ) from exc
    return modules
