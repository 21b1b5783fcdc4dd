"""After `succeeded`, for a request with a model block: register the run as a new Model Registry version, import
its metrics as a ModelEvaluation, decide against the champion and promote or hold — exactly once, each step
recorded on the ledger record (ModelSteps) as it is done, so a redelivery or a crash resumes where it stopped.

`succeeded` is published before any of this; the record stays active (reconcile keeps visiting it) until the steps
are done. A refusal from the registry (INVALID_ARGUMENT, PERMISSION_DENIED, …) ends them with `held` and the reason;
a transient failure is tried again at the next visit, for at most GIVE_UP_AFTER, then `held` too.

Exactly once, step by step:
  copy      the run's model folder into the controller's own prefix (functions/models/artifacts.py), which the
            version is registered from: no job can rewrite it, the lifecycle rule does not delete it;
  register  look for the version labelled with the request's key hash first (ListModelVersions); else claim the
            upload on the record (compare-and-swap), then UploadModel once (a new model with `model_id` when there
            is none yet), keeping its operation on the record until it is done. A version is not listed while its
            upload runs, so a claim holds off every other upload until it expires: one that failed without an
            answer may have been made, and only a visit after the claim has expired, finding no version, uploads
            again;
  evaluate  look for the run's evaluation by its display name first; else ImportModelEvaluation;
  decide    by the model's rule (its charter, functions/ledger/model_charter.py, never the request's block), on the
            model's reference set (functions/models/decision.py), under the model's record
            (functions/ledger/model_records.py): one decision at a time per model and alias, against the version under
            the alias at that moment; a promotion is recorded before the alias moves. The first version's validation
            rows become the model's reference set when its owner named none.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions import logs
from functions.cloud import deadline
from functions.cloud.errors import Transient
from functions.cloud.failures import NOT_FOUND, PERMISSION_DENIED, call_failure_reason
from functions.cloud.gcs import Conflict, StorageError, TooLarge
from functions.cloud.ports import Registry, Storage
from functions.cloud.registry_types import ModelVersion, Upload
from functions.cloud.vertex import CallRejected
from functions.ledger.model_charter import Charter, Rule, judged_by
from functions.ledger.model_records import Entry, ModelCharters, ModelLedger, ModelRecord, Move
from functions.ledger.outbox import Outbox
from functions.ledger.record import ModelSteps, Record
from functions.models.alias_moves import finish_move
from functions.models.artifacts import NothingToCopy, copy_model_folder, reference_from_version
from functions.models.decision import Goal, NoMetric, confidence_problem, decide, figures_of, metric_and_goal
from functions.models.rollout import Rollouts
from functions.models.versions import (
    KEY_LABEL,
    NOT_SERVABLE,
    evaluation_body,
    evaluation_name,
    lineage,
    servable,
    upload_body,
)
from functions.settings import Settings
from functions.untrusted.job_outputs import MAX_OUTPUT_BYTES, Unreadable, parse_metrics
from schemas.events import Held, JobEvent, Promoted, Registered
from schemas.request import ModelBlock, TrainingJobRequest
from schemas.rules import split_gs_uri

ALREADY_EXISTS = 6  # google.rpc.Code: a model_id another run's upload took first
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
    charters: ModelCharters
    outbox: Outbox
    clock: Callable[[], datetime]
    owner: str
    rollouts: Rollouts | None = None  # rolls promoted versions out to their model's endpoint (issue 41)

    def settle(self, record: Record, generation: int) -> tuple[Record, int]:
        """Take a succeeded request's model steps as far as they go now; the record as saved. Raises Transient
        (or gcs.Conflict, for the observer to read the record again) to be visited again."""
        if not record.model_steps_pending:
            return record, generation
        steps = record.model_steps
        assert steps is not None
        block = ModelBlock.model_validate(record.request["model"])
        now = self.clock()
        if steps.since is None:
            steps.since = now
            generation = self.outbox.save(record, generation)
        charter, _ = self.charters.read(block.name)
        if charter is not None:
            block = block.model_copy(update={"alias": charter.rule.alias})  # the events name the rule's alias
        else:
            why = (
                f"model {block.name} has no charter (it was registered before models had owners): its owner adopts it "
                f"(`trainctl models adopt {block.name} --team TEAM`), then the next run is judged"
            )
            return self._hold(record, generation, block, why)
        if steps.decision is not None:  # promoted, with its rollout still under way
            assert self.rollouts is not None
            return self.rollouts.advance(record, generation, charter)
        if record.superseded_by is not None and steps.version is None:
            # A run replaced by a newer one (model.concurrency replace) whose job succeeded before its cancel took
            # effect: the newer run is the model's, so this one registers no version.
            why = f"superseded by {record.superseded_by}, a newer run of the model: no version is registered"
            return self._hold(record, generation, block, why)
        step = "copying the run's model folder"
        try:
            if steps.artifact_uri is None:
                uri = self.charters.artifacts_uri(block.name, record.key_hash)
                copy_model_folder(self.gcs, record.artifacts.model_dir, uri)
                steps.artifact_uri = uri
                generation = self.outbox.save(record, generation)
            step = "registering the run as a new version"
            if steps.version is None:
                record, generation = self._register(record, generation, block)
                steps = record.model_steps
                assert steps is not None
                if steps.version is None:
                    return record, generation  # the upload is still running: the next visit looks again
            step = f"deciding on version {steps.version}"
            if not steps.evaluated:
                record, generation = self._evaluate(record, generation)
            rolls_out = charter.deploy is not None and self.rollouts is not None
            record, generation = self._decide(record, generation, block, charter.rule, rolls_out)
            if record.model_steps is not None and record.model_steps.rollout == "waiting":
                return self.rollouts.advance(record, generation, charter)  # type: ignore[union-attr]
            return record, generation
        except NothingToCopy as exc:
            return self._hold(record, generation, block, f"nothing was registered: {exc}")
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

    def _register(self, record: Record, generation: int, block: ModelBlock) -> tuple[Record, int]:
        registry = self.registry()
        steps = record.model_steps
        assert steps is not None
        found = registry.find_version(block.name, KEY_LABEL, record.key_hash)
        if found is None and steps.operation:
            upload = self._wait_for(steps.operation)
            if upload is not None and not upload.done:
                return record, generation
            found = self._made_by(upload, block)
            if found is None:
                return record, self._forget_upload(record, generation)  # the next visit uploads again
        if found is None:
            if steps.upload_started and not self._expired(steps.upload_started):
                # Claimed and not yet listed: an upload is running (this instance's handlers share its owner id,
                # so any claim counts) or failed without an answer and may still have been made.
                return record, generation
            steps.upload_started, steps.upload_owner = self.clock(), self.owner
            generation = self.outbox.save(record, generation)  # the claim: no other handler uploads meanwhile
            started = self._upload(record, generation, block)
            steps.operation = started.operation
            generation = self.outbox.save(record, generation)
            upload = started if started.done else self._wait_for(started.operation)
            if upload is None or not upload.done:
                return record, generation
            found = self._made_by(upload, block)
            if found is None:
                return record, self._forget_upload(record, generation)
        return self._registered(record, generation, block, found)

    def _upload(self, record: Record, generation: int, block: ModelBlock) -> Upload:
        """UploadModel: a new model when there is none yet, else a version of it. Two first successes may race
        to create the model: the one refused ALREADY_EXISTS uploads as a version of the other's, once that is
        readable."""
        registry = self.registry()
        name = registry.model_name(block.name)
        new_model = registry.get(name) is None
        try:
            return registry.upload(upload_body(record, block, self.settings, name, new_model))
        except CallRejected as exc:
            if not new_model or exc.code != ALREADY_EXISTS:
                raise
        try:
            return registry.upload(upload_body(record, block, self.settings, name, False))
        except CallRejected as exc:
            if exc.code != NOT_FOUND:
                raise
            self._forget_upload(record, generation)  # nothing was uploaded: no claim to wait out
            raise Transient(f"model {block.name} is being created by another run's upload; trying again") from None

    def _made_by(self, upload: Upload | None, block: ModelBlock) -> ModelVersion | None:
        """The version a finished upload made; None when it made none: Vertex forgot the operation, or another run
        created the model first (ALREADY_EXISTS). Any other error is the registry's refusal."""
        if upload is None or upload.error_code == ALREADY_EXISTS:
            return None
        if upload.error_code:
            raise CallRejected(upload.error_code, call_failure_reason(upload.error_code), upload.error_message)
        registry = self.registry()
        return registry.get(f"{registry.model_name(block.name)}@{upload.version_id}") if upload.version_id else None

    def _forget_upload(self, record: Record, generation: int) -> int:
        steps = record.model_steps
        assert steps is not None
        steps.operation = steps.upload_started = steps.upload_owner = None
        return self.outbox.save(record, generation)

    def _wait_for(self, operation: str) -> Upload | None:
        """The upload's operation, waited on briefly while it runs."""
        registry = self.registry()
        return deadline.poll(lambda: registry.operation(operation), lambda u: u is None or u.done, WAIT_SECONDS)

    def _expired(self, since: datetime) -> bool:
        """A claim older than a handler can live was left by one that died."""
        window = timedelta(seconds=max(self.settings.lease, self.settings.function_timeout))
        return self.clock() - since > window

    def _registered(
        self, record: Record, generation: int, block: ModelBlock, version: ModelVersion | None
    ) -> tuple[Record, int]:
        if version is None:
            raise Transient(f"the new version of {block.name} is not readable yet")
        steps = record.model_steps
        assert steps is not None
        steps.version, steps.operation = version.version_id, None
        deployable = servable(TrainingJobRequest.model_validate(record.request))
        not_deployable = "" if deployable else f"; {NOT_SERVABLE}"
        event = Registered(
            **record.envelope(self.clock()),
            message=f"registered version {version.version_id} of model {block.name}{not_deployable}",
            model=block.name,
            # Vertex answers with the project number; every event spells it with the project id, as _model_fields
            # and the command line's moves do (schemas/events.py, _ModelEvent.model_resource).
            model_resource=self.registry().model_name(block.name),
            version=version.version_id,
            artifact_uri=steps.artifact_uri or record.artifacts.model_dir,
            lineage=lineage(record, self.settings),
            servable=deployable,
        )
        return self._save_with(record, generation, [event])

    # ---- evaluate ----------------------------------------------------------------------------------------

    def _evaluate(self, record: Record, generation: int) -> tuple[Record, int]:
        """The run's metrics as a ModelEvaluation of its version, so they show in the console. Best effort: a
        refusal is logged and the decision goes on (it reads the figures from metrics.json, not from here)."""
        steps = record.model_steps
        registry = self.registry()
        assert steps is not None and steps.version is not None
        version = f"{registry.model_name(str(record.request['model']['name']))}@{steps.version}"
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

    def _decide(
        self, record: Record, generation: int, block: ModelBlock, rule: Rule, rolls_out: bool = False
    ) -> tuple[Record, int]:
        steps = record.model_steps
        registry = self.registry()
        assert steps is not None and steps.version is not None and steps.artifact_uri is not None
        metrics, note = self._metrics(record)
        try:
            metric, goal = metric_and_goal(rule, metrics)
        except NoMetric as exc:
            return self._hold(record, generation, block, f"version {steps.version} cannot be compared: {exc}")
        waited_until = time.monotonic() + WAIT_SECONDS
        for _ in range(20):
            models, model_generation = self.models.read(block.name, rule.alias)
            if models.moving is not None:
                mine = models.moving.owner == record.key_hash
                if not mine and not self._expired(models.moving.since):
                    if time.monotonic() > waited_until or not deadline.allows(2.0):
                        return record, generation  # another request's promotion is in flight: the next visit
                    time.sleep(random.uniform(0.1, 0.3))
                    continue
                try:
                    models, model_generation = finish_move(registry, self.models, models, model_generation)
                except Conflict:
                    continue
            entry = models.decided(record.key_hash)
            if entry is None:
                entry = self._new_decision(record, models, model_generation, rule, metric, goal, (metrics, note))
                if entry is None:
                    continue  # the model's records changed meanwhile: decide again against what they hold now
            return self._decided(record, generation, block, entry, rolls_out)
        raise Transient(f"the record of model {block.name} kept changing")

    def _new_decision(
        self,
        record: Record,
        models: ModelRecord,
        model_generation: int,
        rule: Rule,
        metric: str,
        goal: Goal,
        read: tuple[dict[str, Any], str],
    ) -> Entry | None:
        """Decide against the version under the alias now, record it (and the promotion's move) on the model's
        record, and make the move; the entry, or None when the charter or the record changed meanwhile."""
        steps = record.model_steps
        registry = self.registry()
        metrics, note = read
        assert steps is not None and steps.version is not None and steps.artifact_uri is not None
        charter, charter_generation = self.charters.read(models.model_id)
        assert charter is not None  # charters are never deleted
        champion = registry.get(f"{registry.model_name(models.model_id)}@{rule.alias}")
        held_by = champion.version_id if champion else None
        blocked = self._blocked(steps, charter, held_by, metrics) if champion else ""
        promote, decision = decide(figures_of(metrics, metric, goal, charter.rule, held_by, blocked))
        if champion is not None and champion.version_id == steps.version:
            promote, reason = True, f"version {steps.version} already holds `{rule.alias}` (moved by hand)"
            decision = decision.model_copy(update={"reason": reason, "champion": None, "champion_version": None})
            champion = None
        if note:
            decision = decision.model_copy(update={"reason": f"{decision.reason}; {note}"})
        updated = charter if charter.rule.metric else charter.with_metric(metric, goal, self.clock())
        if promote and champion is None and charter.reference is None and charter.reference_from_first_version:
            updated = reference_from_version(
                self.gcs, self.charters, updated, steps.artifact_uri, steps.version, self.clock()
            )
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
            dataset_fingerprint=record.dataset_fingerprint,
        )
        models.record(entry)
        if promote:
            models.push_champion(steps.version, previous)
            models.moving = Move(
                to_version=steps.version, owner=record.key_hash, since=self.clock(), aliases=rule.aliases()
            )
        try:
            if updated is not charter:
                self.charters.write(updated, charter_generation)
            model_generation = self.models.write(models, model_generation)
        except Conflict:
            return None
        if promote:
            finish_move(registry, self.models, models, model_generation)
        return entry

    @staticmethod
    def _blocked(steps: ModelSteps, charter: Charter, champion: str | None, metrics: dict[str, Any]) -> str:
        """Why the run's evidence cannot judge it against the champion of this moment; "" when it can. A run is
        judged only on what it was given: this champion, this reference set, this rule."""
        if steps.rule is not None and not judged_by(steps.rule, charter.rule):
            return f"the model's rule changed while this run trained (now: {charter.rule.describe()})"
        if charter.reference is None:
            return (
                f"model {charter.model_id} has no reference set to judge on: its owner sets one "
                f"(`trainctl models rule {charter.model_id} --reference URI`)"
            )
        if steps.reference_id != charter.reference.id:
            return "the model's reference set changed while this run trained"
        if steps.champion_version != champion:
            given = f"version {steps.champion_version}" if steps.champion_version else "no champion"
            return f"the champion is version {champion}, but this run was given {given} to score"
        return confidence_problem(metrics, charter.rule)

    def _decided(
        self, record: Record, generation: int, block: ModelBlock, entry: Entry, rolls_out: bool = False
    ) -> tuple[Record, int]:
        """Record the decision and its event; a promotion of a model with a deploy block starts its rollout
        (`waiting`) in the same save, so that no crash leaves a promoted version that is never rolled out."""
        steps = record.model_steps
        assert steps is not None and entry.decision is not None
        common = self._model_fields(record, block)
        now_envelope = record.envelope(self.clock())
        event: JobEvent
        if entry.action == "promoted":
            steps.decision = "promoted"
            steps.rollout = "waiting" if rolls_out else None
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

    def _hold(self, record: Record, generation: int, block: ModelBlock, why: str) -> tuple[Record, int]:
        """End the steps without a promotion, saying why (a refusal, or a registry unreachable for too long)."""
        steps = record.model_steps
        assert steps is not None
        steps.decision = "held"
        logs.warning(f"model {block.name}: {why}")
        event = Held(**record.envelope(self.clock()), **self._model_fields(record, block), message=f"held: {why}")
        return self._save_with(record, generation, [event])

    def _model_fields(self, record: Record, block: ModelBlock) -> dict[str, Any]:
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
