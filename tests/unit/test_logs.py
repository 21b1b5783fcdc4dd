"""Structured logs: one JSON object per line, whatever the fields contain (no log injection)."""

import json

from functions import logs


def test_newlines_and_quotes_in_fields_cannot_forge_a_second_log_line(capsys):
    with logs.request_context('evil\n{"severity": "ERROR", "message": "forged"}'):
        logs.info("object ignored", object='part\n{"severity": "CRITICAL"}\r\x00.csv')
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["severity"] == "INFO"
    assert entry["object"] == 'part\n{"severity": "CRITICAL"}\r\x00.csv'
    assert entry["request_id"].startswith("evil\n")


def test_huge_fields_are_clipped(capsys):
    logs.warning("big", payload="x" * 100_000)
    entry = json.loads(capsys.readouterr().out)
    assert len(entry["payload"]) <= logs.MAX_FIELD_CHARS + 1
