"""The model loop with the real built-in trainer on the local stack (issues 26 and 38): a first run becomes the
champion and its validation rows the model's reference set; a second run of the same model is given the champion's
artifacts and that reference set, checks the labels with the champion before training, scores both models on the
reference rows, and the decision rests on those figures and their paired interval (its own rows reported beside).
`trainctl models show` tells the story."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e.running_stack import RunningStack
from tests.e2e.test_builtin_tabular_on_the_local_stack import churn_csv

pytestmark = pytest.mark.integration


def test_a_second_run_is_decided_on_the_models_reference_set(stack: RunningStack, tmp_path: Path):
    """Issue 26, steps 1-4, and issue 38, point 3, with the real trainer: `--champion-model-dir` and
    `--reference-data` reach it, the label check passes on good data, metrics.json carries both models' figures on
    the reference set with their interval, and the decision rests on them."""
    model = f"churn-{uuid.uuid4().hex[:8]}"
    dataset = f"gs://my-data-bucket/{model}/"
    shard = tmp_path / "part-0.csv"
    shard.write_text(churn_csv(400, seed=3))
    copied = stack.shell(
        f"gcloud storage buckets create gs://my-data-bucket 2>/dev/null || true\ngcloud storage cp {shard} {dataset}"
    )
    assert copied.returncode == 0, copied.stderr

    def request(request_id: str, seed: int) -> Path:
        path = tmp_path / f"{request_id}.yaml"
        document = {
            "api_version": "trainctl/v1",
            "request_id": request_id,
            "dataset": {"uri": dataset, "target": "churned"},
            "trainer": {"builtin": "tabular", "hyperparameters": {"epochs": 3, "seed": seed}},
            "resources": {"machine_type": "a2-highgpu-2g"},
            "model": {"name": model},
        }
        path.write_text(yaml.safe_dump(document))
        return path

    first, second = f"{model}-1", f"{model}-2"
    with stack.watch() as watch:
        assert stack.trainctl("submit", str(request(first, 1))).returncode == 0
        promoted = watch.wait_for(lambda e: e["request_id"] == first and e["state"] in ("promoted", "held"), 300)
        assert promoted["state"] == "promoted", promoted
        assert stack.trainctl("submit", str(request(second, 2))).returncode == 0
        decided = watch.wait_for(lambda e: e["request_id"] == second and e["state"] in ("promoted", "held"), 300)
        succeeded = next(e for e in watch.events if e["request_id"] == second and e["state"] == "succeeded")

    metrics = succeeded["metrics"]
    assert metrics["champion_scored_on_same_rows"] is True, metrics
    assert metrics["validation_rows"] == metrics["champion_validation_rows"]
    assert metrics["label_check"] == "passed", metrics
    decision = decided["decision"]
    assert (decision["metric"], decision["goal"], decision["same_rows"]) == ("val_accuracy", "maximize", True)
    assert (decision["challenger"], decision["champion"]) == (
        metrics["reference_val_accuracy"],
        metrics["champion_reference_val_accuracy"],
    )
    interval = metrics["reference_improvement_val_accuracy"]
    assert decision["interval"] == [interval["low"], interval["high"]]
    assert (decision["reference_rows"], decision["confidence"]) == (metrics["reference_rows"], 0.95)
    assert (decision["run_challenger"], decision["run_champion"]) == (
        metrics["val_accuracy"],
        metrics["champion_val_accuracy"],
    )
    assert decision["champion_version"] == "1"

    shown = stack.trainctl("models", "show", model, "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    story = json.loads(shown.stdout)
    assert story["charter"]["reference"]["source"] == "version 1's validation rows", story["charter"]
    assert [v["version"] for v in story["versions"]] == ["1", "2"]
    assert [(d["action"], d["version"]) for d in story["decisions"]] == [("promoted", "1"), (decided["state"], "2")]
