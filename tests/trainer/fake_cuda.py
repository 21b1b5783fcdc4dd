"""A stand-in for a GPU process group on a machine without one: tensors that say they live on `cuda:N` (their
numbers stay on the CPU underneath), and a process-group backend that, like NCCL, serves only CUDA tensors and
refuses a CPU tensor with NCCL's own complaint. It wraps gloo for the arithmetic. Any trainer code that hands
a collective a tensor on another device than the group's fails under it, as it would on real GPUs."""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

BACKEND = "refuses_cpu"


class FakeCudaTensor(torch.Tensor):
    """Claims `cuda:N`; every operation runs on the CPU tensor inside and wraps the results again."""

    inner: torch.Tensor
    index: ClassVar[int] = 0

    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        device = torch.device("cuda", FakeCudaTensor.index)
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=device)

    def __init__(self, inner: torch.Tensor):
        self.inner = inner

    def __repr__(self) -> str:
        return f"FakeCudaTensor({self.inner!r})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "c10d":  # let the process group see the tensor and its (claimed) device
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
                return func(*args, **kwargs)
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        if func is torch.ops.aten._to_copy.default and _asks_for(kwargs, "cpu"):
            return out  # .cpu() / .to("cpu") leaves the fake GPU
        return tree_map(lambda t: FakeCudaTensor(t) if isinstance(t, torch.Tensor) else t, out)


def _unwrap(value):
    return value.inner if isinstance(value, FakeCudaTensor) else value


def _asks_for(kwargs: dict, device_type: str) -> bool:
    device = kwargs.get("device")
    return device is not None and torch.device(device).type == device_type


class PlaceOnFakeCuda(TorchDispatchMode):
    """`tensor.to("cuda")` and factories with `device="cuda"` make FakeCudaTensors."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _asks_for(kwargs, "cuda"):
            plain = func(*tree_map(_unwrap, args), **dict(tree_map(_unwrap, kwargs), device="cpu"))
            return FakeCudaTensor(plain)
        return func(*args, **kwargs)


class RefusesCpuTensors(dist.ProcessGroup):
    """Serves CUDA tensors only, like NCCL; the reductions themselves are gloo's, on the CPU numbers inside."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self.gloo = dist.ProcessGroupGloo(store, rank, size, timeout)
        self.tensor_devices: list[str] = []  # every device a collective was handed, for the test to read

    def _numbers(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        for tensor in tensors:
            self.tensor_devices.append(str(tensor.device))
            if tensor.device.type != "cuda":
                raise RuntimeError(f"No backend type associated with device type {tensor.device.type}")
        return [t.inner for t in tensors]

    def allreduce(self, tensors, opts=None):
        return self.gloo.allreduce(self._numbers(tensors), opts or dist.AllreduceOptions())

    def broadcast(self, tensors, opts=None):
        return self.gloo.broadcast(self._numbers(tensors), opts or dist.BroadcastOptions())

    def getBackendName(self) -> str:
        return BACKEND


def use_fake_cuda(local_rank: int) -> PlaceOnFakeCuda:
    """Register the backend and pretend CUDA is set up; returns the mode to enter around the code under test."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, RefusesCpuTensors, devices=["cuda"])
    torch.cuda._lazy_init = lambda: None  # there is no driver to initialise; the tensors never reach one
    FakeCudaTensor.index = local_rank
    return PlaceOnFakeCuda()
