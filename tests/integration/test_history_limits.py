"""A request with as many long labels as a request may carry, on the live functions: its outcome is filed in the
history index within Cloud Storage's custom-metadata limits, so the request ends cleanly — retired, its quota
released, its final event published once — and `trainctl report` groups it by its labels (issue 24, point 8).

fake-gcs-server enforces no metadata limits, so the test reads back what was written and holds it to the
documented figures (google.storage.v2 ServiceConstants.Values: a key 1 KiB, a value 4 KiB, 8 KiB in all);
tests/unit/test_history.py holds the encoding to them for 64 labels, and the flow to a refused write."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Iterator

import pytest

from functions.cloud.gcs import Gcs, StorageError
from functions.ledger.keys import key_hash
from local.names import LOCAL_PROJECT
from tests.integration.deployment import Deployment, fake_node_request, serving
from trainctl.cli import main

KEY_BYTES, VALUE_BYTES, TOTAL_BYTES = 1024, 4096, 8192
P4 = {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_P4", "accelerator_count": 2}
P4_POOL = "quota/us-central1/custom_model_training_nvidia_p4_gpus.json"
CAPACITY = {"regions": {"us-central1": {"quotas": {"custom_model_training_nvidia_p4_gpus": 4}}}}
# As many labels as a request may carry (Vertex's 64, less the 4 trainctl sets), each key and value 63 characters.
LABELS = {f"k{i:02d}".ljust(63, "k"): f"v{i:02d}".ljust(63, "v") for i in range(60)}


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    with serving(jobservice, tmp_path_factory.mktemp("functions"), CAPACITY) as deployed:
        yield deployed


def test_a_request_with_60_long_labels_finishes_cleanly_and_the_report_groups_it_by_label(deployment, monkeypatch):
    """Issue 24, point 8, the review's scenario: the outcome's one metadata value held the labels, past Cloud
    Storage's limits; the write failed, so the outbox was never cleared, `succeeded` went out again every tick
    and the GPU hold was never released."""
    events = deployment.events()
    request = fake_node_request("many-labels", "--sleep", "0.5", "--metrics", "{}", resources=P4, labels=LABELS)
    assert deployment.request(request) == 200
    events.wait_for("many-labels", "succeeded", act=deployment.reconcile)
    for _ in range(3):
        deployment.reconcile()

    khash = key_hash("request:many-labels")
    control = deployment.storage().bucket(deployment.control_bucket)
    assert events.states("many-labels").count("succeeded") == 1
    assert not control.blob(f"active/{khash}").exists()
    assert khash not in json.loads(control.blob(P4_POOL).download_as_text())["holders"]
    [history] = [blob for blob in control.list_blobs(prefix="history/") if blob.name.endswith(f"/{khash}")]
    metadata = history.metadata or {}
    assert all(len(key.encode()) <= KEY_BYTES and len(value.encode()) <= VALUE_BYTES for key, value in metadata.items())
    assert sum(len(key.encode()) + len(value.encode()) for key, value in metadata.items()) <= TOTAL_BYTES

    for name, value in deployment.settings_env().items():
        monkeypatch.setenv(name, value)
    label = next(iter(LABELS))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", "--since", "1h", "--by", label, "--json"]) == 0
    report = json.loads(out.getvalue())
    assert report["groups"][LABELS[label]]["by_state"]["succeeded"] == 1


@pytest.mark.parametrize(
    ("metadata", "broken"),
    [
        ({"k" * 1025: "v"}, "is 1025 bytes, over 1024"),
        ({"outcome": "é" * 2049}, "the value of 'outcome' is 4098 bytes, over 4096"),  # UTF-8 bytes, not characters
        ({"a": "v" * 4000, "b": "v" * 4000, "c": "v" * 200}, "keys and values total 8203 bytes, over 8192"),
    ],
)
def test_the_storage_adapter_refuses_metadata_cloud_storage_would_refuse(deployment, metadata, broken):
    """Issue 24, point 8: fake-gcs-server stores any metadata, so a write the cloud refuses passed locally; the
    adapter now refuses it in both places, as Cloud Storage answers (400), and nothing is written."""
    gcs, name = Gcs(LOCAL_PROJECT), f"history/{uuid.uuid4().hex}"
    with pytest.raises(StorageError, match=broken) as refused:
        gcs.write(deployment.control_bucket, name, b"", 0, metadata)
    assert refused.value.status == 400
    assert gcs.read(deployment.control_bucket, name) is None
    gcs.write(deployment.control_bucket, name, b"", 0, {"k" * 1024: "v" * 4096, "b": "v" * 3071})  # 8192: fits
