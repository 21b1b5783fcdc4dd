"""`trainctl status ID`, `trainctl list`, `trainctl cancel ID` and `trainctl watch`: reading the ledger,
following events, and stopping a job."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from functions.gcs import Conflict, Gcs
from functions.ledger import Ledger
from functions.lifecycle import Record
from trainctl.context import cli_settings, events_subscription
from trainctl.eventstream import EXIT_CANNOT_FOLLOW, HOW_TO_WATCH, CannotFollow, EventStream, format_event

EXIT_NOT_FOUND = 3


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("status", help="where a request stands: state, job, cost, artifacts")
    cmd.add_argument("request_id", metavar="ID")
    cmd.add_argument("--json", action="store_true")
    cmd.set_defaults(run=run_status)

    cmd = commands.add_parser("list", help="requests in flight (or every request with --all)")
    cmd.add_argument("--all", action="store_true", help="finished requests too")
    cmd.add_argument("--json", action="store_true")
    cmd.set_defaults(run=run_list)

    cmd = commands.add_parser("cancel", help="cancel a request's running job")
    cmd.add_argument("request_id", metavar="ID")
    cmd.set_defaults(run=run_cancel)

    cmd = commands.add_parser("watch", help="print lifecycle events as they are published")
    cmd.add_argument("--request", metavar="ID", help="only this request's events")
    cmd.add_argument("--json", action="store_true", help="one JSON object per line")
    cmd.add_argument(
        "--subscription",
        metavar="NAME",
        default=events_subscription(),
        help="pull from your own subscription (Terraform's event_watchers makes it; default: "
        "$TRAINCTL_EVENTS_SUBSCRIPTION) instead of making one",
    )
    cmd.set_defaults(run=run_watch)


def _ledger() -> Ledger:
    settings = cli_settings()
    return Ledger(Gcs(settings.project), settings.control_bucket)


def _find(ledger: Ledger, request_id: str) -> Record | None:
    found = ledger.find_by_request_id(request_id)
    return found[0] if found else None


def find_record(request_id: str) -> Record | None:
    """The ledger record of a request, by its id."""
    return _find(_ledger(), request_id)


def summary(record: Record) -> dict[str, Any]:
    return (
        {
            "request_id": record.request_id,
            "state": record.state,
            "attempt": record.attempt,
            "job": record.job_name,
            "job_state": record.job_state,
            "failure_reason": record.failure_reason,
            "message": record.message,
            "trigger": record.trigger.model_dump(exclude_none=True) if record.trigger else None,
            "cost": record.cost.model_dump(),
            "artifacts": record.artifacts.model_dump(),
            "created": record.created.isoformat(),
            "updated": record.updated.isoformat(),
        }
        | _ladder_summary(record)
        | _model_summary(record)
    )


def _model_summary(record: Record) -> dict[str, Any]:
    """With a model block: the champion the run was given, its version and the decision (`trainctl models show`)."""
    steps = record.model_steps
    if steps is None:
        return {}
    return {
        "model": {
            "name": record.request["model"]["name"],
            "champion_given": steps.champion_version,
            "version": steps.version,
            "decision": steps.decision or ("pending" if record.state == "succeeded" else None),
        }
    }


def _ladder_summary(record: Record) -> dict[str, Any]:
    """The rung the request is on and what became of the rungs before it (only for requests with fallbacks)."""
    if len(record.ladder) < 2:
        return {}
    return {
        "rung": f"{record.rung}: {record.ladder[record.rung].resources} (attempts here: {record.rung_attempts})",
        "rungs": [f"{o.rung}: {o.resources}: {o.outcome}" for o in sorted(record.rung_history, key=lambda o: o.rung)],
    }


def run_status(args: argparse.Namespace) -> int:
    record = _find(_ledger(), args.request_id)
    if record is None:
        print(f"no request {args.request_id!r} in the ledger")
        return EXIT_NOT_FOUND
    info = summary(record)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    width = max(map(len, info))
    for key, value in info.items():
        if isinstance(value, list):
            print(f"{key:<{width}}  " + (f"\n{'':<{width}}  ".join(value) or "-"))
        elif value is not None:
            print(f"{key:<{width}}  {json.dumps(value) if isinstance(value, dict) else value}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    ledger = _ledger()
    records = ledger.all_records() if args.all else ledger.active_records()
    records.sort(key=lambda r: r.updated, reverse=True)
    if args.json:
        print(json.dumps([summary(r) for r in records], indent=2))
        return 0
    if not records:
        print("no requests" + ("" if args.all else " in flight (--all shows finished ones)"))
        return 0
    print(f"{'REQUEST':<40} {'STATE':<10} {'ATTEMPT':>7}  {'UPDATED':<19}  JOB")
    for r in records:
        job = r.job_name.rsplit("/", 1)[-1] if r.job_name else "-"
        print(f"{r.request_id[:40]:<40} {r.state:<10} {r.attempt:>7}  {r.updated:%Y-%m-%d %H:%M:%S}  {job}")
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    from functions.vertex import VertexJobs

    ledger = _ledger()
    record = _find(ledger, args.request_id)
    if record is None:
        print(f"no request {args.request_id!r} in the ledger")
        return EXIT_NOT_FOUND
    if record.state == "queued":
        if cancel_queued(ledger, args.request_id):
            print(f"{args.request_id} waits for GPU quota; reconcile ends it with a `cancelled` event at its next tick")
            return 0
        record = _find(ledger, args.request_id) or record  # it left the queue meanwhile: cancel its job
    if record.final or record.job_name is None:
        print(f"{args.request_id} is {record.state}; there is no job to cancel")
        return 1
    settings = cli_settings()
    VertexJobs(settings.project, settings.region, settings.vertex_endpoint).cancel(record.job_name)
    print(f"cancelling {record.job_name}; a `cancelled` event follows when it has stopped")
    return 0


def cancel_queued(ledger: Ledger, request_id: str) -> bool:
    """Ask for a request that waits in trainctl's quota queue (it has no job yet) to be cancelled: reconcile, which
    owns the record's state, ends it and publishes `cancelled`. A compare-and-swap, again if the record moved;
    False when it is no longer queued (it got its quota meanwhile)."""
    for _ in range(5):
        found = ledger.find_by_request_id(request_id)
        if found is None or found[0].state != "queued":
            return False
        record, generation = found
        record.cancel_requested = True
        try:
            ledger.replace(record, generation)
            return True
        except Conflict:
            continue
    raise SystemExit(f"{request_id}: its record kept changing; try again")


def run_watch(args: argparse.Namespace) -> int:
    settings = cli_settings()
    try:
        stream = EventStream(settings.project, settings.events_topic, args.subscription)
    except CannotFollow as exc:
        return _cannot_watch(settings.events_topic, str(exc))
    with stream:
        print(f"watching {settings.events_topic} (Ctrl-C to stop)", flush=True)
        try:
            for event in stream.follow():
                if args.request and event.request_id != args.request:
                    continue
                print(event.model_dump_json(exclude_none=True) if args.json else format_event(event), flush=True)
        except CannotFollow as exc:
            return _cannot_watch(settings.events_topic, str(exc))
        except KeyboardInterrupt:
            pass
    return 0


def _cannot_watch(topic: str, refusal: str) -> int:
    print(f"cannot watch {topic}: {refusal}", file=sys.stderr)
    print(f"  - to watch it: {HOW_TO_WATCH}", file=sys.stderr)
    print("  - where one request stands: trainctl status ID (reads the ledger in the control bucket)", file=sys.stderr)
    return EXIT_CANNOT_FOLLOW
