"""What a run's Model Registry version is made of (functions/models/versions.py, issue 38 point 7): a serving
container only when something serves it, a version description that is always whole JSON, and an evaluation whose
metrics are the fields of the schema it is imported under."""

from __future__ import annotations

import dataclasses
import json

import pytest

from functions.jobs.admission import admission_problems
from functions.jobs.planning import plan_custom_job
from functions.models.versions import (
    EVALUATION_SCHEMAS,
    FIGURES_KEY,
    MAX_DESCRIPTION,
    NOT_SERVABLE_COMMAND,
    SERVABLE_LABEL,
    SERVING_COMMAND,
    evaluation_body,
    evaluation_figures,
    label_of,
    lineage,
    upload_body,
    version_description,
)
from schemas.errors import RequestInvalid
from schemas.events import Lineage
from tests.unit.conftest import make_record, make_request

IMAGE = "us-docker.pkg.dev/proj/team/trainer:1"
PACKAGE = {"uris": ["gs://data-bucket/pkg/trainer-1.0.tar.gz"], "module": "trainer.task", "executor": "pytorch-2.4"}
MODEL = {"name": "churn", "metric": "f1", "goal": "maximize"}
SERVING = {
    "image": "us-docker.pkg.dev/proj/team/server:1",
    "command": ["python", "-m", "server"],
    "args": ["--workers", "2"],
    "routes": {"predict": "/predict", "health": "/healthz"},
    "port": 7080,
}


@pytest.fixture
def allowed(settings):
    return dataclasses.replace(
        settings, allowed_image_prefixes=("us-docker.pkg.dev/proj/team/",), allow_python_packages=True
    )


def version(settings, **sections) -> dict:
    """The UploadModel body of a first version of the request built from `sections`."""
    request = make_request(**sections)
    record = make_record(request=request.model_dump(mode="json"))
    assert request.model is not None
    return upload_body(record, request.model, settings, "projects/proj/locations/us-central1/models/churn", True)


def test_the_built_in_trainers_version_is_served_by_trainer_serve(settings):
    """Issue 26 and 38: the built-in trainer's versions stay servable, by its own image and entry point."""
    model = version(settings, model={"name": "churn"})["model"]

    assert model["containerSpec"] == {
        "imageUri": settings.trainer_image,
        "command": SERVING_COMMAND,
        "ports": [{"containerPort": 8080}],
    }
    assert model["labels"][SERVABLE_LABEL] == "true"


def test_your_own_code_with_model_serving_is_registered_with_that_container(settings):
    """Issue 38, point 7: model.serving becomes the version's ModelContainerSpec, field by field."""
    model = version(settings, trainer={"image": IMAGE}, model=MODEL | {"serving": SERVING})["model"]

    assert model["containerSpec"] == {
        "imageUri": SERVING["image"],
        "command": ["python", "-m", "server"],
        "args": ["--workers", "2"],
        "ports": [{"containerPort": 7080}],
        "predictRoute": "/predict",
        "healthRoute": "/healthz",
    }
    assert model["labels"][SERVABLE_LABEL] == "true"


@pytest.mark.parametrize("trainer", [{"image": IMAGE, "args": ["--epochs", "3"]}, {"python_package": PACKAGE}])
def test_your_own_code_without_model_serving_is_registered_as_not_deployable(settings, trainer):
    """Issue 38, attack 7: a package's version was given the training executor as its serving image and a custom
    image its training entry point. Without model.serving neither runs: the container only says why it cannot
    serve, and the version is labelled trainctl_servable=false."""
    model = version(settings, trainer=trainer, model=MODEL)["model"]

    spec = model["containerSpec"]
    assert spec == {"imageUri": settings.trainer_image, "command": NOT_SERVABLE_COMMAND}
    assert "not deployable" in spec["command"][-1] and "model.serving" in spec["command"][-1]
    assert model["labels"][SERVABLE_LABEL] == "false"
    with pytest.raises(SystemExit) as started:  # what the container does when a deployment starts it
        exec(spec["command"][-1])
    assert str(started.value).startswith("this model version is not deployable: its request named no model.serving")


def test_model_serving_is_for_your_own_code_and_says_each_field_it_needs(settings):
    """Issue 38, point 7: the built-in trainer has its serving container; a serving block names its image, its
    command, its routes and its port."""
    with pytest.raises(RequestInvalid) as builtin:
        make_request(model={"name": "churn", "serving": SERVING})
    [refused] = [str(e) for e in builtin.value.errors]
    assert refused.startswith("model.serving: only with your own code")
    with pytest.raises(RequestInvalid) as partial:
        make_request(trainer={"image": IMAGE}, model=MODEL | {"serving": {"image": SERVING["image"]}})
    assert {str(e).split(":")[0] for e in partial.value.errors} == {
        "model.serving.command",
        "model.serving.routes",
        "model.serving.port",
    }
    bad = SERVING | {"routes": {"predict": "predict", "health": "/h z"}, "port": 0}
    with pytest.raises(RequestInvalid) as wrong:
        make_request(trainer={"image": IMAGE}, model=MODEL | {"serving": bad})
    assert {str(e).split(":")[0] for e in wrong.value.errors} == {
        "model.serving.routes.predict",
        "model.serving.routes.health",
        "model.serving.port",
    }


def test_the_serving_image_is_held_to_the_image_allow_list(settings, allowed):
    """Issue 38, point 7: the serving image runs your code too: the same allow-list rules as trainer.image (an
    allowed registry, never the built-in trainer's repository)."""

    def problems(serving_image: str) -> list[str]:
        serving = SERVING | {"image": serving_image}
        request = make_request(trainer={"image": IMAGE}, model=MODEL | {"serving": serving})
        plan = plan_custom_job(request, allowed, "request:x")
        return [str(p) for p in admission_problems(request, allowed, plan.output_dir)]

    assert problems(str(SERVING["image"])) == []
    [elsewhere] = problems("docker.io/library/nginx:1")
    assert elsewhere.startswith("model.serving.image: guardrail allowed_image_prefixes:")
    [builtin] = problems("us-docker.pkg.dev/proj/trainctl/server:1")
    assert builtin.startswith("model.serving.image: guardrail builtin_image:")


def long_lineage(**fields) -> Lineage:
    base = dict(
        request_id="r" * 128,
        dataset_uri="gs://data-bucket/" + "d/" * 500 + "part-00000.parquet",
        marker="gs://data-bucket/" + "m/" * 500 + "_SUCCESS#1700000000000000",
        job="projects/p/locations/us-central1/customJobs/1234567890",
        image="us-docker.pkg.dev/proj/team/" + "i" * 900 + ":1",
        code_digest="sha256:" + "0" * 64,
    )
    return Lineage(**(base | fields))


def test_the_version_description_is_whole_json_within_the_limit_however_long_the_uris(settings):
    """Issue 38, point 7: the lineage was sliced to 2,000 characters mid-JSON. Now its longest texts are shortened
    to their ends and a hash of the whole until it fits, and it still reads as a Lineage."""
    found = long_lineage()
    assert len(found.model_dump_json(exclude_none=True)) > 1.5 * MAX_DESCRIPTION

    text = version_description(found)

    assert len(text.encode()) <= MAX_DESCRIPTION
    read = Lineage.model_validate_json(text)
    assert read.request_id == found.request_id and read.job == found.job  # short fields stay whole
    assert read.dataset_uri.startswith("gs://data-bucket/d/") and read.dataset_uri.endswith("]")
    assert "part-00000.parquet" in read.dataset_uri and "[sha256:" in read.dataset_uri
    other = version_description(long_lineage(dataset_uri=found.dataset_uri.replace("d/d/", "d/e/", 1)))
    assert Lineage.model_validate_json(other).dataset_uri != read.dataset_uri  # the hash tells them apart


def test_a_lineage_that_fits_is_written_whole_and_a_multibyte_text_is_never_cut_mid_character():
    """Issue 38, point 7: nothing is shortened when the lineage fits; the bound is in UTF-8 bytes."""
    short = long_lineage(dataset_uri="gs://b/d/", marker=None, image="us-docker.pkg.dev/p/r/i:1")
    assert json.loads(version_description(short)) == short.model_dump(exclude_none=True)
    wide = long_lineage(dataset_uri="gs://data-bucket/" + "é" * 1500, marker=None, image="us-docker.pkg.dev/p/r/i:1")
    text = version_description(wide, limit=1000)
    assert len(text.encode()) <= 1000 and "\ufffd" not in text
    assert Lineage.model_validate_json(text).dataset_uri.startswith("gs://data-bucket/éé")


def test_the_upload_carries_the_fitted_description(settings):
    """Issue 38, point 7: upload_body writes the fitted lineage, not a slice of it."""
    long_uri = "gs://data-bucket/" + "x/" * 500
    image = "us-docker.pkg.dev/proj/team/" + "i" * 990 + ":1"
    dataset = {"uri": long_uri, "target": "churned"}
    model = version(settings, dataset=dataset, trainer={"image": image}, model=MODEL)["model"]
    described = Lineage.model_validate_json(model["versionDescription"])
    assert len(model["versionDescription"].encode()) <= MAX_DESCRIPTION and described.request_id == "r1"
    assert described.image.startswith("us-docker.pkg.dev/proj/team/i") and "[sha256:" in described.image


def built_in_record():
    request = make_request(model={"name": "churn"})
    return make_record(request=request.model_dump(mode="json"))


def test_a_built_in_runs_evaluation_holds_only_its_schemas_fields_and_trainctls_figures_in_metadata():
    """Issue 38, point 7: val_accuracy and val_loss are no fields of classification_metrics_1.0.0.yaml (auPrc,
    auRoc, logLoss, confidenceMetrics, confusionMatrix). The cross-entropy val_loss is its logLoss, regression's
    val_rmse its rootMeanSquaredError; every figure trainctl reads (and the drift) is in the metadata."""
    metrics = {"task": "classification", "val_accuracy": 0.9, "val_loss": 0.31, "drift": {"age": 0.2}}

    body = evaluation_body("trainctl-abc", built_in_record(), metrics)

    assert body["metricsSchemaUri"] == EVALUATION_SCHEMAS["classification"]
    assert body["metrics"] == {"logLoss": 0.31}
    assert body["metadata"][FIGURES_KEY] == {"val_accuracy": 0.9, "val_loss": 0.31, "drift": {"age": 0.2}}
    assert evaluation_figures(body)["val_accuracy"] == 0.9
    regression = evaluation_body("e", built_in_record(), {"task": "regression", "val_rmse": 2.5, "val_loss": 0.4})
    assert regression["metricsSchemaUri"] == EVALUATION_SCHEMAS["regression"]
    assert regression["metrics"] == {"rootMeanSquaredError": 2.5}


def test_your_own_codes_evaluation_names_no_schema_and_an_old_evaluation_is_still_read():
    """Issue 38, point 7: your own code's figures mean what it says: they are imported under no schema. An
    evaluation imported before the figures moved to the metadata is read from its metrics."""
    request = make_request(trainer={"image": IMAGE}, model=MODEL)
    record = make_record(request=request.model_dump(mode="json"))

    body = evaluation_body("e", record, {"task": "classification", "f1": 0.7, "val_loss": 0.2})

    assert "metricsSchemaUri" not in body and body["metrics"] == {"f1": 0.7, "val_loss": 0.2}
    assert body["metadata"][FIGURES_KEY] == body["metrics"]
    assert evaluation_figures({"metrics": {"val_accuracy": 0.8}, "metadata": {"trainctl_key": "k"}}) == {
        "val_accuracy": 0.8
    }


def test_the_lineage_still_names_the_image_that_trained_the_run(settings):
    """Issue 38, point 7: what serves a version changed, not what trained it: lineage and labels name that image."""
    request = make_request(trainer={"image": IMAGE}, model=MODEL | {"serving": SERVING})
    record = make_record(request=request.model_dump(mode="json"))
    assert lineage(record, settings).image == IMAGE
    labels = version(settings, trainer={"image": IMAGE}, model=MODEL | {"serving": SERVING})["model"]["labels"]
    assert labels["trainctl_image"] == label_of(IMAGE)


def test_a_schedule_tick_or_an_alert_is_in_the_versions_lineage_and_labels(settings):
    """Issue 42, point 5: the tick or the incident that started a run is in its version's lineage (the description)
    and its kind in the label trainctl_trigger; a marker's or a message's trigger is not repeated there."""
    from datetime import UTC, datetime

    from schemas.events import Trigger

    request = make_request(model={"name": "churn"})
    tick = Trigger(kind="schedule", rule="gs://d/churn/", scheduled_time=datetime(2026, 11, 27, 2, tzinfo=UTC))
    alert = Trigger(kind="alert", rule="gs://d/churn/", incident="0.abc", policy="churn drift", message_id="m1")
    for trigger in (tick, alert):
        record = make_record(request=request.model_dump(mode="json"), trigger=trigger)
        body = upload_body(record, request.model, settings, "projects/p/locations/l/models/churn", True)["model"]
        assert Lineage.model_validate_json(body["versionDescription"]).trigger == trigger
        assert body["labels"]["trainctl_trigger"] == trigger.kind
    marker = Trigger(kind="gcs", bucket="d", object="churn/_SUCCESS", generation="7")
    record = make_record(request=request.model_dump(mode="json"), trigger=marker)
    assert lineage(record, settings).trigger is None and lineage(record, settings).marker == "gs://d/churn/_SUCCESS#7"
