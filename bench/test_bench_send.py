"""send() and produce() per record, as the caller's thread pays for it: 20 000 records
of 100 bytes into a producer on the session's broker (linger and batch large enough
that the timed loop is the append path, the I/O threads draining beside it; flushed
between rounds, outside the timing).

The interceptor cases show what interceptors cost and, against the same run of
"none" before interceptors existed, that a producer without them pays nothing
(send() tests one field).

Measured (2 shared cores, other work running; ms per 20 000 records, best round /
median over 15, three alternating runs each): without interceptors send() 2.9-4.4 /
4.3-11.9 against 2.8-3.5 / 5.9-9.2 before interceptors existed, produce() 2.6-3.5 /
5.7-16.9 against 2.5-7.0 / 3.7-14.7 -- the same within this machine's noise (about
0.15 us a record at best).  With one no-op interceptor: send() 100-110 / 180-261,
produce() 139-155 / 296-303, i.e. about 5 us a record (the record tuple, the hook
calls and a completion callback per record, in Python).
"""
import pytest

from netkafka import Producer
from netkafka.testing.admin import create_topic

RECORDS = 20_000
VALUE = b"v" * 100


class _NoOpInterceptor:
    def on_send(self, record):
        return record

    def on_acknowledgement(self, metadata, exception):
        pass


INTERCEPTORS = {"none": (), "one_noop": (_NoOpInterceptor(),)}


@pytest.mark.parametrize("entry", ["send", "produce"])
@pytest.mark.parametrize("interceptors", list(INTERCEPTORS))
def test_send_per_record(benchmark, kafka_broker, topic_name, entry, interceptors):
    create_topic(kafka_broker.bootstrap, topic_name, partitions=1)
    options = {"interceptors": INTERCEPTORS[interceptors]} if INTERCEPTORS[interceptors] else {}
    with Producer(bootstrap_servers=kafka_broker.bootstrap, linger_ms=50,
                  batch_size=1024 * 1024, buffer_memory=256 * 1024 * 1024, acks=1,
                  **options) as producer:
        send = getattr(producer, entry)
        send(topic_name, VALUE)
        producer.flush()

        def loop():
            for _ in range(RECORDS):
                send(topic_name, VALUE)

        benchmark.pedantic(loop, setup=producer.flush, rounds=15, warmup_rounds=2)
        producer.flush()
    benchmark.extra_info["records_per_round"] = RECORDS
