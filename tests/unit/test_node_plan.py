"""What each node of a CustomJob runs locally: command, image map, its environment and `$(NAME)` expansion."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1.types import CustomJob

from local.jobservice.replicas import LOCAL_TRAINER_IMAGE, ExecutionSettings, NodePlanError, plan_nodes
from local.processes import SESSION_MARKER_VAR

HOMES = Path("/state/jobs/42/homes/attempt-1")
FAKE_SECRET = "fake-secret-0f9e8d"


def job_with(container: dict, replicas: int = 1, output: str | None = None) -> CustomJob:
    pool = {"machine_spec": {"machine_type": "n1-standard-8"}, "replica_count": 1, "container_spec": container}
    workers = {**pool, "replica_count": replicas}
    spec: dict = {"worker_pool_specs": [pool, workers]}
    if output:
        spec["base_output_directory"] = {"output_uri_prefix": output}
    return CustomJob(name="projects/p/locations/l/customJobs/42", job_spec=spec)


def request_env(values: list[tuple[str, str]], settings: ExecutionSettings | None = None) -> dict[str, str]:
    """The primary's environment for a job whose container `env` is `values`, in that order."""
    env = [{"name": name, "value": value} for name, value in values]
    job = job_with({"image_uri": "x", "command": ["true"], "env": env}, output="gs://b/runs/r/")
    return plan_nodes(job, settings or ExecutionSettings(), 29500, HOMES).nodes[0].env


def test_the_trainer_image_runs_the_trainer_launcher_with_the_container_args():
    plan = plan_nodes(
        job_with({"image_uri": LOCAL_TRAINER_IMAGE, "args": ["--epochs", "2"]}), ExecutionSettings(), 29500, HOMES
    )

    assert [node.command for node in plan.nodes] == [[sys.executable, "-m", "trainer.launch", "--epochs", "2"]] * 2


def test_the_longest_matching_image_prefix_wins():
    settings = ExecutionSettings(image_map={"reg/repo/": ("generic",), "reg/repo/trainer": ("specific",)})

    plan = plan_nodes(job_with({"image_uri": "reg/repo/trainer:v3"}), settings, 29500, HOMES)

    assert plan.nodes[0].command == ["specific"]


def test_an_unmapped_image_without_a_command_cannot_run():
    with pytest.raises(NodePlanError, match="--image-map"):
        plan_nodes(job_with({"image_uri": "reg/other:1"}), ExecutionSettings(image_map={}), 29500, HOMES)


def test_container_env_expands_references_and_keeps_escaped_ones():
    env = [
        {"name": "OUT", "value": "run-$(CLOUD_ML_JOB_ID)"},
        {"name": "LITERAL", "value": "$$(CLOUD_ML_JOB_ID)"},
        {"name": "UNKNOWN", "value": "$(NOT_SET)"},
    ]

    plan = plan_nodes(job_with({"image_uri": "x", "command": ["true"], "env": env}), ExecutionSettings(), 29500, HOMES)

    node_env = plan.nodes[0].env
    assert (node_env["OUT"], node_env["LITERAL"], node_env["UNKNOWN"]) == ("run-42", "$(CLOUD_ML_JOB_ID)", "$(NOT_SET)")


def test_the_platform_variables_win_over_the_container_env():
    plan = plan_nodes(
        job_with({"image_uri": "x", "command": ["true"], "env": [{"name": "RANK", "value": "7"}]}, replicas=2),
        ExecutionSettings(),
        29500,
        HOMES,
    )

    assert [node.env["RANK"] for node in plan.nodes] == ["0", "1", "2"]
    assert {node.env["WORLD_SIZE"] for node in plan.nodes} == {"3"}


def test_no_variable_of_the_jobservice_reaches_a_node(monkeypatch: pytest.MonkeyPatch):
    """Guards issue 24, point 9: a developer's credentials in the JobService's environment reach no node."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", f"/home/dev/{FAKE_SECRET}.json")

    plan = plan_nodes(job_with({"image_uri": LOCAL_TRAINER_IMAGE}, replicas=2), ExecutionSettings(), 29500, HOMES)

    for node in plan.nodes:
        assert "AWS_SECRET_ACCESS_KEY" not in node.env and "GOOGLE_APPLICATION_CREDENTIALS" not in node.env
        assert [name for name, value in node.env.items() if FAKE_SECRET in value] == []


def test_a_node_gets_a_containers_environment_the_stand_ins_and_the_vertex_variables():
    """Guards issue 24, point 9: the node environment is exactly what the image gives (PATH, an empty HOME of
    the node's own, the code on PYTHONPATH, unbuffered output, the host's temp folder), the local stand-ins,
    the process marker and Vertex's variables; HOME and the rest of the host's environment stay behind."""
    host = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/home/dev",
        "TMPDIR": "/scratch/tmp",
        "LANG": "de_DE.UTF-8",
        "AWS_SECRET_ACCESS_KEY": FAKE_SECRET,
        "PYTHONPATH": "/home/dev/lib",
        SESSION_MARKER_VAR: "session-1",
    }
    settings = ExecutionSettings(host_env=host, storage_emulator_host="http://127.0.0.1:4443", workdir=Path("/repo"))

    worker = plan_nodes(
        job_with({"image_uri": LOCAL_TRAINER_IMAGE}, output="gs://b/runs/r/"), settings, 29500, HOMES
    ).nodes[1]

    image = ["PATH", "HOME", "PYTHONPATH", "PYTHONUNBUFFERED", "TMPDIR"]
    stand_ins = ["STORAGE_EMULATOR_HOST", "TRAINCTL_LOCAL_PROCS_PER_NODE", SESSION_MARKER_VAR]
    vertex = ["CLUSTER_SPEC", "WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "CLOUD_ML_JOB_ID"]
    vertex += ["AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"]
    assert sorted(worker.env) == sorted(image + stand_ins + vertex)
    assert worker.env["PATH"] == os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin:/bin"])
    assert worker.home == HOMES / "workerpool1-0" and worker.env["HOME"] == str(worker.home)
    assert (worker.env["PYTHONPATH"], worker.env["TMPDIR"]) == ("/repo", "/scratch/tmp")
    assert worker.env[SESSION_MARKER_VAR] == "session-1"


def test_a_reference_to_a_variable_vertex_does_not_set_stays_literal(monkeypatch: pytest.MonkeyPatch):
    """Guards issue 24, point 9: `$(NAME)` cannot copy a variable of the JobService's environment, nor one the
    image or the local stand-ins set, into a job; Vertex would leave those references as written too."""
    monkeypatch.setenv("SECRET", FAKE_SECRET)
    references = ["$(SECRET)", "$(PATH)", "$(HOME)", "$(STORAGE_EMULATOR_HOST)", "$(TRAINCTL_LOCAL_PROCS_PER_NODE)"]

    env = request_env([(f"COPY_{i}", value) for i, value in enumerate(references)], ExecutionSettings())

    assert [env[f"COPY_{i}"] for i in range(len(references))] == references


def test_references_expand_to_vertex_variables_and_earlier_request_variables():
    """Guards issue 24, point 9 (what still expands): Vertex's own variables and the variables declared earlier
    in the request, in order; a variable declared later is not known yet."""
    env = request_env(
        [
            ("RUN", "run-$(CLOUD_ML_JOB_ID)"),
            ("EXPORT_DIR", "$(AIP_MODEL_DIR)export/"),
            ("TAG", "$(RUN)+$(LATER)"),
            ("LATER", "set after TAG"),
        ]
    )

    assert (env["RUN"], env["EXPORT_DIR"], env["TAG"]) == ("run-42", "gs://b/runs/r/model/export/", "run-42+$(LATER)")


def test_a_doubled_dollar_is_one_dollar_so_an_escaped_reference_stays_literal():
    """Guards issue 24, point 9: `$$` escapes as Kubernetes' expansion does (Vertex's EnvVar text is
    Kubernetes'): `$$(X)` gives `$(X)` whatever X is, any `$$` gives `$`, and a lone `$` or an unclosed
    `$(` is kept."""
    env = request_env(
        [("ESCAPED", "$$(AIP_MODEL_DIR)"), ("PRICE", "$$5 a $x"), ("OPEN", "$(CLOUD_ML_JOB_ID $"), ("EMPTY", "$()")]
    )

    assert (env["ESCAPED"], env["PRICE"]) == ("$(AIP_MODEL_DIR)", "$5 a $x")
    assert (env["OPEN"], env["EMPTY"]) == ("$(CLOUD_ML_JOB_ID $", "$()")


def test_the_requests_command_and_args_expand_to_the_containers_variables_only(monkeypatch: pytest.MonkeyPatch):
    """Guards issue 24, point 9: Vertex expands `$(NAME)` in the command and args it is given, as Google's own
    sample relies on (`--model_dir=$(AIP_MODEL_DIR)`), with the container's variables; a variable of the
    JobService's environment stays a literal there too."""
    monkeypatch.setenv("SECRET", FAKE_SECRET)
    container = {
        "image_uri": "x",
        "command": ["python", "train.py", "--job=$(CLOUD_ML_JOB_ID)"],
        "args": ["--model_dir=$(AIP_MODEL_DIR)", "--name=$(RUN_NAME)", "--key=$(SECRET)", "$$(RANK)"],
        "env": [{"name": "RUN_NAME", "value": "run-$(CLOUD_ML_JOB_ID)"}],
    }

    plan = plan_nodes(job_with(container, output="gs://b/runs/r/"), ExecutionSettings(), 29500, HOMES)

    assert plan.nodes[0].command == [
        sys.executable,
        "train.py",
        "--job=42",
        "--model_dir=gs://b/runs/r/model/",
        "--name=run-42",
        "--key=$(SECRET)",
        "$(RANK)",
    ]
