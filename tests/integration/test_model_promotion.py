"""New data in, a better model out (issue 26) on the live functions and the local Model Registry: each success of a
request with a model block becomes one registered version, compared with the champion and promoted or held, with
`registered` and `promoted`/`held` events after `succeeded`; a redelivery or a crash between steps never makes a
second version; two runs finishing together leave only the better one champion; `trainctl models rollback` moves
the alias back.

Built-in requests run the trainer stand-in (tests/local/programs/fake_node.py, TRAINER_STAND_IN) writing the
metrics.json each test chooses, champion figures included, so no torch starts here."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient
from google.cloud.storage import Client

from functions.ledger.keys import key_hash
from local.names import LOCAL_PROJECT, LOCAL_REGION
from schemas.events import Held, Promoted, Registered
from tests.integration.deployment import (
    PINNED_FAKE_NODE_IMAGE,
    TRAINER_STAND_IN,
    Deployment,
    accuracy,
    builtin_request,
    fake_node_request,
    serving,
)
from tests.integration.test_controller_intake import jobs_with_key
from trainctl.cli import main as trainctl

PARENT = f"projects/{LOCAL_PROJECT}/locations/{LOCAL_REGION}"


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    with serving(jobservice, tmp_path_factory.mktemp("functions"), TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN) as deployed:
        yield deployed


def new_model() -> str:
    return f"m-{uuid.uuid4().hex[:10]}"


def model_request(deployment: Deployment, request_id: str, model: str, metrics: dict, *args: str, **block) -> dict:
    return builtin_request(
        deployment, request_id, "--metrics", json.dumps(metrics), *args, model={"name": model, **block}
    )


def run(deployment: Deployment, request_id: str, model: str, metrics: dict, decision: str, *args: str, **block):
    """Send the request, and tick until its model decision is published."""
    events = deployment.events()
    assert deployment.request(model_request(deployment, request_id, model, metrics, *args, **block)) == 200
    return events.wait_for(request_id, decision, act=deployment.reconcile, timeout=90)


def champion(registry: ModelServiceClient, model: str, alias: str = "champion"):
    return registry.get_model(name=f"{PARENT}/models/{model}@{alias}")


def versions(registry: ModelServiceClient, model: str) -> list:
    return list(registry.list_model_versions(name=f"{PARENT}/models/{model}"))


def active(deployment: Deployment, request_id: str) -> bool:
    name = f"active/{key_hash(f'request:{request_id}')}"
    return (
        Client(project=LOCAL_PROJECT, credentials=AnonymousCredentials())
        .bucket(deployment.control_bucket)
        .blob(name)
        .exists()
    )


def job_args(job_client, deployment: Deployment, request_id: str) -> list[str]:
    record = deployment.record(f"request:{request_id}")
    assert record is not None
    job = job_client.get_custom_job(name=record["job_name"])
    return list(job.job_spec.worker_pool_specs[0].container_spec.args)


def test_the_first_success_registers_a_version_and_makes_it_the_champion(deployment, registry, job_client):
    """Issue 26, steps 2-4: the first success of a model creates it with one version, labelled for lineage, its
    metrics imported as an evaluation, promoted to `champion` (and `default`); `registered` and `promoted` follow
    `succeeded` in the request's sequence, and the record leaves the active index once they are published."""
    model = new_model()
    events = deployment.events()
    promoted = run(deployment, "first-1", model, accuracy(0.80) | {"val_loss": 0.45}, "promoted")
    assert [s for s in events.states("first-1") if s in ("succeeded", "registered", "promoted")] == [
        "succeeded",
        "registered",
        "promoted",
    ]
    succeeded, registered = events.of("first-1", "succeeded")[0], events.of("first-1", "registered")[0]
    assert isinstance(registered, Registered) and isinstance(promoted, Promoted)
    assert succeeded.sequence < registered.sequence < promoted.sequence
    assert "--champion-model-dir" not in job_args(job_client, deployment, "first-1"), "there was no champion"

    version = champion(registry, model)
    assert version.version_id == registered.version == promoted.version == "1"
    assert set(version.version_aliases) == {"champion", "default"}
    record = deployment.record("request:first-1")
    copy = f"gs://{deployment.control_bucket}/model-artifacts/{model}/{key_hash('request:first-1')}/"
    assert version.artifact_uri == copy == registered.artifact_uri, "registered from the controller's copy"
    assert record["artifacts"]["model_dir"] != copy
    assert version.labels["trainctl_key"] == key_hash("request:first-1")
    assert version.labels["trainctl_request"] == "first-1"
    assert version.labels["trainctl_job"] == record["job_name"].rsplit("/", 1)[-1]
    assert list(version.container_spec.command) == ["python", "-m", "trainer.serve"]
    assert version.labels["trainctl_servable"] == "true" and registered.servable is True
    assert registered.lineage.dataset_uri in version.version_description
    # Issue 38: the registry answers with the project's number; every event spells the model with the project id.
    assert version.name != f"{PARENT}/models/{model}" and version.name.endswith(f"/models/{model}")
    assert registered.model_resource == promoted.model_resource == f"{PARENT}/models/{model}"
    [evaluation] = registry.list_model_evaluations(parent=f"{PARENT}/models/{model}@1")
    assert evaluation.display_name == f"trainctl-{key_hash('request:first-1')}"
    # Issue 38: under the classification schema only its fields; trainctl's figures in the metadata.
    assert evaluation.metrics_schema_uri.endswith("/classification_metrics_1.0.0.yaml")
    assert dict(evaluation.metrics) == {"logLoss": 0.45}
    assert evaluation.metadata["trainctl_metrics"]["val_accuracy"] == 0.80
    assert promoted.decision is not None and promoted.decision.champion_version is None
    assert promoted.previous_version is None
    deployment.reconcile()
    assert not active(deployment, "first-1")


def test_a_better_run_is_promoted_on_figures_from_the_same_rows(deployment, registry, job_client):
    """Issue 26, steps 1-3: the second run is given the champion's artifacts; it scores them on its own validation
    rows, beats them there, and the alias and `default` move to it."""
    model = new_model()
    run(deployment, "better-1", model, accuracy(0.80), "promoted")
    first = champion(registry, model)
    promoted = run(deployment, "better-2", model, accuracy(0.86, champion=0.78), "promoted")

    args = job_args(job_client, deployment, "better-2")
    assert args[args.index("--champion-model-dir") + 1] == first.artifact_uri
    reference = args[args.index("--reference-data") + 1]
    assert reference.startswith(f"gs://{deployment.control_bucket}/model-references/{model}/"), "the first's rows"
    assert args[args.index("--confidence") + 1] == "0.95"
    assert isinstance(promoted, Promoted) and promoted.decision is not None
    assert (promoted.version, promoted.previous_version) == ("2", "1")
    decision = promoted.decision
    assert (decision.challenger, decision.champion, decision.champion_version, decision.same_rows) == (
        0.86,
        0.78,
        "1",
        True,
    )
    assert decision.interval == [0.07, 0.09] and decision.reference_rows == 200
    assert decision.reason.startswith("better, surely by more than min_improvement 0: on the model's reference set")
    assert champion(registry, model).version_id == "2"
    assert registry.get_model(name=f"{PARENT}/models/{model}@default").version_id == "2"
    assert deployment.record("request:better-2")["model_steps"]["champion_version"] == "1"


def test_a_worse_run_is_held_and_the_champion_stays(deployment, registry):
    """Issue 26, step 3: a run that does not beat the champion by more than min_improvement is registered and
    held, saying why; a regression is never promoted."""
    model = new_model()
    run(deployment, "worse-1", model, accuracy(0.80), "promoted", min_improvement=0.05)
    held = run(deployment, "worse-2", model, accuracy(0.83, champion=0.82), "held")
    assert isinstance(held, Held) and held.decision is not None
    assert held.version == "2" and held.decision.challenger == 0.83
    assert held.decision.reason.startswith("not better by more than min_improvement 0.05: on the model's reference")
    assert champion(registry, model).version_id == "1"
    assert [v.version_id for v in versions(registry, model)] == ["1", "2"]


def test_a_custom_image_cannot_feed_a_model_the_built_in_trainer_feeds(deployment, registry, job_client):
    """Issue 26, trust: a custom image reports its own metrics, champion figures included, so an allowed image could
    promote itself over a model the built-in trainer feeds. A model's versions come from one kind of trainer (the
    `trainctl_trainer` label): the custom image's request is rejected at intake, naming `model.name`, and starts
    nothing."""
    model = new_model()
    run(deployment, "kind-builtin-1", model, accuracy(0.70), "promoted")
    assert champion(registry, model).labels["trainctl_trainer"] == "builtin"
    events = deployment.events()
    custom = fake_node_request(
        "kind-custom-1",
        "--metrics",
        json.dumps(accuracy(0.99)),
        model={"name": model, "metric": "val_accuracy", "goal": "maximize"},
    )
    custom["trainer"]["image"] = PINNED_FAKE_NODE_IMAGE
    assert deployment.request(custom) == 200
    (rejected,) = events.of("kind-custom-1", "rejected")
    assert len(rejected.errors) == 1 and rejected.errors[0].startswith(f"model.name: the versions of model '{model}'")
    assert jobs_with_key(job_client, "request:kind-custom-1") == []
    assert [v.version_id for v in versions(registry, model)] == ["1"]


SERVING = {
    "image": "localhost/tests/server:1",
    "command": ["python", "-m", "server"],
    "routes": {"predict": "/predict", "health": "/healthz"},
    "port": 7080,
}


def test_your_own_code_is_deployable_only_with_the_serving_container_its_request_names(
    deployment, registry, monkeypatch, capsys
):
    """Issue 38, attack 7: a custom image's version was registered with its training image and entry point as its
    serving container, which no deployment could pass health checks with. Without model.serving it is registered
    as not deployable (a container that only says why, trainctl_servable=false) and `registered` and `trainctl models
    show` say so; with it, the version gets that container."""
    model = new_model()
    block = {"name": model, "metric": "val_accuracy", "goal": "maximize"}
    events = deployment.events()
    for request_id, extra in (("serve-none-1", {}), ("serve-named-1", {"serving": SERVING})):
        metrics = json.dumps(accuracy(0.7 if extra else 0.6))
        document = fake_node_request(request_id, "--metrics", metrics, model=block | extra)
        document["trainer"]["image"] = PINNED_FAKE_NODE_IMAGE
        assert deployment.request(document) == 200
        events.wait_for(request_id, "promoted" if not extra else "held", act=deployment.reconcile, timeout=90)
    [plain] = events.of("serve-none-1", "registered")
    [named] = events.of("serve-named-1", "registered")

    first = registry.get_model(name=f"{PARENT}/models/{model}@1")
    assert isinstance(plain, Registered) and plain.servable is False and "not deployable" in plain.message
    assert first.labels["trainctl_servable"] == "false"
    assert first.container_spec.image_uri != plain.lineage.image  # never the training image
    assert "not deployable" in first.container_spec.command[-1]
    second = registry.get_model(name=f"{PARENT}/models/{model}@2")
    assert isinstance(named, Registered) and named.servable is True and "not deployable" not in named.message
    spec = second.container_spec
    assert (spec.image_uri, list(spec.command), spec.predict_route, spec.health_route) == (
        "localhost/tests/server:1",
        ["python", "-m", "server"],
        "/predict",
        "/healthz",
    )
    assert [port.container_port for port in spec.ports] == [7080]

    for name, value in deployment.settings_env().items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert trainctl(["models", "show", model, "--json"]) == 0
    assert [v["servable"] for v in json.loads(capsys.readouterr().out)["versions"]] == [False, True]
    assert trainctl(["models", "show", model]) == 0
    assert capsys.readouterr().out.count("not deployable: its request named no model.serving") == 1


def test_a_redelivered_success_and_a_crash_between_steps_register_once(deployment, registry, tmp_path):
    """Issue 26, step 2, exactly once: the log sink's line for the finished job delivered four times at once while
    reconcile ticks, then the record put back as if the handler had died after uploading but before recording the
    version: one version, one `registered`, one decision."""
    model = new_model()
    events = deployment.events()
    release = tmp_path / "release"
    assert deployment.request(model_request(deployment, "again-1", model, accuracy(0.8), "--until-file", str(release)))
    job_id = deployment.record("request:again-1")["job_name"].rsplit("/", 1)[-1]
    entry = {"resource": {"type": "ml_job", "labels": {"job_id": job_id}}, "labels": {}}
    line = deployment.push_body(json.dumps(entry).encode())
    release.touch()
    events.wait_for("again-1", "succeeded", act=deployment.reconcile, timeout=60)

    deliveries = [threading.Thread(target=deployment.post, args=("on_job_state", line)) for _ in range(4)]
    for delivery in deliveries:
        delivery.start()
    deployment.reconcile()
    for delivery in deliveries:
        delivery.join()
    events.wait_for("again-1", "promoted", act=deployment.reconcile, timeout=60)

    # A handler that died after UploadModel, before it recorded the version: the next visit finds it by its label.
    blob = deployment.storage().bucket(deployment.control_bucket).blob(f"ledger/{key_hash('request:again-1')}.json")
    record = json.loads(blob.download_as_bytes())
    record["model_steps"] = {"champion_version": None, "upload_started": record["created"]}
    blob.upload_from_string(json.dumps(record))
    deployment.storage().bucket(deployment.control_bucket).blob(
        f"active/{key_hash('request:again-1')}"
    ).upload_from_string(b"")
    for _ in range(3):
        deployment.reconcile()

    assert [v.version_id for v in versions(registry, model)] == ["1"]
    assert len(list(registry.list_model_evaluations(parent=f"{PARENT}/models/{model}@1"))) == 1
    assert [e.state for e, _ in events.drain() if e.request_id == "again-1"].count("registered") == 1
    assert len(events.of("again-1", "promoted")) == 1
    assert deployment.record("request:again-1")["model_steps"]["decision"] == "promoted"


def test_two_runs_finishing_together_are_decided_one_at_a_time(deployment, registry, tmp_path):
    """Issue 26, step 3: two runs that both beat the champion they were given (version 1) finish at once. Decisions
    are made one at a time against the champion of their moment: no two promotions are made against the same
    champion, and the one decided second, whose evidence is against version 1, is held (issue 38: a run is judged
    only against the champion it scored)."""
    model = new_model()
    run(deployment, "pair-0", model, accuracy(0.80), "promoted")
    events = deployment.events()
    release = tmp_path / "release"
    hold = ("--until-file", str(release))
    assert deployment.request(model_request(deployment, "pair-a", model, accuracy(0.84, champion=0.80), *hold))
    assert deployment.request(model_request(deployment, "pair-b", model, accuracy(0.90, champion=0.80), *hold))
    release.touch()
    decided: dict[str, Any] = {}
    while len(decided) < 2:
        deployment.reconcile()
        for request_id in ("pair-a", "pair-b"):
            found = events.of(request_id, "promoted") + events.of(request_id, "held")
            if found:
                decided[request_id] = found[0]

    [first] = [e for e in decided.values() if isinstance(e, Promoted)]
    [second] = [e for e in decided.values() if isinstance(e, Held)]
    assert champion(registry, model).version_id == first.version
    assert second.decision is not None and second.decision.champion_version == first.version
    assert second.decision.same_rows is False
    assert f"the champion is version {first.version}, but this run was given version 1" in second.decision.reason


def test_a_run_is_compared_with_the_champion_at_promotion_time_not_the_one_it_scored(deployment, registry, tmp_path):
    """Issue 26, step 3, as issue 38 made it: both runs were given version 1 to score; the better one is promoted
    first, so the other, though better than version 1 on the reference set, has no paired evidence against the new
    champion — and is held, saying so."""
    model = new_model()
    run(deployment, "stale-0", model, accuracy(0.80), "promoted")
    events = deployment.events()
    release_a, release_b = tmp_path / "a", tmp_path / "b"
    request_a = model_request(
        deployment, "stale-a", model, accuracy(0.84, champion=0.80), "--until-file", str(release_a)
    )
    assert deployment.request(request_a)
    request_b = model_request(
        deployment, "stale-b", model, accuracy(0.90, champion=0.80), "--until-file", str(release_b)
    )
    assert deployment.request(request_b)
    release_b.touch()
    events.wait_for("stale-b", "promoted", act=deployment.reconcile, timeout=60)
    release_a.touch()
    held = events.wait_for("stale-a", "held", act=deployment.reconcile, timeout=60)

    assert isinstance(held, Held) and held.decision is not None
    assert (held.decision.champion_version, held.decision.same_rows) == ("2", False)
    assert held.decision.reason.startswith("the champion is version 2, but this run was given version 1 to score")
    assert champion(registry, model).version_id == "2"


def test_rollback_moves_the_alias_back_with_an_event_from_the_command_line(deployment, registry, monkeypatch, capsys):
    """Issue 26, people: `trainctl models rollback` moves `champion` (and `default`) back to the version it left,
    records who did it, and publishes `promoted` with trigger `cli`; `promote` moves it to a chosen version; errors
    name the model and version; `trainctl status` and `trainctl report` show the controller's decisions."""
    model = new_model()
    run(deployment, "roll-1", model, accuracy(0.80), "promoted")
    run(deployment, "roll-2", model, accuracy(0.90, champion=0.80), "promoted")
    for name, value in deployment.settings_env().items():
        monkeypatch.setenv(name, value)
    events = deployment.events()

    assert trainctl(["models", "rollback", model]) == 0
    assert champion(registry, model).version_id == "1"
    assert registry.get_model(name=f"{PARENT}/models/{model}@default").version_id == "1"
    [by_hand] = [e for e, _ in events.drain() if e.state == "promoted" and e.trigger and e.trigger.kind == "cli"]
    assert isinstance(by_hand, Promoted)
    assert (by_hand.model, by_hand.version, by_hand.previous_version, by_hand.request_id) == (model, "1", "2", "roll-1")

    assert trainctl(["models", "rollback", model]) == 4
    assert f"model {model}: `champion` has no earlier version recorded to roll back to" in capsys.readouterr().out
    assert trainctl(["models", "promote", model, "7"]) == 4
    assert f"model {model} has no version 7" in capsys.readouterr().out
    assert trainctl(["models", "promote", model, "2"]) == 0
    moved = f"model {model}: `champion` moved from version 1 to 2 by `trainctl models promote`\n"
    assert capsys.readouterr().out == moved
    assert champion(registry, model).version_id == "2"

    assert trainctl(["models", "show", model, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(d["action"], d["version"]) for d in shown["decisions"]] == [
        ("promoted", "1"),
        ("promoted", "2"),
        ("rollback", "1"),
        ("promote", "2"),
    ]
    assert [v["version"] for v in shown["versions"]] == ["1", "2"]
    assert shown["versions"][1]["metrics"]["val_accuracy"] == 0.90
    assert shown["versions"][0]["lineage"]["request_id"] == "roll-1"

    assert trainctl(["models", "list", "--json"]) == 0
    [listed] = [row for row in json.loads(capsys.readouterr().out) if row["model"] == model]
    assert (listed["default_version"], listed["aliases"], listed["managed_by_trainctl"]) == (
        "2",
        {"champion": "2"},
        True,
    )

    # Where a request's model steps stand, and the controller's decisions per model in `trainctl report`.
    assert trainctl(["status", "roll-2", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["model"] == {"name": model, "champion_given": "1", "version": "2", "decision": "promoted"}
    assert trainctl(["report", "--since", "1h", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"]["models"][model] == {
        "promoted": 2,
        "held": 0,
        "deployed": 0,
        "rolled_back": 0,
    }


def test_an_upload_whose_answer_was_lost_while_it_ran_registers_one_version(deployment, registry, jobservice_control):
    """A second version's UploadModel started the upload and its answer was lost (UNAVAILABLE), and the version is
    not listed while the upload runs (2 s here; minutes on Vertex): the controller does not upload again, it looks
    for the version at each visit and registers it once it is listed. Before, UploadModel was retried in the call
    after a look-up that could not see the running upload, and made a second version (the CI failure of
    2026-11-24)."""
    model = new_model()
    run(deployment, "lost-upload-1", model, accuracy(0.8), "promoted")
    jobservice_control.slow_next_uploads(2.0)
    jobservice_control.fail_next_creates("UNAVAILABLE", after_create=True, method="UploadModel")

    promoted = run(deployment, "lost-upload-2", model, accuracy(0.9, champion=0.8), "promoted")

    assert [v.version_id for v in versions(registry, model)] == ["1", "2"]
    assert promoted.version == "2"
