"""The one retry policy of every adapter (Cloud Storage, Pub/Sub, Vertex): jittered exponential backoff,
a bounded number of attempts, each call's timeout and every pause cut to the handler's deadline."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from functions.cloud import deadline
from functions.cloud.errors import Transient

T = TypeVar("T")


class Retryable(Exception):
    """Raised by one attempt of a call: this failure is worth another attempt (the message says what it was)."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5
    first_pause: float = 0.5
    max_pause: float = 8.0
    call_timeout: float = 30.0

    def scaled(self, factor: float) -> RetryPolicy:
        """This policy with every pause multiplied by `factor` (settings.retry_pause_scale)."""
        return replace(self, first_pause=self.first_pause * factor, max_pause=self.max_pause * factor)

    def pause(self, retry: int) -> float:
        return min(self.max_pause, self.first_pause * 2**retry) * random.uniform(0.5, 1.0)

    def call(
        self,
        what: str,
        attempt: Callable[[float], T],
        before_retry: Callable[[], T | None] | None = None,
    ) -> T:
        """`attempt(timeout)` until it returns; Transient when `attempts` run out or the deadline comes first.
        `before_retry`, when given, runs before each retry; a result other than None is returned instead
        (for calls that are not idempotent: look whether the failed attempt took effect after all)."""
        problem = ""
        for retry in range(self.attempts):
            if retry:
                pause = self.pause(retry)
                if not deadline.allows(pause + 1.0):
                    raise deadline.DeadlineReached(f"no time left to retry {what} ({problem})")
                time.sleep(pause)
                if before_retry is not None and (found := before_retry()) is not None:
                    return found
            try:
                return attempt(deadline.call_timeout(self.call_timeout, what))
            except Retryable as exc:
                problem = str(exc)
        raise Transient(f"{what} failed {self.attempts} times; the last: {problem}")
