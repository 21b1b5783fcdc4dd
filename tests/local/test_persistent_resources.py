"""Vertex's PersistentResourceService on the local JobService's REST port (issue 43, point 4), through the stock
`PersistentResourceServiceClient` (transport="rest") and gcloud, and the capacity model's cold-node provisioning
delay: a resource is PROVISIONING for the delay, then RUNNING; a job on it skips the delay while a cold job waits it
out in PENDING; jobs that do not fit its pools are refused as Vertex refuses them, and jobs wait QUEUED for its free
replicas; its GPUs count against the quota; deleting it cancels its jobs; it outlives a restart of the JobService.
Timings are read from the resources' and jobs' own timestamps, never from the test's clock."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.api_core import exceptions
from google.api_core.future.polling import DEFAULT_POLLING
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1 import JobServiceClient, JobState, PersistentResource, PersistentResourceServiceClient
from job_specs import custom_job, pool

from local.jobservice.capacity import CapacityError, parse_capacity
from local.jobservice.client import JobServiceControl, job_service_client, wait_for_state
from local.jobservice.standalone import JobServiceProcess
from local.processes import wait_until

pytestmark = pytest.mark.integration

PROJECT = "persistent-test"
PARENT = f"projects/{PROJECT}/locations/us-central1"
POLLING = DEFAULT_POLLING.with_delay(initial=0.1, maximum=0.2, multiplier=1.0).with_timeout(60)
DELAY = 2.0  # seconds of provisioning for cold nodes in these tests
T4_POOL = {
    "machine_spec": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 2}
}


def resource_client(service: JobServiceProcess) -> PersistentResourceServiceClient:
    return PersistentResourceServiceClient(
        transport="rest",
        client_options={"api_endpoint": service.rest_url.rstrip("/")},
        credentials=AnonymousCredentials(),
    )


@pytest.fixture
def resources(jobservice: JobServiceProcess) -> Iterator[PersistentResourceServiceClient]:
    """The client; every resource the test made is deleted afterwards, and the capacity model cleared."""
    client = resource_client(jobservice)
    yield client
    for resource in client.list_persistent_resources(parent=PARENT):
        try:
            client.delete_persistent_resource(name=resource.name).result(polling=POLLING)
        except exceptions.FailedPrecondition:
            pass  # already being deleted
    jobservice.control.clear_capacity()


@pytest.fixture
def provisioning(jobservice_control: JobServiceControl) -> JobServiceControl:
    jobservice_control.set_capacity({"provisioning": DELAY})
    return jobservice_control


def new_id() -> str:
    return f"pr-{uuid.uuid4().hex[:10]}"


def create(client: PersistentResourceServiceClient, *pools: dict, resource_id: str | None = None, **fields):
    """The create operation of a resource with these pools (each T4_POOL with 2 replicas by default)."""
    resource = PersistentResource(resource_pools=list(pools) or [{**T4_POOL, "replica_count": 2}], **fields)
    return client.create_persistent_resource(
        parent=PARENT, persistent_resource=resource, persistent_resource_id=resource_id or new_id()
    )


def resource_of(operation) -> str:
    """The resource an operation (…/persistentResources/ID/operations/OP) is about."""
    return operation.operation.name.rsplit("/operations/", 1)[0]


def on_resource(resource_name: str, *pools: dict, **job_fields) -> dict:
    job = custom_job(*(pools or [pool()]), **job_fields)
    job["job_spec"]["persistent_resource_id"] = resource_name.rsplit("/", 1)[1]
    return job


def seconds(later, earlier) -> float:
    return (later - earlier).total_seconds()


# --- the capacity file's provisioning keys


def test_the_capacity_file_reads_provisioning_at_top_level_and_per_machine():
    """Guards issue 43 point 4: `provisioning` (seconds or a duration) is every machine's delay, a machine rule's
    own overrides it, and it is 0 when absent (today's behaviour)."""
    model = parse_capacity(
        {"provisioning": "1m", "regions": {"us-central1": {"machines": [{"machine_type": "a2-highgpu-1g",
                                                                           "provisioning": 0.5}]}}}
    )  # fmt: skip
    assert model.provisioning_delay("us-central1", "n1-standard-8", "STANDARD") == 60.0
    assert model.provisioning_delay("us-central1", "a2-highgpu-1g", "SPOT") == 0.5
    assert parse_capacity({}).provisioning_delay("us-central1", "n1-standard-8", "STANDARD") == 0.0


@pytest.mark.parametrize(
    ("document", "key"),
    [
        ({"provisioning": "soon"}, "provisioning"),
        ({"provisioning": -1}, "provisioning"),
        ({"regions": {"r": {"machines": [{"provisioning": True}]}}}, "regions.r.machines[0].provisioning"),
    ],
)
def test_a_wrong_provisioning_names_its_key(document: dict, key: str):
    with pytest.raises(CapacityError) as refused:
        parse_capacity(document)
    assert str(refused.value).startswith(f"{key}: ")


# --- the resource's life


def test_a_resource_provisions_for_the_delay_then_runs(resources, provisioning):
    """Guards issue 43 point 4: PROVISIONING → RUNNING after the capacity model's delay (start_time set then),
    the create operation done with the resource; its pool gets an id; list and get show it."""
    operation = create(resources, display_name="warm")
    name = resource_of(operation)
    assert resources.get_persistent_resource(name=name).state == PersistentResource.State.PROVISIONING
    running = operation.result(polling=POLLING)
    assert running.state == PersistentResource.State.RUNNING
    assert seconds(running.start_time, running.create_time) >= DELAY
    (resource_pool,) = running.resource_pools
    assert resource_pool.id and resource_pool.replica_count == 2 and resource_pool.used_replica_count == 0
    assert name in [r.name for r in resources.list_persistent_resources(parent=PARENT)]


def test_create_refuses_a_bad_id_a_taken_id_and_pools_without_replicas(resources):
    """Guards issue 43 point 4: CreatePersistentResourceRequest's id rule, ALREADY_EXISTS for a taken id, and
    ResourcePool's replica rules, each refusal naming its field."""
    with pytest.raises(exceptions.BadRequest) as refused:
        create(resources, resource_id="Warm_Pool")
    assert "persistent_resource_id" in str(refused.value)
    with pytest.raises(exceptions.BadRequest) as refused:
        create(resources, {**T4_POOL, "replica_count": 0})
    assert "resource_pools[0].replica_count" in str(refused.value)
    with pytest.raises(exceptions.BadRequest) as refused:
        create(resources, {**T4_POOL, "autoscaling_spec": {"min_replica_count": 0, "max_replica_count": 2}})
    assert "autoscaling_spec.min_replica_count" in str(refused.value)
    taken = new_id()
    create(resources, resource_id=taken).result(polling=POLLING)
    with pytest.raises(exceptions.Conflict):
        create(resources, resource_id=taken)


def test_a_job_on_a_running_resource_skips_the_delay_while_a_cold_job_waits_it_out(
    resources, jobservice_control: JobServiceControl, job_client: JobServiceClient, tmp_path: Path
):
    """Guards issue 43 point 4: the resource's nodes are started, so its job goes RUNNING without the capacity
    model's provisioning delay, and holds a replica of the pool (used_replica_count) while it runs; a cold job
    created beside it spends the delay in PENDING. (The delay is set long once the resource runs, so that the warm
    job's start stays far inside it on a loaded machine.)"""
    resource = create(resources).result(polling=POLLING)
    long_delay = 6.0
    jobservice_control.set_capacity({"provisioning": long_delay})
    release = tmp_path / "release"
    warm = job_client.create_custom_job(
        parent=PARENT, custom_job=on_resource(resource.name, pool("--until-file", str(release)))
    )
    cold = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(pool()))
    warm_running = wait_for_state(job_client, warm.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    assert resources.get_persistent_resource(name=resource.name).resource_pools[0].used_replica_count == 1
    cold_ended = wait_for_state(job_client, cold.name, timeout=30)
    release.touch()
    wait_for_state(job_client, warm.name, timeout=30)

    assert seconds(warm_running.start_time, warm_running.create_time) < long_delay
    assert seconds(cold_ended.start_time, cold_ended.create_time) >= long_delay
    assert warm_running.start_time < cold_ended.start_time
    assert resources.get_persistent_resource(name=resource.name).resource_pools[0].used_replica_count == 0


def test_a_job_on_a_provisioning_resource_waits_queued_until_it_runs(resources, provisioning, job_client):
    """Guards issue 43 point 4: a resource still PROVISIONING has no started nodes to give: a job created on it
    waits in QUEUED and starts once the resource is RUNNING."""
    operation = create(resources)
    job = job_client.create_custom_job(parent=PARENT, custom_job=on_resource(resource_of(operation)))
    assert job_client.get_custom_job(name=job.name).state == JobState.JOB_STATE_QUEUED
    resource = operation.result(polling=POLLING)
    ended = wait_for_state(job_client, job.name, timeout=30)
    assert ended.state == JobState.JOB_STATE_SUCCEEDED
    assert ended.start_time >= resource.start_time


def test_a_job_on_a_resource_meets_none_of_the_machine_rules_stockouts(resources, job_client, jobservice_control):
    """Guards issue 43 point 4: the resource's machines are already there, so a machine rule that stocks out every
    attempt fails a cold job of that machine (code 8) and leaves the job on the resource alone."""
    resource = create(resources).result(polling=POLLING)
    jobservice_control.set_capacity(
        {"regions": {"us-central1": {"machines": [{"machine_type": "n1-standard-8", "stockouts": "always"}]}}}
    )
    warm = job_client.create_custom_job(parent=PARENT, custom_job=on_resource(resource.name))
    cold = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(pool()))
    assert wait_for_state(job_client, warm.name, timeout=30).state == JobState.JOB_STATE_SUCCEEDED
    cold_ended = wait_for_state(job_client, cold.name, timeout=60)
    assert (cold_ended.state, cold_ended.error.code) == (JobState.JOB_STATE_FAILED, 8)


def test_a_job_past_the_pools_free_replicas_waits_queued_until_they_are_free(
    resources, job_client: JobServiceClient, jobservice_control: JobServiceControl, tmp_path: Path
):
    """Guards issue 43 point 4: a job on the resource takes replicas of its pool; the next one that does not fit
    the free replicas waits in QUEUED and starts once the first has ended."""
    resource = create(resources, {**T4_POOL, "replica_count": 1}).result(polling=POLLING)
    release = tmp_path / "release"
    first = job_client.create_custom_job(
        parent=PARENT, custom_job=on_resource(resource.name, pool("--until-file", str(release)))
    )
    wait_for_state(job_client, first.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    second = job_client.create_custom_job(parent=PARENT, custom_job=on_resource(resource.name))
    assert wait_until(lambda: "waiting for" in service_log(jobservice_control, second.name), 20)
    assert job_client.get_custom_job(name=second.name).state == JobState.JOB_STATE_QUEUED
    release.touch()
    first_ended = wait_for_state(job_client, first.name, timeout=30)
    second_ended = wait_for_state(job_client, second.name, timeout=30)
    assert second_ended.state == JobState.JOB_STATE_SUCCEEDED
    assert second_ended.start_time >= first_ended.end_time


def service_log(control: JobServiceControl, name: str) -> str:
    path = control.replica_logs(name).get("service")
    return Path(path).read_text() if path else ""


def test_jobs_that_do_not_fit_the_resource_are_refused_naming_the_field(resources, job_client: JobServiceClient):
    """Guards issue 43 point 4: an unknown resource, a worker pool whose machine shape matches no resource pool
    exactly, more replicas than the pool holds, and a network the resource does not have are refused at
    create (INVALID_ARGUMENT), each naming its field."""
    resource = create(resources).result(polling=POLLING)
    cases = [
        (on_resource(f"{PARENT}/persistentResources/no-such-resource"), "job_spec.persistent_resource_id"),
        (on_resource(resource.name, pool(machine="n1-standard-16")), "worker_pool_specs[0].machine_spec"),
        (on_resource(resource.name, pool(count=4)), "worker_pool_specs[0].machine_spec"),
        # the primary pool's 1 replica and the workers' 2 take 3 of the pool's 2
        (on_resource(resource.name, pool(), pool(replicas=2)), "worker_pool_specs[1].replica_count"),
    ]
    networked = on_resource(resource.name)
    networked["job_spec"]["network"] = "projects/123/global/networks/other"
    cases.append((networked, "job_spec.network"))
    encrypted = on_resource(resource.name)
    encrypted["encryption_spec"] = {"kms_key_name": f"{PARENT}/keyRings/ring/cryptoKeys/key"}
    cases.append((encrypted, "encryption_spec.kms_key_name"))
    for job, field in cases:
        with pytest.raises(exceptions.InvalidArgument) as refused:
            job_client.create_custom_job(parent=PARENT, custom_job=job)
        assert field in str(refused.value), (field, str(refused.value))


def test_a_resources_gpus_count_against_the_quota_while_it_exists(
    resources, job_client: JobServiceClient, jobservice_control: JobServiceControl
):
    """Guards issue 43 point 4: with a 4-T4 quota, a resource of 2 × 2 T4 holds all of it: a second resource is
    refused (RESOURCE_EXHAUSTED) and a cold T4 job waits QUEUED until the resource is deleted."""
    jobservice_control.set_capacity({"default_quotas": {"custom_model_training_nvidia_t4_gpus": 4}})
    resource = create(resources).result(polling=POLLING)
    with pytest.raises(exceptions.TooManyRequests):
        create(resources, {**T4_POOL, "replica_count": 1})
    cold = job_client.create_custom_job(parent=PARENT, custom_job=custom_job(pool()))
    assert wait_until(lambda: "waiting for GPU quota" in service_log(jobservice_control, cold.name), 20)
    assert job_client.get_custom_job(name=cold.name).state == JobState.JOB_STATE_QUEUED
    resources.delete_persistent_resource(name=resource.name).result(polling=POLLING)
    assert wait_for_state(job_client, cold.name, timeout=30).state == JobState.JOB_STATE_SUCCEEDED


def test_deleting_a_resource_cancels_its_jobs_then_removes_it(resources, job_client: JobServiceClient, tmp_path):
    """Guards issue 43 point 4: "if there are custom jobs running on the persistent resource when you delete it,
    those custom jobs are automatically cancelled before the persistent resource is deleted"; then it is gone."""
    resource = create(resources).result(polling=POLLING)
    job = job_client.create_custom_job(
        parent=PARENT, custom_job=on_resource(resource.name, pool("--until-file", str(tmp_path / "never")))
    )
    wait_for_state(job_client, job.name, {JobState.JOB_STATE_RUNNING}, timeout=30)
    operation = resources.delete_persistent_resource(name=resource.name)
    operation.result(polling=POLLING)
    assert job_client.get_custom_job(name=job.name).state == JobState.JOB_STATE_CANCELLED
    with pytest.raises(exceptions.NotFound):
        resources.get_persistent_resource(name=resource.name)
    with pytest.raises(exceptions.InvalidArgument):  # a job naming it now is refused
        job_client.create_custom_job(parent=PARENT, custom_job=on_resource(resource.name))


def test_resources_outlive_a_restart_of_the_jobservice(private_jobservice):
    """Guards issue 43 point 4: a RUNNING resource is still RUNNING (same start_time) after a restart, and one
    still PROVISIONING when the server stopped becomes RUNNING after it."""
    service = private_jobservice()
    client = resource_client(service)
    running = create(client).result(polling=POLLING)
    service.control.set_capacity({"provisioning": DELAY})
    provisioning = create(client)
    late = resource_of(provisioning)
    service.restart()
    client = resource_client(service)
    again = client.get_persistent_resource(name=running.name)
    assert again.state == PersistentResource.State.RUNNING and again.start_time == running.start_time
    assert wait_until(lambda: client.get_persistent_resource(name=late).state == PersistentResource.State.RUNNING, 20)
    job_client = job_service_client(service.address)
    job = job_client.create_custom_job(parent=PARENT, custom_job=on_resource(late))
    assert wait_for_state(job_client, job.name, timeout=30).state == JobState.JOB_STATE_SUCCEEDED


@pytest.mark.skipif(shutil.which("gcloud") is None, reason="gcloud is not installed")
def test_gcloud_creates_lists_describes_and_deletes_a_resource(jobservice: JobServiceProcess, resources, tmp_path):
    """Guards issue 43 point 4: the stock `gcloud ai persistent-resources create / list / describe / delete`
    through CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM, as `trainctl local env` sets a shell up."""
    resource_id = new_id()
    created = gcloud(
        jobservice, tmp_path, "ai", "persistent-resources", "create", f"--persistent-resource-id={resource_id}",
        "--resource-pool-spec=replica-count=1,machine-type=n1-standard-4", "--display-name=from-gcloud",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    name = f"{PARENT}/persistentResources/{resource_id}"
    assert wait_until(
        lambda: resources.get_persistent_resource(name=name).state == PersistentResource.State.RUNNING, 20
    )
    listed = gcloud(jobservice, tmp_path, "ai", "persistent-resources", "list", "--format=value(name)")
    assert listed.returncode == 0 and resource_id in listed.stdout, listed.stderr
    described = gcloud(jobservice, tmp_path, "ai", "persistent-resources", "describe", resource_id, "--format=json")
    assert described.returncode == 0, described.stderr
    body = json.loads(described.stdout)
    assert (body["state"], body["displayName"]) == ("RUNNING", "from-gcloud")
    assert body["resourcePools"][0]["machineSpec"]["machineType"] == "n1-standard-4"
    deleted = gcloud(jobservice, tmp_path, "ai", "persistent-resources", "delete", resource_id)
    assert deleted.returncode == 0, deleted.stderr
    assert wait_until(lambda: name not in [r.name for r in resources.list_persistent_resources(parent=PARENT)], 20)


def gcloud(service: JobServiceProcess, config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(config),
        "CLOUDSDK_CONFIG": str(config / "gcloud"),
        "CLOUDSDK_API_ENDPOINT_OVERRIDES_AIPLATFORM": service.rest_url,
        "CLOUDSDK_AUTH_ACCESS_TOKEN": "dummy",
        "CLOUDSDK_CORE_PROJECT": PROJECT,
        "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
        "CLOUDSDK_COMPONENT_MANAGER_DISABLE_UPDATE_CHECK": "1",
    }
    return subprocess.run(
        ["gcloud", *args, "--region=us-central1"], env=env, capture_output=True, text=True, timeout=240
    )
