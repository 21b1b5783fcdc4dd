"""Refusing to train on the CPU of a machine that was paid for with GPUs.

When this node's worker pool in `CLUSTER_SPEC` asks for accelerators and CUDA is not usable — no driver, a
driver older than the image's CUDA, or a GPU whose architecture this PyTorch build has no kernels for — the
launcher stops before torchrun with an error that names the mismatch. The local stack runs GPU requests as
CPU processes on purpose and says so with `TRAINCTL_LOCAL_PROCS_PER_NODE`; only there is CPU allowed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

LOCAL_PROCS_ENV = "TRAINCTL_LOCAL_PROCS_PER_NODE"  # set by the local JobService, which stands GPUs in with CPUs


@dataclass(frozen=True)
class Requested:
    pool: str
    accelerator_type: str
    count: int


def _field(mapping: Mapping, snake: str):
    """Vertex's `job` in CLUSTER_SPEC is the CustomJobSpec as JSON; read either spelling of a field."""
    camel = snake.split("_")[0] + "".join(word.title() for word in snake.split("_")[1:])
    return mapping.get(snake, mapping.get(camel))


def machine_spec(env: Mapping[str, str]) -> tuple[str, dict]:
    """This node's pool (`workerpool0`…) and its machine spec in CLUSTER_SPEC's `job` ({} when not given)."""
    spec = json.loads(env["CLUSTER_SPEC"]) if env.get("CLUSTER_SPEC") else {}
    pool = (spec.get("task") or {}).get("type") or "workerpool0"
    pools = _field(spec.get("job") or {}, "worker_pool_specs") or []
    index = int(pool.removeprefix("workerpool")) if pool.removeprefix("workerpool").isdigit() else 0
    return pool, (_field(pools[index] or {}, "machine_spec") or {}) if index < len(pools) else {}


def requested_accelerators(env: Mapping[str, str]) -> Requested | None:
    """The accelerators CLUSTER_SPEC's machine spec gives this node's pool, or None when it asks for none."""
    pool, machine = machine_spec(env)
    count = int(_field(machine, "accelerator_count") or 0)
    kind = str(_field(machine, "accelerator_type") or "")
    if count < 1 or kind in ("", "ACCELERATOR_TYPE_UNSPECIFIED"):
        return None
    return Requested(pool, kind, count)


def missing_kernels(capabilities: list[tuple[int, int]], arch_list: list[str]) -> list[str]:
    """The GPU architectures (`sm_XY`) present that this PyTorch build has neither kernels nor PTX for."""
    built = {a.removeprefix("sm_").removeprefix("compute_") for a in arch_list}
    ptx = sorted(int(a.removeprefix("compute_")) for a in arch_list if a.startswith("compute_"))
    missing = []
    for major, minor in capabilities:
        arch = f"{major}{minor}"
        # PTX is compiled just in time for the same or any newer architecture.
        if arch not in built and not any(p <= int(arch) for p in ptx):
            missing.append(f"sm_{arch}")
    return missing


def cuda_problem() -> str | None:
    """Why CUDA cannot train here, or None when it can."""
    import torch

    build = f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU-only build'})"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return f"{build} sees no usable GPU: no NVIDIA driver, or one older than the image's CUDA"
    capabilities = [torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())]
    missing = missing_kernels(capabilities, torch.cuda.get_arch_list())
    if missing:
        return f"{build} has no kernels for this GPU's architecture {missing} (built for {torch.cuda.get_arch_list()})"
    return None


def too_many_processes(nproc: int, visible_gpus: int) -> str | None:
    """Why `nproc` processes cannot train on this node's GPUs, or None. Each NCCL process takes `cuda:LOCAL_RANK`,
    so a process past the last GPU fails with "invalid device ordinal" and two on one GPU with NCCL's "Duplicate
    GPU detected" (NVIDIA/nccl#418) — both seen on an H100 (bench/RESULTS.md, "The trainer on a GPU")."""
    if visible_gpus < 1 or nproc <= visible_gpus:
        return None
    return (
        f"--nproc-per-node {nproc} is more processes than this node's {visible_gpus} visible GPU(s): NCCL runs one "
        f"process per GPU; ask for at most {visible_gpus}, or leave --nproc-per-node out (one per GPU)"
    )


def refusal(env: Mapping[str, str]) -> str | None:
    """The error to stop with when this node was given GPUs that cannot be used, else None."""
    requested = requested_accelerators(env)
    if requested is None or env.get(LOCAL_PROCS_ENV):
        return None
    problem = cuda_problem()
    if problem is None:
        return None
    return (
        f"CLUSTER_SPEC gives this node ({requested.pool}) {requested.count} × {requested.accelerator_type}, but "
        f"{problem}. The image and the machine's driver do not match; refusing to train on the CPU of a GPU machine"
    )
