"""Batch scoring's pure pieces and its exactly-once steps (functions/models/scoring.py) on the in-memory Cloud Storage,
with Vertex's BatchPredictionJobs and the Model Registry stood in: what is refused and how it is worded, the job's
body, one job and one of each event however often a marker arrives or a handler dies between two steps."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from functions.cloud.batch_snapshot import BatchPrediction
from functions.cloud.errors import Transient
from functions.cloud.registry_types import ModelVersion
from functions.ledger.model_records import ModelCharters
from functions.ledger.scoring_records import ScoringLedger
from functions.models.scoring import (
    SCORING_LABEL,
    ScoreMarker,
    ScoringRefused,
    Scorings,
    champion_problem,
    csv_inputs,
    job_body,
    model_of,
    run_as,
)
from functions.models.versions import SERVABLE_LABEL
from functions.settings import Settings
from local.memory_gcs import MemoryGcs
from schemas.events import Trigger
from tests.unit.conftest import make_charter
from tests.unit.controller_harness import MemoryPublisher

RULE = "gs://data-bucket/score/"
NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)
MODEL = "projects/proj/locations/us-central1/models/churn"


def test_a_rule_without_a_model_is_refused_naming_model_name_and_the_rule():
    assert model_of({"model": {"name": "churn"}}, RULE) == "churn"
    for template in ({}, {"model": "churn"}, {"model": {"name": ""}}):
        with pytest.raises(ScoringRefused) as refused:
            model_of(template, RULE)
        assert refused.value.errors == [
            f"model.name: the template of rule {RULE} names no model; a _SCORE marker is scored by its rule's model"
        ]


def test_the_folders_own_csv_files_are_the_input_and_parquet_alone_is_refused():
    names = ["score/a/_SCORE", "score/a/sub/x.csv", "score/a/part-0.CSV"]
    assert csv_inputs("data-bucket", "score/a/", names, RULE) == ["gs://data-bucket/score/a/*.csv"]
    with pytest.raises(ScoringRefused) as parquet:
        csv_inputs("data-bucket", "score/a/", ["score/a/part-0.parquet", "score/a/sub/x.csv"], RULE)
    (error,) = parquet.value.errors
    assert error.startswith("dataset: no CSV files in gs://data-bucket/score/a/; Parquet folders cannot be")
    assert error.endswith(f"rule {RULE}")
    with pytest.raises(ScoringRefused) as empty:
        csv_inputs("data-bucket", "score/a/", ["score/a/_SCORE"], RULE)
    assert "put the rows to score in .csv files" in empty.value.errors[0]


def test_a_missing_or_unservable_champion_is_refused():
    assert champion_problem("churn", "champion", ModelVersion(MODEL, "3"), RULE) is None
    missing = champion_problem("churn", "champion", None, RULE)
    assert missing is not None and missing.startswith("model.name: model churn has no version under its alias")
    unservable = ModelVersion(MODEL, "3", labels={SERVABLE_LABEL: "false"})
    problem = champion_problem("churn", "champion", unservable, RULE)
    assert problem is not None and "(version 3) cannot serve" in problem and RULE in problem


# ---- the steps, on stand-ins -----------------------------------------------------------------------------


@dataclass
class Registry:
    versions: dict[str, ModelVersion] = field(default_factory=dict)  # models/M@ALIAS → version

    def model_name(self, model_id: str) -> str:
        return f"projects/proj/locations/us-central1/models/{model_id}"

    def get(self, name: str) -> ModelVersion | None:
        return self.versions.get(name)


@dataclass
class Batch:
    """Vertex's BatchPredictionJobs: made by label, ended by the test."""

    jobs: dict[str, BatchPrediction] = field(default_factory=dict)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    parent: str = "projects/proj/locations/us-central1"

    def find(self, label: str, value: str) -> BatchPrediction | None:
        return next((job for job in self.jobs.values() if job.labels.get(label) == value), None)

    def find_or_create(self, job: dict[str, Any], label: str) -> tuple[BatchPrediction, bool]:
        if (found := self.find(label, job["labels"][label])) is not None:
            return found, True
        name = f"{self.parent}/batchPredictionJobs/{len(self.jobs) + 1}"
        self.jobs[name] = BatchPrediction(name, "JOB_STATE_PENDING", job["model"], labels=job["labels"])
        self.bodies.append(job)
        return self.jobs[name], False

    def get(self, name: str) -> BatchPrediction | None:
        return self.jobs.get(name)

    def cancel(self, name: str) -> None:
        raise AssertionError("scoring never cancels")

    def end(self, state: str = "JOB_STATE_SUCCEEDED", **fields: Any) -> None:
        for name, job in self.jobs.items():
            self.jobs[name] = dataclasses.replace(job, state=state, **fields)


@dataclass
class World:
    scorings: Scorings
    gcs: MemoryGcs
    batch: Batch
    publisher: MemoryPublisher
    marker: ScoreMarker


@pytest.fixture
def world(settings: Settings) -> World:
    gcs = MemoryGcs()
    charters = ModelCharters(gcs, settings.control_bucket)
    charters.write(make_charter("churn"), 0)
    registry = Registry({f"{MODEL}@champion": ModelVersion(MODEL, "3")})
    gcs.write("data-bucket", "score/a/part-0.csv", "x\n1\n", 0)
    batch, publisher = Batch(), MemoryPublisher()
    scorings = Scorings(
        settings,
        gcs,
        lambda: registry,
        charters,
        lambda: batch,
        ScoringLedger(gcs, settings.control_bucket),
        publisher,
        lambda: NOW,
    )
    key = "gcs:data-bucket/score/a/_SCORE#7"
    marker = ScoreMarker(
        "data-bucket", "score/a/_SCORE", "7", RULE, {"model": {"name": "churn"}}, None, key, "k" * 40, "gcs.score-a-7",
        Trigger(kind="gcs", bucket="data-bucket", object="score/a/_SCORE", generation="7"), "delivery-1",
    )  # fmt: skip
    return World(scorings, gcs, batch, publisher, marker)


def test_a_marker_delivered_again_makes_one_job_and_each_event_once(world: World, settings: Settings):
    assert world.scorings.start(world.marker) == "scoring"
    assert world.scorings.start(world.marker) == "scoring"
    assert len(world.batch.jobs) == 1 and world.publisher.states == ["scoring"]
    (body,) = world.batch.bodies
    assert body["model"] == f"{MODEL}@3" and body["labels"][SCORING_LABEL] == "k" * 40
    assert body["inputConfig"]["gcsSource"]["uris"] == ["gs://data-bucket/score/a/*.csv"]
    assert body["serviceAccount"] == settings.trainer_service_account
    assert world.scorings.reconcile() == {"scoring_scoring": 1}  # the job runs

    world.batch.end(successful_count=12, failed_count=1, output_directory="gs://out/prediction-x")
    assert world.scorings.reconcile() == {"scoring_finished": 1}
    assert world.scorings.start(world.marker) == "finished"
    assert world.scorings.reconcile() == {}  # out of the index
    assert world.publisher.states == ["scoring", "scored"]
    scored = world.publisher.events[-1]
    assert (scored.rows, scored.failed_rows, scored.output_uri) == (12, 1, "gs://out/prediction-x")  # type: ignore[union-attr]


def test_a_failed_job_publishes_scoring_failed_with_its_error(world: World):
    world.scorings.start(world.marker)
    world.batch.end("JOB_STATE_FAILED", error_code=3, error_message="wrong.csv: no column named mean_radius")
    world.scorings.reconcile()
    failed = world.publisher.events[-1]
    assert failed.state == "scoring_failed"
    assert (failed.job_state, failed.error_code, failed.error) == (  # type: ignore[union-attr]
        "JOB_STATE_FAILED", 3, "wrong.csv: no column named mean_radius"
    )  # fmt: skip


def test_an_event_left_unpublished_by_a_dead_handler_goes_out_once_under_its_id(world: World, settings: Settings):
    """The outbox: the event is in the record before it is published; a handler that dies publishing leaves it for
    the next visit once it is older than the grace, and it goes out with the same ce-id."""
    world.publisher.down = True
    with pytest.raises(Transient):
        world.scorings.start(world.marker)
    world.publisher.down = False
    assert world.scorings.start(world.marker) == "scoring"
    assert world.publisher.states == []  # another handler's, within the grace: left to it
    later = datetime(2026, 11, 27, 12, 1, tzinfo=UTC)
    world.scorings.clock = lambda: later
    world.scorings.reconcile()
    assert world.publisher.states == ["scoring"] and len(world.batch.jobs) == 1


def test_a_job_made_by_a_handler_that_died_before_recording_it_is_adopted(world: World):
    """The job is found by its label before another is made: a crash between the create and the record's write
    leaves a job that the next visit adopts."""
    world.batch.find_or_create(
        job_body(world.scorings._new_record(world.marker), world.scorings.settings), SCORING_LABEL
    )
    world.scorings.start(world.marker)
    assert len(world.batch.jobs) == 1 and world.publisher.states == ["scoring"]


def test_another_teams_model_is_refused_before_anything_is_made(world: World, settings: Settings):
    from functions.teams import parse_teams

    teams = parse_teams(
        {
            "default_team": "a",
            "teams": {"a": {"topic": "ta"}, "b": {"topic": "tb"}},
            "models": {"churn": {"owner": "a"}},
        }
    )
    world.scorings.settings = dataclasses.replace(settings, teams=teams)
    with pytest.raises(ScoringRefused) as refused:
        world.scorings.start(dataclasses.replace(world.marker, team="b"))
    assert refused.value.errors[0].startswith("model.name: model churn belongs to team a")
    assert world.batch.jobs == {} and world.gcs.names(settings.control_bucket, "scoring") == []
    assert world.scorings.start(dataclasses.replace(world.marker, team="a")) == "scoring"


def test_the_trainers_models_score_as_the_trainer_and_a_teams_own_container_as_the_team(settings: Settings):
    """Custom code never runs as the trainer's account (which may rewrite every built-in run's outputs): a model served
    by its own container scores as the scoring team's own account, into that team's folder only."""
    from functions.teams import parse_teams

    assert run_as("builtin", settings, None) == (settings.trainer_service_account, "runs/scoring/")
    assert run_as("image", settings, None) == (settings.custom_service_account, "custom-runs/scoring/")
    teams = parse_teams(
        {"default_team": "a", "teams": {"a": {"topic": "ta"}, "b": {"topic": "tb", "custom_service_account": "b@p"}}}
    )
    with_teams = dataclasses.replace(settings, teams=teams)
    assert run_as("image", with_teams, "b") == ("b@p", "custom-runs/_teams/b/scoring/")
    assert run_as("image", with_teams, "a") == (settings.custom_service_account, "custom-runs/scoring/")


def test_a_model_with_its_own_container_runs_as_the_custom_account(world: World, settings: Settings):
    charters = world.scorings.charters
    charter, generation = charters.read("churn")
    assert charter is not None
    charters.write(charter.model_copy(update={"kind": "localhost/own/image@sha256:" + "0" * 64}), generation)
    world.scorings.start(world.marker)
    (body,) = world.batch.bodies
    assert body["serviceAccount"] == settings.custom_service_account
    prefix = f"gs://{settings.control_bucket}/custom-runs/scoring/{'k' * 40}/"
    assert body["outputConfig"]["gcsDestination"]["outputUriPrefix"] == prefix


def test_a_tick_without_time_left_defers_the_visits_to_the_next(world: World):
    from functions.cloud import deadline

    world.scorings.start(world.marker)
    world.batch.end(successful_count=3)
    with deadline.handler_deadline(1.0):
        assert world.scorings.reconcile() == {"scoring_deferred": 1}
    assert world.publisher.states == ["scoring"]
    assert world.scorings.reconcile() == {"scoring_finished": 1}


def test_a_job_vertex_refuses_ends_the_scoring_with_scoring_failed_not_a_retry_loop(world: World):
    from functions.cloud.vertex import CallRejected

    def refuse(job: dict[str, Any], label: str) -> tuple[BatchPrediction, bool]:
        raise CallRejected(7, "PERMISSION_DENIED", "the caller may not act as the trainer's account")

    world.batch.find_or_create = refuse  # type: ignore[method-assign]
    assert world.scorings.start(world.marker) == "finished"
    failed = world.publisher.events[-1]
    assert failed.state == "scoring_failed" and failed.job_name == ""  # type: ignore[union-attr]
    assert "PERMISSION_DENIED" in failed.error and failed.error_code == 7  # type: ignore[union-attr]
    assert world.scorings.start(world.marker) == "finished" and world.publisher.states == ["scoring_failed"]


def test_a_record_whose_index_entry_was_lost_is_indexed_again_by_the_next_delivery(world: World, settings: Settings):
    world.scorings.start(world.marker)
    world.scorings.ledger.mark_inactive(world.marker.key_hash)  # a handler that died between the record and its entry
    world.scorings.start(world.marker)
    world.batch.end(successful_count=3)
    assert world.scorings.reconcile() == {"scoring_finished": 1}
