"""A real Apache Kafka for netkafka's tests, demo and benchmarks, and checks independent of it.

- broker: start/stop Kafka brokers and clusters on 127.0.0.1 (also `python -m
  netkafka.testing.broker start|stop|status`); needs only the standard library and Java.
- admin, reader: create topics and read them back with confluent-kafka, a test-only
  dependency, so they are imported explicitly (`from netkafka.testing.reader import ...`).
- security, tls, oauth: a node with TLS, mTLS and SASL listeners, the certificates it shows
  and the OAuth provider it trusts (test-only dependencies too: trustme, PyJWT).
- fixtures: the pytest plugin (kafka_broker, kafka_broker_3_9, kafka_cluster, secured_broker,
  topic_name).
"""
