"""What a job writes is untrusted input (issue 24, point 5), on the live functions: a metrics.json nested too
deep, holding NaN or huge values, or 10 MB large, and a 10 MB failure note, each end their request with the
output reported unreadable or filtered, never stopping a sweep nor keeping GPU quota held; a forged heartbeat
gets no job cancelled, and only the built-in trainer's heartbeat is judged at all.

The controller's trainer image is mapped onto tests/local/programs/fake_node.py here, which reads its behaviour
from its dataset folder when given the trainer's command line: built-in requests run without torch."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from google.cloud.aiplatform_v1.types import JobState

from functions.ledger.keys import key_hash
from local.jobservice.client import wait_for_state
from tests.integration.deployment import TRAINER_STAND_IN, Deployment, builtin_request, fake_node_request, serving

# P100s: no other test asks for them; a limit of 2 lets one request hold the quota while the next one waits.
P100 = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_P100", "accelerator_count": 2}
P100_POOL = "quota/us-central1/custom_model_training_nvidia_p100_gpus.json"
CAPACITY = {"regions": {"us-central1": {"quotas": {"custom_model_training_nvidia_p100_gpus": 2}}}}
# 2,000 deep: past Python's recursion limit, within the 4,096 characters a request's argument may have.
DEEP = '{"val_accuracy": ' + "[" * 2000 + "]" * 2000 + "}"
TEN_MB = 10_000_000
# A tick that reads a running job with max_silence (1 s in these tests) looks at it again at most max_silence + 1 s
# later (functions/lifecycle/sweep.py, seen_after).
NEXT_LOOK_WITHIN = 2.5


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    log_dir = tmp_path_factory.mktemp("functions")
    with serving(jobservice, log_dir, CAPACITY, TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN) as deployed:
        yield deployed


def tick_past_the_next_look(deployment: Deployment) -> None:
    """Reconcile until a tick has begun NEXT_LOOK_WITHIN seconds from now (three ticks at least): whichever tick
    last read a running job did so before now, so one of these has read it again since, and judged what it wrote.
    (Ticking to a bound on the job's start instead passed without judging anything when the tick that saw the job
    running came late.)"""
    after, ticks = time.time() + NEXT_LOOK_WITHIN, 0
    while True:
        began = time.time()
        deployment.reconcile()
        ticks += 1
        if began > after and ticks >= 3:
            return


def artifacts(deployment: Deployment, request_id: str) -> dict[str, str]:
    record = deployment.record(f"request:{request_id}")
    assert record is not None
    return record["artifacts"]


def write(deployment: Deployment, uri: str, data: bytes | str) -> None:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    deployment.storage().bucket(bucket).blob(name).upload_from_string(data)


def active(deployment: Deployment, request_id: str) -> bool:
    name = f"active/{key_hash(f'request:{request_id}')}"
    return deployment.storage().bucket(deployment.control_bucket).blob(name).exists()


def started(job_client, deployment: Deployment, request_id: str) -> tuple[str, float]:
    """The request's job and the Unix time Vertex says it started."""
    record = deployment.record(f"request:{request_id}")
    assert record is not None and record.get("job_name")
    job = job_client.get_custom_job(name=record["job_name"])
    return job.name, job.start_time.timestamp()


def test_a_deeply_nested_metrics_json_ends_its_request_and_frees_the_quota_for_the_next_in_line(deployment, tmp_path):
    """Issue 24, point 5, the review's scenario: a metrics.json nested 2,000 deep raised RecursionError in every
    observation, past the ValueError catch: the request stayed active holding its GPUs, and the request queued
    behind it never started. Now it succeeds with its metrics reported unreadable, and the next one goes."""
    events = deployment.events()
    release = tmp_path / "release"
    first = fake_node_request("deep-a", "--until-file", str(release), "--metrics", DEEP, resources=P100)
    assert deployment.request(first) == 200
    assert deployment.request(fake_node_request("after-deep", "--sleep", "0.5", resources=P100)) == 200
    assert events.states("after-deep") == ["accepted", "queued"], "the first holds the only two P100s"

    release.touch()
    succeeded = events.wait_for("deep-a", "succeeded", act=deployment.reconcile)
    assert succeeded.metrics == {}
    assert succeeded.message.endswith(
        "its metrics.json could not be read, so no metrics are reported: document is nested more than 32 levels deep"
    )
    events.wait_for("after-deep", "submitted", act=deployment.reconcile)
    pool = json.loads(deployment.storage().bucket(deployment.control_bucket).blob(P100_POOL).download_as_text())
    assert key_hash("request:deep-a") not in pool["holders"]
    assert not active(deployment, "deep-a")
    events.wait_for("after-deep", "succeeded", act=deployment.reconcile)


def test_forged_metrics_are_filtered_to_finite_small_values_and_what_was_left_out_is_named(deployment):
    """Issue 24, point 5, the review's scenario: NaN, an overflowing float, a 31-digit integer, deep nesting and
    long text in metrics.json travelled in the `succeeded` event as they were."""
    events = deployment.events()
    forged = (
        '{"val_accuracy": 0.9, "val_loss": NaN, "overflow": 1e999, "huge": 1' + "0" * 30 + ", "
        '"deep": {"a": {"b": 1}}, "long": "' + "x" * 2000 + '", "step_time_ms": {"p50": 1.5}}'
    )
    assert deployment.request(fake_node_request("forged-metrics", "--metrics", forged)) == 200
    succeeded = events.wait_for("forged-metrics", "succeeded", act=deployment.reconcile)
    assert succeeded.metrics == {"val_accuracy": 0.9, "step_time_ms": {"p50": 1.5}}
    assert "; left out of the metrics: 'val_loss' (nan is not a finite number); 'overflow' (inf is" in succeeded.message
    for named in ("'huge' (an integer beyond 64 bits)", "'deep' ('a': nested more than one level)", "'long' (text"):
        assert named in succeeded.message


def test_ten_megabyte_outputs_are_refused_unread_and_the_sweep_goes_on(deployment, tmp_path):
    """Issue 24, point 5, the review's scenario: a 10 MB metrics.json was downloaded whole, and a 10 MB failure
    note became a 10 MB `failed` message that no publish could carry, every tick. Now each is refused from its
    size, said so in its event, and every request of the sweep ends, with no sweep counting an error."""
    events = deployment.events()
    release = tmp_path / "release"
    hold = ("--until-file", str(release))
    assert deployment.request(fake_node_request("big-metrics", *hold)) == 200
    assert deployment.request(fake_node_request("big-note", *hold, "--exit-code", "3")) == 200
    assert deployment.request(fake_node_request("beside-big", *hold, "--metrics", '{"val_accuracy": 0.5}')) == 200
    write(deployment, artifacts(deployment, "big-metrics")["metrics_uri"], b" " * TEN_MB)
    note = artifacts(deployment, "big-note")["model_dir"] + "failure.json"
    write(deployment, note, json.dumps({"error": "e" * TEN_MB}))
    release.touch()

    sweeps: list[dict[str, int]] = []
    succeeded = events.wait_for("big-metrics", "succeeded", act=lambda: sweeps.append(deployment.reconcile()))
    failed = events.wait_for("big-note", "failed", act=lambda: sweeps.append(deployment.reconcile()))
    beside = events.wait_for("beside-big", "succeeded", act=lambda: sweeps.append(deployment.reconcile()))

    assert succeeded.message.endswith(
        f"its metrics.json could not be read, so no metrics are reported: it is {TEN_MB} bytes; "
        "the limit is 65536 bytes"
    )
    assert failed.reason == "user" and len(failed.message) < 1000
    assert f"The trainer's failure note {note} could not be read: it is {TEN_MB + 13} bytes;" in failed.message
    assert beside.metrics == {"val_accuracy": 0.5}
    assert [sweep for sweep in sweeps if sweep.get("errors")] == []
    assert not any(active(deployment, r) for r in ("big-metrics", "big-note", "beside-big"))


def test_a_progress_time_from_before_the_job_started_is_no_evidence_of_a_hang(deployment, job_client, tmp_path):
    """Issue 24, point 5, the review's scenario: a progress.json forged with an old time (one job could write
    another's) had a running job declared hung and cancelled, again on every attempt. A time before the job's
    own start is not one the job wrote: it is not judged."""
    events = deployment.events()
    release = tmp_path / "release"
    request = builtin_request(deployment, "forged-old", "--until-file", str(release), scheduling={"max_silence": 1})
    assert deployment.request(request) == 200
    events.wait_for("forged-old", "running", act=deployment.reconcile)
    job, start = started(job_client, deployment, "forged-old")
    forged = {"step": 7, "total_steps": 100, "epoch": 0, "time": start - 3600, "attempt": 0, "state": "training"}
    write(deployment, artifacts(deployment, "forged-old")["checkpoint_dir"] + "progress.json", json.dumps(forged))

    tick_past_the_next_look(deployment)  # well past max_silence since the job started
    assert "stuck" not in events.states("forged-old")
    assert job_client.get_custom_job(name=job).state == JobState.JOB_STATE_RUNNING
    release.touch()
    assert events.wait_for("forged-old", "succeeded", act=deployment.reconcile).attempt == 1


def test_a_custom_images_progress_record_is_never_judged(deployment, job_client, tmp_path):
    """Issue 24, point 5: custom images share one service account, so a progress.json beside one of their jobs
    may be another's forgery; only the built-in trainer writes the heartbeat hangs are judged by."""
    events = deployment.events()
    release = tmp_path / "release"
    request = fake_node_request("custom-silent", "--until-file", str(release), scheduling={"max_silence": 1})
    assert deployment.request(request) == 200
    events.wait_for("custom-silent", "running", act=deployment.reconcile)
    job, start = started(job_client, deployment, "custom-silent")
    still = {"step": 7, "total_steps": 100, "epoch": 0, "time": start, "attempt": 0, "state": "training"}
    write(deployment, artifacts(deployment, "custom-silent")["checkpoint_dir"] + "progress.json", json.dumps(still))

    tick_past_the_next_look(deployment)  # a built-in job would be hung by now (the next test)
    assert "stuck" not in events.states("custom-silent")
    assert job_client.get_custom_job(name=job).state == JobState.JOB_STATE_RUNNING
    release.touch()
    events.wait_for("custom-silent", "succeeded", act=deployment.reconcile)


def test_a_builtin_job_whose_progress_stands_still_is_cancelled_as_hung_and_resubmitted(
    deployment, job_client, tmp_path
):
    """Issue 16 item 5: Vertex restarts only workers that exit; a built-in trainer's job RUNNING whose progress
    record (checkpoints/progress.json) has stood still longer than max_silence is stuck (hang), cancelled and
    resubmitted into the same output directory, where the first attempt's record, older than the new job,
    is no evidence against it (issue 24, point 5)."""
    events = deployment.events()
    release = tmp_path / "release"  # both attempts run until it exists
    request = builtin_request(deployment, "hung-1", "--until-file", str(release), scheduling={"max_silence": 1})
    assert deployment.request(request) == 200
    events.wait_for("hung-1", "running", act=deployment.reconcile)
    first_job, start = started(job_client, deployment, "hung-1")
    still = {"step": 7, "total_steps": 100, "epoch": 0, "time": start, "attempt": 0, "state": "training"}
    write(deployment, artifacts(deployment, "hung-1")["checkpoint_dir"] + "progress.json", json.dumps(still))

    stuck = events.wait_for("hung-1", "stuck", act=deployment.reconcile)
    assert (stuck.reason, stuck.job_state, stuck.max_silence_seconds) == ("hang", "JOB_STATE_RUNNING", 1)
    retrying = events.wait_for("hung-1", "retrying", act=deployment.reconcile)
    assert (retrying.reason, retrying.attempt) == ("hang", 1)
    assert job_client.get_custom_job(name=first_job).state == JobState.JOB_STATE_CANCELLED
    deadline = time.monotonic() + 60
    while (second_job := (deployment.record("request:hung-1") or {}).get("job_name")) in (None, first_job):
        assert time.monotonic() < deadline, "the second attempt was never submitted"
        deployment.reconcile()
    wait_for_state(job_client, second_job, [JobState.JOB_STATE_RUNNING])
    tick_past_the_next_look(deployment)  # the second attempt runs past max_silence: not judged hung
    release.touch()
    succeeded = events.wait_for("hung-1", "succeeded", act=deployment.reconcile)
    assert succeeded.attempt == 2 and events.states("hung-1").count("stuck") == 1
