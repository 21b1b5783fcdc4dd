"""A checkpoint's copy of the training state, taken in the time the GPUs can spare: every tensor is copied once
into a CPU buffer (pinned memory for GPU tensors, so the copies run as fast DMA), and the buffers are kept and
reused from one checkpoint to the next instead of allocated again. Training may go on changing the live state
as soon as `take` returns; the copy is what a background upload writes.
"""

from __future__ import annotations

from typing import Any

import torch


class Snapshots:
    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self._copied_from_gpu = False

    def take(self, state: Any) -> Any:
        """`state` (nested dicts, lists and tuples of tensors and plain values) with every tensor copied to the
        CPU and every container rebuilt, so later changes to the live state do not reach it. The previous
        snapshot's buffers are overwritten: take a new one only after the previous one was written."""
        self._copied_from_gpu = False
        snapshot = self._copy(state, "")
        if self._copied_from_gpu:
            torch.cuda.synchronize()  # the non-blocking copies have landed before anyone reads the buffers
        return snapshot

    def _copy(self, value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            return self._copy_tensor(value, path)
        if isinstance(value, dict):
            return {k: self._copy(v, f"{path}/{k}") for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(self._copy(v, f"{path}/{i}") for i, v in enumerate(value))
        return value  # numbers, strings, None: nothing the training loop can change in place

    def _copy_tensor(self, tensor: torch.Tensor, path: str) -> torch.Tensor:
        on_gpu = tensor.device.type == "cuda"
        buffer = self._buffers.get(path)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=on_gpu)
            self._buffers[path] = buffer
        buffer.copy_(tensor.detach(), non_blocking=on_gpu)
        self._copied_from_gpu |= on_gpu
        return buffer
