"""A controller deployment on the session's emulators and local JobService (see deployment.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.integration.deployment import Deployment


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    deployed = Deployment(uuid.uuid4().hex[:8], jobservice.rest_url)
    deployed.create(tmp_path_factory.mktemp("functions"))
    try:
        yield deployed
    finally:
        deployed.stop()
