"""Reaching a local JobService: the stock Vertex `JobServiceClient` over an insecure channel (exactly
what the controller uses in local mode), the control API client for faults, and a poll-until helper."""

from __future__ import annotations

import time
from collections.abc import Iterable

import grpc
from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
from google.cloud.aiplatform_v1.services.job_service.transports import JobServiceGrpcTransport
from google.cloud.aiplatform_v1.types import CustomJob, JobState

from local.jobservice.control import JobServiceControl

__all__ = ["ENDED", "JobServiceControl", "job_service_client", "wait_for_state"]

ENDED = (JobState.JOB_STATE_SUCCEEDED, JobState.JOB_STATE_FAILED, JobState.JOB_STATE_CANCELLED)


def job_service_client(address: str) -> JobServiceClient:
    """A real JobServiceClient talking to the local JobService at `address` ("host:port")."""
    return JobServiceClient(transport=JobServiceGrpcTransport(channel=grpc.insecure_channel(address)))


def wait_for_state(
    client: JobServiceClient, name: str, states: Iterable[int] = ENDED, timeout: float = 60.0
) -> CustomJob:
    """Poll GetCustomJob until the job is in one of `states`; TimeoutError names the state it is stuck in."""
    wanted = set(states)
    deadline = time.monotonic() + timeout
    while True:
        job = client.get_custom_job(name=name)
        if job.state in wanted:
            return job
        if time.monotonic() > deadline:
            names = ", ".join(sorted(JobState(state).name for state in wanted))
            raise TimeoutError(f"{name} is still {job.state.name} after {timeout}s (waiting for {names})")
        time.sleep(0.1)
