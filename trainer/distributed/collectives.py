"""Every collective the trainer calls outside DDP, in one place, so each runs where its backend can run it.

- Tensors go to the process group's device first: NCCL takes only CUDA tensors and fails a CPU one with "No
  backend type associated with device type cpu" (pytorch/pytorch#161154), gloo takes CPU tensors.
- Python objects and waits for rank 0's long work (a dataset download, a checkpoint upload) go over a gloo
  side group with the long start-up timeout, so the main group's timeout can be short once training runs:
  a rank that dies or hangs then ends the others within that timeout instead of 30 minutes later.

No other trainer module calls torch.distributed's collectives directly (a test holds that).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

_side_group: dist.ProcessGroup | None = None


def group_device() -> torch.device:
    """The device the default group's backend communicates on: the CPU when the backend serves it (gloo),
    otherwise this process's accelerator (NCCL: `cuda:LOCAL_RANK`, the device set before the group began)."""
    serves = dist.Backend.backend_capability.get(dist.get_backend(), ["cpu"])
    if "cpu" in serves:
        return torch.device("cpu")
    return torch.device(serves[0], int(os.environ.get("LOCAL_RANK", "0")))


def open_side_group(timeout_seconds: float) -> None:
    """Create the gloo side group; every rank calls this once, right after the default group exists."""
    global _side_group
    _side_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_seconds))


def close_side_group() -> None:
    global _side_group
    _side_group = None  # destroy_process_group() of the default group destroys it with the rest


def _side() -> dist.ProcessGroup | None:
    return _side_group  # None (the default group) only before open_side_group, as in unit tests of one rank


def all_reduce(tensor: torch.Tensor, op: dist.ReduceOp.RedOpType = dist.ReduceOp.SUM) -> torch.Tensor:
    """The reduction of `tensor` over all ranks, on `tensor`'s own device (a copy when it had to move)."""
    placed = tensor.to(group_device())
    dist.all_reduce(placed, op=op)
    return placed if placed.device == tensor.device else placed.to(tensor.device)


def sum_array(values: np.ndarray) -> np.ndarray:
    """Element-wise float64 sum of a NumPy array over all ranks."""
    tensor = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    return all_reduce(tensor.to(group_device())).cpu().numpy()


def _reduce_int(value: int, op: dist.ReduceOp.RedOpType) -> int:
    return int(all_reduce(torch.tensor([value], dtype=torch.int64).to(group_device()), op).cpu()[0])


def max_across_ranks(value: int) -> int:
    return _reduce_int(value, dist.ReduceOp.MAX)


def sum_across_ranks(value: int) -> int:
    return _reduce_int(value, dist.ReduceOp.SUM)


def max_of_floats(values: list[float]) -> list[float]:
    """Element-wise maximum over all ranks of a few numbers (flags and proposals): one small collective."""
    tensor = torch.tensor(values, dtype=torch.float64).to(group_device())
    return all_reduce(tensor, dist.ReduceOp.MAX).cpu().tolist()


def gather_objects(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank (pickled, over the gloo side group)."""
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj, group=_side())
    return gathered


def from_rank_zero(obj: Any) -> Any:
    """Rank 0's `obj` on every rank (the others pass anything, usually None)."""
    holder = [obj]
    dist.broadcast_object_list(holder, src=0, group=_side())
    return holder[0]


def wait_for_all() -> None:
    """Block until every rank is here — typically after rank 0's long I/O — with the long start-up timeout."""
    dist.barrier(group=_side())


def shorten_timeout(seconds: float) -> None:
    """From now on a collective of the default group that waits longer than `seconds` fails this rank (NCCL
    aborts the process), so a dead or stuck peer ends the run instead of holding it for the start-up timeout.
    Every rank meets first on the side group, so none shortens it while another is still in a slow first step
    (torchtitan's `set_pg_timeouts` does the same)."""
    wait_for_all()
    dist.distributed_c10d._set_pg_timeout(timedelta(seconds=seconds))
