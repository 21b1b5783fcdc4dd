"""The local JobService's capacity model, through the real JobServiceClient: jobs wait in JOB_STATE_QUEUED
for GPU quota and leave it in creation order, a job larger than the quota is refused at create, machines
stock out and get preempted under Vertex's own retry rules, and each region keeps its own count."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.cloud.aiplatform_v1 import JobServiceClient, JobState
from job_specs import PARENT, custom_job, pool

from local.jobservice.client import JobServiceControl, wait_for_state
from local.names import LOCAL_PROJECT
from local.processes import wait_until

pytestmark = pytest.mark.integration

L4 = "custom_model_training_nvidia_l4_gpus"
EUROPE = f"projects/{LOCAL_PROJECT}/locations/europe-west4"


@pytest.fixture
def capacity(jobservice_control: JobServiceControl) -> Iterator[JobServiceControl]:
    yield jobservice_control
    jobservice_control.clear_capacity()


def eight_l4(*args: str) -> dict:
    """One node with 8 L4 GPUs: the whole of an 8-GPU quota."""
    return pool(*args, machine="g2-standard-96", accelerator="NVIDIA_L4", count=8)


def hold_eight_l4(client: JobServiceClient, release: Path, parent: str = PARENT):
    """A job of 8 L4 GPUs, RUNNING until the file `release` exists."""
    job = client.create_custom_job(parent=parent, custom_job=custom_job(eight_l4("--until-file", str(release))))
    wait_for_state(client, job.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    return job


def service_log(control: JobServiceControl, name: str) -> str:
    path = control.replica_logs(name).get("service")
    return Path(path).read_text() if path else ""


def wait_until_waiting_for_quota(control: JobServiceControl, name: str) -> None:
    assert wait_until(lambda: "waiting for GPU quota" in service_log(control, name), 20), f"{name} never waited"


def test_a_second_job_over_the_quota_waits_queued_until_the_first_ends(
    job_client: JobServiceClient, capacity: JobServiceControl, tmp_path: Path
):
    """Guards issue 14 item 4: two jobs of 8 GPUs over an 8-GPU quota: the second stays QUEUED until the
    first has ended, then runs."""
    capacity.set_capacity({"regions": {"us-central1": {"quotas": {L4: 8}}}})
    release = tmp_path / "release"
    first = hold_eight_l4(job_client, release)
    second = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(eight_l4()))

    wait_until_waiting_for_quota(capacity, second.name)
    assert job_client.get_custom_job(name=second.name).state == JobState.JOB_STATE_QUEUED
    release.touch()

    first_ended = wait_for_state(job_client, first.name, timeout=30)
    second_ended = wait_for_state(job_client, second.name, timeout=30)
    assert (first_ended.state, second_ended.state) == (JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_SUCCEEDED)
    assert second_ended.start_time >= first_ended.end_time


def test_waiting_jobs_leave_the_queue_in_creation_order(
    job_client: JobServiceClient, capacity: JobServiceControl, tmp_path: Path
):
    """Guards issue 14 item 4: a later job that would fit beside the running ones still waits behind an
    earlier one that does not: the queue is first come, first served."""
    capacity.set_capacity({"regions": {"us-central1": {"quotas": {L4: 8}}}})
    release = tmp_path / "release"
    four = pool("--until-file", str(release), machine="g2-standard-48", accelerator="NVIDIA_L4", count=4)
    holder = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(four))
    wait_for_state(job_client, holder.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    big = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(eight_l4()))
    wait_until_waiting_for_quota(capacity, big.name)
    small_pool = pool(machine="g2-standard-24", accelerator="NVIDIA_L4", count=2)
    small = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(small_pool))
    wait_until_waiting_for_quota(capacity, small.name)  # 4 + 2 ≤ 8, but `big` came first
    assert job_client.get_custom_job(name=small.name).state == JobState.JOB_STATE_QUEUED
    release.touch()

    big_ended = wait_for_state(job_client, big.name, timeout=30)
    small_ended = wait_for_state(job_client, small.name, timeout=30)
    assert big_ended.state == small_ended.state == JobState.JOB_STATE_SUCCEEDED
    assert small_ended.start_time >= big_ended.end_time


def test_a_job_larger_than_the_quota_is_refused_at_create_naming_the_metric(
    job_client: JobServiceClient, capacity: JobServiceControl
):
    """Guards issue 14 item 4: a job that could never fit is refused with 429/RESOURCE_EXHAUSTED and Vertex's
    quota text, instead of waiting for ever."""
    capacity.set_capacity({"regions": {"us-central1": {"quotas": {L4: 4}}}})
    with pytest.raises(exceptions.ResourceExhausted, match=f"exceed quota limits: aiplatform.googleapis.com/{L4}"):
        job_client.create_custom_job(parent=PARENT, custom_job=custom_job(eight_l4()))


def test_a_machine_with_four_stockouts_fails_with_code_8_and_the_stockout_text(
    job_client: JobServiceClient, capacity: JobServiceControl
):
    """Guards issue 14 item 4: each new job on the machine meets 4 stockouts; Vertex retries 3 times, then
    the job fails with RESOURCE_EXHAUSTED and the stockout text."""
    capacity.set_capacity(
        {"regions": {"us-central1": {"machines": [{"machine_type": "g2-standard-96", "stockouts": 4}]}}}
    )
    job = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(eight_l4()))

    ended = wait_for_state(job_client, job.name, timeout=30)
    assert (ended.state, ended.error.code) == (JobState.JOB_STATE_FAILED, 8)
    assert "Resources are insufficient in region: us-central1" in ended.error.message


def test_a_spot_machine_preempted_after_each_start_fails_once_vertex_stops_restarting(
    job_client: JobServiceClient, capacity: JobServiceControl
):
    """Guards issue 14 item 4: preempt_after preempts every attempt; a Spot job is restarted 6 times (Vertex's
    rule, vertex_retries.after_preemption) and then fails with the stockout text."""
    rule = {"machine_type": "g2-standard-96", "strategy": "spot", "preempt_after": 0.3}  # 7 attempts
    capacity.set_capacity({"regions": {"us-central1": {"machines": [rule]}}})
    job = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(eight_l4("--sleep", "60"), strategy="SPOT"))

    ended = wait_for_state(job_client, job.name, timeout=90)
    assert (ended.state, ended.error.code) == (JobState.JOB_STATE_FAILED, 8)
    assert "Resources are insufficient in region: us-central1" in ended.error.message
    assert "Spot VMs preempted; Vertex has already restarted the job 6 times" in service_log(capacity, job.name)


def test_each_region_counts_its_own_quota(job_client: JobServiceClient, capacity: JobServiceControl, tmp_path: Path):
    """Guards issue 14 item 4: a job in europe-west4 runs beside a full us-central1, and a second
    us-central1 job waits."""
    quotas = {"quotas": {L4: 8}}
    capacity.set_capacity({"regions": {"us-central1": quotas, "europe-west4": quotas}})
    release = tmp_path / "release"
    central = hold_eight_l4(job_client, release)

    europe = hold_eight_l4(job_client, release, parent=EUROPE)
    second_central = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(eight_l4()))
    wait_until_waiting_for_quota(capacity, second_central.name)
    assert job_client.get_custom_job(name=second_central.name).state == JobState.JOB_STATE_QUEUED

    release.touch()
    for name in (central.name, europe.name, second_central.name):
        assert wait_for_state(job_client, name, timeout=30).state == JobState.JOB_STATE_SUCCEEDED
