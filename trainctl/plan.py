"""`trainctl plan FILE [--json | --gcloud DIR]`: the exact CustomJob a request becomes, offline.

Shows the worker pools, the Reduction Server decision in words and the cost estimate; with `--memory`, each
rank's memory estimated from the dataset's listing and whether the built-in trainer will stream. `--gcloud` writes the
config.yaml that `gcloud ai custom-jobs create --config` accepts and prints the command that submits it, so a
team used to that path can compare the two and move over.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml

from functions.capacity.ladder import ladder_of
from functions.capacity.quota_pool import QuotaPools, pool_name
from functions.cloud.gcs import Gcs
from functions.cloud.quotas import GpuQuotas
from functions.jobs.executors import executor_of, executor_problems, executor_warnings
from functions.jobs.planning import (
    MemoryEstimate,
    Plan,
    estimate_cost,
    estimate_rank_memory,
    plan_custom_job,
    plan_reduction_server,
)
from functions.ledger.keys import request_key
from functions.settings import Settings
from schemas.errors import FieldError, RequestInvalid
from schemas.events import RESERVED_WORDS, approximate_prices
from schemas.request import TrainingJobRequest
from schemas.rules import format_duration, split_gs_uri
from trainctl.context import cli_namespace, cli_settings, cli_team
from trainctl.validate import EXIT_INVALID, load_request_file, pending_package_uri


def register(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("plan", help="show the Vertex AI CustomJob a request becomes (no network)")
    cmd.add_argument("file", type=Path, metavar="FILE")
    output = cmd.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the plan as JSON")
    output.add_argument(
        "--gcloud", type=Path, metavar="DIR", help="write DIR/config.yaml for `gcloud ai custom-jobs create --config`"
    )
    cmd.add_argument(
        "--quota",
        action="store_true",
        help="also show each rung's GPU quota headroom: the project's limit (Cloud Quotas) less what trainctl's "
        "active jobs hold (the ledger)",
    )
    cmd.add_argument(
        "--memory",
        action="store_true",
        help="also estimate each rank's memory from the sizes of the dataset's files (lists the dataset's URI, "
        "as admission does) and the machine's memory, and say whether the built-in trainer will stream its share",
    )
    cmd.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="your own code: fill trainer.python_package.uris as `submit --source DIR` would (nothing is uploaded)",
    )
    cmd.set_defaults(run=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    try:
        request = load_request_file(args.file, source_uris(args.source) if args.source else None)
    except RequestInvalid as exc:
        print(f"{args.file}: invalid")
        for error in exc.errors:
            print(f"  {error}")
        return EXIT_INVALID
    # Only the quota and the dataset's listing need the deployment (or the local stack).
    settings = cli_settings(offline=not (args.quota or args.memory))
    # The executor as admission will judge it (the deployment's list), and its end of availability as of today.
    problems = executor_problems(request, settings.executors, today=None)
    if problems:
        print(f"{args.file}: invalid")
        for problem in problems:
            print(f"  {problem}")
        return EXIT_INVALID
    warnings = executor_warnings(request, settings.executors, datetime.now(UTC).date())
    # As this shell's team would send it: a team's request writes to its own folder (functions/ledger/keys.py).
    team = cli_team(settings)
    plan = plan_custom_job(request, settings, request_key(request.request_id, cli_namespace(settings)), team=team)
    rungs = ladder_lines(request, settings, quota_headroom(settings) if args.quota else None)
    memory = memory_estimate(request, Gcs(settings.project), settings.marker_names) if args.memory else None
    if args.json:
        extra: dict[str, Any] = {"memory": memory_json(memory)} if memory else {}
        extra |= {"warnings": warnings} if warnings else {}
        print(json.dumps(plan_json(plan) | {"ladder": [rung for rung, _ in rungs]} | extra, indent=2))
    elif args.gcloud:
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        print(write_gcloud_config(plan, args.gcloud, settings.region, settings.project))
    else:
        print(describe(request, plan, settings))
        for warning in warnings:
            print(f"warning           {warning}")
        if memory is not None:
            print(f"memory per rank   {memory.words()}")
        if request.fallbacks or args.quota:
            print("capacity ladder   (each move is a new attempt into the same outputs; the trainer resumes)")
            print("\n".join(f"  {line}" for _, line in rungs))
    return 0


class Listing(Protocol):
    def objects_under(self, bucket: str, prefix: str) -> Iterable[tuple[str, int]]: ...


def source_uris(folder: Path) -> list[str]:
    """The package URIs `submit --source DIR` would fill in: RequestInvalid when DIR cannot be packed."""
    from trainctl.source_package import SourceError, build_source_archive

    try:
        archive = build_source_archive(folder)
    except SourceError as exc:
        raise RequestInvalid([FieldError("trainer.python_package", f"--source {folder}: {exc}")]) from None
    return [pending_package_uri(cli_settings(offline=True), archive)]


def memory_estimate(request: TrainingJobRequest, storage: Listing, marker_names: tuple[str, ...]) -> MemoryEstimate:
    """Each rank's memory from the dataset's listing, the one admission makes (issue 30, point 4)."""
    bucket, prefix = split_gs_uri(request.dataset.uri)
    return estimate_rank_memory(request, storage.objects_under(bucket, prefix), marker_names)


def memory_json(memory: MemoryEstimate) -> dict[str, Any]:
    return {**asdict(memory), "streams": memory.streams, "in_words": memory.words()}


Headroom = Callable[[str, str], tuple[int | None, str, int]]


def quota_headroom(settings: Settings) -> Headroom:
    """(limit, why there is none, held) of a quota metric in a region: the project's limit from Cloud Quotas
    (None: not gated, and why in words) and the GPUs trainctl's active jobs hold of it, from the ledger's quota
    pools."""
    quotas = GpuQuotas(settings.project, settings.quotas_endpoint)
    pools = QuotaPools(Gcs(settings.project), settings.control_bucket)

    def headroom(metric: str, region: str) -> tuple[int | None, str, int]:
        limit, why = quotas.limit_in_words(metric, region)
        return limit, why, pools.held(pool_name(region, metric))

    return headroom


def ladder_lines(
    request: TrainingJobRequest, settings: Settings, headroom: Headroom | None
) -> list[tuple[dict[str, Any], str]]:
    """Each rung as JSON and as a line: its machines, strategy and region, its cost, and its quota headroom."""
    out = []
    rungs = ladder_of(request, settings.region)
    width = max(len(rung.resources) for rung in rungs)
    for rung, step in zip(rungs, request.rungs(), strict=True):
        rung_request = request.at_rung(step.index)
        cost = estimate_cost(rung_request, plan_reduction_server(rung_request))
        info: dict[str, Any] = {
            "rung": step.index,
            "resources": rung.resources,
            "quota_metric": rung.quota_metric,
            "quota_metrics": rung.gated_metrics,
            "gpus": rung.gpus,
            "hourly_usd": cost.hourly_usd,
            "max_usd": cost.max_usd,
            "max_pending": rung.max_pending,
            "reserved": cost.reserved,
        }
        line = f"{step.index}  {rung.resources:<{width}}  about ${cost.hourly_usd:,.2f}/h, at most ${cost.max_usd:,.2f}"
        line += RESERVED_WORDS if cost.reserved else ""
        if headroom is not None:
            # A Spot rung is gated on two metrics (schemas/catalog.py quota_metrics): each is shown.
            quotas = []
            for metric in rung.gated_metrics:
                limit, why, held = headroom(metric, rung.region)
                quotas.append(
                    {"metric": metric, "limit": limit, "held": held} | ({"not_gated": why} if limit is None else {})
                )
                short = metric.rsplit("/", 1)[-1]
                if limit is None:
                    line += f"; quota {short}: {why}, not gated; trainctl holds {held}"
                else:
                    fits = "never fits: skipped" if rung.gpus > limit else f"headroom {max(0, limit - held)}"
                    line += f"; quota {short}: limit {limit}, trainctl holds {held}, {fits}"
            first = quotas[0]
            info |= {"quota_limit": first["limit"], "quota_held": first["held"], "quotas": quotas}
            info |= {"quota_not_gated": first["not_gated"]} if "not_gated" in first else {}
        out.append((info, line))
    return out


def plan_json(plan: Plan) -> dict[str, Any]:
    rs = plan.reduction_server
    return {
        "custom_job": plan.custom_job,
        "reduction_server": {
            "enabled": rs.enabled,
            "replicas": rs.replicas,
            "machine_type": rs.machine_type,
            "reason": rs.reason,
        },
        "cost": plan.cost.model_dump(),
        "output_dir": plan.output_dir,
    }


def describe(request: TrainingJobRequest, plan: Plan, settings: Settings) -> str:
    res, cost = request.resources, plan.cost
    spec = plan.custom_job["job_spec"]
    lines = [
        f"request           {request.request_id}",
        f"display name      {plan.custom_job['display_name']}",
        f"GPUs              {res.replica_count} node(s) × {res.accelerator_count} {res.accelerator_type} "
        f"on {res.machine_type} = {res.total_gpus}",
        f"reduction server  {plan.reduction_server.reason}",
        f"cost estimate     about ${cost.hourly_usd:,.2f}/h{RESERVED_WORDS if cost.reserved else ''}; about "
        f"${cost.max_usd:,.2f} at most within the {format_duration(request.scheduling.timeout)} timeout "
        f"({approximate_prices(cost)})",
        f"scheduling        {spec['scheduling']['strategy']}, restart on worker restart: "
        f"{spec['scheduling']['restart_job_on_worker_restart']}",
        f"outputs           {plan.output_dir}{{model,checkpoints,logs}}/",
    ]
    affinity = spec["worker_pool_specs"][0]["machine_spec"].get("reservation_affinity")
    if affinity is not None:
        lines.append(f"reservation       {reservation_line(affinity)}")
    lines.append("worker pools")
    roles = ("chief", "workers", "reducers")
    for index, pool in enumerate(spec["worker_pool_specs"]):
        machine = pool["machine_spec"]
        gpus = (
            f" + {machine['accelerator_count']} × {machine['accelerator_type']}"
            if "accelerator_type" in machine
            else ""
        )
        task = pool.get("container_spec") or pool["python_package_spec"]
        runs = task.get("image_uri") or f"{task['executor_image_uri']}: python -m {task['python_module']}"
        lines.append(f"  {index} {roles[index]:<8} {pool['replica_count']} × {machine['machine_type']}{gpus}  {runs}")
    first = spec["worker_pool_specs"][0]
    args = (first.get("container_spec") or first["python_package_spec"]).get("args")
    if args:
        lines.append("trainer arguments " + shlex.join(args))
    package = request.trainer.python_package
    executor = executor_of(request, settings.executors)
    if package is not None and executor is not None:
        lines.append(
            f"package           {', '.join(package.uris)} on {executor.describe()}; available until "
            f"{executor.available_until.isoformat()} (Google's list of prebuilt training containers)"
        )
    return "\n".join(lines)


def reservation_line(affinity: dict[str, Any]) -> str:
    """A worker pool's reservation_affinity in words."""
    if affinity["reservation_affinity_type"] == "SPECIFIC_RESERVATION":
        return (
            f"SPECIFIC_RESERVATION {affinity['values'][0]} (every GPU node consumes it; Vertex uses a reservation "
            "only for its exact machine shape)"
        )
    return f"{affinity['reservation_affinity_type']} (a matching reservation of the project's, else on-demand)"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def camel_case(value: Any) -> Any:
    """Proto field names → the JSON names gcloud's config file wants (it rejects keys with underscores)."""
    if isinstance(value, dict):
        return {_camel(k): camel_case(v) for k, v in value.items()}
    if isinstance(value, list):
        return [camel_case(v) for v in value]
    return value


def write_gcloud_config(plan: Plan, directory: Path, region: str, project: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "config.yaml"
    spec = camel_case(plan.custom_job["job_spec"])
    for pool in spec["workerPoolSpecs"]:
        pool["replicaCount"] = int(pool["replicaCount"])
    config.write_text(yaml.safe_dump(spec, sort_keys=False))
    labels = ",".join(f"{k}={v}" for k, v in plan.custom_job["labels"].items())
    command = [
        "gcloud", "ai", "custom-jobs", "create",
        f"--project={project}", f"--region={region}",
        f"--display-name={plan.custom_job['display_name']}",
        f"--labels={labels}",
        f"--config={config}",
    ]  # fmt: skip
    return f"wrote {config}\nsubmit it with:\n  {shlex.join(command)}"
