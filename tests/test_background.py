"""client.background.BackgroundResult: the hand-over of a name lookup's or a SASL
prepare()'s result to the I/O thread (test_connectivity and test_sasl_connection drive
both through real connections)."""
import threading

from netkafka.client.background import BackgroundResult


def _result():
    wakeups = []
    return BackgroundResult(lambda: wakeups.append(threading.current_thread().name)), wakeups


def test_a_result_is_taken_once_and_wakes_the_io_thread_once():
    handoff, wakeups = _result()
    token = object()
    handoff.start(token)
    assert handoff.take() is None  # still running
    worker = threading.Thread(target=handoff.deliver, args=(token, ("addresses", None)),
                              name="worker")
    worker.start()
    worker.join()
    assert wakeups == ["worker"]
    assert handoff.take() == ("addresses", None)
    assert handoff.take() is None


def test_the_result_of_work_no_longer_wanted_is_dropped():
    handoff, wakeups = _result()
    old, new = object(), object()
    handoff.start(old)
    handoff.start(new)  # the first lookup timed out; a second one started
    handoff.deliver(old, "stale")
    assert handoff.take() is None and wakeups == []
    handoff.deliver(new, "fresh")
    assert handoff.take() == "fresh"
    handoff.deliver(new, "twice")  # a token delivers once
    assert handoff.take() is None and len(wakeups) == 1


def test_cancel_drops_a_result_on_its_way_and_one_not_taken():
    handoff, wakeups = _result()
    token = object()
    handoff.start(token)
    handoff.cancel()  # the connection closed
    handoff.deliver(token, "late")
    assert handoff.take() is None and wakeups == []
    handoff.start(token)
    handoff.deliver(token, "not taken")
    handoff.cancel()
    assert handoff.take() is None


def test_starting_again_drops_a_result_not_taken():
    handoff, _ = _result()
    first, second = object(), object()
    handoff.start(first)
    handoff.deliver(first, "first")
    handoff.start(second)
    assert handoff.take() is None
