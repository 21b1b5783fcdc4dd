"""A real PyTorch DDP program for the JobService tests, run as one Vertex node.

Node mode (what the job runs): start torchrun for this node from the Vertex environment — WORLD_SIZE
nodes, this node's RANK, MASTER_ADDR/MASTER_PORT, TRAINCTL_LOCAL_PROCS_PER_NODE processes — with this
file in worker mode. Worker mode: join the gloo process group, all-reduce (rank + 1) and write what
each rank got to OUT_DIR/rank-<global rank>.json.

python ddp_allreduce.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def run_node(out_dir: str) -> int:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={os.environ['WORLD_SIZE']}",
        f"--node_rank={os.environ['RANK']}",
        f"--nproc_per_node={os.environ['TRAINCTL_LOCAL_PROCS_PER_NODE']}",
        f"--master_addr={os.environ['MASTER_ADDR']}",
        f"--master_port={os.environ['MASTER_PORT']}",
        __file__,
        "--worker",
        out_dir,
    ]
    os.execv(sys.executable, command)


def run_worker(out_dir: str) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    Path(out_dir, f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "world_size": world, "sum": value.item()}))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        sys.exit(run_worker(sys.argv[2]))
    sys.exit(run_node(sys.argv[1]))
