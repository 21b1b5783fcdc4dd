"""`trainctl` as an installed command (issue 44, point 6): the wheel carries what the CLI imports and reads, declares
its dependencies, and installs a `trainctl` that runs outside this checkout — through `uv tool install` for real,
and into a bare venv — with `trainctl completion bash|zsh` built from the parser."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from trainctl.cli import build_parser
from trainctl.completion import bash_script, command_words

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("functions", "schemas", "trainer", "local", "trainctl")
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel `pip wheel --no-deps .` builds, from a copy of what it reads (the build leaves build/ behind)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "requirements.txt"):
        shutil.copy(REPO / name, source / name)
    for package in PACKAGES:
        shutil.copytree(REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(source)], check=True, timeout=120)  # fmt: skip
    (built,) = dist.glob("trainctl-*.whl")
    return built


def clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH and no stack: the installed command must find its modules by itself."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("TRAINCTL_", "PUBSUB_"))}
    return env | extra


def test_the_wheel_holds_the_cli_its_schemas_and_its_dependencies(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in PACKAGES:  # every module of every package the CLI imports
        assert {p.relative_to(REPO).as_posix() for p in (REPO / package).rglob("*.py")} <= names, package
    assert {"schemas/training_job.schema.json", "schemas/job_event.schema.json"} <= names
    console = REPO / "trainctl" / "console"  # the console's pages and files (issue 45)
    shipped = {  # all but the Dockerfile that builds the console's Cloud Run image from this checkout
        p.relative_to(REPO).as_posix()
        for p in console.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.name != "Dockerfile"
    }
    assert shipped <= names, sorted(shipped - names)
    info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
    entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "trainctl = trainctl.cli:main" in entry_points
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    pinned = [line for line in (REPO / "requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    assert pinned and all(f"Requires-Dist: {line}\n" in metadata for line in pinned)
    assert "Requires-Dist: torch==" in metadata and 'extra == "trainer"' in metadata
    assert 'Requires-Dist: starlette==1.10.0; extra == "console"' in metadata


@pytest.mark.slow
def test_the_wheel_in_a_bare_venv_gives_a_trainctl_that_runs(wheel, tmp_path):
    """Installed with --no-deps; the dependencies come from this venv's site-packages (a .pth), never this checkout."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", str(wheel)], check=True, timeout=120)  # fmt: skip
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "repo-venv-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    trainctl = venv / "bin" / "trainctl"
    assert_runs(trainctl, tmp_path)


@pytest.mark.slow
def test_uv_tool_install_gives_a_trainctl_on_the_path(wheel, tmp_path):
    """`uv tool install` for real, offline from uv's cache (which `make .venv` filled with the pinned packages)."""
    uv = VENV_BIN / "uv"
    if not uv.exists():
        pytest.skip("uv is not in this venv (requirements-dev.txt installs it)")
    env = clean_env(UV_TOOL_DIR=str(tmp_path / "tools"), UV_TOOL_BIN_DIR=str(tmp_path / "bin"))
    done = subprocess.run([str(uv), "tool", "install", "--offline", str(wheel)], env=env, capture_output=True,
                          text=True, timeout=180)  # fmt: skip
    if done.returncode != 0 and "offline" in done.stderr.lower():
        pytest.skip(f"uv's cache lacks a pinned package: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr
    assert_runs(tmp_path / "bin" / "trainctl", tmp_path)


def installed_closure(requirements: list[str]) -> list[importlib.metadata.Distribution]:
    """The distributions of this venv that `requirements` need, theirs included (markers evaluated here)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = [Requirement(line) for line in requirements]
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in found or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        found[name] = importlib.metadata.distribution(requirement.name)
        pending += [Requirement(r) for r in found[name].requires or []]
    return list(found.values())


def repack(distribution: importlib.metadata.Distribution, folder: Path) -> Path:
    """A wheel of an installed distribution, from the files its RECORD lists under site-packages (scripts outside it
    are left out: an installer writes them again from entry_points.txt)."""
    info = Path(str(distribution._path))  # type: ignore[attr-defined]  # its .dist-info folder
    site = info.parent
    tag = next(line.split(": ", 1)[1] for line in (info / "WHEEL").read_text().splitlines() if line.startswith("Tag:"))
    name = re.sub(r"[-_.]+", "_", distribution.metadata["Name"])
    wheel = folder / f"{name}-{distribution.version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for file in distribution.files or []:
            if not str(file).startswith("..") and (site / file).is_file():
                archive.write(site / file, str(file))
    return wheel


@pytest.mark.slow
def test_pipx_install_gives_a_trainctl_on_the_path(wheel, tmp_path):
    """`pipx install` for real (docs/local.md, "trainctl on your PATH"), offline: pip in pipx's venv finds the wheel's
    dependencies only in a folder of wheels repacked from this venv's installed ones (`--no-index`)."""
    pipx = VENV_BIN / "pipx" if (VENV_BIN / "pipx").exists() else shutil.which("pipx")
    if pipx is None:
        pytest.skip("pipx is not in this venv (requirements-dev.txt installs it)")
    links = tmp_path / "wheels"
    links.mkdir()
    pinned = [line for line in (REPO / "requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    for distribution in installed_closure(pinned):
        repack(distribution, links)
    # No configuration file's index or links either: only the folder above.
    env = clean_env(PIPX_HOME=str(tmp_path / "pipx"), PIPX_BIN_DIR=str(tmp_path / "bin"),
                    PIPX_MAN_DIR=str(tmp_path / "man"), PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
                    PIP_FIND_LINKS=str(links))  # fmt: skip
    done = subprocess.run([str(pipx), "install", str(wheel)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert_runs(tmp_path / "bin" / "trainctl", tmp_path)


def assert_runs(trainctl: Path, cwd: Path) -> None:
    """`trainctl --help`, `trainctl completion bash` and `local up --help`, outside this checkout and without
    PYTHONPATH: the command imports its modules from where it was installed (the schema files' presence is the wheel
    test's), and its local stack lives in the user's state folder."""

    home = cwd / "home"  # the user's, without XDG_STATE_HOME: the installed stack's folder goes under it

    def run(*args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in clean_env(HOME=str(home)).items() if k != "XDG_STATE_HOME"}
        return subprocess.run([str(trainctl), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)

    shown = run("--help")
    assert shown.returncode == 0 and "usage: trainctl" in shown.stdout and " init " in shown.stdout, shown.stderr
    completion = run("completion", "bash")
    assert completion.returncode == 0 and "complete -o default" in completion.stdout, completion.stderr
    # Its local stack's folder is the user's state folder, not the site-packages its code sits in.
    assert run("local", "up", "--help").returncode == 0
    down = run("local", "down")
    folder = home / ".local" / "state" / "trainctl" / "local"
    assert down.returncode == 0 and down.stdout == f"no local stack is running (its folder: {folder})\n", down


def complete(script: str, *words: str) -> list[str]:
    """What bash offers after `words` (the last one being typed), with `script` sourced."""
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    quoted = " ".join(f"'{w}'" for w in words)
    call = f'COMP_WORDS=(trainctl {quoted}); COMP_CWORD={len(words)}; _trainctl_complete; echo "${{COMPREPLY[*]}}"'
    probe = f"{script}\n{call}"
    return subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=30, check=True).stdout.split()


def test_bash_completion_offers_commands_verbs_and_options_from_the_parser():
    script = bash_script(command_words(build_parser()))
    assert {"init", "validate", "submit", "models", "local", "completion"} <= set(complete(script, ""))
    assert complete(script, "mod") == ["models"]
    assert complete(script, "models", "pro") == ["promote"]
    assert "--alias" in complete(script, "models", "promote", "--")
    assert complete(script, "init", "data.csv", "--ta") == ["--target"]
    assert complete(script, "completion", "") == ["-h", "--help", "bash", "zsh"]


def test_completion_prints_a_script_for_each_shell(capsys):
    from trainctl.cli import main

    assert main(["completion", "zsh"]) == 0
    zsh = capsys.readouterr().out
    assert zsh.startswith("autoload -U +X bashcompinit && bashcompinit\n") and "_trainctl_complete" in zsh
    with pytest.raises(SystemExit) as stopped:
        main(["completion", "fish"])
    assert stopped.value.code == 2
