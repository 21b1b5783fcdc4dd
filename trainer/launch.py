"""The container entry point: `python -m trainer.launch [ARGS]`.

Vertex AI describes the cluster per node — `WORLD_SIZE` is the number of nodes, `RANK` this node's index,
`MASTER_ADDR`/`MASTER_PORT` the primary node — with `CLUSTER_SPEC` (worker pools 0 and 1; pool 2 holds Reduction
Server reducers, which run no trainer) as the fallback. This turns that into a torchrun invocation with one
process per visible GPU, or on CPU the count the local stack gives in `TRAINCTL_LOCAL_PROCS_PER_NODE`, or
`--nproc-per-node`. torchrun restarts a failed worker group up to `--max-restarts` times (the trainer resumes
from its last checkpoint) and forwards SIGTERM to the workers, which checkpoint and stop. With no Vertex
environment it runs a single node. Every argument this program does not know goes to `trainer.train`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from trainer import collector, logs
from trainer.distributed import accelerators, nccl_env, net_plugin, shared_memory
from trainer.distributed.accelerators import LOCAL_PROCS_ENV
from trainer.outputs import finished_watch

DEFAULT_MASTER_PORT = 29500
TRAINING_POOLS = ("workerpool0", "workerpool1")  # workerpool2: Reduction Server, workerpool3: evaluators


@dataclass(frozen=True)
class Cluster:
    nnodes: int
    node_rank: int
    master_addr: str = "127.0.0.1"
    master_port: int = DEFAULT_MASTER_PORT
    local_addr: str | None = None  # this node's host name in CLUSTER_SPEC, what the other nodes reach it by


def _this_node_host(env: Mapping[str, str]) -> str | None:
    if not env.get("CLUSTER_SPEC"):
        return None
    spec = json.loads(env["CLUSTER_SPEC"])
    task = spec.get("task") or {}
    addresses = (spec.get("cluster") or {}).get(task.get("type")) or []
    index = int(task.get("index", 0))
    return addresses[index].rpartition(":")[0] or addresses[index] if index < len(addresses) else None


def cluster_from_env(env: Mapping[str, str]) -> Cluster:
    """This node's place in the job, from Vertex's PyTorch variables, else from CLUSTER_SPEC, else one node."""
    if env.get("WORLD_SIZE") and env.get("RANK") and env.get("MASTER_ADDR"):
        return Cluster(
            nnodes=int(env["WORLD_SIZE"]),
            node_rank=int(env["RANK"]),
            master_addr=env["MASTER_ADDR"],
            master_port=int(env.get("MASTER_PORT") or DEFAULT_MASTER_PORT),
            local_addr=_this_node_host(env),
        )
    if env.get("CLUSTER_SPEC"):
        spec = json.loads(env["CLUSTER_SPEC"])
        pools = spec.get("cluster", {})
        primary = pools.get("workerpool0") or []
        if not primary:
            raise ValueError("CLUSTER_SPEC has no workerpool0, so there is no primary node to meet at")
        task = spec.get("task", {})
        if task.get("type") not in TRAINING_POOLS:
            raise ValueError(f"this node is in {task.get('type')!r}, which runs no trainer (pools 0 and 1 do)")
        host, _, port = primary[0].rpartition(":")
        node_rank = 0 if task["type"] == "workerpool0" else 1 + int(task.get("index", 0))
        return Cluster(
            nnodes=sum(len(pools.get(p) or []) for p in TRAINING_POOLS),
            node_rank=node_rank,
            master_addr=host or primary[0],
            master_port=int(env.get("MASTER_PORT") or port or DEFAULT_MASTER_PORT),
            local_addr=_this_node_host(env),
        )
    return Cluster(nnodes=1, node_rank=0)


def processes_per_node(requested: int | None, env: Mapping[str, str], visible_gpus: int) -> int:
    if requested:
        return requested
    if visible_gpus:
        return visible_gpus
    return int(env.get(LOCAL_PROCS_ENV) or 1)


def torchrun_argv(
    cluster: Cluster,
    nproc: int,
    max_restarts: int,
    run_id: str,
    train_args: list[str],
    rendezvous_timeout: int = 1800,
) -> list[str]:
    argv = ["--nproc-per-node", str(nproc), "--max-restarts", str(max_restarts)]
    if cluster.nnodes == 1:
        argv += ["--standalone"]
    else:
        # c10d rendezvous (not static): when one node restarts its workers, the others notice the new round
        # and restart theirs too, so a bounded restart works across nodes. The primary node hosts the store.
        # Nodes pull a multi-GB image at different times: a worker may wait long for the primary's store
        # (read_timeout, 60 s by default) and for the others to join (join_timeout, 600 s by default).
        conf = f"is_host={'true' if cluster.node_rank == 0 else 'false'}"
        conf += f",join_timeout={rendezvous_timeout},read_timeout={rendezvous_timeout}"
        argv += [
            "--nnodes", str(cluster.nnodes),
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{cluster.master_addr}:{cluster.master_port}",
            "--rdzv-id", run_id,
            "--rdzv-conf", conf,
        ]  # fmt: skip
        if cluster.local_addr:  # the name the other nodes know this one by, not whatever the host resolves
            argv += ["--local-addr", cluster.local_addr]
    return [*argv, "--module", "trainer.train", *train_args]


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        prog="python -m trainer.launch",
        allow_abbrev=False,
        description="Start trainer.train on this node with torchrun; other arguments go to it.",
    )
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        help=f"processes on this node (default: visible GPUs, else ${LOCAL_PROCS_ENV}, else 1)",
    )
    # One restart covers a crashed process; Vertex restarts failed workers itself and the controller resubmits
    # preempted jobs, so more restarts here mostly repeat a deterministic failure (a missing dataset, say).
    p.add_argument("--max-restarts", type=int, default=1, help="restarts of a failed worker group before giving up")
    p.add_argument(
        "--rendezvous-timeout-seconds",
        type=int,
        default=1800,
        help="how long nodes wait for each other at start-up (image pulls finish at different times)",
    )
    return p.parse_known_args(argv)


def refuse(reason: str) -> int:
    """Stop before torchrun, saying why in the log and, on Vertex, where the controller's `failed` event reads it."""
    logs.error(reason)
    if os.environ.get("AIP_MODEL_DIR"):
        from trainer.outputs.model_folder import report_failure

        report_failure(os.environ["AIP_MODEL_DIR"], RuntimeError(reason))
    return 1


def main(argv: list[str] | None = None) -> int:
    args, train_args = parse_args(sys.argv[1:] if argv is None else argv)
    refusal = accelerators.refusal(os.environ)
    if refusal:
        return refuse(refusal)
    with collector.paused():
        import torch
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.run import main as torchrun

    # torchrun shares its rendezvous store with the workers by default, and a restarted worker group can then
    # read the previous attempt's keys and hang in init_process_group (pytorch/pytorch#135712). Opt out.
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    # A NCCL collective past --collective-timeout-seconds aborts the process (error handling 3, the default,
    # said out loud) after dumping the flight recorder's last collectives, which says which rank hung.
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    rdma = nccl_env.rdma_environment(os.environ)
    if rdma:
        os.environ.update(rdma)
        logs.log("NCCL environment for GPUDirect RDMA", script=str(nccl_env.RDMA_SCRIPT), variables=sorted(rdma))
    if torch.cuda.is_available():  # NCCL runs only on GPUs; the CPU (gloo) path has no NET plugin to check
        net_plugin.check_before_launch(os.environ)
    cluster = cluster_from_env(os.environ)
    nproc = processes_per_node(args.nproc_per_node, os.environ, torch.cuda.device_count())
    too_many = accelerators.too_many_processes(nproc, torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if too_many:
        return refuse(too_many)
    run_id = os.environ.get("CLOUD_ML_JOB_ID") or "trainctl"
    argv = torchrun_argv(cluster, nproc, args.max_restarts, run_id, train_args, args.rendezvous_timeout_seconds)
    shared_memory.check(nproc)
    if cluster.nnodes > 1:  # a finished run must not hang on a node whose rank died while exiting
        finished_watch.watch(finished_watch.checkpoint_dir(train_args, dict(os.environ)))
    logs.log(
        "launching torchrun",
        rank=cluster.node_rank,
        nnodes=cluster.nnodes,
        node_rank=cluster.node_rank,
        nproc_per_node=nproc,
        torchrun_args=argv,
    )
    try:
        torchrun(argv)
    except SignalException as e:
        logs.warning(
            "stopped by a signal; workers were told to checkpoint and stop",
            rank=cluster.node_rank,
            signal=e.sigval.name,
        )
        return 128 + int(e.sigval)
    except ChildFailedError as e:
        codes = sorted({f.exitcode for f in e.failures.values()})
        logs.error(
            "workers failed after the allowed restarts",
            rank=cluster.node_rank,
            exit_codes=codes,
            max_restarts=args.max_restarts,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
