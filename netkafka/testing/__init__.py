"""A real Apache Kafka for netkafka's tests, demo and benchmarks, and checks independent of it.

- broker: start/stop Kafka brokers and clusters on 127.0.0.1 (also `python -m
  netkafka.testing.broker start|stop|status`); needs only the standard library and Java.
- admin, reader: create topics and read them back with confluent-kafka, a test-only
  dependency, so they are imported explicitly (`from netkafka.testing.reader import ...`).
- fixtures: the pytest plugin (kafka_broker, kafka_cluster, topic_name).
"""
