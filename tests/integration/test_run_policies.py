"""A model's trigger policies at the claim (issue 42) on the live functions, the local JobService and Model Registry:
one run per model at a time (model.concurrency skip | replace, functions/intake/run_policy.py) and skip unchanged data
(model.skip_unchanged) — each decided once, under redelivery and two triggers at the same instant.

Built-in requests run the trainer stand-in (TRAINER_STAND_IN): `--until-file` keeps a run active until the test lets it
finish."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from cloudevents.http import CloudEvent

from functions import handlers
from functions.cloud.gcs import Gcs
from functions.controller import Controller
from functions.ledger.record import Record
from functions.ledger.requests import Ledger
from functions.ledger.run_slots import RunSlot, RunSlots
from functions.settings import Settings
from local.names import LOCAL_PROJECT
from schemas.events import Cancelled, Duplicate, Skipped, Superseded
from tests.integration.deployment import DATA_SHARD, TRAINER_STAND_IN, Deployment, accuracy, serving
from tests.integration.test_controller_intake import jobs_with_key
from tests.integration.test_model_promotion import PARENT, model_request, new_model, versions
from trainctl.report import report_from_ledger

MESSAGE_PUBLISHED = "google.cloud.pubsub.topic.v1.messagePublished"


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    with serving(jobservice, tmp_path_factory.mktemp("functions"), TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN) as deployed:
        yield deployed


def held_open(deployment: Deployment, request_id: str, model: str, release, **block) -> dict:
    """A model request whose run stays active until `release` exists."""
    return model_request(deployment, request_id, model, accuracy(0.8), "--until-file", str(release), **block)


def wait_running(deployment: Deployment, request_id: str) -> None:
    deployment.events().wait_for(request_id, "running", act=deployment.reconcile, timeout=60)


def test_with_replace_a_second_trigger_cancels_the_first_run_and_only_the_second_registers(
    deployment, registry, job_client, tmp_path
):
    """Issue 42's acceptance: the model's active run gets `superseded` naming its successor, its job is cancelled and it
    ends `cancelled` (reason superseded); the newer run alone becomes a version, and the champion."""
    model = new_model()
    events = deployment.events()
    never = tmp_path / "never"
    assert deployment.request(held_open(deployment, "repl-1", model, never, concurrency="replace")) == 200
    wait_running(deployment, "repl-1")

    second = model_request(deployment, "repl-2", model, accuracy(0.81), concurrency="replace")
    assert deployment.request(second) == 200
    (superseded,) = events.of("repl-1", "superseded")
    assert isinstance(superseded, Superseded) and (superseded.successor, superseded.model) == ("repl-2", model)
    cancelled = events.wait_for("repl-1", "cancelled", act=deployment.reconcile, timeout=60)
    assert isinstance(cancelled, Cancelled) and cancelled.reason == "superseded"
    events.wait_for("repl-2", "promoted", act=deployment.reconcile, timeout=90)

    [version] = versions(registry, model)
    assert version.labels["trainctl_request"] == "repl-2"
    assert registry.get_model(name=f"{PARENT}/models/{model}@champion").version_id == version.version_id
    assert "registered" not in events.states("repl-1")
    (job,) = jobs_with_key(job_client, "request:repl-1")
    assert job.state.name == "JOB_STATE_CANCELLED"
    record = deployment.record("request:repl-1")
    assert record["state"] == "cancelled" and record["superseded_by"] == "repl-2"
    assert deployment.record("request:repl-2")["supersedes"] == record["key_hash"]


def test_with_skip_a_trigger_while_the_run_is_active_is_skipped_and_its_redelivery_is_a_duplicate(
    deployment, job_client, tmp_path, monkeypatch
):
    """`skip`: the trigger starts nothing — its record is created `skipped` (no `accepted`, no job) naming the active
    run — and a redelivery of it reads a final record: `duplicate`. Once the run has ended, the next trigger runs;
    `trainctl report` counts the skip by its reason."""
    model = new_model()
    events = deployment.events()
    release = tmp_path / "release"
    assert deployment.request(held_open(deployment, "skip-1", model, release, concurrency="skip")) == 200
    wait_running(deployment, "skip-1")

    second = model_request(deployment, "skip-2", model, accuracy(0.8), concurrency="skip")
    assert deployment.request(second, message_id="skip-2-first") == 200
    (skipped,) = events.of("skip-2", "skipped")
    assert isinstance(skipped, Skipped)
    assert (skipped.reason, skipped.blocking_request) == ("running", "skip-1")
    assert skipped.saved_gpu_hours and skipped.saved_gpu_hours > 0
    assert events.states("skip-2") == ["skipped"], "no `accepted`: decided at the claim"
    assert jobs_with_key(job_client, "request:skip-2") == []
    assert deployment.request(second, message_id="skip-2-again") == 200
    (duplicate,) = events.of("skip-2", "duplicate")
    assert isinstance(duplicate, Duplicate) and duplicate.existing_state == "skipped"
    assert deployment.record("request:skip-2")["state"] == "skipped"

    release.touch()
    events.wait_for("skip-1", "promoted", act=deployment.reconcile, timeout=90)
    third = model_request(deployment, "skip-3", model, accuracy(0.81, champion=0.8), concurrency="skip")
    assert deployment.request(third) == 200
    assert "skipped" not in events.states("skip-3") and len(jobs_with_key(job_client, "request:skip-3")) == 1

    for name, value in deployment.settings_env().items():
        monkeypatch.setenv(name, value)
    policies = report_from_ledger(timedelta(hours=1))["total"]["trigger_policies"]
    assert policies["skipped"]["by_reason"].get("running", 0) >= 1
    assert policies["skipped"]["gpu_hours_saved"] >= skipped.saved_gpu_hours


class Together(RunSlots):
    """A controller's run slots whose first read waits for the other controller's: both read the slot before either
    writes it, as two triggers at the same instant do."""

    def __init__(self, slots: RunSlots, barrier: threading.Barrier):
        self.__dict__ = dict(slots.__dict__)
        self._barrier, self._first = barrier, True

    def read(self, model_id: str) -> tuple[RunSlot | None, int]:
        found = super().read(model_id)
        if self._first:
            self._first = False
            self._barrier.wait(timeout=30)
        return found


def race(deployment: Deployment, documents: list[dict]) -> None:
    """Deliver each document on its own thread to its own controller (as two function instances), the two slot reads
    made before either slot write."""
    barrier = threading.Barrier(len(documents))
    settings = Settings.from_env(deployment.settings_env(TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN))

    def deliver(document: dict) -> None:
        controller = Controller.from_settings(settings)
        controller.submission.policy.slots = Together(controller.submission.policy.slots, barrier)
        _, body = deployment.push_body(json.dumps(document).encode(), f"msg-{document['request_id']}")
        attributes = {"type": MESSAGE_PUBLISHED, "source": "//pubsub.googleapis.com/test", "id": document["request_id"]}
        handlers.job_request(CloudEvent(attributes, json.loads(body)), controller)

    threads = [threading.Thread(target=deliver, args=(document,)) for document in documents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_two_triggers_at_the_same_instant_under_skip_make_exactly_one_run(deployment, job_client):
    """Two triggers of one model, each read the empty slot: its compare-and-swap lets one write it; the other reads
    the winner (whose record may not exist yet: active for a lease) and is skipped, naming it."""
    model = new_model()
    events = deployment.events()
    documents = [model_request(deployment, f"race-{i}", model, accuracy(0.8), concurrency="skip") for i in (1, 2)]
    race(deployment, documents)
    skipped = [r for r in ("race-1", "race-2") if events.of(r, "skipped")]
    ran = [r for r in ("race-1", "race-2") if jobs_with_key(job_client, f"request:{r}")]
    assert len(skipped) == 1 and len(ran) == 1 and set(skipped + ran) == {"race-1", "race-2"}
    (event,) = events.of(skipped[0], "skipped")
    assert isinstance(event, Skipped) and event.blocking_request == ran[0]


def test_two_triggers_at_the_same_instant_under_replace_leave_the_later_one_running(deployment, job_client, tmp_path):
    """Under `replace` the one that wrote the slot second replaces the first, which ends superseded (by the newer
    one's submission, or by its own check of the slot after creating its record when it had none yet) and never
    keeps a running job: exactly one run goes on. Both runs stay active until the test lets them finish, so that the
    superseded one cannot succeed before its cancel lands (that race ends it `held`: another test's)."""
    model = new_model()
    events = deployment.events()
    release = tmp_path / "release"
    documents = [held_open(deployment, f"both-{i}", model, release, concurrency="replace") for i in (1, 2)]
    race(deployment, documents)
    ended = [r for r in ("both-1", "both-2") if events.of(r, "superseded")]
    assert len(ended) == 1
    (later,) = {"both-1", "both-2"} - set(ended)
    (superseded,) = events.of(ended[0], "superseded")
    assert isinstance(superseded, Superseded) and superseded.successor == later
    cancelled = events.wait_for(ended[0], "cancelled", act=deployment.reconcile, timeout=60)
    assert isinstance(cancelled, Cancelled) and cancelled.reason == "superseded"
    assert len(jobs_with_key(job_client, f"request:{later}")) == 1
    assert all(job.state.name == "JOB_STATE_CANCELLED" for job in jobs_with_key(job_client, f"request:{ended[0]}"))
    release.touch()
    events.wait_for(later, "promoted", act=deployment.reconcile, timeout=90)


def test_a_trigger_that_loses_the_slot_before_its_record_exists_ends_superseded(deployment, job_client):
    """A `replace` trigger takes the slot, and before its record exists a newer one takes it (reading the first as
    active for its lease) and is submitted, with no record of the first to mark. The first notices when it reads the
    slot after creating its record: it ends at once, superseded, and no job of it is ever created."""
    model = new_model()
    events = deployment.events()
    newer = model_request(deployment, "gap-2", model, accuracy(0.8), concurrency="replace")
    settings = Settings.from_env(deployment.settings_env(TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN))
    controller = Controller.from_settings(settings)
    slots = controller.submission.policy.slots

    class NewerArrivesRightAfter(RunSlots):
        def __init__(self) -> None:
            self.__dict__ = dict(slots.__dict__)

        def write(self, slot: RunSlot, generation: int) -> int:
            written = super().write(slot, generation)
            assert deployment.request(newer) == 200  # between this slot write and this request's record
            return written

    controller.submission.policy.slots = NewerArrivesRightAfter()
    older = model_request(deployment, "gap-1", model, accuracy(0.8), concurrency="replace")
    _, body = deployment.push_body(json.dumps(older).encode(), "msg-gap-1")
    attributes = {"type": MESSAGE_PUBLISHED, "source": "//pubsub.googleapis.com/test", "id": "gap-1"}
    assert handlers.job_request(CloudEvent(attributes, json.loads(body)), controller) == "cancelled"

    assert events.states("gap-1") == ["accepted", "superseded", "cancelled"]
    (cancelled,) = events.of("gap-1", "cancelled")
    assert isinstance(cancelled, Cancelled) and cancelled.reason == "superseded"
    assert jobs_with_key(job_client, "request:gap-1") == []
    assert len(jobs_with_key(job_client, "request:gap-2")) == 1
    assert not deployment.record("request:gap-1").get("owner"), "it holds no claim"


def test_a_trigger_marked_superseded_before_its_own_check_of_the_slot_ends_superseded(deployment, job_client):
    """The newer trigger arrives right after the older one's record exists and marks it superseded (its record
    changed under the older delivery's feet); the older delivery's check of the slot reads it again and ends it,
    once. `superseded` is published by the newer delivery, the older one's `accepted` by its own: in sequence order
    they are accepted, superseded, cancelled."""
    model = new_model()
    events = deployment.events()
    newer = model_request(deployment, "mark-2", model, accuracy(0.8), concurrency="replace")
    settings = Settings.from_env(deployment.settings_env(TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN))
    controller = Controller.from_settings(settings)
    ledger = controller.submission.ledger

    class NewerArrivesRightAfter(Ledger):
        def __init__(self) -> None:
            self.__dict__ = dict(ledger.__dict__)

        def create(self, record: Record) -> int:
            created = super().create(record)
            assert deployment.request(newer) == 200  # between this record's creation and its check of the slot
            return created

    controller.submission.ledger = NewerArrivesRightAfter()
    older = model_request(deployment, "mark-1", model, accuracy(0.8), concurrency="replace")
    _, body = deployment.push_body(json.dumps(older).encode(), "msg-mark-1")
    attributes = {"type": MESSAGE_PUBLISHED, "source": "//pubsub.googleapis.com/test", "id": "mark-1"}
    assert handlers.job_request(CloudEvent(attributes, json.loads(body)), controller) == "cancelled"
    published = sorted((e for e, _ in events.drain() if e.request_id == "mark-1"), key=lambda e: e.sequence or 0)
    assert [e.state for e in published] == ["accepted", "superseded", "cancelled"]
    assert jobs_with_key(job_client, "request:mark-1") == []
    assert len(jobs_with_key(job_client, "request:mark-2")) == 1


def test_a_replaced_run_whose_cancel_failed_is_cancelled_by_reconcile(deployment, jobservice_control, tmp_path):
    """The newer trigger's cancel of the older run's job is refused: the newer run goes on, and reconcile, seeing the
    older run marked superseded still running, cancels it again; it ends `cancelled` (superseded)."""
    model = new_model()
    events = deployment.events()
    assert deployment.request(held_open(deployment, "retry-1", model, tmp_path / "never", concurrency="replace"))
    wait_running(deployment, "retry-1")
    jobservice_control.deny_next_calls(1, methods=("CancelCustomJob",))
    assert deployment.request(model_request(deployment, "retry-2", model, accuracy(0.8), concurrency="replace"))
    assert events.of("retry-1", "superseded") and not events.of("retry-1", "cancelled")
    cancelled = events.wait_for("retry-1", "cancelled", act=deployment.reconcile, timeout=60)
    assert isinstance(cancelled, Cancelled) and cancelled.reason == "superseded"


def test_a_slot_holder_without_a_record_is_active_for_a_lease_then_free(deployment, job_client):
    """A trigger that took the slot and has not created its record yet (or died before it) counts as the model's
    active run for a lease: a `skip` trigger then is skipped naming it; after the lease the slot is free."""
    model = new_model()
    events = deployment.events()
    slots = RunSlots(Gcs(LOCAL_PROJECT), deployment.control_bucket)
    now = datetime.now(UTC)
    slots.write(RunSlot(model_id=model, key_hash="0" * 64, request_id="ghost", since=now), 0)
    assert deployment.request(model_request(deployment, "lease-1", model, accuracy(0.8), concurrency="skip")) == 200
    (skipped,) = events.of("lease-1", "skipped")
    assert isinstance(skipped, Skipped) and skipped.blocking_request == "ghost"

    _, generation = slots.read(model)
    lease = Settings.from_env(deployment.settings_env()).lease
    old = RunSlot(model_id=model, key_hash="0" * 64, request_id="ghost", since=now - timedelta(seconds=lease + 1))
    slots.write(old, generation)
    assert deployment.request(model_request(deployment, "lease-2", model, accuracy(0.8), concurrency="skip")) == 200
    assert not events.of("lease-2", "skipped") and len(jobs_with_key(job_client, "request:lease-2")) == 1
    assert slots.read(model)[0].request_id == "lease-2"


def test_allow_runs_every_trigger_as_before(deployment, job_client, tmp_path):
    """The default, `allow`: a second trigger while the first runs starts its own job, and nothing is superseded."""
    model = new_model()
    events = deployment.events()
    release = tmp_path / "release"
    assert deployment.request(held_open(deployment, "allow-1", model, release)) == 200
    assert deployment.request(held_open(deployment, "allow-2", model, release)) == 200
    assert len(jobs_with_key(job_client, "request:allow-1")) == len(jobs_with_key(job_client, "request:allow-2")) == 1
    release.touch()
    for request_id in ("allow-1", "allow-2"):
        events.wait_for(request_id, "succeeded", act=deployment.reconcile, timeout=60)
    assert not events.of("allow-1", "superseded") and not events.of("allow-2", "skipped")


def test_an_unchanged_dataset_is_skipped_naming_the_champion_and_a_changed_one_runs(deployment, registry, job_client):
    """model.skip_unchanged: the champion's fingerprint is the one the controller recorded when it decided on it (its
    model record, and the version's lineage); a marker over the same objects is `skipped` (reason unchanged_data)
    naming the champion, and once one object has a new generation, the next trigger runs."""
    model = new_model()
    events = deployment.events()
    first = model_request(deployment, "same-1", model, accuracy(0.8), skip_unchanged=True)
    assert deployment.request(first) == 200
    registered = events.wait_for("same-1", "registered", act=deployment.reconcile, timeout=90)
    events.wait_for("same-1", "promoted", act=deployment.reconcile, timeout=90)
    fingerprint = deployment.record("request:same-1")["dataset_fingerprint"]
    assert fingerprint and fingerprint.startswith("sha256:")
    assert registered.lineage.dataset_fingerprint == fingerprint
    assert (
        json.loads(registry.get_model(name=f"{PARENT}/models/{model}@1").version_description)["dataset_fingerprint"]
        == fingerprint
    )
    blob = deployment.storage().bucket(deployment.control_bucket).blob(f"models/{model}/champion.json")
    [entry] = json.loads(blob.download_as_bytes())["history"]
    assert entry["dataset_fingerprint"] == fingerprint, "the controller's own record of the version"

    again = first | {"request_id": "same-2"}  # the same folder, not written again
    assert deployment.request(again) == 200
    (skipped,) = events.of("same-2", "skipped")
    assert isinstance(skipped, Skipped) and skipped.reason == "unchanged_data"
    assert (skipped.champion_version, skipped.fingerprint) == ("1", fingerprint)
    assert skipped.saved_gpu_hours and skipped.saved_gpu_hours > 0
    assert jobs_with_key(job_client, "request:same-2") == []

    folder = first["dataset"]["uri"].removeprefix(f"gs://{deployment.data_bucket}/")
    deployment.upload(folder + "part-0.csv", DATA_SHARD)  # the same bytes, a new generation
    changed = first | {"request_id": "same-3"}
    assert deployment.request(changed) == 200
    assert not events.of("same-3", "skipped") and len(jobs_with_key(job_client, "request:same-3")) == 1
    assert deployment.record("request:same-3")["dataset_fingerprint"] != fingerprint
    with contextlib.suppress(TimeoutError):  # let it end before the module's deployment stops
        events.wait_for("same-3", "succeeded", act=deployment.reconcile, timeout=60)
