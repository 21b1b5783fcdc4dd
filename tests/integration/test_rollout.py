"""The champion in use (issue 41) on the live functions and the local Vertex: a promoted version of a model with a
deploy block rolls out to its endpoint by itself — the first with all the traffic, a better one as a canary beside
it, judged over the bake on the endpoint's own Cloud Monitoring figures, then deployed; one that passes the gate but
fails on live traffic is rolled back by itself, the traffic and the alias back where they were — every step an event
with its reason, in order, once.

Built-in requests run the trainer stand-in (tests/local/programs/fake_node.py) writing the metrics each test chooses,
beside a real model trained once here (`--model-from`), so that each version serves with `python -m trainer.serve`."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1 import EndpointServiceClient, PredictionServiceClient

from functions.cloud.endpoints import Endpoints
from functions.cloud.gcs import Gcs
from functions.ledger.model_records import ModelLedger
from local.names import LOCAL_PROJECT, LOCAL_REGION
from schemas.events import Canary, Deployed, Deploying, RolledBack
from tests.integration.deployment import (
    TRAINER_STAND_IN,
    Deployment,
    accuracy,
    builtin_request,
    serving,
    train_breast_cancer_model,
)
from tests.integration.test_model_promotion import champion
from tests.local.test_endpoints_rest import gcloud
from trainctl.cli import main as trainctl

pytestmark = pytest.mark.integration

PARENT = f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"
# Short, so the test waits little; the canary gets half of the traffic so that a few requests reach it.
DEPLOY = {"endpoint": "", "canary_percent": 50, "bake": "4s", "max_error_rate": 0.05, "min_requests": 3}


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real model folder, which every version of these tests serves."""
    return train_breast_cancer_model(tmp_path_factory.mktemp("rollout-model"))


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    with serving(jobservice, tmp_path_factory.mktemp("functions"), TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN) as deployed:
        yield deployed


def instances(count: int) -> list[dict[str, Any]]:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    names = [name.replace(" ", "_") for name in data.feature_names]
    return [dict(zip(names, map(float, row), strict=True)) for row in data.data[:count]]


def release(deployment: Deployment, request_id: str, model: str, metrics: dict, trained: Path, endpoint: str) -> None:
    document = builtin_request(
        deployment, request_id, "--metrics", json.dumps(metrics), "--model-from", str(trained),
        model={"name": model, "deploy": DEPLOY | {"endpoint": endpoint}},
    )  # fmt: skip
    assert deployment.request(document) == 200


def endpoint_of(deployment: Deployment, event: Deploying) -> Any:
    options = {"api_endpoint": deployment.vertex_endpoint}
    client = EndpointServiceClient(transport="rest", client_options=options, credentials=AnonymousCredentials())
    return client.get_endpoint(name=event.endpoint)


def predict(deployment: Deployment, endpoint: str, count: int) -> list[str]:
    """`count` requests of one row each through the endpoint: the deployed model ids that answered (errors too)."""
    options = {"api_endpoint": deployment.vertex_endpoint}
    client = PredictionServiceClient(transport="rest", client_options=options, credentials=AnonymousCredentials())
    answered = []
    for row in instances(count):
        try:
            answered.append(client.predict(endpoint=endpoint, instances=[row]).deployed_model_id)
        except Exception as exc:  # an injected fault: the request counts as an error on the endpoint
            answered.append(f"error: {type(exc).__name__}")
    return answered


def test_a_better_version_goes_canary_then_deployed_and_one_failing_on_live_traffic_rolls_back(
    deployment, trained_model, registry, jobservice, jobservice_control, tmp_path
):
    """Issue 41, acceptance: v1 takes the new endpoint (deploying, deployed); v2, better, is deployed beside it with
    the canary's share, answers live traffic over the bake and takes all of it, v1 undeployed; v3 passes the gate but
    answers errors on live traffic and is rolled back by itself: the traffic back on v2, v3 undeployed, `champion`
    back on version 2 — every step an event, in order."""
    model, endpoint = f"m-{uuid.uuid4().hex[:10]}", f"e-{uuid.uuid4().hex[:10]}"
    events = deployment.events()

    release(deployment, "roll-1", model, accuracy(0.80), trained_model, endpoint)
    first = events.wait_for("roll-1", "deployed", act=deployment.reconcile, timeout=180)
    assert isinstance(first, Deployed) and first.previous_version is None and first.figures is None
    order = [s for s in events.states("roll-1") if s in ("promoted", "deploying", "canary", "deployed")]
    assert order == ["promoted", "deploying", "deployed"], "the first version takes all the traffic at once"
    assert first.traffic_split == {first.deployed_model_id: 100}
    assert set(predict(deployment, first.endpoint, 3)) == {first.deployed_model_id}

    release(deployment, "roll-2", model, accuracy(0.90, champion=0.80), trained_model, endpoint)
    canary = events.wait_for("roll-2", "canary", act=deployment.reconcile, timeout=180)
    assert isinstance(canary, Canary) and canary.previous_version == "1"
    split = dict(endpoint_of(deployment, canary).traffic_split)
    assert split == {canary.deployed_model_id: 50, first.deployed_model_id: 50}
    answered = predict(deployment, canary.endpoint, 30)
    assert canary.deployed_model_id in answered and first.deployed_model_id in answered, "both serve their share"
    second = events.wait_for("roll-2", "deployed", act=deployment.reconcile, timeout=120)
    assert isinstance(second, Deployed) and second.figures is not None
    assert second.figures.requests >= 3 and second.figures.errors == 0
    live = endpoint_of(deployment, canary)
    assert dict(live.traffic_split) == {second.deployed_model_id: 100}
    assert [d.id for d in live.deployed_models] == [second.deployed_model_id], "the old version is undeployed"
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"instances": instances(2)}))
    answer = gcloud(jobservice, tmp_path, "ai", "endpoints", "predict", second.endpoint, f"--json-request={request}",
                    "--format=json")  # fmt: skip
    assert answer.returncode == 0, answer.stderr
    assert json.loads(answer.stdout)["deployedModelId"] == second.deployed_model_id, "stock gcloud reaches the new one"

    release(deployment, "roll-3", model, accuracy(0.97, champion=0.90), trained_model, endpoint)
    third = events.wait_for("roll-3", "canary", act=deployment.reconcile, timeout=180)
    assert champion(registry, model).version_id == "3", "it passed the gate"
    jobservice_control.disturb_predictions(third.deployed_model_id, error_fraction=1.0)
    answered = predict(deployment, third.endpoint, 30)
    assert any(a.startswith("error") for a in answered)
    rolled = events.wait_for("roll-3", "rolled_back", act=deployment.reconcile, timeout=120)
    assert isinstance(rolled, RolledBack) and rolled.reason == "errors" and rolled.alias_version == "2"
    assert rolled.figures is not None and rolled.figures.errors >= 1 and "max_error_rate" in rolled.message
    assert champion(registry, model).version_id == "2", "the alias is back where it was"
    moved_back = ModelLedger(Gcs(LOCAL_PROJECT), deployment.control_bucket).read(model, "champion")[0].history[-1]
    assert (moved_back.action, moved_back.trigger, moved_back.request_id) == ("rollback", "controller", "roll-3"), (
        "the rollback is the rollout's request's, not the one that registered version 2"
    )
    live = endpoint_of(deployment, third)
    assert dict(live.traffic_split) == {second.deployed_model_id: 100}
    assert [d.id for d in live.deployed_models] == [second.deployed_model_id]
    assert [s for s in events.states("roll-3") if s in ("promoted", "deploying", "canary", "rolled_back")] == [
        "promoted", "deploying", "canary", "rolled_back"
    ]  # fmt: skip


def test_a_repeated_deployment_finds_the_first_instead_of_making_a_second(deployment, trained_model):
    """Issue 41, point 2: a crash between DeployModel and recording it makes the next visit deploy again; the
    DeployedModel id trainctl chose makes that a refusal (ALREADY_EXISTS) the adapter reads as "done", so the endpoint
    holds one deployed model, not two."""
    model, endpoint = f"m-{uuid.uuid4().hex[:10]}", f"e-{uuid.uuid4().hex[:10]}"
    events = deployment.events()
    release(deployment, "again-1", model, accuracy(0.80), trained_model, endpoint)
    first = events.wait_for("again-1", "deployed", act=deployment.reconcile, timeout=180)
    api = Endpoints(LOCAL_PROJECT, LOCAL_REGION, deployment.vertex_endpoint)
    body = {"id": first.deployed_model_id, "model": f"{PARENT}/models/{model}@1", "displayName": "again",
            "dedicatedResources": {"machineSpec": {"machineType": "n1-standard-2"}, "minReplicaCount": 1,
                                   "maxReplicaCount": 1}}  # fmt: skip
    assert api.deploy(first.endpoint, body, {"0": 100}) is None
    state = api.get(first.endpoint)
    assert state is not None and [d.id for d in state.deployed] == [first.deployed_model_id]


def test_a_version_promoted_during_a_bake_waits_for_it_then_rolls_out(deployment, trained_model):
    """Issue 41, point 2: one rollout per endpoint at a time. v2 bakes; v3, promoted meanwhile, waits (no `deploying`)
    until v2's bake ends (v2 is judged and deployed: the bake is never cut short), then rolls out beside v2."""
    model, endpoint = f"m-{uuid.uuid4().hex[:10]}", f"e-{uuid.uuid4().hex[:10]}"
    events = deployment.events()
    slow = DEPLOY | {"endpoint": endpoint, "bake": "30s", "min_requests": 0}
    for request_id, metrics in (("wait-1", accuracy(0.80)), ("wait-2", accuracy(0.90, champion=0.80))):
        document = builtin_request(deployment, request_id, "--metrics", json.dumps(metrics), "--model-from",
                                   str(trained_model), model={"name": model, "deploy": slow})  # fmt: skip
        assert deployment.request(document) == 200
        events.wait_for(request_id, "deployed" if request_id == "wait-1" else "canary", act=deployment.reconcile,
                        timeout=180)  # fmt: skip
    document = builtin_request(deployment, "wait-3", "--metrics", json.dumps(accuracy(0.95, champion=0.90)),
                               "--model-from", str(trained_model), model={"name": model, "deploy": slow})  # fmt: skip
    assert deployment.request(document) == 200
    events.wait_for("wait-3", "promoted", act=deployment.reconcile, timeout=180)
    deployment.reconcile()
    assert events.of("wait-3", "deploying") == [], "it waits while version 2 bakes"
    assert events.of("wait-2", "deployed") == [], "the bake in progress is not cut short"
    deployed = events.wait_for("wait-2", "deployed", act=deployment.reconcile, timeout=120)
    third = events.wait_for("wait-3", "canary", act=deployment.reconcile, timeout=120)
    assert isinstance(third, Canary) and third.previous_version == "2"
    assert third.time >= deployed.time


def test_people_deploy_the_champion_predict_through_the_endpoint_see_it_and_undeploy(
    deployment, trained_model, monkeypatch, capsys, tmp_path
):
    """Issue 41, point 4: `trainctl models deploy` gives a served-nowhere model its deploy block and deploys its
    champion with all the traffic; `trainctl predict` answers through the endpoint; `models show` lists the traffic;
    `models undeploy` takes it off; a model without a charter, or rows that are not rows, are refused in a line."""
    model, endpoint = f"m-{uuid.uuid4().hex[:10]}", f"e-{uuid.uuid4().hex[:10]}"
    events = deployment.events()
    document = builtin_request(deployment, "cli-1", "--metrics", json.dumps(accuracy(0.80)), "--model-from",
                               str(trained_model), model={"name": model})  # fmt: skip
    assert deployment.request(document) == 200
    events.wait_for("cli-1", "promoted", act=deployment.reconcile, timeout=180)
    for name, value in deployment.settings_env().items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert trainctl(["models", "deploy", model, "--endpoint", endpoint, "--bake", "30s"]) == 0
    out = capsys.readouterr().out
    assert f"serves on endpoint {endpoint}" in out and f"endpoint {endpoint} serves version 1 of {model}" in out
    rows = tmp_path / "rows.csv"
    header = list(instances(1)[0])
    rows.write_text(",".join(header) + "\n" + "\n".join(",".join(str(r[k]) for k in header) for r in instances(3)))
    assert trainctl(["predict", model, str(rows)]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert len(answer["predictions"]) == 3 and answer["modelVersionId"] == "1"
    assert trainctl(["models", "show", model]) == 0
    assert re.search(r"traffic: version 1 \(\d+\) 100 %", capsys.readouterr().out)
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert trainctl(["predict", model, str(tmp_path / "bad.json")]) == 4
    assert "object of the model's feature columns" in capsys.readouterr().out
    assert trainctl(["models", "undeploy", model]) == 0
    assert "undeployed" in capsys.readouterr().out
    assert trainctl(["predict", model, str(rows)]) == 3, "not served any more"
    assert trainctl(["models", "deploy", "no-such-model", "--endpoint", endpoint]) == 3
