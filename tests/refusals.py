"""What a producer's first record meets when the cluster refuses it."""
import pytest

WAIT_S = 30.0


def refused_send(producer, topic, error_class):
    """Send one record that must fail with error_class (raised by send() or by its
    future); close the producer; return the error."""
    try:
        with pytest.raises(error_class) as refused:
            producer.send(topic, b"refused").get(WAIT_S)
    finally:
        producer.close()
    return refused.value
