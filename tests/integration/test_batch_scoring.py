"""Batch scoring (issue 41, point 3) on the live functions and the local stack: a `_SCORE` marker in a folder of CSV
files under a rule whose template names a model has the files scored by the model's champion in one Vertex
BatchPredictionJob — `scoring`, then `scored` with the rows and an output folder whose predictions exist — however
often its event is delivered; a Parquet folder, and a model of another team, are refused naming the field and the
rule.

The champion is a real model (tests/integration/deployment.py train_breast_cancer_model) that the trainer stand-in
copies beside its metrics, so the version really serves; the local JobService scores with `python -m trainer.predict`.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
import requests
from google.cloud.storage import Blob

from functions.intake.triggers import derive_request_id
from functions.ledger.keys import key_hash, marker_key
from functions.models.scoring import SCORING_LABEL
from local.names import LOCAL_PROJECT, LOCAL_REGION
from schemas.events import Rejected, Scored, Scoring
from tests.integration.deployment import (
    TRAINER_STAND_IN,
    Deployment,
    builtin_request,
    serving,
    train_breast_cancer_model,
)

pytestmark = pytest.mark.integration

PARENT = f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"
MODEL = f"m-score-{uuid.uuid4().hex[:8]}"


def first_version_metrics() -> dict[str, Any]:
    """A classification run's metrics.json, its figure on its own rows and on the reference set (the first version is
    promoted whatever it is)."""
    return {
        "task": "classification",
        "metric": "accuracy",
        "val_accuracy": 0.9,
        "reference_val_accuracy": 0.9,
        "reference_rows": 200,
        "reference_confidence": 0.95,
    }


def scoring_rules(deployment: Deployment) -> dict[str, str]:
    return {
        "TRAINCTL_TRIGGER_RULES": json.dumps({f"gs://{deployment.data_bucket}/scoring/": {"model": {"name": MODEL}}})
    }


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    log_dir = tmp_path_factory.mktemp("functions")
    with serving(jobservice, log_dir, settings_for=scoring_rules, TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN) as deployed:
        yield deployed


@pytest.fixture(scope="module")
def champion(deployment: Deployment, tmp_path_factory: pytest.TempPathFactory) -> str:
    """MODEL's first version, a real breast-cancer model, promoted to `champion`; its version id."""
    model_dir = train_breast_cancer_model(tmp_path_factory.mktemp("trained"))
    events = deployment.events()
    metrics = json.dumps(first_version_metrics())
    document = builtin_request(
        deployment, "score-champion", "--metrics", metrics, "--model-from", str(model_dir), model={"name": MODEL}
    )
    assert deployment.request(document) == 200
    promoted = events.wait_for("score-champion", "promoted", act=deployment.reconcile, timeout=120)
    assert promoted.version is not None
    return promoted.version


def features(rows: int, start: int = 0) -> bytes:
    """`rows` rows of the breast cancer table's features (no target), as CSV."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    names = [name.replace(" ", "_") for name in data.feature_names]
    table = pa.table({name: data.data[start : start + rows, i] for i, name in enumerate(names)})
    buffer = io.BytesIO()
    pa_csv.write_csv(table, buffer)
    return buffer.getvalue()


def jobs_labelled(deployment: Deployment, khash: str) -> list[dict[str, Any]]:
    url = f"{deployment.vertex_endpoint.rstrip('/')}/v1/{PARENT}/batchPredictionJobs"
    answer = requests.get(url, params={"filter": f'labels.{SCORING_LABEL}="{khash}"'}, timeout=30)
    answer.raise_for_status()
    return list(answer.json().get("batchPredictionJobs") or [])


def rows_under(deployment: Deployment, output_uri: str) -> int:
    bucket, _, prefix = output_uri.removeprefix("gs://").partition("/")
    blobs = [b for b in deployment.storage().bucket(bucket).list_blobs(prefix=prefix.rstrip("/") + "/")]
    predictions = [b for b in blobs if b.name.rsplit("/", 1)[-1].startswith("predictions_")]
    assert predictions, f"no predictions under {output_uri}: {[b.name for b in blobs]}"
    return sum(pa_csv.read_csv(io.BytesIO(b.download_as_bytes())).num_rows for b in predictions)


def refusal(deployment: Deployment, marker: Blob) -> str:
    """Deliver `marker`'s event; the one error of the `rejected` it is answered with, after checking no job was made."""
    request_id = derive_request_id(marker.name, str(marker.generation))
    events = deployment.events()
    assert deployment.deliver("on_dataset_upload", deployment.notification_event(marker)) == 200
    rejected = events.wait_for(request_id, "rejected")
    assert isinstance(rejected, Rejected)
    khash = key_hash(marker_key(marker.bucket.name, marker.name, str(marker.generation)))
    assert jobs_labelled(deployment, khash) == []
    (error,) = rejected.errors
    return error


def test_a_score_marker_scores_the_folder_once_with_the_champion(deployment: Deployment, champion: str):
    """`scoring` once the job exists, `scored` once it ends with every row of the folder's CSV files, its output
    folder holding the predictions; the marker's event delivered three times (twice before the job ends, once after)
    makes one job and publishes each event once."""
    deployment.upload("scoring/2026-11-27/part-0.csv", features(15))
    deployment.upload("scoring/2026-11-27/part-1.csv", features(10, start=100))
    deployment.upload("scoring/2026-11-27/sub/ignored.csv", features(7))  # a subfolder is not the folder's
    marker = deployment.upload("scoring/2026-11-27/_SCORE", "ignored: a scoring marker's content is not read")
    request_id = derive_request_id(marker.name, str(marker.generation))
    khash = key_hash(marker_key(marker.bucket.name, marker.name, str(marker.generation)))
    events = deployment.events()
    delivery = deployment.notification_event(marker)

    assert deployment.deliver("on_dataset_upload", delivery) == 200
    assert deployment.deliver("on_dataset_upload", delivery) == 200
    scoring = events.wait_for(request_id, "scoring")
    assert isinstance(scoring, Scoring)
    assert (scoring.model, scoring.version) == (MODEL, champion)
    assert scoring.input_uris == [f"gs://{deployment.data_bucket}/scoring/2026-11-27/*.csv"]

    scored = events.wait_for(request_id, "scored", act=deployment.reconcile, timeout=180)
    assert isinstance(scored, Scored)
    assert (scored.rows, scored.failed_rows, scored.version) == (25, 0, champion)
    assert scored.output_uri.startswith(scoring.output_prefix)
    assert rows_under(deployment, scored.output_uri) == 25

    assert deployment.deliver("on_dataset_upload", delivery) == 200
    deployment.reconcile()
    assert events.states(request_id) == ["scoring", "scored"]
    assert [job["name"] for job in jobs_labelled(deployment, khash)] == [scoring.job_name]


def test_a_parquet_folder_is_refused_naming_the_rule(deployment: Deployment):
    """Vertex has no Parquet instances format: the folder is refused, naming `dataset` and the rule, and no job is
    made."""
    deployment.upload("scoring/parquet/part-0.parquet", b"PAR1 not really PAR1")
    error = refusal(deployment, deployment.upload("scoring/parquet/_SCORE"))
    assert error.startswith("dataset: no CSV files") and "Parquet" in error
    assert f"gs://{deployment.data_bucket}/scoring/" in error


TEAMS: dict[str, Any] = {
    "default_team": "shared",
    "teams": {
        "shared": {"topic": "it-score-shared"},
        "a": {"topic": "it-score-a", "data_prefixes": ["team-a/"]},
        "b": {"topic": "it-score-b", "data_prefixes": ["team-b/"]},
    },
    "models": {MODEL: {"owner": "a"}},
}


def team_rules(deployment: Deployment) -> dict[str, str]:
    """Team b's rule names team a's model."""
    rule = {f"gs://{deployment.data_bucket}/team-b/": {"team": "b", "model": {"name": MODEL}}}
    return {
        "TRAINCTL_TEAMS": json.dumps(TEAMS | {"data_bucket": deployment.data_bucket}),
        "TRAINCTL_TRIGGER_RULES": json.dumps(rule),
    }


def test_another_teams_model_is_refused(pubsub_emulator, fake_gcs, jobservice, tmp_path: Path):
    """A rule of team b naming team a's model (a grants nothing) is refused naming `model.name` and the rule."""
    with serving(jobservice, tmp_path, settings_for=team_rules) as teams:
        teams.upload("team-b/rows/part-0.csv", features(5))
        error = refusal(teams, teams.upload("team-b/rows/_SCORE"))
        assert error.startswith(f"model.name: model {MODEL} belongs to team a")
        assert f"gs://{teams.data_bucket}/team-b/" in error
