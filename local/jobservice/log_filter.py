"""The job-state log sink's filter, read from the one file Terraform reads too
(terraform/job_state_log_filter.txt), evaluated against LogEntry dicts the way Cloud Logging would for
the part of the logging query language the filter uses: `path="value"` comparisons joined by AND.

Anything else in the file (OR, NOT, parentheses, other operators) is refused with the rule, so the
local announcer never quietly publishes what the deployed sink would not.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

FILTER_FILE = Path(__file__).resolve().parents[2] / "terraform" / "job_state_log_filter.txt"

# One comparison: a field path of dotted names, each bare or double-quoted, then ="value".
_SEGMENT = r'(?:[A-Za-z_][A-Za-z0-9_]*|"[^"]*")'
_COMPARISON = re.compile(rf'\s*({_SEGMENT}(?:\.{_SEGMENT})*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')
_SEGMENTS = re.compile(_SEGMENT)


class LogFilterError(ValueError):
    """The filter uses syntax this evaluator does not understand."""


def parse_log_filter(text: str) -> Callable[[dict], bool]:
    """A predicate over LogEntry dicts (JSON form) for `text`."""
    comparisons = []
    for part in re.split(r"\s+AND\s+", text.strip()):
        match = _COMPARISON.fullmatch(part)
        if match is None:
            raise LogFilterError(
                f'log filter: cannot evaluate {part.strip()!r}; only field="value" comparisons joined by AND '
                f"are understood (in {text.strip()!r})"
            )
        path = [segment.strip('"') for segment in _SEGMENTS.findall(match.group(1))]
        comparisons.append((path, match.group(2).replace('\\"', '"')))

    def matches(entry: dict) -> bool:
        return all(_field(entry, path) == value for path, value in comparisons)

    return matches


def job_state_log_filter() -> Callable[[dict], bool]:
    """The deployed sink's filter, from the file Terraform reads."""
    return parse_log_filter(FILTER_FILE.read_text())


def _field(entry: dict, path: list[str]) -> object:
    value: object = entry
    for segment in path:
        if not isinstance(value, dict) or segment not in value:
            return None
        value = value[segment]
    return value
