"""The slowdown alert is a pure function of epoch times."""

from rsup.supervisor.core.slowdown import SlowdownWatch


def test_sustained_slowdown_alerts_once() -> None:
    watch = SlowdownWatch()
    assert [watch.epoch(s) for s in (10, 10.5, 10)] == [None, None, None]  # warm-up
    assert watch.epoch(14) is None and watch.epoch(14) is None  # two slow epochs: not yet
    message = watch.epoch(15)
    assert message is not None and "67%" in message
    assert watch.epoch(15) is None  # said once while it lasts


def test_a_single_slow_epoch_is_not_a_slowdown() -> None:
    watch = SlowdownWatch()
    for seconds in (10, 20, 10, 10, 20, 10):
        assert watch.epoch(seconds) is None


def test_alert_again_after_recovery() -> None:
    watch = SlowdownWatch()
    for seconds in (10, 10, 10, 14, 14, 14):
        watch.epoch(seconds)
    assert watch.alerted
    for seconds in (10, 10, 10):
        watch.epoch(seconds)
    assert not watch.alerted
    assert [watch.epoch(s) for s in (14, 14, 14)][-1] is not None
