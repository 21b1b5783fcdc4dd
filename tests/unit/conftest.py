"""Shared builders for the pure-core tests."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from functions.settings import Settings
from schemas.errors import parse_request
from schemas.request import TrainingJobRequest

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
