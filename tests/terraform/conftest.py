"""Parses terraform/*.tf once per test session."""

import pytest
from tfconfig import Terraform, load


@pytest.fixture(scope="session")
def tf() -> Terraform:
    return load()
