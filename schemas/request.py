"""TrainingJobRequest (`trainctl/v1`): the contract for one training job, whoever asks for it.

The models are the documentation: every field has a description, every limit is enforced with a message
that names the field and the rule, and the JSON Schema in training_job.schema.json is generated from them.
Rules that involve several fields raise one `cross_field` error whose context lists (sub-path, message)
pairs; `schemas.errors.field_errors` turns those into one error per field.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
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

from schemas import catalog, executors, rules
from schemas.images import IMAGE_PATTERN
from schemas.secrets import secret_version_problem
from schemas.trainer_env import env_name_problem

API_VERSION = "trainctl/v1"
MAX_TIMEOUT_SECONDS = 7 * 86400
MAX_ENV_VARS = 100
# trainer.secret_env: at most this many references; with trainer.env they fill at most MAX_ENV_VARS - 1 of a
# container's variables, since the references themselves travel in one more (TRAINCTL_SECRET_ENV).
MAX_SECRET_ENV_VARS = 32
# Vertex: a CustomJob's display name "can be up to 128 characters long" (googleapis custom_job.proto).
MAX_DISPLAY_NAME = 128
# Labels the controller sets on every CustomJob (functions/cloud/job_labels.py), spelled with underscores: Vertex's list
# filter documents `labels.keyA=valueA` and says nothing of a hyphen in a key (issue 25, point 3).
JOB_LABELS = ("trainctl_key", "trainctl_attempt", "trainctl_request", "trainctl_deployment")
# What jobs created before issue 25 carry instead (`managed-by=trainctl` where trainctl_deployment is now); such a
# job may still be running.
LEGACY_JOB_LABELS = ("trainctl-key", "trainctl-attempt", "trainctl-request", "managed-by")
# A request may not set any of them itself.
RESERVED_LABELS = frozenset({*JOB_LABELS, *LEGACY_JOB_LABELS})

REQUEST_ID_RE = r"^[a-z0-9][a-z0-9._-]{0,127}$"
# A Google Cloud region name (us-central1, europe-west4, northamerica-northeast2, …).
REGION_RE = r"^[a-z]+-[a-z]+[0-9]{1,2}$"
MAX_FALLBACKS = 5
Strategy = Literal["standard", "spot", "flex_start"]
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


def _check_column_name(value: str) -> str:
    # Any other name, '-x' and '--nproc-per-node=64' included, reaches the trainer as `--target=NAME`; Python's
    # argparse drops a value that is exactly '--' (it takes it for the end of the options).
    if value == "--":
        raise ValueError("a column may not be named '--': the trainer's command line cannot carry it; rename it")
    return value


ColumnName = Annotated[PlainText, AfterValidator(_check_column_name), Field(min_length=1, max_length=256)]


class Dataset(_Strict):
    """Where the training data is and how to read it."""

    uri: GsUri = Field(description="gs:// folder of shards or a single file.")
    format: Literal["auto", "csv", "parquet"] = Field("auto", description="auto: from the file extensions.")
    target: ColumnName = Field(description="Name of the label column.")
    features: list[ColumnName] | None = Field(
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


_MODULE_RE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
# Vertex: PythonPackageSpec.package_uris, "The maximum number of package URIs is 100" (custom_job.proto).
MAX_PACKAGE_URIS = 100


# `trainctl submit --source` names each archive it uploads by its content: …/sha256-<hex>/<name>.tar.gz (under
# packages/<team>/ when the CLI knows its team, else packages/).
_PACKAGE_DIGEST_RE = re.compile(r"/sha256-([0-9a-f]{64})/[^/]+$")


def package_digest(uri: str) -> str | None:
    """The sha256 (hex) a content-addressed package URI names, or None for any other URI. The controller reads the
    object and compares before the digest is written anywhere (functions/intake/package_check.py)."""
    match = _PACKAGE_DIGEST_RE.search(uri)
    return match.group(1) if match else None


# `code_digest` lists at most this many package digests (8 × 71 bytes); a request with more carries one digest of the
# whole list instead, so that no event, record or history metadata field grows with a request's package count
# (issue 40, point 2: 60 URIs made ~4 KiB, past Cloud Storage's custom-metadata limit, and the run's outcome was lost).
MAX_LISTED_DIGESTS = 8
LIST_DIGEST_PREFIX = "sha256-list:"


def code_digest(request: dict[str, Any]) -> str | None:
    """The digest of a request's package code when every package URI is content-addressed as `trainctl submit
    --source` names them, else None: `sha256:<hex>` per package, comma-separated in install order, for up to
    MAX_LISTED_DIGESTS packages; beyond, `sha256-list:<hex>`, the sha256 of that comma-separated list (so at most
    575 characters whatever the request). Read from the request as the ledger keeps it (a dict); each package is
    verified at intake against its object's bytes."""
    package = (request.get("trainer") or {}).get("python_package") or {}
    found = [package_digest(uri) for uri in package.get("uris") or []]
    if not found or not all(found):
        return None
    listed = ",".join(f"sha256:{digest}" for digest in found)
    if len(found) <= MAX_LISTED_DIGESTS:
        return listed
    return LIST_DIGEST_PREFIX + hashlib.sha256(listed.encode()).hexdigest()


def _check_package_uri(value: str) -> str:
    if value.endswith("/"):
        raise ValueError(f"{value} is a folder; name the package file itself (gs://bucket/path/pkg-1.0.tar.gz)")
    return value


class PythonPackage(_Strict):
    """Your own training code as a Python package, run on one of Vertex's prebuilt PyTorch training containers:
    no image to build (Vertex's pythonPackageSpec). `trainctl submit --source DIR` packages a folder and fills
    `uris`. Custom code: off unless the operator turns it on."""

    uris: list[Annotated[GsUri, AfterValidator(_check_package_uri)]] = Field(
        min_length=1,
        max_length=MAX_PACKAGE_URIS,
        description="gs:// URIs of the package's source distribution (and any other packages it needs that the "
        "executor lacks), installed in order on every node.",
        examples=[["gs://my-data-bucket/packages/sha256-…/my_pkg-1.0.tar.gz"]],
    )
    module: str = Field(
        pattern=_MODULE_RE,
        max_length=256,
        description="The module every node runs with `python -m`.",
        examples=["my_pkg.train"],
    )
    executor: str = Field(
        pattern=executors.NAME_PATTERN,
        description="The prebuilt PyTorch training container it runs on, by name, from the deployment's list "
        "(Terraform's executors, TRAINCTL_EXECUTORS; by default Google's, schemas/executors.py: "
        f"{', '.join(executors.EXECUTORS)}). Admission refuses a name the list lacks, a GPU the executor has no "
        "kernels for, and an executor past its end of availability.",
        examples=["pytorch-2.4"],
    )


class Trainer(_Strict):
    """The built-in tabular trainer, your own container image, or your own Python package."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        json_schema_extra={
            "oneOf": [{"required": ["builtin"]}, {"required": ["image"]}, {"required": ["python_package"]}]
        },
    )

    builtin: Literal["tabular"] | None = Field(None, description="The built-in trainer to run.")
    hyperparameters: TabularHyperparameters | None = Field(None, description="Only with builtin.")
    image: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        pattern=IMAGE_PATTERN,
        description="Container image URI; it must be on the controller's allow-list of image prefixes "
        "(TRAINCTL_ALLOWED_IMAGE_PREFIXES). The built-in trainer's image, and every image in its repository, runs "
        "only `builtin: tabular`.",
        examples=["us-docker.pkg.dev/my-project/training/my-trainer:1.2.0"],
    )
    python_package: PythonPackage | None = Field(
        None,
        description="Your own code as a Python package on a prebuilt PyTorch container (README: Your own code); the "
        "controller must allow it (TRAINCTL_ALLOW_PYTHON_PACKAGES).",
    )
    command: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=256, description="Overrides the image's ENTRYPOINT. Never run through a shell."
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=1024, description="Arguments of the image's command, or of the package's module."
    )
    env: dict[str, Annotated[str, Field(max_length=32_768)]] | None = Field(
        None,
        description=f"Environment variables for every node; at most {MAX_ENV_VARS}, names are C identifiers. Names "
        "the platform sets (AIP_*, CLOUD_ML_*, CLUSTER_SPEC, TF_CONFIG, MASTER_*, WORLD_SIZE, RANK, torchrun's, "
        "TRAINCTL_*) and names that change which code runs or whom the job trusts (LD_*, PYTHON*, PATH, GOOGLE_*, "
        "*_PROXY, CA bundles, NCCL plugins, TORCH*, PYTORCH_*, TMPDIR, XDG_*, PIP_*, HF_* …) are refused, in any "
        "case; schemas/trainer_env.py lists them.",
    )

    secret_env: dict[str, str] | None = Field(
        None,
        description="Environment variables whose values come from Secret Manager, by reference: NAME → "
        "projects/PROJECT/secrets/SECRET/versions/N (a version number, so that every node and attempt reads the same "
        "value). Every node reads each value when it starts, as the job's own service account, which needs "
        "roles/secretmanager.secretAccessor on the secret (the operator grants it: Terraform's job_secrets), and sets "
        "it in your code's environment only; trainctl records and shows the names and references, never a value. "
        f"At most {MAX_SECRET_ENV_VARS}; names follow trainer.env's rules and may not repeat one of its names. Only "
        "with a custom `image`, which must then give `command` and have python3, or a `python_package`.",
        examples=[{"WANDB_API_KEY": "projects/my-project/secrets/wandb-api-key/versions/3"}],
        json_schema_extra={
            "additionalProperties": {"type": "string", "pattern": "^projects/[^/]+/secrets/[^/]+/versions/[1-9][0-9]*$"}
        },
    )

    @property
    def is_custom_code(self) -> bool:
        """Whether the request's own code runs (an image or a package), as the custom account, into custom-runs/."""
        return self.builtin is None

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str] | None) -> dict[str, str] | None:
        if env is None:
            return env
        if len(env) > MAX_ENV_VARS:
            raise ValueError(f"at most {MAX_ENV_VARS} variables, got {len(env)}")
        problems = []
        for name in env:
            if not _C_IDENTIFIER.fullmatch(name):
                problems.append(f"{name!r} is not a valid variable name (a C identifier: letters, digits, '_')")
            elif problem := env_name_problem(name):
                problems.append(problem)
        if problems:
            raise ValueError("; ".join(problems))
        return env

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, secret_env: dict[str, str] | None) -> dict[str, str] | None:
        if secret_env is None:
            return secret_env
        if len(secret_env) > MAX_SECRET_ENV_VARS:
            raise ValueError(f"at most {MAX_SECRET_ENV_VARS} variables, got {len(secret_env)}")
        problems = []
        for name, reference in secret_env.items():
            if not _C_IDENTIFIER.fullmatch(name):
                problems.append(f"{name!r} is not a valid variable name (a C identifier: letters, digits, '_')")
            elif problem := env_name_problem(name):
                problems.append(problem)
            if reference_problem := secret_version_problem(reference):
                problems.append(f"{name!r}: {reference_problem}")
        if problems:
            raise ValueError("; ".join(problems))
        return secret_env

    def _secret_env_problems(self) -> list[tuple[str, str]]:
        """secret_env against the rest of the trainer: no name twice, the container's variables, a command to run."""
        problems: list[tuple[str, str]] = []
        secret_env, env = self.secret_env or {}, self.env or {}
        if twice := sorted(set(secret_env) & set(env)):
            problems.append(("secret_env", f"{', '.join(twice)} also in trainer.env: give each variable once"))
        if len(secret_env) + len(env) > MAX_ENV_VARS - 1:
            problems.append(
                (
                    "secret_env",
                    f"env and secret_env hold {len(env) + len(secret_env)} variables together; at most "
                    f"{MAX_ENV_VARS - 1} (a container takes {MAX_ENV_VARS}, and trainctl's references take one)",
                )
            )
        if self.python_package is not None and len(self.python_package.uris) > MAX_PACKAGE_URIS - 1:
            problems.append(
                (
                    "python_package.uris",
                    f"at most {MAX_PACKAGE_URIS - 1} with secret_env: a pool installs at most {MAX_PACKAGE_URIS} "
                    "packages, and trainctl's secret launcher is one",
                )
            )
        if self.image is not None and self.command is None:
            problems.append(
                (
                    "command",
                    "required with secret_env: trainctl's secret launcher runs first on every node (python3 in your "
                    "image) and then your command, which trainctl cannot read from the image",
                )
            )
        return problems

    @model_validator(mode="after")
    def _one_kind(self) -> Trainer:
        problems: list[tuple[str, str]] = []
        kinds = [self.builtin, self.image, self.python_package]
        if sum(kind is not None for kind in kinds) != 1:
            problems.append(
                (
                    "",
                    "set exactly one of `builtin: tabular`, `image: <container image URI>` or "
                    "`python_package: {uris, module, executor}`",
                )
            )
        if self.builtin is not None:
            for name in ("args", "env", "secret_env"):
                if getattr(self, name) is not None:
                    problems.append((name, "only with a custom `image` or a `python_package`"))
        if self.secret_env:
            problems += self._secret_env_problems()
        if self.image is None and self.command is not None:
            problems.append(("command", "only with a custom `image` (a package's command is `python -m <module>`)"))
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


# Compute Engine's names (RFC 1035: a lowercase letter, then letters, digits, hyphens, not ending in a hyphen, at most
# 63 characters), project ids (6-30 characters: a letter first, no trailing hyphen) and zones (a region and a letter).
RESERVATION_NAME_RE = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
PROJECT_ID_RE = r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$"
ZONE_RE = r"^[a-z]+-[a-z]+[0-9]{1,2}-[a-z]$"
# CreatePersistentResourceRequest.persistent_resource_id (googleapis persistent_resource_service.proto): "The maximum
# length is 63 characters, and valid characters are /^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$/".
PERSISTENT_RESOURCE_ID_RE = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"


class Reservation(_Strict):
    """A Compute Engine reservation the rung's nodes consume (machineSpec.reservationAffinity, local/FIDELITY.md
    "Reservations"). Vertex consumes one only when its machine shape (machine type, GPU type and count) matches the
    rung's exactly; trainctl reads it at admission and refuses a mismatch."""

    affinity: Literal["any", "specific"] = Field(
        description="specific: the named reservation only (ANY_RESERVATION's fallback to on-demand is not taken); "
        "any: whatever matching reservation the project has, else on-demand."
    )
    name: str | None = Field(
        None, pattern=RESERVATION_NAME_RE, description="The reservation's name (specific only).", examples=["a100-res"]
    )
    project: str | None = Field(
        None,
        pattern=PROJECT_ID_RE,
        description="The project that owns it (a shared reservation's owner); default: the deployment's project.",
    )
    zone: str | None = Field(
        None, pattern=ZONE_RE, description="Its zone, in the rung's region (specific only).", examples=["us-central1-a"]
    )

    @model_validator(mode="after")
    def _specific_names_one(self) -> Reservation:
        problems: list[tuple[str, str]] = []
        if self.affinity == "specific":
            problems += [
                (
                    name,
                    "required with affinity `specific` (Vertex takes projects/P/zones/Z/reservations/N)",
                )
                for name in ("name", "zone")
                if getattr(self, name) is None
            ]
        else:
            problems += [
                (name, "only with affinity `specific`")
                for name in ("name", "project", "zone")
                if getattr(self, name) is not None
            ]
        if problems:
            raise _cross_field(problems)
        return self

    def resource_name(self, default_project: str) -> str | None:
        """projects/P/zones/Z/reservations/N, the value Vertex takes (None for `any`)."""
        if self.affinity != "specific":
            return None
        return f"projects/{self.project or default_project}/zones/{self.zone}/reservations/{self.name}"


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
    reservation: Reservation | None = Field(
        None,
        description="Consume a Compute Engine reservation (already paid for): its machine shape must be exactly this "
        "block's; only with strategy `standard`.",
    )
    persistent_resource: str | None = Field(
        None,
        pattern=PERSISTENT_RESOURCE_ID_RE,
        description="Run on the nodes of a Vertex persistent resource of the deployment's project and region, by its "
        "id (jobSpec.persistentResourceId): each worker pool's machine, GPUs and boot disk must match one of its "
        "resource pools exactly, within its replicas; only with strategy `standard`, without a reservation. A team's "
        "warm pools are used without naming them (README, Warm pools).",
        examples=["my-a100-cluster"],
    )

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
    strategy: Strategy = Field(
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
        3,
        ge=1,
        le=10,
        description="Submissions in all, counting resubmissions after capacity/preemption/internal failures and "
        "every move down the fallbacks ladder.",
    )
    max_preemptions: int = Field(
        1,
        ge=0,
        le=10,
        description="With fallbacks: attempts on one rung that may end preempted (after Vertex's own restarts: "
        "up to 6 for Spot) and be tried again there; one more moves to the next rung. A rung's own "
        "max_preemptions overrides it.",
    )

    @field_validator("timeout", "max_pending", "max_silence")
    @classmethod
    def _at_most_seven_days(cls, seconds: int) -> int:
        if seconds > MAX_TIMEOUT_SECONDS:
            raise ValueError(f"at most 7 days ({MAX_TIMEOUT_SECONDS} s), got {rules.format_duration(seconds)}")
        return seconds


class Fallback(_Strict):
    """One rung of the capacity ladder: what to try when the rung before it cannot run (a stockout after
    Vertex's own retries, a quota wait longer than max_pending, stuck, or preempted too often)."""

    resources: Resources = Field(description="A full resources block, validated like the request's own.")
    strategy: Strategy | None = Field(None, description="Default: scheduling.strategy.")
    region: str | None = Field(
        None,
        pattern=REGION_RE,
        description="Default: the deployment's region; others must be on its TRAINCTL_ALLOWED_REGIONS list.",
        examples=["europe-west4"],
    )
    max_pending: Duration | None = Field(None, description="Default: scheduling.max_pending.")
    max_preemptions: int | None = Field(None, ge=0, le=10, description="Default: scheduling.max_preemptions.")

    @field_validator("max_pending")
    @classmethod
    def _at_most_seven_days(cls, seconds: int | None) -> int | None:
        if seconds is not None and seconds > MAX_TIMEOUT_SECONDS:
            raise ValueError(f"at most 7 days ({MAX_TIMEOUT_SECONDS} s), got {rules.format_duration(seconds)}")
        return seconds


# Vertex Model Registry's rules (googleapis google/cloud/aiplatform/v1/model_service.proto): a model id "may be up
# to 63 characters, and valid characters are [a-z0-9_-]. The first character cannot be a number or hyphen"
# (UploadModelRequest.model_id). An alias: MergeVersionAliasesRequest says [a-z][a-zA-Z0-9-]{0,126}[a-z-0-9],
# Model.version_aliases [a-z][a-zA-Z0-9-]{0,126}[a-z0-9], the model-alias page [a-z][a-z0-9-]{0,126}[a-z0-9]
# (cloud.google.com/vertex-ai/docs/model-registry/model-alias); only what all three accept is taken.
MODEL_ID_RE = re.compile(r"[a-z_][a-z0-9_-]{0,62}")
MODEL_ALIAS_RE = re.compile(r"[a-z][a-z0-9-]{0,126}[a-z0-9]")
# Vertex gives a model's first version the alias `default` and keeps exactly one version under it (model.proto,
# Model.version_aliases); promotion moves it with the model block's alias, so the block cannot name it.
DEFAULT_ALIAS = "default"
# The metrics the built-in trainer writes to metrics.json, and which way is better (trainer/model/objective.py).
BUILTIN_METRIC_GOALS: dict[str, Literal["maximize", "minimize"]] = {
    "val_accuracy": "maximize",
    "val_rmse": "minimize",
    "val_loss": "minimize",
}
# The metric the built-in trainer ranks its epochs by, per task (metrics.json's `task`).
TASK_METRICS = {"classification": "val_accuracy", "regression": "val_rmse"}
_METRIC_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")


def _matching(pattern: re.Pattern[str], rule: str) -> Any:
    """A validator of a whole-string pattern whose refusal states the rule in words."""

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{rule}, got {value[:80]!r}")
        return value

    return check


def _not_default(value: str) -> str:
    if value == DEFAULT_ALIAS:
        raise ValueError(
            "`default` is moved by trainctl together with the model's alias; choose another name, such as champion"
        )
    return value


_check_model_id = _matching(
    MODEL_ID_RE,
    "must be 1-63 lowercase letters, digits, '_' or '-', not starting with a digit or '-' (Vertex AI's model id rule)",
)
_check_alias = _matching(
    MODEL_ALIAS_RE,
    "must be 2-128 lowercase letters, digits or '-', starting with a letter and ending with a letter or digit "
    "(Vertex AI's version alias rule)",
)
_check_metric_name = _matching(
    _METRIC_NAME_RE, "must be the name of an entry of metrics.json: 1-128 letters, digits, '_', '.' or '-'"
)


# An HTTP path a serving container answers on: starts with '/', printable ASCII with no spaces (Vertex sends its
# requests there: ModelContainerSpec.predict_route and health_route).
_ROUTE_RE = re.compile(r"/[!-~]{0,1023}")
_check_route = _matching(_ROUTE_RE, "must be an HTTP path starting with '/' (printable ASCII, no spaces, ≤ 1024)")


class ServingRoutes(_Strict):
    """Where the serving container answers (ModelContainerSpec.predict_route and health_route)."""

    predict: Annotated[str, AfterValidator(_check_route)] = Field(
        description="The path Vertex forwards prediction requests to, as POSTs (predictRoute).", examples=["/predict"]
    )
    health: Annotated[str, AfterValidator(_check_route)] = Field(
        description="The path Vertex sends health checks to, as GETs; 200 once the model is ready (healthRoute).",
        examples=["/health"],
    )


class Serving(_Strict):
    """The container that serves your own code's versions: Vertex AI's ModelContainerSpec (imageUri, command, args,
    ports, predictRoute, healthRoute). It must follow Vertex's custom-container contract
    (https://cloud.google.com/vertex-ai/docs/predictions/custom-container-requirements): an HTTP server on `port`,
    reading the model from AIP_STORAGE_URI."""

    image: str = Field(
        min_length=1,
        max_length=1024,
        pattern=IMAGE_PATTERN,
        description="The serving image (imageUri); the same allow-list rules as trainer.image.",
        examples=["us-docker.pkg.dev/my-project/serving/my-server:1.2.0"],
    )
    command: list[Annotated[str, Field(max_length=4096)]] = Field(
        min_length=1,
        max_length=256,
        description="What runs when the container starts (command, overriding the image's ENTRYPOINT); never through "
        "a shell.",
        examples=[["python", "-m", "my_package.serve"]],
    )
    args: list[Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=1024, description="Arguments of the command (args)."
    )
    routes: ServingRoutes
    port: int = Field(
        ge=1,
        le=65535,
        description="The port the server listens on (ports[0].containerPort); Vertex sends predictions and health "
        "checks there.",
        examples=[8080],
    )


ENDPOINT_NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
MACHINE_TYPE_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$"


class DeployBlock(_Strict):
    """Where the model's promoted versions serve, and how a new one is rolled out: deployed beside the serving
    version with `canary_percent` of the traffic, watched for `bake`, then given all of it — or rolled back by itself
    (traffic back, the new version undeployed, the alias back) when its errors or latency over the bake break the
    limits. Owned and fixed with the model's rule: its owner changes it (`trainctl models deploy`)."""

    endpoint: str = Field(
        min_length=1,
        max_length=63,
        pattern=ENDPOINT_NAME_PATTERN,
        description="The endpoint's name (its display name and trainctl_endpoint label); created on first use.",
        examples=["churn-online"],
    )
    machine_type: str = Field(
        "n1-standard-2",
        max_length=64,
        pattern=MACHINE_TYPE_PATTERN,
        description="The serving machine type (DedicatedResources.machine_spec.machine_type).",
    )
    accelerator_type: str | None = Field(
        None, max_length=64, pattern=r"^[A-Z][A-Z0-9_]*$", description="A GPU for each replica, e.g. NVIDIA_L4."
    )
    accelerator_count: int = Field(0, ge=0, le=8, description="GPUs per replica (with accelerator_type).")
    min_replicas: int = Field(1, ge=1, le=100, description="Replicas always up (min_replica_count).")
    max_replicas: int = Field(1, ge=1, le=100, description="Replicas autoscaling may reach (max_replica_count).")
    canary_percent: int = Field(
        10, ge=1, le=50, description="The share of the endpoint's traffic a new version gets while it bakes."
    )
    bake: Duration = Field(
        900, description="How long a new version serves its canary share before it is judged (seconds or 15m)."
    )
    max_error_rate: float = Field(
        0.01,
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        description="The most errors per answered request the new version may show over the bake (Cloud "
        "Monitoring's prediction/online/error_count over response_count); above it, it is rolled back.",
    )
    max_p99_ms: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="The slowest 1 % of its requests may take at most this (prediction/online/prediction_latencies, "
        "total); null: latency is reported, not judged.",
    )
    min_requests: int = Field(
        0,
        ge=0,
        le=10_000_000,
        description="Requests the new version must have answered by the end of the bake to be judged (fewer: rolled "
        "back, since nothing shows it works), and before a broken limit ends its bake early. 0: judged on whatever "
        "came.",
    )

    @model_validator(mode="after")
    def _replicas_and_gpus(self) -> DeployBlock:
        problems = []
        if self.max_replicas < self.min_replicas:
            problems.append(("max_replicas", f"must be at least min_replicas ({self.min_replicas})"))
        if (self.accelerator_type is None) != (self.accelerator_count == 0):
            problems.append(("accelerator_count", "is set with accelerator_type, and only then"))
        if self.bake > 7 * 86400:
            problems.append(("bake", f"at most 7 days, got {rules.format_duration(self.bake)}"))
        if problems:
            raise _cross_field(problems)
        return self


class ModelBlock(_Strict):
    """The Vertex AI Model Registry model each successful run becomes a new version of. The version is promoted
    (the alias moved to it, and `default` with it) when it beats the version under the alias on the model's
    reference set by more than min_improvement, at the model's confidence; else it is held.

    The first request naming a model creates it for its team (its owner) and fixes its rule: metric, goal,
    min_improvement, alias, moves_default, confidence, min_champion_skill, max_target_drift and reference. A later
    request may leave them out (the model's rule applies) or repeat them; one that says otherwise is rejected."""

    name: Annotated[str, AfterValidator(_check_model_id)] = Field(
        description="The model's id in the Model Registry; the first success creates it.", examples=["churn"]
    )
    metric: Annotated[str, AfterValidator(_check_metric_name)] | None = Field(
        None,
        description="The metrics.json entry that decides. The built-in trainer's models decide only on its "
        f"evaluation metrics ({', '.join(BUILTIN_METRIC_GOALS)}); default: val_accuracy for classification, val_rmse "
        "for regression (from the run's own task). Your own code must name it.",
    )
    goal: Literal["maximize", "minimize"] | None = Field(
        None,
        description="Which way is better. Needed only for a metric the built-in trainer does not define "
        f"({', '.join(BUILTIN_METRIC_GOALS)} are known); your own code must name it.",
    )
    min_improvement: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="The challenger must beat the champion by more than this (in the metric's units), at the "
        "model's confidence, on its reference set.",
    )
    alias: Annotated[str, AfterValidator(_not_default), AfterValidator(_check_alias)] = Field(
        "champion", description="The version alias promotion moves."
    )
    moves_default: bool = Field(True, description="`default` follows the alias when promotion moves it.")
    confidence: float = Field(
        0.95,
        gt=0.5,
        lt=1.0,
        allow_inf_nan=False,
        description="How sure the improvement on the reference set must be: the lower end of its paired bootstrap "
        "interval at this level must exceed min_improvement.",
    )
    min_champion_skill: float = Field(
        -0.1,
        ge=-100.0,
        le=1.0,
        allow_inf_nan=False,
        description="Built-in trainer, the label check before training: the champion's skill on the new rows (1 "
        "perfect, 0 no better than predicting the most frequent class or the mean) below this, while it has skill "
        "on its reference set, fails the run with reason `data`: the labels or their meaning changed.",
    )
    max_target_drift: float | None = Field(
        1.0,
        gt=0.0,
        allow_inf_nan=False,
        description="Built-in trainer: the most the target's distribution may drift from the champion's data (PSI) "
        "before the run fails with reason `data`; null: reported only.",
    )
    reference: GsUri | None = Field(
        None,
        description="The model's reference set: a folder or file of rows (CSV or Parquet, every column) that "
        "champion and challenger are both scored on. Copied when the model is created; default: the first "
        "version's validation rows.",
        examples=["gs://my-data-bucket/churn/reference/"],
    )
    max_drift: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="Built-in trainer: the most drift any feature may show against the champion's data (the "
        "trainer's measure, in metrics.json's drift_measure); above it the run stops before its first epoch and "
        "fails with reason `data`, naming the features. Default: drift is reported, never acted on.",
        examples=[0.25],
    )
    deploy: DeployBlock | None = Field(
        None,
        description="Serve the champion: promoted versions roll out to this endpoint, canary first, and roll back by "
        "themselves when they fail on live traffic. Fixed with the model's rule when the model is created.",
    )
    serving: Serving | None = Field(
        None,
        description="Your own code (image or package): the container that serves its versions. Without it a version "
        "is registered as not deployable (label trainctl_servable=false, and `registered` and `trainctl models show` "
        "say so). The built-in trainer's versions are served by its own image (python -m trainer.serve).",
    )
    concurrency: Literal["allow", "skip", "replace"] = Field(
        "allow",
        description="One run of this model at a time (issue 42): `allow` runs every trigger; `skip` ends a trigger "
        "that arrives while one of the model's runs is active with `skipped` (reason running, no GPU); `replace` "
        "cancels the older active run (`superseded`, naming its successor: it registers no version) and runs the new "
        "one. Decided once, at the claim.",
    )
    skip_unchanged: bool = Field(
        False,
        description="Skip unchanged data (issue 42): a trigger whose dataset fingerprint (object names, generations "
        "and CRC32C of what the trainer would read) equals the champion's ends with `skipped` (reason "
        "unchanged_data), no GPU.",
    )


def rung_prefix(index: int) -> str:
    """Where rung `index` of the ladder is written in a request, as a path prefix: "" for the request's own
    resources, "fallbacks[i]." for a fallback (the form error paths take)."""
    return "" if index == 0 else f"fallbacks[{index - 1}]."


@dataclass(frozen=True)
class Rung:
    """A rung of the ladder as the controller uses it: rung 0 is the request's own resources."""

    index: int
    resources: Resources
    strategy: str
    region: str | None  # None: the deployment's region
    max_pending: int
    max_preemptions: int

    def describe(self, default_region: str) -> str:
        res = self.resources
        return (
            f"{res.replica_count} × {res.machine_type} with {res.accelerator_count} × {res.accelerator_type}, "
            f"{self.strategy}, {self.region or default_region}"
            + reservation_words(res.reservation)
            + (f", on persistent resource {res.persistent_resource}" if res.persistent_resource else "")
        )


def reservation_words(reservation: Reservation | None) -> str:
    """How a rung's reservation is named where rungs are described ("" without one)."""
    if reservation is None:
        return ""
    if reservation.affinity == "any":
        return ", any matching reservation"
    owner = f"{reservation.project}/" if reservation.project else ""
    return f", reservation {owner}{reservation.zone}/{reservation.name}"


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
    fallbacks: list[Fallback] = Field(
        default_factory=list,
        max_length=MAX_FALLBACKS,
        description="The capacity ladder, in order: alternatives to `resources` (other GPUs, strategy, region) that "
        "trainctl moves down to when a rung cannot get capacity or quota. Each move is a new attempt into the same "
        "output_dir, so the built-in trainer resumes from its checkpoint.",
    )
    output_dir: GsUri | None = Field(
        None,
        description="Where the job writes. Default: gs://<control bucket>/runs/<request_id>/ for the built-in "
        "trainer, which writes nowhere else; gs://<control bucket>/custom-runs/<request_id>/ for a custom image, "
        "which may instead name a folder in one of the operator's output buckets, neither inside nor around another "
        "active request's output_dir.",
    )
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="GCP labels for the CustomJob (keys and values ≤ 63 of [a-z0-9_-], keys start with a letter).",
    )
    model: ModelBlock | None = Field(
        None,
        description="Register each successful run as a version of this Model Registry model, and promote it when "
        "it beats the version in use (README: the model block).",
    )
    service_account: str | None = Field(
        None,
        pattern=_SERVICE_ACCOUNT_RE,
        description="Run-as service account; must be on the controller's allow-list. A custom image never runs as "
        "the built-in trainer's account, nor the built-in trainer as the custom images' one.",
    )

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        problems = rules.labels_problems(labels)
        problems += [(key, f"label {key!r} is set by trainctl itself") for key in labels if key in RESERVED_LABELS]
        room = rules.MAX_LABELS - len(JOB_LABELS)
        if len(labels) > room:
            problems.append(("", f"at most {room} labels (trainctl adds {len(JOB_LABELS)})"))
        if problems:
            raise _cross_field(problems)
        return labels

    @model_validator(mode="after")
    def _scheduling_fits_resources(self) -> TrainingJobRequest:
        problems: list[tuple[str, str]] = []
        for rung in self.rungs():
            problems += _rung_problems(rung, self.reduction_server, rung_prefix(rung.index))
        rungs = len(self.fallbacks) + 1
        if rungs > self.scheduling.max_attempts:
            problems.append(
                (
                    "scheduling.max_attempts",
                    f"{self.scheduling.max_attempts} attempt(s) cannot walk a ladder of {rungs} rungs "
                    f"(resources and {rungs - 1} fallbacks); set max_attempts ≥ {rungs}",
                )
            )
        problems += _model_problems(self)
        problems += _serving_problems(self)
        if problems:
            raise _cross_field(problems)
        return self

    def rungs(self) -> list[Rung]:
        """The ladder: rung 0 is `resources` with `scheduling`, then each fallback with its own settings."""
        sched = self.scheduling
        ladder = [Rung(0, self.resources, sched.strategy, None, sched.max_pending, sched.max_preemptions)]
        for index, step in enumerate(self.fallbacks, start=1):
            ladder.append(
                Rung(
                    index,
                    step.resources,
                    step.strategy or sched.strategy,
                    step.region,
                    sched.max_pending if step.max_pending is None else step.max_pending,
                    sched.max_preemptions if step.max_preemptions is None else step.max_preemptions,
                )
            )
        return ladder

    def at_rung(self, index: int) -> TrainingJobRequest:
        """This request as rung `index` runs it: the rung's resources, strategy and max_pending in place of the
        request's own (every rung was validated with the request, so the copy is valid too)."""
        if index == 0:
            return self
        rung = self.rungs()[index]
        scheduling = self.scheduling.model_copy(update={"strategy": rung.strategy, "max_pending": rung.max_pending})
        return self.model_copy(update={"resources": rung.resources, "scheduling": scheduling})


def _rung_problems(rung: Rung, reduction_server: ReductionServer, where: str) -> list[tuple[str, str]]:
    """What makes one rung's resources and strategy unusable together, with the paths of the fields."""
    problems: list[tuple[str, str]] = []
    res = rung.resources
    strategy_path = f"{where}strategy" if where else "scheduling.strategy"
    if res.reservation is not None and rung.strategy != "standard":
        problems.append(
            (
                f"{where}resources.reservation",
                f"a reservation holds on-demand VMs; a {rung.strategy} rung cannot consume it (use strategy `standard` "
                "on the reserved rung, and put spot or flex_start on a rung below it)",
            )
        )
    if res.persistent_resource is not None and rung.strategy != "standard":
        problems.append(
            (
                f"{where}resources.persistent_resource",
                f"a job on a persistent resource runs on its standing nodes; a {rung.strategy} rung cannot (use "
                "strategy `standard` on that rung)",
            )
        )
    if res.persistent_resource is not None and res.reservation is not None:
        problems.append(
            (
                f"{where}resources.persistent_resource",
                "a rung runs on a persistent resource's nodes or consumes a reservation, not both",
            )
        )
    if res.persistent_resource is not None and rung.region is not None:
        problems.append(
            (
                f"{where}resources.persistent_resource",
                "a persistent resource is in the deployment's region; a rung naming one cannot name another region",
            )
        )
    zone = res.reservation.zone if res.reservation is not None else None
    if zone is not None and rung.region is not None and not zone.startswith(f"{rung.region}-"):
        problems.append((f"{where}resources.reservation.zone", f"{zone} is not in the rung's region {rung.region}"))
    if rung.strategy == "flex_start" and res.accelerator_type not in catalog.FLEX_START_ACCELERATORS:
        problems.append(
            (strategy_path, f"flex_start needs L4, A100, H100, H200 or B200 GPUs, got {res.accelerator_type}")
        )
    if reduction_server.mode == "on":
        family = res.machine_type.split("-", 1)[0]
        if res.replica_count < 2:
            problems.append(
                ("reduction_server.mode", f"`on` needs a multi-node job ({where}resources.replica_count ≥ 2)")
            )
        if family not in catalog.REDUCTION_SERVER_FAMILIES:
            problems.append(
                (
                    "reduction_server.mode",
                    f"`on` needs N1, A2 or G2 machines; {f'{where}resources: ' if where else ''}"
                    f"{res.machine_type} uses GPUDirect instead",
                )
            )
        if rung.strategy == "flex_start":
            problems.append(
                (
                    "reduction_server.mode",
                    f"`on` cannot be combined with flex_start ({f'{strategy_path}; ' if where else ''}"
                    "all pools must match)",
                )
            )
    return problems


def _model_problems(request: TrainingJobRequest) -> list[tuple[str, str]]:
    """What makes the model block unusable with the request's trainer: a custom image must say what decides, and a
    goal may not contradict what the built-in trainer's metric means."""
    block = request.model
    if block is None:
        return []
    problems: list[tuple[str, str]] = []
    if request.trainer.is_custom_code:
        for name in ("metric", "goal"):
            if getattr(block, name) is None:
                why = "name the metrics.json entry that decides and whether higher (maximize) or lower (minimize) wins"
                problems.append((f"model.{name}", f"required with your own code (image or package): {why}"))
        if block.max_drift is not None:
            problems.append(
                ("model.max_drift", "only the built-in trainer measures drift; your own code gets no limit")
            )
        for name in ("min_champion_skill", "max_target_drift"):  # a record holds its request with every default
            if getattr(block, name) != ModelBlock.model_fields[name].default:
                problems.append((f"model.{name}", "only the built-in trainer checks the labels before training"))
    known = BUILTIN_METRIC_GOALS.get(block.metric or "")
    if not request.trainer.is_custom_code and block.metric is not None and known is None:
        problems.append(
            (
                "model.metric",
                f"the built-in trainer's models decide only on its evaluation metrics "
                f"({', '.join(BUILTIN_METRIC_GOALS)}), never on {block.metric}: bookkeeping such as seed or "
                "train_rows says nothing of the model",
            )
        )
    elif block.metric is not None and known is None and block.goal is None:
        why = f"{block.metric} is not one the built-in trainer defines; say maximize or minimize"
        problems.append(("model.goal", f"required for this metric: {why}"))
    if known is not None and block.goal is not None and block.goal != known:
        better = "higher" if known == "maximize" else "lower"
        problems.append(("model.goal", f"{block.metric} is better when {better}: goal {known}, or omit it"))
    task = request.trainer.hyperparameters.task if request.trainer.hyperparameters else "auto"
    expected = TASK_METRICS.get(task)
    if (
        not request.trainer.is_custom_code
        and expected
        and block.metric in TASK_METRICS.values()
        and block.metric != expected
    ):
        problems.append(
            ("model.metric", f"a {task} run reports {expected}, not {block.metric}; omit it to use {expected}")
        )
    return problems


def _serving_problems(request: TrainingJobRequest) -> list[tuple[str, str]]:
    """model.serving is for your own code: the built-in trainer's versions have their serving container already."""
    if request.model is None or request.model.serving is None or request.trainer.is_custom_code:
        return []
    why = "the built-in trainer's versions are served by its own image (python -m trainer.serve): leave it out"
    return [("model.serving", f"only with your own code (image or package); {why}")]
