"""`trainctl submit --source DIR`: a folder of training code → a source distribution, uploaded content-addressed, its
URI filled into the request's `trainer.python_package.uris` (issue 31, point 2). No Docker, no build tool: the
archive is written here with tarfile.

The archive is reproducible (sorted entries, fixed times, owners and modes, gzip without a timestamp), so the same
code always makes the same bytes, the same sha256 and the same object: a resubmission or a redelivery reuses what is
there, once the hashes Cloud Storage states of that object are this archive's (issue 38: an object planted under
someone's digest is refused, neither reused nor overwritten). A folder with its own pyproject.toml or setup.py is
packed as it is (pip builds it on the node with its own backend); a folder without gets a minimal pyproject.toml
(setuptools, which every prebuilt container has) that makes each package folder in it installable.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import re
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions.intake.package_check import MAX_PACKAGE_BYTES
from functions.untrusted.package_code import PackageCode, executor_warnings
from schemas.executors import Executor

# What never belongs in a source distribution: caches, VCS folders, virtual environments, build outputs.
_SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".venv", "venv", ".mypy_cache", ".ruff_cache",
                           ".pytest_cache", "build", "dist", ".eggs"})  # fmt: skip
_SKIPPED_SUFFIXES = (".pyc", ".pyo", ".egg-info")
MAX_SOURCE_BYTES = 100 * 2**20  # a package, not a dataset: data goes in the dataset's bucket
PACKAGES_PREFIX = "packages/"


class SourceError(ValueError):
    """The folder cannot be packaged; the message says why and what to do."""


@dataclass(frozen=True)
class SourceArchive:
    filename: str  # <name>-<version>.tar.gz
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def md5(self) -> str:
        """Base64, as Cloud Storage states an object's md5Hash."""
        return base64.b64encode(hashlib.md5(self.data).digest()).decode()

    @property
    def crc32c(self) -> str:
        """Base64 of the big-endian CRC32C, as Cloud Storage states an object's crc32c."""
        import google_crc32c

        return base64.b64encode(google_crc32c.Checksum(self.data).digest()).decode()

    def object_name(self, team: str | None = None) -> str:
        """Where it is uploaded in the bucket: named by its content, so equal code is one object; under the team's
        own folder when the deployment has teams, where only that team's uploaders may create objects
        (terraform/teams.tf)."""
        folder = f"{PACKAGES_PREFIX}{team}/" if team else PACKAGES_PREFIX
        return f"{folder}sha256-{self.sha256}/{self.filename}"

    def reuse_problem(self, uri: str, md5: str | None, crc32c: str | None, size: int | None) -> str | None:
        """Why the object already at `uri` is not this archive, from the hashes Cloud Storage states of it (md5Hash,
        and crc32c, which composite objects carry alone); None when it is, and may be reused."""
        stated = [(md5, self.md5), (crc32c, self.crc32c)]
        if any(found is not None for found, _ in stated) and all(found in (None, own) for found, own in stated):
            return None
        return (
            f"{uri} already exists and holds other bytes than this code: Cloud Storage states md5 "
            f"{md5 or 'none'}, crc32c {crc32c or 'none'} ({size if size is not None else '?'} bytes), this archive is "
            f"md5 {self.md5}, crc32c {self.crc32c} ({len(self.data)} bytes). A package is named by its content's "
            "sha256, so that object is someone else's upload or a damaged one: it was neither reused nor "
            "overwritten. Ask the bucket's owner to inspect and delete it, or upload to another data bucket with "
            "--source-bucket"
        )


@dataclass(frozen=True)
class SourceReport:
    """What `submit --source` and `validate --source` say of the packed folder (issue 40, points 9 and 10)."""

    lines: list[str]  # what pip installs with it on every node, and the warnings
    problems: list[str]  # what the executor's Python cannot run: the folder is refused, naming file and line


def inspect_source(archive: SourceArchive, executor: Executor | None) -> SourceReport:
    """Read the archive as Vertex's nodes will install it: its requirements (pip installs them with it, as the
    SDK's packages rely on), what of the executor's torch and CUDA they would replace, and its code against the
    executor's Python (3.10 unless the executor says otherwise). Nothing of it is run."""
    code = PackageCode.from_archive(archive.filename, archive.data)
    python = executor.python_version if executor is not None else (3, 10)
    requirements = code.requirements()
    name = archive.filename
    if requirements.unknown:
        lines = [f"{name}: its requirements are unknown: {requirements.unknown}"]
    elif requirements.found:
        lines = [
            f"{name}: pip installs it on every node with its requirements ({requirements.where}): "
            f"{', '.join(requirements.found)}; what the executor holds at a fitting version is kept, the rest is "
            "fetched from PyPI"
        ]
    else:
        lines = [f"{name}: no requirements ({requirements.where}): pip installs the package alone"]
    if executor is not None:
        found = executor_warnings(requirements.found, executor.pytorch, executor.cuda, executor.name)
        lines += [f"  warning: {warning}" for warning in found]
    lines += [f"  warning: {warning}" for warning in code.python_warnings(python)]
    return SourceReport(lines, code.python_problems(python))


def named_executor(document: Any) -> str | None:
    """The executor a request document names (before it is validated: `submit --source` packs the folder first)."""
    trainer = document.get("trainer") if isinstance(document, dict) else None
    package = trainer.get("python_package") if isinstance(trainer, dict) else None
    executor = package.get("executor") if isinstance(package, dict) else None
    return executor if isinstance(executor, str) else None


def build_source_archive(folder: Path) -> SourceArchive:
    if not folder.is_dir():
        raise SourceError(f"{folder} is not a folder")
    name, version, generated = _project(folder)
    root = f"{name}-{version}"
    files = sorted(_files(folder))
    if not any(path.suffix == ".py" for path in files):
        raise SourceError(f"{folder} holds no Python file")
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, filename="") as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        entries = [(path.relative_to(folder).as_posix(), path.read_bytes()) for path in files]
        entries += [(relative, text.encode()) for relative, text in generated.items()]
        entries.append(("PKG-INFO", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()))
        total = 0
        for relative, content in sorted(entries):
            total += len(content)
            if total > MAX_SOURCE_BYTES:
                raise SourceError(
                    f"{folder} holds more than {MAX_SOURCE_BYTES // 2**20} MiB: package the code only, and put "
                    "data in the dataset's bucket"
                )
            info = tarfile.TarInfo(f"{root}/{relative}")
            info.size, info.mtime, info.mode = len(content), 0, 0o644
            archive.addfile(info, io.BytesIO(content))
    if buffer.tell() > MAX_PACKAGE_BYTES:  # many small files: their tar headers count too
        raise SourceError(
            f"{folder} packs into more than {MAX_PACKAGE_BYTES // 2**20} MiB, which the controller does not read: "
            "package the code only"
        )
    return SourceArchive(f"{name}-{version}.tar.gz", buffer.getvalue())


def _files(folder: Path) -> list[Path]:
    found = []
    for path in folder.rglob("*"):
        parts = path.relative_to(folder).parts
        if any(part in _SKIPPED_DIRS or part.endswith(_SKIPPED_SUFFIXES) for part in parts):
            continue
        if path.is_symlink():
            raise SourceError(f"{path} is a symbolic link: a source distribution holds plain files only")
        if path.is_file() and not path.name.endswith(_SKIPPED_SUFFIXES):
            found.append(path)
    return found


def _project(folder: Path) -> tuple[str, str, dict[str, str]]:
    """(name, version, generated files): the project's own when it declares them, else a minimal pyproject.toml."""
    pyproject = folder / "pyproject.toml"
    if pyproject.is_file():
        try:
            project = tomllib.loads(pyproject.read_text()).get("project") or {}
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise SourceError(f"{pyproject}: {exc}") from None
        return _normal(str(project.get("name") or folder.name)), str(project.get("version") or "0.0.0"), {}
    if (folder / "setup.py").is_file():
        return _normal(folder.resolve().name), "0.0.0", {}
    name = _normal(folder.resolve().name)
    packages = sorted(p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    if not packages:
        raise SourceError(
            f"{folder} has no pyproject.toml or setup.py and no package folder (one with an __init__.py) to install"
        )
    generated = (
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "0.0.0"\n\n'
        f"[tool.setuptools]\npackages = {_toml_list(packages)}\n"
    )
    return name, "0.0.0", {"pyproject.toml": generated}


def _normal(name: str) -> str:
    """A distribution name as sdist file names spell it (PEP 625: lowercase, runs of -_. as one _)."""
    cleaned = re.sub(r"[-_.]+", "_", name).lower().strip("_")
    if not re.fullmatch(r"[a-z0-9][a-z0-9_]*", cleaned):
        raise SourceError(f"{name!r} cannot name a Python distribution: use letters, digits, '-', '_' or '.'")
    return cleaned


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"
