"""Markers are untrusted input (issue 24, points 6 and 7), through the live functions on the emulators and the
local JobService: a marker is never read past `max_request_bytes`, nor a gs:// template; a marker sets only what
its template lets it; marker-derived ids and explicit ids never meet, and one id names one request."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator

import pytest
from cloudevents.http import CloudEvent

from functions import handlers
from functions.cloud.gcs import Gcs
from functions.controller import Controller
from functions.intake.triggers import derive_request_id
from functions.ledger.keys import key_hash, marker_key, request_key
from functions.ledger.requests import Ledger
from functions.settings import Settings
from local.fake_gcs import create_bucket
from local.names import LOCAL_PROJECT
from tests.integration.deployment import FAKE_NODE_IMAGE, Deployment, fake_node_request
from tests.integration.test_controller_intake import jobs_with_key

LIMIT = 64 * 1024  # max_request_bytes' default, which the deployment keeps
RUNNER = "runner@trainctl-local.iam.gserviceaccount.com"
FAKE_NODE = {
    "dataset": {"target": "y"},
    "trainer": {"image": f"{FAKE_NODE_IMAGE}:1", "args": ["--sleep", "0.5"]},
    "resources": {"machine_type": "g2-standard-24"},
}
# What the `open/` rule's template lets markers set besides the default fields.
OPENED = ["trainer.command", "output_dir", "service_account", "request_id"]


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    """Three rules: `churn/` with a template that declares nothing (the default), `open/` whose template lets
    markers set the fields in OPENED, and `big/` whose template is a gs:// object larger than a request may be."""
    deployed = Deployment(uuid.uuid4().hex[:8], jobservice.rest_url)
    data, control = f"gs://{deployed.data_bucket}", deployed.control_bucket
    rules = {
        f"{data}/churn/": FAKE_NODE,
        f"{data}/open/": {**FAKE_NODE, "marker_may_set": ["dataset", "display_name", *OPENED]},
        f"{data}/big/": f"gs://{control}/templates/big.json",
    }
    create_bucket(os.environ["STORAGE_EMULATOR_HOST"], LOCAL_PROJECT, outputs_bucket(deployed))
    deployed.extra_settings = {
        "TRAINCTL_TRIGGER_RULES": json.dumps(rules),
        "TRAINCTL_ALLOWED_OUTPUT_BUCKETS": outputs_bucket(deployed),
        "TRAINCTL_ALLOWED_SERVICE_ACCOUNTS": RUNNER,
    }
    deployed.create(tmp_path_factory.mktemp("functions"))
    try:
        yield deployed
    finally:
        deployed.stop()


def outputs_bucket(deployment: Deployment) -> str:
    return f"it-outputs-{deployment.suffix}"


def synthetic_marker(deployment: Deployment, name: str, generation: str, size: str) -> tuple[dict[str, str], bytes]:
    """The finalized event of a marker that need not exist, with the size and generation the test chooses."""
    headers, body = deployment.storage_event(deployment.upload(name.replace("_SUCCESS", "part-0.csv"), "a,y\n1,0\n"))
    data = json.loads(body) | {"name": name, "generation": generation, "size": size}
    data["id"] = f"{data['bucket']}/{name}/{generation}"
    return headers | {"ce-id": uuid.uuid4().hex, "ce-subject": f"objects/{name}"}, json.dumps(data).encode()


def rejected_for(events, name: str) -> list:
    return [e for e, _ in events.drain() if e.state == "rejected" and e.trigger and e.trigger.object == name]


# ---- point 6: bounded reads ------------------------------------------------------------------------------


def test_a_marker_whose_event_says_1_gb_is_refused_without_downloading_it(deployment, job_client):
    """Guards issue 24, point 6 (the review's "1 GB marker"): the event's size alone refuses it; the object does
    not even exist, so any download would have found nothing. Before, a non-empty marker was read whole first."""
    events = deployment.events()
    name, generation = "churn/huge/_SUCCESS", "1700000000000601"
    assert deployment.post("on_dataset_upload", synthetic_marker(deployment, name, generation, str(2**30))) == 200
    (rejected,) = rejected_for(events, name)
    assert rejected.errors == [
        f"marker: gs://{deployment.data_bucket}/{name} is 1073741824 bytes; the limit is {LIMIT} bytes "
        "(max_request_bytes)"
    ]
    assert rejected.request_id == derive_request_id(name, generation)
    assert deployment.record(marker_key(deployment.data_bucket, name, generation)) is None
    assert jobs_with_key(job_client, marker_key(deployment.data_bucket, name, generation)) == []


def test_a_marker_larger_than_its_event_says_is_refused_by_the_bounded_read(deployment):
    """Guards issue 24, point 6: the event's size may be missing or wrong, so the read itself stops at the limit
    and the rejection names the object; before, the whole object was downloaded and then measured."""
    events = deployment.events()
    marker = deployment.upload_marker("churn/liar/", json.dumps({"display_name": "x" * (LIMIT + 10)}))
    headers, body = deployment.storage_event(marker)
    assert (
        deployment.post("on_dataset_upload", (headers, json.dumps(json.loads(body) | {"size": "10"}).encode())) == 200
    )
    (rejected,) = rejected_for(events, marker.name)
    (error,) = rejected.errors
    assert error.startswith(f"marker: gs://{deployment.data_bucket}/{marker.name} is ")
    assert error.endswith(f"the limit is {LIMIT} bytes")


def test_a_gs_template_larger_than_a_request_is_a_clear_error_naming_the_rule(deployment):
    """Guards issue 24, point 6: trigger templates read from gs:// are bounded too."""
    events = deployment.events()
    template = {**FAKE_NODE, "display_name": "x" * (LIMIT + 10)}
    deployment.storage().bucket(deployment.control_bucket).blob("templates/big.json").upload_from_string(
        json.dumps(template)
    )
    marker = deployment.upload_marker("big/day1/")
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    (rejected,) = rejected_for(events, marker.name)
    (error,) = rejected.errors
    rule = f"gs://{deployment.data_bucket}/big/"
    assert error.startswith(f"marker: the template of rule {rule} is too large: gs://{deployment.control_bucket}/")
    assert error.endswith(f"the limit is {LIMIT} bytes (max_request_bytes)")


class RecordingGcs(Gcs):
    """The real Cloud Storage adapter, noting the bound of every read."""

    def __init__(self, project: str):
        super().__init__(project)
        self.reads: list[tuple[str, str, int | None]] = []

    def read(self, bucket, name, generation=None, max_bytes=None):
        self.reads.append((bucket, name, max_bytes))
        return super().read(bucket, name, generation, max_bytes)


def test_every_read_of_a_marker_or_a_template_is_bounded(deployment):
    """Guards issue 24, point 6: what a requester wrote (the marker) and a gs:// template are read with
    max_bytes, so no size in an event can make the function hold a huge object."""
    deployment.storage().bucket(deployment.control_bucket).blob("templates/big.json").upload_from_string(
        json.dumps(FAKE_NODE)
    )
    gcs = RecordingGcs(LOCAL_PROJECT)
    controller = Controller.from_settings(Settings.from_env(deployment.settings_env()), gcs=gcs)
    for folder in ("churn/bounded/", "big/bounded/"):
        marker = deployment.upload_marker(folder, json.dumps({"display_name": "bounded"}))
        headers, body = deployment.storage_event(marker)
        attributes = {k.removeprefix("ce-"): v for k, v in headers.items() if k.startswith("ce-")}
        assert handlers.dataset_upload(CloudEvent(attributes, json.loads(body)), controller) == "submitted"
    untrusted = [read for read in gcs.reads if read[0] == deployment.data_bucket or read[1] == "templates/big.json"]
    assert len(untrusted) == 3, gcs.reads  # two markers and the template
    assert all(bound == LIMIT for _, _, bound in untrusted), untrusted


# ---- point 7: what a marker may set ----------------------------------------------------------------------

OVERRIDES = {
    "trainer.command": {"trainer": {"command": ["python", "tests/local/programs/fake_node.py"]}},
    "output_dir": {"output_dir": "gs://{outputs}/marker-chosen/{tag}/"},
    "service_account": {"service_account": RUNNER},
    "request_id": {"request_id": "marker-named-{tag}"},
}


def overrides_for(deployment: Deployment, field: str, tag: str) -> dict:
    text = json.dumps(OVERRIDES[field]).replace("{outputs}", outputs_bucket(deployment)).replace("{tag}", tag)
    return json.loads(text)


@pytest.mark.parametrize("field", list(OVERRIDES))
def test_a_marker_cannot_set_what_its_default_template_keeps(deployment, job_client, field):
    """Guards issue 24, point 7: under a template that declares nothing, a marker setting the code, the output
    folder, the run-as account or the request id is rejected naming the field and the rule; no job starts.
    Before, a marker's content was merged onto the template whatever it set."""
    events = deployment.events()
    tag = uuid.uuid4().hex[:8]
    marker = deployment.upload_marker(f"churn/keeps-{tag}/", json.dumps(overrides_for(deployment, field, tag)))
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    (rejected,) = rejected_for(events, marker.name)
    rule = f"gs://{deployment.data_bucket}/churn/"
    assert rejected.errors == [
        f"{field}: may not be set by a marker under rule {rule}; this template lets markers set: dataset, "
        "trainer.hyperparameters, labels, display_name (the template's `marker_may_set` decides)"
    ]
    key = marker_key(deployment.data_bucket, marker.name, marker.generation)
    assert deployment.record(key) is None and jobs_with_key(job_client, key) == []
    assert jobs_with_key(job_client, request_key(f"marker-named-{tag}")) == []


@pytest.mark.parametrize("field", list(OVERRIDES))
def test_a_marker_sets_what_its_template_allows(deployment, job_client, field):
    """Guards issue 24, point 7: the same overrides under a template whose marker_may_set names them start the job."""
    events = deployment.events()
    tag = uuid.uuid4().hex[:8]
    overrides = overrides_for(deployment, field, tag)
    marker = deployment.upload_marker(f"open/allows-{tag}/", json.dumps(overrides))
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    request_id = overrides.get("request_id") or derive_request_id(marker.name, str(marker.generation))
    assert events.states(request_id) == ["accepted", "submitted"]
    key = request_key(request_id) if field == "request_id" else marker_key(*marker_parts(deployment, marker))
    (job,) = jobs_with_key(job_client, key)
    spec = job.job_spec
    if field == "trainer.command":
        assert list(spec.worker_pool_specs[0].container_spec.command) == overrides["trainer"]["command"]
    if field == "output_dir":
        assert spec.base_output_directory.output_uri_prefix == overrides["output_dir"]
    if field == "service_account":
        assert spec.service_account == RUNNER


def marker_parts(deployment: Deployment, marker) -> tuple[str, str, str]:
    return deployment.data_bucket, marker.name, str(marker.generation)


# ---- point 7: one id, one request ------------------------------------------------------------------------


def test_a_pubsub_request_cannot_take_a_markers_id(deployment, job_client):
    """Guards issue 24, point 7: a marker's derived id is reserved (`gcs.…`): a Pub/Sub request naming it is
    refused, and one naming the old derived form (folder-generation) is an ordinary id with its own folder.
    Before, the Pub/Sub request under the marker's id shared its runs/<id>/ under another ledger key."""
    events = deployment.events()
    marker = deployment.upload_marker("churn/shared/")
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    (submitted,) = [e for e, _ in events.drain() if e.state == "submitted" and e.trigger.object == marker.name]
    derived = submitted.request_id

    assert deployment.request(fake_node_request(derived)) == 200
    (refused,) = [e for e, _ in events.drain() if e.state == "rejected" and e.request_id == derived]
    assert refused.errors == [
        "request_id: ids starting with 'gcs.' are reserved for requests started by a marker upload; choose an id "
        "that does not start with 'gcs.'"
    ]
    assert jobs_with_key(job_client, request_key(derived)) == []
    assert deployment.record(request_key(derived)) is None

    old_form = f"churn-shared-{marker.generation}"
    assert deployment.request(fake_node_request(old_form)) == 200
    assert events.states(old_form) == ["accepted", "submitted"]
    marker_record = deployment.record(marker_key(*marker_parts(deployment, marker)))
    assert deployment.record(request_key(old_form))["artifacts"]["model_dir"] != marker_record["artifacts"]["model_dir"]
    assert marker_record["state"] == "submitted"  # the marker's request is untouched


def test_a_pubsub_request_cannot_take_the_old_form_id_of_a_marker_from_before_the_prefix(deployment, job_client):
    """Guards issue 24, point 7: a marker's request from before derived ids took the `gcs.` prefix holds its id
    (`ids/<folder>-<generation>` names its key), so a Pub/Sub request naming that id is refused, not given a
    second record under it. Before, the id's holder was ignored and the request claimed a record of its own."""
    events = deployment.events()
    legacy_id, legacy_key = "churn-legacy-1700000000000888", f"gcs:{deployment.data_bucket}/churn/legacy/_SUCCESS#1"
    Gcs(LOCAL_PROJECT).write(deployment.control_bucket, f"ids/{legacy_id}", key_hash(legacy_key), 0)
    assert deployment.request(fake_node_request(legacy_id)) == 200
    (refused,) = events.of(legacy_id, "rejected")
    assert refused.errors == [
        f"request_id: {legacy_id!r} already belongs to another request (the request with key hash "
        f"{key_hash(legacy_key)}); choose another request_id"
    ]
    assert deployment.record(request_key(legacy_id)) is None
    assert jobs_with_key(job_client, request_key(legacy_id)) == []


def test_a_marker_cannot_name_a_reserved_id_even_when_its_template_lets_it_name_one(deployment, job_client):
    """Guards issue 24, point 7: the reserved prefix holds for every explicit id, a marker's own included."""
    events = deployment.events()
    marker = deployment.upload_marker("open/reserved/", json.dumps({"request_id": "gcs.churn-shared-1"}))
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    (refused,) = rejected_for(events, marker.name)
    assert refused.errors[0].startswith("request_id: ids starting with 'gcs.' are reserved")
    assert jobs_with_key(job_client, request_key("gcs.churn-shared-1")) == []


def test_two_markers_mapping_to_one_id_start_one_request_and_refuse_the_other(deployment, job_client):
    """Guards issue 24, point 7: a derived id loses case and punctuation, so `Twin/` and `twin/` with one
    generation map to one id; the ledger gives the id to the first key and refuses the second, leaving the first
    unharmed and `trainctl status ID` on it. Before, the second claimed a record of its own under the same id
    and started a second job into the same runs/<id>/."""
    events = deployment.events()
    generation = "1700000000000777"
    first, second = "churn/Twin/_SUCCESS", "churn/twin/_SUCCESS"
    assert derive_request_id(first, generation) == derive_request_id(second, generation)
    request_id = derive_request_id(first, generation)
    assert deployment.post("on_dataset_upload", synthetic_marker(deployment, first, generation, "0")) == 200
    assert deployment.post("on_dataset_upload", synthetic_marker(deployment, second, generation, "0")) == 200

    first_key, second_key = (marker_key(deployment.data_bucket, name, generation) for name in (first, second))
    (refused,) = rejected_for(events, second)
    assert refused.errors[0].startswith(f"request_id: {request_id!r} already belongs to another request ({first_key});")
    assert deployment.record(second_key) is None and jobs_with_key(job_client, second_key) == []
    assert deployment.record(first_key)["state"] == "submitted"
    assert len(jobs_with_key(job_client, first_key)) == 1
    assert [e.state for e, _ in events.drain() if e.request_id == request_id and e.trigger.object == first] == [
        "accepted",
        "submitted",
    ]
    ledger = Ledger(Gcs(LOCAL_PROJECT), deployment.control_bucket)
    found = ledger.find_by_request_id(request_id)
    assert found is not None and found[0].key == first_key


def test_a_redelivery_after_a_crash_between_the_id_and_the_record_goes_on(deployment, job_client):
    """The id is claimed before the record is written: a delivery that died between the two left
    `ids/<id>` naming its own key, and its redelivery must go on as if nothing happened."""
    events = deployment.events()
    marker = deployment.upload_marker("churn/crashed/")
    request_id = derive_request_id(marker.name, str(marker.generation))
    key = marker_key(*marker_parts(deployment, marker))
    Gcs(LOCAL_PROJECT).write(deployment.control_bucket, f"ids/{request_id}", key_hash(key), 0)
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    assert events.states(request_id) == ["accepted", "submitted"]
    assert len(jobs_with_key(job_client, key)) == 1
