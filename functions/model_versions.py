"""Pure: what a run's Model Registry version is made of — the UploadModel body (artifacts, serving container,
lineage as labels and in full in its description) and the ModelEvaluation of its metrics.

Labels follow Vertex's rules (keys and values of lowercase letters, digits, '_' and '-'; model.proto says values
"can be no longer than 64 characters", trainctl keeps to 63 as for jobs); text that does not fit — a dataset URI,
an image — is shortened to its readable end and a hash of the whole.
"""

from __future__ import annotations

import hashlib
from typing import Any

from functions.model_decision import figure
from functions.planning import runs_builtin_trainer
from functions.record import Record
from functions.settings import Settings
from functions.teams import NO_TEAMS
from schemas import catalog
from schemas.events import Lineage
from schemas.images import repository_of
from schemas.request import ModelBlock, TrainingJobRequest, code_digest
from schemas.rules import sanitize_label_value

# Version labels are spelled with underscores, as job labels are (functions/job_labels.py): ListModelVersions documents
# its filter as `labels.myKey="myValue"`, and whether a hyphenated key is read there is not documented.
# The label that ties a version to its request (the ledger record's key hash, as `trainctl_key` ties a job to it).
KEY_LABEL = "trainctl_key"
MANAGED_BY = "trainctl"
# The serving container of a built-in trainer version (trainer/serve.py follows Vertex's custom-container contract:
# https://cloud.google.com/vertex-ai/docs/predictions/custom-container-requirements).
SERVING_COMMAND = ["python", "-m", "trainer.serve"]
SERVING_PORT = 8080
# Vertex's ModelEvaluation schemas for the built-in trainer's tasks (google_cloud_pipeline_components'
# PROBLEM_TYPE_TO_SCHEMA_URI); the trainer's own figure names travel in the metrics beside the schema's.
EVALUATION_SCHEMAS = {
    "classification": "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml",
    "regression": "gs://google-cloud-aiplatform/schema/modelevaluation/regression_metrics_1.0.0.yaml",
}
MAX_DESCRIPTION = 2000


# The label saying which kind of trainer made a version: `builtin`, or the custom image's repository (issue 26's
# trust rule, functions/submission.py: a model's versions come from one kind of trainer).
TRAINER_LABEL = "trainctl_trainer"
LEGACY_TRAINER_LABEL = "trainctl-trainer"  # versions registered before the labels took underscores
BUILTIN_TRAINER = "builtin"
TEAM_LABEL = "trainctl_team"


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


def image_of(request: TrainingJobRequest, settings: Settings) -> str:
    """The image that trained the run (and, for the built-in trainer, serves it); a package's executor."""
    if request.trainer.python_package is not None:
        return catalog.executor_image(request.trainer.python_package.executor, settings.region)
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
        "versionDescription": lineage(record, settings).model_dump_json(exclude_none=True)[:MAX_DESCRIPTION],
    }
    if new_model:
        return {"modelId": block.name, "model": model | {"description": "Trained and registered by trainctl."}}
    return {"parentModel": model_name, "model": model}


def registered_artifacts(record: Record) -> str:
    """What the version is registered from: the controller's copy of the run's model folder (functions/
    model_artifacts.py), made before the upload."""
    steps = record.model_steps
    return steps.artifact_uri if steps and steps.artifact_uri else record.artifacts.model_dir


def label_of(text: str) -> str:
    """Free text (a URI, an image) as a label value: its readable end and a hash of the whole, ≤ 63 characters,
    so that two values differing only early on stay apart."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    tail = sanitize_label_value(text[-80:])[-(63 - len(digest) - 1) :].strip("-_")
    return f"{tail}-{digest}" if tail else digest


def version_labels(record: Record, image: str) -> dict[str, str]:
    """Lineage as labels (label rules: ≤ 63 of [a-z0-9_-]); the full text is in the version's description."""
    labels = {
        KEY_LABEL: record.key_hash,
        "trainctl_request": sanitize_label_value(record.request_id),
        "trainctl_dataset": label_of(str(record.request["dataset"]["uri"])),
        "trainctl_image": label_of(image),
        TRAINER_LABEL: trainer_kind(TrainingJobRequest.model_validate(record.request)),
        TEAM_LABEL: record.team or NO_TEAMS,  # the team whose request made it (the model's owner is its charter's)
        "managed-by": MANAGED_BY,
    }
    if record.job_name:
        labels["trainctl_job"] = sanitize_label_value(record.job_name.rsplit("/", 1)[-1])
    trigger = record.trigger
    if trigger is not None and trigger.kind == "gcs" and trigger.generation:
        labels["trainctl_generation"] = sanitize_label_value(trigger.generation)
    return labels


def serving_container(request: TrainingJobRequest, settings: Settings) -> dict[str, Any]:
    """The version's serving container: the trainer image with its serving entry point, or a custom image as it
    is (it must follow Vertex's custom-container contract itself to be deployed)."""
    if runs_builtin_trainer(request):
        return {
            "imageUri": settings.trainer_image,
            "command": SERVING_COMMAND,
            "ports": [{"containerPort": SERVING_PORT}],
        }
    return {"imageUri": image_of(request, settings)}


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
    """A ModelEvaluation of the run's numeric metrics (and, for regression, the schema's own RMSE name), with its
    drift against the champion's data when the trainer measured it."""
    numbers: dict[str, Any] = {k: v for k, v in metrics.items() if figure(metrics, k) is not None}
    numbers |= drift_of(metrics)
    task = metrics.get("task")
    if task == "regression" and "val_rmse" in numbers:
        numbers["rootMeanSquaredError"] = numbers["val_rmse"]
    body: dict[str, Any] = {
        "displayName": name,
        "metrics": numbers,
        "metadata": {"request_id": record.request_id, "trainctl_key": record.key_hash},
    }
    if isinstance(task, str) and task in EVALUATION_SCHEMAS:
        body["metricsSchemaUri"] = EVALUATION_SCHEMAS[task]
    return body
