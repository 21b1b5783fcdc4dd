"""Admission: may this (schema-valid) request run here? The operator's guardrails, checked before any claim,
and whether its dataset holds data (from a listing the controller makes).

Pure. Each problem names the guardrail, what the request asks for and the limit, so a rejected event tells the
requester exactly what to change (or whom to ask).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from functions.jobs import planning
from functions.jobs.executors import executor_problems
from functions.ledger.output_claims import max_output_path_bytes
from functions.settings import Settings
from functions.teams import NO_TEAMS
from schemas.errors import FieldError
from schemas.events import CostEstimate, approximate_prices
from schemas.images import prefix_covers, repository_of
from schemas.request import Rung, TrainingJobRequest, rung_prefix
from schemas.rules import format_duration, split_gs_uri
from schemas.secrets import secret_of

# The built-in trainer's image is PyTorch's CUDA 12.6 build (trainer/Dockerfile), whose kernels stop at sm_90:
# Blackwell GPUs would leave it nothing to run (trainer.launch would refuse to start on them). A4X (GB200, arm64)
# is not in the catalog at all.
BUILTIN_IMAGE_LACKS_KERNELS_FOR = {"NVIDIA_B200": "sm_100", "NVIDIA_RTX_PRO_6000": "sm_120"}


def _allowed(value: str, allowed: tuple[str, ...]) -> bool:
    """Machine types and data buckets: an empty allow-list allows any. Images, output buckets and service
    accounts are stricter: only the defaults unless the operator lists more."""
    return not allowed or value in allowed


def admission_problems(
    request: TrainingJobRequest,
    settings: Settings,
    output_dir: str,
    request_key: str | None = None,
    team: str | None = None,
    today: date | None = None,
) -> list[FieldError]:
    """Every guardrail the request breaks: each rung of its ladder is checked like `resources` (its own cost
    included), then what all its attempts may spend together, then the request-wide rules. `request_key` places the
    request's own folder in its team's namespace (planning.own_folder); `today` (the handler's date) refuses an
    executor past its end of availability."""
    problems: list[FieldError] = []
    costs = []
    for rung in request.rungs():
        rung_request = request.at_rung(rung.index)
        cost = planning.estimate_cost(rung_request, planning.plan_reduction_server(rung_request))
        costs.append(cost)
        problems += _rung_problems(rung_request, rung, cost, settings)
    worst = max(costs, key=lambda cost: cost.max_usd)
    attempts = request.scheduling.max_attempts
    ceiling = settings.max_request_cost_usd
    if ceiling and worst.max_usd <= settings.max_cost_usd and attempts * worst.max_usd > ceiling:
        problems.append(
            FieldError(
                "scheduling.max_attempts",
                f"guardrail max_request_cost_usd: {attempts} attempts of up to ${worst.max_usd:,.2f} each can spend "
                f"about ${attempts * worst.max_usd:,.2f} together ({approximate_prices(worst)}); the limit is "
                f"${ceiling:,.2f}. Lower scheduling.max_attempts or the costliest rung's "
                "timeout or GPUs",
            )
        )
    return problems + _request_problems(request, settings, output_dir, request_key, team, today)


def _rung_problems(request: TrainingJobRequest, rung: Rung, cost: CostEstimate, settings: Settings) -> list[FieldError]:
    """The guardrails on one rung's machines, region and cost; `request` is the request as the rung runs it."""
    problems: list[FieldError] = []
    res = request.resources
    where = rung_prefix(rung.index)

    def refuse(path: str, guardrail: str, text: str) -> None:
        problems.append(FieldError(where + path, f"guardrail {guardrail}: {text}"))

    if not _allowed(res.machine_type, settings.allowed_machine_types):
        refuse(
            "resources.machine_type",
            "allowed_machine_types",
            f"{res.machine_type} is not allowed here; allowed: {', '.join(settings.allowed_machine_types)}",
        )
    if res.total_gpus > settings.max_gpus_per_job:
        refuse(
            "resources",
            "max_gpus_per_job",
            f"the job asks for {res.total_gpus} GPUs; the limit is {settings.max_gpus_per_job}",
        )
    if res.replica_count > settings.max_nodes:
        refuse(
            "resources.replica_count",
            "max_nodes",
            f"the job asks for {res.replica_count} nodes; the limit is {settings.max_nodes}",
        )
    if rung.region is not None and rung.region != settings.region and rung.region not in settings.allowed_regions:
        allowed = ", ".join(dict.fromkeys((settings.region, *settings.allowed_regions)))
        refuse("region", "allowed_regions", f"{rung.region} is not allowed here; allowed: {allowed}")
    if cost.max_usd > settings.max_cost_usd:
        refuse(
            "resources" if where else "scheduling.timeout",
            "max_cost_usd",
            f"this job can cost about ${cost.max_usd:,.2f} (${cost.hourly_usd:,.2f}/h for "
            f"{format_duration(request.scheduling.timeout)}, {approximate_prices(cost)}); the limit is "
            f"${settings.max_cost_usd:,.2f}. Shorten scheduling.timeout or use fewer GPUs",
        )
    architecture = BUILTIN_IMAGE_LACKS_KERNELS_FOR.get(res.accelerator_type or "")
    if not request.trainer.is_custom_code and architecture:
        problems.append(
            FieldError(
                where + "resources.accelerator_type",
                f"the built-in trainer's image (PyTorch for CUDA 12.6) has no kernels for {res.accelerator_type} "
                f"({architecture}, Blackwell); choose an earlier GPU, or run your own image built for CUDA 12.8 "
                "or later (trainer.image)",
            )
        )
    return problems


def _request_problems(
    request: TrainingJobRequest,
    settings: Settings,
    output_dir: str,
    request_key: str | None = None,
    team: str | None = None,
    today: date | None = None,
) -> list[FieldError]:
    """The guardrails on what every rung shares: timeout, image, package and executor, data, outputs, service
    account."""
    problems: list[FieldError] = []

    def refuse(path: str, guardrail: str, text: str) -> None:
        problems.append(FieldError(path, f"guardrail {guardrail}: {text}"))

    if request.scheduling.timeout > settings.max_timeout:
        refuse(
            "scheduling.timeout",
            "max_timeout",
            f"{format_duration(request.scheduling.timeout)} is longer than the limit of "
            f"{format_duration(settings.max_timeout)}",
        )
    image = request.trainer.image
    if image is not None:
        problem = _image_problem(image, settings)
        if problem:
            refuse("trainer.image", *problem)
    serving = request.model.serving if request.model else None
    if serving is not None and (problem := _image_problem(serving.image, settings)):
        refuse("model.serving.image", *problem)  # it runs your code too, so under trainer.image's rules
    problems += _package_problems(request, settings)
    if settings.allow_python_packages:
        problems += executor_problems(request, settings.executors, today)
    data_bucket, _ = split_gs_uri(request.dataset.uri)
    if not _allowed(data_bucket, settings.allowed_data_buckets):
        refuse(
            "dataset.uri",
            "allowed_data_buckets",
            f"bucket {data_bucket} is not allowed; allowed: {', '.join(settings.allowed_data_buckets)}",
        )
    reference = request.model.reference if request.model else None
    if reference and not _allowed(split_gs_uri(reference)[0], settings.allowed_data_buckets):
        refuse(
            "model.reference",
            "allowed_data_buckets",
            f"bucket {split_gs_uri(reference)[0]} is not allowed; allowed: {', '.join(settings.allowed_data_buckets)}",
        )
    problems += _team_data_problems(request, settings, team)
    problems += _output_problems(request, settings, output_dir, request_key, team)
    problems += _service_account_problems(request, settings, team)
    problems += _secret_problems(request, settings, team)
    return problems


def _secret_problems(request: TrainingJobRequest, settings: Settings, team: str | None) -> list[FieldError]:
    """trainer.secret_env (issue 40, point 7): each secret must be one the operator lets the team's own code read
    (job_secrets, the list Terraform grants the team's job account roles/secretmanager.secretAccessor on), checked
    here rather than by a call: Secret Manager's testIamPermissions answers for its caller (the controller), not for
    the job's account, and "may fail open" (its reference page). A request that runs as another allowed account
    (`service_account`) holds grants trainctl does not know: not checked; its node fails naming the secret it cannot
    read. No value is read here, or anywhere in the controller."""
    secret_env = request.trainer.secret_env
    if not secret_env or request.service_account not in (None, settings.custom_account(team)):
        return []
    team = team or NO_TEAMS
    granted = settings.job_secrets.get(team, ())
    return [
        FieldError(
            f"trainer.secret_env.{name}",
            f"guardrail job_secrets: {secret_of(version)} is not a secret team {team}'s own code may read; it may read "
            f"{', '.join(granted) or 'none'} (an operator grants one in Terraform's job_secrets, or `trainctl local "
            "up --secret`)",
        )
        for name, version in secret_env.items()
        if secret_of(version) not in granted
    ]


def _team_data_problems(request: TrainingJobRequest, settings: Settings, team: str | None) -> list[FieldError]:
    """With teams, what a request names as data lies where its team may read (issue 40, point 5): its own data
    folders, the operator's grants (`reads`), and for packages its own packages/<team>/ folder. One team's request
    can never train on, score against, or install from another team's folder unless the operator granted it."""
    teams = settings.teams
    if teams is None or team is None:
        return []
    named: list[tuple[str, str, list[str] | None]] = [("dataset.uri", request.dataset.uri, None)]
    if request.model and request.model.reference:
        named.append(("model.reference", request.model.reference, None))
    package = request.trainer.python_package
    for index, uri in enumerate(package.uris if package else []):
        named.append((f"trainer.python_package.uris[{index}]", uri, teams.package_folders(team)))
    problems = []
    for field, uri, folders in named:
        if (problem := teams.data_problem(team, uri, folders)) is not None:
            problems.append(FieldError(field, problem))
    return problems


def _image_problem(image: str, settings: Settings) -> tuple[str, str] | None:
    """(guardrail, text) when `image` may not run as a custom image. The built-in trainer's image and every image
    in its repository run only the built-in trainer, which trainctl configures itself: with a request's own
    command, args or env they would run anything as the trainer's account (issue 24, point 1). That holds even
    when an allow-list entry covers the repository (the project's whole registry, say)."""
    allowed = ", ".join(settings.allowed_image_prefixes) or "none (only the built-in trainer)"
    repository = repository_of(settings.trainer_image)
    if image == settings.trainer_image or (repository is not None and image.startswith(repository)):
        return (
            "builtin_image",
            f"{image} is from the built-in trainer's repository ({repository or settings.trainer_image}), whose "
            "images run only the built-in trainer: ask for `builtin: tabular` instead of an image; custom code "
            f"needs an image from an allowed registry; allowed: {allowed}",
        )
    if not any(prefix_covers(prefix, image) for prefix in settings.allowed_image_prefixes):
        return "allowed_image_prefixes", f"{image} is not from an allowed registry; allowed: {allowed}"
    return None


# How packages are turned on, in a deployment and on the local stack (`trainctl submit --source` says it too).
PACKAGES_OFF_FIX = (
    "the operator turns them on with Terraform's allow_python_packages, TRAINCTL_ALLOW_PYTHON_PACKAGES; on the local "
    "stack, start it with `trainctl local up --allow-python-packages`"
)


def _package_problems(request: TrainingJobRequest, settings: Settings) -> list[FieldError]:
    """A Python package is custom code: only where the operator turned packages on, and read (by the custom
    account, as Vertex installs it on every node) from a data bucket, which that account may read."""
    package = request.trainer.python_package
    if package is None:
        return []
    if not settings.allow_python_packages:
        return [
            FieldError(
                "trainer.python_package",
                "guardrail allow_python_packages: this deployment runs no Python packages of requesters' own "
                f"({PACKAGES_OFF_FIX}); use `builtin: tabular`, or an image from an allowed registry",
            )
        ]
    problems = []
    for index, uri in enumerate(package.uris):
        bucket, _ = split_gs_uri(uri)
        if not _allowed(bucket, settings.allowed_data_buckets):
            problems.append(
                FieldError(
                    f"trainer.python_package.uris[{index}]",
                    f"guardrail allowed_data_buckets: bucket {bucket} is not one jobs may read; packages live in a "
                    f"data bucket: {', '.join(settings.allowed_data_buckets)}",
                )
            )
    return problems


def _output_problems(
    request: TrainingJobRequest,
    settings: Settings,
    output_dir: str,
    request_key: str | None = None,
    team: str | None = None,
) -> list[FieldError]:
    """Where the job may write. In the control bucket, only the request's own folder (runs/<id>/ for the built-in
    trainer, custom-runs/<id>/ for a custom image): every other folder there is another request's or the ledger.
    The built-in trainer writes nowhere else, so that custom code cannot reach its outputs; a custom image may also
    write to the operator's output buckets (overlaps with other active requests there are refused at the claim,
    functions/ledger/output_claims.py)."""
    control = settings.control_bucket
    bucket, path = split_gs_uri(output_dir)
    own = planning.own_folder(request, settings, request_key, team)

    def refuse(guardrail: str, text: str) -> list[FieldError]:
        return [FieldError("output_dir", f"guardrail {guardrail}: {text}")]

    if output_dir.startswith(own):
        return []
    if bucket == control:
        return refuse(
            "output_isolation",
            f"in the control bucket a request writes only to its own folder, {own} for this one; "
            f"{output_dir} is another request's folder or the ledger. Leave output_dir out to use {own}",
        )
    if planning.runs_builtin_trainer(request):
        return refuse(
            "output_isolation",
            f"the built-in trainer writes only to its own folder {own}, where custom images cannot write; "
            "leave output_dir out (or name a folder inside that one)",
        )
    allowed = tuple(dict.fromkeys(b for b in settings.allowed_output_buckets if b != control))
    if bucket not in allowed:
        return refuse(
            "allowed_output_buckets",
            f"bucket {bucket} is not allowed; allowed: {', '.join(allowed) or 'none'} "
            f"(or this request's own folder {own})",
        )
    if len(path.encode()) > (limit := max_output_path_bytes(bucket)):
        return refuse(
            "output_isolation",
            f"the folder's path is {len(path.encode())} bytes; in bucket {bucket} at most {limit} (trainctl records "
            "each active output folder by name in the control bucket, where object names stop at 1024 bytes)",
        )
    return []


def _service_account_problems(
    request: TrainingJobRequest, settings: Settings, team: str | None = None
) -> list[FieldError]:
    """Whom the job runs as. The built-in trainer and custom images each run as their own account (terraform/iam.tf):
    a custom image may never run as the trainer's account, which may write the built-in trainer's outputs, nor the
    built-in trainer as the custom images' one, which cannot. Another account only from the operator's allow-list."""
    builtin = planning.runs_builtin_trainer(request)
    trainer, custom = settings.trainer_service_account, settings.custom_account(team)
    account = request.service_account
    others_custom = {settings.custom_account(t) for t in (settings.teams.teams if settings.teams else ())} - {custom}
    if not builtin and account in others_custom - {""}:
        return [
            FieldError(
                "service_account",
                f"guardrail custom_service_account: {account} is another team's account, which writes that team's "
                f"outputs; your own code runs as {custom or 'the default account'}",
            )
        ]
    if not builtin and trainer and not custom:
        # Without an account Vertex runs the job as its Custom Code Service Agent, which may read and write the
        # project's buckets (https://cloud.google.com/vertex-ai/docs/general/custom-service-account).
        path, kind = ("trainer.image", "images") if request.trainer.image else ("trainer.python_package", "packages")
        return [
            FieldError(
                path,
                f"guardrail custom_service_account: custom {kind} run as their own service account, and this "
                "deployment names none (TRAINCTL_CUSTOM_SERVICE_ACCOUNT); only the built-in trainer runs here",
            )
        ]
    own, others = (trainer, custom) if builtin else (custom, trainer)
    if account is None or account == own:
        return []
    if account == others and builtin:
        return [
            FieldError(
                "service_account",
                f"guardrail trainer_service_account: {account} is the custom images' account, which cannot write the "
                f"built-in trainer's folder; the built-in trainer runs as {trainer or 'the default account'}",
            )
        ]
    if account == others:
        return [
            FieldError(
                "service_account",
                f"guardrail custom_service_account: {account} is the built-in trainer's account, which may write the "
                f"built-in trainer's outputs; custom images run as {custom or 'the default account'}",
            )
        ]
    if account not in settings.allowed_service_accounts:
        allowed = ", ".join(a for a in settings.allowed_service_accounts if a != others) or (
            "none (only the default trainer account)" if builtin else "none (only the custom images' account)"
        )
        return [
            FieldError(
                "service_account", f"guardrail allowed_service_accounts: {account} may not be used; allowed: {allowed}"
            )
        ]
    return []


def dataset_problem(uri: str, objects: Iterable[tuple[str, int]], marker_names: tuple[str, ...]) -> FieldError | None:
    """Whether the dataset holds data, from the listing of the objects (name, size) under its URI: a job on a
    missing or empty dataset starts its nodes and fails a minute later, so it is refused before any money is spent.
    Markers do not count as data (a marker's folder holds the marker itself)."""
    seen_any = False
    for name, size in objects:
        seen_any = True
        if size > 0 and name.rsplit("/", 1)[-1] not in marker_names:
            return None
    upload = "put the data (CSV or Parquet files) under it first"
    if not seen_any:
        return FieldError("dataset.uri", f"{uri} does not exist: no object is under it; {upload}")
    return FieldError("dataset.uri", f"{uri} is empty: it holds only markers or empty objects, no data; {upload}")
