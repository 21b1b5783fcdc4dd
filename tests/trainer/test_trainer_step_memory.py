"""A rank's resident memory must not grow with the steps of an epoch (issue 30, point 1): the trainer records
every step's loss, and how it keeps them decides whether glibc's heap stays flat or grows by about a
micro-batch every step."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainer.checkpoints.state import TrainState

_MALLINFO2_FIELDS = [
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
]


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]


def _heap_bytes_from_the_system():
    """glibc's mallinfo2().arena: the bytes its arenas took from the system with brk/mmap (not counting chunks
    mapped on their own), which is what stays resident once touched. None off glibc (musl, macOS)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = _MallInfo2
    return lambda: mallinfo2().arena


def test_recording_each_steps_loss_does_not_grow_the_heap():
    """Guards issue 30, point 1 (the whole-run peak RSS): 500 steps of the trainer's step shape (a gathered
    micro-batch of 256 rows, forward, backward, AdamW) recording each step's loss in `TrainState.epoch_losses`
    leave glibc's heap where it was. Kept as a list of 0-dim tensors, each step's few small allocations landed
    among the step's freed buffers and pinned them: the heap grew ~20 KB a step (10 MB here; 2.4 GB over a
    25,000-step epoch of the 16 M-row bench)."""
    heap_bytes = _heap_bytes_from_the_system()
    if heap_bytes is None:
        pytest.skip("needs glibc's mallinfo2")
    torch.manual_seed(0)
    inputs, targets = torch.randn(100_000, 20), torch.randn(100_000)
    model = nn.Sequential(nn.Linear(20, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 64), nn.ReLU(),
                          nn.Linear(64, 1))  # fmt: skip
    state = TrainState(model, torch.optim.AdamW(model.parameters()), steps_per_epoch=600, world_size=1)
    order = torch.randint(0, len(inputs), (600 * 256,))

    def step(i: int) -> None:
        rows = order[i * 256 : (i + 1) * 256]
        loss = F.mse_loss(model(inputs[rows]).reshape(-1), targets[rows])
        loss.backward()
        state.optimizer.step()
        state.optimizer.zero_grad(set_to_none=True)
        state.epoch_losses.append(loss.detach())

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the bench's ranks run (OMP_NUM_THREADS=1); two threads on two busy cores crawl
    try:
        grown = _heap_growth(step, heap_bytes)
    finally:
        torch.set_num_threads(threads)
    assert len(state.epoch_losses) == 600
    assert grown < 3 * 2**20, f"the heap grew {grown / 2**20:.1f} MB over 500 steps"


def _heap_growth(step, heap_bytes) -> int:
    for i in range(100):  # warm-up: the optimizer's state, the allocator's first chunks
        step(i)
    before = heap_bytes()
    for i in range(100, 600):
        step(i)
    return heap_bytes() - before
