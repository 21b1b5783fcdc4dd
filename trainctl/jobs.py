"""`trainctl status ID`, `trainctl list`, `trainctl cancel ID` and `trainctl watch`: reading the ledger,
following events, and stopping a job."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from functions.cloud.gcs import Conflict, Gcs
from functions.ledger.keys import request_key
from functions.ledger.record import Record
from functions.ledger.requests import Ledger
from schemas.events import CostEstimate, JobEvent, cost_summary
from schemas.secrets import redact_env
from trainctl.context import cli_namespace, cli_settings, events_subscription
from trainctl.eventstream import (
    EXIT_CANNOT_FOLLOW,
    HOW_TO_WATCH,
    CannotFollow,
    EventStream,
    format_event,
    rejected_delivery,
)
from trainctl.hints import trainctl_command
from trainctl.terminal import printable

EXIT_NOT_FOUND = 3


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("status", help="where a request stands: state, job, cost, artifacts")
    cmd.add_argument("request_id", metavar="ID")
    add_team_option(cmd)
    cmd.add_argument("--json", action="store_true")
    cmd.set_defaults(run=run_status)

    cmd = commands.add_parser("list", help="requests in flight (or every request with --all)")
    cmd.add_argument("--all", action="store_true", help="finished requests too")
    cmd.add_argument("--json", action="store_true")
    cmd.set_defaults(run=run_list)

    cmd = commands.add_parser("cancel", help="cancel a request's running job")
    cmd.add_argument("request_id", metavar="ID")
    add_team_option(cmd)
    cmd.set_defaults(run=run_cancel)

    cmd = commands.add_parser("watch", help="print lifecycle events as they are published")
    cmd.add_argument(
        "--request",
        metavar="ID",
        help="only this request's events (and rejections of other deliveries naming its id, shown as such)",
    )
    add_team_option(cmd)
    cmd.add_argument("--json", action="store_true", help="one JSON object per line")
    cmd.add_argument(
        "--subscription",
        metavar="NAME",
        default=events_subscription(),
        help="pull from your own subscription (Terraform's event_watchers makes it; default: "
        "$TRAINCTL_EVENTS_SUBSCRIPTION) instead of making one",
    )
    cmd.set_defaults(run=run_watch)


def add_team_option(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--team",
        metavar="NAME",
        help="with teams: the team whose request ID is (each team has its own ids; default: the team of "
        "$TRAINCTL_REQUESTS_TOPIC, the default team for the shared topic)",
    )


def _ledger() -> Ledger:
    settings = cli_settings()
    return Ledger(Gcs(settings.project), settings.control_bucket)


def _find(ledger: Ledger, request_id: str, team: str | None = None) -> Record | None:
    found = ledger.find_by_request_id(request_id, cli_namespace(cli_settings(), team))
    return found[0] if found else None


def find_record(request_id: str, team: str | None = None) -> Record | None:
    """The ledger record of a request, by its id (and the team whose id it is: `--team`, else this shell's)."""
    return _find(_ledger(), request_id, team)


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
        | _environment_summary(record)
    )


def _environment_summary(record: Record) -> dict[str, Any]:
    """Your own code's variables as the record holds them: secret-looking values redacted, secret_env by reference
    (issue 40, point 7). Redacted here again, so that a record written before redaction shows none either."""
    trainer = record.request.get("trainer") or {}
    shown = {}
    if trainer.get("env"):
        shown["env"] = redact_env(trainer["env"])
    if trainer.get("secret_env"):
        shown["secret_env"] = dict(trainer["secret_env"])
    return shown


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
    record = _find(_ledger(), args.request_id, args.team)
    if record is None:
        print(f"no request {args.request_id!r} in the ledger")
        return EXIT_NOT_FOUND
    info = summary(record)
    print(json.dumps(info, indent=2) if args.json else "\n".join(status_lines(info)))
    return 0


def trigger_in_words(trigger: dict[str, Any]) -> str:
    if trigger.get("kind") == "gcs":
        where = f"gs://{trigger.get('bucket')}/{trigger.get('object')}"
        return f"marker {where}" + (f" (generation {trigger['generation']})" if trigger.get("generation") else "")
    if trigger.get("kind") == "pubsub":
        topic = f" on {trigger['topic']}" if trigger.get("topic") else ""
        return f"Pub/Sub message {trigger.get('message_id')}{topic}"
    return "the command line"


def status_lines(info: dict[str, Any]) -> list[str]:
    """`trainctl status` for a person: `summary` (what --json prints) in words, one field a line, the
    structures (trigger, cost, artifacts, model steps) as sentences or indented lists."""
    cost, artifacts, model = info["cost"], info["artifacts"], info.get("model")
    rows: list[tuple[str, str | list[str] | None]] = [
        ("request", info["request_id"]),
        ("state", info["state"] + (f" (job {info['job_state']})" if info.get("job_state") else "")),
        ("attempt", str(info["attempt"])),
        ("job", info["job"]),
        ("failure", info["failure_reason"]),
        ("message", info["message"]),
        ("trigger", trigger_in_words(info["trigger"]) if info.get("trigger") else None),
        ("cost", f"{cost['gpus']} GPUs on {cost['nodes']} node{'s' if cost['nodes'] != 1 else ''}, "
         + cost_summary(CostEstimate.model_validate(cost))),
        ("artifacts", [f"{name:<12} {artifacts[key]}" for name, key in _ARTIFACTS if artifacts.get(key)]),
        ("rung", info.get("rung")),
        ("earlier rungs", info.get("rungs") or None),
        ("env", [f"{name}={value}" for name, value in (info.get("env") or {}).items()] or None),
        ("secret_env", [f"{name} from {ref}" for name, ref in (info.get("secret_env") or {}).items()] or None),
        ("model", None if model is None else f"{model['name']}: given champion version {model['champion_given'] or '-'}"
         f", registered as version {model['version'] or '-'}, decision {model['decision'] or '-'}"),
        ("created", info["created"][:19].replace("T", " ") + " UTC"),
        ("updated", info["updated"][:19].replace("T", " ") + " UTC"),
    ]  # fmt: skip
    width = max(len(label) for label, _ in rows)
    lines = []
    for label, value in rows:  # each value one line: a newline a requester or a job wrote is shown, never obeyed
        if isinstance(value, list):
            lines += [f"{label if i == 0 else '':<{width}}  {printable(item)}" for i, item in enumerate(value)]
        elif value:
            lines.append(f"{label:<{width}}  {printable(value)}")
    return lines


_ARTIFACTS = (("model", "model_dir"), ("metrics", "metrics_uri"), ("checkpoints", "checkpoint_dir"),
              ("TensorBoard", "tensorboard_dir"))  # fmt: skip


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
        request = printable(r.request_id)[:40]
        print(f"{request:<40} {r.state:<10} {r.attempt:>7}  {r.updated:%Y-%m-%d %H:%M:%S}  {printable(job)}")
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    from functions.cloud.vertex import VertexJobs

    ledger = _ledger()
    record = _find(ledger, args.request_id, args.team)
    if record is None:
        print(f"no request {args.request_id!r} in the ledger")
        return EXIT_NOT_FOUND
    if record.state == "queued":
        if cancel_queued(ledger, args.request_id, cli_namespace(cli_settings(), args.team)):
            print(f"{args.request_id} waits for GPU quota; reconcile ends it with a `cancelled` event at its next tick")
            return 0
        record = _find(ledger, args.request_id, args.team) or record  # it left the queue meanwhile: cancel its job
    if record.final or record.job_name is None:
        print(f"{args.request_id} is {record.state}; there is no job to cancel")
        return 1
    settings = cli_settings()
    VertexJobs(settings.project, settings.region, settings.vertex_endpoint).cancel(record.job_name)
    print(f"cancelling {record.job_name}; a `cancelled` event follows when it has stopped")
    return 0


def cancel_queued(ledger: Ledger, request_id: str, namespace: str | None = None) -> bool:
    """Ask for a request that waits in trainctl's quota queue (it has no job yet) to be cancelled: reconcile, which
    owns the record's state, ends it and publishes `cancelled`. A compare-and-swap, again if the record moved;
    False when it is no longer queued (it got its quota meanwhile)."""
    for _ in range(5):
        found = ledger.find_by_request_id(request_id, namespace)
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
    key = request_key(args.request, cli_namespace(settings, args.team)) if args.request else None
    with stream:
        print(f"watching {settings.events_topic} (Ctrl-C to stop)", flush=True)
        try:
            for event in stream.follow():
                if args.request and not about_request(event, args.request, key):
                    continue
                print(event.model_dump_json(exclude_none=True) if args.json else format_event(event), flush=True)
        except CannotFollow as exc:
            return _cannot_watch(settings.events_topic, str(exc))
        except KeyboardInterrupt:
            pass
    return 0


def about_request(event: JobEvent, request_id: str, key: str | None) -> bool:
    """What `watch --request ID` shows: the request's own events, by its key (a request id names a request within
    its team), and any rejection of another delivery naming the id, which format_event shows as such: not the end
    of the request."""
    if event.request_id != request_id:
        return False
    return event.request_key == key or rejected_delivery(event) is not None


def _cannot_watch(topic: str, refusal: str) -> int:
    print(f"cannot watch {topic}: {refusal}", file=sys.stderr)
    print(f"  - to watch it: {HOW_TO_WATCH}", file=sys.stderr)
    where = f"{trainctl_command()} status ID"
    print(f"  - where one request stands: {where} (reads the ledger in the control bucket)", file=sys.stderr)
    return EXIT_CANNOT_FOLLOW
