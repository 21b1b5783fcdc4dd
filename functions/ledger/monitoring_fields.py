"""The log fields Cloud Monitoring counts: terraform/monitoring.tf's log-based metrics read exactly these, so a
rename here must be a rename there (tests/terraform/test_terraform_monitoring.py compares the two)."""

from __future__ import annotations

from typing import Any

from schemas.events import JobEvent

# Each published event's line: `published <state>` with these fields.
EVENT_STATE = "event_state"
EVENT_REASON = "event_reason"
# A rejection's line also names the rule broken: the field path of its first problem.
REJECTION_RULE = "rule"
# The reconcile tick's summary line, and the line of a tick that failed before it could sum up.
RECONCILE_DURATION = "duration_s"
RECONCILE_TICK_FAILED = "tick_failed"


def published_fields(event: JobEvent) -> dict[str, Any]:
    return {
        "ce_id": event.ce_id,
        "attempt": event.attempt,
        EVENT_STATE: event.state,
        EVENT_REASON: getattr(event, "reason", None),
    }


def rejection_rule(errors: list[str]) -> str:
    """`resources.accelerator_count: …` → `resources.accelerator_count`; the field path names the rule."""
    first = errors[0] if errors else ""
    path, sep, _ = first.partition(":")
    return path.strip() if sep and path.strip() else "request"
