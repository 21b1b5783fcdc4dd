"""Team budgets reserved by compare-and-swap (issue 40, points 1 and 14): a new request's worst case is reserved in its
team's month record before its claim, what is active and what this month spent both count, deliveries at once never
together pass the budget, a refusal after the reservation lets it go, reconcile drops what a dead handler left, a
request's end replaces its reservation by what it spent (once), and a resubmission is checked again. The controller
on in-memory stand-ins (tests/unit/controller_harness.py); the racing reservations on a Cloud Storage made to
interleave its callers."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from functions.capacity.budgets import Budgets, request_worst_case_usd, seed_month
from functions.ledger.budget_records import BudgetRecords, MonthSpend
from functions.ledger.history import Outcome
from functions.ledger.keys import key_hash
from functions.ledger.requests import Ledger
from functions.settings import parse_teams
from local.memory_gcs import MemoryGcs
from schemas.events import Spend
from tests.unit.conftest import make_record, make_request
from tests.unit.controller_harness import NOW, STOCKOUT, Harness, harness

ONE_HOUR = {"max_attempts": 1, "timeout": "1h"}
# The base request (2 × A100, a2-highgpu-2g) for at most an hour, once: its worst case, and its price an hour.
WORST = request_worst_case_usd(make_request(scheduling=ONE_HOUR))
MONTH = f"{NOW:%Y-%m}"


def teams(budget: float) -> Any:
    shared = {"monthly_budget_usd": budget, "data_prefixes": ["churn/"]}  # the requests' dataset is the team's
    return parse_teams({"default_team": "shared", "data_bucket": "data-bucket", "teams": {"shared": shared}})


def budgeted(budget: float, **settings: Any) -> Harness:
    return harness(teams=teams(budget), **settings)


def month(h: Harness) -> MonthSpend:
    found = h.ctl.budget_records.read("shared", MONTH, seeded=False)
    assert found is not None, "no budget record for the month"
    return found[0]


def run_and_succeed(h: Harness, hours: float) -> None:
    job = h.vertex.last()
    h.vertex.set_state(job, "JOB_STATE_SUCCEEDED", start_time=h.clock(), end_time=h.clock() + timedelta(hours=hours))
    h.clock.advance(hours=hours, minutes=1)
    h.ctl.reconcile()


def test_a_request_that_fits_alone_but_not_with_what_is_active_is_refused_with_the_figures():
    """Issue 40, point 14: the budget (1.5 × the worst case) holds one request alone; with the first one active (its
    worst case reserved), the second one is `rejected` (budget), and its figures count the first as active."""
    h = budgeted(1.5 * WORST)
    assert h.submit("first", scheduling=ONE_HOUR) == "submitted"
    assert h.submit("second", scheduling=ONE_HOUR) == "rejected"

    (rejected,) = h.events_of("rejected")
    assert rejected.reason == "budget" and rejected.budget is not None
    assert (rejected.budget.spent_usd, rejected.budget.active_usd) == (0.0, round(WORST, 2))
    assert rejected.budget.request_usd == round(WORST, 2)
    assert "its other active ones may spend up to" in rejected.errors[0]
    assert set(month(h).reserved) == {key_hash("request:first")}, "the refused request reserved nothing"


def test_a_request_that_fits_only_without_this_months_spend_is_refused_and_the_end_replaced_the_reservation():
    """Issue 40, point 14: the first request ran half an hour and succeeded, so its reservation became what it spent
    (half its worst case); the second one fits the budget alone, but not with that spend, and is refused."""
    h = budgeted(1.4 * WORST)
    assert h.submit("first", scheduling=ONE_HOUR) == "submitted"
    run_and_succeed(h, hours=0.5)
    assert h.record("first").state == "succeeded"
    assert month(h).reserved == {} and month(h).spent_usd() == pytest.approx(WORST / 2, rel=1e-3)

    assert h.submit("second", scheduling=ONE_HOUR) == "rejected"
    (rejected,) = h.events_of("rejected")
    assert rejected.budget is not None
    assert (rejected.budget.spent_usd, rejected.budget.active_usd) == (round(WORST / 2, 2), 0.0)


def test_publishing_an_end_again_counts_its_spend_once():
    """Issue 40, point 1: a final event published twice (a handler died before clearing its outbox) settles twice,
    under the request's key hash: its spend counts once."""
    h = budgeted(10 * WORST)
    assert h.submit("first", scheduling=ONE_HOUR) == "submitted"
    run_and_succeed(h, hours=0.5)
    record = h.record("first")
    for _ in range(2):
        h.ctl.budget_records.settle(record, WORST / 2, h.clock())
    assert month(h).spent_usd() == pytest.approx(WORST / 2, rel=1e-3)


def test_reconcile_folds_the_spend_of_requests_retired_long_ago_keeping_the_months_total():
    """Issue 40, point 1: the month record holds only what is recent: once a request has ended and no handler can
    still settle it again, its entry is folded into the month's total, which stays what it spent."""
    h = budgeted(10 * WORST)
    assert h.submit("first", scheduling=ONE_HOUR) == "submitted"
    run_and_succeed(h, hours=0.5)
    assert list(month(h).spent) == [key_hash("request:first")]

    h.clock.advance(minutes=30)
    h.ctl.reconcile()
    assert month(h).spent == {} and month(h).spent_before == pytest.approx(WORST / 2, rel=1e-3)
    assert month(h).spent_usd() == pytest.approx(WORST / 2, rel=1e-3)


def test_reconcile_settles_a_reservation_left_on_a_request_that_ended_without_settling_it():
    """Issue 40, point 1: a request ended (an earlier version, mid-upgrade, published its end without settling)
    and left its reservation: reconcile counts the reservation as spent, so the worst case is never held for ever
    and never dropped either."""
    h = budgeted(10 * WORST)
    assert h.submit("first", scheduling=ONE_HOUR) == "submitted"
    run_and_succeed(h, hours=0.5)
    budgets = h.ctl.submission.preparation.budgets
    budgets.records.change("shared", MONTH, lambda state: state.spent.clear() is None)  # as if never settled
    budgets.reserve(make_request(scheduling=ONE_HOUR), "shared", key_hash("request:first"))

    h.ctl.reconcile()
    assert month(h).reserved == {} and month(h).spent_usd() == pytest.approx(WORST)


def test_a_redelivery_after_a_crash_between_reservation_and_claim_replaces_its_reservation():
    """Issue 40, point 1: the first delivery reserved and died before its claim; its redelivery (same key) finds
    its own reservation, which it does not count against itself, and is accepted; the month holds it once."""
    h = budgeted(1.5 * WORST)
    budgets = h.ctl.submission.preparation.budgets
    assert budgets.reserve(make_request(scheduling=ONE_HOUR), "shared", key_hash("request:r1")).over is None

    assert h.submit("r1", scheduling=ONE_HOUR) == "submitted"
    assert list(month(h).reserved) == [key_hash("request:r1")]
    assert month(h).reserved_usd() == pytest.approx(WORST)


def test_a_request_refused_at_its_claim_lets_its_reservation_go():
    """Issue 40, point 1: a request refused after its reservation (its output folder overlaps an active request's)
    holds nothing of the budget afterwards."""
    custom = {
        "trainer": {"image": "us-docker.pkg.dev/p/r/train:1"},
        "scheduling": ONE_HOUR,
    }
    h = budgeted(3 * WORST, allowed_image_prefixes=("us-docker.pkg.dev/p/r/",), allowed_output_buckets=("outs",))
    assert h.submit("first", output_dir="gs://outs/shared/", **custom) == "submitted"
    assert h.submit("second", output_dir="gs://outs/shared/inside/", **custom) == "rejected"
    assert "overlaps" in h.events_of("rejected")[0].errors[0]
    assert set(month(h).reserved) == {key_hash("request:first")}


def test_reconcile_drops_a_reservation_never_claimed_once_no_handler_can_still_claim_it():
    """Issue 40, point 1: a handler died after reserving (no record was ever created, and no redelivery came): the
    reservation is kept while a claim could still follow, then dropped, so it never holds the budget for ever."""
    h = budgeted(1.5 * WORST)
    budgets = h.ctl.submission.preparation.budgets
    budgets.reserve(make_request(scheduling=ONE_HOUR), "shared", key_hash("request:lost"))

    h.clock.advance(minutes=1)
    h.ctl.reconcile()
    assert key_hash("request:lost") in month(h).reserved, "dropped while its handler could still claim it"

    h.clock.advance(minutes=30)
    h.ctl.reconcile()
    assert month(h).reserved == {}
    assert h.submit("next", scheduling=ONE_HOUR) == "submitted"


def test_a_resubmission_that_no_longer_fits_fails_with_reason_budget_and_starts_no_job():
    """Issue 40, point 1: two attempts fit the budget at admission; the operator then lowers it below one attempt's
    worst case, and the first attempt stocks out: the second is checked again and the request fails (budget),
    with no second job."""
    h = budgeted(2.5 * WORST)
    assert h.submit("r1", scheduling={"max_attempts": 2, "timeout": "1h"}) == "submitted"
    assert month(h).reserved_usd() == pytest.approx(2 * WORST)
    budgets: Budgets = h.ctl.submission.preparation.budgets
    budgets.teams = teams(0.5 * WORST)

    h.vertex.set_state(h.vertex.last(), "JOB_STATE_FAILED", error_code=8, error_message=STOCKOUT)
    h.clock.advance(minutes=5)
    h.ctl.reconcile()

    record = h.record()
    assert (record.state, record.failure_reason) == ("failed", "budget")
    assert len(h.vertex.created) == 1, "the attempt over budget was submitted"
    (failed,) = h.events_of("failed")
    assert "attempt 2 was not submitted" in failed.message
    assert month(h).reserved == {} and key_hash("request:r1") in month(h).spent


def test_a_resubmission_that_fits_replaces_its_reservation_by_its_worst_case_from_here_on():
    """Issue 40, point 1: after an attempt that never ran, the request's worst case is one attempt, not two: the
    check at its resubmission reserves that, leaving the rest of the budget to others."""
    h = budgeted(2.5 * WORST)
    assert h.submit("r1", scheduling={"max_attempts": 2, "timeout": "1h"}) == "submitted"
    h.vertex.set_state(h.vertex.last(), "JOB_STATE_FAILED", error_code=8, error_message=STOCKOUT)
    h.clock.advance(minutes=5)
    h.ctl.reconcile()
    assert (h.record().state, h.record().attempt) == ("submitted", 2)
    held = month(h).reserved[key_hash("request:r1")]
    assert (held.attempt, held.usd) == (2, pytest.approx(WORST))


def test_the_first_month_after_upgrading_starts_from_the_history_and_the_active_requests():
    """Issue 40, point 1: a deployment from before the month records has this month's spend only in the history and
    its active requests' only in their records: the team's month record starts from them (requests accepted this
    month; an earlier month's count there), so upgrading does not reset anyone's budget."""
    gcs = MemoryGcs()
    ledger = Ledger(gcs, "control")
    spent = Spend(gpu_hours=1.0, estimated_cost_usd=3.0)
    for name, accepted in (("this-month", NOW - timedelta(days=1)), ("last-month", NOW - timedelta(days=40))):
        outcome = Outcome(request_id=name, state="succeeded", time=NOW, accepted=accepted, team="shared", spent=spent)
        ledger.record_outcome(outcome, name)
    request = make_request(scheduling=ONE_HOUR).model_dump(mode="json")
    active = make_record(key_hash="old", request=request, team="shared", max_attempts=1, created=NOW)
    ledger.create(active)
    ledger.mark_active("old")

    seeded = seed_month(ledger, "shared", MONTH)
    assert seeded.spent_usd() == 3.0
    assert list(seeded.reserved) == ["old"] and seeded.reserved_usd() == pytest.approx(WORST)


# ---- deliveries at once -----------------------------------------------------------------------------------------


@dataclass
class RacingGcs(MemoryGcs):
    """MemoryGcs whose first `racers` reads of the budget record wait for one another, so that every racer reads the
    same generation (none yet) and all but one of their compare-and-swaps must fail."""

    racers: int = 8
    barrier: threading.Barrier = field(default_factory=lambda: threading.Barrier(8))
    reads: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def read(self, bucket, name, generation=None, max_bytes=None):  # type: ignore[no-untyped-def]
        with self.lock:
            self.reads += 1
            first = self.reads <= self.racers
        if first:
            self.barrier.wait(timeout=30)
        else:
            time.sleep(0.001)
        return super().read(bucket, name, generation, max_bytes)


def test_eight_reservations_at_once_against_a_budget_that_fits_one_grant_exactly_one():
    """Issue 40, point 1, the review's scenario: eight deliveries at once each read the month (nothing reserved
    yet) and find their request fits; the compare-and-swap lets exactly one reservation in, and the seven others,
    reading again, are refused with the figures of the one that got in."""
    gcs = RacingGcs()
    budgets = Budgets(teams(1.3 * WORST), BudgetRecords(gcs, "control"), lambda: NOW)
    request = make_request(scheduling=ONE_HOUR)
    results: dict[int, Any] = {}

    def deliver(index: int) -> None:
        results[index] = budgets.reserve(request, "shared", key_hash(f"request:r{index}"))

    threads = [threading.Thread(target=deliver, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    granted = [index for index, reservation in results.items() if reservation.over is None]
    assert len(results) == 8 and len(granted) == 1, f"{len(granted)} of 8 reserved a budget that fits one"
    refused = [reservation.over for reservation in results.values() if reservation.over is not None]
    assert all(over.active_usd == round(WORST, 2) for over in refused)
    state = BudgetRecords(gcs, "control").read("shared", MONTH, seeded=False)
    assert state is not None and list(state[0].reserved) == [key_hash(f"request:r{granted[0]}")]
