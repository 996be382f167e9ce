"""netkafka: a Kafka producer for Python whose hot paths are native."""
from netkafka._native import load_native_modules

_NATIVE = load_native_modules()

__version__ = "0.1.0"
