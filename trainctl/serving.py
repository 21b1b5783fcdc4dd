"""The champion in use (issue 41), for people: `trainctl models deploy NAME --endpoint E …` sets where a model's
promoted versions serve and how they roll out (its charter's deploy block, the operator's word like `models rule`)
and, when nothing serves there yet, deploys the champion now with all the traffic; `trainctl models undeploy NAME`
takes the model off its endpoint; `trainctl predict NAME FILE|-` asks the endpoint for predictions; and
`trainctl models show` lists the endpoint's traffic split and rollouts (`describe_serving`).

Every later version reaches traffic only through the controller's rollout (functions/models/rollout.py): canary,
bake, then all of the traffic or a rollback. This module never splits traffic itself.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from datetime import UTC, datetime
from typing import Any

from functions.cloud import deadline
from functions.cloud.endpoint_types import EndpointState
from functions.cloud.endpoints import ENDPOINT_LABEL, NEW_DEPLOYED_MODEL, Endpoints, numeric_id
from functions.cloud.gcs import Conflict
from functions.cloud.vertex import CallRejected
from functions.ledger.endpoint_records import EndpointLedger, EndpointRecord, Served
from functions.ledger.model_charter import Change, Charter
from schemas.request import DeployBlock
from trainctl.model_rules import OPERATOR, publish_rule_change
from trainctl.models import EXIT_NOT_FOUND, EXIT_REFUSED, Models

DEPLOY_OPTIONS = ("endpoint", "machine_type", "accelerator_type", "accelerator_count", "min_replicas", "max_replicas",
                  "canary_percent", "bake", "max_error_rate", "max_p99_ms", "min_requests")  # fmt: skip
# How long `models deploy` waits for the first version to answer (a real deployment takes minutes).
DEPLOY_WAIT_SECONDS = 1800.0
MAX_INSTANCES = 10_000


def register(verbs: argparse._SubParsersAction) -> None:
    deploy = verbs.add_parser("deploy", help="serve a model's champion on an endpoint; later versions roll out there")
    deploy.add_argument("name", metavar="NAME")
    deploy.add_argument("--endpoint", help="the endpoint's name (created on first use); default: the model's own")
    deploy.add_argument("--machine-type")
    deploy.add_argument("--accelerator-type")
    deploy.add_argument("--accelerator-count", type=int)
    deploy.add_argument("--min-replicas", type=int)
    deploy.add_argument("--max-replicas", type=int)
    deploy.add_argument("--canary-percent", type=int, help="a new version's share while it bakes (default 10)")
    deploy.add_argument("--bake", help="how long a new version bakes before it is judged (default 15m)")
    deploy.add_argument("--max-error-rate", type=float, help="errors per request a canary may show (default 0.01)")
    deploy.add_argument("--max-p99-ms", type=float, help="the canary's p99 latency limit (default: none)")
    deploy.add_argument("--min-requests", type=int, help="requests a canary must answer to be judged (default 0)")
    deploy.set_defaults(run=run_deploy)
    undeploy = verbs.add_parser("undeploy", help="take a model off its endpoint; its versions no longer roll out")
    undeploy.add_argument("name", metavar="NAME")
    undeploy.set_defaults(run=run_undeploy)


def register_predict(commands: argparse._SubParsersAction) -> None:
    predict = commands.add_parser("predict", help="online predictions from a model's endpoint")
    predict.add_argument("name", metavar="NAME", help="the model (its deploy block names the endpoint)")
    predict.add_argument("file", metavar="FILE|-", help='rows: CSV with a header, JSON lines, or {"instances": [...]}')
    predict.set_defaults(run=run_predict)


def endpoints_of(models: Models) -> tuple[Endpoints, EndpointLedger]:
    settings = models.settings
    return Endpoints(settings.project, settings.region, settings.vertex_endpoint), EndpointLedger(
        models.gcs, settings.control_bucket
    )


def endpoint_id(models: Models, name: str) -> str:
    return numeric_id(models.settings.control_bucket, name)  # as the controller's Rollouts.endpoint_id


# ---- models deploy / undeploy ---------------------------------------------------------------------------------


def run_deploy(args: argparse.Namespace) -> int:
    models = Models.of_deployment()
    charter, generation = models.charters.read(args.name)
    if charter is None:
        print(f"model {args.name} has no charter: `trainctl models adopt {args.name} --team TEAM` gives it one")
        return EXIT_NOT_FOUND
    given = {name: getattr(args, name) for name in DEPLOY_OPTIONS if getattr(args, name) is not None}
    if charter.deploy is None and "endpoint" not in given:
        print(f"model {args.name} is not served yet: name its endpoint with --endpoint NAME")
        return EXIT_REFUSED
    try:
        deploy = DeployBlock.model_validate((charter.deploy.model_dump() if charter.deploy else {}) | given)
    except ValueError as exc:
        print(f"model {args.name}: {exc}")
        return EXIT_REFUSED
    if charter.deploy is not None and deploy.endpoint != charter.deploy.endpoint:
        _, ledger = endpoints_of(models)
        old = ledger.read(charter.deploy.endpoint, endpoint_id(models, charter.deploy.endpoint))[0]
        if old.rollout is not None and old.rollout.model_id == charter.model_id:
            print(f"version {old.rollout.version} of {charter.model_id} is rolling out on {old.name} "
                  f"({old.rollout.phase}); change the endpoint once it ends")  # fmt: skip
            return EXIT_REFUSED
    if deploy != charter.deploy:
        if not _save_deploy(models, charter, generation, deploy):
            return EXIT_REFUSED
        charter = charter.model_copy(update={"deploy": deploy})
    return _serve_champion(models, charter, deploy)


def _save_deploy(models: Models, charter: Charter, generation: int, deploy: DeployBlock | None) -> bool:
    now = datetime.now(UTC)
    before = charter.deploy.model_dump(mode="json") if charter.deploy else None
    after = deploy.model_dump(mode="json") if deploy else None
    changes = [f"deploy: {json.dumps(before)} -> {json.dumps(after)}"]
    updated = charter.model_copy(update={"deploy": deploy}, deep=True)
    updated.record(Change(time=now, by=OPERATOR, action="deploy", changes={"deploy": [before, after]},
                          message=changes[0]))  # fmt: skip
    try:
        models.charters.write(updated, generation)
    except Conflict:
        print(f"model {charter.model_id}: its charter changed meanwhile; nothing was written, try again")
        return False
    print(f"model {charter.model_id}: " + (f"serves on endpoint {deploy.endpoint}" if deploy else "not served"))
    try:
        publish_rule_change(models, updated, "deploy", changes, now)
    except Exception as exc:  # the change is made and recorded; only its announcement is missing
        print(f"the change is made, but its event could not be published: {exc}")
    return True


def _serve_champion(models: Models, charter: Charter, deploy: DeployBlock) -> int:
    """Deploy the champion with all the traffic when nothing serves on the endpoint; else say what serves."""
    api, ledger = endpoints_of(models)
    record, record_generation = ledger.read(deploy.endpoint, endpoint_id(models, deploy.endpoint))
    champion = models.registry.get(f"{models.registry.model_name(charter.model_id)}@{charter.rule.alias}")
    if record.rollout is not None:
        print(f"endpoint {deploy.endpoint}: version {record.rollout.version} of {record.rollout.model_id} is rolling "
              f"out ({record.rollout.phase}); later versions of {charter.model_id} roll out after it")  # fmt: skip
        return 0
    if record.serving is not None:
        print(f"endpoint {deploy.endpoint} serves version {record.serving.version} of {record.serving.model_id}; "
              f"the next promotion of {charter.model_id} rolls out there (canary {deploy.canary_percent} %, bake "
              f"{deploy.bake} s)")  # fmt: skip
        return 0
    if champion is None:
        print(f"model {charter.model_id} has no `{charter.rule.alias}` yet: its first promotion deploys it")
        return 0
    name = api.endpoint_name(record.endpoint_id)
    if api.get(name) is None:
        api.create(record.endpoint_id, deploy.endpoint, {ENDPOINT_LABEL: deploy.endpoint})
    deployed_id = numeric_id(record.endpoint_id, charter.model_id, champion.version_id, "cli")
    body = {
        "id": deployed_id,
        "model": f"{models.registry.model_name(charter.model_id)}@{champion.version_id}",
        "displayName": f"{charter.model_id}-v{champion.version_id}",
        "dedicatedResources": {
            "machineSpec": {"machineType": deploy.machine_type}
            | ({"acceleratorType": deploy.accelerator_type, "acceleratorCount": deploy.accelerator_count}
               if deploy.accelerator_type else {}),
            "minReplicaCount": deploy.min_replicas,
            "maxReplicaCount": deploy.max_replicas,
        },
    }  # fmt: skip
    print(f"deploying version {champion.version_id} of {charter.model_id} to endpoint {deploy.endpoint} …")
    try:
        api.deploy(name, body, {NEW_DEPLOYED_MODEL: 100})
        state = deadline.poll(lambda: api.get(name), lambda s: _serves(s, deployed_id), DEPLOY_WAIT_SECONDS)
    except CallRejected as exc:
        print(f"Vertex refused the deployment ({exc.reason}): {exc.message}")
        return EXIT_REFUSED
    if not _serves(state, deployed_id):
        print(f"endpoint {deploy.endpoint} does not serve it yet; `trainctl models show {charter.model_id}` tells")
        return 1
    record.serving = Served(model_id=charter.model_id, version=champion.version_id, deployed_model_id=deployed_id)
    try:
        ledger.write(record, record_generation)
    except Conflict:
        print(f"endpoint {deploy.endpoint}'s record changed meanwhile; run the command again to record what serves")
        return 1
    print(f"endpoint {deploy.endpoint} serves version {champion.version_id} of {charter.model_id} ({name})")
    return 0


def _serves(state: EndpointState | None, deployed_id: str) -> bool:
    return state is not None and state.traffic_split.get(deployed_id) == 100


def run_undeploy(args: argparse.Namespace) -> int:
    models = Models.of_deployment()
    charter, generation = models.charters.read(args.name)
    if charter is None or charter.deploy is None:
        print(f"model {args.name} is not served")
        return EXIT_NOT_FOUND
    api, ledger = endpoints_of(models)
    record, record_generation = ledger.read(charter.deploy.endpoint, endpoint_id(models, charter.deploy.endpoint))
    if record.rollout is not None and record.rollout.model_id == args.name:
        print(f"version {record.rollout.version} of {args.name} is rolling out ({record.rollout.phase}); undeploy "
              "once it ends (`trainctl models show` tells)")  # fmt: skip
        return EXIT_REFUSED
    if not _save_deploy(models, charter, generation, None):
        return EXIT_REFUSED
    if record.serving is not None and record.serving.model_id == args.name:
        name = api.endpoint_name(record.endpoint_id)
        api.undeploy(name, record.serving.deployed_model_id, {})
        print(f"endpoint {record.name}: version {record.serving.version} undeployed")
        record.serving = None
        ledger.write(record, record_generation)
    return 0


# ---- predict --------------------------------------------------------------------------------------------------


def instances_of(text: str) -> list[dict[str, Any]]:
    """The rows to predict: {"instances": [...]}, a JSON array, JSON lines, or CSV with a header (values as text,
    numbers as numbers). ValueError naming what is wrong."""
    stripped = text.strip()
    if not stripped:
        raise ValueError("no rows: the input is empty")
    rows: list[Any]
    if stripped[0] in "[{":
        try:
            document = json.loads(stripped)
            rows = document["instances"] if isinstance(document, dict) and "instances" in document else (
                document if isinstance(document, list) else [document])  # fmt: skip
        except json.JSONDecodeError:
            rows = [json.loads(line) for line in stripped.splitlines() if line.strip()]
    else:
        rows = [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(stripped))]
    if not all(isinstance(row, dict) for row in rows):
        raise ValueError("each row must be an object of the model's feature columns")
    if len(rows) > MAX_INSTANCES:
        raise ValueError(f"{len(rows)} rows: at most {MAX_INSTANCES} at once (use batch scoring for more)")
    return rows


def _number(value: str) -> Any:
    if value == "":
        return None
    try:
        return float(value) if any(c in value for c in ".eE") else int(value)
    except ValueError:
        return value


def run_predict(args: argparse.Namespace) -> int:
    models = Models.of_deployment()
    charter, _ = models.charters.read(args.name)
    if charter is None or charter.deploy is None:
        print(f"model {args.name} is not served: `trainctl models deploy {args.name} --endpoint NAME`")
        return EXIT_NOT_FOUND
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8") as source:
                text = source.read()
        rows = instances_of(text)
    except (OSError, ValueError) as exc:
        print(f"{args.file}: {exc}")
        return EXIT_REFUSED
    api, _ = endpoints_of(models)
    try:
        answer = api.predict(api.endpoint_name(endpoint_id(models, charter.deploy.endpoint)), rows)
    except CallRejected as exc:
        print(f"endpoint {charter.deploy.endpoint} refused ({exc.reason}): {exc.message}")
        return EXIT_REFUSED
    print(json.dumps(answer, indent=2))
    return 0


# ---- models show ----------------------------------------------------------------------------------------------


def describe_serving(models: Models, charter: Charter) -> dict[str, Any] | None:
    """The model's endpoint as `models show` prints it: the deploy block, what serves, the live traffic split, the
    rollout in progress and the latest rollouts of this model."""
    if charter.deploy is None:
        return None
    api, ledger = endpoints_of(models)
    record: EndpointRecord = ledger.read(charter.deploy.endpoint, endpoint_id(models, charter.deploy.endpoint))[0]
    try:
        state = api.get(api.endpoint_name(record.endpoint_id))
    except CallRejected:
        state = None
    return {
        "deploy": charter.deploy.model_dump(mode="json"),
        "endpoint": api.endpoint_name(record.endpoint_id),
        "serving": record.serving.model_dump() if record.serving else None,
        "traffic_split": state.traffic_split if state else None,
        "deployed": [{"id": d.id, "model": d.model, "version": d.version_id} for d in state.deployed] if state else [],
        "rollout": record.rollout.model_dump(mode="json", exclude_none=True) if record.rollout else None,
        "rollouts": [e.model_dump(mode="json", exclude_none=True) for e in record.history
                     if e.model_id == charter.model_id][-10:],
    }  # fmt: skip


def print_serving(serving: dict[str, Any]) -> None:
    deploy = serving["deploy"]
    print(f"  endpoint: {deploy['endpoint']} ({serving['endpoint']}); canary {deploy['canary_percent']} %, bake "
          f"{deploy['bake']} s, max_error_rate {deploy['max_error_rate']}, "
          f"max_p99_ms {deploy['max_p99_ms']}")  # fmt: skip
    versions = {d["id"]: d["version"] for d in serving["deployed"]}
    split = serving["traffic_split"]
    shown = ", ".join(f"version {versions.get(i, '?')} ({i}) {p} %" for i, p in (split or {}).items()) or "none"
    print(f"  traffic: {shown if split is not None else 'the endpoint does not exist yet'}")
    if serving["rollout"]:
        r = serving["rollout"]
        until = f" until {r['bake_until'][:19]}" if r.get("bake_until") else ""
        print(f"  rolling out: version {r['version']} ({r['phase']}{until})")
    for e in serving["rollouts"]:
        print(f"  {e['time'][:19]}  {e['outcome']:<11} version {e['version']}: {e['verdict']}")
