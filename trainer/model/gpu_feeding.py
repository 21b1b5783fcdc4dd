"""The settings that keep GPUs busy, decided in one place from the device (all of them are no-ops on CPU):

- TF32 matrix multiplies (`torch.set_float32_matmul_precision("high")`) and bf16 autocast, the latter only on
  compute capability 8.0 and newer (Ampere+), where bf16 runs on tensor cores — older GPUs emulate it slowly;
- the fused AdamW kernel on CUDA (one launch per step instead of several per parameter);
- DDP's default bucketing unless a size is asked for: an explicit `bucket_cap_mb` also gives up DDP's small
  first bucket, which starts the first all-reduce early (torch/nn/parallel/distributed.py, `_BucketConfig`);
  Reduction Server wants 64 MB buckets and the planner passes `--bucket-cap-mb 64` only then;
- `torch.compile` on request (`--compile`): static shapes make it cheap to compile, but compiling costs start-up
  time and it is not worth it for every model. DDP is wrapped first so Dynamo splits the graph at bucket
  boundaries and keeps communication overlapped (PyTorch's DDP notes).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

BF16_MIN_CAPABILITY = (8, 0)


def bf16_autocast(device: torch.device, capability: tuple[int, int] | None) -> bool:
    return device.type == "cuda" and capability is not None and tuple(capability) >= BF16_MIN_CAPABILITY


def configure(device: torch.device) -> bool:
    """Set the process-wide precision for `device`; returns whether training steps run under bf16 autocast."""
    if device.type != "cuda":
        return False
    torch.set_float32_matmul_precision("high")
    return bf16_autocast(device, torch.cuda.get_device_capability(device))


def optimizer_options(device: torch.device) -> dict:
    return {"fused": True} if device.type == "cuda" else {}


def make_optimizer(model: nn.Module, args: argparse.Namespace, device: torch.device) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        model.parameters(), lr=args.learning_rate, weight_decay=args.weight_decay, **optimizer_options(device)
    )


def wrap(model: nn.Module, device: torch.device, bucket_cap_mb: float | None) -> DDP:
    return DDP(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=bucket_cap_mb,  # None: DDP's default, with its small first bucket
        gradient_as_bucket_view=True,
    )


def forward_of(ddp: DDP, compile_model: bool) -> Callable[..., torch.Tensor]:
    """What a training step calls: the DDP module, compiled when asked."""
    return torch.compile(ddp) if compile_model else ddp
