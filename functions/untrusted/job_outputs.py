"""What a job leaves for the controller to read — `model/metrics.json`, `checkpoints/progress.json`,
`model/failure.json` — taken as untrusted input: whatever code the job ran may have written anything there.

Each is read with a bound on its size (`MAX_OUTPUT_BYTES`, never downloaded whole), parsed by
documents.load_json (bounded nesting) and checked against the shape the built-in trainer writes
(trainer/outputs/model_folder.py, trainer/outputs/progress.py; not imported: the trainer stands alone, DESIGN.md
§2). Pure: the functions take the bytes; what cannot be used raises `Unreadable` with the reason in words, or is left
out and named, and never anything else.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.untrusted.documents import DocumentInvalid, load_json

# The trainer's own files are a few hundred bytes (metrics.json about 1 KiB); anything far larger is not its.
MAX_OUTPUT_BYTES = 64 * 1024
# metrics.json: the trainer writes about 30 entries, one of them nested once (step_time_ms: {p10, p50, p90}).
MAX_METRICS = 100
MAX_NESTED_ENTRIES = 20
# The trainer's drift per feature against the champion's data (issue 27): {feature: figure}, as many as there are
# features; a wider one keeps its MAX_NESTED_ENTRIES largest figures rather than being left out whole.
DRIFT = "drift"
MAX_NAME_CHARS = 128
MAX_TEXT_CHARS = 1024
INT64 = 2**63  # BigQuery's JSON columns (the events table) hold 64-bit integers
# failure.json: the trainer clips its own note to this many characters (trainer/outputs/model_folder.py report_failure).
MAX_FAILURE_CHARS = 2000
SHOWN_PROBLEMS = 5
# Control characters other than tab and newline, kept out of the text events and terminals show.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_Model = TypeVar("_Model", bound=BaseModel)


class Unreadable(ValueError):
    """A job output the controller cannot use; the message says why."""


@dataclass(frozen=True)
class Metrics:
    values: dict[str, Any]
    note: str = ""  # what was left out, in words; "" when nothing was


def parse_metrics(raw: bytes) -> Metrics:
    """metrics.json: a JSON object whose entries are finite numbers, booleans, null, short text, or an object or
    list of those (one level deep). Entries that break a rule are left out and named in `note`; a document that is
    not such an object at all raises Unreadable."""
    document = _document(raw)
    if not isinstance(document, dict):
        raise Unreadable(f"it holds a JSON {_kind(document)}, not an object")
    values: dict[str, Any] = {}
    left_out: list[str] = []
    for index, (name, value) in enumerate(document.items()):
        if index >= MAX_METRICS:
            left_out.append(f"{len(document) - MAX_METRICS} entries past the first {MAX_METRICS}")
            break
        if name == DRIFT and isinstance(value, dict) and len(value) > MAX_NESTED_ENTRIES:
            value, dropped = _largest_figures(value)
            if dropped:
                left_out.append(f"{DRIFT}: the {dropped} smallest of {len(value) + dropped} features' figures")
        problem = _name_problem(name) or _value_problem(value, nested=False)
        if problem:
            left_out.append(f"{_shown(name)} ({problem})")
        else:
            values[name] = value
    return Metrics(values, _left_out_note(left_out))


class Progress(BaseModel):
    """The heartbeat the built-in trainer keeps (trainer/outputs/progress.py); the fields the controller reads."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    time: float = Field(allow_inf_nan=False, description="Unix time in seconds when `step` was reached.")
    step: int | None = Field(None, ge=0, lt=INT64)
    state: str | None = Field(None, max_length=32, description="starting, training or finished.")
    # Issue 43: time to first step and runtime goodput. Bounded here; functions/ledger/first_step.py then keeps a first
    # step only within its job's own start → end, and step counts only when kept ≤ run.
    first_step: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="Unix time in seconds of the job's first optimizer step."
    )
    steps_run: int | None = Field(None, ge=0, lt=INT64, description="Steps run by every process and attempt.")


def parse_progress(raw: bytes) -> Progress:
    return parse_output(Progress, raw)


class FailureNote(BaseModel):
    """What the built-in trainer leaves when it fails (trainer/outputs/model_folder.py report_failure)."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    error: str
    reason: str | None = Field(
        None,
        max_length=32,
        description="`data` when the trainer refused the data before its first epoch (drift above max_drift); "
        "any other value is not one the controller acts on.",
    )


@dataclass(frozen=True)
class Failure:
    text: str  # clipped, without control characters: it lands in events and logs
    data: bool  # the trainer stopped for its data (issue 27): the failure's reason is `data`, not `user`


def parse_failure_note(raw: bytes) -> Failure:
    """The note's error text, and whether the trainer blamed the data."""
    note = parse_output(FailureNote, raw)
    return Failure(clip(note.error, MAX_FAILURE_CHARS), note.reason == "data")


def clip(text: str, limit: int) -> str:
    text = _CONTROL.sub("?", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _document(raw: bytes, max_bytes: int = MAX_OUTPUT_BYTES) -> Any:
    try:
        return load_json(raw, max_bytes)
    except DocumentInvalid as exc:
        raise Unreadable(str(exc)) from None


def parse_output(model: type[_Model], raw: bytes, max_bytes: int = MAX_OUTPUT_BYTES) -> _Model:
    """A job's JSON output checked against `model`; Unreadable naming the first field that breaks it."""
    document = _document(raw, max_bytes)
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        raise Unreadable(f"{where}: {first['msg']}") from None


def _name_problem(name: str) -> str | None:
    return f"a name longer than {MAX_NAME_CHARS} characters" if len(name) > MAX_NAME_CHARS else None


def _value_problem(value: Any, nested: bool) -> str | None:
    """Why `value` cannot be a metric (or an entry of a nested one); None when it can."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if -INT64 <= value < INT64 else "an integer beyond 64 bits"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value} is not a finite number"
    if isinstance(value, str):
        return None if len(value) <= MAX_TEXT_CHARS else f"text longer than {MAX_TEXT_CHARS} characters"
    if nested:
        return "nested more than one level"
    if len(value) > MAX_NESTED_ENTRIES:
        return f"more than {MAX_NESTED_ENTRIES} entries"
    entries = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in entries:
        problem = (_name_problem(key) if isinstance(key, str) else None) or _value_problem(item, nested=True)
        if problem:
            return f"{_shown(key) if isinstance(key, str) else f'item {key}'}: {problem}"
    return None


def _largest_figures(entries: dict[Any, Any]) -> tuple[dict[Any, Any], int]:
    """The MAX_NESTED_ENTRIES largest finite figures of a {name: figure} object, and how many were left out:
    a wide dataset's drift keeps the features that moved most."""
    figures = [
        (key, value)
        for key, value in entries.items()
        if isinstance(key, str) and isinstance(value, int | float) and not isinstance(value, bool)
    ]
    figures = [(key, value) for key, value in figures if math.isfinite(value)]
    if len(figures) < len(entries):
        return entries, 0  # not only figures: left to the ordinary rules
    kept = sorted(figures, key=lambda item: -item[1])[:MAX_NESTED_ENTRIES]
    return dict(kept), len(entries) - len(kept)


def _left_out_note(left_out: list[str]) -> str:
    if not left_out:
        return ""
    shown = "; ".join(left_out[:SHOWN_PROBLEMS])
    more = f"; and {len(left_out) - SHOWN_PROBLEMS} more" if len(left_out) > SHOWN_PROBLEMS else ""
    return f"left out of the metrics: {shown}{more}"


def _shown(name: str) -> str:
    return repr(clip(name, 40))


def _kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")
