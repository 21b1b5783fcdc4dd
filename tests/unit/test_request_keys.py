"""Request ids per team, and rejections that claim nothing (issue 38, point 6): the keys, the id claims and the own
folders of each team's namespace, the default team's unchanged; a request from before the namespaces keeps its key;
a rejection of one delivery is marked as such. Pure parts, and the controller on in-memory stand-ins."""

from __future__ import annotations

from datetime import datetime

import pytest

from functions.cloud.vertex import CallRejected
from functions.controller import Delivery
from functions.jobs.admission import admission_problems
from functions.jobs.planning import own_folder, plan_custom_job
from functions.ledger import keys
from functions.ledger.keys import key_hash
from functions.ledger.requests import Ledger
from functions.teams import parse_teams
from local.memory_gcs import MemoryGcs
from schemas.events import Rejected, Trigger
from tests.unit.conftest import make_record, make_request
from tests.unit.controller_harness import Harness, harness

# Every team reads the requests' dataset by the operator's grant (issue 40, point 5: teams read only what they may).
READS = {"reads": ["gs://data-bucket/churn/"]}
TEAMS = parse_teams({"default_team": "shared", "teams": {"shared": READS, "red": READS, "blue": READS}})


def test_the_default_team_and_deployments_without_teams_keep_todays_keys():
    for team, default in ((None, None), ("shared", "shared")):
        namespace = keys.id_namespace(team, default)
        assert namespace is None
        key = keys.request_key("churn-1", namespace)
        assert key == "request:churn-1"
        assert (keys.namespace_of(key), keys.id_claim("churn-1", key)) == (None, "churn-1")


def test_every_other_team_has_its_own_namespace_of_ids():
    red, blue = (keys.request_key("churn-1", keys.id_namespace(team, "shared")) for team in ("red", "blue"))
    assert (red, blue) == ("request:red/churn-1", "request:blue/churn-1")
    assert key_hash(red) != key_hash(blue) != key_hash("request:churn-1")
    assert (keys.namespace_of(red), keys.id_claim("churn-1", red)) == ("red", "red/churn-1")
    for other in ("gcs:data/red/churn/_SUCCESS#7", "pubsub:123", "request:churn-1"):
        assert keys.namespace_of(other) is None


def test_a_teams_own_folder_is_in_its_namespace_where_no_default_id_can_reach(settings):
    request = make_request(request_id="churn-1")
    shared = own_folder(request, settings, "request:churn-1")
    red = own_folder(request, settings, "request:red/churn-1")
    assert shared == f"gs://{settings.control_bucket}/runs/churn-1/"
    assert red == f"gs://{settings.control_bucket}/runs/_teams/red/churn-1/"
    assert plan_custom_job(request, settings, "request:red/churn-1").output_dir == red
    assert admission_problems(request, settings, red, "request:red/churn-1") == []
    # Red may not write the default team's churn-1 folder, nor the default team red's.
    for elsewhere in (shared, f"gs://{settings.control_bucket}/runs/_teams/blue/churn-1/"):
        problems = admission_problems(request.model_copy(update={"output_dir": elsewhere}), settings, elsewhere,
                                      "request:red/churn-1")  # fmt: skip
        assert [p.path for p in problems] == ["output_dir"], elsewhere
    assert admission_problems(request, settings, shared, "request:churn-1") == []


def test_a_request_a_team_sent_before_the_namespaces_keeps_its_key_and_no_other_team_takes_it():
    ledger = Ledger(MemoryGcs(), "control")
    before = make_record(key="request:churn-1", key_hash=key_hash("request:churn-1"), request_id="churn-1", team="red")
    ledger.create(before)

    assert ledger.key_for("churn-1", "red") == "request:churn-1", "red's redelivery would make a second request"
    assert ledger.key_for("churn-1", "blue") == "request:blue/churn-1"
    assert ledger.key_for("churn-2", "red") == "request:red/churn-2"
    assert ledger.key_for("churn-1", None) == "request:churn-1"
    found = ledger.find_by_request_id("churn-1", "red")
    assert found is not None and found[0].key == "request:churn-1"
    assert ledger.find_by_request_id("churn-1", "blue") is None


def test_once_a_team_holds_the_new_key_the_old_record_is_not_read_again():
    ledger = Ledger(MemoryGcs(), "control")
    new = make_record(key="request:red/churn-1", key_hash=key_hash("request:red/churn-1"), request_id="churn-1")
    ledger.create(new.model_copy(update={"team": "red"}))
    old = make_record(key="request:churn-1", key_hash=key_hash("request:churn-1"), request_id="churn-1", team="red")
    ledger.create(old)
    assert ledger.key_for("churn-1", "red") == "request:red/churn-1"
    found = ledger.find_by_request_id("churn-1", "red")
    assert found is not None and found[0].key == "request:red/churn-1"


def teams_harness() -> Harness:
    return harness(teams=TEAMS)


def deliver(h: Harness, team: str | None, message_id: str, request_id: str = "churn-1", **sections) -> str:
    request = make_request(request_id=request_id, **sections)
    delivery = Delivery(Trigger(kind="pubsub", message_id=message_id, topic=f"requests-{team}"), message_id, h.clock(),
                        team)  # fmt: skip
    return h.ctl.handle_request(request, h.ctl.request_key(request_id, team), True, delivery)


def test_two_teams_submit_the_same_request_id_as_two_requests_each_in_its_own_folder():
    h = teams_harness()
    assert deliver(h, "red", "m1") == "submitted"
    assert deliver(h, "blue", "m2", trainer={"builtin": "tabular", "hyperparameters": {"epochs": 3}}) == "submitted"
    assert deliver(h, "shared", "m3") == "submitted"
    assert len(h.vertex.created) == 3
    folders = [job["job_spec"]["base_output_directory"]["output_uri_prefix"] for job in h.vertex.created]
    assert folders == [
        "gs://control/runs/_teams/red/churn-1/",
        "gs://control/runs/_teams/blue/churn-1/",
        "gs://control/runs/churn-1/",
    ]
    keys_seen = [e.request_key for e in h.events_of("submitted")]
    assert keys_seen == ["request:red/churn-1", "request:blue/churn-1", "request:churn-1"]
    assert sorted(h.gcs.names("control", "ids/")) == ["ids/blue/churn-1", "ids/churn-1", "ids/red/churn-1"]


def forged(h: Harness, request_id: str = "r1", message_id: str = "forged", **sections) -> Rejected:
    """Another delivery naming `request_id`, rejected: the one event it published."""
    h.publisher.events.clear()
    request = make_request(request_id=request_id, **sections)
    delivery = Delivery(Trigger(kind="pubsub", message_id=message_id), message_id, h.clock())
    assert h.ctl.handle_request(request, f"request:{request_id}", True, delivery) == "rejected"
    (event,) = h.publisher.events
    assert isinstance(event, Rejected)
    return event


def test_a_rejection_before_any_claim_is_marked_as_one_deliverys_and_leaves_the_holder_alone():
    h = harness()
    assert h.submit() == "submitted"
    before = h.record()
    event = forged(h, output_dir="gs://control/ledger/")
    assert (event.rejected_delivery, event.delivery, event.request_key) == ("unclaimed", "forged", "request:r1")
    assert h.record() == before


def test_a_different_spec_under_a_held_id_is_marked_as_a_conflicting_delivery():
    h = harness()
    assert h.submit() == "submitted"
    event = forged(h, trainer={"builtin": "tabular", "hyperparameters": {"epochs": 9}})
    assert (event.rejected_delivery, event.delivery) == ("conflicting_delivery", "forged")


def test_the_holders_own_rejection_by_vertex_is_not_marked():
    h = harness()
    h.vertex.refusals.append(CallRejected(3, "invalid", "the image cannot be pulled"))
    assert h.submit() == "rejected"
    (event,) = h.events_of("rejected")
    assert isinstance(event, Rejected)
    assert (event.rejected_delivery, event.delivery) == (None, None)


def test_a_deliverys_rejection_never_shares_a_ce_id_with_the_holders_rejection():
    when = datetime(2026, 11, 22)
    holder = Rejected(request_id="r1", request_key="request:r1", time=when, message="m", reason="invalid")
    forged = holder.model_copy(update={"delivery": "m-9", "rejected_delivery": "unclaimed"})
    assert holder.ce_id != forged.ce_id
    assert forged.ce_id == forged.model_copy(update={"message": "again"}).ce_id


@pytest.mark.parametrize("team", ["red", None])
def test_a_requests_events_carry_its_key(team):
    h = teams_harness() if team else harness()
    assert deliver(h, team, "m1") == "submitted"
    expected = "request:red/churn-1" if team else "request:churn-1"
    assert {e.request_key for e in h.publisher.events} == {expected}
