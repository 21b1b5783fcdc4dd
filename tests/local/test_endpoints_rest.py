"""Vertex's EndpointService and PredictionService on the local JobService's REST port, through the stock
`EndpointServiceClient` and `PredictionServiceClient` (`transport="rest"`, anonymous credentials) and the SDK's
`aiplatform.Endpoint` (api_transport="rest"): a version of a model trained here (its artifacts in fake-gcs-server,
its containerSpec the controller's: the trainer image with `python -m trainer.serve`) deployed to an endpoint, served
by a local process, predictions routed by the traffic split, refusals as Vertex words its rules, injected 500s and the
Cloud Monitoring stand-in's counts and latencies. One deployed model serves the module (each costs a torch import)."""

from __future__ import annotations

import csv
import datetime as dt
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import requests
from google.api_core import exceptions
from google.api_core.future.polling import DEFAULT_POLLING
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1 import Endpoint, EndpointServiceClient, ModelServiceClient, PredictionServiceClient

import trainer.storage.folders
from functions.models.versions import NOT_SERVABLE, NOT_SERVABLE_COMMAND, SERVING_COMMAND
from local.fake_gcs import FakeGcs, create_bucket
from local.jobservice.control import JobServiceControl
from local.jobservice.standalone import JobServiceProcess
from tests.trainer.trainer_runs import output_dirs, process_env, run, write_breast_cancer_shards

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROJECT = "endpoints-test"
PARENT = f"projects/{PROJECT}/locations/us-central1"
TRAINER_IMAGE = "localhost/trainctl/trainer:latest"
POLLING = DEFAULT_POLLING.with_delay(initial=0.2, maximum=0.2, multiplier=1.0)


def options(jobservice: JobServiceProcess) -> dict:
    return {
        "transport": "rest",
        "client_options": {"api_endpoint": jobservice.rest_url.rstrip("/")},
        "credentials": AnonymousCredentials(),
    }


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """(the breast cancer shards, five of their rows as prediction instances without the target)."""
    folder = tmp_path_factory.mktemp("breast_cancer")
    write_breast_cancer_shards(folder, shards=2)
    with open(folder / "part-00000.csv") as rows:
        first = [row for _, row in zip(range(5), csv.DictReader(rows), strict=False)]
    return folder, [{k: float(v) for k, v in row.items() if k != "target"} for row in first]


@pytest.fixture(scope="module")
def model_version(jobservice: JobServiceProcess, fake_gcs: FakeGcs, instances, tmp_path_factory) -> str:
    """A version registered as the controller registers one: trained here, its model folder copied to a bucket."""
    out = tmp_path_factory.mktemp("trained") / "out"
    trained = run(
        "trainer.train",
        ["--data", str(instances[0]), "--target", "target", "--epochs", "1", "--batch-size", "64", "--seed", "5",
         *output_dirs(out)],
        process_env(),
        out.parent / "train.log",
    )  # fmt: skip
    assert trained.returncode == 0, trained.output[-4000:]
    bucket = f"endpoints-{uuid.uuid4().hex[:8]}"
    create_bucket(fake_gcs.url, PROJECT, bucket)
    trainer.storage.folders.gcs_client.cache_clear()
    storage = trainer.storage.folders.gcs_client().bucket(bucket)
    for path in (out / "model").rglob("*"):
        if path.is_file():
            storage.blob(f"models/churn/1/{path.relative_to(out / 'model')}").upload_from_filename(str(path))
    container = {"image_uri": TRAINER_IMAGE, "command": SERVING_COMMAND, "ports": [{"container_port": 8080}]}
    model = {"display_name": "churn", "artifact_uri": f"gs://{bucket}/models/churn/1/", "container_spec": container}
    upload = ModelServiceClient(**options(jobservice)).upload_model(
        request={"parent": PARENT, "model": model, "model_id": f"churn-{uuid.uuid4().hex[:8]}"}
    )
    answered = upload.result(timeout=30, polling=POLLING)
    return f"{answered.model}@{answered.model_version_id}"


@pytest.fixture(scope="module")
def deployed(jobservice: JobServiceProcess, model_version: str) -> Iterator[tuple[str, str]]:
    """(endpoint name, deployed model id): the module's endpoint, the version deployed with all the traffic."""
    client = EndpointServiceClient(**options(jobservice))
    created = client.create_endpoint(
        request={"parent": PARENT, "endpoint": {"display_name": "churn", "labels": {"team": "fraud"}}}
    ).result(timeout=30, polling=POLLING)
    deployment = client.deploy_model(
        request={
            "endpoint": created.name,
            "deployed_model": {
                "model": model_version,
                "display_name": "churn-v1",
                "dedicated_resources": {"machine_spec": {"machine_type": "n1-standard-4"}, "min_replica_count": 1,
                                        "max_replica_count": 1},
            },
            "traffic_split": {"0": 100},
        }
    )  # fmt: skip
    deployed_model = deployment.result(timeout=180, polling=POLLING).deployed_model
    yield created.name, deployed_model.id
    for model in client.get_endpoint(name=created.name).deployed_models:
        client.undeploy_model(endpoint=created.name, deployed_model_id=model.id).result(timeout=60, polling=POLLING)
    client.delete_endpoint(name=created.name).result(timeout=30, polling=POLLING)


def test_the_rest_clients_create_list_deploy_and_predict(jobservice, model_version, deployed, instances):
    """Issue 41, point 5: CreateEndpoint, ListEndpoints by label, DeployModel (LRO, done once the server is healthy,
    the deployed model recorded with the model's name and its version id), GetEndpoint, and Predict answered by the
    served version with the deployed model's ids."""
    endpoint_name, deployed_model_id = deployed
    client = EndpointServiceClient(**options(jobservice))
    endpoint = client.get_endpoint(name=endpoint_name)
    assert endpoint.name.split("/")[1].isdigit()  # the project by its number, as Vertex answers
    assert deployed_model_id.isdigit()
    (model,) = endpoint.deployed_models
    assert (model.id, model.model_version_id, model.display_name) == (deployed_model_id, "1", "churn-v1")
    assert model.model == model_version.split("@")[0].replace(
        f"projects/{PROJECT}/", f"projects/{endpoint.name.split('/')[1]}/"
    )
    assert dict(endpoint.traffic_split) == {deployed_model_id: 100}
    listed = client.list_endpoints(request={"parent": PARENT, "filter": 'labels.team="fraud"'})
    assert endpoint_name in [e.name for e in listed]
    assert endpoint_name not in [
        e.name for e in client.list_endpoints(request={"parent": PARENT, "filter": 'labels.team="x"'})
    ]

    answer = PredictionServiceClient(**options(jobservice)).predict(endpoint=endpoint_name, instances=instances[1])
    assert len(answer.predictions) == 5
    assert set(answer.predictions[0]) == {"prediction", "confidence"}
    assert (answer.deployed_model_id, answer.model_version_id, answer.model_display_name) == (
        deployed_model_id,
        "1",
        "churn-v1",
    )


def test_the_sdk_predicts_through_the_endpoint_and_deploys_a_canary(jobservice, deployed, model_version, instances):
    """The Vertex SDK over REST: `aiplatform.Endpoint(...).predict()`, `Model.deploy(endpoint=…,
    traffic_percentage=0)` and `Endpoint.undeploy()`."""
    from google.cloud import aiplatform

    aiplatform.init(
        project=PROJECT,
        location="us-central1",
        api_endpoint=jobservice.rest_url.rstrip("/"),
        api_transport="rest",
        credentials=AnonymousCredentials(),
    )
    endpoint = aiplatform.Endpoint(deployed[0])
    answer = endpoint.predict(instances=instances[1][:2])
    assert len(answer.predictions) == 2 and answer.deployed_model_id == deployed[1]

    # The SDK computes the split itself: a canary with 0 % keeps the first model's 100.
    aiplatform.Model(model_version).deploy(endpoint=endpoint, machine_type="n1-standard-2", traffic_percentage=0)
    canary = next(model.id for model in endpoint.list_models() if model.id != deployed[1])
    assert endpoint.traffic_split == {deployed[1]: 100, canary: 0}
    endpoint.undeploy(canary)
    assert [model.id for model in endpoint.list_models()] == [deployed[1]]


def test_refusals_say_which_rule_a_request_broke(jobservice, deployed, model_version):
    """DeleteEndpoint with a deployed model and Predict on an endpoint that gives no model traffic are
    FAILED_PRECONDITION (HTTP 400, as the clients raise it), a split that does not add up INVALID_ARGUMENT, an unknown
    deployed model NOT_FOUND."""
    endpoint_name = deployed[0]
    client = EndpointServiceClient(**options(jobservice))
    with pytest.raises(exceptions.BadRequest, match="undeploy them"):
        client.delete_endpoint(name=endpoint_name)
    with pytest.raises(exceptions.BadRequest, match="add up to 100"):
        client.deploy_model(
            request={"endpoint": endpoint_name, "deployed_model": {"model": model_version}, "traffic_split": {"0": 50}}
        )
    with pytest.raises(exceptions.NotFound):
        client.undeploy_model(endpoint=endpoint_name, deployed_model_id="1")
    empty = client.create_endpoint(request={"parent": PARENT, "endpoint": {"display_name": "empty"}}).result(
        timeout=30, polling=POLLING
    )
    with pytest.raises(exceptions.BadRequest, match="doesn't have traffic_split"):
        PredictionServiceClient(**options(jobservice)).predict(endpoint=empty.name, instances=[{"a": 1.0}])
    client.delete_endpoint(name=empty.name).result(timeout=30, polling=POLLING)


def test_a_second_deployment_shares_the_traffic_and_takes_none_away_when_undeployed(
    jobservice, deployed, model_version, instances
):
    """DeployModel with a split naming the new model "0" overwrites the endpoint's; UpdateEndpoint moves traffic;
    predictions reach both models; UndeployModel refuses to leave traffic on the model it removes unless its own
    split takes it away (the last model may go: the split ends up empty)."""
    endpoint_name, first = deployed
    client = EndpointServiceClient(**options(jobservice))
    second = (
        client.deploy_model(
            request={
                "endpoint": endpoint_name,
                "deployed_model": {"model": model_version.split("@")[0]},  # the default version
                "traffic_split": {first: 100, "0": 0},
            }
        )
        .result(timeout=180, polling=POLLING)
        .deployed_model.id
    )
    assert dict(client.get_endpoint(name=endpoint_name).traffic_split) == {first: 100, second: 0}
    client.update_endpoint(
        endpoint=Endpoint(name=endpoint_name, traffic_split={first: 50, second: 50}),
        update_mask={"paths": ["traffic_split"]},
    )
    predictions = PredictionServiceClient(**options(jobservice))
    served_by = {predictions.predict(endpoint=endpoint_name, instances=instances[1][:1]).deployed_model_id
                 for _ in range(30)}  # fmt: skip
    assert served_by == {first, second}
    with pytest.raises(exceptions.BadRequest, match="traffic"):
        client.undeploy_model(endpoint=endpoint_name, deployed_model_id=second)
    client.undeploy_model(
        request={"endpoint": endpoint_name, "deployed_model_id": second, "traffic_split": {first: 100}}
    ).result(timeout=60, polling=POLLING)
    endpoint = client.get_endpoint(name=endpoint_name)
    assert [model.id for model in endpoint.deployed_models] == [first]
    assert dict(endpoint.traffic_split) == {first: 100}


def test_a_version_whose_server_exits_fails_its_deployment_and_is_not_listed(jobservice):
    """The controller's not-servable versions (a command that exits at once saying why): the DeployModel operation
    ends with FAILED_PRECONDITION quoting the server's last words, and the endpoint lists no deployed model."""
    container = {"image_uri": TRAINER_IMAGE, "command": NOT_SERVABLE_COMMAND}
    upload = ModelServiceClient(**options(jobservice)).upload_model(
        request={"parent": PARENT, "model": {"display_name": "unservable", "container_spec": container}}
    )
    model = upload.result(timeout=30, polling=POLLING).model
    client = EndpointServiceClient(**options(jobservice))
    endpoint = client.create_endpoint(request={"parent": PARENT, "endpoint": {"display_name": "unservable"}}).result(
        timeout=30, polling=POLLING
    )
    deployment = client.deploy_model(request={"endpoint": endpoint.name, "deployed_model": {"model": model}})
    with pytest.raises(exceptions.GoogleAPICallError, match=NOT_SERVABLE.split(":")[0]) as failed:
        deployment.result(timeout=120, polling=POLLING)
    assert failed.value.grpc_status_code == grpc.StatusCode.FAILED_PRECONDITION
    after = client.get_endpoint(name=endpoint.name)
    assert (list(after.deployed_models), dict(after.traffic_split)) == ([], {})
    client.delete_endpoint(name=endpoint.name).result(timeout=30, polling=POLLING)


def test_a_bad_instance_gets_the_servers_4xx_and_raw_predict_passes_the_answer_through(jobservice, deployed, instances):
    url = f"{jobservice.rest_url}v1/{deployed[0]}"
    refused = requests.post(f"{url}:predict", json={"instances": [{"no_such_column": 1}]}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["status"] == "INVALID_ARGUMENT"
    raw = requests.post(f"{url}:rawPredict", json={"instances": instances[1][:1]}, timeout=30)
    assert raw.status_code == 200 and list(raw.json()) == ["predictions"]


def series(jobservice: JobServiceProcess, endpoint: str, metric: str, aligner: str, since: dt.datetime) -> list[dict]:
    params = {
        "filter": f'metric.type = "aiplatform.googleapis.com/prediction/online/{metric}" '
        f'AND resource.labels.endpoint_id = "{endpoint.rsplit("/", 1)[1]}"',
        "interval.startTime": since.isoformat().replace("+00:00", "Z"),
        "interval.endTime": (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).isoformat().replace("+00:00", "Z"),
        "aggregation.alignmentPeriod": "3600s",
        "aggregation.perSeriesAligner": aligner,
    }
    answer = requests.get(f"{jobservice.rest_url}v3/projects/{PROJECT}/timeSeries", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json().get("timeSeries", [])


def test_injected_500s_and_latency_show_in_the_monitoring_stand_in(
    jobservice, jobservice_control: JobServiceControl, deployed, instances
):
    """Issue 41, point 5: DisturbPredictions makes the router answer 500 for the deployed model; Monitoring's
    timeSeries.list then counts them by response code and as errors, and the latency percentiles include the added
    wait."""
    endpoint_name, deployed_model_id = deployed
    since = dt.datetime.now(dt.UTC)
    predictions = PredictionServiceClient(**options(jobservice))
    for _ in range(3):
        predictions.predict(endpoint=endpoint_name, instances=instances[1][:1])
    jobservice_control.disturb_predictions(deployed_model_id, error_fraction=1.0, added_seconds=0.3)
    for _ in range(2):
        with pytest.raises(exceptions.InternalServerError):
            predictions.predict(endpoint=endpoint_name, instances=instances[1][:1])
    jobservice_control.clear_faults()

    counts = {s["metric"]["labels"]["response_code"]: s["points"][0]["value"]["int64Value"]
              for s in series(jobservice, endpoint_name, "response_count", "ALIGN_SUM", since)}  # fmt: skip
    assert counts == {"200": "3", "500": "2"}
    (errors,) = series(jobservice, endpoint_name, "error_count", "ALIGN_SUM", since)
    assert errors["metric"]["labels"] == {"deployed_model_id": deployed_model_id}
    assert errors["points"][0]["value"] == {"int64Value": "2"}
    (p99,) = series(jobservice, endpoint_name, "prediction_latencies", "ALIGN_PERCENTILE_99", since)
    assert p99["valueType"] == "DOUBLE" and p99["points"][0]["value"]["doubleValue"] >= 300.0
    assert p99["resource"]["labels"]["endpoint_id"] == endpoint_name.rsplit("/", 1)[1]


def gcloud(jobservice: JobServiceProcess, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A stock gcloud command on the local REST port, as `trainctl local env` sets a shell up (stack_state.py)."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(config),
        "CLOUDSDK_CONFIG": str(config / "gcloud"),
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM": jobservice.rest_url,
        "CLOUDSDK_AUTH_ACCESS_TOKEN": "dummy",
        "CLOUDSDK_CORE_PROJECT": PROJECT,
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
    }
    return subprocess.run(
        ["gcloud", *args, "--region=us-central1"], env=env, capture_output=True, text=True, timeout=240
    )


def test_gcloud_creates_deploys_predicts_and_undeploys(jobservice, model_version, instances, tmp_path):
    """The stock `gcloud ai endpoints create / list / describe / deploy-model / predict / undeploy-model / delete`
    through CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM: gcloud sends no traffic split unless asked, and the first
    model of an endpoint then takes all of it."""
    model_id = model_version.split("/models/")[1].split("@")[0]
    created = gcloud(jobservice, tmp_path, "ai", "endpoints", "create", "--display-name=gcloud-churn")
    assert created.returncode == 0, created.stderr
    endpoint_id = created.stderr.split("/endpoints/")[1].split(".")[0].split("]")[0].strip()
    listed = gcloud(jobservice, tmp_path, "ai", "endpoints", "list", "--format=value(name)")
    assert listed.returncode == 0 and endpoint_id in listed.stdout, listed.stderr
    deploy = gcloud(
        jobservice, tmp_path, "ai", "endpoints", "deploy-model", endpoint_id, f"--model={model_id}",
        "--display-name=gcloud-v1", "--machine-type=n1-standard-2",
    )  # fmt: skip
    assert deploy.returncode == 0, deploy.stderr
    described = gcloud(jobservice, tmp_path, "ai", "endpoints", "describe", endpoint_id, "--format=json")
    endpoint = json.loads(described.stdout)
    (deployed_model,) = endpoint["deployedModels"]
    assert endpoint["trafficSplit"] == {deployed_model["id"]: 100}
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"instances": instances[1][:2]}))
    predicted = gcloud(
        jobservice, tmp_path, "ai", "endpoints", "predict", endpoint_id, f"--json-request={request}", "--format=json"
    )
    assert predicted.returncode == 0, predicted.stderr
    assert len(json.loads(predicted.stdout)["predictions"]) == 2
    undeployed = gcloud(
        jobservice,
        tmp_path,
        "ai",
        "endpoints",
        "undeploy-model",
        endpoint_id,
        f"--deployed-model-id={deployed_model['id']}",
    )
    assert undeployed.returncode == 0, undeployed.stderr
    deleted = gcloud(jobservice, tmp_path, "ai", "endpoints", "delete", endpoint_id)
    assert deleted.returncode == 0, deleted.stderr


def server_pids(deployed_model_id: str) -> list[int]:
    """The processes started with the deployed model's AIP_DEPLOYED_MODEL_ID (Linux: /proc/PID/environ)."""
    marker = f"AIP_DEPLOYED_MODEL_ID={deployed_model_id}".encode()
    pids = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                pids.append(int(environ.parent.name))
        except OSError:
            continue
    return pids


def test_a_server_that_dies_is_started_again_and_predictions_resume(jobservice, deployed, instances):
    """A deployed model's server killed from outside (as a crashed replica) is started again by the JobService,
    a new process, and the endpoint answers predictions again without anything being redeployed."""
    endpoint_name, deployed_model_id = deployed
    (before,) = server_pids(deployed_model_id)
    os.kill(before, signal.SIGKILL)
    predictions = PredictionServiceClient(**options(jobservice))
    deadline = time.monotonic() + 120
    while True:
        try:
            answer = predictions.predict(endpoint=endpoint_name, instances=instances[1][:1], timeout=30)
            break
        except exceptions.GoogleAPICallError:
            assert time.monotonic() < deadline, "the deployed model's server was not started again"
            time.sleep(0.5)
    assert answer.deployed_model_id == deployed_model_id
    assert server_pids(deployed_model_id) not in ([], [before])
