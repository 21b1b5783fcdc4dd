"""`trainctl plan --memory`: each rank's memory estimated from the dataset's listing and the machine's memory, by
the built-in trainer's own rule for streaming (issue 30, point 4)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from functions.jobs import planning
from schemas import catalog
from tests.unit.conftest import make_request
from trainctl import plan as plan_command
from trainer.data import memory_budget

GB = 10**9
L4_PAIR = {"machine_type": "g2-standard-24"}  # 2 × L4 on one node, 96 GB


def listing(*sizes: int, suffix: str = ".parquet") -> list[tuple[str, int]]:
    return [("data/_SUCCESS", 0)] + [(f"data/part-{i:05d}{suffix}", size) for i, size in enumerate(sizes)]


def test_each_rank_reads_its_own_files_and_a_small_share_loads_into_memory():
    """Issue 30, point 4: four Parquet shards over 2 ranks; the busiest rank reads two of them."""
    estimate = planning.estimate_rank_memory(make_request(resources=L4_PAIR), listing(1 * GB, 2 * GB, 1 * GB, 1 * GB))
    assert (estimate.ranks, estimate.files, estimate.sharded) == (2, 4, True)
    assert estimate.rank_share_bytes == 2 * GB + 1 * GB  # part-00001 and part-00003
    assert estimate.rank_peak_bytes == 3 * estimate.rank_share_bytes
    assert estimate.rank_budget_bytes == 96 * GB * planning.MEMORY_BUDGET_FRACTION / 2
    assert not estimate.streams
    assert "it loads its share into memory" in estimate.words()


def test_a_share_beyond_the_budget_streams_and_fewer_files_than_ranks_means_every_rank_reads_all():
    """Issue 30, point 4: one 40 GB CSV on 2 ranks: each rank would hold it all (60 GB) > 24 GB per rank."""
    estimate = planning.estimate_rank_memory(make_request(resources=L4_PAIR), listing(40 * GB, suffix=".csv"))
    assert not estimate.sharded and estimate.rank_share_bytes == 40 * GB
    assert estimate.streams
    assert "it will stream its share" in estimate.words()


def test_the_plan_and_the_trainer_share_one_rule():
    """Issue 30, point 4: the plan says what the trainer will do only while both use the same figures."""
    assert planning.MEMORY_BUDGET_FRACTION == memory_budget.MEMORY_BUDGET_FRACTION
    assert planning.PEAK_PER_STORED_BYTE == memory_budget.PEAK_PER_STORED_BYTE


def test_every_machine_in_the_catalog_knows_its_memory():
    assert all(machine.memory_gb > 0 for machine in catalog.MACHINES.values())
    assert catalog.machine("g2-standard-24").memory_gb == 96
    assert catalog.machine("n1-highmem-8").memory_gb == 52


class Listed:
    """The dataset's listing as admission reads it (Storage.objects_under)."""

    def __init__(self, objects: list[tuple[str, int]]):
        self.objects, self.asked = objects, []

    def objects_under(self, bucket: str, prefix: str):
        self.asked.append((bucket, prefix))
        return iter(self.objects)


def test_plan_prints_the_estimate_in_words_and_json(capsys, monkeypatch, settings):
    """Issue 30, point 4: `trainctl plan --memory` lists the dataset's URI and says whether the trainer will stream."""
    listed = Listed(listing(30 * GB, 30 * GB))
    monkeypatch.setattr(plan_command, "Gcs", lambda project: listed)
    example = Path(__file__).parents[2] / "examples" / "tabular-2xa100.yaml"
    args = argparse.Namespace(file=example, json=True, gcloud=None, quota=False, memory=True, source=None)
    monkeypatch.setattr(plan_command, "cli_settings", lambda offline: settings)
    assert plan_command.run_plan(args) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert listed.asked == [("my-data-bucket", "churn/2026-11-22/")]
    # a2-highgpu-2g: 170 GB over 2 ranks, 42.5 GB each; a 30 GB Parquet shard each → about 90 GB: streams.
    assert memory["rank_share_bytes"] == 30 * GB and memory["streams"] is True
