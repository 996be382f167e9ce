"""OpenTelemetry trace context in Kafka record headers, through a netkafka interceptor.

TraceContextInterceptor.on_send() writes the context current at send() into the
record's headers with OpenTelemetry's configured propagator (W3C `traceparent`, and
`tracestate` when there is one, by default), so a consumer can continue the trace;
on_acknowledgement() records a failed delivery on the span that sent the record.
Needs the `otel` extra (opentelemetry-api); with opentelemetry-sdk installed, this
script also sets up a tracer provider so that its spans are real.

Against the project's local broker:

    .venv/bin/python -m netkafka.testing.broker start      # prints 127.0.0.1:PORT last
    .venv/bin/python examples/otel_tracing.py --bootstrap 127.0.0.1:PORT --topic traced
    .venv/bin/python -m netkafka.testing.broker stop

It sends --count records, each in a span of its own, and prints one line per record:
partition, offset and the trace id of its span (32 hex digits).
"""
import argparse
import os
import sys
from typing import Any, Optional

from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Setter
from opentelemetry.trace import Status, StatusCode

from netkafka import KafkaProducer, RecordMetadata


Headers = list[tuple[str, bytes]]


class _HeaderSetter(Setter[Headers]):
    """OpenTelemetry's Setter over a record's headers: a list of (str, bytes)."""

    def set(self, carrier: Headers, key: str, value: str) -> None:
        carrier.append((key, value.encode("ascii")))


class TraceContextInterceptor:
    """Puts the current trace context into every record's headers."""

    def __init__(self) -> None:
        self._setter = _HeaderSetter()

    def on_send(self, record: Any) -> Any:
        headers = list(record.headers or [])
        propagate.inject(headers, setter=self._setter)
        return record._replace(headers=headers)

    def on_acknowledgement(self, metadata: Optional[RecordMetadata],
                           exception: Optional[BaseException]) -> None:
        # Runs on the thread that completes the record (an I/O thread): the sending
        # span is not current here, so only failures are worth noting, as an event
        # of whatever span the application keeps current there.
        if exception is not None:
            trace.get_current_span().record_exception(exception)


def _use_sdk_if_installed() -> None:
    try:
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return  # the application's own provider (or OpenTelemetry's no-op one)
    trace.set_tracer_provider(TracerProvider())


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=os.environ.get("NETKAFKA_BOOTSTRAP"),
                        help="host:port of the broker (default: $NETKAFKA_BOOTSTRAP)")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, default=3)
    args = parser.parse_args(argv)
    if not args.bootstrap:
        parser.error("--bootstrap (or $NETKAFKA_BOOTSTRAP) is required")
    _use_sdk_if_installed()
    tracer = trace.get_tracer("netkafka.examples.otel_tracing")
    with KafkaProducer(bootstrap_servers=args.bootstrap,
                       interceptors=[TraceContextInterceptor()]) as producer:
        for n in range(args.count):
            with tracer.start_as_current_span("send", kind=trace.SpanKind.PRODUCER) as span:
                try:
                    metadata = producer.send(args.topic, b"record %d" % n).get(timeout=30)
                except Exception as exc:
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                    raise
                trace_id = format(span.get_span_context().trace_id, "032x")
            print(f"partition={metadata.partition} offset={metadata.offset} "
                  f"trace_id={trace_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
