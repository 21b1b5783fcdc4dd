"""A controller deployment on the session's emulators and local JobService (see deployment.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.deployment import Deployment, serving


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    with serving(jobservice, tmp_path_factory.mktemp("functions")) as deployed:
        yield deployed
