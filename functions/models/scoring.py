"""Batch scoring (issue 41, point 3): a `_SCORE` marker (settings.score_marker_names) in a folder under a trigger rule
whose template names a model has the folder's CSV files scored by that model's champion, in a Vertex
BatchPredictionJob — exactly once per marker generation, with `scoring` when the job exists and `scored` (or
`scoring_failed`) when it ends.

Refused before anything is made, with `rejected` naming the field and the rule: a rule without `model.name`, a model
the rule's team may not use (its owner's and granted teams' only), no champion, a champion that cannot serve, a folder
without CSV files (Vertex has no Parquet instances format). The marker's content is not read.

Exactly once: the record (functions/ledger/scoring_records.py) is created first (compare-and-swap from nothing), the
job carries the record's key hash as a label and is looked up by it before it is made (VertexBatchPredictions
.find_or_create), and each event is written into the record before it is published. The reconcile sweep visits each
record in the index until its last event is out.

The predictions go under the control bucket (gs://<control>/runs/scoring/<key hash>/ for the built-in trainer's
models), not beside the data: the job runs as the account that trains the model, which may write only its own folder
there (terraform/iam.tf, teams.tf) and only reads the data buckets; predictions written into the data folder would
also become part of the next training marker's dataset (`run_as`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions import logs
from functions.cloud import deadline
from functions.cloud.batch_snapshot import BatchPrediction
from functions.cloud.errors import Transient
from functions.cloud.gcs import Conflict
from functions.cloud.job_labels import DEPLOYMENT, deployment_label
from functions.cloud.ports import BatchPredictions, Events, Registry, Storage
from functions.cloud.registry_types import ModelVersion
from functions.cloud.vertex import CallRejected
from functions.jobs.planning import CUSTOM_RUNS_PREFIX, RUNS_PREFIX, TEAMS_FOLDER
from functions.ledger.keys import id_namespace
from functions.ledger.model_charter import Charter
from functions.ledger.model_records import ModelCharters
from functions.ledger.monitoring_fields import published_fields
from functions.ledger.scoring_records import ScoringLedger, ScoringRecord
from functions.models.versions import BUILTIN_TRAINER, SERVABLE_LABEL
from functions.settings import Settings
from schemas.events import JobEvent, Scored, Scoring, ScoringFailed, Trigger

SCORING_LABEL = "trainctl_scoring"  # the job's label: the record's key hash
SCORING_FOLDER = "scoring/"
# What each job's one replica runs on: Vertex requires dedicated resources for a custom-trained model's batch job
# (BatchPredictionJob.dedicated_resources: "if the Model doesn't support AUTOMATIC_RESOURCES, this config must be
# provided"; custom-trained models support DEDICATED_RESOURCES only).
SCORING_MACHINE = "n1-standard-4"
# What a reconcile visit of one scoring needs at most (a few Cloud Storage calls, one Vertex call, a publish).
VISIT_SECONDS = 10.0


class ScoringRefused(Exception):
    """The marker cannot be scored; `errors` name the field and the rule."""

    def __init__(self, errors: list[str], message: str):
        super().__init__(message)
        self.errors, self.message = errors, message


@dataclass(frozen=True)
class ScoreMarker:
    bucket: str
    name: str
    generation: str
    rule: str  # the trigger rule's prefix
    template: dict[str, Any]  # without its team
    team: str | None
    key: str
    key_hash: str
    request_id: str
    trigger: Trigger
    delivery: str  # the delivery's event id

    @property
    def folder(self) -> str:
        """The marker's folder inside its bucket ('' at the bucket's root, else ending in /)."""
        return self.name.rsplit("/", 1)[0] + "/" if "/" in self.name else ""


def model_of(template: dict[str, Any], rule: str) -> str:
    """The model a rule's scoring markers are scored by: its template's model.name."""
    block = template.get("model")
    name = block.get("name") if isinstance(block, dict) else None
    if not isinstance(name, str) or not name:
        raise ScoringRefused(
            [f"model.name: the template of rule {rule} names no model; a _SCORE marker is scored by its rule's model"],
            "the rule names no model to score with",
        )
    return name


def csv_inputs(bucket: str, folder: str, names: Iterable[str], rule: str) -> list[str]:
    """The job's input URIs: the folder's own CSV files (not its subfolders') as one wildcard, which Vertex reads
    as Cloud Storage does (https://cloud.google.com/storage/docs/wildcards: `*` stays within one folder). The listing
    stops at the first CSV file. Refused when there is none."""
    parquet = False
    for name in names:
        own = name.removeprefix(folder).lower()
        if "/" in own:
            continue
        if own.endswith(".csv"):
            return [f"gs://{bucket}/{folder}*.csv"]
        parquet = parquet or own.endswith(".parquet")
    if parquet:
        why = f"Parquet folders cannot be batch-scored by Vertex (its instances formats have no Parquet); rule {rule}"
    else:
        why = f"put the rows to score in .csv files beside the marker (rule {rule})"
    raise ScoringRefused([f"dataset: no CSV files in gs://{bucket}/{folder}; {why}"], "there is nothing to score")


def champion_problem(model: str, alias: str, champion: ModelVersion | None, rule: str) -> str | None:
    if champion is None:
        return f"model.name: model {model} has no version under its alias `{alias}` yet (rule {rule}): nothing scores"
    if champion.labels.get(SERVABLE_LABEL) == "false":
        return (
            f"model.name: the champion of model {model} (version {champion.version_id}) cannot serve: it was "
            f"registered without a model.serving container (rule {rule})"
        )
    return None


def run_as(kind: str, settings: Settings, team: str | None) -> tuple[str, str]:
    """(the account the job runs as, the control bucket's folder its predictions go under). The built-in trainer's
    serving container runs as the trainer's account and writes below runs/, as its training does; a model served by
    its team's own container (`model.serving`) runs as the scoring team's own account (settings.custom_account) and
    writes only that team's folder below custom-runs/, as its own code's training does (functions/jobs/planning.py):
    custom code never runs as the trainer's account, which may rewrite every built-in run's outputs."""
    if kind == BUILTIN_TRAINER:
        return settings.trainer_service_account, f"{RUNS_PREFIX}{SCORING_FOLDER}"
    namespace = id_namespace(team, settings.teams.default_team) if settings.teams else None
    folder = f"{TEAMS_FOLDER}{namespace}/" if namespace else ""
    return settings.custom_account(team), f"{CUSTOM_RUNS_PREFIX}{folder}{SCORING_FOLDER}"


def job_body(record: ScoringRecord, settings: Settings) -> dict[str, Any]:
    """The REST BatchPredictionJob (googleapis google/cloud/aiplatform/v1/batch_prediction_job.proto)."""
    body: dict[str, Any] = {
        "displayName": f"trainctl-score-{record.key_hash[:16]}",
        "model": record.model_version,
        "inputConfig": {"instancesFormat": "csv", "gcsSource": {"uris": record.input_uris}},
        "outputConfig": {"predictionsFormat": "csv", "gcsDestination": {"outputUriPrefix": record.output_prefix}},
        "dedicatedResources": {
            "machineSpec": {"machineType": SCORING_MACHINE},
            "startingReplicaCount": 1,
            "maxReplicaCount": 1,
        },
        "labels": {SCORING_LABEL: record.key_hash, DEPLOYMENT: deployment_label(settings.control_bucket)},
    }
    if record.service_account:
        # BatchPredictionJob.service_account: what the job's containers run as (googleapis commit b4dea4a).
        body["serviceAccount"] = record.service_account
    return body


@dataclass
class Scorings:
    settings: Settings
    gcs: Storage
    registry: Callable[[], Registry]
    charters: ModelCharters
    batch: Callable[[], BatchPredictions]  # built on first use: only scoring needs it
    ledger: ScoringLedger
    publisher: Events
    clock: Callable[[], datetime]

    def start(self, marker: ScoreMarker) -> str:
        """Score the marker's folder once; a redelivery finds the record and goes on from it. Raises ScoringRefused
        (nothing made) or Transient."""
        found = self.ledger.read(marker.key_hash)
        if found is None:
            record = self._new_record(marker)
            try:
                generation = self.ledger.write(record, 0)
            except Conflict:
                found = self.ledger.read(marker.key_hash)
                assert found is not None
                record, generation = found
        else:
            record, generation = found
        if not record.finished:  # again at each delivery: a handler may have died between the record and its entry
            self.ledger.mark_active(marker.key_hash)
        return self._advance(record, generation)

    def visit(self, khash: str) -> str:
        """One reconcile visit of an unfinished scoring."""
        found = self.ledger.read(khash)
        if found is None:
            self.ledger.mark_inactive(khash)
            return "gone"
        return self._advance(*found)

    def reconcile(self) -> dict[str, int]:
        """Visit each unfinished scoring, as long as the tick's deadline leaves time; counts by outcome."""
        summary: dict[str, int] = {}
        for khash in self.ledger.active():
            if not deadline.allows(VISIT_SECONDS):
                outcome = "deferred"  # the next tick visits it
            else:
                try:
                    outcome = self.visit(khash)
                except Exception as exc:  # the sweep goes on
                    logs.error(f"scoring {khash}: {type(exc).__name__}: {exc}", key_hash=khash)
                    outcome = "errors"
            summary[f"scoring_{outcome}"] = summary.get(f"scoring_{outcome}", 0) + 1
        return summary

    # ---- the steps ---------------------------------------------------------------------------------------

    def _new_record(self, marker: ScoreMarker) -> ScoringRecord:
        model = model_of(marker.template, marker.rule)
        charter, _ = self.charters.read(model)
        if problem := self._team_problem(model, charter, marker):
            raise ScoringRefused([problem], "the rule's team may not use the model")
        if charter is None:
            raise ScoringRefused(
                [f"model.name: model {model} has no versions trained by trainctl yet (rule {marker.rule})"],
                "the rule's model does not exist",
            )
        registry = self.registry()
        alias = charter.rule.alias
        champion = registry.get(f"{registry.model_name(model)}@{alias}")
        if problem := champion_problem(model, alias, champion, marker.rule):
            raise ScoringRefused([problem], "the model's champion cannot score")
        assert champion is not None
        names = (name for name, _ in self.gcs.objects_under(marker.bucket, marker.folder))
        inputs = csv_inputs(marker.bucket, marker.folder, names, marker.rule)
        account, folder = run_as(charter.kind, self.settings, marker.team)
        if self.settings.trainer_service_account and not account:
            raise ScoringRefused(
                [
                    f"model.name: model {model} serves with its own container, which runs only as the custom images' "
                    f"account, and none is set (custom_service_account; rule {marker.rule})"
                ],
                "the model's own container has no account to run as",
            )
        return ScoringRecord(
            key=marker.key,
            key_hash=marker.key_hash,
            request_id=marker.request_id,
            team=marker.team,
            trigger=marker.trigger.model_dump(mode="json", exclude_none=True),
            delivery=marker.delivery,
            model_id=model,
            version=champion.version_id,
            model_version=champion.name,
            input_uris=inputs,
            output_prefix=f"gs://{self.settings.control_bucket}/{folder}{marker.key_hash}/",
            service_account=account,
            created=self.clock(),
        )

    def _team_problem(self, model: str, charter: Charter | None, marker: ScoreMarker) -> str | None:
        """Why the rule's team may not score with the model (its owner's and granted teams' rules only), or None. The
        operator's word in the teams setting outranks the charter's, as for training (functions/models/intake.py)."""
        teams = self.settings.teams
        if teams is None or marker.team is None:
            return None
        declared = teams.models.get(model)
        if declared is not None:
            owner, grants = declared.owner, declared.grants
        elif charter is not None:
            owner, grants = charter.owner, charter.grants
        else:
            return None
        if marker.team == owner or marker.team in grants:
            return None
        return (
            f"model.name: model {model} belongs to team {owner}, which does not grant it to team {marker.team}, whose "
            f"rule {marker.rule} this is: only its owner's and granted teams' markers are scored with it"
        )

    def _advance(self, record: ScoringRecord, generation: int) -> str:
        mine: set[str] = set()
        if record.job_name is None:
            try:
                job, adopted = self.batch().find_or_create(job_body(record, self.settings), SCORING_LABEL)
            except CallRejected as exc:  # a job Vertex will never make (a permission, the model's formats): not retried
                code, why = (
                    exc.code,
                    f"Vertex refused the batch prediction job ({exc.reason}, code {exc.code}): {exc.message}",
                )
                record, generation, mine = self._change(record, generation, lambda r: self._refused(r, code, why))
            else:
                logs.info(
                    f"{'found' if adopted else 'created'} batch prediction job {job.name}", key_hash=record.key_hash
                )
                record, generation, mine = self._change(record, generation, lambda r: self._created(r, job))
        if not record.final_queued and record.job_name:
            now = self.batch().get(record.job_name)
            if now is None or now.ended:
                record, generation, more = self._change(record, generation, lambda r: self._ended(r, now))
                mine |= more
        record, generation = self._flush(record, generation, mine)
        if record.finished:
            self.ledger.mark_inactive(record.key_hash)
            return "finished"
        return "scoring"

    def _change(
        self, record: ScoringRecord, generation: int, change: Callable[[ScoringRecord], set[str]]
    ) -> tuple[ScoringRecord, int, set[str]]:
        """Apply `change` (which queues events; the states it queued) and compare-and-swap; on a conflict, read the
        record again and apply it to that."""
        for _ in range(5):
            queued = change(record)
            try:
                return record, self.ledger.write(record, generation), queued
            except Conflict:
                found = self.ledger.read(record.key_hash)
                assert found is not None
                record, generation = found
        raise Transient(f"the scoring record {record.key_hash} kept changing")

    def _created(self, record: ScoringRecord, job: BatchPrediction) -> set[str]:
        if record.job_name is not None:
            return set()  # another delivery recorded it first
        record.job_name = job.name
        event = Scoring(
            **self._envelope(record, f"scoring {record.input_uris[0]} with version {record.version}"),
            input_uris=record.input_uris,
            output_prefix=record.output_prefix,
        )
        record.queue(event, self.clock())
        return {event.state}

    def _refused(self, record: ScoringRecord, code: int, why: str) -> set[str]:
        if record.job_name is not None:
            return set()  # another delivery made or was refused the job first
        record.job_name = ""  # none: refused
        event = ScoringFailed(
            **self._envelope(record, why), job_state="JOB_STATE_UNSPECIFIED", error_code=code, error=why
        )
        record.queue(event, self.clock())
        return {event.state}

    def _ended(self, record: ScoringRecord, job: BatchPrediction | None) -> set[str]:
        if record.final_queued:
            return set()
        event: JobEvent
        if job is not None and job.state == "JOB_STATE_SUCCEEDED":
            event = Scored(
                **self._envelope(record, f"scored {job.successful_count} rows into {job.output_directory}"),
                rows=job.successful_count,
                failed_rows=job.failed_count,
                output_uri=job.output_directory,
            )
        else:
            state = job.state if job else "JOB_STATE_UNSPECIFIED"
            error = job.error_message if job else "the batch prediction job no longer exists"
            event = ScoringFailed(
                **self._envelope(record, f"the batch prediction job ended {state}: {error}"),
                job_state=state,
                error_code=job.error_code if job else 0,
                error=error,
            )
        record.queue(event, self.clock())
        return {event.state}

    def _envelope(self, record: ScoringRecord, message: str) -> dict[str, Any]:
        assert record.job_name is not None
        return {
            "request_id": record.request_id,
            "request_key": record.key,
            "time": self.clock(),
            "message": message,
            "trigger": Trigger.model_validate(record.trigger),
            "team": record.team,
            "model": record.model_id,
            "version": record.version,
            "job_name": record.job_name,
        }

    def _flush(self, record: ScoringRecord, generation: int, mine: set[str]) -> tuple[ScoringRecord, int]:
        """Publish the events this handler queued and those another left longer than the grace; then mark them."""
        events = record.due(mine, self.clock() - timedelta(seconds=self.settings.outbox_grace))
        if not events:
            return record, generation
        for event in events:
            self.publisher.publish(event)
            logs.info(f"published {event.state}", **published_fields(event))
        done: set[str] = {event.state for event in events}

        def mark(r: ScoringRecord) -> set[str]:
            r.mark_published(done)
            return set()

        record, generation, _ = self._change(record, generation, mark)
        return record, generation
