"""The local buckets are versioned as Terraform's are (storage.tf: `versioning { enabled = true }`)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("which", ["data_bucket", "control_bucket"])
def test_local_buckets_keep_every_generation_of_an_overwritten_object(deployment, which):
    """Guards issue 12 point 8 (local side): an overwrite is a new generation and the old one stays readable,
    so a marker uploaded twice is two markers locally as in the cloud."""
    bucket = deployment.storage().get_bucket(getattr(deployment, which))
    assert bucket.versioning_enabled is True
    first = deployment.storage().bucket(bucket.name).blob("churn/versioned/_SUCCESS")
    first.upload_from_string(b"first")
    second = deployment.storage().bucket(bucket.name).blob("churn/versioned/_SUCCESS")
    second.upload_from_string(b"second")
    assert second.generation != first.generation
    old = deployment.storage().bucket(bucket.name).blob("churn/versioned/_SUCCESS", generation=first.generation)
    assert old.download_as_bytes() == b"first"
