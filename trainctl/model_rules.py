"""`trainctl models adopt NAME --team T` and `trainctl models rule NAME …`: the operator's word on a model's charter
(issue 38) — who owns a model registered before charters existed, and a change of a model's rule, reference set or
owner — each recorded in the charter's history and announced with a `rule_changed` event.

What the command line can know: not who is typing. It writes the charter in the control bucket with the person's
own credentials, so whoever may write `model-charters/` there (the operator, by IAM) may use it; each change is
recorded as the operator's. Requests never change a charter: they are judged by it.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.cloud.publisher import EventPublisher
from functions.ledger.model_charter import Change, Charter, Rule
from functions.models.artifacts import NothingToCopy, copy_reference, reference_from_version
from functions.models.versions import BUILTIN_TRAINER, kind_of_version
from functions.teams import NO_TEAMS
from schemas.events import RuleChanged, Trigger
from schemas.request import BUILTIN_METRIC_GOALS, ModelBlock
from trainctl.models import EXIT_NOT_FOUND, EXIT_REFUSED, Models

OPERATOR = "operator"
# What `rule` may change; the alias is fixed (the model's history of champions is kept under it).
RULE_OPTIONS = ("metric", "goal", "min_improvement", "moves_default", "confidence", "min_champion_skill",
                "max_target_drift")  # fmt: skip


def register(verbs: argparse._SubParsersAction) -> None:
    adopt = verbs.add_parser(
        "adopt", help="give a model registered before charters existed an owner and a rule (operator)"
    )
    adopt.add_argument("name", metavar="NAME")
    adopt.add_argument("--team", required=True, help="the team that owns it (without teams: default)")
    _rule_options(adopt)
    adopt.add_argument("--alias", default="champion", help="the alias promotion moves (default: champion)")
    adopt.set_defaults(run=run_adopt)

    rule = verbs.add_parser("rule", help="change a model's rule, reference set or owner (operator)")
    rule.add_argument("name", metavar="NAME")
    _rule_options(rule)
    rule.add_argument("--owner", help="the team that owns it from now on")
    rule.add_argument("--grant", action="append", default=[], metavar="TEAM", help="let TEAM's requests add versions")
    rule.add_argument("--revoke", action="append", default=[], metavar="TEAM", help="take a grant back")
    rule.set_defaults(run=run_rule)


def _rule_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--metric")
    parser.add_argument("--goal", choices=["maximize", "minimize"])
    parser.add_argument("--min-improvement", type=float)
    parser.add_argument("--confidence", type=float)
    parser.add_argument("--min-champion-skill", type=float)
    parser.add_argument("--max-target-drift", help="a PSI figure, or `none` (reported only)")
    default = parser.add_mutually_exclusive_group()
    default.add_argument("--moves-default", dest="moves_default", action="store_true", default=None)
    default.add_argument("--keeps-default", dest="moves_default", action="store_false")
    reference = parser.add_mutually_exclusive_group()
    reference.add_argument("--reference", metavar="URI", help="gs:// folder or file of reference rows (copied)")
    reference.add_argument("--reference-from-version", metavar="VERSION", help="that version's validation rows")


def _rule_changes(args: argparse.Namespace, rule: Rule, kind: str) -> Rule:
    """The rule with the options given, checked by the request schema's own rules (ValueError naming the option)."""
    given: dict[str, Any] = {name: getattr(args, name) for name in RULE_OPTIONS if getattr(args, name) is not None}
    if isinstance(given.get("max_target_drift"), str):
        text = given["max_target_drift"]
        given["max_target_drift"] = None if text == "none" else float(text)
    changed = rule.model_copy(update=given)
    if changed.metric and changed.goal is None:
        changed = changed.model_copy(update={"goal": BUILTIN_METRIC_GOALS.get(changed.metric)})
    if kind == BUILTIN_TRAINER and changed.metric is not None and changed.metric not in BUILTIN_METRIC_GOALS:
        raise ValueError(f"the built-in trainer's models decide only on {', '.join(BUILTIN_METRIC_GOALS)}")
    if changed.metric is not None and changed.goal is None:
        raise ValueError(f"--goal: {changed.metric} needs one (maximize or minimize)")
    block = {k: v for k, v in changed.model_dump().items() if v is not None}
    ModelBlock.model_validate({"name": "check", **block})  # the same limits as a request's
    return changed


def run_adopt(args: argparse.Namespace) -> int:
    models = Models.of_deployment()
    charters = models.charters
    existing, _ = charters.read(args.name)
    if existing is not None:
        print(f"model {args.name} already belongs to team {existing.owner}; `trainctl models rule` changes it")
        return EXIT_REFUSED
    default = models.registry.get(models.registry.model_name(args.name))
    if default is None:
        print(f"model {args.name} has no versions in {models.registry.parent}; its first request creates it")
        return EXIT_NOT_FOUND
    if not _known_team(models, args.team):
        return EXIT_REFUSED
    now = datetime.now(UTC)
    base = Rule(alias=args.alias, moves_default=True, min_improvement=0.0, confidence=0.95, min_champion_skill=-0.1)
    try:
        rule = _rule_changes(args, base, kind_of_version(default.labels))
    except ValueError as exc:
        print(f"model {args.name}: {exc}")
        return EXIT_REFUSED
    charter = Charter(
        model_id=args.name,
        owner=args.team,
        kind=kind_of_version(default.labels),
        rule=rule,
        reference_from_first_version=False,
        created=now,
        created_by=OPERATOR,
    )
    return _save(models, args, charter, 0, "adopted", [f"owner: none -> {args.team}"])


def run_rule(args: argparse.Namespace) -> int:
    models = Models.of_deployment()
    charter, generation = models.charters.read(args.name)
    if charter is None:
        print(f"model {args.name} has no charter: `trainctl models adopt {args.name} --team TEAM` gives it one")
        return EXIT_NOT_FOUND
    updated = charter.model_copy(deep=True)
    try:
        updated.rule = _rule_changes(args, charter.rule, charter.kind)
    except ValueError as exc:
        print(f"model {args.name}: {exc}")
        return EXIT_REFUSED
    for team in [args.owner, *args.grant]:
        if team and not _known_team(models, team):
            return EXIT_REFUSED
    updated.owner = args.owner or charter.owner
    updated.grants = sorted((set(charter.grants) | set(args.grant)) - set(args.revoke) - {updated.owner})
    changes = _differences(charter, updated)
    action = "owner" if args.owner or args.grant or args.revoke else "rule"
    if not changes and not (args.reference or args.reference_from_version):
        print(f"model {args.name}: nothing to change; its rule is {charter.rule.describe()}")
        return 0
    return _save(models, args, updated, generation, action, changes)


def _save(
    models: Models, args: argparse.Namespace, charter: Charter, generation: int, action: str, changes: list[str]
) -> int:
    now = datetime.now(UTC)
    try:
        charter = _with_reference(models, args, charter, now)
    except (NothingToCopy, LookupError) as exc:
        print(f"model {args.name}: model.reference: {exc}")
        return EXIT_REFUSED
    if charter.reference and (args.reference or args.reference_from_version):
        changes.append(f"reference: -> {charter.reference.source}")
        action = "reference" if action == "rule" else action
    message = "; ".join(changes)
    charter.record(Change(time=now, by=OPERATOR, action=action, message=message))
    try:
        models.charters.write(charter, generation)
    except Conflict:
        print(f"model {args.name}: its charter changed meanwhile; nothing was written, try again")
        return EXIT_REFUSED
    print(f"model {args.name} ({action}): {message or 'recorded'}; rule: {charter.rule.describe()}")
    try:
        publish_rule_change(models, charter, action, changes, now)
    except Exception as exc:  # the change is made and recorded; only its announcement is missing
        print(f"the change is made, but its event could not be published: {exc}")
        return 1
    return 0


def _with_reference(models: Models, args: argparse.Namespace, charter: Charter, now: datetime) -> Charter:
    if args.reference:
        try:
            reference = copy_reference(
                models.gcs, models.charters, args.name, args.reference, f"{OPERATOR}@{now.isoformat()}", now,
                models.settings,
            )  # fmt: skip
        except Transient as exc:
            raise NothingToCopy(str(exc)) from None
        return charter.model_copy(update={"reference": reference, "reference_from_first_version": False})
    if args.reference_from_version:
        version = models.registry.get(f"{models.registry.model_name(args.name)}@{args.reference_from_version}")
        if version is None or not version.artifact_uri:
            raise LookupError(f"model {args.name} has no version {args.reference_from_version}")
        found = reference_from_version(
            models.gcs, models.charters, charter, version.artifact_uri, version.version_id, now
        )
        if found.reference is None or found.reference == charter.reference:
            raise LookupError(f"version {version.version_id} holds no reference.parquet beside its model")
        found.changes = charter.changes  # recorded once, by the caller
        return found
    return charter


def _differences(before: Charter, after: Charter) -> list[str]:
    lines = []
    for name, value in after.rule.model_dump().items():
        if getattr(before.rule, name) != value:
            lines.append(f"{name}: {getattr(before.rule, name)} -> {value}")
    if before.owner != after.owner:
        lines.append(f"owner: {before.owner} -> {after.owner}")
    if before.grants != after.grants:
        lines.append(f"grants: {', '.join(before.grants) or 'none'} -> {', '.join(after.grants) or 'none'}")
    return lines


def _known_team(models: Models, team: str) -> bool:
    teams = models.settings.teams
    known = list(teams.teams) if teams else [NO_TEAMS]
    if team not in known:
        print(f"team {team} is not one of the deployment's teams ({', '.join(known)})")
        return False
    return True


def publish_rule_change(models: Models, charter: Charter, action: str, changes: list[str], now: datetime) -> None:
    settings = models.settings
    source = f"//trainctl/projects/{settings.project}/locations/{settings.region}"
    event = RuleChanged(
        request_id=charter.model_id,
        request_key=f"model:{charter.model_id}",
        time=now,
        message=f"model {charter.model_id}: {action} by the operator: {'; '.join(changes) or 'recorded'}",
        trigger=Trigger(kind="cli"),
        delivery=f"charter-{len(charter.changes)}",
        model=charter.model_id,
        model_resource=models.registry.model_name(charter.model_id),
        action=action,
        owner=charter.owner,
        team=charter.owner,
        rule=charter.rule.describe(),
        reference=charter.reference.source if charter.reference else None,
        changes=changes,
    )
    EventPublisher(settings.project, settings.events_topic, source, region=settings.region).publish(event)
