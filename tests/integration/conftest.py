"""A controller deployment on the session's emulators and local JobService (see deployment.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

from tests.integration.deployment import Deployment, serving


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    with serving(jobservice, tmp_path_factory.mktemp("functions")) as deployed:
        yield deployed


@pytest.fixture(scope="module")
def registry(jobservice) -> ModelServiceClient:
    """The stock Model Registry client, over REST, reading what the controller registered."""
    return ModelServiceClient(
        transport="rest",
        client_options={"api_endpoint": jobservice.rest_url.rstrip("/")},
        credentials=AnonymousCredentials(),
    )
