"""How fast the training steps go, measured where it is cheap: samples/s over the steps only (warm-up steps and
the pauses for evaluation and checkpoints left out), the share of step time spent fetching batches, and the
spread of step times and of the training thread's CPU time per step. CPU time is what the trainer itself
costs; unlike wall-clock time it does not change when other programs load the machine."""

from __future__ import annotations

import statistics
from collections import deque

WARMUP_STEPS = 5
KEPT_STEPS = 100_000  # percentiles are over the most recent steps, so memory stays bounded


def _percentiles_ms(seconds: deque[float]) -> dict[str, float] | None:
    if len(seconds) < 2:
        return None
    deciles = statistics.quantiles(seconds, n=10)
    return {"p10": deciles[0] * 1000, "p50": deciles[4] * 1000, "p90": deciles[8] * 1000}


class Throughput:
    def __init__(self) -> None:
        self.steps, self.samples, self.seconds, self.data_seconds = 0, 0, 0.0, 0.0
        self.step_seconds: deque[float] = deque(maxlen=KEPT_STEPS)
        self.step_cpu_seconds: deque[float] = deque(maxlen=KEPT_STEPS)
        self.typical_step: float | None = None  # a moving average of step time, warm-up included

    def add(self, samples: int, seconds: float, cpu_seconds: float, data_seconds: float) -> None:
        self.steps += 1
        self.typical_step = seconds if self.typical_step is None else 0.8 * self.typical_step + 0.2 * seconds
        if self.steps > WARMUP_STEPS:
            self.samples += samples
            self.seconds += seconds
            self.data_seconds += data_seconds
            self.step_seconds.append(seconds)
            self.step_cpu_seconds.append(cpu_seconds)

    def summary(self) -> dict:
        return {
            "samples_per_second": self.samples / self.seconds if self.seconds else None,
            "data_wait_fraction": self.data_seconds / self.seconds if self.seconds else None,
            "timed_steps": max(self.steps - WARMUP_STEPS, 0),
            "step_time_ms": _percentiles_ms(self.step_seconds),
            "step_cpu_time_ms": _percentiles_ms(self.step_cpu_seconds),
        }
