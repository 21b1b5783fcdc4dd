"""A smoke test of the trainer on a real GPU, for whoever has one (this repository's machines do not):

    python bench/gpu_smoke.py [--processes N] [--skip-compile] [--keep DIR]

It prints each check and whether it held, and exits non-zero if one did not:
1. CUDA is usable by this PyTorch build (the check `trainer.launch` makes before refusing a GPU machine);
2. collectives run on the process group's device: `trainer.distributed.collectives` under a real NCCL group of one
   process (NCCL refuses CPU tensors, so a misplaced tensor fails here as it would on Vertex);
3. bf16 autocast is used where the GPU runs it natively (compute capability 8.0+) and the step's matmul is bf16;
4. `torch.compile` builds and runs forward and backward of the built-in MLP (skip with --skip-compile);
5. a short `trainer.launch` run with NCCL: `--processes` processes (default: one per visible GPU; NCCL refuses two
   ranks on one GPU, "Duplicate GPU detected", NVIDIA/nccl#418, so one GPU means one process), NCCL_DEBUG=INFO,
   exit 0 and a model written; the NCCL lines naming the network and any NET plugin are printed (with Reduction
   Server the reduction-server plugin should appear there), then the NET plugin line it saw: NCCL's own
   "NET/Plugin" line and the trainer's "NCCL NET plugin loaded" line (the library mapped into the process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NCCL_NETWORK_MARKERS = ("NET/", "Using network", "NCCL version")


def check(name: str, held: bool, detail: str = "") -> bool:
    print(f"[{'ok' if held else 'FAILED'}] {name}{': ' + detail if detail else ''}", flush=True)
    return held


def cuda_usable() -> bool:
    import torch

    from trainer.distributed.accelerators import cuda_problem

    problem = cuda_problem()
    if problem:
        return check("CUDA usable", False, problem)
    name = torch.cuda.get_device_name(0)
    capability = torch.cuda.get_device_capability(0)
    return check("CUDA usable", True, f"{torch.cuda.device_count()} × {name}, capability {capability}, "
                 f"torch {torch.__version__}, built for {torch.cuda.get_arch_list()}")  # fmt: skip


def collectives_on_the_group_device() -> bool:
    import numpy as np
    import torch
    import torch.distributed as dist

    from trainer.distributed import collectives

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda", 0))
    try:
        collectives.open_side_group(60)
        device = collectives.group_device()
        summed = collectives.sum_array(np.array([1.0, 2.0])).tolist()
        flags = collectives.max_of_floats([0.0, 1.0])
        largest = collectives.max_across_ranks(7)
        gathered = collectives.gather_objects({"rank": 0})
        collectives.wait_for_all()
        held = device.type == "cuda" and summed == [1.0, 2.0] and flags == [0.0, 1.0] and largest == 7
        return check("collectives on the group's device (NCCL)", held and gathered == [{"rank": 0}], f"{device}")
    except Exception as e:
        return check("collectives on the group's device (NCCL)", False, f"{type(e).__name__}: {e}")
    finally:
        collectives.close_side_group()
        dist.destroy_process_group()


def bf16_where_native() -> bool:
    import torch

    from trainer.model import gpu_feeding

    device = torch.device("cuda", 0)
    use_bf16 = gpu_feeding.configure(device)
    capability = torch.cuda.get_device_capability(device)
    if not use_bf16:
        return check("bf16 autocast", capability < gpu_feeding.BF16_MIN_CAPABILITY,
                     f"off on capability {capability} (fp32 with TF32 matmuls)")  # fmt: skip
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = torch.nn.Linear(16, 16).to(device)(torch.randn(8, 16, device=device))
    return check("bf16 autocast", out.dtype == torch.bfloat16, f"on at capability {capability}, matmul in {out.dtype}")


def compile_runs() -> bool:
    import torch

    from trainer.model.network import mlp

    device = torch.device("cuda", 0)
    try:
        model = torch.compile(mlp(16, 3, hidden_sizes=[64, 32], dropout=0.1).to(device))
        loss = model(torch.randn(32, 16, device=device)).sum()
        loss.backward()
        torch.cuda.synchronize()
        return check("torch.compile forward and backward", bool(torch.isfinite(loss)))
    except Exception as e:
        return check("torch.compile forward and backward", False, f"{type(e).__name__}: {e}")


def trainer_run(processes: int, keep: Path | None) -> bool:
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    folder = keep or Path(tempfile.mkdtemp(prefix="gpu-smoke-"))
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20_000, 8))
    pa_csv.write_csv(pa.table({**{f"x{i}": x[:, i] for i in range(8)}, "y": x[:, 0] - 2 * x[:, 1]}),
                     folder / "data.csv")  # fmt: skip
    env = {**os.environ, "NCCL_DEBUG": "INFO", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "trainer.launch", "--nproc-per-node", str(processes), "--data",
               str(folder / "data.csv"), "--target", "y", "--epochs", "2", "--batch-size", "256",
               "--model-dir", str(folder / "model"), "--checkpoint-dir", str(folder / "checkpoints"),
               "--tensorboard-dir", str(folder / "logs")]  # fmt: skip
    finished = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    output = finished.stdout + finished.stderr
    (folder / "run.log").write_text(output)
    network = sorted({line.strip() for line in output.splitlines() if any(m in line for m in NCCL_NETWORK_MARKERS)})
    for line in network[:20]:
        print(f"    {line}")
    print(f"    NET plugin line seen: {net_plugin_lines(output)}")
    metrics_file = folder / "model" / "metrics.json"
    metrics = json.loads(metrics_file.read_text()) if metrics_file.exists() else {}
    held = finished.returncode == 0 and metrics.get("world_size") == processes
    detail = f"exit {finished.returncode}, val_rmse {metrics.get('val_rmse')}, log {folder / 'run.log'}"
    return check(f"trainer.launch with {processes} NCCL process(es)", held, detail)


def net_plugin_lines(output: str) -> str:
    """NCCL's first "NET/Plugin" line and the trainer's report of the plugin it found loaded, or what is missing."""
    nccl = next((line.strip() for line in output.splitlines() if "NET/Plugin" in line), None)
    trainer = next((line.strip() for line in output.splitlines() if "NCCL NET plugin loaded" in line
                    or "NCCL loaded no NET plugin" in line), None)  # fmt: skip
    return " | ".join([nccl or "no NCCL NET/Plugin line (NCCL_DEBUG below INFO?)",
                       trainer or "no trainer NET plugin line"])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/gpu_smoke.py", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)  # fmt: skip
    p.add_argument("--processes", type=int, default=None, help="trainer processes (default: one per visible GPU)")
    p.add_argument("--skip-compile", action="store_true", help="leave out the torch.compile check")
    p.add_argument("--keep", type=Path, default=None, help="folder for the trainer run's data, outputs and log")
    args = p.parse_args(argv)

    import torch

    if not cuda_usable():
        return 2
    processes = args.processes or torch.cuda.device_count()
    if processes > torch.cuda.device_count():
        check("process count", False, "NCCL refuses two ranks on one GPU (NVIDIA/nccl#418); use at most one per GPU")
        return 2
    results = [collectives_on_the_group_device(), bf16_where_native()]
    if not args.skip_compile:
        results.append(compile_runs())
    results.append(trainer_run(processes, args.keep))
    print(f"{sum(results)} of {len(results)} checks held")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
