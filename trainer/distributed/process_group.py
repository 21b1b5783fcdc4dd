"""Process-group set-up from torchrun's environment, and the two things ranks must agree on while training:
whether to stop (SIGTERM) and whether a time-based checkpoint is due.

Run without torchrun (no LOCAL_RANK), the program is a world of one process on an in-memory store, so the
training code has a single path.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from trainer.distributed import collectives

PREEMPTED_EXIT_CODE = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM


@contextmanager
def process_group(init_timeout_seconds: float) -> Iterator[torch.device]:
    """Set the device, then join the process group (nccl on CUDA, gloo on CPU); always leave it at the end."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)  # before init_process_group, so NCCL binds this process to its GPU
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    timeout = timedelta(seconds=init_timeout_seconds)
    if "LOCAL_RANK" in os.environ:
        dist.init_process_group(backend=backend, timeout=timeout)
    else:
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    collectives.open_side_group(init_timeout_seconds)
    try:
        yield device
    finally:
        collectives.close_side_group()
        dist.destroy_process_group()


def stop_when_launcher_dies() -> None:
    """Under torchrun, have Linux send this worker SIGTERM when its launcher dies. A launcher killed outright
    (SIGKILL) cannot forward anything, and torchrun starts each worker in a session of its own, so killing the
    launcher's process group does not reach the workers either; without this they would run on as orphans.
    With it they checkpoint and stop like on any SIGTERM."""
    if "TORCHELASTIC_RUN_ID" not in os.environ or not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    if os.getppid() == 1:  # the launcher died before the request was in place
        os.kill(os.getpid(), signal.SIGTERM)


class StopSignal:
    """Remembers that SIGTERM arrived; the training loop checks at step boundaries and stops cleanly."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True


class Coordination:
    """When ranks agree on stopping (SIGTERM on any rank) and on a time-based checkpoint (rank 0's clock): one
    tiny all-reduce about every `seconds` of training. Rank 0 proposes the interval to the next check, in steps,
    from its own step time, inside that same all-reduce — so every rank checks at the same steps, a SIGTERM is
    acted on within about `seconds`, and tiny CPU steps do not pay for a collective each."""

    MAX_INTERVAL_STEPS = 1000

    def __init__(self, seconds: float, first_step: int):
        self.seconds, self.next_step = seconds, first_step

    def due(self, step: int) -> bool:
        return step >= self.next_step

    def agree(self, step: int, stop_requested: bool, checkpoint_due: bool, step_seconds: float | None):
        """(stop, checkpoint) as every rank sees them after the all-reduce."""
        proposal = 0.0
        if dist.get_rank() == 0:
            steps = self.seconds / step_seconds if step_seconds else 1.0
            proposal = float(min(self.MAX_INTERVAL_STEPS, max(1, int(steps))))
        stop, checkpoint, interval = collectives.max_of_floats([float(stop_requested), float(checkpoint_due), proposal])
        self.next_step = step + int(interval)
        return bool(stop), bool(checkpoint)
