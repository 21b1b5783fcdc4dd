"""The bodies the controller's REST adapter sends to CreateCustomJob, held to the client library's own types:
every example and every plan shape, renamed as functions/cloud/vertex.py sends it, must parse into
`aiplatform_v1.CustomJob` with `json_format` (unknown fields refused) and mean exactly the job the plan
describes. So google-cloud-aiplatform stays the source of truth for the API's shape without being imported
by the functions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.cloud.aiplatform_v1 import CustomJob, JobState
from google.protobuf import json_format

from functions.cloud.rest import RPC_CODES
from functions.cloud.vertex import json_names, snapshot
from functions.jobs.planning import plan_custom_job
from tests.unit.conftest import make_request
from trainctl.validate import load_request_file

EXAMPLES = sorted(
    path for path in (Path(__file__).resolve().parents[2] / "examples").iterdir() if path.suffix in (".yaml", ".json")
)
PLAN_SHAPES = {
    "one node": {},
    "reduction server": {"resources": {"machine_type": "a2-highgpu-8g", "replica_count": 4}},
    "reducers overridden": {
        "resources": {"machine_type": "g2-standard-24", "replica_count": 2},
        "reduction_server": {"mode": "on", "replica_count": 3, "machine_type": "n2-highcpu-16"},
    },
    "spot": {"scheduling": {"strategy": "spot", "timeout": "6h", "restart_job_on_worker_restart": True}},
    "flex start": {
        "resources": {"machine_type": "a2-highgpu-8g"},
        "scheduling": {"strategy": "flex_start", "max_pending": "2h"},
    },
    "custom image": {
        "trainer": {
            "image": "us-docker.pkg.dev/p/r/t:1",
            "command": ["python", "-m", "t"],
            "args": ["--x"],
            "env": {"A_B": "1"},
        }
    },
    "labels with underscores": {"labels": {"cost_center": "ml_platform", "team": "risk"}},
    "boot disk": {"resources": {"machine_type": "g2-standard-24", "boot_disk": {"type": "pd-ssd", "size_gb": 200}}},
}


def sent_body(custom_job: dict) -> dict:
    """What VertexJobs.create puts on the wire, through JSON text as requests sends it."""
    return json.loads(json.dumps(json_names(custom_job)))


def parsed(body: dict) -> CustomJob:
    job = CustomJob()
    json_format.ParseDict(body, CustomJob.pb(job))  # unknown fields raise ParseError
    return job


def assert_sent_as_planned(custom_job: dict) -> None:
    planned = CustomJob.from_json(json.dumps(custom_job))  # the proto field names, as the GAPIC client built it
    assert parsed(sent_body(custom_job)) == planned
    assert planned.job_spec.worker_pool_specs  # the plan is not empty


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_example_is_sent_as_a_custom_job_the_client_library_parses(example: Path, settings):
    """Guards issue 13 item 5: bodies checked against the real aiplatform_v1 types, for every example."""
    plan = plan_custom_job(load_request_file(example), settings, f"request:{example.stem}")

    assert_sent_as_planned(plan.custom_job)


@pytest.mark.parametrize("sections", PLAN_SHAPES.values(), ids=PLAN_SHAPES.keys())
def test_every_plan_shape_is_sent_as_a_custom_job_the_client_library_parses(sections: dict, settings):
    """Guards issue 13 item 5: bodies checked against the real aiplatform_v1 types, for every plan shape."""
    for attempt in (1, 2):
        assert_sent_as_planned(
            plan_custom_job(make_request(**sections), settings, "request:churn-1", attempt).custom_job
        )


def test_label_keys_are_sent_as_they_are():
    """Guards issue 13 item 5: map keys are data; only field names take their JSON form."""
    body = json_names({"display_name": "x", "labels": {"cost_center": "a_b"}, "job_spec": {"worker_pool_specs": []}})

    assert body == {"displayName": "x", "labels": {"cost_center": "a_b"}, "jobSpec": {"workerPoolSpecs": []}}


def test_a_job_in_its_rest_form_reads_as_the_grpc_adapter_read_it():
    """Guards issue 13 item 5: a REST answer (json_format's output) keeps its state, error, times, labels."""
    job = CustomJob(
        name="projects/p/locations/l/customJobs/7",
        state=JobState.JOB_STATE_FAILED,
        error={"code": 8, "message": "quota"},
        create_time="2026-01-31T00:00:00.5Z",
        end_time="2026-01-31T00:10:00Z",
        labels={"trainctl_key": "abc"},
    )

    seen = snapshot(json_format.MessageToDict(CustomJob.pb(job)))

    assert (seen.state, seen.error_code, seen.error_message) == ("JOB_STATE_FAILED", 8, "quota")
    assert seen.create_time.isoformat() == "2026-01-31T00:00:00.500000+00:00"
    assert seen.start_time is None
    assert seen.end_time.isoformat() == "2026-01-31T00:10:00+00:00"
    assert seen.labels == {"trainctl_key": "abc"}


def test_error_status_names_are_google_rpc_codes():
    """Guards issue 13 item 5: the `status` of a REST error reads back as the code failures.py classifies."""
    from google.rpc import code_pb2

    assert RPC_CODES == {name: number for name, number in code_pb2.Code.items()}
