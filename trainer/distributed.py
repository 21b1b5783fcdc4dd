"""Process-group set-up from torchrun's environment, and the two things ranks must agree on while training:
whether to stop (SIGTERM) and whether a time-based checkpoint is due.

Run without torchrun (no LOCAL_RANK), the program is a world of one process on an in-memory store, so the
training code has a single path.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

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
    try:
        yield device
    finally:
        dist.destroy_process_group()


class StopSignal:
    """Remembers that SIGTERM arrived; the training loop checks at step boundaries and stops cleanly."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum, frame) -> None:
        self.requested = True


def agree(device: torch.device, *flags: bool) -> list[bool]:
    """Each flag is true on every rank if it is true on any rank (one small all-reduce)."""
    tensor = torch.tensor([float(f) for f in flags], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [bool(v) for v in tensor.tolist()]


def _reduce_int(value: int, device: torch.device, op: dist.ReduceOp) -> int:
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=op)
    return int(tensor.item())


def max_across_ranks(value: int, device: torch.device) -> int:
    return _reduce_int(value, device, dist.ReduceOp.MAX)


def sum_across_ranks(value: int, device: torch.device) -> int:
    return _reduce_int(value, device, dist.ReduceOp.SUM)
