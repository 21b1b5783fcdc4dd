"""The built-in tabular trainer end to end on the local stack: the example request submitted with
`trainctl submit --wait`, and the default trigger rule started by a `gcloud storage cp` of shards and a
marker. Both end with `succeeded` and the trainer's metrics."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.e2e.running_stack import RunningStack

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tabular-2xa100.yaml"
EXAMPLE_DATASET = "gs://my-data-bucket/churn/2026-11-22/"


def churn_csv(rows: int, seed: int) -> str:
    """A small table where `churned` follows from the features, so a model can beat the baseline."""
    import random

    rng = random.Random(seed)
    lines = ["tenure,monthly_charges,support_calls,churned"]
    for _ in range(rows):
        tenure, charges, calls = rng.randint(1, 72), round(rng.uniform(20, 120), 2), rng.randint(0, 9)
        churned = int(calls > 4 or (tenure < 12 and charges > 80))
        lines.append(f"{tenure},{charges},{calls},{churned}")
    return "\n".join(lines) + "\n"


def test_the_tabular_example_submitted_with_wait_succeeds(stack: RunningStack, tmp_path: Path):
    for index in range(2):
        shard = tmp_path / f"part-{index}.csv"
        shard.write_text(churn_csv(300, seed=index))
        copied = stack.shell(
            f"gcloud storage buckets create gs://my-data-bucket 2>/dev/null || true\n"
            f"gcloud storage cp {shard} {EXAMPLE_DATASET}{shard.name}"
        )
        assert copied.returncode == 0, copied.stderr

    submitted = stack.trainctl("submit", str(EXAMPLE), "--wait", "--json", "--timeout", "240", timeout=300)

    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    events = [json.loads(line) for line in submitted.stdout.splitlines()[1:]]
    assert [event["state"] for event in events] == ["accepted", "submitted", "running", "succeeded"]
    metrics = events[-1]["metrics"]
    # a2-highgpu-2g: 2 GPUs on one node, which the local JobService runs as 2 CPU processes.
    assert (metrics["target"], metrics["task"], metrics["world_size"]) == ("churned", "classification", 2)


def test_shards_and_a_marker_in_the_data_bucket_train_the_builtin_model(stack: RunningStack, tmp_path: Path):
    folder = f"tabular-{uuid.uuid4().hex[:8]}"
    shard = tmp_path / "part-0.csv"
    shard.write_text(churn_csv(400, seed=7).replace("churned", "target"))  # the default rule's label column
    marker = tmp_path / "_SUCCESS"
    marker.write_text("")

    with stack.watch() as watch:
        copied = stack.shell(
            f'gcloud storage cp {shard} "gs://$TRAINCTL_DATA_BUCKET/{folder}/part-0.csv"\n'
            f'gcloud storage cp {marker} "gs://$TRAINCTL_DATA_BUCKET/{folder}/_SUCCESS"'
        )
        assert copied.returncode == 0, copied.stderr
        ended = watch.wait_for(
            # A marker's request id is gcs.<folder>-<generation>.
            lambda event: (
                event["request_id"].startswith(f"gcs.{folder}-") and event["state"] in ("succeeded", "failed")
            ),
            timeout=240,
        )

    assert ended["state"] == "succeeded", ended
    assert (ended["metrics"]["target"], ended["metrics"]["world_size"]) == ("target", 2)
