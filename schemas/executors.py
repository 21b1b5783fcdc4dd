"""Executors: Vertex's prebuilt PyTorch training containers a `trainer.python_package` runs on (issues 31 and 40),
with the date Google stops serving each, and the operator's way to follow Google's list without a release
(Terraform's `executors`, TRAINCTL_EXECUTORS: JSON in the shape `parse_executors` reads).

Vertex runs a package only on a prebuilt container (PythonPackageSpec.executor_image_uri: "The URI of a container
image in Artifact Registry that will run the provided Python package. Vertex AI provides a wide range of executor
images with pre-installed packages to meet users' various use cases. See the list of pre-built containers for
training"; googleapis google/cloud/aiplatform/v1/custom_job.proto). The rows below are Google's list of prebuilt
training containers (https://cloud.google.com/vertex-ai/docs/training/pre-built-containers, "PyTorch": GPU images
with CUDA 12.x, Python 3.10, only the `latest` tag supported, published in the us, europe and asia multi-regions),
as the stored copies of that page have it (EXECUTORS_AS_OF; ../shared/reference/vertex.md §4.1: two stored versions
agree, and no copy in any corpus lists a PyTorch image newer than 2.4). By that list every one of them is past its
end of availability: admission refuses them from the day after their date (functions/jobs/executors.py), and the
operator lists current ones as Google publishes them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from schemas.catalog import COMPUTE_CAPABILITY, nearest_multiregion

# When the figures below were taken from the stored copies of Google's page (the page's own "last updated" is not
# in the copies); the dates themselves are Google's.
EXECUTORS_AS_OF = "2026-11-27"
# How long before its end of availability `validate` and `plan` warn of an executor.
NEAR_END = timedelta(days=90)
# Where Google publishes the executors (the us multi-region; executor_image picks the region's own copy), and the
# only tag Google supports ("Using image names without the latest tag isn't supported").
EXECUTOR_REGISTRY = "us-docker.pkg.dev/vertex-ai/training/"
_IMAGE_RE = re.compile(r"us-docker\.pkg\.dev/vertex-ai/training/pytorch-[a-z0-9.-]+:latest")
NAME_PATTERN = r"^[a-z0-9][a-z0-9.-]{0,62}$"
_NAME_RE = re.compile(NAME_PATTERN)
_FIELDS = {"image", "pytorch", "cuda", "max_compute_capability", "available_until", "python"}
_REQUIRED = _FIELDS - {"python"}


@dataclass(frozen=True)
class Executor:
    name: str
    image: str  # in the us multi-region; europe-docker.pkg.dev/… and asia-docker.pkg.dev/… hold the same path
    pytorch: str
    cuda: str
    # PyTorch's CUDA 12.1/12.4 builds of 2.1–2.4 carry kernels for sm_50 … sm_90 (their torch.cuda.get_arch_list());
    # a GPU of a later compute capability (Blackwell: sm_100, sm_120) has nothing to run.
    max_compute_capability: tuple[int, int]
    available_until: date  # Google's "End of availability"
    python: str = "3.10"  # the image's Python: what a package's code and wheels must run on

    @property
    def python_version(self) -> tuple[int, int]:
        major, minor = self.python.split(".")
        return int(major), int(minor)

    def describe(self) -> str:
        return f"{self.name} (PyTorch {self.pytorch}, CUDA {self.cuda}, Python {self.python})"


def _google(version: str, until: str) -> Executor:
    image = f"{EXECUTOR_REGISTRY}pytorch-gpu.{version.replace('.', '-')}.py310:latest"
    return Executor(f"pytorch-{version}", image, version, "12.x", (9, 0), date.fromisoformat(until))


# Google's rows (end of availability as the page dates it), newest first. The default of Settings.executors.
EXECUTORS: dict[str, Executor] = {
    e.name: e
    for e in [
        _google("2.4", "2026-07-24"),
        _google("2.3", "2026-04-24"),
        _google("2.2", "2026-01-30"),
        _google("2.1", "2025-10-04"),
    ]
}

Executors = dict[str, Executor]

# What a prebuilt PyTorch training container holds besides Python (Google's list of prebuilt training containers,
# "PyTorch": "PyTorch 2.4.x, pandas, absl-py, cloud-tpu-client, python-json-logger, scikit-learn, cloudml-hypertune",
# and "other Deep Learning Containers dependencies"; ../shared/reference/vertex.md §4.1), with pip's own tools. The
# local executor counts these and what they require, as installed in the JobService's Python, as the executor's: never
# the JobService's other packages (local/jobservice/packages.py).
EXECUTOR_PACKAGES = (
    "torch",
    "pandas",
    "absl-py",
    "cloud-tpu-client",
    "python-json-logger",
    "scikit-learn",
    "cloudml-hypertune",
    "pip",
    "setuptools",
    "wheel",
)


class ExecutorsError(ValueError):
    """The executors setting is malformed; the message names the executor and the key."""


def parse_executors(raw: str) -> Executors:
    """TRAINCTL_EXECUTORS: a JSON object, executor name → {image, pytorch, cuda, max_compute_capability ("9.0"),
    available_until ("YYYY-MM-DD"), python (default "3.10")}. It replaces the catalog's list as a whole."""
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ExecutorsError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or not document:
        raise ExecutorsError("must be a JSON object naming at least one executor: {name: {image, pytorch, …}}")
    return {name: _executor(name, fields) for name, fields in document.items()}


def _executor(name: str, fields: Any) -> Executor:
    where = f"executor {name!r}"
    if not _NAME_RE.fullmatch(name):
        raise ExecutorsError(f"{where}: a name is 1-63 characters of lowercase letters, digits, '.' and '-'")
    if not isinstance(fields, dict):
        raise ExecutorsError(f"{where}: must be an object with {', '.join(sorted(_REQUIRED))}")
    if missing := sorted(_REQUIRED - set(fields)):
        raise ExecutorsError(f"{where}: {', '.join(missing)} required")
    if unknown := sorted(set(fields) - _FIELDS):
        raise ExecutorsError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_FIELDS))}")
    if not all(isinstance(value, str) for value in fields.values()):
        raise ExecutorsError(f"{where}: every value is a string")
    image = fields["image"]
    if not _IMAGE_RE.fullmatch(image):
        raise ExecutorsError(
            f"{where}.image: {image!r} is not one of Vertex's prebuilt PyTorch training containers as Google names "
            f"them: {EXECUTOR_REGISTRY}pytorch-…:latest (the us multi-region; only the latest tag is supported)"
        )
    capability = re.fullmatch(r"(\d+)\.(\d+)", fields["max_compute_capability"])
    if capability is None:
        raise ExecutorsError(f'{where}.max_compute_capability: a compute capability such as "9.0"')
    try:
        until = date.fromisoformat(fields["available_until"])
    except ValueError:
        raise ExecutorsError(f"{where}.available_until: a date, YYYY-MM-DD (Google's end of availability)") from None
    python = fields.get("python", "3.10")
    if not re.fullmatch(r"3\.\d{1,2}", python):
        raise ExecutorsError(f'{where}.python: a Python version such as "3.10"')
    cc = (int(capability.group(1)), int(capability.group(2)))
    return Executor(name, image, fields["pytorch"], fields["cuda"], cc, until, python)


def executors_json(executors: Executors) -> str:
    """The setting's JSON for a list (what `parse_executors` reads back)."""
    return json.dumps(
        {
            e.name: {
                "image": e.image,
                "pytorch": e.pytorch,
                "cuda": e.cuda,
                "max_compute_capability": f"{e.max_compute_capability[0]}.{e.max_compute_capability[1]}",
                "available_until": e.available_until.isoformat(),
                "python": e.python,
            }
            for e in executors.values()
        },
        sort_keys=True,
    )


def executor_image(executor: Executor, region: str) -> str:
    """The executor's image in the multi-region nearest `region` (Google publishes each in us, europe and asia)."""
    path = executor.image.removeprefix("us-docker.pkg.dev/")
    return f"{nearest_multiregion(region)}-docker.pkg.dev/{path}"


def unknown_executor(name: str, executors: Executors) -> str:
    return (
        f"unknown executor {name!r}: a package runs on one of Vertex's prebuilt PyTorch training containers this "
        f"deployment lists: {', '.join(executors) or 'none'} (the operator's list: Terraform's executors, "
        "TRAINCTL_EXECUTORS)"
    )


def available(executors: Executors, today: date) -> list[Executor]:
    """The executors not past their end of availability, the newest PyTorch first."""
    current = [e for e in executors.values() if today <= e.available_until]
    return sorted(current, key=lambda e: _release(e.pytorch), reverse=True)


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def instead(executors: Executors, today: date, than: Executor) -> str:
    """What to use in place of an executor past (or near) its end: the newest one still available, else an image."""
    later = than.available_until
    others = [e for e in available(executors, today) if e.name != than.name and e.available_until > later]
    if others:
        return f"Use {others[0].name} (available until {others[0].available_until.isoformat()})"
    return (
        "No executor on this deployment's list is available longer: run your own image built on a current PyTorch "
        "(trainer.image), or ask the operator to list a current prebuilt container (Terraform's executors, "
        "TRAINCTL_EXECUTORS) once Google publishes one"
    )


def end_of_availability_problem(executor: Executor, executors: Executors, today: date) -> str | None:
    """Why admission refuses `executor` on `today`: Google no longer serves it; None while it is available."""
    if today <= executor.available_until:
        return None
    return (
        f"executor {executor.name} is past its end of availability, {executor.available_until.isoformat()} in "
        f"Google's list of prebuilt training containers: Vertex no longer serves {executor.image}. "
        f"{instead(executors, today, executor)}"
    )


def end_of_availability_warning(executor: Executor, executors: Executors, today: date) -> str | None:
    """What `validate` and `plan` say of an executor within NEAR_END of its end of availability, or past it."""
    until = executor.available_until
    if today > until:
        return f"{end_of_availability_problem(executor, executors, today)}; admission refuses it"
    if today + NEAR_END < until:
        return None
    return (
        f"executor {executor.name} reaches its end of availability on {until.isoformat()} ({(until - today).days} "
        f"days from now), after which admission refuses it. {instead(executors, today, executor)}"
    )


def executor_gpu_problem(executor: Executor, accelerator_type: str | None) -> str | None:
    """Why `executor` cannot drive `accelerator_type` (its PyTorch build has no kernels for that GPU), or None."""
    capability = COMPUTE_CAPABILITY.get(accelerator_type or "")
    limit = executor.max_compute_capability
    if capability is None or capability <= limit:
        return None
    able = [name for name, cc in COMPUTE_CAPABILITY.items() if cc <= limit]
    return (
        f"executor {executor.name} (PyTorch {executor.pytorch}, CUDA {executor.cuda}) has kernels up to "
        f"sm_{limit[0]}{limit[1]}; {accelerator_type} is sm_{capability[0]}{capability[1]} and would have nothing "
        f"to run. Choose one of {', '.join(able)}, or run your own image built for it (trainer.image)"
    )
