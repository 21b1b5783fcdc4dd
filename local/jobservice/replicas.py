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

A node starts from a container's environment, never from the JobService's own: what the image would give
(PATH, an empty HOME of its own, the code on PYTHONPATH), the request's `env` expanded as Vertex expands it,
the stand-ins above and the Vertex variables. A developer's credentials and settings stay out of every job.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from google.cloud.aiplatform_v1.types import CustomJob, CustomJobSpec
from google.protobuf import json_format

from local.jobservice.packages import DEFAULT_PACKAGE_INDEX, EXECUTOR_IMAGE_PREFIXES, is_local_executor
from local.jobservice.validation import is_empty_pool
from local.names import LOCAL_TRAINER_IMAGE
from local.processes import PROCESS_MARKER_VARS, free_port

PROCS_PER_NODE_VAR = "TRAINCTL_LOCAL_PROCS_PER_NODE"

TRAINER_ENTRYPOINT = ("python", "-m", "trainer.launch")
DEFAULT_IMAGE_MAP: dict[str, tuple[str, ...]] = {LOCAL_TRAINER_IMAGE: TRAINER_ENTRYPOINT}
NODE_POOLS = (0, 1)  # the pools whose replicas run; pool 0 is the primary
# Docker's PATH for an image that sets none, for a JobService that was started without one.
CONTAINER_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class NodePlanError(ValueError):
    """The job cannot run here (say, an image with no known entry point); the job fails with this text."""


@dataclass(frozen=True)
class ExecutionSettings:
    """How the JobService runs nodes on this machine."""

    image_map: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(DEFAULT_IMAGE_MAP))
    max_procs_per_node: int = 2
    storage_emulator_host: str | None = None
    # Where a package's requirements the executor lacks are fetched from (local/jobservice/packages.py): an index URL,
    # or a folder of wheels.
    package_index: str = DEFAULT_PACKAGE_INDEX
    workdir: Path = field(default_factory=Path.cwd)
    cancel_grace: float = 5.0
    # The JobService's own environment (None: os.environ). Nodes take only PATH, TMPDIR and the process
    # markers from it (see image_env), never the rest.
    host_env: Mapping[str, str] | None = None


@dataclass(frozen=True)
class NodePlan:
    name: str
    rank: int
    command: list[str]
    env: dict[str, str]
    home: Path  # HOME: a folder of the node's own, empty as a new container's


@dataclass(frozen=True)
class JobPlan:
    nodes: list[NodePlan]
    unstarted_pools: dict[str, int]  # "workerpool2" → replica count, for the log line that says so


def plan_nodes(
    job: CustomJob,
    settings: ExecutionSettings,
    master_port: int,
    homes: Path,
    packages: Mapping[int, Path] = {},
    services: Mapping[str, str] = {},
) -> JobPlan:
    """Commands and environments for every node of `job`, each with a home folder `homes/<node>`; `packages`: the
    folder each pythonPackageSpec pool's packages were installed into (packages.py), by pool index; `services`: where
    the job's metadata server and Secret Manager are (secret_manager.py). Raises NodePlanError when one cannot run."""
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
            package = pool.python_package_spec if "python_package_spec" in pool else None
            declared = request_env((package or pool.container_spec).env, vertex_env)
            variables = {**declared, **vertex_env}
            if package is not None:
                command = _package_command(package, variables)
            else:
                command = container_command(pool.container_spec, settings.image_map, variables)
            name, home = f"workerpool{index}-{replica}", homes / f"workerpool{index}-{replica}"
            env = _node_env(settings, pool, declared, {**services, **vertex_env}, home, packages.get(index))
            nodes.append(NodePlan(name, int(vertex_env["RANK"]), command, env, home))
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


def container_command(container, image_map: Mapping[str, tuple[str, ...]], variables: Mapping[str, str]) -> list[str]:
    """The container's command (its ENTRYPOINT when none is given) followed by its args. `$(NAME)` in the
    command and args of the request expands to the container's variables (its `env` and Vertex's), as
    Kubernetes expands them (kubernetes/kubernetes pkg/kubelet/container/helpers.go,
    ExpandContainerCommandAndArgs) and as Google's sample relies on (googleapis/python-aiplatform
    samples/snippets/pipeline_service/create_training_pipeline_custom_job_sample.py: "--model_dir=$(AIP_MODEL_DIR)");
    an image's own entry point is not expanded."""
    given = [_expand(part, variables) for part in container.command]
    entrypoint = given or list(_mapped_entrypoint(container.image_uri, image_map))
    command = entrypoint + [_expand(arg, variables) for arg in container.args]
    # Inside the image `python` is the image's interpreter; here it is the one running the JobService,
    # which has the project's dependencies.
    if command[0] in ("python", "python3"):
        command[0] = sys.executable
    return command


def _package_command(package, variables: Mapping[str, str]) -> list[str]:
    """What Vertex runs for a pythonPackageSpec: the executor's Python on the installed module, with the args
    (expanded like a container's: ContainerSpec and PythonPackageSpec share the EnvVar rules, custom_job.proto)."""
    if not is_local_executor(package.executor_image_uri):
        raise NodePlanError(
            f"Executor {package.executor_image_uri!r} is not one of Vertex's prebuilt PyTorch training containers "
            f"this JobService runs (images under {', '.join(EXECUTOR_IMAGE_PREFIXES)})."
        )
    return [sys.executable, "-m", package.python_module, *(_expand(arg, variables) for arg in package.args)]


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


def _node_env(
    settings: ExecutionSettings,
    pool,
    declared: dict[str, str],
    vertex_env: dict[str, str],
    home: Path,
    package_dir: Path | None = None,
) -> dict[str, str]:
    """What the image gives, which the request's `declared` variables may override; then the machine's
    stand-ins and the platform's variables, which they may not (Vertex applies its own last). A package's node finds
    its installed code first, then the executor's own (this Python's site-packages)."""
    gpus = pool.machine_spec.accelerator_count
    procs = {PROCS_PER_NODE_VAR: str(max(1, min(gpus, settings.max_procs_per_node)))}
    return container_env(settings, declared, {**procs, **vertex_env}, home, package_dir)


def container_env(
    settings: ExecutionSettings,
    declared: Mapping[str, str],
    platform: Mapping[str, str],
    home: Path,
    code_dir: Path | None = None,
) -> dict[str, str]:
    """A local container's environment (a job's node, a deployed model's server): what the image gives, the
    request's `declared` variables over it, then the machine's stand-ins and the `platform`'s variables, which
    `declared` may not override (Vertex applies its own last)."""
    host = os.environ if settings.host_env is None else settings.host_env
    env = image_env(host, code_dir or settings.workdir, home)
    env.update(declared)
    if settings.storage_emulator_host:  # gs:// reaches Cloud Storage from a Vertex node; here, fake-gcs-server
        env["STORAGE_EMULATOR_HOST"] = settings.storage_emulator_host
    # Labels, not settings: the tests and `trainctl local down` find every process they started by them.
    env.update({name: host[name] for name in PROCESS_MARKER_VARS if name in host})
    env.update(platform)
    return env


def image_env(host: Mapping[str, str], workdir: Path, home: Path) -> dict[str, str]:
    """The environment a container of the image starts with, this machine standing in for the image.

    No LANG or LC_*: the trainer's base image sets none (pytorch/pytorch's Dockerfile, on Ubuntu), so Python
    runs in its UTF-8 mode for the C locale (PEP 538, 540) there and here alike, whatever the developer's
    locale. Nothing else of the host either (USER, cloud credentials, proxies, tool settings): a container
    has none of it.
    """
    env = {
        # The image's PATH finds its interpreter and tools first; here they are the JobService's interpreter
        # (torchrun beside it) and the host's tools. PATH names folders, no secrets.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), host.get("PATH") or CONTAINER_DEFAULT_PATH]),
        # A container has an empty home of its own. The developer's would hand the job their credential
        # files (~/.config/gcloud, ~/.aws), which client libraries look for there by default.
        "HOME": str(home),
        # The code the image holds (the trainer under its WORKDIR) is the JobService's working folder here.
        "PYTHONPATH": str(workdir),
        "PYTHONUNBUFFERED": "1",  # as the trainer's Dockerfile sets it: node logs show lines as they happen
    }
    # A container's /tmp is its own; the host's temp folder stands in for it. (A folder under the job's state
    # would be private, but tools put Unix sockets in it and their paths may not pass 107 bytes.)
    if host.get("TMPDIR"):
        env["TMPDIR"] = host["TMPDIR"]
    return env


def request_env(variables: Iterable, platform: Mapping[str, str]) -> dict[str, str]:
    """The container's `env` in order, each value expanded as Vertex documents for EnvVar.value
    (googleapis google/cloud/aiplatform/v1/env_var.proto): "using the previous defined environment variables
    in the container and any service environment variables". Those are the variables declared before it
    and the platform's (CLOUD_ML_JOB_ID, AIP_*_DIR, …), looked up in that order as Kubernetes' kubelet
    does (kubernetes/kubernetes pkg/kubelet/kubelet_pods.go, makeEnvironmentVariables:
    MappingFuncFor(tmpEnv, serviceEnv)); never the host's nor the image's."""
    declared: dict[str, str] = {}
    for variable in variables:
        declared[variable.name] = _expand(variable.value, {**platform, **declared})
    return declared


def _expand(value: str, known: Mapping[str, str]) -> str:
    """`$(NAME)` → its value, left as written when unknown; `$$` → `$`, so `$$(NAME)` stays `$(NAME)`.

    Vertex's EnvVar comment is Kubernetes' word for word; this follows Kubernetes' implementation
    (kubernetes/kubernetes third_party/forked/golang/expansion/expand.go): whatever lies between `$(` and the
    next `)` is the name, a `$(` with no `)` and a `$` before any other character stay as they are.
    """
    out: list[str] = []
    cursor = 0
    while cursor < len(value):
        char, following = value[cursor], value[cursor + 1 : cursor + 2]
        closer = value.find(")", cursor + 2) if char + following == "$(" else -1
        if char != "$" or not following:
            out.append(char)
            cursor += 1
        elif closer >= 0:
            name = value[cursor + 2 : closer]
            out.append(known.get(name, f"$({name})"))
            cursor = closer + 1
        else:  # `$$` is one `$`; any other `$x`, and a `$(` never closed, stay as written
            out.append("$" if following == "$" else char + following)
            cursor += 2
    return "".join(out)
