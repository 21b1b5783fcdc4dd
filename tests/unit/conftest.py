"""Shared builders for the pure-core tests."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from functions.intake.acceptance import artifacts
from functions.ledger.model_charter import Charter, rule_of
from functions.ledger.record import Record
from functions.settings import Settings
from schemas.errors import parse_request
from schemas.events import CostEstimate
from schemas.request import ModelBlock, TrainingJobRequest

RECORD_TIME = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
RECORD_JOB = "projects/p/locations/us-central1/customJobs/123"

BASE_REQUEST: dict[str, Any] = {
    "api_version": "trainctl/v1",
    "request_id": "churn-1",
    "dataset": {"uri": "gs://data-bucket/churn/", "target": "churned"},
    "trainer": {"builtin": "tabular"},
    "resources": {"machine_type": "a2-highgpu-2g"},
}


def make_request(**sections: Any) -> TrainingJobRequest:
    """BASE_REQUEST with whole top-level sections replaced."""
    return parse_request(copy.deepcopy(BASE_REQUEST) | sections)


def make_record(**fields: Any) -> Record:
    """A ledger record of request r1 (key hash "abc"), submitted as RECORD_JOB, with `fields` replaced."""
    base: dict[str, Any] = dict(
        key="request:r1",
        key_hash="abc",
        request_id="r1",
        spec_hash="s1",
        explicit_id=True,
        request={},
        state="submitted",
        attempt=1,
        max_attempts=3,
        job_name=RECORD_JOB,
        cost=CostEstimate(hourly_usd=1, max_usd=24, gpus=2, nodes=1, prices_as_of="2026-11-22"),
        artifacts=artifacts("gs://c/runs/r1/"),
        created=RECORD_TIME,
        updated=RECORD_TIME,
    )
    return Record(**(base | fields))


@pytest.fixture
def settings() -> Settings:
    return Settings(
        project="proj",
        control_bucket="proj-trainctl-control",
        events_topic="trainctl-events",
        trainer_image="us-docker.pkg.dev/proj/trainctl/trainer:1",
        trainer_service_account="trainer@proj.iam.gserviceaccount.com",
        custom_service_account="custom@proj.iam.gserviceaccount.com",
        trigger_rules={"gs://data-bucket/churn/": {"dataset": {"target": "churned"}}},
    )


def make_charter(model: str = "churn", owner: str = "default", **fields: Any) -> Charter:
    """A model's charter as the first request naming it would create it (issue 38), with `fields` replaced."""
    block = ModelBlock(name=model)
    charter = Charter(
        model_id=model,
        owner=owner,
        kind="builtin",
        rule=rule_of(block),
        reference_from_first_version=True,
        created=datetime(2026, 11, 1, tzinfo=UTC),
        created_by="first",
    )
    return charter.model_copy(update=fields)
