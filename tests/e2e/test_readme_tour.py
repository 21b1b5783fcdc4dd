"""README's tour, run as typed: every shell block that README marks `<!-- tour -->` is taken from README.md itself,
in order, and its commands are typed into one bash session, as a new user would in a fresh shell of this checkout
(`trainctl` not on PATH, no variables set). Each command must succeed, and the events README shows after a command
(`HH:MM:SS  state  request`) must appear before the next one is typed. So README cannot drift from the product:
a changed flag, a file the tour uses but never makes, a missing upload, an event that no longer comes, all fail
here (issue 28, point 1).

The tour starts its own stack with README's own `local up` (the session's stack of tests/e2e/conftest.py runs
with other options), in a folder that holds this checkout's files but none of the tour's."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.e2e.running_stack import VENV_BIN, user_env

README = REPO_ROOT / "README.md"
TOUR_MARK = "<!-- tour -->"
# An event line as `submit --wait` and `watch` print it: time, state, request id.
EVENT_LINE = re.compile(r"^\d\d:\d\d:\d\d\s+([a-z]+)\s+(\S+)")
COMMAND_SECONDS = 240.0
EVENTS_SECONDS = 90.0


@dataclass
class Step:
    """One command of the tour as typed (continuation lines and here-documents included), and the events
    README shows after it."""

    command: str
    events: list[tuple[str, str]] = field(default_factory=list)


def event_of(line: str) -> tuple[str, str] | None:
    """(state, request) of an event line; a request id's time-based suffix (gcs.… and sleeper-day-1-…) differs
    on every run, so it is left out."""
    found = EVENT_LINE.match(line)
    if found is None:
        return None
    return found[1], re.sub(r"-\d{9,}$", "", found[2])


def balanced(command: str) -> bool:
    """Whether `command` closes every quote it opens (a quoted argument may span lines)."""
    try:
        shlex.split(command, comments=True)
    except ValueError:
        return False
    return True


def tour_steps(readme: str) -> list[Step]:
    """The commands of README's tour blocks, in order."""
    steps: list[Step] = []
    lines = readme.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != TOUR_MARK:
            i += 1
            continue
        assert lines[i + 1].startswith("```"), f"README.md:{i + 2}: a tour mark must stand right above a code block"
        i += 2
        while not lines[i].startswith("```"):
            line = lines[i]
            if not line.startswith("$ "):
                event = event_of(line)
                if event is not None and steps:
                    steps[-1].events.append(event)
                i += 1
                continue
            command = [line[2:]]
            heredoc = re.search(r"<<-?\s*'?(\w+)'?", line)  # its body is taken as it stands, quotes and all
            continued = heredoc is None
            while heredoc or (continued and (command[-1].endswith("\\") or not balanced("\n".join(command)))):
                i += 1
                command.append(lines[i])
                if heredoc and lines[i] == heredoc[1]:
                    heredoc = None
            steps.append(Step("\n".join(command)))
            i += 1
        i += 1
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
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            with self._lock:
                self.transcript += line

    def run(self, command: str, timeout: float = COMMAND_SECONDS) -> tuple[int, str]:
        """Type `command`; its exit status and what was printed meanwhile."""
        assert self._process.stdin is not None
        sentinel = f"tour-{uuid.uuid4().hex}"
        start = len(self.transcript)
        self._process.stdin.write(f"{command}\necho {sentinel} $?\n")
        self._process.stdin.flush()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                found = re.search(rf"^{sentinel} (\d+)$", self.transcript[start:], re.MULTILINE)
                if found:
                    return int(found[1]), self.transcript[start : start + found.start()]
            time.sleep(0.1)
        pytest.fail(f"`{command}` did not return within {timeout:.0f} s:\n{self.transcript[start:]}")

    def events(self) -> set[tuple[str, str]]:
        with self._lock:
            return {event for line in self.transcript.splitlines() if (event := event_of(line)) is not None}

    def close(self) -> None:
        try:
            os.killpg(self._process.pid, 9)
        except ProcessLookupError:
            pass
        self._process.wait(timeout=10)


def fresh_checkout(folder: Path) -> Path:
    """A folder that looks like this checkout (its files, by links) with none of the tour's files in it."""
    folder.mkdir()
    for entry in REPO_ROOT.iterdir():
        if entry.name not in (".git", ".trainctl") and not entry.name.startswith(".pytest"):
            (folder / entry.name).symlink_to(entry)
    return folder


def test_the_readme_tour_runs_as_typed(tmp_path):
    """Guards issue 28, point 1: the tour failed as written (a dataset never uploaded, files used but never
    shown). Every command of README's tour runs, in order, on the local stack, and the events README shows come."""
    steps = tour_steps(README.read_text())
    assert len(steps) >= 10, "README's tour blocks are marked `<!-- tour -->`; fewer commands than expected found"
    assert steps[0].command.startswith(".venv/bin/trainctl local up --detach")
    assert steps[-1].command.startswith(".venv/bin/trainctl local down")

    env = user_env(tmp_path / "local")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != VENV_BIN)  # a fresh shell
    shell = Shell(fresh_checkout(tmp_path / "checkout"), env)
    try:
        for step in steps:
            status, output = shell.run(step.command)
            assert status == 0, f"README's tour: `{step.command}` exited {status}:\n{output}"
            deadline = time.monotonic() + EVENTS_SECONDS
            while not set(step.events) <= shell.events() and time.monotonic() < deadline:
                time.sleep(0.2)
            missing = sorted(set(step.events) - shell.events())
            assert not missing, f"README's tour: after `{step.command}`, no event {missing}:\n{shell.transcript}"
    finally:
        shell.run(".venv/bin/trainctl local down >/dev/null 2>&1; true")
        shell.close()
