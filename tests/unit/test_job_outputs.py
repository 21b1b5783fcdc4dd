"""What a job writes, read as untrusted input: metrics.json, progress.json and failure.json are parsed with
bounded nesting and checked against the trainer's shapes; what cannot be used is refused or left out, in words,
and nothing else ever escapes (issue 24, point 5)."""

from __future__ import annotations

import json

import pytest

from functions.untrusted.job_outputs import (
    MAX_FAILURE_CHARS,
    MAX_METRICS,
    MAX_OUTPUT_BYTES,
    Unreadable,
    parse_failure_note,
    parse_metrics,
    parse_progress,
)

# What the built-in trainer writes (trainer/train.py finish), abridged.
TRAINER_METRICS = {
    "task": "classification",
    "target": "churned",
    "metric": "val_accuracy",
    "epoch": 3,
    "val_loss": 0.41,
    "val_accuracy": 0.87,
    "best_epoch": 3,
    "stopped_early": False,
    "samples_per_second": 5321.7,
    "data_wait_fraction": None,
    "step_time_ms": {"p10": 1.2, "p50": 1.4, "p90": 2.0},
    "world_size": 4,
}


def test_the_trainers_metrics_are_kept_whole():
    metrics = parse_metrics(json.dumps(TRAINER_METRICS).encode())
    assert (metrics.values, metrics.note) == (TRAINER_METRICS, "")


def test_forged_metrics_keep_only_finite_small_values_and_name_the_rest():
    """Issue 24, point 5: NaN and Infinity (which Python's json accepts), integers past 64 bits, long text, long
    names and deep or wide nesting are left out, each named; the good entries stay."""
    forged = (
        '{"val_accuracy": 0.9, "val_loss": NaN, "inf": 1e999, "neg": -Infinity, "huge": 1' + "0" * 30 + ", "
        '"text": "' + "x" * 5000 + '", "' + "n" * 200 + '": 1, "deep": {"a": {"b": 1}}, '
        '"wide": [' + ",".join(["1"] * 50) + '], "ok_nested": {"p50": 1.5}}'
    )
    metrics = parse_metrics(forged.encode())
    assert metrics.values == {"val_accuracy": 0.9, "ok_nested": {"p50": 1.5}}
    assert metrics.note.startswith("left out of the metrics: 'val_loss' (nan is not a finite number); ")
    for named in ("'inf' (inf is not a finite number)", "'huge' (an integer beyond 64 bits)", "and 3 more"):
        assert named in metrics.note
    assert len(metrics.note) < 600


def test_too_many_metrics_keep_the_first_and_say_how_many_were_dropped():
    many = {f"m{i}": i for i in range(MAX_METRICS + 7)}
    metrics = parse_metrics(json.dumps(many).encode())
    assert len(metrics.values) == MAX_METRICS
    assert metrics.note == f"left out of the metrics: 7 entries past the first {MAX_METRICS}"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"a": ' + b"[" * 20_000 + b"]" * 20_000 + b"}", "is nested more than 32 levels deep"),
        (b'{"a": 1' + b" " * MAX_OUTPUT_BYTES + b"}", f"the limit is {MAX_OUTPUT_BYTES}"),
        (b"[1, 2]", "it holds a JSON array, not an object"),
        (b"a: 1\n", "not valid JSON"),  # YAML is not what a trainer writes
        (b"\xff\xfe", "not UTF-8"),
        (b'{"a": ' + b"9" * 5000 + b"}", "not valid JSON"),  # more digits than Python converts
    ],
)
def test_unusable_metrics_are_unreadable_with_the_reason(raw, reason):
    """Issue 24, point 5: deep nesting raised RecursionError, which escaped the observation."""
    with pytest.raises(Unreadable, match=reason):
        parse_metrics(raw)


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ({"step": 3, "time": float("nan")}, "time: Input should be a finite number"),
        ({"step": 3, "time": "yesterday"}, "time: Input should be a valid number"),
        ({"step": 3, "time": True}, "time: Input should be a valid number"),
        ({"step": 3}, "time: Field required"),
        ({"step": -1, "time": 1.0}, "step: Input should be greater than or equal to 0"),
        ({"time": 1.0, "state": "x" * 100}, "state: String should have at most 32 characters"),
        ([1], "the document: Input should be a valid dictionary"),
    ],
)
def test_a_progress_record_off_the_trainers_shape_is_unreadable(document, reason):
    """Issue 24, point 5."""
    raw = json.dumps(document).encode()
    with pytest.raises(Unreadable, match=reason):
        parse_progress(raw)


def test_the_trainers_progress_record_is_read():
    raw = b'{"step": 120, "total_steps": 400, "epoch": 2, "time": 1795000000.123, "attempt": 0, "state": "training"}'
    assert parse_progress(raw).model_dump(exclude_none=True) == {
        "time": 1795000000.123,
        "step": 120,
        "state": "training",
    }
    # Issue 43: the first step and the steps run, with the rest of the record (trainer/outputs/progress.py).
    newer = b'{"step": 120, "time": 1795000000.123, "job": "1", "started": 1794999900.5, "first_step": 1794999960.25, '
    assert parse_progress(newer + b'"steps_run": 140}').model_dump(exclude_none=True) == {
        "time": 1795000000.123,
        "step": 120,
        "first_step": 1794999960.25,
        "steps_run": 140,
    }


def test_a_failure_note_is_clipped_and_cleaned_for_events_and_logs():
    """Issue 24, point 5: the note's text lands in the `failed` event and in log lines."""
    note = parse_failure_note(json.dumps({"error": "\x1b[31mred\x1b[0m\n" + "e" * 10_000}).encode()).text
    assert note.startswith("?[31mred?[0m\ne") and len(note) == MAX_FAILURE_CHARS and note.endswith("…")
    assert parse_failure_note(b'{"error": "FileNotFoundError: no CSV"}').text == "FileNotFoundError: no CSV"
    with pytest.raises(Unreadable, match="error: Input should be a valid string"):
        parse_failure_note(b'{"error": {"nested": 1}}')


def test_a_failure_note_blames_the_data_only_with_the_reason_the_trainer_writes():
    """Issue 27, point 3: the trainer's note `{"error": …, "reason": "data"}` (drift above max_drift) makes the
    failure's reason `data`; any other reason, or none, leaves it a user failure."""
    assert parse_failure_note(b'{"error": "DataDrift: age 0.4", "reason": "data"}').data
    assert not parse_failure_note(b'{"error": "ValueError: x", "reason": "quota"}').data
    assert not parse_failure_note(b'{"error": "ValueError: x"}').data
    with pytest.raises(Unreadable, match="reason"):
        parse_failure_note(b'{"error": "x", "reason": 3}')


def test_the_drift_of_a_wide_dataset_keeps_its_largest_figures():
    """Issue 27, point 3: metrics.json's `drift` has one figure per feature (30 for the demo's dataset); past the
    bound on a nested entry, the features that moved most are kept (and the rest named in the note), so the events
    and the registry still say where the drift is."""
    drift = {f"f{i}": i / 100 for i in range(30)}
    metrics = parse_metrics(json.dumps({"drift": drift, "max_drift_feature": "f29", "val_accuracy": 0.9}).encode())
    assert metrics.values["drift"] == {f"f{i}": i / 100 for i in range(29, 9, -1)}
    assert metrics.values["max_drift_feature"] == "f29"
    assert "drift: the 10 smallest of 30 features' figures" in metrics.note
    narrow = parse_metrics(json.dumps({"drift": {"a": 0.1, "b": 0.2}}).encode())
    assert narrow.values["drift"] == {"a": 0.1, "b": 0.2} and narrow.note == ""
