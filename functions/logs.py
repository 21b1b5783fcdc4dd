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
    sys.stdout.write(json.dumps(entry, default=str, ensure_ascii=True) + "\n")
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
