"""How a request's `trainer.secret_env` reaches its job (issue 40, point 7): by reference only.

Vertex AI's CustomJob has no secret variables: a container's `env` holds EnvVar name/value pairs alone
(google/cloud/aiplatform/v1/env_var.proto; its SecretEnvVar serves only Agent Engine's ReasoningEngine spec). So the
job gets the references — TRAINCTL_SECRET_ENV, a JSON object NAME → projects/P/secrets/S/versions/N, which no request
may set itself (TRAINCTL_*) — and trainctl's secret launcher (secret_launcher.py) in front of its own code, which reads
each version on the node as the job's own service account and execs the code with the values in its environment.
The controller never reads a value: none can reach the ledger, an event, history or a log.

- A custom image: the command becomes `python3 -c <the launcher's source> --exec <the request's command>` (the
  request must give its command: the image's own ENTRYPOINT is not known here, and Vertex runs `command` instead of
  it).
- A python_package: the launcher is one more package, `launcher_package()` — a source distribution built here,
  byte for byte the same for the same source, which the controller writes once to
  gs://<control bucket>/launchers/sha256-<digest>/ (where only the controller writes and every job account reads:
  terraform/iam.tf) — and the module run is the launcher's, given `--module <the request's module>`.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import tarfile
from functools import cache
from pathlib import Path
from typing import Any

from functions.jobs import secret_launcher
from schemas.secrets import REDACTED, looks_secret

SECRET_ENV_VAR = secret_launcher.SECRET_ENV_VAR
LAUNCHER_MODULE = "trainctl_secret_env"
LAUNCHER_VERSION = "1.0"
LAUNCHERS_PREFIX = "launchers/"
# What runs the launcher's source in a custom image: the image must have python3 on its PATH (README, Job requests).
LAUNCHER_PYTHON = "python3"


@cache
def launcher_source() -> str:
    return Path(secret_launcher.__file__).read_text(encoding="utf-8")


def references(secret_env: dict[str, str]) -> str:
    """TRAINCTL_SECRET_ENV's value: names and resource names, sorted, so the same request gives the same job."""
    return json.dumps(dict(sorted(secret_env.items())), separators=(",", ":"))


def image_command(command: list[str]) -> list[str]:
    """A custom image's command with the launcher in front."""
    return [LAUNCHER_PYTHON, "-c", launcher_source(), "--exec", *command]


def package_module_args(module: str, args: list[str]) -> tuple[str, list[str]]:
    """A python_package's module and args with the launcher in front."""
    return LAUNCHER_MODULE, ["--module", module, *args]


@cache
def launcher_package() -> bytes:
    """The launcher as a source distribution (setuptools, which every prebuilt container has), reproducible: sorted
    entries, fixed times, owners and modes, gzip without a timestamp (as trainctl/source_package.py packs yours)."""
    root = f"{LAUNCHER_MODULE}-{LAUNCHER_VERSION}"
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {LAUNCHER_MODULE}\nVersion: {LAUNCHER_VERSION}\n",
        "pyproject.toml": (
            '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{LAUNCHER_MODULE}"\nversion = "{LAUNCHER_VERSION}"\nrequires-python = ">=3.8"\n\n'
            f'[tool.setuptools]\npy-modules = ["{LAUNCHER_MODULE}"]\n'
        ),
        f"{LAUNCHER_MODULE}.py": launcher_source(),
    }
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for name in sorted(files):
            content = files[name].encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mtime, info.mode = len(content), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def launcher_object(control_bucket: str) -> tuple[str, str]:
    """(bucket, object name) of the launcher package: named by its content's sha256."""
    digest = hashlib.sha256(launcher_package()).hexdigest()
    return control_bucket, f"{LAUNCHERS_PREFIX}sha256-{digest}/{LAUNCHER_MODULE}-{LAUNCHER_VERSION}.tar.gz"


def launcher_uri(control_bucket: str) -> str:
    bucket, name = launcher_object(control_bucket)
    return f"gs://{bucket}/{name}"


def needs_launcher_package(custom_job: dict[str, Any], control_bucket: str) -> bool:
    """Whether a planned CustomJob installs the launcher package, which must then be in the control bucket."""
    uri = launcher_uri(control_bucket)
    pools = custom_job["job_spec"]["worker_pool_specs"]
    return any(uri in (pool.get("python_package_spec") or {}).get("package_uris", []) for pool in pools)


def shown_custom_job(custom_job: dict[str, Any]) -> dict[str, Any]:
    """A copy of a planned CustomJob to print (trainctl replay's dry run): secret-looking env values redacted, as
    in every record (schemas/secrets.py). The job itself is created with the real values."""
    shown = copy.deepcopy(custom_job)
    for pool in shown.get("job_spec", {}).get("worker_pool_specs", []):
        for kind in ("container_spec", "python_package_spec"):
            for variable in (pool.get(kind) or {}).get("env") or []:
                if looks_secret(variable["name"]):
                    variable["value"] = REDACTED
    return shown
