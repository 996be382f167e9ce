"""Command-line tools: netkafka-perf (perf) and the demo (demo)."""
