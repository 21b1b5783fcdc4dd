"""One JSON object per line on stdout, the format Cloud Logging parses on Vertex: `severity`, `message`,
the process's `rank`, and any fields the event carries."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def log(message: str, severity: str = "INFO", **fields: Any) -> None:
    record = {"severity": severity, "message": message, "rank": _rank(), "time": round(time.time(), 3), **fields}
    # One write per line so lines from several processes sharing a pipe do not interleave.
    sys.stdout.write(json.dumps(record, default=str) + "\n")
    sys.stdout.flush()


def warning(message: str, **fields: Any) -> None:
    log(message, severity="WARNING", **fields)


def error(message: str, **fields: Any) -> None:
    log(message, severity="ERROR", **fields)
