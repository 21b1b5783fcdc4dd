"""How the local JobService runs a CustomJob: one process group per node with the Vertex environment
(reference/vertex.md §2), the states Vertex goes through, success when the primary exits 0, failure
naming the replica and its exit status, cancel, timeout, and per-node logs."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobServiceClient, JobState
from job_specs import PARENT, custom_job, pool, unique_value

from local.fake_gcs import FakeGcs
from local.jobservice.client import JobServiceControl, wait_for_state
from local.jobservice.standalone import JobServiceProcess
from local.processes import process_alive, wait_until

pytestmark = pytest.mark.integration

REDUCER_IMAGE = "us-docker.pkg.dev/vertex-ai-restricted/training/reductionserver:latest"


def run(client: JobServiceClient, job: dict, timeout: float = 60.0):
    created = client.create_custom_job(parent=PARENT, custom_job=job)
    return wait_for_state(client, created.name, timeout=timeout)


def start(client: JobServiceClient, job: dict, state=JobState.JOB_STATE_RUNNING):
    created = client.create_custom_job(parent=PARENT, custom_job=job)
    return wait_for_state(client, created.name, [state])


def recorded_pids(pid_dir: Path, nodes: list[str]) -> dict[str, int]:
    assert wait_until(lambda: all((pid_dir / f"{node}.pid").exists() for node in nodes), 20)
    return {node: int((pid_dir / f"{node}.pid").read_text()) for node in nodes}


def test_a_two_node_job_gets_the_vertex_environment(
    job_client: JobServiceClient, jobservice_control: JobServiceControl, fake_gcs: FakeGcs, tmp_path: Path
):
    env_dir = tmp_path / "env"
    node_env = {"DATASET": "gs://data/d1/", "JOB_ECHO": "job $(CLOUD_ML_JOB_ID)"}
    reducers = pool(replicas=2, machine="n1-highcpu-16", accelerator=None, image=REDUCER_IMAGE)
    # The primary waits for the worker's record: once it exits 0 the job succeeds and the worker is stopped.
    job = custom_job(
        pool("--record-env", str(env_dir), "--until-file", str(env_dir / "workerpool1-0.json"), env=node_env),
        pool("--record-env", str(env_dir), env=node_env),
        reducers,
        output="gs://outputs-bucket/runs/r1/",
    )

    done = run(job_client, job)

    assert done.state == JobState.JOB_STATE_SUCCEEDED
    job_id = done.name.rsplit("/", 1)[1]
    primary = json.loads((env_dir / "workerpool0-0.json").read_text())
    worker = json.loads((env_dir / "workerpool1-0.json").read_text())
    primary_spec, worker_spec = json.loads(primary["CLUSTER_SPEC"]), json.loads(worker["CLUSTER_SPEC"])
    cluster = primary_spec["cluster"]
    assert sorted(cluster) == ["workerpool0", "workerpool1", "workerpool2"]
    assert [len(cluster[p]) for p in sorted(cluster)] == [1, 1, 2]
    assert worker_spec["cluster"] == cluster
    assert primary_spec["environment"] == worker_spec["environment"] == "cloud"
    assert primary_spec["task"] == {"type": "workerpool0", "index": 0}
    assert worker_spec["task"] == {"type": "workerpool1", "index": 0}
    assert primary_spec["job"]["worker_pool_specs"][2]["container_spec"]["image_uri"] == REDUCER_IMAGE
    # WORLD_SIZE counts the nodes of pools 0 and 1 (not reducers); RANK is the node index.
    assert (primary["WORLD_SIZE"], worker["WORLD_SIZE"]) == ("2", "2")
    assert (primary["RANK"], worker["RANK"]) == ("0", "1")
    assert primary["MASTER_ADDR"] == worker["MASTER_ADDR"] == "127.0.0.1"
    assert primary["MASTER_PORT"] == worker["MASTER_PORT"]
    assert f"{primary['MASTER_ADDR']}:{primary['MASTER_PORT']}" == cluster["workerpool0"][0]
    assert primary["AIP_MODEL_DIR"] == "gs://outputs-bucket/runs/r1/model/"
    assert primary["AIP_CHECKPOINT_DIR"] == "gs://outputs-bucket/runs/r1/checkpoints/"
    assert primary["AIP_TENSORBOARD_LOG_DIR"] == "gs://outputs-bucket/runs/r1/logs/"
    assert primary["CLOUD_ML_JOB_ID"] == worker["CLOUD_ML_JOB_ID"] == job_id
    assert primary["DATASET"] == "gs://data/d1/"
    assert primary["JOB_ECHO"] == f"job {job_id}"
    assert primary["STORAGE_EMULATOR_HOST"] == fake_gcs.url
    assert primary["TRAINCTL_LOCAL_PROCS_PER_NODE"] == worker["TRAINCTL_LOCAL_PROCS_PER_NODE"] == "2"
    assert not (env_dir / "workerpool2-0.json").exists()
    logs = jobservice_control.replica_logs(done.name)
    assert sorted(logs) == ["service", "workerpool0-0", "workerpool1-0"]
    assert "workerpool2 (2 replicas) is listed in CLUSTER_SPEC but not started" in Path(logs["service"]).read_text()


def test_gpus_become_cpu_processes_per_node_capped_at_two(job_client: JobServiceClient, tmp_path: Path):
    env_dir = tmp_path / "env"
    eight_gpus = pool(
        "--record-env",
        str(env_dir),
        "--until-file",
        str(env_dir / "workerpool1-0.json"),
        machine="n1-standard-32",
        accelerator="NVIDIA_TESLA_V100",
        count=8,
    )
    no_gpu = pool("--record-env", str(env_dir), accelerator=None)

    assert run(job_client, custom_job(eight_gpus, no_gpu)).state == JobState.JOB_STATE_SUCCEEDED

    assert json.loads((env_dir / "workerpool0-0.json").read_text())["TRAINCTL_LOCAL_PROCS_PER_NODE"] == "2"
    assert json.loads((env_dir / "workerpool1-0.json").read_text())["TRAINCTL_LOCAL_PROCS_PER_NODE"] == "1"


def test_a_node_sees_neither_a_secret_of_the_jobservice_nor_an_expansion_of_it(
    private_jobservice: Callable[..., JobServiceProcess], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """Guards issue 24, point 9: a JobService started with a developer's credentials in its environment runs
    a job whose nodes record their whole environment: no credential variable is there, no value holds the
    secret, and the request's `$(AWS_SECRET_ACCESS_KEY)` stays as written, as on Vertex."""
    secret = f"fake-secret-{unique_value()}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / f"{secret}.json"))
    service = private_jobservice()  # inherits this environment
    env_dir = tmp_path / "env"
    copies = {"COPY_KEY": "$(AWS_SECRET_ACCESS_KEY)", "COPY_CREDENTIALS": "$(GOOGLE_APPLICATION_CREDENTIALS)"}
    job = custom_job(
        pool("--record-env", str(env_dir), "--until-file", str(env_dir / "workerpool1-0.json"), env=copies),
        pool("--record-env", str(env_dir), env=copies),
    )

    done = run(service.client(), job)

    assert done.state == JobState.JOB_STATE_SUCCEEDED, done.error.message
    for node in ("workerpool0-0", "workerpool1-0"):
        recorded = (env_dir / f"{node}.json").read_text()
        env = json.loads(recorded)
        assert secret not in recorded
        assert not {"AWS_SECRET_ACCESS_KEY", "GOOGLE_APPLICATION_CREDENTIALS"} & set(env)
        assert (env["COPY_KEY"], env["COPY_CREDENTIALS"]) == tuple(copies.values())
        assert env["HOME"] != os.environ.get("HOME") and Path(env["HOME"]).is_dir()


def test_without_a_base_output_directory_there_are_no_aip_dirs(job_client: JobServiceClient, tmp_path: Path):
    run(job_client, custom_job(pool("--record-env", str(tmp_path))))

    assert "AIP_MODEL_DIR" not in json.loads((tmp_path / "workerpool0-0.json").read_text())


def test_a_worker_exiting_3_fails_the_job_naming_the_replica_and_status(job_client: JobServiceClient, tmp_path: Path):
    job = custom_job(pool("--pid-dir", str(tmp_path), "--sleep", "60"), pool("--sleep", "0.5", "--exit-code", "3"))

    done = run(job_client, job)

    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.message.startswith("The replica workerpool1-0 exited with a non-zero status of 3.")
    assert not process_alive(recorded_pids(tmp_path, ["workerpool0-0"])["workerpool0-0"])


def test_the_job_succeeds_when_the_primary_exits_0_and_the_others_are_stopped(
    job_client: JobServiceClient, tmp_path: Path
):
    job = custom_job(pool("--sleep", "0.5"), pool("--pid-dir", str(tmp_path), "--sleep", "60", replicas=2))

    done = run(job_client, job)

    assert done.state == JobState.JOB_STATE_SUCCEEDED
    assert not done.error.message
    pids = recorded_pids(tmp_path, ["workerpool1-0", "workerpool1-1"])
    assert not any(process_alive(pid) for pid in pids.values())


def test_a_worker_finishing_first_does_not_end_the_job(job_client: JobServiceClient, tmp_path: Path):
    release = tmp_path / "release"
    job = custom_job(pool("--until-file", str(release)), pool("--record-env", str(tmp_path)))
    created = job_client.create_custom_job(parent=PARENT, custom_job=job)
    # The worker records its environment and exits 0 at once; the job must wait for the primary.
    assert wait_until(lambda: (tmp_path / "workerpool1-0.json").exists(), 20)
    time.sleep(0.5)

    assert job_client.get_custom_job(name=created.name).state == JobState.JOB_STATE_RUNNING
    release.touch()
    assert wait_for_state(job_client, created.name).state == JobState.JOB_STATE_SUCCEEDED


def test_cancel_ends_the_job_cancelled_and_stops_every_node(job_client: JobServiceClient, tmp_path: Path):
    running = start(
        job_client,
        custom_job(
            pool("--pid-dir", str(tmp_path), "--sleep", "60"), pool("--pid-dir", str(tmp_path), "--sleep", "60")
        ),
    )
    pids = recorded_pids(tmp_path, ["workerpool0-0", "workerpool1-0"])

    job_client.cancel_custom_job(name=running.name)
    right_after = job_client.get_custom_job(name=running.name)
    done = wait_for_state(job_client, running.name, timeout=60)

    # Ended by the cancel, not by its nodes' own 60 s: the job's own times say so, whatever this machine's speed.
    assert (done.end_time - done.start_time).total_seconds() < 30
    assert right_after.state in (JobState.JOB_STATE_CANCELLING, JobState.JOB_STATE_CANCELLED)
    assert done.state == JobState.JOB_STATE_CANCELLED
    assert done.error.code == 1  # google.rpc.Code.CANCELLED, as Vertex documents
    assert not any(process_alive(pid) for pid in pids.values())


def test_a_node_that_ignores_sigterm_is_killed_after_the_grace_period(job_client: JobServiceClient, tmp_path: Path):
    running = start(job_client, custom_job(pool("--pid-dir", str(tmp_path), "--ignore-sigterm", "--sleep", "60")))
    pid = recorded_pids(tmp_path, ["workerpool0-0"])["workerpool0-0"]

    began = time.monotonic()
    job_client.cancel_custom_job(name=running.name)
    done = wait_for_state(job_client, running.name, timeout=10)

    # The session's JobService waits 3 s (--cancel-grace) between SIGTERM and SIGKILL.
    assert time.monotonic() - began >= 2.5
    assert done.state == JobState.JOB_STATE_CANCELLED
    assert not process_alive(pid)


def test_a_queued_job_can_be_cancelled_before_it_starts(
    job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    jobservice_control.hold_next_in_queue(seconds=60)
    queued = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(pool()))

    job_client.cancel_custom_job(name=queued.name)
    done = wait_for_state(job_client, queued.name, timeout=10)

    assert done.state == JobState.JOB_STATE_CANCELLED
    assert "start_time" not in done
    assert "workerpool0-0" not in jobservice_control.replica_logs(done.name)


def test_an_ended_job_cannot_be_cancelled(job_client: JobServiceClient):
    done = run(job_client, custom_job(pool()))

    with pytest.raises(exceptions.FailedPrecondition):
        job_client.cancel_custom_job(name=done.name)


def test_scheduling_timeout_fails_a_job_that_runs_too_long(job_client: JobServiceClient):
    done = run(job_client, custom_job(pool("--sleep", "60"), timeout_seconds=1), timeout=60)

    assert done.state == JobState.JOB_STATE_FAILED
    assert done.error.code == 4  # DEADLINE_EXCEEDED
    assert "scheduling.timeout" in done.error.message
    # Ended at its timeout, not at its node's own 60 s end: by the job's own times, not this machine's clock.
    assert 1 <= (done.end_time - done.start_time).total_seconds() < 30


def test_an_image_without_a_local_entry_point_fails_the_job_saying_how_to_map_it(job_client: JobServiceClient):
    done = run(job_client, custom_job(pool(image="localhost/unmapped/image:1")))

    assert done.state == JobState.JOB_STATE_FAILED
    assert "--image-map" in done.error.message


def test_the_container_command_overrides_the_image_entry_point(job_client: JobServiceClient, tmp_path: Path):
    marker = tmp_path / "ran"
    command = ["python", "-c", f"import pathlib; pathlib.Path({str(marker)!r}).write_text('yes')"]

    done = run(job_client, custom_job(pool(command=command, image="localhost/unmapped/image:1")))

    assert done.state == JobState.JOB_STATE_SUCCEEDED
    assert marker.read_text() == "yes"


def test_each_node_logs_to_a_file_found_from_the_job_name(
    job_client: JobServiceClient, jobservice: JobServiceProcess, jobservice_control: JobServiceControl, tmp_path: Path
):
    worker_started = tmp_path / "workerpool1-0.pid"
    done = run(job_client, custom_job(pool("--until-file", str(worker_started)), pool("--pid-dir", str(tmp_path))))

    job_id = done.name.rsplit("/", 1)[1]
    for node in ("workerpool0-0", "workerpool1-0"):
        log_file = jobservice.state_dir / "jobs" / job_id / "logs" / f"{node}.log"
        assert jobservice_control.replica_logs(done.name)[node] == str(log_file)
        assert f"fake node {node} started" in log_file.read_text()
