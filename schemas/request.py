"""TrainingJobRequest (`trainctl/v1`): the contract for one training job, whoever asks for it.

The models are the documentation: every field has a description, every limit is enforced with a message
that names the field and the rule, and the JSON Schema in training_job.schema.json is generated from them.
Rules that involve several fields raise one `cross_field` error whose context lists (sub-path, message)
pairs; `schemas.errors.field_errors` turns those into one error per field.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from schemas import catalog, rules

API_VERSION = "trainctl/v1"
MAX_TIMEOUT_SECONDS = 7 * 86400
MAX_ENV_VARS = 100
# Vertex: a CustomJob's display name "can be up to 128 characters long" (googleapis custom_job.proto).
MAX_DISPLAY_NAME = 128
# Labels the controller sets on every CustomJob; a request may not set them itself.
RESERVED_LABELS = frozenset({"trainctl-key", "trainctl-attempt", "trainctl-request", "managed-by"})
# Variables Vertex or the launcher set on every node; overriding them would break the job.
RESERVED_ENV = frozenset({"CLUSTER_SPEC", "TF_CONFIG", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"})
RESERVED_ENV_PREFIXES = ("AIP_", "CLOUD_ML_")

REQUEST_ID_RE = r"^[a-z0-9][a-z0-9._-]{0,127}$"
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SERVICE_ACCOUNT_RE = r"^[a-z0-9][a-z0-9.-]{0,62}@[a-z0-9.-]+\.gserviceaccount\.com$"
_DURATION_PATTERN = r"^\s*(\d+|(\d+d)?(\d+h)?(\d+m)?(\d+s)?)\s*$"


class _Strict(BaseModel):
    # strict: "10" is not a number and 10 is not a string, exactly as the JSON Schema says.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _cross_field(problems: list[tuple[str, str]]) -> PydanticCustomError:
    return PydanticCustomError(
        "cross_field",
        "{message}",
        {"message": "; ".join(f"{path}: {msg}" if path else msg for path, msg in problems), "problems": problems},
    )


def _check_gs_uri(value: str) -> str:
    problem = rules.gs_uri_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _check_duration(value: Any) -> int:
    seconds = rules.parse_duration(value)
    if seconds <= 0:
        raise ValueError(f"a duration must be positive, got {value!r}")
    return seconds


def _check_no_control_chars(value: str) -> str:
    problem = rules.control_char_problem(value)
    if problem:
        raise ValueError(problem)
    return value


GsUri = Annotated[
    str,
    AfterValidator(_check_gs_uri),
    Field(json_schema_extra={"pattern": "^gs://"}, examples=["gs://my-data-bucket/churn/2026-11-22/"]),
]
Duration = Annotated[
    int,
    BeforeValidator(_check_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 1, "description": "seconds"},
                {"type": "string", "pattern": _DURATION_PATTERN, "examples": ["30m", "24h", "1h30m", "7d"]},
            ]
        }
    ),
]
PlainText = Annotated[str, AfterValidator(_check_no_control_chars)]


class Dataset(_Strict):
    """Where the training data is and how to read it."""

    uri: GsUri = Field(description="gs:// folder of shards or a single file.")
    format: Literal["auto", "csv", "parquet"] = Field("auto", description="auto: from the file extensions.")
    target: PlainText = Field(min_length=1, max_length=256, description="Name of the label column.")
    features: list[Annotated[PlainText, Field(min_length=1, max_length=256)]] | None = Field(
        None, max_length=10_000, description="Feature columns to use; default: every column but the target."
    )
    validation_fraction: float = Field(0.2, ge=0.0, lt=1.0, description="Share of rows held out for validation.")


class TabularHyperparameters(_Strict):
    """Hyperparameters of the built-in tabular MLP trainer."""

    epochs: int = Field(
        60,
        ge=1,
        le=10_000,
        description="Most epochs to train; with early_stopping_patience a run usually stops well before.",
    )
    batch_size: int = Field(256, ge=1, le=1_048_576, description="Per process (GPU) batch size.")
    learning_rate: float = Field(1e-3, gt=0.0, le=10.0)
    weight_decay: float = Field(0.01, ge=0.0, le=1.0)
    hidden_sizes: list[Annotated[int, Field(ge=1, le=65_536)]] = Field(
        default_factory=lambda: [256, 128], min_length=1, max_length=16
    )
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    task: Literal["auto", "classification", "regression"] = "auto"
    seed: int = Field(0, ge=0, le=2**31 - 1)
    gradient_accumulation_steps: int = Field(1, ge=1, le=1024)
    checkpoint_every_steps: int = Field(500, ge=1, le=10_000_000)
    early_stopping_patience: int = Field(
        8,
        ge=0,
        le=10_000,
        description="Stop after this many epochs without a better validation metric (0: train every epoch). "
        "The model kept is always the best epoch's.",
    )


class Trainer(_Strict):
    """Either the built-in tabular trainer or your own container image."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        json_schema_extra={"oneOf": [{"required": ["builtin"]}, {"required": ["image"]}]},
    )

    builtin: Literal["tabular"] | None = Field(None, description="The built-in trainer to run.")
    hyperparameters: TabularHyperparameters | None = Field(None, description="Only with builtin.")
    image: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        pattern=r"^[a-z0-9.-]+(:[0-9]+)?/[^\s]+$",
        description="Container image URI; its registry prefix must be on the controller's allow-list.",
        examples=["us-docker.pkg.dev/my-project/training/my-trainer:1.2.0"],
    )
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=256, description="Overrides the image's ENTRYPOINT. Never run through a shell."
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(None, max_length=1024)
    env: dict[str, Annotated[str, Field(max_length=32_768)]] | None = Field(
        None, description=f"Environment variables for every node; at most {MAX_ENV_VARS}, names are C identifiers."
    )

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str] | None) -> dict[str, str] | None:
        if env is None:
            return env
        if len(env) > MAX_ENV_VARS:
            raise ValueError(f"at most {MAX_ENV_VARS} variables, got {len(env)}")
        for name in env:
            if not _C_IDENTIFIER.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid variable name (a C identifier: letters, digits, '_')")
            if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
                raise ValueError(f"{name!r} is set by Vertex AI on every node and may not be overridden")
        return env

    @model_validator(mode="after")
    def _one_kind(self) -> Trainer:
        problems: list[tuple[str, str]] = []
        if (self.builtin is None) == (self.image is None):
            problems.append(("", "set exactly one of `builtin: tabular` or `image: <container image URI>`"))
        if self.image is None:
            for name in ("command", "args", "env"):
                if getattr(self, name) is not None:
                    problems.append((name, "only with a custom `image`"))
        if self.builtin is None and self.hyperparameters is not None:
            problems.append(("hyperparameters", "only with `builtin: tabular`"))
        if problems:
            raise _cross_field(problems)
        return self


class BootDisk(_Strict):
    type: Literal["pd-ssd", "pd-standard", "hyperdisk-balanced"] | None = Field(
        None,
        description="Default: the machine series' own (hyperdisk-balanced on A3 Ultra, A4 and G4, which take "
        "nothing else; pd-ssd elsewhere). N1, A2 and G2 take pd-ssd or pd-standard.",
    )
    size_gb: int = Field(100, ge=100, le=64_000)


class Resources(_Strict):
    """The machines: every node (replica) gets the same machine and GPUs."""

    machine_type: str = Field(description="A GPU machine type from the catalog.", examples=["a2-highgpu-2g"])
    accelerator_type: str | None = Field(
        None, description="Default: the machine's built-in GPU (required on N1 machines).", examples=["NVIDIA_L4"]
    )
    accelerator_count: int | None = Field(None, ge=1, le=16, description="GPUs per node; default: built-in count.")
    replica_count: int = Field(
        1,
        ge=1,
        le=512,
        description="Nodes. Node 0 is the chief (worker pool 0, one replica); the rest form worker pool 1.",
    )
    boot_disk: BootDisk = Field(default_factory=BootDisk)

    @property
    def total_gpus(self) -> int:
        return (self.accelerator_count or 0) * self.replica_count

    @model_validator(mode="before")
    @classmethod
    def _fill_builtin_gpus(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("machine_type"), str):
            m = catalog.machine(data["machine_type"])
            if m is not None and m.accelerator_optimized:
                data = dict(data)
                data.setdefault("accelerator_type", m.builtin_accelerator)
                data.setdefault("accelerator_count", m.builtin_count)
        return data

    @model_validator(mode="after")
    def _valid_combination(self) -> Resources:
        m = catalog.machine(self.machine_type)
        if m is None:
            raise _cross_field([("machine_type", catalog.unknown_machine(self.machine_type))])
        valid = catalog.valid_accelerators(self.machine_type)
        if self.accelerator_type is None:
            raise _cross_field(
                [("accelerator_type", f"{self.machine_type} has no built-in GPUs; set one of {', '.join(valid)}")]
            )
        if self.accelerator_count is None:
            counts = valid.get(self.accelerator_type)
            if counts is None:
                raise _cross_field(
                    [("accelerator_type", catalog.unknown_accelerator(self.machine_type, self.accelerator_type))]
                )
            raise _cross_field(
                [
                    (
                        "accelerator_count",
                        f"required for {self.machine_type} with {self.accelerator_type}; "
                        f"valid counts: {', '.join(map(str, counts))}",
                    )
                ]
            )
        problem = catalog.accelerator_problem(self.machine_type, self.accelerator_type, self.accelerator_count)
        if problem:
            path = "accelerator_type" if self.accelerator_type not in valid else "accelerator_count"
            raise _cross_field([(path, problem)])
        if self.boot_disk.type is not None:
            problem = catalog.boot_disk_problem(self.machine_type, self.boot_disk.type)
            if problem:
                raise _cross_field([("boot_disk.type", problem)])
        if self.total_gpus < 2:
            raise _cross_field(
                [
                    (
                        "accelerator_count",
                        f"a job needs at least 2 GPUs in total, got {self.accelerator_count} × "
                        f"{self.replica_count} node(s); raise accelerator_count or replica_count",
                    )
                ]
            )
        return self


class ReductionServer(_Strict):
    """Vertex AI Reduction Server (worker pool 2) for multi-node all-reduce on N1/A2/G2 machines."""

    mode: Literal["auto", "on", "off"] = Field(
        "auto",
        description="auto: on for multi-node jobs on N1/A2/G2 machines, unless FLEX_START; for the built-in "
        "trainer only when its gradients fill at least one 64 MB bucket.",
    )
    replica_count: int | None = Field(None, ge=1, le=256, description="Default: sized to the workers' egress.")
    machine_type: Literal["n1-highcpu-16", "n1-highcpu-32", "n2-highcpu-16", "n2-highcpu-32"] | None = Field(
        None, description=f"Default: {catalog.REDUCER_MACHINE}."
    )

    @model_validator(mode="after")
    def _overrides_need_it_on(self) -> ReductionServer:
        if self.mode == "off":
            problems = [
                (name, "only with mode `on` or `auto`")
                for name in ("replica_count", "machine_type")
                if getattr(self, name) is not None
            ]
            if problems:
                raise _cross_field(problems)
        return self


class Scheduling(_Strict):
    strategy: Literal["standard", "spot", "flex_start"] = Field(
        "standard", description="spot: preemptible, cheaper; flex_start: Dynamic Workload Scheduler queue."
    )
    timeout: Duration = Field(24 * 3600, description="Longest a run may take (≤ 7 days).")
    max_pending: Duration = Field(
        3600, description="Longest a job may wait in QUEUED/PENDING before it is cancelled as stuck."
    )
    max_silence: Duration = Field(
        1800,
        description="Longest the built-in trainer's progress record (checkpoints/progress.json) may stand still "
        "while the job is RUNNING before the job is taken for hung: cancelled and resubmitted while attempts "
        "remain. A job that writes no progress record is never judged.",
    )
    restart_job_on_worker_restart: bool = Field(
        True, description="Restart the whole job when a worker restarts (DDP needs a fixed world)."
    )
    max_attempts: int = Field(
        3, ge=1, le=10, description="Submissions in all, counting resubmissions after capacity/preemption/internal."
    )

    @field_validator("timeout", "max_pending", "max_silence")
    @classmethod
    def _at_most_seven_days(cls, seconds: int) -> int:
        if seconds > MAX_TIMEOUT_SECONDS:
            raise ValueError(f"at most 7 days ({MAX_TIMEOUT_SECONDS} s), got {rules.format_duration(seconds)}")
        return seconds


class TrainingJobRequest(_Strict):
    """One training job. `request_id` is the idempotency key: the same id never starts a second job."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, title="TrainingJobRequest")

    api_version: Literal["trainctl/v1"] = Field(description="Schema version.")
    request_id: str = Field(
        pattern=REQUEST_ID_RE,
        description="Idempotency key: lowercase letters, digits, '.', '_', '-'; up to 128 characters.",
        examples=["churn-2026-11-22"],
    )
    display_name: PlainText | None = Field(
        None,
        min_length=1,
        max_length=MAX_DISPLAY_NAME,
        description="Shown in the Vertex console; default: request_id. Retries append ' (attempt N)', "
        "shortening the name to fit Vertex's limit.",
    )
    dataset: Dataset
    trainer: Trainer
    resources: Resources
    reduction_server: ReductionServer = Field(default_factory=ReductionServer)
    scheduling: Scheduling = Field(default_factory=Scheduling)
    output_dir: GsUri | None = Field(None, description="Default: gs://<control bucket>/runs/<request_id>/.")
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="GCP labels for the CustomJob (keys and values ≤ 63 of [a-z0-9_-], keys start with a letter).",
    )
    service_account: str | None = Field(
        None,
        pattern=_SERVICE_ACCOUNT_RE,
        description="Run-as service account; must be on the controller's allow-list.",
    )

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        problems = rules.labels_problems(labels)
        problems += [(key, f"label {key!r} is set by trainctl itself") for key in labels if key in RESERVED_LABELS]
        if len(labels) > rules.MAX_LABELS - len(RESERVED_LABELS):
            problems.append(
                ("", f"at most {rules.MAX_LABELS - len(RESERVED_LABELS)} labels (trainctl adds {len(RESERVED_LABELS)})")
            )
        if problems:
            raise _cross_field(problems)
        return labels

    @model_validator(mode="after")
    def _scheduling_fits_resources(self) -> TrainingJobRequest:
        problems: list[tuple[str, str]] = []
        accel = self.resources.accelerator_type
        if self.scheduling.strategy == "flex_start" and accel not in catalog.FLEX_START_ACCELERATORS:
            problems.append(
                (
                    "scheduling.strategy",
                    f"flex_start needs L4, A100, H100, H200 or B200 GPUs, got {accel}",
                )
            )
        if self.reduction_server.mode == "on":
            family = self.resources.machine_type.split("-", 1)[0]
            if self.resources.replica_count < 2:
                problems.append(("reduction_server.mode", "`on` needs a multi-node job (resources.replica_count ≥ 2)"))
            if family not in catalog.REDUCTION_SERVER_FAMILIES:
                problems.append(
                    (
                        "reduction_server.mode",
                        f"`on` needs N1, A2 or G2 machines; {self.resources.machine_type} uses GPUDirect instead",
                    )
                )
            if self.scheduling.strategy == "flex_start":
                problems.append(
                    ("reduction_server.mode", "`on` cannot be combined with flex_start (all pools must match)")
                )
        if problems:
            raise _cross_field(problems)
        return self
