"""Structured logs: one JSON object per line on stdout, the shape Cloud Logging parses on Cloud Functions.

Every line carries the request id of the event being handled (set once per event with `request_context`).
Values go through json.dumps, so a newline or quote inside a field cannot forge a second log line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
MAX_FIELD_CHARS = 2000
_text_format = False


@contextmanager
def text_format(enabled: bool = True) -> Iterator[None]:
    """Inside this block, lines for a person at a terminal (trainctl replay): `SEVERITY message key=value`,
    structures indented; JSON again after it."""
    global _text_format
    before, _text_format = _text_format, enabled
    try:
        yield
    finally:
        _text_format = before


def _as_text(entry: dict[str, Any]) -> str:
    head = f"{entry.pop('severity'):<7} {entry.pop('message')}"
    inline = [
        f"{k}={json.dumps(v, default=str, ensure_ascii=False)}"
        for k, v in entry.items()
        if not isinstance(v, dict | list)
    ]
    blocks = [
        f"  {k}:\n" + "\n".join("    " + line for line in json.dumps(v, indent=2, default=str).splitlines())
        for k, v in entry.items()
        if isinstance(v, dict | list)
    ]
    return "\n".join([head + ("  " + " ".join(inline) if inline else ""), *blocks])


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
        return value[:MAX_FIELD_CHARS] + "…"
    return value


def log(severity: str, message: str, **fields: Any) -> None:
    entry: dict[str, Any] = {"severity": severity, "message": _clip(message)}
    request_id = fields.pop("request_id", None) or _request_id.get()
    if request_id:
        entry["request_id"] = _clip(request_id)
    entry.update({k: _clip(v) for k, v in fields.items() if v is not None})
    line = _as_text(entry) if _text_format else json.dumps(entry, default=str, ensure_ascii=True)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def info(message: str, **fields: Any) -> None:
    log("INFO", message, **fields)


def warning(message: str, **fields: Any) -> None:
    log("WARNING", message, **fields)


def error(message: str, **fields: Any) -> None:
    log("ERROR", message, **fields)


@contextmanager
def request_context(request_id: str | None) -> Iterator[None]:
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)


def set_request_id(request_id: str | None) -> None:
    """Within a request_context: the id became known (or changed) part-way through handling."""
    _request_id.set(request_id)
