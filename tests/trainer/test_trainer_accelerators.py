"""A job given GPUs never trains on the CPU: when CLUSTER_SPEC's machine spec for this node has accelerators
and CUDA is not usable (no driver, a driver older than the image, no kernels for the GPU), the launcher stops
before torchrun and says which. This machine has no GPU and a CPU-only torch: exactly the unusable case."""

from __future__ import annotations

import json
from pathlib import Path

from trainer_runs import process_env, run

from trainer.distributed.accelerators import (
    LOCAL_PROCS_ENV,
    Requested,
    missing_kernels,
    refusal,
    requested_accelerators,
)

CU126_ARCHES = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


def cluster_spec(accelerator_count: int, task_type: str = "workerpool0", camel_case: bool = False) -> str:
    machine = {"machine_type": "a2-highgpu-2g", "accelerator_type": "NVIDIA_TESLA_A100",
               "accelerator_count": accelerator_count}  # fmt: skip
    if camel_case:
        machine = {"machineType": machine["machine_type"], "acceleratorType": machine["accelerator_type"],
                   "acceleratorCount": accelerator_count}  # fmt: skip
    pools_key, machine_key = ("workerPoolSpecs", "machineSpec") if camel_case else ("worker_pool_specs", "machine_spec")
    return json.dumps({
        "cluster": {"workerpool0": ["host-0:2222"], "workerpool1": ["host-1:2222"]},
        "environment": "cloud",
        "task": {"type": task_type, "index": 0},
        "job": {pools_key: [{machine_key: machine, "replica_count": 1}, {machine_key: machine, "replica_count": 1}]},
    })  # fmt: skip


def test_a_gpu_node_without_usable_cuda_stops_before_torchrun_naming_the_mismatch(tmp_path: Path):
    """Guards issue 17 item 2: paid GPUs, unusable CUDA → exit 1 with the reason, nothing trained on the CPU."""
    env = process_env(CLUSTER_SPEC=cluster_spec(2), AIP_MODEL_DIR=str(tmp_path / "model"))
    finished = run("trainer.launch", ["--data", "unused.csv", "--target", "y"], env, tmp_path / "run.log")

    assert finished.returncode == 1, finished.output[-3000:]
    [error] = [e for e in finished.events if e["severity"] == "ERROR"]
    assert "2 × NVIDIA_TESLA_A100" in error["message"] and "sees no usable GPU" in error["message"]
    assert "refusing to train on the CPU" in error["message"]
    assert not finished.messages("launching torchrun")
    assert "refusing to train on the CPU" in json.loads((tmp_path / "model" / "failure.json").read_text())["error"]


def test_cpu_is_allowed_without_accelerators_and_on_the_local_stack():
    assert refusal({"CLUSTER_SPEC": cluster_spec(0)}) is None
    assert refusal({}) is None
    assert refusal({"CLUSTER_SPEC": cluster_spec(2), LOCAL_PROCS_ENV: "2"}) is None  # GPUs stood in by CPUs
    assert refusal({"CLUSTER_SPEC": cluster_spec(2)}) is not None


def test_the_requested_accelerators_are_read_from_this_nodes_pool_in_either_spelling():
    assert requested_accelerators({"CLUSTER_SPEC": cluster_spec(2, "workerpool1")}) == Requested(
        "workerpool1", "NVIDIA_TESLA_A100", 2
    )
    assert requested_accelerators({"CLUSTER_SPEC": cluster_spec(4, camel_case=True)}).count == 4


def test_a_gpu_newer_than_the_builds_kernels_is_named():
    """Guards issue 17 item 2: a Blackwell GPU (sm_100, sm_120) under a cu126 build has no kernels."""
    assert missing_kernels([(10, 0), (12, 0)], CU126_ARCHES) == ["sm_100", "sm_120"]
    assert missing_kernels([(8, 0), (9, 0)], CU126_ARCHES) == []
    assert missing_kernels([(10, 0)], [*CU126_ARCHES, "compute_90"]) == []  # PTX compiles for newer GPUs
