"""`trainctl replay EVENT.json [--dry-run]`: feed a recorded event through the controller and print every
decision it makes.

EVENT.json is a CloudEvent in structured JSON (what `on_dataset_upload`, `on_job_request` or `on_job_state`
received) or a Pub/Sub push body. Without --dry-run the event is handled for real, against the deployment
the environment names. With --dry-run nothing leaves this process: the ledger starts empty in memory, events
and CustomJobs are printed instead of published and created.

Several recorded events (a folder of them, a JSON array or JSON Lines: a day of markers) are replayed with --dry-run
only, in time order on a clock that follows them, and what the trigger rules' policies would have started is
summed up (trainctl/policy_replay.py); `--rules` tries other trigger rules than the deployment's.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cloudevents.http import CloudEvent

from functions import handlers, logs
from functions.cloud.gcs import ObjectDigest
from functions.cloud.job_snapshot import JobSnapshot
from functions.cloud.registry_types import ModelVersion, Upload
from functions.controller import Controller
from functions.jobs.secret_env import shown_custom_job
from functions.untrusted.documents import load_document
from local.memory_gcs import MemoryGcs
from schemas.request import package_digest
from trainctl.context import cli_settings
from trainctl.policy_replay import load_documents, replay_day
from trainctl.problems import Problem

STORAGE_TYPE = "google.cloud.storage.object.v1.finalized"
PUBSUB_TYPE = "google.cloud.pubsub.topic.v1.messagePublished"


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("replay", help="feed a recorded event through the controller, printing each decision")
    cmd.add_argument("event", type=Path, metavar="EVENT.json", help="one event, or many: a folder, array or JSON Lines")
    cmd.add_argument("--dry-run", action="store_true", help="change nothing: in-memory ledger, print instead of act")
    cmd.add_argument(
        "--rules", type=Path, metavar="RULES.json", help="trigger rules to replay under (default: the deployment's)"
    )
    cmd.add_argument("--verbose", action="store_true", help="several events: every decision's log lines too")
    cmd.add_argument(
        "--as", dest="entry_point", choices=("upload", "request", "state"), help="default: from the event's type"
    )
    cmd.add_argument("--json", action="store_true", help="decisions as JSON log lines, as the functions log them")
    cmd.set_defaults(run=run_replay)


def load_cloud_event(path: Path) -> CloudEvent:
    return cloud_event_of(json.loads(path.read_text()))


def cloud_event_of(document: dict[str, Any]) -> CloudEvent:
    if "message" in document and "specversion" not in document:  # a Pub/Sub push body
        message = document["message"]
        attributes = {
            "specversion": "1.0",
            "type": PUBSUB_TYPE,
            "source": "//pubsub.googleapis.com/" + document.get("subscription", "replay"),
            "id": str(message.get("messageId") or message.get("message_id") or "replay"),
            "time": message.get("publishTime") or datetime.now(UTC).isoformat(),
        }
        return CloudEvent(attributes, {"message": message})
    data = document.pop("data", None)
    return CloudEvent(document, data)


def entry_point(event: CloudEvent) -> str:
    if event["type"] == STORAGE_TYPE:
        return "upload"
    message = (event.data or {}).get("message", {})
    try:
        decoded = json.loads(base64.b64decode(message.get("data", "")))
    except ValueError:
        return "request"
    return "state" if isinstance(decoded, dict) and "resource" in decoded else "request"


class DryRunGcs(MemoryGcs):
    """The dry run's Cloud Storage: its ledger starts empty in memory and is thrown away; every write is printed,
    and the user's own objects, which it cannot see, are assumed to be what the request says."""

    def digest(self, bucket: str, name: str, max_bytes: int) -> ObjectDigest | None:
        """An object of the dry run's own, hashed; the dry run cannot see the user's packages: one is assumed to be
        what its name says, and the run says so."""
        found = super().digest(bucket, name, max_bytes)
        if found is not None:
            return found
        logs.info("dry run: the package is not read; assumed to be what its name says", package=f"gs://{bucket}/{name}")
        return ObjectDigest(package_digest(f"gs://{bucket}/{name}") or "", 0, 0, None, None)

    def write(
        self,
        bucket: str,
        name: str,
        data: bytes | str,
        if_generation_match: int,
        custom_metadata: dict[str, str] | None = None,
    ) -> int:
        generation = super().write(bucket, name, data, if_generation_match, custom_metadata)
        logs.info("dry run: would write", object=f"gs://{bucket}/{name}", generation=generation)
        return generation

    def objects_under(self, bucket: str, prefix: str) -> Iterator[tuple[str, int]]:
        """What the dry run wrote under `prefix`; elsewhere it cannot see the user's data: the dataset preflight is
        skipped, and says so."""
        written = list(super().objects_under(bucket, prefix))
        if written:
            yield from written
            return
        logs.info("dry run: the dataset is not checked; assumed to hold data", dataset=f"gs://{bucket}/{prefix}")
        yield f"{prefix}assumed-data", 1


class PrintingPublisher:
    source = "dry-run"

    def publish(self, event: Any) -> str:
        logs.info(f"dry run: would publish {event.ce_type}", ce_id=event.ce_id, event=event.model_dump(mode="json"))
        return "dry-run"


class PrintingVertex:
    parent = "projects/dry-run/locations/dry-run"

    def find_or_create(
        self, custom_job: dict[str, Any], region: str | None = None, legacy: bool = True
    ) -> tuple[JobSnapshot, bool]:
        logs.info("dry run: would create CustomJob", custom_job=shown_custom_job(custom_job))
        return JobSnapshot(f"{self.parent}/customJobs/dry-run", "JOB_STATE_QUEUED"), False

    def active_jobs(
        self, region: str, deployment: str, since: datetime | None = None, before: datetime | None = None
    ) -> dict[str, JobSnapshot]:
        return {}

    def get(self, name: str) -> None:
        return None

    def cancel(self, name: str) -> None:
        logs.info("dry run: would cancel", job=name)


class PrintingRegistry:
    """The dry run's Model Registry: empty (no model has a champion), and every change printed instead of made."""

    parent = "projects/dry-run/locations/dry-run"

    def model_name(self, model_id: str) -> str:
        return f"{self.parent}/models/{model_id}"

    def get(self, name: str) -> None:
        return None

    def find_version(self, model_id: str, label: str, value: str) -> None:
        return None

    def upload(self, body: dict[str, Any]) -> Upload:
        logs.info("dry run: would upload a model version", body=body)
        return Upload(operation=f"{self.parent}/operations/dry-run", done=False)

    def operation(self, name: str) -> None:
        return None

    def merge_aliases(self, version_name: str, aliases: list[str]) -> Any:
        logs.info("dry run: would move aliases", version=version_name, aliases=aliases)
        return ModelVersion(model=version_name.split("@", 1)[0], version_id=version_name.rsplit("@", 1)[-1])

    def evaluations(self, version_name: str) -> list[dict[str, Any]]:
        return []

    def import_evaluation(self, version_name: str, evaluation: dict[str, Any]) -> dict[str, Any]:
        logs.info("dry run: would import an evaluation", version=version_name, evaluation=evaluation)
        return evaluation


# A recording may be old: replay it whatever max_event_age says.
NO_AGE_LIMIT = 100 * 365 * 86400
# A trigger-rules file: the operator's own, bounded as TRAINCTL_TRIGGER_RULES' environment variable would be.
MAX_RULES_BYTES = 1024 * 1024


def dry_run_controller(rules: dict[str, Any] | None = None, clock: Callable[[], datetime] | None = None) -> Controller:
    settings = dataclasses.replace(cli_settings(offline=True), max_event_age=NO_AGE_LIMIT)
    if rules is not None:
        settings = dataclasses.replace(settings, trigger_rules=rules)
    gcs = DryRunGcs()
    ctl = Controller.from_settings(
        settings,
        gcs=gcs,
        publisher=PrintingPublisher(),
        vertex_factory=PrintingVertex,
        registry_factory=PrintingRegistry,
    )
    return dataclasses.replace(ctl, clock=clock) if clock else ctl


def load_rules(path: Path) -> dict[str, Any]:
    """Trigger rules as TRAINCTL_TRIGGER_RULES holds them: gs:// prefixes mapped to templates (YAML or JSON)."""
    rules = load_document(path.read_bytes(), MAX_RULES_BYTES)
    if not isinstance(rules, dict):
        raise Problem(f"{path}: trigger rules must be a mapping of gs:// prefixes to request templates")
    return rules


def run_replay(args: argparse.Namespace) -> int:
    documents = load_documents(args.event)
    rules = load_rules(args.rules) if args.rules else None
    if len(documents) != 1 or args.event.is_dir():
        return replay_many(args, [cloud_event_of(d) for d in documents], rules)
    event = cloud_event_of(documents[0])
    target = args.entry_point or entry_point(event)
    with logs.text_format(not args.json):
        if args.dry_run:
            ctl = dry_run_controller(rules)
        else:
            # The deployment the environment names, or the running local stack, as every other command reaches it.
            ctl = Controller.from_settings(dataclasses.replace(cli_settings(), max_event_age=NO_AGE_LIMIT))
        logs.info(f"replaying {event['type']} {event['id']} into {target}", dry_run=args.dry_run)
        handle = {"upload": handlers.dataset_upload, "request": handlers.job_request, "state": handlers.job_state}
        outcome = handle[target](event, ctl)
        logs.info(f"outcome: {outcome}")
    return 0


def replay_many(args: argparse.Namespace, events: list[CloudEvent], rules: dict[str, Any] | None) -> int:
    """Several recorded events, in time order on a clock that follows them: what the policies would have started."""
    if not args.dry_run:
        raise Problem("replaying several events needs --dry-run: it shows what they would start, changing nothing")
    now = [datetime.now(UTC)]
    handle = {"upload": handlers.dataset_upload, "request": handlers.job_request, "state": handlers.job_state}
    with logs.text_format(not args.json):
        ctl = dry_run_controller(rules, lambda: now[0])
        report = replay_day(
            events, ctl, now, lambda e, c: handle[args.entry_point or entry_point(e)](e, c), args.verbose
        )
    rules_used = ctl.settings.trigger_rules
    print(f"replayed {len(events)} events under {len(rules_used)} trigger rule{'s' * (len(rules_used) != 1)} (dry run)")
    for line in report.lines:
        print(line)
    print(report.summary())
    return 0
