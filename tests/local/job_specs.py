"""CustomJob requests for the JobService tests, as plain dicts the real JobServiceClient accepts."""

from __future__ import annotations

import uuid

from local.names import LOCAL_PROJECT, LOCAL_REGION

PARENT = f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"
# The session JobService maps this image to tests/local/programs/fake_node.py (see tests/conftest.py).
FAKE_NODE_IMAGE = "localhost/tests/fake-node:latest"
DDP_PROGRAM = "tests/local/programs/ddp_allreduce.py"


def pool(
    *args: str,
    replicas: int = 1,
    machine: str = "n1-standard-8",
    accelerator: str | None = "NVIDIA_TESLA_T4",
    count: int = 2,
    image: str = FAKE_NODE_IMAGE,
    command: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> dict:
    machine_spec: dict = {"machine_type": machine}
    if accelerator:
        machine_spec |= {"accelerator_type": accelerator, "accelerator_count": count}
    container: dict = {"image_uri": image, "args": list(args)}
    if command:
        container["command"] = command
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {"machine_spec": machine_spec, "replica_count": replicas, "container_spec": container}


def custom_job(
    *pools: dict,
    display_name: str = "jobservice-test",
    labels: dict[str, str] | None = None,
    output: str | None = None,
    timeout_seconds: int | None = None,
    restart_on_worker_restart: bool = False,
    strategy: str | None = None,
    disable_retries: bool = False,
) -> dict:
    spec: dict = {"worker_pool_specs": list(pools)}
    if output:
        spec["base_output_directory"] = {"output_uri_prefix": output}
    scheduling: dict = {}
    if timeout_seconds:
        scheduling["timeout"] = {"seconds": timeout_seconds}
    if restart_on_worker_restart:
        scheduling["restart_job_on_worker_restart"] = True
    if strategy:
        scheduling["strategy"] = strategy
    if disable_retries:
        scheduling["disable_retries"] = True
    if scheduling:
        spec["scheduling"] = scheduling
    return {"display_name": display_name, "job_spec": spec, "labels": labels or {}}


def unique_value() -> str:
    """A label value no other test uses, to pick out one test's jobs on the shared JobService."""
    return f"t{uuid.uuid4().hex[:12]}"
