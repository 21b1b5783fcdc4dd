"""Pure: what a run's Model Registry version is made of — the UploadModel body (artifacts, serving container,
lineage as labels and in full in its description) and the ModelEvaluation of its metrics.

Labels follow Vertex's rules (keys and values of lowercase letters, digits, '_' and '-'; model.proto says values
"can be no longer than 64 characters", trainctl keeps to 63 as for jobs); text that does not fit — a dataset URI,
an image — is shortened to its readable end and a hash of the whole.

Servable only when it serves (issue 38, point 7): a version gets a real serving container only from the built-in
trainer (its image with `python -m trainer.serve`) or from the request's `model.serving`. Vertex requires a
container spec for every model but AutoML's (model.proto, Model.container_spec: "Not required for AutoML Models"),
so any other version is registered with one that cannot be mistaken for a server — the trainer image with a
command that exits at once saying why — and the label trainctl_servable=false (local/FIDELITY.md).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from functions.jobs.planning import package_executor_image, runs_builtin_trainer
from functions.ledger.record import Record
from functions.models.decision import figure
from functions.settings import Settings
from functions.teams import NO_TEAMS
from schemas.events import Lineage
from schemas.images import repository_of
from schemas.request import ModelBlock, TrainingJobRequest, code_digest
from schemas.rules import sanitize_label_value

# Version labels are spelled with underscores, as job labels are (functions/cloud/job_labels.py): ListModelVersions
# documents its filter as `labels.myKey="myValue"`, and whether a hyphenated key is read there is not documented.
# The label that ties a version to its request (the ledger record's key hash, as `trainctl_key` ties a job to it).
KEY_LABEL = "trainctl_key"
MANAGED_BY = "trainctl"
# The serving container of a built-in trainer version (trainer/serve.py follows Vertex's custom-container contract:
# https://cloud.google.com/vertex-ai/docs/predictions/custom-container-requirements).
SERVING_COMMAND = ["python", "-m", "trainer.serve"]
SERVING_PORT = 8080
# Whether a version can be deployed: "true" (the built-in trainer's, or a request's model.serving) or "false".
SERVABLE_LABEL = "trainctl_servable"
# The container spec of a version that has no server: the trainer image (Vertex's service agent pulls it already, for
# the built-in trainer's versions) with a command that exits at once, saying why, so a deployment fails at its first
# start instead of running training code behind a health check that never answers.
NOT_SERVABLE = "not deployable: its request named no model.serving container, so trainctl registered it without one"
NOT_SERVABLE_COMMAND = ["python", "-c", f"raise SystemExit({'this model version is ' + NOT_SERVABLE!r})"]
# Vertex's ModelEvaluation schemas for the built-in trainer's tasks (google_cloud_pipeline_components'
# PROBLEM_TYPE_TO_SCHEMA_URI), and the schema fields the trainer's figures are (local/FIDELITY.md): classification's
# val_loss is the mean cross-entropy, the schema's logLoss; regression's val_rmse is in the target's units, the
# schema's rootMeanSquaredError (its val_loss is on the standardised target: no field of the schema). Accuracy has
# no field there (its figures are per confidence threshold).
EVALUATION_SCHEMAS = {
    "classification": "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml",
    "regression": "gs://google-cloud-aiplatform/schema/modelevaluation/regression_metrics_1.0.0.yaml",
}
SCHEMA_FIELDS = {
    "classification": {"val_loss": "logLoss"},
    "regression": {"val_rmse": "rootMeanSquaredError"},
}
# Where trainctl's own figures (every numeric entry of metrics.json, and the drift) are kept in an evaluation: its
# metadata, which no schema describes. The controller and `trainctl models show` read them there.
FIGURES_KEY = "trainctl_metrics"
# trainctl's bound on a version description (model.proto documents none): the lineage, as JSON that always parses.
MAX_DESCRIPTION = 2000
# A shortened text keeps at least this much of its ends beside the hash of the whole.
_MIN_SHORTENED = 48


# The label saying which kind of trainer made a version: `builtin`, or the custom image's repository (issue 26's
# trust rule, functions/intake/submission.py: a model's versions come from one kind of trainer).
TRAINER_LABEL = "trainctl_trainer"
LEGACY_TRAINER_LABEL = "trainctl-trainer"  # versions registered before the labels took underscores
BUILTIN_TRAINER = "builtin"
TEAM_LABEL = "trainctl_team"
# The triggers a version's lineage and its `trainctl_trigger` label name (issue 42): a rule's schedule tick, an alert.
POLICY_TRIGGERS = ("schedule", "alert")


def trainer_kind(request: TrainingJobRequest) -> str:
    """What trained the run, as a label value: the built-in trainer, whatever its image's digest (it changes with
    every deploy), or a custom image's repository (its tags and digests alike)."""
    if runs_builtin_trainer(request):
        return BUILTIN_TRAINER
    if request.trainer.python_package is not None:  # a package's module: a name anyone may reuse, but one kind
        return label_of(f"package/{request.trainer.python_package.module}")
    image = str(request.trainer.image)
    return label_of(repository_of(image) or image)


def kind_of_version(labels: dict[str, str]) -> str:
    """The kind of trainer a registered version came from, by its label; a version registered before the label
    existed came from the built-in trainer (issue 26's trust rule)."""
    return labels.get(TRAINER_LABEL) or labels.get(LEGACY_TRAINER_LABEL, BUILTIN_TRAINER)


def servable(request: TrainingJobRequest) -> bool:
    """Whether the run's version gets a serving container: the built-in trainer's, or the request's model.serving."""
    return runs_builtin_trainer(request) or (request.model is not None and request.model.serving is not None)


def image_of(request: TrainingJobRequest, settings: Settings) -> str:
    """The image that trained the run (and, for the built-in trainer, serves it); a package's executor."""
    if request.trainer.python_package is not None:
        return package_executor_image(request.trainer.python_package.executor, settings, settings.region)
    return settings.trainer_image if runs_builtin_trainer(request) else str(request.trainer.image)


def lineage(record: Record, settings: Settings) -> Lineage:
    request = TrainingJobRequest.model_validate(record.request)
    trigger = record.trigger
    marker = None
    if trigger is not None and trigger.kind == "gcs" and trigger.bucket:
        marker = f"gs://{trigger.bucket}/{trigger.object}#{trigger.generation}"
    return Lineage(
        request_id=record.request_id,
        dataset_uri=request.dataset.uri,
        marker=marker,
        job=record.job_name,
        image=image_of(request, settings),
        code_digest=code_digest(record.request),
        champion_passed=record.model_steps.champion_version if record.model_steps else None,
        dataset_fingerprint=record.dataset_fingerprint,
        # A schedule tick or an alert (issue 42) is the run's lineage too: which tick, which incident.
        trigger=trigger if trigger is not None and trigger.kind in POLICY_TRIGGERS else None,
    )


def upload_body(
    record: Record, block: ModelBlock, settings: Settings, model_name: str, new_model: bool
) -> dict[str, Any]:
    """The REST UploadModelRequest (less its parent): a new model named by the block (`modelId`), or a new version
    of `model_name` (`parentModel`)."""
    request = TrainingJobRequest.model_validate(record.request)
    model = {
        "displayName": block.name,
        "artifactUri": registered_artifacts(record),
        "containerSpec": serving_container(request, settings),
        "labels": version_labels(record, image_of(request, settings)),
        "versionDescription": version_description(lineage(record, settings)),
    }
    if new_model:
        return {"modelId": block.name, "model": model | {"description": "Trained and registered by trainctl."}}
    return {"parentModel": model_name, "model": model}


def registered_artifacts(record: Record) -> str:
    """What the version is registered from: the controller's copy of the run's model folder (functions/
    model_artifacts.py), made before the upload."""
    steps = record.model_steps
    return steps.artifact_uri if steps and steps.artifact_uri else record.artifacts.model_dir


def version_description(found: Lineage, limit: int = MAX_DESCRIPTION) -> str:
    """The lineage as JSON of at most `limit` bytes (UTF-8), never cut mid-JSON: while it is too long, its longest
    text (a dataset URI, a marker, an image…) is shortened to its ends and a hash of the whole, so that it still
    reads as a Lineage and two values that differ only in the middle stay apart."""
    fields = found.model_dump(mode="json", exclude_none=True)  # a tick's scheduled_time is a datetime
    while True:
        text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
        excess = len(text.encode()) - limit
        if excess <= 0:
            return text
        name = max((k for k, v in fields.items() if isinstance(v, str)), key=lambda k: len(fields[k].encode()))
        value = fields[name]
        size = len(value.encode())
        if size <= _MIN_SHORTENED + 30:
            raise ValueError(f"the lineage cannot be written in {limit} bytes")  # only for a tiny limit
        fields[name] = shorten(value, max(_MIN_SHORTENED, size - excess))


def shorten(text: str, size: int) -> str:
    """`text` in at most about `size` bytes: its beginning and its end (the more readable part of a URI) around
    "...", then the first 12 hex digits of the whole text's sha256."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    keep = max(size - len(f"... [sha256:{digest}]"), 16)
    head = _clip(text, keep // 3)
    tail = _clip(text[::-1], keep - len(head.encode()))[::-1]
    return f"{head}...{tail} [sha256:{digest}]"


def _clip(text: str, size: int) -> str:
    """The longest start of `text` whose UTF-8 fits in `size` bytes (never half a character)."""
    return text.encode()[:size].decode(errors="ignore")


def label_of(text: str) -> str:
    """Free text (a URI, an image) as a label value: its readable end and a hash of the whole, ≤ 63 characters,
    so that two values differing only early on stay apart."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    tail = sanitize_label_value(text[-80:])[-(63 - len(digest) - 1) :].strip("-_")
    return f"{tail}-{digest}" if tail else digest


def version_labels(record: Record, image: str) -> dict[str, str]:
    """Lineage as labels (label rules: ≤ 63 of [a-z0-9_-]); the full text is in the version's description."""
    request = TrainingJobRequest.model_validate(record.request)
    labels = {
        KEY_LABEL: record.key_hash,
        "trainctl_request": sanitize_label_value(record.request_id),
        "trainctl_dataset": label_of(str(record.request["dataset"]["uri"])),
        "trainctl_image": label_of(image),
        TRAINER_LABEL: trainer_kind(request),
        SERVABLE_LABEL: "true" if servable(request) else "false",
        TEAM_LABEL: record.team or NO_TEAMS,  # the team whose request made it (the model's owner is its charter's)
        "managed-by": MANAGED_BY,
    }
    if record.job_name:
        labels["trainctl_job"] = sanitize_label_value(record.job_name.rsplit("/", 1)[-1])
    trigger = record.trigger
    if trigger is not None and trigger.kind == "gcs" and trigger.generation:
        labels["trainctl_generation"] = sanitize_label_value(trigger.generation)
    if trigger is not None and trigger.kind in POLICY_TRIGGERS:
        labels["trainctl_trigger"] = trigger.kind
    return labels


def serving_container(request: TrainingJobRequest, settings: Settings) -> dict[str, Any]:
    """The version's container spec (REST ModelContainerSpec): the trainer image with its serving entry point; the
    request's model.serving for your own code; else one that only says the version cannot be served."""
    if runs_builtin_trainer(request):
        return {
            "imageUri": settings.trainer_image,
            "command": SERVING_COMMAND,
            "ports": [{"containerPort": SERVING_PORT}],
        }
    serving = request.model.serving if request.model is not None else None
    if serving is None:
        return {"imageUri": settings.trainer_image, "command": NOT_SERVABLE_COMMAND}
    spec: dict[str, Any] = {"imageUri": serving.image, "command": list(serving.command)}
    if serving.args:
        spec["args"] = list(serving.args)
    return spec | {
        "ports": [{"containerPort": serving.port}],
        "predictRoute": serving.routes.predict,
        "healthRoute": serving.routes.health,
    }


def evaluation_name(key_hash: str) -> str:
    """The display name of the evaluation trainctl imports for a request: how it is found again."""
    return f"trainctl-{key_hash}"


# The trainer's drift against the champion's data (issue 27, point 3), carried into the evaluation beside the figures:
# {feature: figure}, the feature that moved most, and the measure's name.
DRIFT_ENTRIES = ("drift", "max_drift_feature", "drift_measure")


def drift_of(metrics: dict[str, Any]) -> dict[str, Any]:
    """The drift entries of metrics.json (already filtered by job_outputs.py), as far as they have the contract's
    shape: `drift` an object of figures, the other two text."""
    found: dict[str, Any] = {}
    drift = metrics.get("drift")
    if isinstance(drift, dict):
        found["drift"] = {k: float(v) for k, v in drift.items() if figure(drift, k) is not None}
    for name in DRIFT_ENTRIES[1:]:
        if isinstance(metrics.get(name), str):
            found[name] = metrics[name]
    return found


def evaluation_body(name: str, record: Record, metrics: dict[str, Any]) -> dict[str, Any]:
    """A ModelEvaluation of the run: trainctl's figures (every numeric entry of metrics.json, and the drift against
    the champion's data when the trainer measured it) in its metadata; in `metrics`, for a built-in trainer's run,
    only what is a field of its task's schema (the console shows those), under that schema. Your own code's figures
    mean what it says they mean: they go in `metrics` too, under no schema."""
    figures: dict[str, Any] = {k: v for k, v in metrics.items() if figure(metrics, k) is not None}
    figures |= drift_of(metrics)
    body: dict[str, Any] = {
        "displayName": name,
        "metadata": {"request_id": record.request_id, "trainctl_key": record.key_hash, FIGURES_KEY: figures},
    }
    task = metrics.get("task")
    if not (isinstance(task, str) and task in EVALUATION_SCHEMAS):
        return body | {"metrics": figures}
    if not runs_builtin_trainer(TrainingJobRequest.model_validate(record.request)):
        return body | {"metrics": figures}
    mapped = {field: figures[ours] for ours, field in SCHEMA_FIELDS[task].items() if ours in figures}
    return body | {"metricsSchemaUri": EVALUATION_SCHEMAS[task], "metrics": mapped}


def evaluation_figures(evaluation: dict[str, Any]) -> dict[str, Any]:
    """trainctl's figures of an evaluation (REST ModelEvaluation): from its metadata, or, for one imported before
    they moved there (issue 38), from its metrics."""
    metadata = evaluation.get("metadata")
    kept = metadata.get(FIGURES_KEY) if isinstance(metadata, dict) else None
    if isinstance(kept, dict):
        return kept
    return evaluation.get("metrics") or {}
