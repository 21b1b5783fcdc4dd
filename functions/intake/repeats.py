"""Pure: what a delivery of a request does when the request's ledger record already exists (DESIGN.md §4 step 2)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from functions.ledger.record import Record

ExistingDecision = Literal["duplicate", "conflict", "wait", "take_over"]


def decide_on_existing(record: Record, spec_hash: str, now: datetime) -> ExistingDecision:
    """DESIGN.md §4 step 2: what a delivery does when the request's record already exists."""
    if record.explicit_id and record.spec_hash != spec_hash:
        return "conflict"
    if record.state != "claimed":
        return "duplicate"
    if record.lease_live(now):
        return "wait"
    if record.not_before is not None and record.not_before > now:
        return "duplicate"  # a resubmission is scheduled; reconcile will make it
    return "take_over"
