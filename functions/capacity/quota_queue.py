"""trainctl's quota queue: a request whose rung needs more GPUs than the project's quota has room for waits here
(state `queued`) instead of sitting in Vertex's own QUEUED, until reconcile finds room, its rung's max_pending runs
out (it moves down the ladder, or ends), or its requester cancels it.

What each request holds or waits for is counted in functions/capacity/quota_pool.py; this module is the request's side
of it: when a submission may go on (`hold_or_queue`), what reconcile's visit to a queued request decides (`leave`, in
each pool's arrival order: `lines`), and letting go of the count once a request has ended (`release`, and
`forget_inactive` for a handler that died before it could). Submitting what leaves the queue is
functions/intake/submission.py's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from functions import logs
from functions.capacity.attempts import ladder_exhausted, resubmit
from functions.capacity.fair_share import Shares
from functions.capacity.ladder import has_fallbacks, ladder_of, next_rung
from functions.capacity.ladder import outcome as rung_outcome
from functions.capacity.quota_pool import Admission, QuotaPools, pool_name
from functions.capacity.reserved import mark_reserved
from functions.cloud.failures import QUOTA_ADVICE
from functions.cloud.ports import Quotas, Reservations
from functions.ledger.outbox import Outbox, whole_outbox
from functions.ledger.record import LadderRung, Record
from functions.settings import Settings
from functions.teams import NO_TEAMS, everyone_shares
from schemas.events import Cancelled, JobEvent, Queued
from schemas.request import TrainingJobRequest
from schemas.rules import format_duration


@dataclass(frozen=True)
class Left:
    """What reconcile's visit to a queued request led to, and the record as it stands after (with its generation).

    `way`: it goes on `waiting`; it was `admitted` (its state is `claimed` again, for the caller to claim and
    submit); it moved to the `next_rung` (a new attempt, saved with this controller's claim: the caller submits
    it); or it `ended` (saved, published, its quota let go)."""

    way: Literal["waiting", "admitted", "next_rung", "ended"]
    record: Record
    generation: int


@dataclass
class QuotaQueue:
    settings: Settings
    outbox: Outbox
    clock: Callable[[], datetime]
    owner: str
    quotas: Quotas | None  # the project's GPU limits; None: no quota gating
    pools: QuotaPools  # what trainctl's own jobs hold of them, and who waits (in each team's fair turn)
    reservations: Reservations | None = None  # Compute Engine's reservations, for reserved rungs (reserved.py)

    def ladder(self, request: TrainingJobRequest, team: str) -> list[LadderRung]:
        """The request's rungs, each marked skipped when it can never fit one of the GPU quotas it is gated on (more
        GPUs than the limit; an unknown limit skips nothing), or its team's share of it (nominal + what it may
        borrow), or a reserved rung whose reservation cannot take it (functions/capacity/reserved.py; ReservationRefused
        when a reservation can never serve its rung)."""
        rungs = ladder_of(request, self.settings.region)
        if self.quotas is not None:
            rungs = [self._marked(rung, team, self.limits(rung)) for rung in rungs]
        return mark_reserved(request, rungs, self.reservations, self.settings.project)

    def limits(self, rung: LadderRung) -> list[tuple[str, int]]:
        """(metric, limit) of each metric the rung is gated on that has a limit: a Spot rung's two, or the one of
        them with a limit (schemas/catalog.py quota_metrics; issue 40, point 12); none without a quota reader."""
        if self.quotas is None:
            return []
        found = [(metric, self.quotas.limit(metric, rung.region)) for metric in rung.gated_metrics]
        return [(metric, limit) for metric, limit in found if limit is not None]

    def _marked(self, rung: LadderRung, team: str, limits: list[tuple[str, int]]) -> LadderRung:
        for metric, limit in limits:
            share = self.shares(metric)(team)
            cap = share.cap(limit)
            if rung.gpus > limit:
                why = (
                    f"needs {rung.gpus} GPUs of {metric} in {rung.region}; the project's limit is {limit}. "
                    f"{QUOTA_ADVICE}"
                )
            elif rung.gpus > cap:
                why = (
                    f"needs {rung.gpus} GPUs of {metric}; team {team} may hold {cap} of it ({share.nominal} "
                    f"its own, borrowing up to {share.borrow_limit}): ask the operator for a larger share (the teams "
                    "setting), or choose another GPU type"
                )
            else:
                continue
            return rung.model_copy(update={"skipped": why})
        return rung

    def shares(self, metric: str) -> Shares:
        """Each team's share of one quota metric (everyone's whole quota without teams)."""
        teams = self.settings.teams
        return (lambda team: teams.share(team, metric)) if teams else everyone_shares

    def hold_or_queue(self, record: Record, generation: int) -> bool:
        """Hold this rung's GPUs in trainctl's count of the project's quota (True: the submission goes on, and
        saves the pool on the record with its own change), or queue the request (state `queued`, a `queued`
        event the first time; saved and published here) until reconcile finds room (False)."""
        if not record.ladder or self.quotas is None:
            return True  # a record from before the ladder, or no quota reader
        rung = record.ladder[record.rung]
        limits = self.limits(rung)
        pools = [pool_name(rung.region, metric) for metric, _ in limits]
        for held in record.quota_pools:
            if held not in pools:
                self.pools.release(held, record.key_hash)  # the ladder moved to another quota
        record.quota_pool, record.other_quota_pools = None, []
        team = record.team or NO_TEAMS
        # A Spot rung holds both pools (in one order, so that no two requests each hold what the other waits for).
        for (metric, limit), pool in zip(limits, pools, strict=True):
            admission = self.pools.acquire(pool, record.key_hash, rung.gpus, limit, team, self.shares(metric))
            if record.quota_pool is None:
                record.quota_pool = pool
            else:
                record.other_quota_pools.append(pool)
            if not admission.granted:
                self._queue(record, generation, rung, metric, limit, admission)
                return False
        return True

    def _queue(
        self, record: Record, generation: int, rung: LadderRung, metric: str, limit: int, admission: Admission
    ) -> None:
        """Queue the request for the quota `metric` that has no room (state `queued`, a `queued` event the first
        time), saved and published here."""
        team = record.team or NO_TEAMS
        pool = pool_name(rung.region, metric)
        now = self.clock()
        if record.state != "queued":
            record.state, record.queued_since = "queued", now
            record.add_events(
                [
                    Queued(
                        **record.envelope(now),
                        message=f"waiting in trainctl for GPU quota: needs {rung.gpus} of {metric} in "
                        f"{rung.region}; trainctl's jobs hold {admission.held} of the limit {limit}, and "
                        f"{admission.ahead} request(s) go before this one"
                        + (
                            f"; held by team {team}'s share (its cap, or another team's fair turn first)"
                            if admission.held_by == "team_share"
                            else ""
                        ),
                        quota_metric=metric,
                        region=rung.region,
                        gpus=rung.gpus,
                        limit=limit,
                        held=admission.held,
                        ahead=admission.ahead,
                        rung=record.rung,
                        team=record.team,
                        held_by=admission.held_by,
                    )
                ]
            )
        record.owner = record.lease_until = None
        record, generation = self.outbox.flush(record, self.outbox.save(record, generation), whole_outbox(record))
        logs.info("queued for GPU quota", pool=pool, held=admission.held, limit=limit, ahead=admission.ahead)

    def leave(self, record: Record, generation: int) -> Left:
        """reconcile's visit to a request waiting in the queue: admitted once its quota has room; past its rung's
        max_pending (or cancelled by its requester), it moves down the ladder or ends (failed with every rung's
        outcome when it has fallbacks, cancelled for quota when it has none)."""
        now = self.clock()
        rung = record.ladder[record.rung]
        waited = int((now - record.queued_since).total_seconds()) if record.queued_since else 0
        if record.cancel_requested or waited > rung.max_pending:
            return self._leave_for_good(record, generation, now, waited)
        for metric, limit in self.limits(rung):  # a Spot rung: both pools, in hold_or_queue's order
            pool = pool_name(rung.region, metric)
            shares = self.shares(metric)
            if not self.pools.acquire(pool, record.key_hash, rung.gpus, limit, record.team or NO_TEAMS, shares).granted:
                return Left("waiting", record, generation)
        record.state = "claimed"
        logs.info("quota has room; leaving the queue", request_key=record.key, waited=waited)
        return Left("admitted", record, generation)

    def _leave_for_good(self, record: Record, generation: int, now: datetime, waited: int) -> Left:
        """A queued request cancelled by its requester, or waiting longer than its rung's max_pending: it moves
        down the ladder, or ends."""
        why = f"waited {format_duration(waited)} in trainctl's queue for GPU quota, longer than max_pending"
        for pool in record.quota_pools:
            self.pools.release(pool, record.key_hash)
        record.quota_pool, record.other_quota_pools = None, []
        common = record.envelope(now)
        events: list[JobEvent] = []
        record.failure_reason = "quota"
        record.leave_queue(now)
        if record.cancel_requested:
            record.state, record.failure_reason, record.message = "cancelled", None, "cancelled by request"
            events.append(Cancelled(**common, message="cancelled by request while it waited for GPU quota"))
        elif has_fallbacks(record) and next_rung(record) is not None:
            text = f"attempt {record.attempt} {why}"
            resubmit(record, events, common, "quota", text, now, left=rung_outcome(record, why))
            record.owner, record.lease_until = self.owner, now + timedelta(seconds=self.settings.lease)
        elif has_fallbacks(record):
            ladder_exhausted(record, events, common, "quota", why)
        else:
            record.state, record.message = "cancelled", why
            events.append(Cancelled(**common, message=f"never submitted: {why}. {QUOTA_ADVICE}", reason="quota"))
        mine = record.add_events(events)
        generation = self.outbox.save(record, generation)
        self.release(record)  # once the ended state is saved, before anything else can fail
        record, generation = self.outbox.flush(record, generation, mine)
        if record.state == "claimed":
            return Left("next_rung", record, generation)
        self.outbox.retire_when_done(record)
        return Left("ended", record, generation)

    def release(self, record: Record) -> None:
        """A request that has ended holds no quota and waits for none."""
        if record.final:
            for pool in record.quota_pools:
                self.pools.release(pool, record.key_hash)

    def lines(self) -> Iterator[list[str]]:
        """The requests waiting in each pool, first in line first: reconcile lets them leave in that order."""
        for pool in self.pools.names():
            yield self.pools.waiting(pool)

    def forget_inactive(self, active: Callable[[], set[str]]) -> int:
        """Drop the holds and places of requests no longer active (a handler that died between ending a request and
        releasing its quota); how many were dropped."""
        return self.pools.forget_inactive(active)
