"""What each node of a CustomJob runs locally: its command and its Vertex environment.

One node per replica of pools 0 and 1, named as Vertex names them (`workerpool0-0`, `workerpool1-0`, …),
with the variables reference/vertex.md §2 documents: `CLUSTER_SPEC` (every pool that was given,
`task.type`/`task.index`, `"environment": "cloud"`, `job` = the CustomJobSpec with proto field names),
`WORLD_SIZE` (nodes of pools 0+1), `RANK` (node index), `MASTER_ADDR`/`MASTER_PORT`, the `AIP_*_DIR`
output folders and `CLOUD_ML_JOB_ID`. Pools 2 and up (Reduction Server, evaluators) are listed in
CLUSTER_SPEC but not started.

Local stand-ins: GPUs become `TRAINCTL_LOCAL_PROCS_PER_NODE` CPU processes (the trainer's launcher reads
it), `STORAGE_EMULATOR_HOST` makes `gs://` reach fake-gcs-server, and an image map gives images the
entry point their container would have had.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from google.cloud.aiplatform_v1.types import CustomJob, CustomJobSpec
from google.protobuf import json_format

from local.jobservice.validation import is_empty_pool
from local.names import LOCAL_TRAINER_IMAGE
from local.processes import free_port

PROCS_PER_NODE_VAR = "TRAINCTL_LOCAL_PROCS_PER_NODE"

TRAINER_ENTRYPOINT = ("python", "-m", "trainer.launch")
DEFAULT_IMAGE_MAP: dict[str, tuple[str, ...]] = {LOCAL_TRAINER_IMAGE: TRAINER_ENTRYPOINT}
NODE_POOLS = (0, 1)  # the pools whose replicas run; pool 0 is the primary
_ENV_REFERENCE = re.compile(r"\$\$\(([A-Za-z_][A-Za-z0-9_]*)\)|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class NodePlanError(ValueError):
    """The job cannot run here (say, an image with no known entry point); the job fails with this text."""


@dataclass(frozen=True)
class ExecutionSettings:
    """How the JobService runs nodes on this machine."""

    image_map: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_IMAGE_MAP))
    max_procs_per_node: int = 2
    storage_emulator_host: str | None = None
    workdir: Path = field(default_factory=Path.cwd)
    cancel_grace: float = 5.0
    base_env: Mapping[str, str] | None = None  # None: the server's own environment


@dataclass(frozen=True)
class NodePlan:
    name: str
    rank: int
    command: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class JobPlan:
    nodes: list[NodePlan]
    unstarted_pools: dict[str, int]  # "workerpool2" → replica count, for the log line that says so


def plan_nodes(job: CustomJob, settings: ExecutionSettings, master_port: int) -> JobPlan:
    """Commands and environments for every node of `job`; raises NodePlanError when one cannot run."""
    spec = job.job_spec
    pools = [(index, pool) for index, pool in enumerate(spec.worker_pool_specs) if not is_empty_pool(pool)]
    cluster = {
        f"workerpool{index}": [_address(index, replica, master_port) for replica in range(pool.replica_count)]
        for index, pool in pools
    }
    world_size = sum(pool.replica_count for index, pool in pools if index in NODE_POOLS)
    spec_dict = json_format.MessageToDict(CustomJobSpec.pb(spec), preserving_proto_field_name=True)
    job_id = job.name.rsplit("/", 1)[-1]
    nodes = []
    for index, pool in pools:
        if index not in NODE_POOLS:
            continue
        command = _command(pool.container_spec, settings.image_map)
        for replica in range(pool.replica_count):
            cluster_spec = {
                "cluster": cluster,
                "environment": "cloud",
                "task": {"type": f"workerpool{index}", "index": replica},
                "job": spec_dict,
            }
            vertex_env = {
                "CLUSTER_SPEC": json.dumps(cluster_spec),
                "WORLD_SIZE": str(world_size),
                "RANK": str(0 if index == 0 else 1 + replica),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(master_port),
                "CLOUD_ML_JOB_ID": job_id,
                **_output_dirs(spec.base_output_directory.output_uri_prefix),
            }
            env = _node_env(settings, pool, vertex_env)
            nodes.append(NodePlan(f"workerpool{index}-{replica}", int(vertex_env["RANK"]), command, env))
    unstarted = {f"workerpool{index}": pool.replica_count for index, pool in pools if index not in NODE_POOLS}
    return JobPlan(nodes, unstarted)


def _address(pool: int, replica: int, master_port: int) -> str:
    # Every node is this machine; the primary's address is the rendezvous point, the others get
    # distinct ports of their own so addresses stay unique, as separate hosts' would be.
    port = master_port if (pool, replica) == (0, 0) else free_port()
    return f"127.0.0.1:{port}"


def _output_dirs(base: str) -> dict[str, str]:
    if not base:
        return {}
    base = base.rstrip("/")
    return {
        "AIP_MODEL_DIR": f"{base}/model/",
        "AIP_CHECKPOINT_DIR": f"{base}/checkpoints/",
        "AIP_TENSORBOARD_LOG_DIR": f"{base}/logs/",
    }


def _command(container, image_map: Mapping[str, tuple[str, ...]]) -> list[str]:
    """The container's command (its ENTRYPOINT when none is given) followed by its args."""
    entrypoint = list(container.command) or list(_mapped_entrypoint(container.image_uri, image_map))
    command = entrypoint + list(container.args)
    # Inside the image `python` is the image's interpreter; here it is the one running the JobService,
    # which has the project's dependencies.
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    return command


def _mapped_entrypoint(image: str, image_map: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    # The longest matching prefix wins, so "registry/repo/trainer" maps every tag of that image.
    matches = [prefix for prefix in image_map if image.startswith(prefix)]
    if not matches:
        known = ", ".join(sorted(image_map)) or "none"
        raise NodePlanError(
            f"Image {image!r} has no local entry point: set container_spec.command, or map the image to "
            f"a command with the JobService's --image-map (mapped images: {known})."
        )
    return image_map[max(matches, key=len)]


def _node_env(settings: ExecutionSettings, pool, vertex_env: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ if settings.base_env is None else settings.base_env)
    env["PYTHONUNBUFFERED"] = "1"  # so replica logs show lines as they happen
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(settings.workdir), env.get("PYTHONPATH", "")]))
    if settings.storage_emulator_host:
        env["STORAGE_EMULATOR_HOST"] = settings.storage_emulator_host
    gpus = pool.machine_spec.accelerator_count
    env[PROCS_PER_NODE_VAR] = str(max(1, min(gpus, settings.max_procs_per_node)))
    # The container's own variables may refer to earlier ones and to Vertex's with $(NAME); Vertex's
    # variables are applied last, as the platform sets them.
    for variable in pool.container_spec.env:
        env[variable.name] = _expand(variable.value, {**env, **vertex_env})
    env.update(vertex_env)
    return env


def _expand(value: str, known: Mapping[str, str]) -> str:
    """Kubernetes-style `$(NAME)` expansion as EnvVar documents it: `$$(NAME)` stays literal, unknown
    names are left as written."""

    def replace(match: re.Match) -> str:
        escaped, name = match.groups()
        if escaped:
            return f"$({escaped})"
        return known.get(name, match.group(0))

    return _ENV_REFERENCE.sub(replace, value)
