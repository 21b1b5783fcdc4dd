"""User-style model factories for `--model`, used by the tests: the built-in MLP wrapped so that a training
forward pass takes a fixed extra time (so a signal reliably lands mid-training) and, when asked, raises on a
chosen batch (a worker that crashes), or makes every checkpoint upload take longer (a slow network)."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from torch import nn

from trainer.model.network import mlp
from trainer.storage import folders


class PacedModel(nn.Module):
    def __init__(
        self,
        inner: nn.Module,
        seconds_per_batch: float,
        crash_at_batch: int | None,
        crash_on_rank: int,
        crash_every_attempt: bool,
        hang_at_batch: int | None = None,
    ):
        super().__init__()
        self.inner = inner
        self.seconds_per_batch = seconds_per_batch
        attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        on_this_rank = int(os.environ.get("RANK", "0")) == crash_on_rank
        self.crash_at_batch = crash_at_batch if on_this_rank and (attempt == 0 or crash_every_attempt) else None
        self.hang_at_batch = hang_at_batch if on_this_rank and attempt == 0 else None
        self.batches = 0

    def forward(self, x):
        if self.training:
            self.batches += 1
            if self.batches == self.crash_at_batch:
                raise RuntimeError(f"deliberate crash at training batch {self.batches}")
            if self.batches == self.hang_at_batch:
                # Stuck for good, as a rank in a hung NCCL kernel. Such a rank never runs the trainer's Python
                # SIGTERM handler, and torchrun SIGKILLs it after a fixed 30 s (torch 2.13 passes no
                # --shutdown-timeout to the stop of a failed group); SIGTERM's default action ends this one at
                # once instead, so the tests need not wait out that grace.
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                while True:
                    time.sleep(1)
            time.sleep(self.seconds_per_batch)
        return self.inner(x)


def paced_mlp(
    in_features: int,
    out_features: int,
    seconds_per_batch: float = 0.01,
    crash_at_batch: int | None = None,
    crash_on_rank: int = 1,
    crash_every_attempt: bool = False,
    hang_at_batch: int | None = None,
    checkpoint_upload_seconds: float = 0.0,
    **mlp_kwargs,
) -> nn.Module:
    if checkpoint_upload_seconds:
        slow_down_local_uploads(checkpoint_upload_seconds)
    inner = mlp(in_features, out_features, **mlp_kwargs)
    return PacedModel(inner, seconds_per_batch, crash_at_batch, crash_on_rank, crash_every_attempt, hang_at_batch)


def slow_down_local_uploads(seconds: float) -> None:
    """Every file streamed into a local folder (a checkpoint's state) takes `seconds` longer to complete."""
    real_open_writer = folders.LocalFolder.open_writer

    @contextlib.contextmanager
    def open_writer(self, name):
        with real_open_writer(self, name) as file:
            yield file
            time.sleep(seconds)

    folders.LocalFolder.open_writer = open_writer  # type: ignore[method-assign]


class TinyResidual(nn.Module):
    """A model a user might write: not a Sequential, with a skip connection."""

    def __init__(self, in_features: int, out_features: int, width: int = 32):
        super().__init__()
        self.project = nn.Linear(in_features, width)
        self.block = nn.Sequential(nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.head = nn.Linear(width, out_features)

    def forward(self, x):
        h = self.project(x)
        return self.head(h + self.block(h))


def tiny_residual(in_features: int, out_features: int, width: int = 32) -> nn.Module:
    return TinyResidual(in_features, out_features, width)
