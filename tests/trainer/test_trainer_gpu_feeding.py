"""The settings that keep GPUs fed, decided from the device: they hold on this CPU-only machine as decisions,
and bench/gpu_smoke.py checks them on a real GPU."""

from __future__ import annotations

import argparse

import pytest
import torch
import torch.distributed as dist
from torch import nn

from trainer.flags import parse_args
from trainer.model import gpu_feeding


@pytest.fixture
def world_of_one():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_ddp_keeps_its_small_first_bucket_unless_a_size_is_asked_for(world_of_one):
    """Guards issue 17 item 4: --bucket-cap-mb is unset by default (an explicit 25 gave up the first bucket)."""
    default = parse_args(["--data", "d.csv", "--target", "y"]).bucket_cap_mb
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    small_first = gpu_feeding.wrap(model, torch.device("cpu"), default)
    assert small_first._bucket_config.first_bucket_bytes_cap == dist._DEFAULT_FIRST_BUCKET_BYTES
    reduction_server = gpu_feeding.wrap(model, torch.device("cpu"), 64.0)
    assert reduction_server._bucket_config.first_bucket_bytes_cap == 64 * 1024 * 1024


def test_bf16_autocast_only_where_gpus_run_it_natively():
    """Guards issue 17 item 4: bf16 autocast on compute capability 8.0 and newer only."""
    cuda = torch.device("cuda", 0)
    assert gpu_feeding.bf16_autocast(cuda, (8, 0)) and gpu_feeding.bf16_autocast(cuda, (9, 0))
    assert not gpu_feeding.bf16_autocast(cuda, (7, 5))  # T4
    assert not gpu_feeding.bf16_autocast(cuda, (7, 0))  # V100
    assert not gpu_feeding.bf16_autocast(torch.device("cpu"), None)
    assert gpu_feeding.configure(torch.device("cpu")) is False


def test_the_fused_adamw_on_gpus_and_the_plain_one_on_cpu():
    """Guards issue 17 item 4: fused AdamW on CUDA; the CPU keeps the kernel its bitwise tests were taken with."""
    assert gpu_feeding.optimizer_options(torch.device("cuda", 0)) == {"fused": True}
    args = argparse.Namespace(learning_rate=1e-3, weight_decay=0.01)
    optimizer = gpu_feeding.make_optimizer(nn.Linear(2, 1), args, torch.device("cpu"))
    assert not optimizer.defaults.get("fused")


def test_compile_is_opt_in(world_of_one):
    """Guards issue 17 item 4: --compile wraps DDP in torch.compile; without it the DDP module runs as is."""
    ddp = gpu_feeding.wrap(nn.Linear(4, 2), torch.device("cpu"), None)
    assert gpu_feeding.forward_of(ddp, compile_model=False) is ddp
    compiled = gpu_feeding.forward_of(ddp, compile_model=True)  # compiled lazily: nothing is built here
    assert compiled is not ddp and compiled._orig_mod is ddp
    assert parse_args(["--data", "d.csv", "--target", "y"]).compile is False


def test_deterministic_gpu_kernels_by_default_only_for_the_built_in_model():
    """Guards issue 17 item 10: use_deterministic_algorithms raises for custom models using common ops on CUDA,
    so it is on for the built-in MLP (bitwise resume on GPUs) and opt-in for custom --models."""
    from trainer.flags import wants_determinism

    base = ["--data", "d.csv", "--target", "y"]
    assert wants_determinism(parse_args(base))
    assert not wants_determinism(parse_args([*base, "--model", "mine:factory"]))
    assert wants_determinism(parse_args([*base, "--model", "mine:factory", "--deterministic", "on"]))
    assert not wants_determinism(parse_args([*base, "--deterministic", "off"]))
