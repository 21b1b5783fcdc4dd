"""The deadline every handler works to, inside the function's timeout.

Cloud Run answers 504 when a request outlives the function's timeout, but does not stop the handler's thread
(https://cloud.google.com/functions/docs/configuring/timeout: "Track the amount of time left … and return
early"): the event is redelivered and a second handler races the first. So each entry point opens a deadline
a margin short of the timeout, and every retry loop and call timeout below it stops there, leaving the work
to the redelivery (DESIGN.md §4 "Deadlines").
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from functions.cloud.errors import Transient

# Time kept back to save state, publish and answer: a quarter of a short timeout, at most 15 s.
MAX_MARGIN = 15.0
# (deadline, the end of the timeout, the clock both are read on) of the invocation.
_limits: ContextVar[tuple[float, float, Callable[[], float]] | None] = ContextVar("trainctl_deadline", default=None)


T = TypeVar("T")


class DeadlineReached(Transient):
    """The handler's deadline came before the work was done; the redelivery (or the next tick) goes on."""


def margin(timeout: float) -> float:
    return min(MAX_MARGIN, timeout / 4)


@contextmanager
def handler_deadline(timeout: float, clock: Callable[[], float] = time.monotonic) -> Iterator[None]:
    """Work inside this block to a deadline `margin(timeout)` short of `timeout` seconds from now (on `clock`,
    the monotonic clock but in tests)."""
    end = clock() + timeout
    token = _limits.set((end - margin(timeout), end, clock))
    try:
        yield
    finally:
        _limits.reset(token)


@contextmanager
def wrap_up() -> Iterator[None]:
    """Inside this block the margin is open: for saving state (giving up a claim) once the deadline has passed."""
    limits = _limits.get()
    token = _limits.set(None if limits is None else (limits[1] - 1.0, limits[1], limits[2]))
    try:
        yield
    finally:
        _limits.reset(token)


def remaining() -> float | None:
    """Seconds left before the deadline; None outside a handler (no deadline: tests, trainctl replay)."""
    limits = _limits.get()
    return None if limits is None else limits[0] - limits[2]()


def allows(seconds: float) -> bool:
    """Whether `seconds` of work still fit before the deadline."""
    left = remaining()
    return left is None or left >= seconds


def call_timeout(default: float, what: str) -> float:
    """The timeout for one remote call: `default`, cut to what is left; DeadlineReached when nothing is."""
    left = remaining()
    if left is None:
        return default
    if left <= 0:
        raise DeadlineReached(f"the handler's deadline passed before {what}")
    return min(default, left)


def poll(look: Callable[[], T], finished: Callable[[T], bool], seconds: float) -> T:
    """`look()` again every few tenths of a second until `finished` says so, `seconds` have passed or the deadline is
    near: the last look (a long-running operation waited on briefly; the next visit looks again)."""
    until = time.monotonic() + seconds
    while True:
        found = look()
        if finished(found) or time.monotonic() > until or not allows(2.0):
            return found
        time.sleep(random.uniform(0.2, 0.5))
