"""The documentation's tours, typed as a new user types them: every shell block that README.md or a docs/ page marks
`<!-- tour: NAME -->` is taken from the page itself, in the order tests/docs.py's TOURS gives, and its commands are
typed into one bash session in a fresh shell of a folder that looks like this checkout (`trainctl` not on PATH, no
variables set but the stack's folder). Each command must succeed — or end with the status its comment shows
(`# exits 2`) — and the events a page shows after a command (`HH:MM:SS  state  request`) must appear before the
next one is typed. So the documentation cannot drift from the product: a changed flag, a file a tour uses but never
makes, a missing upload, an event that no longer comes, all fail (issue 28, point 1; issue 44).

A tour that starts a stack (`local up`) starts its own, in its own folder: the session's stack of
tests/e2e/conftest.py runs with other options. Tours are split across test files so that they balance across the
workers (`--dist loadfile`: one file, one worker)."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest

from tests.conftest import REPO_ROOT
from tests.docs import Block, tour_blocks
from tests.e2e.running_stack import VENV_BIN, user_env

# An event line as `submit --wait` and `watch` print it: time, state, request id.
EVENT_LINE = re.compile(r"^\d\d:\d\d:\d\d\s+([a-z_]+)\s+(\S+)")
# A command whose page shows it failing says so in its comment: `$ trainctl validate bad.yaml   # exits 2`.
EXITS = re.compile(r"#[^'\"\n]*\bexits (\d+)\b")
COMMAND_SECONDS = 240.0
# A whole tour: each command has its own limit above, so this bounds a tour on a machine busier than usual (a stack
# starts in 20 s on two idle cores, in a minute on busy ones), not a hang.
TOUR_SECONDS = 900
T = TypeVar("T")
EVENTS_SECONDS = 90.0


@dataclass
class Step:
    """One command as typed (continuation lines and here-documents included), the exit status the page gives it,
    and the events the page shows after it."""

    command: str
    status: int = 0
    events: list[tuple[str, str]] = field(default_factory=list)


def event_of(line: str) -> tuple[str, str] | None:
    """(state, request) of an event line; a request id's time-based suffix (gcs.… and sleeper-day-1-…) differs
    on every run, so it is left out."""
    found = EVENT_LINE.match(line)
    if found is None:
        return None
    return found[1], re.sub(r"-\d{9,}$", "", found[2])


def steps_of(blocks: list[Block]) -> list[Step]:
    """The commands of a tour's blocks, in order."""
    steps = []
    for block in blocks:
        for command, shown in block.typed():
            exits = EXITS.search(command.splitlines()[0])
            events = [event for line in shown if (event := event_of(line)) is not None]
            steps.append(Step(command, int(exits[1]) if exits else 0, events))
    return steps


def tour_steps(name: str) -> list[Step]:
    steps = steps_of(tour_blocks(name))
    assert steps, f"no block is marked `<!-- tour: {name} -->`"
    return steps


class Shell:
    """One bash session fed a command at a time; what it (and what it started in the background) prints is
    collected in `transcript`."""

    def __init__(self, cwd: Path, env: dict[str, str]):
        self._process = subprocess.Popen(
            ["bash"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self.transcript = ""
        self._lock = threading.Lock()
        self._printed = threading.Condition(self._lock)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            with self._printed:
                self.transcript += line
                self._printed.notify_all()

    def wait_for(self, done: Callable[[str], T], timeout: float) -> T:
        """Wait until `done(transcript)` answers something true (woken by each line printed, no fixed sleep); its
        last answer."""
        deadline = time.monotonic() + timeout
        with self._printed:
            while not (answer := done(self.transcript)) and (left := deadline - time.monotonic()) > 0:
                self._printed.wait(left)
        return answer

    def run(self, command: str, timeout: float = COMMAND_SECONDS) -> tuple[int, str]:
        """Type `command`; its exit status and what was printed meanwhile."""
        assert self._process.stdin is not None
        sentinel = f"tour-{uuid.uuid4().hex}"
        start = len(self.transcript)
        self._process.stdin.write(f"{command}\necho {sentinel} $?\n")
        self._process.stdin.flush()
        found = self.wait_for(lambda text: re.search(rf"^{sentinel} (\d+)$", text[start:], re.MULTILINE), timeout)
        if not found:
            pytest.fail(f"`{command}` did not return within {timeout:.0f} s:\n{self.transcript[start:]}")
        return int(found[1]), self.transcript[start : start + found.start()]

    def events(self) -> set[tuple[str, str]]:
        return events_in(self.transcript)

    def close(self) -> None:
        try:
            os.killpg(self._process.pid, 9)
        except ProcessLookupError:
            pass
        self._process.wait(timeout=10)


def events_in(text: str) -> set[tuple[str, str]]:
    return {event for line in text.splitlines() if (event := event_of(line)) is not None}


def fresh_checkout(folder: Path) -> Path:
    """A folder that looks like this checkout (its files, by links) with none of the tour's files in it."""
    folder.mkdir()
    for entry in REPO_ROOT.iterdir():
        if entry.name not in (".git", ".trainctl") and not entry.name.startswith(".pytest"):
            (folder / entry.name).symlink_to(entry)
    return folder


def run_tour(steps: list[Step], where: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Type every step in one fresh shell; each must end with the status its page gives it and be followed by the
    events the page shows after it. The checkout folder the shell ran in, and what each command printed."""
    env = user_env(tmp_path / "local")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != VENV_BIN)  # a fresh shell
    checkout = fresh_checkout(tmp_path / "checkout")
    shell = Shell(checkout, env)
    printed: dict[str, str] = {}
    stack_up = False
    try:
        for step in steps:
            stack_up = stack_up or "trainctl local up" in step.command
            status, output = shell.run(step.command)
            assert status == step.status, f"{where}: `{step.command}` exited {status}, not {step.status}:\n{output}"
            printed[step.command] = output
            stack_up = stack_up and "trainctl local down" not in step.command
            shell.wait_for(lambda text, step=step: set(step.events) <= events_in(text), EVENTS_SECONDS)
            missing = sorted(set(step.events) - shell.events())
            assert not missing, f"{where}: after `{step.command}`, no event {missing}:\n{shell.transcript}"
    finally:
        if stack_up:  # the page leaves it running, or a step failed
            shell.run(".venv/bin/trainctl local down >/dev/null 2>&1; true")
        shell.close()
    return checkout, printed
