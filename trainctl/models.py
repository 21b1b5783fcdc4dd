"""`trainctl models list | show NAME | promote NAME VERSION | rollback NAME`: the models trainctl registers, from the
Model Registry (versions, aliases, metrics, lineage) and from each model's records in the control bucket (its
charter: owner, rule, reference set; who promoted what and why), and moving a model's alias by hand, with an event
whose trigger is the command line. `adopt` and `rule` (the charter's changes) are in trainctl/model_rules.py.

The command line cannot know who types it: it acts with the person's own credentials, so a move or a charter
change is made by whoever may write the control bucket's model records (the operator, by IAM)."""

from __future__ import annotations

import argparse
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from functions.cloud.gcs import Gcs, StorageError, TooLarge
from functions.cloud.publisher import EventPublisher
from functions.cloud.registry import ModelRegistry
from functions.cloud.registry_types import ModelVersion
from functions.data.contract import MAX_SCHEMA_BYTES, SCHEMA_FILE, parse_schema
from functions.ledger.model_charter import Charter
from functions.ledger.model_records import Entry, ModelCharters, ModelLedger
from functions.models.alias_moves import ModelNotFound, MoveRefused, alias_refusal, move_by_hand
from functions.models.decision import figure
from functions.models.versions import (
    BUILTIN_TRAINER,
    KEY_LABEL,
    LEGACY_TRAINER_LABEL,
    NOT_SERVABLE,
    SERVABLE_LABEL,
    TRAINER_LABEL,
    drift_of,
    evaluation_figures,
    evaluation_name,
)
from functions.settings import Settings
from functions.untrusted.job_outputs import Unreadable
from schemas.events import Lineage, Promoted, Trigger
from schemas.rules import split_gs_uri
from trainctl.context import cli_settings
from trainctl.eventstream import headline_metrics

EXIT_NOT_FOUND = 3
EXIT_REFUSED = 4
DEFAULT_ALIAS_NAME = "champion"
# A move recorded by a command or handler that died is finished by the next one after this long.
STALE_MOVE = timedelta(minutes=15)


def register(commands: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """`trainctl models` and its verbs here; the verbs that change a charter add themselves to what this returns
    (trainctl/model_rules.py)."""
    cmd = commands.add_parser(
        "models",
        help="the Model Registry models trainctl registers: list, show, promote, rollback, adopt, rule, deploy, "
        "undeploy",
    )
    verbs = cmd.add_subparsers(dest="verb", required=True, metavar="VERB")

    listing = verbs.add_parser("list", help="models in the registry, with the version each trainctl alias names")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(run=run_list)

    show = verbs.add_parser("show", help="a model's versions, aliases, metrics, lineage and decisions")
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=run_show)

    promote = verbs.add_parser("promote", help="move the alias (and `default`, as the model's rule says) to a version")
    promote.add_argument("name", metavar="NAME")
    promote.add_argument("version", metavar="VERSION")
    promote.add_argument("--alias", help="default: the model's own (its rule's), else champion")
    promote.set_defaults(run=run_move, action="promote")

    rollback = verbs.add_parser("rollback", help="move the alias back to the version it left")
    rollback.add_argument("name", metavar="NAME")
    rollback.add_argument("--alias", help="default: the model's own (its rule's), else champion")
    rollback.set_defaults(run=run_move, action="rollback", version=None)
    return verbs


@dataclass
class Models:
    settings: Settings
    registry: ModelRegistry
    ledger: ModelLedger
    gcs: Gcs  # each version's schema.json, beside its model
    charters: ModelCharters

    @classmethod
    def of_deployment(cls) -> Models:
        settings = cli_settings()
        registry = ModelRegistry(settings.project, settings.region, settings.vertex_endpoint)
        gcs = Gcs(settings.project)
        bucket = settings.control_bucket
        return cls(settings, registry, ModelLedger(gcs, bucket), gcs, ModelCharters(gcs, bucket))


def run_list(args: argparse.Namespace) -> int:
    models = Models.of_deployment()
    aliases: dict[str, dict[str, str | None]] = {}
    for model_id, alias in models.ledger.names():
        if alias_refusal(model_id, alias):
            continue  # the record of a move the registry refused, left by a trainctl from before it took those back
        aliases.setdefault(model_id, {})[alias] = models.ledger.read(model_id, alias)[0].champion
    rows: list[dict[str, Any]] = [
        {
            "model": m.model_id,
            "default_version": m.version_id,
            "aliases": aliases.get(m.model_id, {}),
            "managed_by_trainctl": m.labels.get("managed-by") == "trainctl",
            "created": m.created.isoformat() if m.created else None,
        }
        for m in models.registry.models()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no models in {models.registry.parent}")
        return 0
    print(f"{'MODEL':<40} {'DEFAULT':>7}  ALIASES")
    for row in rows:
        named = ", ".join(f"{alias}={version}" for alias, version in row["aliases"].items()) or "-"
        print(f"{row['model'][:40]:<40} {row['default_version']:>7}  {named}")
    return 0


def describe(models: Models, name: str) -> dict[str, Any] | None:
    """Everything `show` prints: None when the registry has no such model."""
    versions = list(models.registry.versions(name))
    if not versions:
        return None
    records = [models.ledger.read(name, alias)[0] for model_id, alias in models.ledger.names() if model_id == name]
    decisions = sorted((e for r in records for e in r.history), key=lambda e: e.time)
    charter, _ = models.charters.read(name)
    return {
        "model": models.registry.model_name(name),
        "charter": _charter(charter) if charter else None,
        "versions": [_version(models, v) for v in sorted(versions, key=lambda v: int(v.version_id or 0))],
        "aliases": {r.alias: {"version": r.champion, "held_before": r.champions[:-1][-5:]} for r in records},
        "decisions": [_decision(e) for e in decisions],
        "serving": _serving(models, charter),
    }


def _serving(models: Models, charter: Charter | None) -> dict[str, Any] | None:
    from trainctl.serving import describe_serving  # it builds on this module's Models

    return describe_serving(models, charter) if charter else None


def _charter(charter: Charter) -> dict[str, Any]:
    """Who owns the model and how its versions are judged (issue 38)."""
    return {
        "owner": charter.owner,
        "grants": charter.grants,
        "kind": charter.kind,
        "rule": charter.rule.model_dump(),
        "rule_in_words": charter.rule.describe(),
        "reference": charter.reference.model_dump(mode="json") if charter.reference else None,
        "changes": [c.model_dump(mode="json", exclude_none=True) for c in charter.changes[-10:]],
    }


def _version(models: Models, version: ModelVersion) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    drift: dict[str, Any] = {}
    for evaluation in models.registry.evaluations(version.name):
        if evaluation.get("displayName", "").startswith(evaluation_name("")) or not metrics:
            recorded = evaluation_figures(evaluation)
            metrics = {k: v for k, v in recorded.items() if figure({k: v}, k) is not None}
            drift = drift_of(recorded)
    lineage: dict[str, Any] | None
    try:
        lineage = Lineage.model_validate_json(version.description).model_dump(exclude_none=True)
    except ValueError:
        lineage = None  # a version trainctl did not register
    return {
        "version": version.version_id,
        "aliases": list(version.aliases),
        "created": version.created.isoformat() if version.created else None,
        "request": version.labels.get("trainctl_request") or version.labels.get("trainctl-request"),  # either spelling
        "trainctl_key": version.labels.get(KEY_LABEL) or version.labels.get("trainctl-key"),
        "artifact_uri": version.artifact_uri,
        "servable": servable_of(version.labels),
        "metrics": metrics,
        "lineage": lineage,
        "schema": _schema(models.gcs, version.artifact_uri),
        "drift": drift or None,
    }


def servable_of(labels: dict[str, str]) -> bool | None:
    """Whether a version can be deployed, from its labels: trainctl_servable; a built-in trainer's version registered
    before the label existed always could; None for another version from before it (trainctl cannot tell)."""
    recorded = labels.get(SERVABLE_LABEL)
    if recorded in ("true", "false"):
        return recorded == "true"
    kind = labels.get(TRAINER_LABEL) or labels.get(LEGACY_TRAINER_LABEL)
    if labels.get("managed-by") == "trainctl" and kind in (None, BUILTIN_TRAINER):
        return True
    return None


def _schema(gcs: Gcs, artifact_uri: str | None) -> dict[str, Any] | None:
    """The data a version was trained on, from the schema.json beside its model (issue 27): its summary in words
    and its columns, or why it cannot be shown; None for a version without one."""
    if not artifact_uri or not artifact_uri.startswith("gs://"):
        return None
    uri = artifact_uri.rstrip("/") + "/" + SCHEMA_FILE
    bucket, name = split_gs_uri(uri)
    try:
        found = gcs.read(bucket, name, max_bytes=MAX_SCHEMA_BYTES)
        if found is None:
            return None
        schema = parse_schema(found[0])
    except (TooLarge, Unreadable, StorageError) as exc:
        return {"uri": uri, "unreadable": str(exc)}
    columns = [{"name": c.name, "type": c.type, "role": c.role} for c in schema.columns]
    return {"uri": uri, "summary": schema.summary(), "columns": columns}


def drift_line(drift: dict[str, Any], shown: int = 3) -> str:
    """The version's drift against the champion it was measured on, in a line: the features that moved most."""
    figures = sorted((drift.get("drift") or {}).items(), key=lambda item: -item[1])
    measure = drift.get("drift_measure") or "drift"
    most = ", ".join(f"{name} {value:.3g}" for name, value in figures[:shown]) or "-"
    more = f" (+{len(figures) - shown} features)" if len(figures) > shown else ""
    return f"{measure}: {most}{more}"


def _decision(entry: Entry) -> dict[str, Any]:
    return {
        "time": entry.time.isoformat(),
        "action": entry.action,
        "by": "trainctl models (cli)" if entry.trigger == "cli" else f"controller, request {entry.request_id}",
        "version": entry.version,
        "previous": entry.previous,
        "why": entry.message,
        "figures": entry.decision.model_dump(mode="json") if entry.decision else None,
    }


def run_show(args: argparse.Namespace) -> int:
    models = Models.of_deployment()
    found = describe(models, args.name)
    if found is None:
        print(f"model {args.name} has no versions in {models.registry.parent}")
        return EXIT_NOT_FOUND
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print(f"model {found['model']}")
    charter = found["charter"]
    if charter:
        grants = f" (and {', '.join(charter['grants'])})" if charter["grants"] else ""
        reference = charter["reference"]["source"] if charter["reference"] else "none yet"
        print(f"  owner: team {charter['owner']}{grants}; fed by {charter['kind']}")
        print(f"  rule: {charter['rule_in_words']}")
        print(f"  reference set: {reference}")
    else:
        print(f"  no charter: registered before models had owners (`trainctl models adopt {args.name} --team T`)")
    for alias, held in found["aliases"].items():
        earlier = ", ".join(held["held_before"]) or "none"
        print(f"  {alias} -> version {held['version']} (earlier: {earlier})")
    if found["serving"]:
        from trainctl.serving import print_serving

        print_serving(found["serving"])
    print(f"\n{'VERSION':>7}  {'ALIASES':<20} {'CREATED':<19}  {'REQUEST':<32} METRICS")
    for v in found["versions"]:
        shown = headline_metrics(v["metrics"], limit=1) or "-"
        created = (v["created"] or "-")[:19]
        aliases = ",".join(v["aliases"]) or "-"
        request = (v["lineage"] or {}).get("request_id") or v["request"] or "-"
        request = request if len(request) <= 32 else "…" + request[-31:]  # ids share their beginnings
        print(f"{v['version']:>7}  {aliases:<20} {created:<19}  {request:<32} {shown}")
        if v["lineage"]:
            lineage = v["lineage"]
            print(f"{'':>9}data {lineage['dataset_uri']}; job {lineage.get('job', '-')}; image {lineage['image']}")
        if v["servable"] is False:
            print(f"{'':>9}{NOT_SERVABLE}")
        elif v["servable"] is None and v["lineage"]:
            print(f"{'':>9}deployable: unknown (registered before trainctl recorded it: trainctl_servable)")
        if v["schema"]:
            schema = v["schema"]
            print(f"{'':>9}schema {schema.get('summary') or 'cannot be read: ' + schema['unreadable']}")
        if v["drift"]:
            print(f"{'':>9}drift against the champion, {drift_line(v['drift'])}")
    if found["decisions"]:
        print("\ndecisions:")
        for d in found["decisions"]:
            print(f"  {d['time'][:19]}  {d['action']:<9} version {d['version']} by {d['by']}: {d['why']}")
    return 0


def run_move(args: argparse.Namespace) -> int:
    models = Models.of_deployment()
    owner = f"cli:{uuid.uuid4().hex[:12]}"
    charter, _ = models.charters.read(args.name)
    alias = args.alias or (charter.rule.alias if charter else DEFAULT_ALIAS_NAME)
    if refusal := alias_refusal(args.name, alias):
        print(refusal)
        return EXIT_REFUSED
    aliases = charter.rule.aliases() if charter and alias == charter.rule.alias else None
    try:
        entry = move_by_hand(
            models.registry,
            models.ledger,
            args.name,
            alias,
            args.action,
            args.version,
            owner,
            lambda: datetime.now(UTC),
            STALE_MOVE,
            aliases,
        )
    except MoveRefused as exc:
        print(str(exc))
        return EXIT_NOT_FOUND if isinstance(exc, ModelNotFound) else EXIT_REFUSED
    print(f"model {args.name}: {entry.message}")
    try:
        team = charter.owner if charter else None
        publish_move(models.settings, models.registry.model_name(args.name), args.name, alias, entry, owner, team)
    except Exception as exc:  # the move is made and recorded; only its announcement is missing
        print(f"the move is made, but its event could not be published: {exc}")
        return 1
    return 0


def publish_move(
    settings: Settings, resource: str, model_id: str, alias: str, entry: Entry, owner: str, team: str | None = None
) -> None:
    """The `promoted` event of a move made by hand: trigger `cli`, about the request that registered the version when
    the controller knows it (so `trainctl watch --request` shows it), else about the model; `team`: the model's owner,
    whose events subscription receives it."""
    source = f"//trainctl/projects/{settings.project}/locations/{settings.region}"
    event = Promoted(
        request_id=entry.request_id or model_id,
        request_key=f"model:{model_id}",
        time=entry.time,
        message=entry.message,
        trigger=Trigger(kind="cli"),
        delivery=owner,
        model=model_id,
        model_resource=resource,
        version=entry.version,
        alias=alias,
        previous_version=entry.previous,
        team=team,
    )
    EventPublisher(settings.project, settings.events_topic, source, region=settings.region).publish(event)
