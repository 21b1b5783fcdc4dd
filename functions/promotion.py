"""After `succeeded`, for a request with a model block: register the run as a new Model Registry version, import
its metrics as a ModelEvaluation, decide against the champion and promote or hold — exactly once, each step
recorded on the ledger record (ModelSteps) as it is done, so a redelivery or a crash resumes where it stopped.

`succeeded` is published before any of this; the record stays active (reconcile keeps visiting it) until the steps
are done. A refusal from the registry (INVALID_ARGUMENT, PERMISSION_DENIED, …) ends them with `held` and the reason;
a transient failure is tried again at the next visit, for at most GIVE_UP_AFTER, then `held` too.

Exactly once, step by step:
  register  look for the version labelled with the request's key hash first (ListModelVersions); else claim the
            upload on the record (compare-and-swap), then UploadModel (a new model with `model_id` when there is
            none yet), keeping its operation on the record until it is done;
  evaluate  look for the run's evaluation by its display name first; else ImportModelEvaluation;
  decide    under the model's record (functions/model_ledger.py): one decision at a time per model and alias,
            against the version under the alias at that moment; a promotion is recorded before the alias moves.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions import deadline, logs
from functions.errors import Transient
from functions.failures import PERMISSION_DENIED, call_failure_reason
from functions.gcs import Conflict, StorageError, TooLarge
from functions.job_outputs import MAX_OUTPUT_BYTES, Unreadable, parse_metrics
from functions.lifecycle import ModelSteps, Record
from functions.model_decision import Figures, NoMetric, decide, figure, metric_and_goal, same_rows_figure
from functions.model_ledger import Entry, ModelLedger, ModelRecord, Move
from functions.outbox import Outbox
from functions.planning import runs_builtin_trainer
from functions.ports import Registry, Storage
from functions.registry import ModelVersion, Upload
from functions.settings import Settings
from functions.vertex import CallRejected
from schemas.events import Held, JobEvent, Lineage, Promoted, Registered
from schemas.request import DEFAULT_ALIAS, RegistryModel, TrainingJobRequest
from schemas.rules import sanitize_label_value, split_gs_uri

ALREADY_EXISTS = 6  # google.rpc.Code: a model_id another run's upload took first
# The label that ties a version to its request (the ledger record's key hash, as `trainctl-key` ties a job to it).
KEY_LABEL = "trainctl-key"
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
# A registry that stays unreachable (or an upload that never finishes) does not keep a request active for ever.
GIVE_UP_AFTER = timedelta(hours=24)
# How long a visit waits on an upload's operation, or on another request's alias move, before leaving it to the next.
WAIT_SECONDS = 5.0


@dataclass
class Promotion:
    settings: Settings
    gcs: Storage
    registry: Callable[[], Registry]  # built on first use: only model requests ever need it
    models: ModelLedger
    outbox: Outbox
    clock: Callable[[], datetime]
    owner: str

    def settle(self, record: Record, generation: int) -> tuple[Record, int]:
        """Take a succeeded request's model steps as far as they go now; the record as saved. Raises Transient
        (or gcs.Conflict, for the observer to read the record again) to be visited again."""
        if not record.model_steps_pending:
            return record, generation
        steps = record.model_steps
        assert steps is not None
        block = RegistryModel.model_validate(record.request["model"])
        now = self.clock()
        if steps.since is None:
            steps.since = now
            generation = self.outbox.save(record, generation)
        step = "registering the run as a new version"
        try:
            if steps.version is None:
                record, generation = self._register(record, generation, block)
                steps = record.model_steps
                assert steps is not None
                if steps.version is None:
                    return record, generation  # the upload is still running: the next visit looks again
            step = f"deciding on version {steps.version}"
            if not steps.evaluated:
                record, generation = self._evaluate(record, generation)
            return self._decide(record, generation, block)
        except CallRejected as exc:
            why = f"the Model Registry refused a call while {step} ({exc.reason}, code {exc.code}): {exc.message}"
            if exc.code == PERMISSION_DENIED:
                why += " The functions' account needs roles/aiplatform.user (terraform/iam.tf)."
            return self._hold(record, generation, block, why)
        except Transient as exc:
            if steps and steps.since is not None and self.clock() - steps.since > GIVE_UP_AFTER:
                return self._hold(
                    record, generation, block, f"the Model Registry could not be reached for a day: {exc}"
                )
            raise

    # ---- register ----------------------------------------------------------------------------------------

    def _register(self, record: Record, generation: int, block: RegistryModel) -> tuple[Record, int]:
        registry, steps = self.registry(), record.model_steps
        assert steps is not None

        def look_up() -> ModelVersion | None:
            return registry.find_version(block.name, KEY_LABEL, record.key_hash)

        found = look_up()
        if found is None and steps.operation:
            upload = self._wait_for(steps.operation)
            if upload is not None and not upload.done:
                return record, generation
            found, generation = self._finished_upload(record, generation, upload)
            if found is None and steps.operation:
                return record, generation
        if found is None:
            now = self.clock()
            if steps.upload_started and steps.upload_owner != self.owner and not self._expired(steps.upload_started):
                return record, generation  # another handler is uploading it right now
            steps.upload_started, steps.upload_owner = now, self.owner
            generation = self.outbox.save(record, generation)  # the claim: no other handler uploads meanwhile
            try:
                started = registry.upload(self._upload_body(record, block, registry), look_up)
            except CallRejected as exc:
                if exc.code != ALREADY_EXISTS:
                    raise
                # Two first successes raced to create the model: this one becomes a version of the other's.
                started = registry.upload(self._upload_body(record, block, registry), look_up)
            if isinstance(started, Upload):
                steps.operation = started.operation
                generation = self.outbox.save(record, generation)
                upload = started if started.done else self._wait_for(started.operation)
                if upload is not None and not upload.done:
                    return record, generation
                found, generation = self._finished_upload(record, generation, upload)
                if found is None:
                    return record, generation
            else:
                found = started
        return self._registered(record, generation, block, found)

    def _finished_upload(
        self, record: Record, generation: int, upload: Upload | None
    ) -> tuple[ModelVersion | None, int]:
        """The version a finished upload made; None (and the operation forgotten, so the next visit uploads again)
        when it made none: Vertex forgot the operation, or another run created the model first."""
        steps, registry = record.model_steps, self.registry()
        assert steps is not None
        if upload is not None and upload.error_code == 0 and upload.version_id:
            return registry.get(f"{registry.model_name(_model_id(record))}@{upload.version_id}"), generation
        if upload is not None and upload.error_code not in (0, ALREADY_EXISTS):
            raise CallRejected(upload.error_code, call_failure_reason(upload.error_code), upload.error_message)
        # ALREADY_EXISTS: two first successes raced to create the model; this one becomes a version of it.
        steps.operation = steps.upload_started = steps.upload_owner = None
        return None, self.outbox.save(record, generation)

    def _wait_for(self, operation: str) -> Upload | None:
        """The upload's operation, waited on briefly while it runs."""
        registry = self.registry()
        until = time.monotonic() + WAIT_SECONDS
        while True:
            upload = registry.operation(operation)
            if upload is None or upload.done or time.monotonic() > until or not deadline.allows(2.0):
                return upload
            time.sleep(random.uniform(0.2, 0.5))

    def _expired(self, since: datetime) -> bool:
        """A claim older than a handler can live was left by one that died."""
        window = timedelta(seconds=max(self.settings.lease, self.settings.function_timeout))
        return self.clock() - since > window

    def _upload_body(self, record: Record, block: RegistryModel, registry: Registry) -> dict[str, Any]:
        request = TrainingJobRequest.model_validate(record.request)
        model = {
            "displayName": block.name,
            "artifactUri": record.artifacts.model_dir,
            "containerSpec": serving_container(request, self.settings),
            "labels": version_labels(record, self._image(request)),
            "versionDescription": self._lineage(record, request).model_dump_json(exclude_none=True)[:MAX_DESCRIPTION],
        }
        name = registry.model_name(block.name)
        if registry.get(name) is not None:
            return {"parentModel": name, "model": model}
        return {"modelId": block.name, "model": model | {"description": "Trained and registered by trainctl."}}

    def _image(self, request: TrainingJobRequest) -> str:
        return self.settings.trainer_image if runs_builtin_trainer(request) else str(request.trainer.image)

    def _lineage(self, record: Record, request: TrainingJobRequest) -> Lineage:
        trigger = record.trigger
        marker = None
        if trigger is not None and trigger.kind == "gcs" and trigger.bucket:
            marker = f"gs://{trigger.bucket}/{trigger.object}#{trigger.generation}"
        return Lineage(
            request_id=record.request_id,
            dataset_uri=request.dataset.uri,
            marker=marker,
            job=record.job_name,
            image=self._image(request),
            champion_passed=record.model_steps.champion_version if record.model_steps else None,
        )

    def _registered(
        self, record: Record, generation: int, block: RegistryModel, version: ModelVersion | None
    ) -> tuple[Record, int]:
        if version is None:
            raise Transient(f"the new version of {block.name} is not readable yet")
        steps = record.model_steps
        assert steps is not None
        steps.version, steps.operation = version.version_id, None
        request = TrainingJobRequest.model_validate(record.request)
        event = Registered(
            **record.envelope(self.clock()),
            message=f"registered version {version.version_id} of model {block.name}",
            model=block.name,
            model_resource=version.model,
            version=version.version_id,
            artifact_uri=record.artifacts.model_dir,
            lineage=self._lineage(record, request),
        )
        return self._save_with(record, generation, [event])

    # ---- evaluate ----------------------------------------------------------------------------------------

    def _evaluate(self, record: Record, generation: int) -> tuple[Record, int]:
        """The run's metrics as a ModelEvaluation of its version, so they show in the console. Best effort: a
        refusal is logged and the decision goes on (it reads the figures from metrics.json, not from here)."""
        steps, registry = record.model_steps, self.registry()
        assert steps is not None and steps.version is not None
        version = f"{registry.model_name(_model_id(record))}@{steps.version}"
        name = evaluation_name(record.key_hash)
        try:
            if not any(e.get("displayName") == name for e in registry.evaluations(version)):
                metrics = self._metrics(record)[0]
                registry.import_evaluation(version, evaluation_body(name, record, metrics))
        except CallRejected as exc:
            logs.warning(f"the Model Registry refused the run's evaluation; the decision goes on: {exc.message}")
        steps.evaluated = True
        return record, self.outbox.save(record, generation)

    def _metrics(self, record: Record) -> tuple[dict[str, Any], str]:
        """metrics.json as far as it can be used (untrusted: bounded, filtered), and what could not be, in words."""
        bucket, name = split_gs_uri(record.artifacts.metrics_uri)
        try:
            found = self.gcs.read(bucket, name, max_bytes=MAX_OUTPUT_BYTES)
            if found is None:
                return {}, "the run wrote no metrics.json"
            metrics = parse_metrics(found[0])
            return metrics.values, metrics.note
        except (TooLarge, StorageError, Unreadable) as exc:
            return {}, f"its metrics.json could not be read: {exc}"

    # ---- decide and promote ------------------------------------------------------------------------------

    def _decide(self, record: Record, generation: int, block: RegistryModel) -> tuple[Record, int]:
        steps, registry = record.model_steps, self.registry()
        assert steps is not None and steps.version is not None
        metrics, note = self._metrics(record)
        try:
            metric, goal = metric_and_goal(block, metrics)
        except NoMetric as exc:
            return self._hold(record, generation, block, f"version {steps.version} cannot be compared: {exc}")
        waited_until = time.monotonic() + WAIT_SECONDS
        for _ in range(20):
            models, model_generation = self.models.read(block.name, block.alias)
            if models.moving is not None:
                mine = models.moving.owner == record.key_hash
                if not mine and not self._expired(models.moving.since):
                    if time.monotonic() > waited_until or not deadline.allows(2.0):
                        return record, generation  # another request's promotion is in flight: the next visit
                    time.sleep(random.uniform(0.1, 0.3))
                    continue
                try:
                    models, model_generation = self._finish_move(models, model_generation)
                except Conflict:
                    continue
            entry = models.decided(record.key_hash)
            if entry is None:
                champion = registry.get(f"{registry.model_name(block.name)}@{block.alias}")
                figures = self._figures(metrics, metric, goal, block, steps, champion)
                promote, decision = decide(figures)
                if champion is not None and champion.version_id == steps.version:
                    promote, reason = True, f"version {steps.version} already holds `{block.alias}` (moved by hand)"
                    decision = decision.model_copy(
                        update={"reason": reason, "champion": None, "champion_version": None}
                    )
                    champion = None
                if note:
                    decision = decision.model_copy(update={"reason": f"{decision.reason}; {note}"})
                previous = champion.version_id if champion else None
                entry = Entry(
                    time=self.clock(),
                    action="promoted" if promote else "held",
                    trigger="controller",
                    version=steps.version,
                    previous=previous if promote else None,
                    request_id=record.request_id,
                    key_hash=record.key_hash,
                    decision=decision,
                    message=decision.reason,
                )
                models.record(entry)
                if promote:
                    models.push_champion(steps.version, previous)
                    models.moving = Move(to_version=steps.version, owner=record.key_hash, since=self.clock())
                try:
                    model_generation = self.models.write(models, model_generation)
                except Conflict:
                    continue  # another decision came first: decide again against the champion it left
                if promote:
                    self._finish_move(models, model_generation)
            return self._decided(record, generation, block, entry)
        raise Transient(f"the record of model {block.name} kept changing")

    def _figures(
        self,
        metrics: dict[str, Any],
        metric: str,
        goal: Any,
        block: RegistryModel,
        steps: ModelSteps,
        champion: ModelVersion | None,
    ) -> Figures:
        """The figures to compare: the champion's on this run's rows when the trainer scored the version that is
        champion now; else its recorded figure (its own evaluation, on the data it was trained with)."""
        challenger = figure(metrics, metric)
        if champion is None:
            return Figures(metric, goal, challenger, None, None, False, block.min_improvement)
        note = ""
        if champion.version_id == steps.champion_version:
            value, note = same_rows_figure(metrics, metric)
            if value is not None:
                return Figures(metric, goal, challenger, value, champion.version_id, True, block.min_improvement)
        elif steps.champion_version is not None:
            note = f"the trainer scored version {steps.champion_version}, which is no longer the champion"
        recorded = self._recorded_figure(champion, metric)
        return Figures(metric, goal, challenger, recorded, champion.version_id, False, block.min_improvement, note)

    def _recorded_figure(self, champion: ModelVersion, metric: str) -> float | None:
        """The champion's own figure, from its evaluations (trainctl's first)."""
        evaluations = self.registry().evaluations(champion.name)
        evaluations.sort(key=lambda e: not str(e.get("displayName", "")).startswith("trainctl-"))
        for evaluation in evaluations:
            value = figure(evaluation.get("metrics") or {}, metric)
            if value is not None:
                return value
        return None

    def _finish_move(self, models: ModelRecord, generation: int) -> tuple[ModelRecord, int]:
        """Make the recorded alias move in the registry (idempotent), then clear it (compare-and-swap)."""
        move = models.moving
        assert move is not None
        registry = self.registry()
        registry.merge_aliases(
            f"{registry.model_name(models.model_id)}@{move.to_version}", [models.alias, DEFAULT_ALIAS]
        )
        models.moving = None
        return models, self.models.write(models, generation)

    def _decided(self, record: Record, generation: int, block: RegistryModel, entry: Entry) -> tuple[Record, int]:
        steps = record.model_steps
        assert steps is not None and entry.decision is not None
        common = self._model_fields(record, block)
        now_envelope = record.envelope(self.clock())
        event: JobEvent
        if entry.action == "promoted":
            steps.decision = "promoted"
            moved = f" from version {entry.previous}" if entry.previous else ""
            event = Promoted(
                **now_envelope,
                **common,
                message=f"promoted version {steps.version} of {block.name} to `{block.alias}`{moved}: "
                f"{entry.decision.reason}",
                previous_version=entry.previous,
                decision=entry.decision,
            )
        else:
            steps.decision = "held"
            event = Held(
                **now_envelope,
                **common,
                message=f"held version {steps.version} of {block.name}: {entry.decision.reason}",
                decision=entry.decision,
            )
        logs.info(f"model decision: {steps.decision}", model=block.name, version=steps.version)
        return self._save_with(record, generation, [event])

    def _hold(self, record: Record, generation: int, block: RegistryModel, why: str) -> tuple[Record, int]:
        """End the steps without a promotion, saying why (a refusal, or a registry unreachable for too long)."""
        steps = record.model_steps
        assert steps is not None
        steps.decision = "held"
        logs.warning(f"model {block.name}: {why}")
        event = Held(**record.envelope(self.clock()), **self._model_fields(record, block), message=f"held: {why}")
        return self._save_with(record, generation, [event])

    def _model_fields(self, record: Record, block: RegistryModel) -> dict[str, Any]:
        steps = record.model_steps
        return {
            "model": block.name,
            "model_resource": self.registry().model_name(block.name),
            "version": steps.version if steps else None,
            "alias": block.alias,
        }

    def _save_with(self, record: Record, generation: int, events: list[JobEvent]) -> tuple[Record, int]:
        mine = record.add_events(events)
        generation = self.outbox.save(record, generation)
        return self.outbox.flush(record, generation, mine)


def _model_id(record: Record) -> str:
    return str(record.request["model"]["name"])


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
        "trainctl-request": sanitize_label_value(record.request_id),
        "trainctl-dataset": label_of(str(record.request["dataset"]["uri"])),
        "trainctl-image": label_of(image),
        "managed-by": MANAGED_BY,
    }
    if record.job_name:
        labels["trainctl-job"] = sanitize_label_value(record.job_name.rsplit("/", 1)[-1])
    trigger = record.trigger
    if trigger is not None and trigger.kind == "gcs" and trigger.generation:
        labels["trainctl-generation"] = sanitize_label_value(trigger.generation)
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
    return {"imageUri": str(request.trainer.image)}


def evaluation_name(key_hash: str) -> str:
    """The display name of the evaluation trainctl imports for a request: how it is found again."""
    return f"trainctl-{key_hash}"


def evaluation_body(name: str, record: Record, metrics: dict[str, Any]) -> dict[str, Any]:
    """A ModelEvaluation of the run's numeric metrics (and, for regression, the schema's own RMSE name)."""
    numbers = {k: v for k, v in metrics.items() if figure(metrics, k) is not None}
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
