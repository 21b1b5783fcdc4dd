"""The handler's deadline and the one retry policy: retries stop at the deadline, call timeouts shrink to it.

Guards issue 12 point 5 (the pure part; tests/integration/test_deadlines.py holds the handlers to it)."""

from __future__ import annotations

import pytest

from functions.cloud import deadline
from functions.cloud.errors import Transient
from functions.cloud.retry import Retryable, RetryPolicy

FAST = RetryPolicy(attempts=4, first_pause=0.01, max_pause=0.02, call_timeout=30.0)


class Clock:
    """A monotonic clock that moves only when the test says (issue 29: no test leans on the machine's speed)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_no_deadline_outside_a_handler():
    assert deadline.remaining() is None
    assert deadline.allows(10_000)
    assert deadline.call_timeout(30.0, "x") == 30.0


def test_the_deadline_keeps_a_margin_inside_the_timeout():
    assert deadline.margin(120) == 15.0
    assert deadline.margin(20) == 5.0
    clock = Clock()
    with deadline.handler_deadline(120, clock):
        assert deadline.remaining() == 105
        assert deadline.call_timeout(30.0, "x") == 30.0
        assert deadline.allows(105) and not deadline.allows(105.5)
        clock.now += 100
        assert deadline.remaining() == 5 and deadline.call_timeout(30.0, "x") == 5
    assert deadline.remaining() is None


def test_a_call_timeout_is_cut_to_what_is_left():
    clock = Clock()
    with deadline.handler_deadline(8, clock):  # margin 2 s: 6 s left
        assert deadline.call_timeout(30.0, "x") == 6.0
        clock.now += 5.5
        assert deadline.call_timeout(30.0, "x") == 0.5
        clock.now += 0.5
        with pytest.raises(deadline.DeadlineReached, match="before x"):
            deadline.call_timeout(30.0, "x")


def test_nothing_is_called_once_the_deadline_has_passed():
    with deadline.handler_deadline(0), pytest.raises(deadline.DeadlineReached):
        deadline.call_timeout(30.0, "GetCustomJob")


def test_retries_stop_at_the_deadline_and_leave_the_work_to_the_redelivery():
    calls: list[float] = []

    def always_busy(timeout: float) -> None:
        calls.append(timeout)
        raise Retryable("503")

    slow = RetryPolicy(attempts=5, first_pause=10.0, max_pause=10.0)
    with deadline.handler_deadline(8, Clock()), pytest.raises(deadline.DeadlineReached) as caught:
        slow.call("GetCustomJob", always_busy)
    assert len(calls) == 1  # a 5-10 s pause does not fit in the 6 s left
    assert isinstance(caught.value, Transient)  # so the entry point raises and the event is redelivered
    assert "503" in str(caught.value)


def test_retries_run_out_as_transient():
    calls = []

    def always_busy(timeout: float) -> None:
        calls.append(timeout)
        raise Retryable("503")

    with pytest.raises(Transient, match="failed 4 times; the last: 503"):
        FAST.call("x", always_busy)
    assert len(calls) == 4


def test_a_retry_first_looks_whether_the_failed_attempt_took_effect():
    looked = []

    def lost_response(timeout: float) -> str:
        raise Retryable("Stream removed")

    def look() -> str | None:
        looked.append(1)
        return "the job the first attempt created"

    assert FAST.call("create", lost_response, before_retry=look) == "the job the first attempt created"
    assert looked == [1]


def test_permanent_errors_are_not_retried():
    calls = []

    def refused(timeout: float) -> None:
        calls.append(timeout)
        raise ValueError("403")

    with pytest.raises(ValueError):
        FAST.call("x", refused)
    assert len(calls) == 1


def test_the_margin_is_open_for_saving_state_after_the_deadline():
    clock = Clock()
    with deadline.handler_deadline(8, clock):  # deadline 6 s from now, the timeout 8 s
        clock.now += 6.5  # past the deadline, inside the timeout
        assert not deadline.allows(0)
        with deadline.wrap_up():
            assert deadline.remaining() == 0.5  # up to a second short of the timeout
        assert deadline.remaining() == -0.5
    with deadline.wrap_up():
        assert deadline.remaining() is None


def test_the_settings_scale_every_pause_between_retries_and_refuse_a_negative_factor():
    """TRAINCTL_RETRY_PAUSE_SCALE (tests shorten it): the same attempts and timeouts, pauses times the factor."""
    from functions.settings import Settings, SettingsError

    base = {"TRAINCTL_PROJECT": "p", "TRAINCTL_CONTROL_BUCKET": "c", "TRAINCTL_EVENTS_TOPIC": "t",
            "TRAINCTL_TRAINER_IMAGE": "i"}  # fmt: skip
    assert Settings.from_env(base).retry_pause_scale == 1.0
    scale = Settings.from_env({**base, "TRAINCTL_RETRY_PAUSE_SCALE": "0.1"}).retry_pause_scale
    policy = RetryPolicy(attempts=5, first_pause=0.5, max_pause=8.0, call_timeout=30.0).scaled(scale)
    assert (policy.attempts, policy.call_timeout) == (5, 30.0)
    assert policy.first_pause == pytest.approx(0.05) and policy.max_pause == pytest.approx(0.8)
    assert all(policy.pause(retry) <= 0.8 for retry in range(1, 10))
    with pytest.raises(SettingsError, match="TRAINCTL_RETRY_PAUSE_SCALE: must be a number of 0 or more"):
        Settings.from_env({**base, "TRAINCTL_RETRY_PAUSE_SCALE": "-1"})
