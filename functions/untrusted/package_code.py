"""What a Python package holds, read without running any of it (issue 40, points 9 and 10): the requirements pip
installs with it on every node (Vertex pip-installs a package with its `install_requires`), what of the executor's
torch and CUDA they would replace, and whether its code and wheels run on the executor's Python (3.10).

Read from the archive itself (a source distribution or a wheel), bounded, stdlib only: `trainctl submit --source` and
`validate --source` read the archive they packed, the local executor the one it downloaded. setup.py is parsed, never
run: a requirement list it computes cannot be known, and is said to be unknown.
"""

from __future__ import annotations

import ast
import configparser
import io
import re
import tarfile
import tomllib
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from email.parser import Parser
from pathlib import PurePosixPath

from functions.untrusted.python_fit import newer_stdlib_uses, syntax_problem, wheel_problem

# What is read of an archive: its text files of these kinds (code, metadata, requirement files), each bounded.
_READ_SUFFIXES = (".py", ".toml", ".cfg", ".txt", ".in")
_READ_NAMES = ("PKG-INFO", "METADATA")
MAX_MEMBER_BYTES = 4 * 2**20
MAX_MEMBERS = 20_000
# A distribution name at the start of a PEP 508 requirement.
_NAME_RE = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")
# The executor's own torch and the CUDA libraries it was built with: a requirement on these replaces them.
TORCH_PACKAGES = frozenset({"torch", "torchvision", "torchaudio", "triton", "pytorch-triton"})


class PackageCodeError(ValueError):
    """The archive cannot be read as a package; the message says why."""


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str | None:
    found = _NAME_RE.match(requirement)
    return normalize(found.group(1)) if found else None


def is_torch_or_cuda(name: str) -> bool:
    """torch and its companions, and NVIDIA's CUDA libraries as PyPI ships them (nvidia-cublas-cu12, …)."""
    return name in TORCH_PACKAGES or name.startswith("nvidia-")


@dataclass(frozen=True)
class Requirements:
    """What pip installs with the package: `found` as written, where they were read, or why they are unknown."""

    found: tuple[str, ...]
    where: str
    unknown: str | None = None


@dataclass(frozen=True)
class PackageCode:
    """An archive's text files by their path inside the package (a source distribution's top folder left out)."""

    filename: str
    files: Mapping[str, bytes]

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")

    @classmethod
    def from_archive(cls, filename: str, data: bytes) -> PackageCode:
        try:
            if filename.endswith((".whl", ".zip")):
                members = dict(_zip_members(data))
            elif filename.endswith((".tar.gz", ".tgz", ".tar")):
                members = dict(_tar_members(data))
            else:
                raise PackageCodeError(f"{filename}: not a source distribution (.tar.gz, .zip) or a wheel (.whl)")
        except (tarfile.TarError, zipfile.BadZipFile, OSError, EOFError) as exc:
            raise PackageCodeError(f"{filename}: not a readable archive ({exc})") from None
        if not filename.endswith(".whl"):
            members = _without_top_folder(members)
        return cls(filename, members)

    # --- point 9: what pip fetches with it

    def requirements(self) -> Requirements:
        """The package's own requirements, as pip reads them: a wheel's METADATA; for a source distribution its
        pyproject.toml [project] (static, or setuptools' dynamic files), setup.cfg [options], a literal list in
        setup.py, else PKG-INFO's Requires-Dist (metadata 2.2 or later, where it must match what a build gives)."""
        if self.is_wheel:
            metadata = next((name for name in self.files if name.endswith(".dist-info/METADATA")), None)
            if metadata is None:
                return Requirements((), "", unknown="the wheel has no .dist-info/METADATA")
            return Requirements(_metadata_requirements(self.text(metadata)), "METADATA Requires-Dist")
        return source_requirements(self.files)

    # --- point 10: the executor's Python

    def python_problems(self, python: tuple[int, int]) -> list[str]:
        """What cannot run on `python`: a wheel built for another Python or platform, a .py file its grammar does
        not take (`path, line N: …`)."""
        problems = []
        if self.is_wheel and (tag := wheel_problem(self.filename, python)):
            problems.append(tag)
        for path, data in sorted(self.files.items()):
            if path.endswith(".py") and (problem := syntax_problem(path, data, python)):
                problems.append(problem)
        return problems

    def python_warnings(self, python: tuple[int, int]) -> list[str]:
        """Standard-library names newer than `python` that the code imports outside a try/except ImportError or a
        version check: they would fail at run time."""
        found = []
        for path, data in sorted(self.files.items()):
            if path.endswith(".py"):
                found += newer_stdlib_uses(path, data, python)
        return found

    def text(self, path: str) -> str:
        return self.files[path].decode("utf-8", errors="replace")


def _tar_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
        for count, member in enumerate(archive):
            if count >= MAX_MEMBERS:
                raise PackageCodeError(f"more than {MAX_MEMBERS} files")
            if member.isfile() and _worth_reading(member.name, member.size):
                extracted = archive.extractfile(member)
                if extracted is not None:
                    yield member.name, extracted.read(MAX_MEMBER_BYTES)


def _zip_members(data: bytes) -> Iterator[tuple[str, bytes]]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise PackageCodeError(f"more than {MAX_MEMBERS} files")
        for info in infos:
            if not info.is_dir() and _worth_reading(info.filename, info.file_size):
                with archive.open(info) as member:
                    yield info.filename, member.read(MAX_MEMBER_BYTES)


def _worth_reading(name: str, size: int) -> bool:
    base = PurePosixPath(name).name
    return size <= MAX_MEMBER_BYTES and (base.endswith(_READ_SUFFIXES) or base in _READ_NAMES)


def _without_top_folder(members: dict[str, bytes]) -> dict[str, bytes]:
    """A source distribution's files under `<name>-<version>/`, by their path inside that folder."""
    tops = {name.split("/", 1)[0] for name in members if "/" in name}
    if len(tops) != 1:
        return members
    top = tops.pop() + "/"
    return {name.removeprefix(top): data for name, data in members.items() if name.startswith(top)}


# --- requirements ---------------------------------------------------------------------------------------------------


def source_requirements(files: Mapping[str, bytes]) -> Requirements:
    """A source tree's requirements (`files`: path → bytes, at its root), in the order a build backend reads them."""

    def text(path: str) -> str | None:
        data = files.get(path)
        return data.decode("utf-8", errors="replace") if data is not None else None

    pyproject = text("pyproject.toml")
    dynamic = False
    if pyproject is not None:
        try:
            document = tomllib.loads(pyproject)
        except tomllib.TOMLDecodeError as exc:
            return Requirements((), "pyproject.toml", unknown=f"pyproject.toml is not valid TOML ({exc})")
        project = document.get("project") or {}
        if "dependencies" in project:
            return Requirements(_strings(project["dependencies"]), "pyproject.toml [project] dependencies")
        dynamic = "dependencies" in (project.get("dynamic") or [])
        declared = ((document.get("tool") or {}).get("setuptools") or {}).get("dynamic") or {}
        listed = (declared.get("dependencies") or {}).get("file")
        if dynamic and listed:
            names = [listed] if isinstance(listed, str) else list(listed)
            return _from_files(names, text, "pyproject.toml [tool.setuptools.dynamic] dependencies")
        if project and not dynamic:
            return Requirements((), "pyproject.toml [project] declares none")
    setup_cfg = text("setup.cfg")
    if setup_cfg is not None:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(setup_cfg)
        except configparser.Error as exc:
            return Requirements((), "setup.cfg", unknown=f"setup.cfg cannot be read ({exc})")
        value = parser.get("options", "install_requires", fallback=None)
        if value is not None:
            if value.strip().startswith("file:"):
                names = [n.strip() for n in value.strip().removeprefix("file:").split(",") if n.strip()]
                return _from_files(names, text, "setup.cfg [options] install_requires")
            return Requirements(_lines(value), "setup.cfg [options] install_requires")
    setup_py = text("setup.py")
    if setup_py is not None:
        literal = _setup_py_requirements(setup_py)
        if literal is not None:
            return Requirements(literal, "setup.py install_requires (a literal list, read without running it)")
    metadata = text("PKG-INFO")
    if metadata is not None and _metadata_version(metadata) >= (2, 2) and "Requires-Dist" not in _dynamic(metadata):
        return Requirements(_metadata_requirements(metadata), "PKG-INFO Requires-Dist")
    if setup_py is not None:
        return Requirements(
            (),
            "setup.py",
            unknown="setup.py computes install_requires, and trainctl does not run it: declare them in "
            "pyproject.toml ([project] dependencies) or setup.cfg ([options] install_requires) to see them here",
        )
    if dynamic:
        return Requirements((), "pyproject.toml", unknown="pyproject.toml declares dependencies dynamic")
    return Requirements((), "no requirements declared")


def _from_files(names: Iterable[str], text, where: str) -> Requirements:
    found: list[str] = []
    for name in names:
        content = text(str(PurePosixPath(name)))
        if content is None:
            return Requirements((), where, unknown=f"{name}, which {where} names, is not in the package")
        found += _lines(content)
    return Requirements(tuple(found), f"{where} ({', '.join(names)})")


def _strings(value: object) -> tuple[str, ...]:
    return tuple(item.strip() for item in value if isinstance(item, str)) if isinstance(value, list) else ()


def _lines(text: str) -> tuple[str, ...]:
    """Requirement lines: comments, blank lines and pip options (-r, --index-url, …) left out."""
    found = []
    for line in text.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith(("#", "-")):
            found.append(line)
    return tuple(found)


def _setup_py_requirements(source: str) -> tuple[str, ...] | None:
    """install_requires of setup.py's setup(...) call when it is a literal list of strings; None otherwise."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) == "setup":
            for keyword in node.keywords:
                if keyword.arg == "install_requires":
                    try:
                        value = ast.literal_eval(keyword.value)
                    except ValueError:
                        return None
                    if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
                        return tuple(value)
                    return None
            return ()
    return None


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _metadata(text: str):
    return Parser().parsestr(text, headersonly=True)


def _metadata_version(text: str) -> tuple[int, ...]:
    version = _metadata(text).get("Metadata-Version", "0")
    return tuple(int(part) for part in re.findall(r"\d+", version)) or (0,)


def _dynamic(text: str) -> list[str]:
    return list(_metadata(text).get_all("Dynamic") or [])


def _metadata_requirements(text: str) -> tuple[str, ...]:
    return tuple(value.strip() for value in _metadata(text).get_all("Requires-Dist") or [])


def installed_by_default(requirement: str) -> bool:
    """Whether pip installs the requirement when the package is installed without extras."""
    marker = requirement.split(";", 1)[1] if ";" in requirement else ""
    return "extra" not in re.sub(r"[\"'][^\"']*[\"']", "", marker)


# --- the executor's torch and CUDA ----------------------------------------------------------------------------------


def torch_verdict(requirement: str, series: str) -> str:
    """What pip on the executor does with a requirement on torch, whose executor holds PyTorch `series` (2.4: some
    2.4.x): "keeps" it (every 2.4.x satisfies it), "replaces" it (none does), or "may replace" it (some do, or the
    specifier is beyond this reading)."""
    found = _NAME_RE.match(requirement.split(";", 1)[0])
    if found is None:
        return "may replace"
    rest = requirement.split(";", 1)[0][found.end() :].strip()
    if rest.startswith("[") and "]" in rest:  # extras: torch[opt-einsum]>=2
        rest = rest[rest.index("]") + 1 :].strip()
    if rest.startswith("@"):  # a URL: whatever it holds
        return "may replace"
    clauses = [clause.strip() for clause in rest.strip("()").split(",") if clause.strip()]
    if not clauses:
        return "keeps"
    candidates = [(*_release(series), patch) for patch in range(10)]
    verdicts = []
    for candidate in candidates:
        outcome = _satisfies(candidate, clauses)
        if outcome is None:
            return "may replace"
        verdicts.append(outcome)
    return "keeps" if all(verdicts) else "replaces" if not any(verdicts) else "may replace"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _satisfies(candidate: tuple[int, ...], clauses: list[str]) -> bool | None:
    """Whether a release version meets every clause; None for a clause this reading does not take."""
    for clause in clauses:
        matched = re.fullmatch(r"(===|==|!=|>=|<=|~=|>|<)\s*([0-9]+(?:\.[0-9]+)*)(\.\*)?", clause)
        if matched is None:
            return None
        op, text, wildcard = matched.groups()
        version = _release(text)
        width = max(len(candidate), len(version))
        have, want = _padded(candidate, width), _padded(version, width)
        if wildcard:
            if op not in ("==", "!="):
                return None
            same = candidate[: len(version)] == version
            ok = same if op == "==" else not same
        elif op in ("==", "==="):
            ok = have == want
        elif op == "!=":
            ok = have != want
        elif op == ">=":
            ok = have >= want
        elif op == "<=":
            ok = have <= want
        elif op == ">":
            ok = have > want
        elif op == "<":
            ok = have < want
        else:  # ~=: at least this version, within its last-but-one component
            ok = have >= want and candidate[: len(version) - 1] == version[:-1]
        if not ok:
            return False
    return True


def _padded(version: tuple[int, ...], width: int) -> tuple[int, ...]:
    return version + (0,) * (width - len(version))


def executor_warnings(requirements: Iterable[str], pytorch: str, cuda: str, executor: str) -> list[str]:
    """What of the executor's torch and CUDA the requirements would replace on every node."""
    found = []
    for requirement in requirements:
        name = requirement_name(requirement)
        if name is None or not installed_by_default(requirement):
            continue
        if name == "torch":
            verdict = torch_verdict(requirement, pytorch)
            if verdict != "keeps":
                found.append(
                    f"{requirement}: the executor {executor} holds PyTorch {pytorch} (CUDA {cuda}); pip on every node "
                    f"{verdict} it with PyPI's torch, whose CUDA build may not match the machine's driver. Leave the "
                    "version open to the executor's (or choose an executor that has it)"
                )
        elif is_torch_or_cuda(name):
            pinned = bool(re.search(r"[<>=!~]", requirement.split(";", 1)[0]))
            if pinned or name.startswith("nvidia-") or name in ("triton", "pytorch-triton"):
                found.append(
                    f"{requirement}: the executor {executor} comes with PyTorch {pytorch}'s own build of it (CUDA "
                    f"{cuda}); pip on every node may replace it with PyPI's, built for another torch or CUDA. Leave "
                    "it out, or unpinned"
                )
    return found
