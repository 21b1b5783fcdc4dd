"""Bad data never reaches a GPU (issue 27) on the live functions, the local Model Registry and fake-gcs-server: a
request whose model has a champion with a schema.json has its new dataset's header (CSV's first line, Parquet's
footer) compared with that schema before anything is claimed; a dropped feature, a renamed target or a changed type
is `rejected` with reason `data`, one error per column, no ledger record and no job. Extra columns are accepted and
named. A run the built-in trainer stopped for its data (failure.json reason `data`) ends `failed` with reason
`data`, not resubmitted; its drift figures reach the events, the registry and `trainctl models show`.

The champion's schema.json is written by the test, following the trainer's contract (trainer/ writes it; the
trainer stand-in, tests/local/programs/fake_node.py, does not)."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

from local.names import LOCAL_PROJECT, LOCAL_REGION
from schemas.events import Accepted, Failed, Rejected
from tests.integration.deployment import TRAINER_STAND_IN, Deployment, fake_node_request, serving
from tests.integration.test_controller_intake import jobs_with_key
from trainctl.cli import main as trainctl

PARENT = f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"
TARGET = "churned"
# The champion's data: what schema.json records (the contract of issue 27, point 1).
SCHEMA = {
    "schema_version": 1,
    "format": "csv",
    "target": TARGET,
    "task": "classification",
    "rows": 2,
    "columns": [
        {"name": "age", "type": "number", "physical": "int64", "role": "feature", "missing_rate": 0.0,
         "stats": {"mean": 42.5, "std": 8.5, "min": 34, "max": 51}},
        {"name": "plan", "type": "string", "physical": "string", "role": "feature", "missing_rate": 0.0,
         "stats": {"top": {"basic": 0.5, "pro": 0.5}}},
        {"name": "active", "type": "boolean", "physical": "bool", "role": "feature", "missing_rate": 0.0,
         "stats": {"mean": 0.5}},
        {"name": TARGET, "type": "number", "physical": "int64", "role": "target", "missing_rate": 0.0,
         "stats": {"mean": 0.5}},
    ],
}  # fmt: skip
GOOD = {"age": [34, 51], "plan": ["basic", "pro"], "active": [True, False], TARGET: [0, 1]}
# Each way a new partition breaks the contract, and the one error it must get.
BROKEN: dict[str, tuple[dict[str, list[Any]], str]] = {
    "dropped feature": (
        {k: v for k, v in GOOD.items() if k != "plan"},
        "dataset: column 'plan' is missing (a feature of the champion)",
    ),
    "renamed target": (
        {"churn" if k == TARGET else k: v for k, v in GOOD.items()},
        f"dataset: column '{TARGET}' is missing (the target)",
    ),
    "changed type": (GOOD | {"age": ["thirty-four", "fifty-one"]}, "dataset: column 'age' was number, is string"),
}


def csv_bytes(columns: dict[str, list[Any]]) -> bytes:
    def cell(value: Any) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)

    rows = zip(*columns.values(), strict=True)
    return ("\n".join([",".join(columns), *(",".join(cell(v) for v in row) for row in rows)]) + "\n").encode()


def parquet_bytes(columns: dict[str, list[Any]]) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table(columns), out)
    return out.getvalue()


ENCODE = {"csv": csv_bytes, "parquet": parquet_bytes}


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    with serving(jobservice, tmp_path_factory.mktemp("functions"), TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN) as deployed:
        yield deployed


def write(deployment: Deployment, uri: str, data: bytes | str) -> None:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    deployment.storage().bucket(bucket).blob(name).upload_from_string(data)


def data_request(
    deployment: Deployment, request_id: str, model: str, data: bytes, file_format: str, *fake_node_args: str, **block
) -> dict[str, Any]:
    """A built-in request for `model` on a folder holding one data file; its job (the trainer stand-in) behaves as
    `fake_node_args` say."""
    folder = f"data-check/{request_id}/"
    deployment.upload(f"{folder}part-0.{file_format}", data)
    deployment.upload(folder + "fake-node-args", "\n".join(fake_node_args))
    return {
        "api_version": "trainctl/v1",
        "request_id": request_id,
        "dataset": {"uri": f"gs://{deployment.data_bucket}/{folder}", "target": TARGET},
        "trainer": {"builtin": "tabular"},
        "resources": {"machine_type": "g2-standard-24"},
        "model": {"name": model, **block},
    }


def accuracy(value: float, champion: float | None = None, **more: Any) -> str:
    metrics: dict[str, Any] = {"task": "classification", "metric": "accuracy", "val_accuracy": value, **more}
    if champion is not None:
        metrics |= {"champion_val_accuracy": champion, "champion_scored_on_same_rows": True}
    return json.dumps(metrics)


@pytest.fixture(scope="module")
def champion(deployment: Deployment, registry: ModelServiceClient) -> str:
    """A model whose champion was trained on GOOD (CSV), with its schema.json beside its model."""
    model = f"d-{uuid.uuid4().hex[:10]}"
    events = deployment.events()
    request = data_request(deployment, "champion-1", model, csv_bytes(GOOD), "csv", "--metrics", accuracy(0.8))
    assert deployment.request(request) == 200
    events.wait_for("champion-1", "promoted", act=deployment.reconcile, timeout=90)
    version = registry.get_model(name=f"{PARENT}/models/{model}@champion")
    write(deployment, version.artifact_uri.rstrip("/") + "/schema.json", json.dumps(SCHEMA))
    return model


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
@pytest.mark.parametrize("case", list(BROKEN))
def test_data_that_breaks_the_champions_schema_is_rejected_before_any_claim(
    deployment, champion, job_client, file_format, case
):
    """Issue 27, point 2: a dropped feature, a renamed target and a changed type are each rejected at admission
    with reason `data` and one error naming the column — read from the CSV's first lines or the Parquet footer
    only — with no ledger record, no output claim and no job; the rejection carries the run's own estimate."""
    request_id = f"broken-{file_format}-{case.replace(' ', '-')}"
    columns, error = BROKEN[case]
    events = deployment.events()
    request = data_request(deployment, request_id, champion, ENCODE[file_format](columns), file_format)
    assert deployment.request(request) == 200

    [rejected] = events.of(request_id, "rejected")
    assert isinstance(rejected, Rejected) and rejected.reason == "data"
    assert rejected.errors == [error]
    assert "nothing was claimed and no GPU started" in rejected.message
    assert rejected.cost is not None and rejected.saved_gpu_hours is not None and rejected.saved_gpu_hours > 0
    assert events.states(request_id) == ["rejected"]
    assert deployment.record(f"request:{request_id}") is None
    assert jobs_with_key(job_client, f"request:{request_id}") == []


@pytest.mark.parametrize("file_format", ["csv", "parquet"])
def test_extra_columns_are_accepted_and_named(deployment, champion, registry, job_client, file_format):
    """Issue 27, point 2: columns the champion never saw are allowed; `accepted` names them. Point 3: the run's
    drift figures (metrics.json) reach `succeeded`, the registered version's evaluation and `trainctl models show`,
    which also shows the champion's schema."""
    request_id = f"extra-{file_format}"
    events = deployment.events()
    drift = {"age": 0.31, "plan": 0.02, "active": 0.0}
    metrics = accuracy(0.5, champion=0.9, drift=drift, max_drift_feature="age", drift_measure="psi")
    data = ENCODE[file_format](GOOD | {"region": ["eu", "us"]})
    request = data_request(deployment, request_id, champion, data, file_format, "--metrics", metrics)
    assert deployment.request(request) == 200
    [accepted] = events.of(request_id, "accepted")
    assert isinstance(accepted, Accepted) and accepted.new_columns == ["region"]
    assert "the dataset's header matches the champion's schema (new columns, allowed: 'region')" in accepted.message
    assert len(jobs_with_key(job_client, f"request:{request_id}")) == 1

    held = events.wait_for(request_id, "held", act=deployment.reconcile, timeout=90)
    [succeeded] = events.of(request_id, "succeeded")
    assert succeeded.metrics is not None and succeeded.metrics["drift"] == drift
    version = held.version
    [evaluation] = registry.list_model_evaluations(parent=f"{PARENT}/models/{champion}@{version}")
    figures = evaluation.metadata["trainctl_metrics"]  # issue 38: trainctl's figures, beside the schema's fields
    assert dict(figures["drift"]) == drift and figures["drift_measure"] == "psi"


def test_models_show_gives_each_versions_schema_and_drift(deployment, champion, monkeypatch, capsys):
    """Issue 27, point 4: `trainctl models show` summarises the schema.json beside each version and its drift."""
    for name, value in deployment.settings_env().items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert trainctl(["models", "show", champion, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    first = shown["versions"][0]
    assert first["schema"]["summary"] == (
        f"2 rows, csv; target '{TARGET}' (classification); 3 features: 1 number, 1 string, 1 boolean"
    )
    assert trainctl(["models", "show", champion]) == 0
    text = capsys.readouterr().out
    assert "schema 2 rows, csv; target 'churned'" in text


def test_the_report_counts_data_rejections_and_the_gpu_hours_they_saved(deployment, champion, monkeypatch, capsys):
    """Issue 27, point 4: `trainctl report` counts the requests the data check rejected and the GPU-hours their own
    estimates say it saved."""
    for name, value in deployment.settings_env().items():
        monkeypatch.setenv(name, value)

    def rejections() -> dict[str, Any]:
        capsys.readouterr()
        assert trainctl(["report", "--json"]) == 0
        return json.loads(capsys.readouterr().out)["total"]["data_rejections"]

    before = rejections()
    events = deployment.events()
    columns, _ = BROKEN["dropped feature"]
    request = data_request(deployment, "report-broken", champion, csv_bytes(columns), "csv")
    assert deployment.request(request) == 200
    [rejected] = events.of("report-broken", "rejected")
    assert isinstance(rejected, Rejected) and rejected.saved_gpu_hours is not None
    after = rejections()
    assert after["requests"] == before["requests"] + 1
    assert after["gpu_hours_saved"] == pytest.approx(before["gpu_hours_saved"] + rejected.saved_gpu_hours)
    capsys.readouterr()
    assert trainctl(["report"]) == 0
    assert "data rejections" in capsys.readouterr().out


def test_a_run_the_trainer_stopped_for_its_data_fails_with_reason_data(deployment, job_client, tmp_path):
    """Issue 27, point 3: the built-in trainer, given model.max_drift as --max-drift, stops before training with
    failure.json reason `data`: the run ends `failed` with reason `data` (not `user`) and is not tried again. A
    custom image's note saying the same is its own word: reason `user`."""
    events = deployment.events()
    release = tmp_path / "release"
    hold = ("--until-file", str(release), "--exit-code", "1")
    model = f"d-{uuid.uuid4().hex[:10]}"
    request = data_request(deployment, "drifted", model, csv_bytes(GOOD), "csv", *hold, max_drift=0.2)
    assert deployment.request(request) == 200
    custom = fake_node_request("custom-drifted", *hold)
    assert deployment.request(custom) == 200
    note = {"error": "DataDrift: feature 'age' drifted 0.41 (psi) > max_drift 0.2", "reason": "data"}
    for request_id in ("drifted", "custom-drifted"):
        record = deployment.record(f"request:{request_id}")
        assert record is not None
        write(deployment, record["artifacts"]["model_dir"] + "failure.json", json.dumps(note))
    record = deployment.record("request:drifted")
    assert record is not None
    args = job_client.get_custom_job(name=record["job_name"]).job_spec.worker_pool_specs[0].container_spec.args
    assert list(args)[list(args).index("--max-drift") + 1] == "0.2"
    release.touch()

    failed = events.wait_for("drifted", "failed", act=deployment.reconcile, timeout=90)
    assert isinstance(failed, Failed) and failed.reason == "data"
    assert "The trainer reported: DataDrift: feature 'age' drifted 0.41" in failed.message
    assert len(jobs_with_key(job_client, "request:drifted")) == 1
    custom_failed = events.wait_for("custom-drifted", "failed", act=deployment.reconcile, timeout=90)
    assert isinstance(custom_failed, Failed) and custom_failed.reason == "user"
