"""Planning: a validated request → the exact Vertex AI CustomJob, its Reduction Server decision and its cost.

Pure: no I/O and no Google client imports. The CustomJob is a dict in the proto3 JSON mapping with the
proto's own (snake_case) field names, so `aiplatform_v1.CustomJob.from_json(json.dumps(job))` builds the
request the Vertex adapter sends, and `trainctl plan` can print it as it is.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from functions.cloud.job_labels import deployment_label, job_labels
from functions.jobs import secret_env
from functions.ledger.keys import id_namespace, key_hash, namespace_of
from functions.settings import Settings
from schemas import catalog
from schemas.events import CostEstimate
from schemas.executors import executor_image
from schemas.request import MAX_DISPLAY_NAME, TabularHyperparameters, TrainingJobRequest

REDUCTION_SERVER_BUCKET_CAP_MB = 64
# Vertex: Reduction Server "works best if the messages to be aggregated are sufficiently large" and DDP should use
# 64 MB buckets with it (reference/vertex.md §3.3). A model whose whole gradient is smaller than one such bucket
# all-reduces a single small message per step, latency-bound, where reducers add a hop and cost money.
REDUCTION_SERVER_MIN_GRADIENT_MB = REDUCTION_SERVER_BUCKET_CAP_MB
# Where outputs go in the control bucket, one folder per request; the rest of the bucket is the ledger. The built-in
# trainer's account may write only below RUNS_PREFIX and the custom images' account only below CUSTOM_RUNS_PREFIX
# (terraform/iam.tf), so custom code can never touch what the built-in trainer wrote.
RUNS_PREFIX = "runs/"
CUSTOM_RUNS_PREFIX = "custom-runs/"
# Below either prefix, the folders of requests whose ids are in a team's namespace (functions/ledger/keys.py): one more
# level, whose name no request id can take (ids start with a letter or a digit), so the same id in two teams is two
# folders, and no id of the default team's names a folder around a team's.
TEAMS_FOLDER = "_teams/"


@dataclass(frozen=True)
class ReductionServerPlan:
    enabled: bool
    replicas: int
    machine_type: str
    reason: str


@dataclass(frozen=True)
class Plan:
    custom_job: dict[str, Any]
    reduction_server: ReductionServerPlan
    cost: CostEstimate
    output_dir: str
    region: str  # where the job is created: the deployment's region, or the ladder rung's


_REDUCTION_SERVER_MULTIREGIONS = ("us-docker.pkg.dev/", "europe-docker.pkg.dev/", "asia-docker.pkg.dev/")


def reduction_server_image(settings: Settings, region: str) -> str:
    """The reducers' image for a job in `region`: Google publishes it in the us, europe and asia multi-regions
    (reference/vertex.md §3.3), and the one nearest the job is used; an operator's own image is kept as it is."""
    image = settings.reduction_server_image
    current = next((prefix for prefix in _REDUCTION_SERVER_MULTIREGIONS if image.startswith(prefix)), None)
    if region == settings.region or current is None:
        return image
    return f"{catalog.nearest_multiregion(region)}-docker.pkg.dev/" + image.removeprefix(current)


def package_executor_image(executor: str, settings: Settings, region: str) -> str:
    """A package's executor image in the multi-region nearest `region`, from the deployment's list; "" for a name the
    list lacks (planned before admission, which refuses it: functions/jobs/executors.py)."""
    known = settings.executors.get(executor)
    return executor_image(known, region) if known is not None else ""


def runs_builtin_trainer(request: TrainingJobRequest) -> bool:
    """Whether the job runs the built-in trainer (and so as its account, into runs/); an image or a package of the
    request's own is custom code."""
    return not request.trainer.is_custom_code


def own_folder(
    request: TrainingJobRequest, settings: Settings, request_key: str | None = None, team: str | None = None
) -> str:
    """The request's own folder in the control bucket: the only place there it may write, and its default output_dir.
    `<prefix><id>/`, or `<prefix>_teams/<team>/<id>/` when its key is in a team's namespace — or, for your own code,
    when it arrived as a team other than the default one (a marker's key has no namespace): each team's own code
    runs as the team's account, which may write only its team's folder (issue 38, point 4; terraform/teams.tf)."""
    prefix = RUNS_PREFIX if runs_builtin_trainer(request) else CUSTOM_RUNS_PREFIX
    namespace = namespace_of(request_key) if request_key else None
    if namespace is None and not runs_builtin_trainer(request) and settings.teams is not None:
        namespace = id_namespace(team, settings.teams.default_team)
    folder = f"{TEAMS_FOLDER}{namespace}/" if namespace else ""
    return f"gs://{settings.control_bucket}/{prefix}{folder}{request.request_id}/"


def output_dir(
    request: TrainingJobRequest, settings: Settings, request_key: str | None = None, team: str | None = None
) -> str:
    if request.output_dir:
        return request.output_dir.rstrip("/") + "/"
    return own_folder(request, settings, request_key, team)


def default_service_account(request: TrainingJobRequest, settings: Settings, team: str | None = None) -> str:
    """The account a job runs as unless the request names another: the trainer's for the built-in trainer; for your
    own code its team's own account where the teams setting names one (Terraform names one for every team but the
    default), else the custom images' account; empty (Vertex's default) only where the deployment names none."""
    if runs_builtin_trainer(request):
        return settings.trainer_service_account
    return settings.custom_account(team)


def builtin_gradient_mb(request: TrainingJobRequest) -> float | None:
    """At least how many MB of fp32 gradients the built-in MLP all-reduces per step (None for a custom image,
    whose model the planner cannot see). Input and output widths are not known before the data is read, so
    they count as the chosen feature columns and one output: a lower bound."""
    if request.trainer.is_custom_code:
        return None
    hidden = (request.trainer.hyperparameters or TabularHyperparameters()).hidden_sizes
    widths = [len(request.dataset.features or []), *hidden, 1]
    parameters = sum((inputs + 1) * outputs for inputs, outputs in itertools.pairwise(widths))
    return parameters * 4 / 2**20


def plan_reduction_server(request: TrainingJobRequest) -> ReductionServerPlan:
    """Decide on worker pool 2 per DESIGN.md §4, and say why in words."""
    rs, res = request.reduction_server, request.resources
    machine_type = rs.machine_type or catalog.REDUCER_MACHINE
    family = res.machine_type.split("-", 1)[0]

    def off(reason: str) -> ReductionServerPlan:
        return ReductionServerPlan(False, 0, machine_type, reason)

    if rs.mode == "off":
        return off("off: reduction_server.mode is off")
    if res.replica_count < 2:
        return off("off: a single-node job all-reduces over NVLink/PCIe inside the machine; reducers cannot help")
    if family not in catalog.REDUCTION_SERVER_FAMILIES:
        return off(f"off: {res.machine_type} uses GPUDirect networking, which outperforms Reduction Server")
    if request.scheduling.strategy == "flex_start":
        return off("off: FLEX_START requires every worker pool to use the same machine configuration")
    gradient_mb = builtin_gradient_mb(request)
    if rs.mode == "auto" and gradient_mb is not None and gradient_mb < REDUCTION_SERVER_MIN_GRADIENT_MB:
        return off(
            f"off (auto): the built-in MLP all-reduces about {gradient_mb:.1f} MB of gradients per step, less than "
            f"one {REDUCTION_SERVER_BUCKET_CAP_MB} MB bucket; Reduction Server pays only for large messages "
            "(mode: on forces it)"
        )
    node_gbps = catalog.node_egress_gbps(res.machine_type, res.accelerator_type, res.accelerator_count or 0)
    total_gbps = node_gbps * res.replica_count
    needed = catalog.reducers_needed(total_gbps)
    replicas = rs.replica_count or needed
    sizing = (
        f"{rs.replica_count} reducers as requested"
        if rs.replica_count
        else f"ceil({res.replica_count} nodes × {node_gbps} Gbps / {catalog.REDUCER_EGRESS_GBPS} Gbps) = {needed}"
    )
    return ReductionServerPlan(
        True,
        replicas,
        machine_type,
        f"on ({rs.mode}): {res.replica_count}-node {family.upper()} job; {sizing} × {machine_type}; "
        f"the trainer gets --bucket-cap-mb {REDUCTION_SERVER_BUCKET_CAP_MB}"
        + (f"; the built-in MLP all-reduces about {gradient_mb:.0f} MB per step" if gradient_mb is not None else ""),
    )


def estimate_cost(request: TrainingJobRequest, reducers: ReductionServerPlan) -> CostEstimate:
    """The run's price. A rung that consumes a specific reservation adds nothing for its nodes: Compute Engine bills
    a reservation whether it is used or not, and "a VM consuming a reservation doesn't incur separate charges"
    (compute/docs/instances/reservations-overview, local/FIDELITY.md "Reservations"); only its reducers cost more.
    An `any` affinity may fall back to on-demand VMs, so it is priced as on-demand."""
    res = request.resources
    spot = request.scheduling.strategy == "spot"
    reserved = res.reservation is not None and res.reservation.affinity == "specific"
    node = catalog.node_hourly_price(res.machine_type, res.accelerator_type, res.accelerator_count or 0, spot)
    hourly = 0.0 if reserved else node * res.replica_count
    if reducers.enabled:
        reducer_machine = catalog.machine(reducers.machine_type) or catalog.MACHINES[catalog.REDUCER_MACHINE]
        hourly += reducers.replicas * (reducer_machine.spot_price if spot else reducer_machine.price)
    return CostEstimate(
        hourly_usd=round(hourly, 2),
        max_usd=round(hourly * request.scheduling.timeout / 3600, 2),
        gpus=res.total_gpus,
        nodes=res.replica_count,
        reducers=reducers.replicas,
        prices_as_of=catalog.PRICES_TAKEN,
        reserved=reserved,
    )


# The built-in trainer's own rule for streaming (trainer/data/memory_budget.py; a test keeps the two equal): a rank
# streams its share when the share's estimated peak in memory exceeds MEMORY_BUDGET_FRACTION of the node's memory
# divided by the node's ranks. The peak is estimated from the bytes stored: about 2.5 × the float32 rows in memory
# (bench/trainer_memory.py), and a Parquet float stored in at most its own size, a CSV one in about two or more.
MEMORY_BUDGET_FRACTION = 0.5
PEAK_PER_STORED_BYTE = {"parquet": 3.0, "csv": 1.5}
_DATA_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True)
class MemoryEstimate:
    """What one rank of the built-in trainer will hold, from the sizes of the dataset's files."""

    dataset_bytes: int
    files: int
    ranks: int
    sharded: bool  # at least as many files as ranks: each rank reads only its own files
    rank_share_bytes: int  # stored bytes the busiest rank reads
    rank_peak_bytes: int  # its estimated peak in memory, loaded whole
    rank_budget_bytes: int  # MEMORY_BUDGET_FRACTION of the node's memory over its ranks

    @property
    def streams(self) -> bool:
        return self.rank_peak_bytes > self.rank_budget_bytes

    def words(self) -> str:
        share = "its own files" if self.sharded else "the whole dataset (fewer files than ranks)"
        decision = (
            "it will stream its share (shards read in turn, bounded shuffle buffer)"
            if self.streams
            else "it loads its share into memory"
        )
        return (
            f"{_gb(self.dataset_bytes)} in {self.files} file(s); each of {self.ranks} ranks reads {share}, "
            f"{_gb(self.rank_share_bytes)} stored → about {_gb(self.rank_peak_bytes)} in memory against a budget "
            f"of {_gb(self.rank_budget_bytes)} per rank: {decision}"
        )


def _gb(size: float) -> str:
    return f"{size / 1e9:,.2f} GB"


def estimate_rank_memory(
    request: TrainingJobRequest, objects: Iterable[tuple[str, int]], marker_names: tuple[str, ...] = ()
) -> MemoryEstimate:
    """Each rank's memory from the dataset's listing (name, size) — the listing admission already makes — and the
    machine's memory (catalog), by the trainer's own rule; see MEMORY_BUDGET_FRACTION."""
    res = request.resources
    files = []
    for name, size in objects:
        basename = name.rsplit("/", 1)[-1]
        suffix = "." + basename.rsplit(".", 1)[-1].lower() if "." in basename else ""
        file_format = request.dataset.format if request.dataset.format != "auto" else _DATA_SUFFIXES.get(suffix)
        if file_format and not basename.startswith(("_", ".")) and basename not in marker_names:
            files.append((name, size, file_format))
    files.sort()
    local_ranks = max(res.accelerator_count or 1, 1)
    ranks = res.replica_count * local_ranks
    sharded = len(files) >= ranks
    shares = [files[rank::ranks] for rank in range(ranks)] if sharded else [files]
    busiest = max(shares, key=lambda share: sum(size for _, size, _ in share)) if files else []
    machine = catalog.machine(res.machine_type)
    return MemoryEstimate(
        dataset_bytes=sum(size for _, size, _ in files),
        files=len(files),
        ranks=ranks,
        sharded=sharded,
        rank_share_bytes=sum(size for _, size, _ in busiest),
        rank_peak_bytes=round(sum(size * PEAK_PER_STORED_BYTE[f] for _, size, f in busiest)),
        rank_budget_bytes=round((machine.memory_gb if machine else 0) * 1e9 * MEMORY_BUDGET_FRACTION / local_ranks),
    )


def hyperparameter_args(hp: TabularHyperparameters) -> list[str]:
    """The trainer flags of the hyperparameters (bench/model_quality.py runs the trainer with these too)."""
    return [
        "--task", hp.task,
        "--epochs", str(hp.epochs),
        "--early-stopping-patience", str(hp.early_stopping_patience),
        "--batch-size", str(hp.batch_size),
        "--learning-rate", str(hp.learning_rate),
        "--weight-decay", str(hp.weight_decay),
        "--hidden-sizes", ",".join(map(str, hp.hidden_sizes)),
        "--dropout", str(hp.dropout),
        "--seed", str(hp.seed),
        "--grad-accum-steps", str(hp.gradient_accumulation_steps),
        "--checkpoint-every-steps", str(hp.checkpoint_every_steps),
    ]  # fmt: skip


# The argument that gives a run the champion's model folder, to score it on the run's own validation rows (issue 26):
# the built-in trainer and a custom image alike get it when the request's model has a version under its alias.
CHAMPION_ARG = "--champion-model-dir"
# The evidence the challenger does not choose (issue 38): the model's reference set, which champion and challenger
# are both scored on, and the level of the paired interval of the improvement there; the built-in trainer's label
# check before training (trainer/README.md).
REFERENCE_ARG = "--reference-data"
CONFIDENCE_ARG = "--confidence"
MIN_CHAMPION_SKILL_ARG = "--min-champion-skill"
MAX_TARGET_DRIFT_ARG = "--max-target-drift"
# While a model has no reference set, the built-in trainer writes a sample of its validation rows beside the model: the
# first version's become the model's (functions/models/artifacts.py), an adopted model's owner may pick a version's.
WRITE_REFERENCE_ARG = "--write-reference-rows"


@dataclass(frozen=True)
class Evidence:
    """What a run of a model's request is given to be judged by: the champion's folder (None: the model has none
    yet), the model's reference set (None: it has none yet; the built-in trainer is then asked for reference.parquet),
    and the model's rule for the check and the interval."""

    champion_uri: str | None
    reference_uri: str | None
    confidence: float
    min_champion_skill: float
    max_target_drift: float | None

    def args(self, builtin: bool) -> list[str]:
        """The trainer's arguments. Your own code gets the champion, and the reference set only when its model has
        one (an owner named `model.reference`): it must accept them (README "Your own code")."""
        args = [CHAMPION_ARG, self.champion_uri] if self.champion_uri else []
        if self.reference_uri:
            args += [REFERENCE_ARG, self.reference_uri, CONFIDENCE_ARG, str(self.confidence)]
        elif builtin:
            args.append(WRITE_REFERENCE_ARG)
        if builtin and self.champion_uri:
            args += [MIN_CHAMPION_SKILL_ARG, str(self.min_champion_skill)]
            if self.max_target_drift is not None:
                args += [MAX_TARGET_DRIFT_ARG, str(self.max_target_drift)]
        return args


# The built-in trainer's limit on drift against the champion's data (issue 27, point 3; model.max_drift).
MAX_DRIFT_ARG = "--max-drift"


def trainer_args(request: TrainingJobRequest, reduction_server: bool) -> list[str]:
    """Command-line arguments of `python -m trainer.launch` for the built-in tabular trainer. Column names are the
    requester's text and may start with '-': each is passed joined to its option (`--target=NAME`), one argument
    that no parser reads as an option of its own (`--target --nproc-per-node=64` gave the launcher 64 processes a
    node: issue 40, point 6). The URI is a checked gs:// one; the rest are numbers and names from the schema."""
    ds = request.dataset
    args = [
        "--data", ds.uri,
        f"--target={ds.target}",
        "--format", ds.format,
        "--validation-fraction", str(ds.validation_fraction),
        *hyperparameter_args(request.trainer.hyperparameters or TabularHyperparameters()),
    ]  # fmt: skip
    if ds.features:
        args.append(f"--features={','.join(ds.features)}")
    if reduction_server:
        args += ["--bucket-cap-mb", str(REDUCTION_SERVER_BUCKET_CAP_MB)]
    if request.model is not None and request.model.max_drift is not None:
        args += [MAX_DRIFT_ARG, str(request.model.max_drift)]
    return args


def _task_spec(
    request: TrainingJobRequest, settings: Settings, region: str, reduction_server: bool, evidence: Evidence | None
) -> dict[str, Any]:
    """The worker pools' task, keyed as WorkerPoolSpec's oneof: `container_spec` for the built-in trainer and a
    custom image, `python_package_spec` for a package on its executor (custom_job.proto)."""
    trainer = request.trainer
    champion_args = evidence.args(builtin=trainer.builtin is not None) if evidence else []
    if trainer.builtin is not None:
        args = trainer_args(request, reduction_server) + champion_args
        return {"container_spec": {"image_uri": settings.trainer_image, "args": args}}
    args = list(trainer.args or []) + champion_args
    if trainer.python_package is not None:
        package = trainer.python_package
        spec: dict[str, Any] = {
            "executor_image_uri": package_executor_image(package.executor, settings, region),
            "package_uris": list(package.uris),
            "python_module": package.module,
        }
        if trainer.secret_env:  # the launcher goes first: its package, its module (functions/jobs/secret_env.py)
            spec["package_uris"].append(secret_env.launcher_uri(settings.control_bucket))
            spec["python_module"], args = secret_env.package_module_args(package.module, args)
    else:
        spec = {"image_uri": trainer.image}
    if trainer.command:
        command = list(trainer.command)
        spec["command"] = secret_env.image_command(command) if trainer.secret_env else command
    if args:
        spec["args"] = args
    env = [{"name": name, "value": value} for name, value in (trainer.env or {}).items()]
    if trainer.secret_env:  # references only: the values are read on the node, as the job's own account
        env.append({"name": secret_env.SECRET_ENV_VAR, "value": secret_env.references(trainer.secret_env)})
    if env:
        spec["env"] = env
    return {"python_package_spec" if trainer.python_package is not None else "container_spec": spec}


def labels(request: TrainingJobRequest, settings: Settings, request_key: str, attempt: int) -> dict[str, str]:
    deployment = deployment_label(settings.control_bucket)
    return job_labels(request.labels, key_hash(request_key), attempt, request.request_id, deployment)


def display_name(request: TrainingJobRequest, attempt: int) -> str:
    """The request's name, plus " (attempt N)" on a resubmission, shortened to fit Vertex's limit."""
    name = request.display_name or request.request_id
    if attempt == 1:
        return name
    suffix = f" (attempt {attempt})"
    return name[: MAX_DISPLAY_NAME - len(suffix)] + suffix


def _duration(seconds: int) -> str:
    return f"{seconds}s"


def plan_custom_job(
    request: TrainingJobRequest,
    settings: Settings,
    request_key: str,
    attempt: int = 1,
    rung: int = 0,
    evidence: Evidence | None = None,
    team: str | None = None,
) -> Plan:
    """The CustomJob for `attempt` of the request, on rung `rung` of its capacity ladder (0: its own resources);
    `evidence`: what the controller gives a model's run to be judged by (the champion, the reference set); `team`: the
    team it arrived as (its own code's account and folder)."""
    region = request.rungs()[rung].region or settings.region
    request = request.at_rung(rung)
    reducers = plan_reduction_server(request)
    pools = _worker_pools(request, _task_spec(request, settings, region, reducers.enabled, evidence), settings)
    if reducers.enabled:
        pools.append(
            {
                "machine_spec": {"machine_type": reducers.machine_type},
                "replica_count": str(reducers.replicas),
                "container_spec": {"image_uri": reduction_server_image(settings, region)},
            }
        )
    out = output_dir(request, settings, request_key, team)
    job_spec: dict[str, Any] = {
        "worker_pool_specs": pools,
        "scheduling": _scheduling(request),
        "base_output_directory": {"output_uri_prefix": out},
    }
    if request.resources.persistent_resource is not None:  # the rung's own; a team's warm pool is routed at submission
        job_spec["persistent_resource_id"] = request.resources.persistent_resource
    service_account = request.service_account or default_service_account(request, settings, team)
    if service_account:
        job_spec["service_account"] = service_account
    custom_job = {
        "display_name": display_name(request, attempt),
        "job_spec": job_spec,
        "labels": labels(request, settings, request_key, attempt),
    }
    return Plan(custom_job, reducers, estimate_cost(request, reducers), out, region)


# machine_resources.proto / reservation_affinity.proto (google.cloud.aiplatform.v1): "To target a SPECIFIC_RESERVATION
# by name, use compute.googleapis.com/reservation-name as the key" and values "must be the full resource name of the
# reservation" (local/FIDELITY.md "Reservations").
RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"


def reservation_affinity(request: TrainingJobRequest, settings: Settings) -> dict[str, Any] | None:
    """The rung's MachineSpec.reservation_affinity (None: the field is left out, Vertex's own default)."""
    reservation = request.resources.reservation
    if reservation is None:
        return None
    name = reservation.resource_name(settings.project)
    if name is None:
        return {"reservation_affinity_type": "ANY_RESERVATION"}
    return {"reservation_affinity_type": "SPECIFIC_RESERVATION", "key": RESERVATION_NAME_KEY, "values": [name]}


def _worker_pools(request: TrainingJobRequest, task: dict[str, Any], settings: Settings) -> list[dict[str, Any]]:
    """Pool 0 (the primary node) and pool 1 (the other nodes), each running `task` on the rung's machines (and its
    reservation: every GPU node consumes it; the reducers are CPU machines and do not)."""
    res = request.resources
    machine_spec: dict[str, Any] = {
        "machine_type": res.machine_type,
        "accelerator_type": res.accelerator_type,
        "accelerator_count": res.accelerator_count,
    }
    affinity = reservation_affinity(request, settings)
    if affinity is not None:
        machine_spec["reservation_affinity"] = affinity
    disk: dict[str, Any] = {"boot_disk_size_gb": res.boot_disk.size_gb}
    disk_type = catalog.boot_disk_type_to_send(res.machine_type, res.boot_disk.type)
    if disk_type is not None:
        disk["boot_disk_type"] = disk_type
    counts = [1] + ([res.replica_count - 1] if res.replica_count > 1 else [])
    return [{"machine_spec": machine_spec, "replica_count": str(count), **task, "disk_spec": disk} for count in counts]


def _scheduling(request: TrainingJobRequest) -> dict[str, Any]:
    sched = request.scheduling
    scheduling: dict[str, Any] = {
        "timeout": _duration(sched.timeout),
        "restart_job_on_worker_restart": sched.restart_job_on_worker_restart,
        "strategy": sched.strategy.upper(),
    }
    if sched.strategy == "flex_start":
        scheduling["max_wait_duration"] = _duration(sched.max_pending)
    return scheduling
