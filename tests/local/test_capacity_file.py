"""Setting the capacity model from a file: `python -m local.jobservice --capacity FILE` (what
`trainctl local up --capacity FILE` starts), and the stack's settings pointing the functions at the stand-in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.api_core import exceptions
from job_specs import PARENT, custom_job, pool

from functions.cloud.quotas import GpuQuotas
from local.names import LOCAL_PROJECT, Names
from local.stack import StackOptions, controller_settings
from local.stack_state import LOCAL_DIR_VAR
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.integration

L4 = "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
CAPACITY = """\
regions:
  us-central1:
    quotas:
      custom_model_training_nvidia_l4_gpus: 4
"""


def test_a_jobservice_started_with_a_capacity_file_models_it(private_jobservice, tmp_path: Path):
    """Guards issue 14 item 4: the file's quota reaches both the JobService (a job over it is refused) and
    the Cloud Quotas stand-in (the controller's client reads it)."""
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text(CAPACITY)
    service = private_jobservice("--capacity", str(capacity))

    assert GpuQuotas(LOCAL_PROJECT, service.rest_url).limit(L4, "us-central1") == 4
    eight = pool(machine="g2-standard-96", accelerator="NVIDIA_L4", count=8)
    with pytest.raises(exceptions.ResourceExhausted, match=L4):
        service.client().create_custom_job(parent=PARENT, custom_job=custom_job(eight))


def test_local_up_refuses_a_capacity_file_with_an_unknown_key(tmp_path: Path):
    """Guards issue 14 item 4: the mistake is named before anything starts."""
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text(CAPACITY.replace("quotas:", "quota:"))
    env = {**os.environ, LOCAL_DIR_VAR: str(tmp_path / "local")}
    done = subprocess.run(
        [sys.executable, "-m", "trainctl", "local", "up", "--capacity", str(capacity)],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "regions.us-central1: unknown key 'quota'" in done.stderr


def test_the_functions_read_quotas_from_the_stand_in():
    """Guards issue 14 item 4: the local stack points TRAINCTL_QUOTAS_ENDPOINT at the JobService's REST port,
    where the stand-in is, as it does TRAINCTL_VERTEX_ENDPOINT."""
    settings = controller_settings(StackOptions(), Names(LOCAL_PROJECT), "http://127.0.0.1:1234/")
    assert settings["TRAINCTL_QUOTAS_ENDPOINT"] == settings["TRAINCTL_VERTEX_ENDPOINT"] == "http://127.0.0.1:1234"
