"""Python packages on a prebuilt executor, locally (issue 31, point 5): what Vertex does on each node of a
pythonPackageSpec pool — fetch `package_uris`, pip-install them, run `python -m <python_module>` — done once per job
into a folder of its own.

The executor stands for one of Vertex's prebuilt PyTorch training containers: here, the JobService's own Python,
which has torch (CPU, gloo). Nothing is fetched from a package index (`--no-index --no-deps`, build isolation off):
a package's dependencies must already be in the executor, as they would be in a prebuilt container, and a missing
one is named before any node starts. (Vertex's nodes can reach PyPI; this stack never does.)
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

# Vertex's prebuilt PyTorch training images (schemas/catalog.py EXECUTORS) in each multi-region, which the
# executor map runs as this Python.
EXECUTOR_IMAGE_PREFIXES = tuple(
    f"{region}-docker.pkg.dev/vertex-ai/training/pytorch-" for region in ("us", "europe", "asia")
)


class PackageError(ValueError):
    """The package cannot be installed or run here; the job fails with this text."""


def is_local_executor(image: str) -> bool:
    return image.startswith(EXECUTOR_IMAGE_PREFIXES)


def install_packages(uris: list[str], target: Path, storage_url: str | None) -> Path:
    """Fetch `uris` (gs://) and install them, in order, into `target`; returns `target`. Installed once: a restarted
    attempt of the job reuses the folder (its `.installed` marker is written last)."""
    done = target / ".installed"
    if done.exists():
        return target
    downloads = target.parent / f"{target.name}-downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    archives = [_download(uri, downloads, storage_url) for uri in uris]
    result = pip_install(archives, target)
    if result.returncode != 0:
        raise PackageError(f"pip could not install {', '.join(uris)} on the executor: {result.stderr.strip()[-1500:]}")
    missing = missing_requirements(target)
    if missing:
        raise PackageError(
            f"the package needs {', '.join(missing)}, which the executor does not hold; a prebuilt PyTorch container "
            "comes with torch and its usual companions only: add the missing packages' archives to "
            "python_package.uris, or build an image of your own"
        )
    done.touch()
    return target


def pip_install(archives: list[Path], target: Path) -> subprocess.CompletedProcess[str]:
    """pip, and the package's own build (its setup.py runs here), in `build_environment`, never the JobService's."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation"]
    command += ["--disable-pip-version-check", "--target", str(target), *map(str, archives)]
    home = target.parent / f"{target.name}-home"
    home.mkdir(parents=True, exist_ok=True)
    env = build_environment(os.environ, home)
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=env)


def build_environment(host: Mapping[str, str], home: Path) -> dict[str, str]:
    """What a package's build sees (issue 40, point 6): a package's setup.py is the requester's code, and it runs on
    this machine, where the JobService's environment holds the developer's credentials (GOOGLE_APPLICATION_CREDENTIALS,
    CLOUDSDK_*, AWS_*), the emulators' hosts and whatever else the shell had. On Vertex it runs inside the executor's
    container, which has none of them; here it gets what that container would give: PATH (this Python first), an
    empty HOME of its own (no ~/.config/gcloud, ~/.aws, ~/.netrc, ~/.pip), no pip configuration file (PIP_CONFIG_FILE
    set to os.devnull loads none: pip/_internal/configuration.py, _load_config_files), and the temp folder. Nothing
    else: the JobService downloads the archives before pip starts, so no emulator host is needed."""
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), host.get("PATH") or os.defpath]),
        "HOME": str(home),
        "PIP_CONFIG_FILE": os.devnull,
    }
    if host.get("TMPDIR"):  # a folder, as the nodes get it (replicas.py): the container's /tmp stands in here
        env["TMPDIR"] = host["TMPDIR"]
    return env


def missing_requirements(target: Path) -> list[str]:
    """The requirements (Requires-Dist, markers applied) of the distributions installed in `target` that neither
    `target` nor the executor holds."""
    installed = {_name(dist.metadata["Name"]) for dist in metadata.distributions(path=[str(target)])}
    missing = []
    for dist in metadata.distributions(path=[str(target)]):
        for line in dist.requires or []:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            name = _name(requirement.name)
            if name not in installed and not _in_executor(name):
                missing.append(str(requirement))
    return missing


def _in_executor(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _name(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _download(uri: str, folder: Path, storage_url: str | None) -> Path:
    """One gs:// object into `folder`, under its own file name (pip reads the archive type from it)."""
    if not uri.startswith("gs://") or "/" not in uri[5:]:
        raise PackageError(f"{uri} is not a gs:// object")
    if not storage_url:
        raise PackageError("the local JobService was started without --storage-emulator-host: it cannot read gs://")
    bucket, name = uri[5:].split("/", 1)
    # A folder per URI: two packages of the same file name in different folders stay apart.
    path = folder / hashlib.sha256(uri.encode()).hexdigest()[:16] / name.rsplit("/", 1)[-1]
    path.parent.mkdir(parents=True, exist_ok=True)
    url = f"{storage_url.rstrip('/')}/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}?alt=media"
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            path.write_bytes(response.read())
    except OSError as error:
        raise PackageError(f"cannot read the package {uri}: {error}") from None
    return path
