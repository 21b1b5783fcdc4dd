"""The documentation's tours, run as typed: every shell block that README.md or a docs/ page marks `<!-- tour -->` is
taken from the page itself, in order, and its commands are typed into one bash session, as a new user would in a
fresh shell of this checkout (`trainctl` not on PATH, no variables set). README's quickstart ("Your own data in five
minutes", issue 44) is one tour, CSV in, champion out, predictions written; the docs/ pages' blocks, in the order of
their names, are the other. Each command must succeed, and the events a page shows after a command
(`HH:MM:SS  state  request`) must appear before the next one is typed. So the documentation cannot drift from the
product: a changed flag, a file the tour uses but never makes, a missing upload, an event that no longer comes, all
fail here (issue 28, point 1).

Each tour starts its own stack with its own `local up` (the session's stack of tests/e2e/conftest.py runs with other
options), in a folder that holds this checkout's files but none of the tour's."""

from __future__ import annotations

import csv
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
from tests.docs import DOCS, README
from tests.e2e.running_stack import VENV_BIN, user_env

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


def tour_steps(readme: str, page: str = "README.md") -> list[Step]:
    """The commands of a page's tour blocks, in order."""
    steps: list[Step] = []
    lines = readme.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != TOUR_MARK:
            i += 1
            continue
        assert lines[i + 1].startswith("```"), f"{page}:{i + 2}: a tour mark must stand right above a code block"
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


def run_tour(steps: list[Step], where: str, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """Type every step in one fresh shell; each must succeed and be followed by the events the page shows after
    it. The checkout folder the shell ran in, and what each command printed."""
    assert steps[0].command.startswith(".venv/bin/trainctl local up --detach"), f"{where} must start its own stack"
    assert steps[-1].command.startswith(".venv/bin/trainctl local down"), f"{where} must stop its stack"
    env = user_env(tmp_path / "local")
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p) != VENV_BIN)  # a fresh shell
    checkout = fresh_checkout(tmp_path / "checkout")
    shell = Shell(checkout, env)
    printed: dict[str, str] = {}
    try:
        for step in steps:
            status, output = shell.run(step.command)
            assert status == 0, f"{where}: `{step.command}` exited {status}:\n{output}"
            printed[step.command] = output
            deadline = time.monotonic() + EVENTS_SECONDS
            while not set(step.events) <= shell.events() and time.monotonic() < deadline:
                time.sleep(0.2)
            missing = sorted(set(step.events) - shell.events())
            assert not missing, f"{where}: after `{step.command}`, no event {missing}:\n{shell.transcript}"
    finally:
        shell.run(".venv/bin/trainctl local down >/dev/null 2>&1; true")
        shell.close()
    return checkout, printed


def test_the_quickstart_runs_as_typed(tmp_path):
    """Guards issue 44, point 1 (acceptance): README's "Your own data in five minutes" runs as typed from this
    checkout's .venv on the local stack — a CSV in, a registered champion out, predictions written."""
    steps = tour_steps(README.read_text())
    commands = [step.command for step in steps]
    assert any(c.startswith("gcloud storage cp examples/quickstart/breast-cancer.csv ") for c in commands), commands
    assert {"registered", "promoted"} <= {state for step in steps for state, _ in step.events}, (
        "README shows no champion"
    )
    checkout, printed = run_tour(steps, "README's quickstart", tmp_path)

    listed = next(output for command, output in printed.items() if command.startswith(".venv/bin/trainctl models list"))
    assert re.search(r"^cancer\s+1\s+champion=1$", listed, re.MULTILINE), listed
    with (checkout / "predictions.csv").open(newline="") as written:
        rows = list(csv.DictReader(written))
    assert len(rows) == 569  # every row of the CSV
    assert {row["prediction"] for row in rows} <= {"benign", "malignant"}
    assert sum(row["prediction"] == row["diagnosis"] for row in rows) > 0.8 * len(rows)  # a model that learned


def test_the_docs_tour_runs_as_typed(tmp_path):
    """Guards issue 28, point 1 (the tour failed as written: a dataset never uploaded, files used but never shown),
    now on the docs/ pages README's reference moved to (issue 44). Every command of their tour blocks runs, in
    order, on the local stack, and the events they show come."""
    steps = [step for page in sorted(DOCS.glob("*.md")) for step in tour_steps(page.read_text(), f"docs/{page.name}")]
    assert len(steps) >= 10, "the docs' tour blocks are marked `<!-- tour -->`; fewer commands than expected found"
    run_tour(steps, "the docs' tour", tmp_path)
