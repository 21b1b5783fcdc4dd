"""A request a trigger policy skips at its claim (issue 42): its record is created final, `skipped`, with that event
in place of `accepted` — and what else its claim queued (a quiet window's `coalesced`) kept, numbered again."""

from __future__ import annotations

from functions.intake.acceptance import skipped_record
from schemas.events import Accepted, Coalesced, Skipped
from tests.unit.conftest import RECORD_TIME, make_record


def test_a_skipped_record_holds_its_skip_instead_of_accepted_and_keeps_what_else_was_queued():
    record = make_record(state="claimed", job_name=None, owner="me", lease_until=RECORD_TIME)
    common = {"request_id": "r1", "request_key": "request:r1", "time": RECORD_TIME, "message": "m"}
    coalesced = Coalesced(
        **common, rule="gs://d/churn/", markers=["gs://d/churn/a/_SUCCESS#1"], dataset_uri="gs://d/a/"
    )
    record.add_events([Accepted(**common, cost=record.cost), coalesced])
    skipped = skipped_record(record, Skipped(**common, reason="running", blocking_request="r0", saved_gpu_hours=2.0))
    assert [(e.state, e.sequence) for e in skipped.outbox_events()] == [("coalesced", 1), ("skipped", 2)]
    assert (skipped.state, skipped.owner, skipped.lease_until, skipped.final) == ("skipped", None, None, True)
