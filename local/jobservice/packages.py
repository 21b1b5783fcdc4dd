"""Python packages on a prebuilt executor, locally (issues 31 and 40): what Vertex does on each node of a
pythonPackageSpec pool — fetch `package_uris`, pip-install them with their requirements, run `python -m
<python_module>` — done once per job into a folder of its own.

The executor stands for one of Vertex's prebuilt PyTorch training containers: here, the JobService's own Python, which
has torch (CPU, gloo). What counts as the executor's is what the container holds (schemas/executors.py
EXECUTOR_PACKAGES and what they require, as installed here), never the JobService's other packages. Before anything is
installed, each archive is read against the executor's Python (3.10: a wheel's tags, every .py file's syntax), as the
node's Python would refuse it (functions/untrusted/python_fit.py). The packages themselves are installed from their
archives; what they require and the executor lacks is fetched from the package index (PyPI, or `--package-index`),
wheels only, into the same folder, as pip on the node would fetch it. A requirement that would replace the executor's
torch is refused: Vertex's pip would install PyPI's torch in its place, which this CPU stand-in cannot imitate.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement

from functions.untrusted.package_code import PackageCode, PackageCodeError, is_torch_or_cuda, normalize, torch_verdict
from schemas.executors import EXECUTOR_PACKAGES

# Vertex's prebuilt PyTorch training images (schemas/executors.py) in each multi-region, which the executor map runs as
# this Python.
EXECUTOR_IMAGE_PREFIXES = tuple(
    f"{region}-docker.pkg.dev/vertex-ai/training/pytorch-" for region in ("us", "europe", "asia")
)
DEFAULT_PACKAGE_INDEX = "https://pypi.org/simple"
# Rounds of fetching requirements of what was fetched: a bound, far above any real package's depth.
MAX_ROUNDS = 25


class PackageError(ValueError):
    """The package cannot be installed or run here; the job fails with this text."""


def is_local_executor(image: str) -> bool:
    return image.startswith(EXECUTOR_IMAGE_PREFIXES)


def executor_python(image: str) -> tuple[int, int]:
    """The executor image's Python, from its name's `pyXY` tag (pytorch-gpu.2-4.py310 → 3.10); 3.10 without one."""
    found = re.search(r"\.py(\d)(\d+)(?::|$)", image)
    return (int(found.group(1)), int(found.group(2))) if found else (3, 10)


def executor_pytorch(image: str) -> str | None:
    """The executor image's PyTorch series, from its name (pytorch-gpu.2-4.py310 → 2.4)."""
    found = re.search(r"/pytorch-[a-z]+\.(\d+)-(\d+)", image)
    return f"{found.group(1)}.{found.group(2)}" if found else None


def install_packages(
    uris: list[str],
    target: Path,
    storage_url: str | None,
    executor_image: str = "",
    index: str = DEFAULT_PACKAGE_INDEX,
) -> Path:
    """Fetch `uris` (gs://), check them against the executor's Python, install them in order into `target` with what
    they require; returns `target`. Installed once: a restarted attempt of the job reuses the folder (its `.installed`
    marker is written last)."""
    done = target / ".installed"
    if done.exists():
        return target
    downloads = target.parent / f"{target.name}-downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    archives = [_download(uri, downloads, storage_url) for uri in uris]
    python = executor_python(executor_image)
    for uri, archive in zip(uris, archives, strict=True):
        try:
            problems = PackageCode.from_archive(archive.name, archive.read_bytes()).python_problems(python)
        except PackageCodeError as exc:
            raise PackageError(f"{uri}: {exc}") from None
        if problems:
            raise PackageError(
                f"{uri} cannot run on the executor's Python {python[0]}.{python[1]}: {'; '.join(problems[:10])}"
            )
    result = pip_install(archives, target)
    if result.returncode != 0:
        raise PackageError(f"pip could not install {', '.join(uris)} on the executor: {result.stderr.strip()[-1500:]}")
    install_requirements(target, executor_pytorch(executor_image), python, index)
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


def install_requirements(
    target: Path,
    pytorch: str | None,
    python: tuple[int, int],
    index: str = DEFAULT_PACKAGE_INDEX,
    held: Mapping[str, str] | None = None,
) -> None:
    """Fetch into `target`, round by round, what the distributions there require and neither `target` nor the
    executor (`held`: name → version; by default executor_distributions()) holds at a fitting version."""
    held = executor_distributions() if held is None else held
    for _ in range(MAX_ROUNDS):
        wanted = unmet_requirements(target, held, pytorch, python)
        if not wanted:
            return
        command = [sys.executable, "-m", "pip", "install", "--isolated", "--quiet", "--no-deps", "--only-binary=:all:"]
        command += ["--disable-pip-version-check", "--target", str(target), *index_options(index), *wanted]
        home = target.parent / f"{target.name}-home"
        home.mkdir(parents=True, exist_ok=True)
        env = build_environment(os.environ, home)
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, env=env)
        if result.returncode != 0:
            raise PackageError(
                f"the package requires {', '.join(wanted)}, which the executor does not hold, and pip could not fetch "
                f"it from {index} (wheels only): {result.stderr.strip()[-1500:]}"
            )
    raise PackageError(f"the package's requirements were still not met after {MAX_ROUNDS} rounds of fetching")


def index_options(index: str) -> list[str]:
    """pip's options for the package index: a folder of wheels (tests, an offline mirror) or an index URL."""
    if Path(index).is_dir():
        return ["--no-index", "--find-links", str(Path(index).resolve())]
    return ["--index-url", index]


def unmet_requirements(
    target: Path, held: Mapping[str, str], pytorch: str | None, python: tuple[int, int] = (3, 10)
) -> list[str]:
    """The requirements (Requires-Dist, markers read for the executor's Python, no extras) of the distributions in
    `target` that neither `target` nor the executor holds at a fitting version. torch's family stands in for the
    executor's whatever its version here; a torch requirement the executor's series cannot meet is refused."""
    environment: dict[str, str] = {
        **{key: str(value) for key, value in default_environment().items()},
        "python_version": f"{python[0]}.{python[1]}",
        "python_full_version": f"{python[0]}.{python[1]}.0",
        "extra": "",
    }
    installed = {normalize(dist.metadata["Name"]): dist.version for dist in metadata.distributions(path=[str(target)])}
    wanted: dict[str, str] = {}
    for dist in metadata.distributions(path=[str(target)]):
        for line in dist.requires or []:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            name = normalize(requirement.name)
            if name in installed:
                if not requirement.specifier.contains(installed[name], prereleases=True):
                    raise PackageError(
                        f"{dist.metadata['Name']} requires {requirement}, but {name} {installed[name]} is installed "
                        "for another of the package's requirements; the local executor installs one version of each"
                    )
            elif is_torch_or_cuda(name):
                _torch_family(dist.metadata["Name"], requirement, name, held, pytorch)
            elif name not in held or not requirement.specifier.contains(held[name], prereleases=True):
                wanted.setdefault(name, str(requirement).split(";", 1)[0].strip())
    return list(wanted.values())


def _torch_family(
    owner: str, requirement: Requirement, name: str, held: Mapping[str, str], pytorch: str | None
) -> None:
    """The executor's torch stands in whatever its version here, unless the requirement excludes the executor's
    series; CUDA's libraries and triton are not needed on this CPU stand-in; the rest of the family must be here."""
    if name == "torch":
        if pytorch and torch_verdict(str(requirement), pytorch) == "replaces":
            raise PackageError(
                f"{owner} requires {requirement}: the executor holds PyTorch {pytorch}, which that excludes; pip on "
                "Vertex's nodes would replace it with PyPI's torch (and its CUDA build), which this CPU stand-in "
                "cannot imitate. Leave the version open to the executor's, or choose an executor that has it"
            )
    elif not (name.startswith("nvidia-") or name in ("triton", "pytorch-triton")) and name not in held:
        raise PackageError(
            f"{owner} requires {requirement}: of PyTorch's family the local executor holds torch only (a CPU "
            "stand-in), and PyPI's builds are made for one torch and CUDA"
        )


def executor_distributions() -> dict[str, str]:
    """What this Python holds of the executor (normalized name → version): EXECUTOR_PACKAGES and what they require,
    markers read for this Python, no extras. The JobService's other packages (grpcio, pydantic, google-cloud-…) are
    not the executor's."""
    held: dict[str, str] = {}
    pending = list(EXECUTOR_PACKAGES)
    while pending:
        name = normalize(pending.pop())
        if name in held:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        held[name] = dist.version
        for line in dist.requires or []:
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return held


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
