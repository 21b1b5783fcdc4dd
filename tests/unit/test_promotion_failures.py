"""When the Model Registry fails the steps after a success (issue 26, step 3): a refusal ends them with `held` and
the reason, never a loop; a registry that cannot be reached leaves the request active for the next visit, and after
a day it is held too. `succeeded` is published first either way. The controller on trainctl replay's in-memory
stand-ins, with a registry that refuses or is down."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from functions.cloud.errors import Transient
from functions.cloud.job_snapshot import JobSnapshot
from functions.cloud.registry_types import ModelVersion, Upload
from functions.cloud.vertex import CallRejected
from functions.controller import Controller
from functions.ledger.record import ModelSteps
from functions.ledger.requests import ACTIVE_PREFIX, Ledger
from functions.models import promotion
from functions.settings import Settings
from local.memory_gcs import MemoryGcs
from tests.unit.conftest import make_charter, make_record, make_request

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/1"
DENIED = "Permission 'aiplatform.models.upload' denied on resource '//aiplatform.googleapis.com/projects/p/locations/l'"


class SucceededJobs:
    parent = "projects/p/locations/us-central1"

    def get(self, name: str) -> JobSnapshot:
        return JobSnapshot(name, "JOB_STATE_SUCCEEDED", start_time=NOW - timedelta(hours=1), end_time=NOW)


@dataclass
class Publisher:
    source: str = "test"
    published: list[Any] = field(default_factory=list)

    def publish(self, event: Any) -> str:
        self.published.append(event)
        return event.ce_id


@dataclass
class FailingRegistry:
    """A registry whose every call fails with `failure` (a refusal, or Transient for one that is down)."""

    failure: Exception
    parent: str = "projects/p/locations/us-central1"
    calls: list[str] = field(default_factory=list)

    def model_name(self, model_id: str) -> str:
        return f"{self.parent}/models/{model_id}"

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise self.failure

        return fail


def controller(registry: Any, now: list[datetime]) -> tuple[Controller, Publisher, MemoryGcs]:
    gcs, publisher = MemoryGcs(), Publisher()
    settings = Settings(project="p", control_bucket="control", events_topic="events", trainer_image="img")
    ctl = Controller(
        settings,
        Ledger(gcs, "control"),
        gcs,
        publisher,
        SucceededJobs,
        clock=lambda: now[0],
        registry_factory=lambda: registry,
    )
    request = make_request(model={"name": "churn"}).model_dump(mode="json")
    record = make_record(request=request, state="running", job_name=JOB, max_pending=3600, model_steps=ModelSteps())
    ctl.ledger.create(record)
    ctl.ledger.mark_active("abc")
    ctl.charters.write(make_charter(), 0)  # the request's intake created it
    metrics = {"task": "classification", "metric": "accuracy", "val_accuracy": 0.9}
    gcs.write("c", "runs/r1/model/metrics.json", json.dumps(metrics), 0)  # make_record's artifacts
    return ctl, publisher, gcs


def visit_at(ctl: Controller, now: list[datetime], *minutes: int) -> None:
    """Visit the record at each of these minutes after NOW; a visit that raises Transient leaves it for the next."""
    for minute in minutes:
        now[0] = NOW + timedelta(minutes=minute)
        try:
            ctl.observe_record("abc")
        except Transient:
            pass


def test_a_refusal_from_the_registry_ends_the_steps_with_held_saying_why():
    """Issue 26, step 3: a permanent refusal (here PERMISSION_DENIED on UploadModel) is `held` with the reason and
    what to grant; the request then leaves the active index instead of being tried every tick."""
    registry = FailingRegistry(CallRejected(7, "permission", DENIED))
    ctl, publisher, gcs = controller(registry, [NOW])

    assert ctl.observe_record("abc") == "succeeded"

    assert [e.state for e in publisher.published] == ["succeeded", "held"]
    held = publisher.published[1]
    assert held.decision is None and held.model == "churn" and held.version is None
    assert held.message.startswith(
        "held: the Model Registry refused a call while registering the run as a new version (permission, code 7): "
    )
    assert held.message.endswith("The functions' account needs roles/aiplatform.user (terraform/iam.tf).")
    assert gcs.names("control", ACTIVE_PREFIX) == []


def test_a_registry_that_is_down_is_tried_again_and_given_up_after_a_day():
    """Issue 26, step 3: `succeeded` goes out at once; the record stays active while the registry cannot be reached
    (each visit tries again), and a day later the steps end `held` rather than being tried for ever."""
    registry, now = FailingRegistry(Transient("Vertex AI is unavailable")), [NOW]
    ctl, publisher, gcs = controller(registry, now)

    visit_at(ctl, now, 0, 1, 2)
    assert [e.state for e in publisher.published] == ["succeeded"]
    assert gcs.names("control", ACTIVE_PREFIX) == ["active/abc"]
    assert len(registry.calls) == 3, "every visit tries the registry again"

    now[0] = NOW + timedelta(hours=25)
    assert ctl.observe_record("abc") == "succeeded"
    assert [e.state for e in publisher.published] == ["succeeded", "held"]
    assert "could not be reached for a day: Vertex AI is unavailable" in publisher.published[1].message
    assert gcs.names("control", ACTIVE_PREFIX) == []


@dataclass
class SlowUploadRegistry:
    """A registry whose upload runs until `finished` is set; then it made version 1."""

    parent: str = "projects/p/locations/us-central1"
    finished: bool = False
    uploads: int = 0
    aliases: list[str] = field(default_factory=list)

    def model_name(self, model_id: str) -> str:
        return f"{self.parent}/models/{model_id}"

    def find_version(self, model_id: str, label: str, value: str) -> ModelVersion | None:
        return None

    def get(self, name: str) -> ModelVersion | None:
        return ModelVersion(self.model_name("churn"), "1") if name.endswith("@1") and self.finished else None

    def upload(self, body: dict[str, Any]) -> Upload:
        self.uploads += 1
        return Upload(operation=f"{self.model_name('churn')}/operations/9", done=False)

    def operation(self, name: str) -> Upload:
        return Upload(operation=name, done=self.finished, version_id="1" if self.finished else None)

    def evaluations(self, version_name: str) -> list[dict[str, Any]]:
        return []

    def import_evaluation(self, version_name: str, evaluation: dict[str, Any]) -> dict[str, Any]:
        return evaluation

    def merge_aliases(self, version_name: str, aliases: list[str]) -> ModelVersion:
        self.aliases = aliases
        return ModelVersion(self.model_name("churn"), "1", tuple(aliases))


def test_an_upload_still_running_keeps_the_request_active_until_a_later_visit_registers_it(monkeypatch):
    """Issue 26, steps 2-3: a succeeded record whose upload has not finished stays in the active index (else no
    sweep would come back to it); the next visit reads the operation it recorded, uploads nothing again, and
    registers and promotes the version."""
    monkeypatch.setattr(promotion, "WAIT_SECONDS", 0.0)
    registry = SlowUploadRegistry()
    ctl, publisher, gcs = controller(registry, [NOW])

    assert ctl.observe_record("abc") == "succeeded"
    assert [e.state for e in publisher.published] == ["succeeded"]
    assert gcs.names("control", ACTIVE_PREFIX) == ["active/abc"]

    registry.finished = True
    assert ctl.observe_record("abc") == "succeeded"
    assert [e.state for e in publisher.published] == ["succeeded", "registered", "promoted"]
    assert registry.uploads == 1 and registry.aliases == ["champion", "default"]
    assert gcs.names("control", ACTIVE_PREFIX) == []


@dataclass
class VisitedDuringUpload(SlowUploadRegistry):
    """A registry during whose UploadModel call `visit` runs: a second handler of the same instance (a redelivered
    push, a reconcile tick) reading the record while the first has claimed the upload and not yet saved its
    operation. The version is not listed while its upload runs, as on Vertex."""

    visit: Any = None

    def upload(self, body: dict[str, Any]) -> Upload:
        if self.visit is not None:
            visit, self.visit = self.visit, None
            visit()
        return super().upload(body)


def test_a_second_visit_of_the_same_instance_during_the_upload_uploads_nothing(monkeypatch):
    """The claim on the record holds off every other upload while it is fresh, one of the instance that made it
    too: handlers of one instance share its owner id, and the version is not listed until the upload is done."""
    monkeypatch.setattr(promotion, "WAIT_SECONDS", 0.0)
    registry = VisitedDuringUpload()
    ctl, publisher, _ = controller(registry, [NOW])
    registry.visit = lambda: ctl.observe_record("abc")

    assert ctl.observe_record("abc") == "succeeded"
    registry.finished = True
    assert ctl.observe_record("abc") == "succeeded"

    assert registry.uploads == 1
    assert [e.state for e in publisher.published] == ["succeeded", "registered", "promoted"]


@dataclass
class UploadLostOnTheWay(SlowUploadRegistry):
    """A registry whose UploadModel call fails with no answer (the connection dropped, a timeout) after Vertex had
    started the upload: its version is listed once the upload is done."""

    made: ModelVersion | None = None

    def find_version(self, model_id: str, label: str, value: str) -> ModelVersion | None:
        return self.made if self.finished else None

    def upload(self, body: dict[str, Any]) -> Upload:
        self.uploads += 1
        self.made = ModelVersion(self.model_name("churn"), str(self.uploads))
        raise Transient("UploadModel failed 1 times; the last: cannot reach Vertex AI: read timed out")


def test_an_upload_whose_answer_was_lost_is_looked_for_until_its_claim_expires_and_not_made_again(monkeypatch):
    """An upload that failed without an answer may have been made: its claim stays, so visits while it is fresh
    upload nothing; the version, listed once its upload is done, is registered. Only once the claim has expired
    with no version found is the run uploaded again."""
    monkeypatch.setattr(promotion, "WAIT_SECONDS", 0.0)
    registry, now = UploadLostOnTheWay(), [NOW]
    ctl, publisher, _ = controller(registry, now)

    visit_at(ctl, now, 0, 1, 5)
    assert registry.uploads == 1, "a fresh claim holds off a second upload"

    visit_at(ctl, now, 11)  # past the claim (settings.lease, 600 s): no version was found
    assert registry.uploads == 2

    registry.finished = True
    assert ctl.observe_record("abc") == "succeeded"
    assert registry.uploads == 2
    assert [e.state for e in publisher.published] == ["succeeded", "registered", "promoted"]
    assert ctl.ledger.read("abc")[0].model_steps.version == "2"
