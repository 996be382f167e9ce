"""Instructions per send() on the caller's thread, counted by callgrind: a measure of the
hot path that, unlike a timing, the other work on this machine does not blur.

    valgrind --tool=callgrind --collect-atstart=no \\
        --toggle-collect='*ProducerCore_*send*' --callgrind-out-file=OUT \\
        .venv/bin/python bench/send_instructions.py BOOTSTRAP [RECORDS]
    callgrind_annotate OUT | head -20     # "PROGRAM TOTALS" / RECORDS

Only instructions executed while ProducerCore.send is on the stack are collected (the
I/O thread's work is not), so the total divided by RECORDS is what one send() of a 100
byte value to a topic already known costs its caller.  The first send (metadata, the
first batch) is made before the counted loop and flushed, as the benchmark in
test_bench_send.py does; it is still counted, one record of the total.  Run it with
PYTHONPATH=<checkout> from outside the checkout to measure that checkout's netkafka.

Measured (issue 14 item 3, wire-string checks; 20 000 records, Kafka 4.4, two runs
each, alternating): before (main 8b813ac) 32.33 M and 32.04 M instructions, after
32.27 M and 31.93 M -- about 1 600 per send() both, the same within 1 %: the check
is on the cold path (a topic's first send), the hot path is untouched.
"""
import sys

from netkafka import Producer

VALUE = b"v" * 100


def main(bootstrap, records):
    topic = "send-instructions"
    with Producer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=1024 * 1024,
                  buffer_memory=256 * 1024 * 1024, acks=1) as producer:
        send = producer.send
        send(topic, VALUE).get(60)
        for _ in range(records):
            send(topic, VALUE)
        producer.flush()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)
