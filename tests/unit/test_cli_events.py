"""How `trainctl submit --wait` and `trainctl watch` show an event to a person: one line, with the reasons of
a rejection underneath and the metrics of a success on the line."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.events import Rejected, Running, Trigger
from tests.unit.test_events import succeeded
from trainctl.eventstream import format_event

NOW = datetime(2026, 11, 22, 10, 30, tzinfo=UTC)
CLOCK = NOW.astimezone().strftime("%H:%M:%S")


def test_a_rejection_lists_every_reason_under_its_line():
    event = Rejected(
        request_id="r1",
        request_key="pubsub:42",
        time=NOW,
        message="the request is invalid",
        trigger=Trigger(kind="pubsub", message_id="42"),
        delivery="42",
        reason="invalid",
        errors=["dataset.uri: must be a gs://bucket/path URI, got 's3://x'", "resources.replica_count: at most 16"],
    )

    assert format_event(event).splitlines() == [
        f"{CLOCK}  rejected   r1  the request is invalid",
        "    dataset.uri: must be a gs://bucket/path URI, got 's3://x'",
        "    resources.replica_count: at most 16",
    ]


def test_a_success_shows_its_metrics():
    metrics = {"val_loss": 0.2, "val_accuracy": 0.93, "baseline_accuracy": 0.61, "task": "classification"}
    assert format_event(succeeded(metrics=metrics)) == (
        f"{CLOCK}  succeeded  r1  training finished; val_accuracy 0.93 (baseline 0.61), val_loss 0.2"
    )


def test_other_events_are_one_line():
    event = Running(request_id="r1", request_key="request:r1", time=NOW, message="job 7 is running")

    assert format_event(event) == f"{CLOCK}  running    r1  job 7 is running"


# ---- whose events a command follows (issue 38, point 6) -------------------------------------------------------


def lifecycle(state: str, key: str = "request:victim-1", **fields):
    from schemas.events import EVENT_ADAPTER

    base = {"request_id": "victim-1", "request_key": key, "time": NOW, "message": f"{state} message", "state": state}
    extra = {"succeeded": {"artifacts": succeeded().artifacts}, "accepted": {"cost": succeeded().cost}}
    return EVENT_ADAPTER.validate_python(base | extra.get(state, {}) | fields)


def forged_rejection(key: str = "request:victim-1", delivery: str = "attacker-9") -> Rejected:
    """What an invalid document naming the victim's request id publishes."""
    return Rejected(
        request_id="victim-1",
        request_key=key,
        time=NOW,
        message="the request is invalid",
        trigger=Trigger(kind="pubsub", message_id=delivery),
        delivery=delivery,
        reason="invalid",
        errors=["resources.accelerator_count: a2-highgpu-2g has exactly 2 NVIDIA_TESLA_A100, got 3"],
        rejected_delivery="unclaimed",
    )


class Stream:
    def __init__(self, events):
        self.events = events

    def follow(self, until=None):
        yield from self.events


def follow(events, key="request:victim-1", message_id="victim-7", capsys=None):
    from trainctl.submit import follow_request

    status = follow_request(Stream(events), key, message_id, False, None)
    return status, capsys.readouterr().out if capsys else ""


def test_submit_wait_does_not_end_on_another_deliverys_rejection_naming_its_id(capsys):
    """Attack 5: the victim's `submit --wait` printed `rejected` and exited 2 while its job succeeded."""
    mine = Trigger(kind="pubsub", message_id="victim-7")
    events = [
        lifecycle("accepted", trigger=mine),
        forged_rejection(),
        forged_rejection(key="pubsub:attacker-10", delivery="attacker-10"),
        lifecycle("duplicate", delivery="attacker-11", existing_state="succeeded"),
        lifecycle("running", trigger=mine),
        lifecycle("succeeded", trigger=mine),
    ]
    status, out = follow(events, capsys=capsys)
    assert status == 0
    assert [line.split()[1] for line in out.splitlines()] == ["accepted", "running", "succeeded"]


def test_submit_wait_ends_on_its_own_deliverys_rejection(capsys):
    own = forged_rejection(key="pubsub:victim-7", delivery="victim-7")
    status, out = follow([forged_rejection(), own], capsys=capsys)
    assert status == 2
    assert out.splitlines()[0] == f"{CLOCK}  rejected   victim-1  the request is invalid"


def test_submit_wait_follows_the_key_its_own_delivery_names_and_no_other_teams_request(capsys):
    """A request from before the team namespaces keeps its old key: the wait follows what its delivery's first
    event names. Another team's request under the same id is another key, never followed."""
    events = [
        lifecycle("duplicate", delivery="victim-7", existing_state="running"),
        lifecycle("failed", key="request:red/victim-1", reason="user"),
        lifecycle("succeeded", trigger=Trigger(kind="pubsub", message_id="before-the-upgrade")),
    ]
    status, out = follow(events, key="request:blue/victim-1", capsys=capsys)
    assert status == 0
    assert [line.split()[1] for line in out.splitlines()] == ["duplicate", "succeeded"]


def test_submit_wait_ends_on_its_requests_skip_and_on_a_duplicate_of_one(capsys):
    """Issue 42: a request a trigger policy skipped at its claim is final (`skipped`, no `accepted`), exit 0, as is a
    redelivery of it (a duplicate of a skipped request)."""
    mine = Trigger(kind="pubsub", message_id="victim-7")
    skipped = lifecycle("skipped", trigger=mine, reason="running", blocking_request="victim-0", saved_gpu_hours=4.0)
    assert follow([skipped], capsys=capsys)[0] == 0
    assert follow([lifecycle("duplicate", delivery="victim-7", existing_state="skipped")], capsys=capsys)[0] == 0


def test_watch_shows_another_deliverys_rejection_as_such_and_only_its_teams_request():
    from trainctl.jobs import about_request

    forged = forged_rejection()
    assert about_request(forged, "victim-1", "request:victim-1")
    assert about_request(forged_rejection(key="pubsub:attacker-9"), "victim-1", "request:victim-1")
    assert format_event(forged).splitlines()[0] == (
        f"{CLOCK}  rejected   victim-1  [delivery attacker-9 only: nothing was claimed] the request is invalid"
    )
    assert about_request(lifecycle("running"), "victim-1", "request:victim-1")
    assert not about_request(lifecycle("running", key="request:red/victim-1"), "victim-1", "request:victim-1")
    assert not about_request(lifecycle("running"), "victim-2", "request:victim-1")
