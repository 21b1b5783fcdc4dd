"""The model loop with the real built-in trainer on the local stack (issue 26): a first run becomes the champion;
a second run of the same model is given the champion's artifacts, scores them on its own validation rows, and the
decision compares both figures measured on those rows. `trainctl models show` tells the story."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e.running_stack import RunningStack
from tests.e2e.test_builtin_tabular_on_the_local_stack import churn_csv

pytestmark = pytest.mark.integration


def test_a_second_run_scores_the_champion_on_its_own_rows_and_is_decided_on_both(stack: RunningStack, tmp_path: Path):
    """Issue 26, steps 1-4, with the real trainer: `--champion-model-dir` reaches it, metrics.json carries both
    figures, and the decision says they were measured on the same rows."""
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
    decision = decided["decision"]
    assert (decision["metric"], decision["goal"], decision["same_rows"]) == ("val_accuracy", "maximize", True)
    assert (decision["challenger"], decision["champion"]) == (metrics["val_accuracy"], metrics["champion_val_accuracy"])
    assert decision["champion_version"] == "1"

    shown = stack.trainctl("models", "show", model, "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    story = json.loads(shown.stdout)
    assert [v["version"] for v in story["versions"]] == ["1", "2"]
    assert [(d["action"], d["version"]) for d in story["decisions"]] == [("promoted", "1"), (decided["state"], "2")]
