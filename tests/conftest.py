"""pytest configuration: the real-Kafka fixtures of netkafka.testing for every test."""
pytest_plugins = ["netkafka.testing.fixtures"]
