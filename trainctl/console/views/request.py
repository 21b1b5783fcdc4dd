"""A request page's data: its timeline, its run's metrics and loss curve, and where its logs are."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from functions.ledger.history import Outcome
from functions.ledger.record import Record
from schemas.events import JobEvent
from trainctl.console.views.common import MAX_TEXT, clipped, duration
from trainctl.console.views.now import in_state_since
from trainctl.curve import parse_final, parse_history
from trainctl.jobs import summary
from trainctl.loss_chart import history_metric

# The most scalar metrics a request page lists (a job chose how many it wrote).
MAX_METRICS_SHOWN = 40


@dataclass(frozen=True)
class Step:
    time: str
    state: str  # the data-state of its li: a lifecycle state, or `ladder` for a move down the capacity ladder
    attempt: int | None
    text: str


def timeline(record: Record, seen: Iterable[JobEvent], outcome: Outcome | None = None) -> list[Step]:
    """The request's story in order: the lifecycle events this console saw (each once, by sequence), and where it saw
    none, what the ledger keeps: its acceptance (the record's creation), its last job's start (the history's outcome,
    once it ended), each rung of the capacity ladder it left and why, and where it stands now."""
    events = sorted({e.ce_id: e for e in seen if e.request_key == record.key}.values(), key=_order)
    steps = [Step(_when(e.time), e.state, e.attempt, clipped(e.message, 2 * MAX_TEXT)) for e in events]
    states = {e.state for e in events}
    if "accepted" not in states:
        steps.append(Step(_when(record.created), "accepted", 1, "accepted (the record's creation)"))
    if outcome is not None and outcome.started and "running" not in states:
        steps.append(Step(_when(outcome.started), "running", outcome.attempt, "its last job started running"))
    steps.sort(key=lambda s: s.time)
    for moved in sorted(record.rung_history, key=lambda o: o.rung):
        steps.append(
            Step(
                "",
                "ladder",
                None,
                f"left rung {moved.rung} ({moved.resources}) after {moved.attempts}: {moved.outcome}",
            )
        )
    if record.attempt > 1 and "retrying" not in states:
        text = f"resubmitted: attempt {record.attempt} of at most {record.max_attempts}, into the same output folder"
        steps.append(Step("", "retrying", record.attempt, text))
    if record.rung_preemptions and "retrying" not in states:
        steps.append(Step("", "preempted", record.attempt, f"preempted {record.rung_preemptions} time(s) on this rung"))
    if record.state not in states:
        since = outcome.time if outcome is not None else in_state_since(record)
        text = clipped(record.message, 2 * MAX_TEXT) or record.state
        steps.append(Step(_when(since), record.state, record.attempt, text))
    return steps


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds")


def _order(event: JobEvent) -> tuple[int, datetime]:
    return (event.sequence or 0, event.time)


def request_view(record: Record) -> dict[str, Any]:
    """`trainctl status --json`'s summary (trainctl/jobs.py), which the request page lays out."""
    return summary(record)


# The figures of metrics.json that are Unix times (trainer/outputs/progress.py: when the process started, when the
# job's first step ended), shown as UTC times; and a name's ending that says it is a duration in seconds.
UNIX_TIMES = frozenset({"process_started", "first_step"})
SECONDS_SUFFIX = "_seconds"
# A Unix time shown as one: from 2001-09-09 to 5138-11-16 (a smaller number is not one: shown as it is).
UNIX_TIME_RANGE = (1e9, 1e11)


def figure_in_words(name: str, value: float) -> str:
    """A metrics.json figure as a person reads it: a Unix time as a UTC time, a duration as one (with its seconds),
    any other number rounded."""
    from trainctl.eventstream import readable

    if name in UNIX_TIMES and UNIX_TIME_RANGE[0] <= value < UNIX_TIME_RANGE[1]:
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if name.endswith(SECONDS_SUFFIX) and value >= 0:
        return f"{duration(value)} ({readable(value)} s)"
    return readable(value)


def metric_rows(content: bytes | None) -> list[tuple[str, str]]:
    """The scalar numbers of the run's metrics.json (a job wrote it: only finite numbers, at most MAX_METRICS_SHOWN,
    names cut), as (name, value) rows: each value as figure_in_words says."""
    import json

    try:
        found = json.loads(content) if content else {}
    except ValueError:
        return []
    if not isinstance(found, dict):
        return []
    rows = []
    for name, value in found.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            rows.append((clipped(str(name), 80), figure_in_words(str(name), value)))
        if len(rows) >= MAX_METRICS_SHOWN:
            break
    return rows


@dataclass
class Curve:
    """The loss curve as the browser's chart draws it: one x series and named y series (uPlot's data shape)."""

    x_name: str = "epoch"
    x: list[float] = field(default_factory=list)
    series: dict[str, list[float | None]] = field(default_factory=dict)
    best_epoch: int | None = None
    stopped_early: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "x_name": self.x_name,
            "x": self.x,
            "series": self.series,
            "best_epoch": self.best_epoch,
            "stopped_early": self.stopped_early,
        }


CURVE_SERIES = ("train_loss", "val_loss", "val_accuracy", "val_rmse")


def curve_of(history_content: bytes | None, final_content: bytes | None) -> Curve | None:
    """trainctl/curve.py's parse of metrics.jsonl and metrics.json, as chart series; None with nothing to draw."""
    history = parse_history(history_content) if history_content else []
    if not history:
        return None
    final = parse_final(final_content)
    x_name = "epoch" if all("epoch" in h for h in history) else "step"
    metric = history_metric(history)
    names = [n for n in CURVE_SERIES if n in ("train_loss", "val_loss") or n == metric]
    return Curve(
        x_name=x_name,
        x=[h.get(x_name, i) for i, h in enumerate(history)],
        series={n: [h.get(n) for h in history] for n in names if any(n in h for h in history)},
        best_epoch=final.get("best_epoch"),
        stopped_early=bool(final.get("stopped_early")),
    )


def cloud_logs_url(project: str, job_name: str) -> str:
    """The job's logs in the Cloud Console's Logs Explorer: Vertex writes them as resource.type="ml_job" with
    resource.labels.job_id (local/FIDELITY.md, the job logs rows; google-cloud-sdk's log_util.py). The URL's shape,
    `logs/query;query=<the query, percent-encoded>?project=P`, is the one vvakame/gcplogurl builds (its example:
    `https://console.cloud.google.com/logs/query;query=trace%3D%22projects%2F…%22;…?project=test-project`)."""
    from urllib.parse import quote

    job_id = job_name.rsplit("/", 1)[-1]
    query = f'resource.type="ml_job"\nresource.labels.job_id="{job_id}"'
    return f"https://console.cloud.google.com/logs/query;query={quote(query, safe='')}?project={quote(project)}"
