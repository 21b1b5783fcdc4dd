"""What a cold submission asks Cloud Quotas: the stand-in lists hundreds of quotas over many pages, as a real
project's aiplatform.googleapis.com does; the controller reads only the GPU quotas its request's rungs draw on,
each by its id, once per function instance and ttl. Guards issue 25, point 7."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.deployment import Deployment, fake_node_request, serving

pytestmark = pytest.mark.integration

V100 = {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_V100", "accelerator_count": 2}
CAPACITY = {
    "regions": {
        "us-central1": {
            "quotas": {
                "custom_model_training_nvidia_v100_gpus": 8,
                "custom_model_training_preemptible_nvidia_v100_gpus": 8,
            }
        },
        "europe-west4": {"quotas": {"custom_model_training_nvidia_v100_gpus": 8}},
    }
}
V100_ID = "CustomModelTrainingV100GPUsPerProjectPerRegion"
SPOT_V100_ID = "CustomModelTrainingPreemptibleV100GPUsPerProjectPerRegion"


@pytest.fixture
def cold_deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path) -> Iterator[Deployment]:
    """Functions just started, that have read no quota yet."""
    with serving(jobservice, tmp_path, CAPACITY, TRAINCTL_ALLOWED_REGIONS="europe-west4") as deployed:
        yield deployed


def ladder_request(request_id: str) -> dict:
    """Three rungs on two quotas: V100 here, V100 in europe-west4 (the same quota, another region), Spot V100."""
    return fake_node_request(
        request_id,
        "--sleep",
        "0.5",
        resources=V100,
        scheduling={"timeout": "1h", "max_attempts": 3},
        fallbacks=[{"region": "europe-west4", "resources": V100}, {"strategy": "spot", "resources": V100}],
    )


def test_a_cold_submission_reads_only_the_quotas_its_rungs_need(cold_deployment, jobservice):
    """Issue 25, point 7: one quotaInfos.get per GPU quota of the ladder (two, for three rungs in two regions),
    no page of the listing; a second request to the same instance within the ttl asks nothing."""
    deployment, control = cold_deployment, jobservice.control
    events = deployment.events()
    before = len(control.quota_calls())
    assert deployment.request(ladder_request("cold-quota")) == 200
    assert events.wait_for("cold-quota", "submitted", timeout=60).request_id == "cold-quota"
    calls = control.quota_calls()[before:]
    assert sorted(calls) == [f"get {SPOT_V100_ID}", f"get {V100_ID}"]

    assert deployment.request(ladder_request("warm-quota")) == 200
    events.wait_for("warm-quota", "submitted", timeout=60)
    assert control.quota_calls()[before + len(calls) :] == []
