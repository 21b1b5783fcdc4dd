"""Models you can trust (issue 38), re-run as the review ran them, on the live functions, the local Model Registry and
two teams: another team's request cannot add a version to a model nor be compared with its champion; a request
cannot choose the rule that judges it nor a fresh alias; the owner's own bad partition, better on its own rows and
worse on the model's reference set, is held; a model registered before owners waits for the operator; a version's
artifacts are the controller's copy, which no run folder's rewrite or expiry touches.

Built-in requests run the trainer stand-in (tests/local/programs/fake_node.py), writing the metrics.json each test
chooses (reference figures included), so no torch starts here."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

from functions.ledger.keys import key_hash
from tests.integration.deployment import TRAINER_STAND_IN, Deployment, builtin_request, serving
from tests.integration.test_controller_intake import jobs_with_key
from tests.integration.test_model_promotion import PARENT, accuracy, champion, new_model, versions
from trainctl.cli import main as trainctl

DECLARED = "declared-model"
# Every team reads the built-in requests' datasets (builtin_request: stand-in/<request id>/) by the operator's grant
# (issue 40, point 5), and the default team sends on its own topic (the shared one is closed).
STAND_INS = ["stand-in/"]
TEAMS = {
    "default_team": "shared",
    "teams": {
        "shared": {"topic": "it-requests-shared", "reads": STAND_INS},
        "blue": {"topic": "it-requests-blue", "reads": STAND_INS},
        "red": {"topic": "it-requests-red", "reads": STAND_INS},
    },
    "models": {DECLARED: {"owner": "blue", "grants": ["red"]}},
}


def teams_setting(deployment: Deployment) -> dict[str, str]:
    return {"TRAINCTL_TEAMS": json.dumps(TEAMS | {"data_bucket": deployment.data_bucket})}


@pytest.fixture(scope="module")
def teams(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    settings = {"TRAINCTL_TRAINER_IMAGE": TRAINER_STAND_IN}
    with serving(jobservice, tmp_path_factory.mktemp("functions"), settings_for=teams_setting, **settings) as deployed:
        yield deployed


def send(deployment: Deployment, team: str, request_id: str, model: str, metrics: dict, **block: Any) -> None:
    document = builtin_request(deployment, request_id, "--metrics", json.dumps(metrics), model={"name": model, **block})
    assert deployment.request(document, topic=f"it-requests-{team}") == 200


def decided(deployment: Deployment, team: str, request_id: str, model: str, metrics: dict, state: str, **block):
    events = deployment.events()
    send(deployment, team, request_id, model, metrics, **block)
    return events.wait_for(request_id, state, act=deployment.reconcile, timeout=90)


def key(team: str, request_id: str) -> str:
    """The request key of a team's request id (functions/ledger/keys.py: ids are per team, but the default team's)."""
    return f"request:{request_id}" if team == "shared" else f"request:{team}/{request_id}"


def test_another_teams_request_is_refused_before_any_gpu_naming_the_owner(teams, registry, job_client):
    """Attack 1: red trains on blue's rows with the labels flipped and names blue's model. It is rejected at intake,
    naming blue, with no job created: it is never compared with blue's champion, let alone promoted."""
    model = new_model()
    decided(teams, "blue", "blue-first", model, accuracy(0.95), "promoted")
    events = teams.events()
    flipped = accuracy(0.9625, champion=0.025) | {"reference_val_accuracy": 0.99}
    send(teams, "red", "red-takeover", model, flipped)
    rejected = events.wait_for("red-takeover", "rejected")
    assert rejected.team == "red"
    assert rejected.errors[0].startswith(f"model.name: model {model} belongs to team blue; team red's requests may not")
    assert jobs_with_key(job_client, key("red", "red-takeover")) == []
    assert [v.version_id for v in versions(registry, model)] == ["1"]
    assert champion(registry, model).labels["trainctl_team"] == "blue"


def test_the_owners_own_partition_that_wins_only_on_its_own_rows_is_held(teams, registry):
    """Attack 1, variant two, as the owner: a partition whose labels went wrong upstream scores 0.9625 on its own
    validation rows, where the champion scores 0.025. On the model's reference set it scores 0.04 against 0.95: held,
    and the champion stays."""
    model = new_model()
    decided(teams, "blue", "own-first", model, accuracy(0.95), "promoted")
    wrong = accuracy(0.04, champion=0.95) | {"val_accuracy": 0.9625, "champion_val_accuracy": 0.025}
    held = decided(teams, "blue", "own-flipped", model, wrong, "held")
    assert held.decision is not None and held.decision.challenger == 0.04 and held.decision.champion == 0.95
    assert (held.decision.run_challenger, held.decision.run_champion) == (0.9625, 0.025)
    assert held.decision.reason.startswith("not better: on the model's reference set")
    assert champion(registry, model).version_id == "1"


def test_a_request_cannot_choose_the_rule_that_judges_it_nor_a_fresh_alias(teams, registry):
    """Attacks 1 and 2: the rule is the model's, fixed when it was created. A request naming another metric, a lower
    threshold or a fresh alias is rejected naming the recorded rule; `default` stays where it was."""
    model = new_model()
    decided(teams, "blue", "rule-first", model, accuracy(0.9), "promoted", min_improvement=0.02)
    events = teams.events()
    send(teams, "blue", "rule-alias", model, accuracy(0.99, champion=0.9), alias="pwn")
    send(teams, "blue", "rule-threshold", model, accuracy(0.99, champion=0.9), min_improvement=0.0)
    alias = events.wait_for("rule-alias", "rejected")
    assert alias.errors[0] == "model.alias: 'pwn' is not the model's rule (alias: 'champion')"
    assert "min_improvement 0.02 at confidence 0.95, alias `champion` and `default`" in alias.errors[-1]
    threshold = events.wait_for("rule-threshold", "rejected")
    assert threshold.errors[0] == "model.min_improvement: 0.0 is not the model's rule (min_improvement: 0.02)"
    assert registry.get_model(name=f"{PARENT}/models/{model}@default").version_id == "1"
    assert [v.version_id for v in versions(registry, model)] == ["1"]


def test_the_operator_declares_owners_and_grants(teams):
    """Point 1: the teams setting's `models` outranks the first request: red's request (granted) creates the model
    for blue, the owner; the shared team's is refused naming blue."""
    decided(teams, "red", "declared-red", DECLARED, accuracy(0.9), "promoted")
    events = teams.events()
    document = builtin_request(
        teams, "declared-shared", "--metrics", json.dumps(accuracy(0.9)), model={"name": DECLARED}
    )
    assert teams.request(document, topic="it-requests-shared") == 200
    rejected = events.wait_for("declared-shared", "rejected")
    assert rejected.errors[0].startswith(f"model.name: model {DECLARED} belongs to team blue; team shared's")


def test_a_version_is_registered_from_the_controllers_copy_which_outlives_its_run_folder(teams, registry):
    """Attack 3 and finding 6: the run's folder may be rewritten by a job or deleted by the lifecycle rule after
    `run_retention_days`; the version's artifacts are the controller's copy under model-artifacts/, and the next
    run is given that copy as its champion."""
    model = new_model()
    decided(teams, "blue", "copy-first", model, accuracy(0.8), "promoted")
    bucket = teams.storage().bucket(teams.control_bucket)
    version = champion(registry, model)
    assert (
        version.artifact_uri
        == f"gs://{teams.control_bucket}/model-artifacts/{model}/{key_hash(key('blue', 'copy-first'))}/"
    )
    record = teams.record(key("blue", "copy-first"))
    assert record is not None
    run_folder = record["artifacts"]["model_dir"].removeprefix(f"gs://{teams.control_bucket}/")
    assert run_folder.startswith("runs/")
    for blob in bucket.list_blobs(prefix=run_folder):
        blob.delete()  # as the lifecycle rule does after run_retention_days
    copied = {b.name.rsplit("/", 1)[-1] for b in bucket.list_blobs(prefix=f"model-artifacts/{model}/")}
    assert {"metrics.json", "reference.parquet"} <= copied
    send(teams, "blue", "copy-second", model, accuracy(0.9, champion=0.8))
    record = teams.record(key("blue", "copy-second"))
    assert record is not None and record["model_steps"]["champion_uri"] == version.artifact_uri


def test_a_model_registered_before_owners_waits_for_the_operator(teams, registry, monkeypatch, capsys):
    """The migration: a model the registry holds without a charter cannot be claimed by the first request after the
    upgrade; once the operator adopts it for red (`trainctl models adopt`, with a `rule_changed` event), red's
    requests are admitted and blue's refused."""
    model = new_model()
    upload_without_a_charter(registry, teams, model)
    events = teams.events()
    send(teams, "blue", "old-blue", model, accuracy(0.9))
    rejected = events.wait_for("old-blue", "rejected")
    assert rejected.errors[0].startswith(f"model.name: model {model} was registered before models had owners")

    for name, value in teams.settings_env(**teams_setting(teams)).items():
        monkeypatch.setenv(name, value)
    assert trainctl(["models", "adopt", model, "--team", "red", "--min-improvement", "0.01"]) == 0
    assert "adopted" in capsys.readouterr().out
    [changed] = [e for e, _ in events.drain() if e.state == "rule_changed"]
    assert (changed.model, changed.owner, changed.action) == (model, "red", "adopted")
    assert trainctl(["models", "adopt", model, "--team", "blue"]) == 4, "adopted once; `rule` changes the owner"
    assert "already belongs to team red" in capsys.readouterr().out

    send(teams, "blue", "old-blue-again", model, accuracy(0.9))
    assert events.wait_for("old-blue-again", "rejected").errors[0].startswith(f"model.name: model {model} belongs to")
    held = decided(teams, "red", "old-red", model, accuracy(0.9, champion=0.5), "held")
    assert f"model {model} has no reference set to judge on: its owner sets one" in held.message
    assert trainctl(["models", "show", model, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["charter"]["owner"] == "red" and shown["charter"]["rule"]["min_improvement"] == 0.01


def upload_without_a_charter(registry: ModelServiceClient, deployment: Deployment, model: str) -> None:
    """A model as trainctl registered it before issue 38: a built-in version, and no charter."""
    deployment.storage().bucket(deployment.control_bucket).blob(f"runs/{model}/model/model.pt").upload_from_string(b"w")
    registry.upload_model(
        request={
            "parent": PARENT,
            "model_id": model,
            "model": {
                "display_name": model,
                "artifact_uri": f"gs://{deployment.control_bucket}/runs/{model}/model/",
                "container_spec": {"image_uri": "localhost/trainer:1", "command": ["python", "-m", "trainer.serve"]},
                "labels": {"trainctl_trainer": "builtin"},
                "version_aliases": ["champion"],
            },
        }
    ).result(timeout=30)
