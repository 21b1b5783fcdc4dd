"""Vertex's ModelService on the local JobService's REST port: the stock `ModelServiceClient` with
`transport="rest"` (anonymous credentials, the endpoint of the REST port) and plain HTTP, on one registry:
uploads as long-running operations, versions read by id and by alias, aliases moved, evaluations, refusals in
Google's error body, names answered with the project's number (pinned here with --project-number), and the
registry kept across a restart of the JobService."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
from google.api_core import exceptions
from google.api_core.future.polling import DEFAULT_POLLING
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1 import ModelServiceClient

from local.jobservice.standalone import JobServiceProcess, start_jobservice_process

pytestmark = pytest.mark.integration

PARENT = "projects/registry-test/locations/us-central1"
# Vertex answers with the project's number whichever spelling a request used (issue 38); the module pins it.
NUMBER = "987654321098"
ANSWERED = f"projects/{NUMBER}/locations/us-central1"
CLASSIFICATION = "gs://google-cloud-aiplatform/schema/modelevaluation/classification_metrics_1.0.0.yaml"
# The client polls an operation after a random pause of up to 1 s, then up to 1.5 s, …: about a second per upload
# that the local registry finishes in 0.5 s. These tests look every 0.1 s instead (the same polling otherwise).
POLLING = DEFAULT_POLLING.with_delay(initial=0.1, maximum=0.1, multiplier=1.0)


def model_client(jobservice: JobServiceProcess) -> ModelServiceClient:
    return ModelServiceClient(
        transport="rest",
        client_options={"api_endpoint": jobservice.rest_url.rstrip("/")},
        credentials=AnonymousCredentials(),
    )


SERVING = {"imageUri": "localhost/trainctl/trainer:latest"}


def url(jobservice: JobServiceProcess, path: str) -> str:
    return f"{jobservice.rest_url}v1/{path}"


def upload(client: ModelServiceClient, **request: object) -> str:
    """UploadModel through the client's long-running operation; returns the version id."""
    container = {"container_spec": {"image_uri": "localhost/trainctl/trainer:latest"}}  # required (issue 40, point 13)
    model = {"display_name": "churn", **container, **request.pop("model", {})}
    operation = client.upload_model(request={"parent": PARENT, "model": model, **request})
    return operation.result(timeout=30, polling=POLLING).model_version_id


@pytest.fixture(scope="module")
def jobservice(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobServiceProcess]:
    """One JobService for the module (a process takes seconds to start); each test has a model of its own."""
    pin = ("--project-number", f"registry-test={NUMBER}")
    service = start_jobservice_process(tmp_path_factory.mktemp("registry-jobservice"), extra_args=pin)
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def model_id() -> str:
    return f"churn-{uuid.uuid4().hex[:8]}"


def test_the_rest_client_uploads_versions_and_reads_them_by_version_and_alias(
    jobservice: JobServiceProcess, model_id: str
):
    """Issue 26, the local stack: UploadModel (new model, then parent_model), GetModel with @version and
    @alias, ListModelVersions, MergeVersionAliases moving an alias, DeleteModelVersion, over the real client."""
    client, churn = model_client(jobservice), f"{PARENT}/models/{model_id}"
    answered = f"{ANSWERED}/models/{model_id}"
    assert upload(client, model_id=model_id) == "1"
    assert upload(client, parent_model=churn, model={"display_name": "churn", "version_aliases": ["champion"]}) == "2"
    assert upload(client, parent_model=churn, model={"display_name": "churn", "labels": {"run": "r3"}}) == "3"

    assert client.get_model(name=churn).version_id == "1"
    assert client.get_model(name=f"{churn}@champion").version_id == "2"
    assert client.get_model(name=f"{churn}@3").labels == {"run": "r3"}
    moved = client.merge_version_aliases(name=f"{churn}@3", version_aliases=["champion", "default"])
    assert sorted(moved.version_aliases) == ["champion", "default"]
    client.delete_model_version(name=f"{churn}@2").result(timeout=30)

    versions = list(client.list_model_versions(name=churn))
    assert [(v.name, v.version_id, list(v.version_aliases)) for v in versions] == [
        (f"{answered}@1", "1", []),
        (f"{answered}@3", "3", ["champion", "default"]),
    ]
    listed = client.list_models(request={"parent": PARENT, "filter": f"model={model_id}"})
    assert [(model.name, model.version_id) for model in listed] == [(answered, "3")]
    assert client.get_model(name=f"{answered}@champion").version_id == "3"  # the number in a request, too
    with pytest.raises(exceptions.NotFound):
        client.get_model(name=f"{churn}@2")


def test_evaluations_are_imported_into_a_version_and_listed_from_it(jobservice: JobServiceProcess, model_id: str):
    """Issue 26, the local stack: ImportModelEvaluation and ListModelEvaluations on `M@V`. Issue 38: under Google's
    classification schema the metrics are its fields; trainctl's own figures travel in the metadata; another entry
    is refused naming it."""
    client, churn = model_client(jobservice), f"{PARENT}/models/{model_id}"
    upload(client, model_id=model_id)
    upload(client, parent_model=churn, model={"display_name": "churn", "version_aliases": ["champion"]})
    evaluation = {
        "display_name": "request r2",
        "metrics_schema_uri": CLASSIFICATION,
        "metrics": {"logLoss": 0.2},
        "metadata": {"trainctl_metrics": {"val_accuracy": 0.91, "val_loss": 0.2}},
    }

    imported = client.import_model_evaluation(parent=f"{churn}@2", model_evaluation=evaluation)

    assert imported.name.startswith(f"{ANSWERED}/models/{model_id}/evaluations/")
    listed = list(client.list_model_evaluations(parent=f"{churn}@champion"))
    assert [(e.name, e.metrics["logLoss"], e.metadata["trainctl_metrics"]["val_accuracy"]) for e in listed] == [
        (imported.name, 0.2, 0.91)
    ]
    assert list(client.list_model_evaluations(parent=churn)) == []
    assert client.get_model_evaluation(name=imported.name).display_name == "request r2"
    body: dict[str, Any] = {"modelEvaluation": {"metricsSchemaUri": CLASSIFICATION, "metrics": {"val_accuracy": 0.91}}}
    refused = requests.post(url(jobservice, f"{churn}@2/evaluations:import"), json=body, timeout=10)
    assert refused.status_code == 400
    [detail] = refused.json()["error"]["details"]
    assert detail["fieldViolations"][0]["field"] == "model_evaluation.metrics.val_accuracy"


def test_the_upload_is_an_operation_polled_to_done_on_both_of_its_paths(jobservice: JobServiceProcess, model_id: str):
    """Issue 26, the local stack: the upload answers an unfinished Operation named models/M/operations/ID; GET on
    /v1/… (and /ui/…, the first binding the clients' operations transport tries) gives it done with its
    UploadModelResponse."""
    churn = f"{PARENT}/models/{model_id}"
    body = {
        "modelId": model_id,
        "model": {"displayName": "churn", "artifactUri": "gs://models-bucket/churn/1", "containerSpec": SERVING},
    }

    started = requests.post(url(jobservice, f"{PARENT}/models:upload"), json=body, timeout=10).json()

    answered = f"{ANSWERED}/models/{model_id}"
    assert started["name"].startswith(f"{answered}/operations/") and not started.get("done")
    assert started["metadata"]["@type"].endswith("google.cloud.aiplatform.v1.UploadModelOperationMetadata")
    assert requests.get(url(jobservice, churn), timeout=10).status_code == 404  # not there until done
    deadline = time.monotonic() + 30
    while not (operation := requests.get(url(jobservice, started["name"]), timeout=10).json()).get("done"):
        assert time.monotonic() < deadline, operation
        time.sleep(0.1)
    assert operation["response"] == {
        "@type": "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse",
        "model": answered,
        "modelVersionId": "1",
    }
    assert requests.get(f"{jobservice.rest_url}ui/{started['name']}", timeout=10).json() == operation
    assert requests.get(url(jobservice, f"{churn}%40default"), timeout=10).json()["versionId"] == "1"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("GET", "{parent}/models/nope", None, 404, "NOT_FOUND"),
        ("GET", "{churn}@golden", None, 404, "NOT_FOUND"),
        ("POST", "{churn}@1:mergeVersionAliases", {"versionAliases": ["Golden"]}, 400, "INVALID_ARGUMENT"),
        ("POST", "{churn}@1:mergeVersionAliases", {"versionAliases": ["-default"]}, 400, "INVALID_ARGUMENT"),
        ("DELETE", "{churn}@1:deleteVersion", None, 400, "FAILED_PRECONDITION"),
        (
            "POST",
            "{parent}/models:upload",
            {"modelId": "{model_id}", "model": {"displayName": "c", "containerSpec": SERVING}},
            409,
            "ALREADY_EXISTS",
        ),
        (
            "POST",
            "{parent}/models:upload",
            {"modelId": "1churn", "model": {"displayName": "c", "containerSpec": SERVING}},
            400,
            "INVALID_ARGUMENT",
        ),
        # Issue 40, point 13: a model not AutoML's needs its serving container.
        (
            "POST",
            "{parent}/models:upload",
            {"modelId": "nocontainer", "model": {"displayName": "c"}},
            400,
            "INVALID_ARGUMENT",
        ),
        (
            "POST",
            "{parent}/models:upload",
            {"model": {"displayName": "c", "containerSpec": SERVING}, "colour": "red"},
            400,
            "INVALID_ARGUMENT",
        ),
        ("GET", "{parent}/models?filter=state%3DACTIVE", None, 400, "INVALID_ARGUMENT"),
    ],
)
def test_refusals_are_googles_error_body_with_the_http_status_of_their_code(
    jobservice: JobServiceProcess, model_id: str, method: str, path: str, body: dict | None, status: int, code: str
):
    """Issue 26, the local stack: NOT_FOUND for an unknown model or alias, INVALID_ARGUMENT naming the field,
    FAILED_PRECONDITION (HTTP 400) for deleting the version `default` names, ALREADY_EXISTS for a model id in use."""
    upload(model_client(jobservice), model_id=model_id)
    names = {"parent": PARENT, "churn": f"{PARENT}/models/{model_id}", "model_id": model_id}
    if body and "modelId" in body:
        body = {**body, "modelId": body["modelId"].format(**names)}

    answer = requests.request(method, url(jobservice, path.format(**names)), json=body, timeout=10)

    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["status"]) == (status, code)
    if code == "INVALID_ARGUMENT" and "colour" not in answer.text:
        [detail] = error["details"]
        assert detail["@type"] == "type.googleapis.com/google.rpc.BadRequest"
        fields = ("version_aliases[0]", "model_id", "filter", "model.container_spec")
        assert detail["fieldViolations"][0]["field"] in fields


def test_models_versions_and_aliases_survive_a_restart_of_the_jobservice(
    private_jobservice: Callable[..., JobServiceProcess],
):
    """Issue 26, the local stack: the registry lives in the JobService's state folder, as its jobs do."""
    jobservice = private_jobservice()
    client, churn = model_client(jobservice), f"{PARENT}/models/churn"
    upload(client, model_id="churn")
    upload(client, parent_model=churn, model={"display_name": "churn", "version_aliases": ["champion"]})

    jobservice.kill()
    jobservice.restart()

    client = model_client(jobservice)
    assert client.get_model(name=f"{churn}@champion").version_id == "2"
    assert upload(client, parent_model=churn) == "3"
