"""The CLI sweep (issue 44, point 4): every `trainctl` subcommand against a stopped stack's exports (settings pointing
at closed ports) and with bad arguments. None prints a traceback; each ends non-zero with a message, or, where it needs
no stack, does its work. Run in-process with stderr captured; the case list is test_cli_without_a_stack.py's (which
sweeps the commands with no stack at all), so a subcommand added later is swept here too."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_cli_without_a_stack import NEEDS_A_DEPLOYMENT, NEEDS_THE_LOCAL_STACK, OFFLINE, every_subcommand
from tests.unit.test_cli_without_a_stack import nowhere as nowhere  # the fixture
from trainctl.cli import main

# What one command may take: a dead endpoint is said within about a second; before, `submit` waited 61 s.
BOUND_SECONDS = 20


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def stopped_stack(nowhere: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A shell that ran `eval "$(trainctl local env)"` for a stack that has since stopped: its ports are closed."""
    port = closed_port()
    for name, value in {
        "TRAINCTL_PROJECT": "trainctl-local",
        "TRAINCTL_CONTROL_BUCKET": "trainctl-local-trainctl-control",
        "TRAINCTL_EVENTS_TOPIC": "trainctl-events",
        "TRAINCTL_TRAINER_IMAGE": "local/trainer:1",
        "TRAINCTL_REQUESTS_TOPIC": "trainctl-requests",
        "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{port}",
        "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
        "TRAINCTL_VERTEX_ENDPOINT": f"http://127.0.0.1:{port}",
    }.items():
        monkeypatch.setenv(name, value)
    return port


@pytest.fixture(autouse=True)
def bounded() -> Iterator[None]:
    """Each call is bounded: a hang fails the test instead of stalling the suite."""

    def hung(signum, frame):  # type: ignore[no-untyped-def]
        raise AssertionError(f"the command ran past {BOUND_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(BOUND_SECONDS)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        status = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, argv
    return status, out + err


@pytest.mark.parametrize("argv", NEEDS_A_DEPLOYMENT, ids=" ".join)
def test_against_a_stopped_stacks_exports_a_command_says_the_stack_is_not_running(stopped_stack, capsys, argv):
    """Before, `submit` hung 61 s, then printed a TimeoutError traceback."""
    status, said = run(argv, capsys)

    assert status != 0
    (line,) = said.splitlines()
    assert f"the local stack at 127.0.0.1:{stopped_stack}" in line and "is not running" in line
    assert "local up --detach" in line and "unset PUBSUB_EMULATOR_HOST" in line


@pytest.mark.parametrize("argv", NEEDS_THE_LOCAL_STACK, ids=" ".join)
def test_the_local_stacks_own_commands_say_it_is_not_running(stopped_stack, capsys, argv):
    status, said = run(argv, capsys)
    assert status != 0 and "no local stack is running" in said


@pytest.mark.parametrize("argv", OFFLINE, ids=" ".join)
def test_commands_that_need_no_stack_work_with_a_stopped_stacks_exports(stopped_stack, capsys, argv):
    status, said = run(argv, capsys)
    assert status == 0, said


@pytest.mark.parametrize("command", sorted(every_subcommand()), ids=" ".join)
def test_an_unknown_option_is_a_usage_error(nowhere, capsys, command):
    status, said = run([*command, "--no-such-option"], capsys)
    assert status == 2 and "usage: trainctl" in said and "error:" in said


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["submit", "no-such-file.yaml"], "no-such-file.yaml"),
        (["validate", "no-such-file.yaml"], "cannot read the file"),
        (["plan", "no-such-file.yaml"], "no-such-file.yaml"),
        (["models", "promote", "churn", "2", "--alias", "default"], "no local stack is running"),
        (["report", "--since", "yesterday"], "--since"),
        (["status"], "the following arguments are required"),
        (["models"], "the following arguments are required"),
        (["local"], "the following arguments are required"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_bad_arguments_end_non_zero_with_a_message(nowhere, capsys, argv, said):
    status, printed = run(argv, capsys)
    assert status != 0 and said in printed, printed
