"""The log fields Cloud Monitoring's log-based metrics count (terraform/monitoring.tf)."""

from __future__ import annotations

from datetime import UTC, datetime

from functions.ledger.monitoring_fields import EVENT_REASON, EVENT_STATE, published_fields, rejection_rule
from schemas.events import Failed, Running


def test_a_published_line_names_the_state_and_the_reason():
    """Guards issue 15 item 2: "events published by state and reason" is counted from these two fields."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    failed = Failed(request_id="r", request_key="request:r", time=now, message="m", reason="capacity")
    assert published_fields(failed)[EVENT_STATE] == "failed"
    assert published_fields(failed)[EVENT_REASON] == "capacity"
    running = Running(request_id="r", request_key="request:r", time=now, message="m")
    assert published_fields(running)[EVENT_REASON] is None  # logs.log leaves None out of the line


def test_a_rejection_is_counted_by_the_field_path_of_its_first_problem():
    """Guards issue 15 item 2: "rejected requests by rule" needs one bounded label per rule broken."""
    assert rejection_rule(["resources.accelerator_count: must be at most 8", "x: y"]) == "resources.accelerator_count"
    assert rejection_rule(["max_cost_usd exceeded"]) == "request"
    assert rejection_rule([]) == "request"
