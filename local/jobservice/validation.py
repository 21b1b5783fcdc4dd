"""What Vertex rejects in CreateCustomJob with INVALID_ARGUMENT, checked the same way locally.

`create_request_problems(request)` returns (field path, message) pairs; the server turns them into
Vertex's "List of found errors: 1.Field: …; Message: …" text plus BadRequest field violations.
Machine/accelerator combinations come from the project's GPU catalog, labels from schemas.rules.
"""

from __future__ import annotations

import re

from google.cloud.aiplatform_v1.types import CreateCustomJobRequest, WorkerPoolSpec

from schemas.catalog import accelerator_problem
from schemas.request import MAX_DISPLAY_NAME
from schemas.rules import gs_uri_problem, labels_problems

Problem = tuple[str, str]

MAX_ENV_VARS = 100
MAX_PACKAGE_URIS = 100
PARENT_RE = re.compile(r"projects/[^/]+/locations/[^/]+")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_empty_pool(spec: WorkerPoolSpec) -> bool:
    """Vertex lets any pool but the first be skipped "by providing an empty value"."""
    return WorkerPoolSpec.pb(spec).ByteSize() == 0


def create_request_problems(request: CreateCustomJobRequest) -> list[Problem]:
    problems: list[Problem] = []
    if not PARENT_RE.fullmatch(request.parent):
        problems.append(("parent", f"must look like projects/PROJECT/locations/LOCATION, got {request.parent!r}"))
    job = request.custom_job
    if not job.display_name:
        problems.append(("custom_job.display_name", "is required"))
    elif len(job.display_name) > MAX_DISPLAY_NAME:
        problems.append(
            ("custom_job.display_name", f"can be up to {MAX_DISPLAY_NAME} characters long, got {len(job.display_name)}")
        )
    for key, problem in labels_problems(dict(job.labels)):
        problems.append((f"custom_job.labels.{key}" if key else "custom_job.labels", problem))
    problems += _job_spec_problems(job.job_spec)
    return problems


def _job_spec_problems(spec) -> list[Problem]:
    problems: list[Problem] = []
    pools = list(spec.worker_pool_specs)
    if not pools or is_empty_pool(pools[0]):
        problems.append(
            ("custom_job.job_spec.worker_pool_specs[0]", "the first worker pool (the primary replica) is required")
        )
    elif pools[0].replica_count != 1:
        problems.append(
            (
                "custom_job.job_spec.worker_pool_specs[0].replica_count",
                f"the primary worker pool must have exactly 1 replica, got {pools[0].replica_count}",
            )
        )
    for index, pool in enumerate(pools):
        if not is_empty_pool(pool):
            problems += _pool_problems(f"custom_job.job_spec.worker_pool_specs[{index}]", pool)
    if spec.scheduling.timeout and spec.scheduling.timeout.total_seconds() <= 0:
        problems.append(("custom_job.job_spec.scheduling.timeout", "must be a positive duration"))
    output = spec.base_output_directory.output_uri_prefix
    if output:
        problem = gs_uri_problem(output)
        if problem:
            problems.append(("custom_job.job_spec.base_output_directory.output_uri_prefix", problem))
    return problems


def _pool_problems(path: str, pool: WorkerPoolSpec) -> list[Problem]:
    problems: list[Problem] = []
    if pool.replica_count < 1:
        problems.append((f"{path}.replica_count", "must be at least 1 in a worker pool that is not empty"))
    problems += _machine_problems(f"{path}.machine_spec", pool.machine_spec)
    if "python_package_spec" in pool:
        package = pool.python_package_spec
        where = f"{path}.python_package_spec"
        # PythonPackageSpec (custom_job.proto): executor_image_uri, package_uris ("maximum number of package URIs is
        # 100") and python_module are required.
        if not package.executor_image_uri:
            problems.append((f"{where}.executor_image_uri", "is required"))
        if not package.package_uris:
            problems.append((f"{where}.package_uris", "is required"))
        elif len(package.package_uris) > MAX_PACKAGE_URIS:
            problems.append(
                (f"{where}.package_uris", f"at most {MAX_PACKAGE_URIS} URIs, got {len(package.package_uris)}")
            )
        if not package.python_module:
            problems.append((f"{where}.python_module", "is required"))
        problems += _env_problems(where, list(package.env))
    elif "container_spec" not in pool or not pool.container_spec.image_uri:
        problems.append((f"{path}.container_spec.image_uri", "is required"))
    else:
        problems += _env_problems(f"{path}.container_spec", list(pool.container_spec.env))
    return problems


def _env_problems(where: str, env: list) -> list[Problem]:
    problems: list[Problem] = []
    if len(env) > MAX_ENV_VARS:
        problems.append((f"{where}.env", f"at most {MAX_ENV_VARS} variables, got {len(env)}"))
    for position, variable in enumerate(env):
        if not _ENV_NAME_RE.fullmatch(variable.name):
            problems.append((f"{where}.env[{position}].name", f"{variable.name!r} is not a valid C identifier"))
    return problems


def _machine_problems(path: str, machine) -> list[Problem]:
    if not machine.machine_type:
        return [(f"{path}.machine_type", "is required")]
    has_type = machine.accelerator_type != 0
    has_count = machine.accelerator_count > 0
    if has_type != has_count:
        # Vertex's own wording (reference/vertex.md §1.3).
        return [
            (f"{path}.accelerator_type", "Both `accelerator_type` and `accelerator_count` should be specified or none.")
        ]
    if has_type:
        problem = accelerator_problem(machine.machine_type, machine.accelerator_type.name, machine.accelerator_count)
        if problem:
            return [(f"{path}.accelerator_type", problem)]
    return []


def vertex_error_text(problems: list[Problem]) -> str:
    """Vertex's INVALID_ARGUMENT message layout: "List of found errors:\t1.Field: f; Message: m\t"."""
    lines = "".join(
        f"{number}.Field: {field}; Message: {message}\t" for number, (field, message) in enumerate(problems, 1)
    )
    return f"List of found errors:\t{lines}"
