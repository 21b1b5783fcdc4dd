"""Coalescing (issue 42, point 2) on the emulators and the local JobService: markers under a rule's quiet window fold
into one window record, and reconcile starts each closed window once — one Vertex job, one request, its `coalesced`
event naming every marker — whatever arrives twice, at once, or after a crash. The controller runs in this process
on a clock the test moves; the markers' events carry the times the test gives them."""

from __future__ import annotations

import dataclasses
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cloudevents.http import CloudEvent
from google.cloud.storage import Blob

from functions import handlers
from functions.cloud.gcs import Gcs
from functions.controller import Controller
from functions.intake.triggers import derive_request_id
from functions.ledger.history import TRIGGER_POLICY_KEY
from functions.ledger.keys import marker_key
from functions.ledger.window_records import WINDOWS_PREFIX, record_name
from functions.settings import Settings
from local.names import LOCAL_PROJECT
from tests.integration.deployment import FAKE_NODE_IMAGE, Deployment
from tests.integration.test_controller_intake import jobs_with_key

QUIET = 20


class Rule:
    """A rule of the test's own (its own prefix, so its window record is its own) with a quiet window, and the
    controller that serves it on a clock the test moves."""

    def __init__(self, deployment: Deployment, coalesce: str = "newest"):
        self.deployment = deployment
        self.folder = f"burst-{uuid.uuid4().hex[:8]}/"
        self.prefix = f"gs://{deployment.data_bucket}/{self.folder}"
        template = {
            "dataset": {"target": "y"},
            "trainer": {"image": f"{FAKE_NODE_IMAGE}:1", "args": ["--sleep", "0.5"]},
            "resources": {"machine_type": "g2-standard-24"},
            "policy": {"quiet_window": f"{QUIET}s", "coalesce": coalesce},
        }
        rules = {f"gs://{deployment.data_bucket}/churn/": {}, self.prefix: template}
        self.settings = Settings.from_env(deployment.settings_env(TRAINCTL_TRIGGER_RULES=json.dumps(rules)))
        self.start = datetime.now(UTC).replace(microsecond=0)
        self.now = [self.start]
        self.controller = self.controller_of()

    def controller_of(self, gcs: Gcs | None = None) -> Controller:
        built = Controller.from_settings(self.settings, gcs=gcs) if gcs else Controller.from_settings(self.settings)
        return dataclasses.replace(built, clock=lambda: self.now[0])

    def marker(self, partition: str, data: str = "") -> Blob:
        return self.deployment.upload_marker(f"{self.folder}{partition}/", data)

    def event(self, blob: Blob, second: float) -> CloudEvent:
        """The marker's finalized event, uploaded `second` seconds after the test began."""
        headers, body = self.deployment.storage_event(blob)
        attributes = {k.removeprefix("ce-"): v for k, v in headers.items() if k.startswith("ce-")}
        attributes["time"] = (self.start + timedelta(seconds=second)).isoformat()
        return CloudEvent(attributes, json.loads(body))

    def arrive(self, blob: Blob, second: float, controller: Controller | None = None) -> str:
        self.now[0] = self.start + timedelta(seconds=second)
        return handlers.dataset_upload(self.event(blob, second), controller or self.controller)

    def reconcile_at(self, second: float) -> dict[str, int]:
        self.now[0] = self.start + timedelta(seconds=second)
        return self.controller.reconcile()

    def key(self, blob: Blob) -> str:
        return marker_key(blob.bucket.name, blob.name, blob.generation)

    def uri(self, blob: Blob) -> str:
        return f"gs://{blob.bucket.name}/{blob.name}#{blob.generation}"

    def request_id(self, blob: Blob) -> str:
        return derive_request_id(blob.name, str(blob.generation))

    def window_record(self) -> dict[str, Any]:
        blob = self.deployment.storage().bucket(self.deployment.control_bucket).blob(record_name(self.prefix))
        return json.loads(blob.download_as_bytes())


def test_ten_partitions_in_30s_under_a_20s_quiet_window_make_one_run(deployment, job_client):
    """The issue's acceptance: ten markers 3 s apart fold into one window; a reconcile before it has been quiet for
    20 s starts nothing; the one at +20 s after the last starts one job for the newest marker, whose `coalesced` event
    names all ten, oldest first."""
    events = deployment.events()
    rule = Rule(deployment)
    markers = [rule.marker(f"p{i}") for i in range(10)]
    assert [rule.arrive(blob, 3 * i) for i, blob in enumerate(markers)] == ["coalesced"] * 10
    assert all(jobs_with_key(job_client, rule.key(blob)) == [] for blob in markers)

    assert rule.reconcile_at(27 + QUIET - 1).get("windows_started", 0) == 0  # not quiet for 20 s yet
    assert all(jobs_with_key(job_client, rule.key(blob)) == [] for blob in markers)
    assert rule.reconcile_at(27 + QUIET)["windows_started"] == 1

    newest = markers[-1]
    assert len(jobs_with_key(job_client, rule.key(newest))) == 1
    assert all(jobs_with_key(job_client, rule.key(blob)) == [] for blob in markers[:-1])
    request_id = rule.request_id(newest)
    assert events.states(request_id)[:3] == ["accepted", "coalesced", "submitted"]  # then the sweep sees it run
    (coalesced,) = events.of(request_id, "coalesced")
    assert coalesced.markers == [rule.uri(blob) for blob in markers]
    assert coalesced.rule == rule.prefix and coalesced.dataset_uri == f"{rule.prefix}p9/"
    (accepted,) = events.of(request_id, "accepted")
    assert accepted.cost is not None
    assert coalesced.saved_gpu_hours == 9 * accepted.cost.gpus * 24  # the runs not started, each its 24 h timeout
    assert [e.sequence for e in (accepted, coalesced)] == [1, 2]
    assert rule.window_record()["windows"] == []
    assert rule.reconcile_at(27 + QUIET + 60).get("windows_started", 0) == 0  # started once
    # `trainctl report` counts the markers folded in: the outbox files `coalesced` under its own history key.
    since = coalesced.time - timedelta(minutes=1)
    filed = [o for o in rule.controller.ledger.outcomes(since, TRIGGER_POLICY_KEY) if o.request_id == request_id]
    assert [(o.state, o.markers, o.saved_gpu_hours) for o in filed] == [("coalesced", 10, coalesced.saved_gpu_hours)]


def test_a_marker_after_the_quiet_window_opens_a_new_window_and_union_trains_on_every_partition(deployment, job_client):
    events = deployment.events()
    rule = Rule(deployment, coalesce="union")
    first, second, late = rule.marker("day1/h01"), rule.marker("day1/h02"), rule.marker("day2/h01")
    assert rule.arrive(first, 0) == rule.arrive(second, 5) == "coalesced"
    assert rule.arrive(late, 5 + QUIET) == "coalesced"  # after the first window went quiet: a window of its own
    assert rule.reconcile_at(5 + QUIET)["windows_started"] == 1
    (coalesced,) = events.of(rule.request_id(second), "coalesced")
    assert coalesced.markers == [rule.uri(first), rule.uri(second)]
    assert coalesced.dataset_uri == f"{rule.prefix}day1/"
    assert len(jobs_with_key(job_client, rule.key(second))) == 1
    assert deployment.record(rule.key(second))["request"]["dataset"]["uri"] == f"{rule.prefix}day1/"
    assert jobs_with_key(job_client, rule.key(late)) == []
    assert rule.reconcile_at(5 + 2 * QUIET)["windows_started"] == 1
    (alone,) = events.of(rule.request_id(late), "coalesced")
    assert alone.markers == [rule.uri(late)] and alone.saved_gpu_hours == 0


def test_a_redelivered_marker_folds_once(deployment, job_client):
    events = deployment.events()
    rule = Rule(deployment)
    first, second = rule.marker("a"), rule.marker("b")
    event = rule.event(first, 0)
    for _ in range(3):
        assert handlers.dataset_upload(event, rule.controller) == "coalesced"
    assert rule.arrive(second, 2) == "coalesced"
    assert [len(w["markers"]) for w in rule.window_record()["windows"]] == [2]
    assert rule.reconcile_at(2 + QUIET)["windows_started"] == 1
    (coalesced,) = events.of(rule.request_id(second), "coalesced")
    assert coalesced.markers == [rule.uri(first), rule.uri(second)]
    # Redelivered after its window started: remembered, it opens no window of its own.
    assert handlers.dataset_upload(event, rule.controller) == "coalesced"
    assert rule.window_record()["windows"] == []
    assert rule.reconcile_at(2 + 3 * QUIET).get("windows_started", 0) == 0
    assert jobs_with_key(job_client, rule.key(first)) == []


class RacingGcs(Gcs):
    """Cloud Storage where the first read of the window record by each of two threads waits for the other's: both
    markers see the same record, and both write what they saw."""

    def __init__(self, project: str, name: str):
        super().__init__(project)
        self.barrier = threading.Barrier(2, timeout=60)
        self.name = name
        self.waited: set[int] = set()

    def read(self, bucket, name, generation=None, max_bytes=None):
        found = super().read(bucket, name, generation, max_bytes)
        if name == self.name and threading.get_ident() not in self.waited:
            self.waited.add(threading.get_ident())
            self.barrier.wait()
        return found


def test_two_markers_at_the_same_instant_both_fold_in(deployment, job_client):
    events = deployment.events()
    rule = Rule(deployment)
    gcs = RacingGcs(LOCAL_PROJECT, record_name(rule.prefix))
    controllers = [rule.controller_of(gcs), rule.controller_of(gcs)]
    markers = [rule.marker("x"), rule.marker("y")]
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda i: rule.arrive(markers[i], 1, controllers[i]), range(2)))
    assert outcomes == ["coalesced", "coalesced"]
    (window,) = rule.window_record()["windows"]
    assert sorted(m["name"] for m in window["markers"]) == sorted(blob.name for blob in markers)
    assert rule.reconcile_at(1 + QUIET)["windows_started"] == 1
    newest = max(markers, key=lambda blob: blob.generation)  # equal times: the latest generation
    (coalesced,) = events.of(rule.request_id(newest), "coalesced")
    assert sorted(coalesced.markers) == sorted(rule.uri(blob) for blob in markers)
    assert [len(jobs_with_key(job_client, rule.key(blob))) for blob in markers].count(1) == 1


class Crash(BaseException):
    pass


def test_a_window_started_again_after_a_crash_makes_one_job_and_one_coalesced(deployment, job_client):
    """The sweep dies after the window's request started and before the window was dropped: the next sweep starts it
    again, which the ledger makes a duplicate (the newest marker's own key): one job, one `coalesced`."""
    events = deployment.events()
    rule = Rule(deployment)
    first, second = rule.marker("a"), rule.marker("b")
    assert rule.arrive(first, 0) == rule.arrive(second, 1) == "coalesced"
    rule.now[0] = rule.start + timedelta(seconds=1 + QUIET)

    def arrive_then_die(arrival):
        rule.controller.markers.arrive(arrival)
        raise Crash("the reconcile process died here")

    with pytest.raises(Crash):
        rule.controller.windows.close_due(arrive_then_die)
    (window,) = rule.window_record()["windows"]
    assert window["closed"]
    assert rule.reconcile_at(2 + QUIET)["windows_started"] == 1
    of_second = [e.state for e, _ in events.drain() if e.trigger and e.trigger.object == second.name]
    assert of_second.count("submitted") == 1 and of_second.count("coalesced") == 1  # whatever their ids
    assert len(jobs_with_key(job_client, rule.key(second))) == 1
    request_id = rule.request_id(second)
    assert len(events.of(request_id, "coalesced")) == 1 and len(events.of(request_id, "accepted")) == 1
    assert events.of(request_id, "duplicate")
    assert rule.window_record()["windows"] == []


def test_a_window_whose_request_is_rejected_is_closed_and_an_unreadable_record_stops_no_sweep(deployment, job_client):
    events = deployment.events()
    rule = Rule(deployment)
    bad = rule.marker("bad", json.dumps({"resources": {"machine_type": "a2-highgpu-8g"}}))  # not a marker's to set
    assert rule.arrive(bad, 0) == "coalesced"
    broken = f"{WINDOWS_PREFIX}{'0' * 40}.json"
    gcs = Gcs(LOCAL_PROJECT)
    gcs.write(deployment.control_bucket, broken, "{not json", 0, custom_metadata={"due": "2026-01-01T00:00:00+00:00"})
    summary = rule.reconcile_at(QUIET)
    assert summary["windows_started"] == 1 and summary["errors"] >= 1
    assert [e.state for e, _ in events.drain() if e.request_id == rule.request_id(bad)] == ["rejected"]
    assert rule.window_record()["windows"] == []
    assert rule.reconcile_at(2 * QUIET).get("windows_started", 0) == 0  # never tried again
    assert jobs_with_key(job_client, rule.key(bad)) == []
    gcs.delete(deployment.control_bucket, broken)


def test_two_sweeps_closing_one_window_at_once_make_one_job(deployment, job_client):
    """Two reconcile ticks (two function instances) find the same window due: both may start it, and the ledger lets
    one request claim the newest marker's key; the other is a duplicate, or waits and leaves it to the next tick."""
    events = deployment.events()
    rule = Rule(deployment)
    first, second = rule.marker("a"), rule.marker("b")
    assert rule.arrive(first, 0) == rule.arrive(second, 1) == "coalesced"
    rule.now[0] = rule.start + timedelta(seconds=1 + QUIET)
    sweeps = [rule.controller_of(), rule.controller_of()]
    with ThreadPoolExecutor(2) as pool:
        summaries = list(pool.map(lambda c: c.windows.close_due(c.markers.arrive), sweeps))
    assert sum(s["windows_started"] for s in summaries) >= 1
    rule.reconcile_at(2 + QUIET)  # whatever a waiting sweep left
    assert rule.window_record()["windows"] == []
    of_second = [e.state for e, _ in events.drain() if e.trigger and e.trigger.object == second.name]
    assert of_second.count("submitted") == 1 and of_second.count("coalesced") == 1
    assert len(jobs_with_key(job_client, rule.key(second))) == 1
