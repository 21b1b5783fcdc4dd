"""Every `trainctl` subcommand run where nothing answers: no local stack, no project, no Google credentials, no
emulator installed. Each ends with one line saying what is missing and the command that fixes it, never a
traceback; the commands that need no network work as they always do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from trainctl.cli import build_parser, main

REQUEST = str(REPO_ROOT / "examples" / "tabular-2xa100.yaml")
EVENT = str(REPO_ROOT / "examples" / "events" / "request-push.json")
START_ONE = ".venv/bin/trainctl local up --detach` starts one"

# Each subcommand, with arguments that would do something real against a stack.
NEEDS_A_DEPLOYMENT = [
    ["submit", REQUEST],
    ["submit", REQUEST, "--wait"],
    ["status", "hello-local-1"],
    ["curve", "hello-local-1"],
    ["list"],
    ["cancel", "hello-local-1"],
    ["watch"],
    ["report", "--since", "1d"],
    ["models", "list"],
    ["models", "show", "churn"],
    ["models", "promote", "churn", "2"],
    ["models", "rollback", "churn"],
    ["models", "adopt", "churn", "--team", "default"],
    ["models", "rule", "churn", "--min-improvement", "0.01"],
    ["models", "deploy", "churn", "--endpoint", "churn-online"],
    ["models", "undeploy", "churn"],
    ["predict", "churn", REQUEST],
    ["replay", EVENT],
    ["plan", REQUEST, "--quota"],
    ["init", "gs://my-data-bucket/churn/"],
    ["console", "--port", "0"],
]
NEEDS_THE_LOCAL_STACK = [["local", "logs", "hello-local-1"], ["local", "env"]]
OFFLINE = [["validate", REQUEST], ["schema"], ["plan", REQUEST], ["replay", EVENT, "--dry-run"], ["local", "down"]]
OFFLINE += [["completion", "bash"]]
# Commands that start the stack themselves: here the emulator they need is not installed.
STARTS_A_STACK = [["local", "up"], ["demo"]]
# Reads what earlier stacks kept (issue 44, point 4): with nothing kept, says so.
READS_KEPT_STATE = [["local", "export", "exported"]]


@pytest.fixture
def nowhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An environment with no stack (an empty TRAINCTL_LOCAL_DIR), no TRAINCTL_* settings, no emulators and no
    Application Default Credentials (an empty gcloud configuration, no metadata server)."""
    for name in list(os.environ):
        if name.startswith(("TRAINCTL_", "CLOUDSDK_", "GOOGLE_")) or name.endswith("_EMULATOR_HOST"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("TRAINCTL_LOCAL_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    monkeypatch.chdir(REPO_ROOT)
    return tmp_path


def every_subcommand() -> set[tuple[str, ...]]:
    """(command,) or (command, verb) for each subcommand the parser knows."""
    import argparse

    found = set()
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in commands.choices.items():
        verbs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        found |= {(name, verb) for verb in verbs[0].choices} if verbs else {(name,)}
    return found


def test_the_cases_cover_every_subcommand():
    """Guards issue 28, point 2: a subcommand added later is added here too."""
    cases = NEEDS_A_DEPLOYMENT + NEEDS_THE_LOCAL_STACK + OFFLINE + STARTS_A_STACK + READS_KEPT_STATE
    assert {tuple(c[:2]) if c[0] in ("models", "local") else (c[0],) for c in cases} == every_subcommand()


@pytest.mark.parametrize("argv", NEEDS_A_DEPLOYMENT, ids=" ".join)
def test_without_a_stack_or_a_project_a_command_says_how_to_get_one_in_one_line(nowhere, capsys, argv):
    """Guards issue 28, point 2: `list`, `status`, `submit`, `watch` … used to die with a 15-line
    DefaultCredentialsError traceback; now one line names what is missing and the command that fixes it."""
    status = main(argv)

    out, err = capsys.readouterr()
    assert status == 1
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"trainctl {' '.join(argv[:2] if argv[0] == 'models' else argv[:1])}: no local stack")
    assert START_ONE in line and "TRAINCTL_PROJECT" in line


@pytest.mark.parametrize("argv", NEEDS_THE_LOCAL_STACK, ids=" ".join)
def test_the_local_stacks_own_commands_say_how_to_start_it(nowhere, capsys, argv):
    """Guards issue 28, points 2 and 3: the command it suggests runs in a fresh shell (trainctl is not on its
    PATH)."""
    status = main(argv)

    (line,) = capsys.readouterr().err.splitlines()
    assert status == 1
    assert "no local stack is running" in line and START_ONE in line


@pytest.mark.parametrize("argv", READS_KEPT_STATE, ids=" ".join)
def test_with_nothing_kept_export_says_so_in_one_line(nowhere, capsys, argv):
    assert main(argv) == 3
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("nothing to export: no kept buckets in ")


@pytest.mark.parametrize("argv", OFFLINE, ids=" ".join)
def test_commands_that_need_no_network_work_without_a_stack(nowhere, capsys, argv):
    """Guards issue 28, point 2: the fallback to the local stack's defaults stays for what needs no network."""
    assert main(argv) == 0, capsys.readouterr()


def test_against_a_project_without_credentials_each_command_says_to_sign_in(nowhere, monkeypatch, capsys):
    """Guards issue 28, point 2: with a project's settings but no Application Default Credentials, the
    command says which step is missing (the credentials), in one line."""
    for name, value in {
        "TRAINCTL_PROJECT": "my-project",
        "TRAINCTL_CONTROL_BUCKET": "my-project-trainctl-control",
        "TRAINCTL_EVENTS_TOPIC": "trainctl-events",
        "TRAINCTL_TRAINER_IMAGE": "us-docker.pkg.dev/my-project/trainctl/trainer:1",
    }.items():
        monkeypatch.setenv(name, value)
    for argv in (["status", "x"], ["list"], ["watch"], ["submit", REQUEST], ["report"], ["models", "list"]):
        status = main(argv)

        (line,) = capsys.readouterr().err.splitlines()
        assert status == 1, argv
        assert "no Google credentials" in line and "gcloud auth application-default login" in line, argv


@pytest.mark.parametrize("argv", STARTS_A_STACK, ids=" ".join)
def test_without_the_emulator_installed_the_commands_that_start_a_stack_say_what_to_install(nowhere, argv):
    """Guards issue 28, point 2: `demo` used to end in EmulatorUnavailable's traceback."""
    bin_dir = nowhere / "bin"  # python, and nothing else: no gcloud, no java
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bin_dir)}
    trainctl = str(Path(sys.executable).parent / "trainctl")

    ran = subprocess.run([trainctl, *argv], env=env, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)

    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stdout + ran.stderr
    assert "needs the Google Cloud CLI (gcloud), which is not on PATH" in ran.stderr
