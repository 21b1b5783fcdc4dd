"""The jobs' logs as Cloud Logging serves them: Cloud Logging's `entries:list` (v2), answered from the log
files the nodes write, for `gcloud ai custom-jobs stream-logs` (reference/apis.md §2).

Each line is a LogEntry of `resource.type="ml_job"` with `resource.labels` `job_id`, `task_name` (the node,
`workerpool0-0`, or `service` for the service's own lines) and `project_id`; a line that is a JSON object
becomes `jsonPayload` (with its `severity`), as Cloud Logging parses structured container output, any
other line `textPayload`. Service lines carry the time they were written; node output carries no time, so
a node line is stamped with its file's modification time when this service first reads it — never before
the line was written, and never earlier than a line read before it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from local.jobservice.filters import COMPARISONS, FilterError, parse_query, rfc3339, time_operator
from local.jobservice.rest import RestAbort, RestRequest, RestResponse, Route
from local.jobservice.store import JobStore

MAX_PAGE_SIZE = 1000  # entries:list's own limit (gcloud asks for it)
_SERVICE_TASK = "service"
_JOB_ID_TERM = re.compile(r'resource\.labels\.job_id\s*=\s*"?([0-9]+)"?')


def rfc3339_text(when: dt.datetime) -> str:
    """Cloud Logging's timestamp form: UTC, microseconds, `Z` (one width, so the texts sort as the times)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _FileStamps:
    """The timestamps given so far to the complete lines of one node log."""

    stamps: list[str] = field(default_factory=list)


class JobLogs:
    """Log entries of the jobs in `store`, read from their log folders (kept after a job is deleted, as Cloud
    Logging keeps a deleted job's logs)."""

    def __init__(self, store: JobStore):
        self.store = store
        self._lock = threading.Lock()
        self._stamps: dict[Path, _FileStamps] = {}

    def entries(self, project: str, job_id: str) -> list[dict[str, Any]]:
        """The entries of job `job_id` of `project` (none when the job belongs to another project)."""
        owner = self._project_of(job_id)
        if owner is not None and owner != project:
            return []
        log_dir = self.store.jobs_dir / job_id / "logs"
        entries: list[dict[str, Any]] = []
        for path in sorted(log_dir.glob("*.log")):
            if path.stem == _SERVICE_TASK:
                entries += self._service_entries(path, project, job_id)
            else:
                entries += self._node_entries(path, project, job_id)
        return entries

    def _project_of(self, job_id: str) -> str | None:
        """The project of a job the store knows; None for a deleted one (its logs stay, its record not)."""
        for job in self.store.jobs():
            if job.name.rsplit("/", 1)[-1] == job_id:
                return job.name.split("/")[1]
        return None

    def job_ids(self) -> list[str]:
        return sorted(path.parent.name for path in self.store.jobs_dir.glob("*/logs"))

    def _service_entries(self, path: Path, project: str, job_id: str) -> list[dict[str, Any]]:
        entries = []
        for number, line in enumerate(_complete_lines(path)):
            written, _, message = line.partition(" ")
            try:
                timestamp = rfc3339_text(dt.datetime.fromisoformat(written))
            except ValueError:
                continue
            entry = _entry(project, job_id, _SERVICE_TASK, number, timestamp, message)
            entry["severity"] = "ERROR" if message.startswith("JOB_STATE_FAILED") else "INFO"
            entries.append(entry)
        return entries

    def _node_entries(self, path: Path, project: str, job_id: str) -> list[dict[str, Any]]:
        lines = _complete_lines(path)
        with self._lock:
            known = self._stamps.setdefault(path, _FileStamps())
            if len(lines) > len(known.stamps):
                modified = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
                floor = known.stamps[-1] if known.stamps else ""
                stamp = max(rfc3339_text(modified), floor)
                known.stamps += [stamp] * (len(lines) - len(known.stamps))
            stamps = list(known.stamps)
        return [_entry(project, job_id, path.stem, number, stamps[number], line) for number, line in enumerate(lines)]


def _complete_lines(path: Path) -> list[str]:
    """The lines of `path` that end in a newline (a line still being written is left for the next read)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return text.split("\n")[:-1]


def _entry(project: str, job_id: str, task: str, number: int, timestamp: str, line: str) -> dict[str, Any]:
    entry: dict[str, Any] = {
        # Unique, and in line order within a timestamp: gcloud pages through equal timestamps by insertId.
        "insertId": f"{job_id}-{task}-{number:09d}",
        "logName": f"projects/{project}/logs/{task}",
        "resource": {"type": "ml_job", "labels": {"project_id": project, "job_id": job_id, "task_name": task}},
        "timestamp": timestamp,
        "receiveTimestamp": timestamp,
    }
    payload = _json_object(line)
    if payload is not None:
        entry["jsonPayload"] = payload
        if isinstance(payload.get("severity"), str):
            entry["severity"] = payload["severity"].upper()
    else:
        entry["textPayload"] = line
    return entry


def _json_object(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _field(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for segment in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(segment)
    return value


def _entry_comparison(field_path: str, operator: str, value: str):
    """One comparison of the logging query language, on an entry's JSON: `timestamp` by time, the rest as
    text (`=`, `!=`, `<`, `<=`, `>`, `>=`, and `:` as "contains")."""
    if field_path == "timestamp":
        when = rfc3339("timestamp", value)
        compare = time_operator("timestamp", operator)
        return lambda entry: compare(rfc3339("timestamp", entry["timestamp"]), when)
    text_operators = {**COMPARISONS, ":": lambda a, b: b in a}
    if operator not in text_operators:
        raise FilterError(f"{field_path}: unsupported operator {operator!r}")
    compare = text_operators[operator]

    def matches(entry: dict[str, Any]) -> bool:
        actual = _field(entry, field_path)
        if actual is None:
            return operator == "!="
        return compare(str(actual), value)

    return matches


def list_entries(logs: JobLogs, body: dict[str, Any]) -> dict[str, Any]:
    """The `entries:list` response for a request body (resourceNames, filter, orderBy, pageSize, pageToken)."""
    projects = [name.split("/", 1)[1] for name in body.get("resourceNames", []) if name.startswith("projects/")]
    if not projects:
        raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, "resourceNames: name at least one projects/PROJECT")
    text = body.get("filter", "")
    try:
        matches = parse_query(text, _entry_comparison)
    except FilterError as error:
        raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, f"Unparseable filter: {error}") from None
    order = (body.get("orderBy") or "timestamp asc").strip().lower()
    if order not in ("timestamp asc", "timestamp desc"):
        raise RestAbort(
            grpc.StatusCode.INVALID_ARGUMENT, f"orderBy: 'timestamp asc' or 'timestamp desc', not {order!r}"
        )
    # Only the job a filter names is read, when it names one (gcloud's always does).
    named = _JOB_ID_TERM.search(text)
    job_ids = [named.group(1)] if named else logs.job_ids()
    found = [
        entry for project in projects for job_id in job_ids for entry in logs.entries(project, job_id) if matches(entry)
    ]
    found.sort(key=lambda entry: (entry["timestamp"], entry["insertId"]), reverse=order.endswith("desc"))
    size = min(int(body.get("pageSize") or MAX_PAGE_SIZE), MAX_PAGE_SIZE)
    token = str(body.get("pageToken") or "0")
    if not token.isdigit():
        raise RestAbort(grpc.StatusCode.INVALID_ARGUMENT, "pageToken: not a token this service returned")
    start = int(token)
    response: dict[str, Any] = {"entries": found[start : start + size]} if found[start : start + size] else {}
    if start + size < len(found):
        response["nextPageToken"] = str(start + size)
    return response


def logging_routes(logs: JobLogs) -> list[Route]:
    """Cloud Logging's `POST /v2/entries:list`, the one call gcloud's stream-logs makes."""

    def entries_list(request: RestRequest, match: re.Match[str]) -> RestResponse:
        return RestResponse(200, list_entries(logs, request.json_body()))

    return [("POST", re.compile(r"/v2/entries:list"), entries_list)]
