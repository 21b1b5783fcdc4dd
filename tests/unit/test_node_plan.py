"""What each node of a CustomJob runs locally: command, image map and environment expansion."""

from __future__ import annotations

import sys

import pytest
from google.cloud.aiplatform_v1.types import CustomJob

from local.jobservice.replicas import LOCAL_TRAINER_IMAGE, ExecutionSettings, NodePlanError, plan_nodes


def job_with(container: dict, replicas: int = 1) -> CustomJob:
    pool = {"machine_spec": {"machine_type": "n1-standard-8"}, "replica_count": 1, "container_spec": container}
    workers = {**pool, "replica_count": replicas}
    return CustomJob(name="projects/p/locations/l/customJobs/42", job_spec={"worker_pool_specs": [pool, workers]})


def test_the_trainer_image_runs_the_trainer_launcher_with_the_container_args():
    plan = plan_nodes(
        job_with({"image_uri": LOCAL_TRAINER_IMAGE, "args": ["--epochs", "2"]}), ExecutionSettings(), 29500
    )

    assert [node.command for node in plan.nodes] == [[sys.executable, "-m", "trainer.launch", "--epochs", "2"]] * 2


def test_the_longest_matching_image_prefix_wins():
    settings = ExecutionSettings(image_map={"reg/repo/": ("generic",), "reg/repo/trainer": ("specific",)})

    plan = plan_nodes(job_with({"image_uri": "reg/repo/trainer:v3"}), settings, 29500)

    assert plan.nodes[0].command == ["specific"]


def test_an_unmapped_image_without_a_command_cannot_run():
    with pytest.raises(NodePlanError, match="--image-map"):
        plan_nodes(job_with({"image_uri": "reg/other:1"}), ExecutionSettings(image_map={}), 29500)


def test_container_env_expands_references_and_keeps_escaped_ones():
    env = [
        {"name": "OUT", "value": "run-$(CLOUD_ML_JOB_ID)"},
        {"name": "LITERAL", "value": "$$(CLOUD_ML_JOB_ID)"},
        {"name": "UNKNOWN", "value": "$(NOT_SET)"},
    ]

    plan = plan_nodes(job_with({"image_uri": "x", "command": ["true"], "env": env}), ExecutionSettings(), 29500)

    node_env = plan.nodes[0].env
    assert (node_env["OUT"], node_env["LITERAL"], node_env["UNKNOWN"]) == ("run-42", "$(CLOUD_ML_JOB_ID)", "$(NOT_SET)")


def test_the_platform_variables_win_over_the_container_env():
    plan = plan_nodes(
        job_with({"image_uri": "x", "command": ["true"], "env": [{"name": "RANK", "value": "7"}]}, replicas=2),
        ExecutionSettings(),
        29500,
    )

    assert [node.env["RANK"] for node in plan.nodes] == ["0", "1", "2"]
    assert {node.env["WORLD_SIZE"] for node in plan.nodes} == {"3"}
