"""A delivery refused before any claim (DESIGN.md §4, errors): `rejected` is published for it alone — marked as one
delivery's (issue 38, point 6), since its request id is whatever the document named — and its outcome filed for
`trainctl report`; nothing else of it is written to the ledger.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions import logs
from functions.cloud.ports import Events
from functions.intake.delivery import Delivery, team_of
from functions.intake.preparation import Refusal
from functions.ledger.history import outcome_of
from functions.ledger.monitoring_fields import published_fields, rejection_rule
from functions.ledger.requests import Ledger
from functions.settings import Settings
from schemas.events import Budget, CostEstimate, Rejected, RejectedDelivery


@dataclass
class Rejections:
    settings: Settings
    publisher: Events
    ledger: Ledger

    def reject(
        self,
        request_id: str,
        key: str,
        delivery: Delivery,
        errors: list[str],
        message: str,
        reason: str = "invalid",
        cost: CostEstimate | None = None,
        saved_gpu_hours: float | None = None,
        budget: Budget | None = None,
        rejected_delivery: RejectedDelivery = "unclaimed",
    ) -> str:
        """Publish `rejected` for input that will never become valid; nothing is written to the ledger. `cost` and
        `saved_gpu_hours`: what the run would have cost at most, for a rejection that saved it (the data check).
        The event is about this delivery alone, marked `rejected_delivery` (issue 38, point 6): its request_id is
        whatever the document named, so it must never read as the end of the request that holds that id."""
        logs.warning(message, errors=errors, request_key=key)
        event = Rejected(
            rejected_delivery=rejected_delivery,
            request_id=request_id,
            request_key=key,
            time=delivery.time,
            message=message,
            trigger=delivery.trigger,
            delivery=delivery.event_id,
            reason=reason,
            errors=errors,
            cost=cost,
            saved_gpu_hours=saved_gpu_hours,
            budget=budget,
            team=team_of(delivery, self.settings.teams) if self.settings.teams else delivery.team,
        )
        self.publisher.publish(event)
        logs.info("published rejected", **published_fields(event), rule=rejection_rule(errors))
        # Nothing else of it is in the ledger: its outcome is filed for `trainctl report` (functions/ledger/history.py).
        self.ledger.record_outcome(outcome_of(event, None), f"rejected-{event.ce_id}")
        return "rejected"

    def refuse(self, request_id: str, key: str, delivery: Delivery, refusal: Refusal) -> str:
        return self.reject(
            request_id,
            key,
            delivery,
            refusal.errors,
            refusal.message,
            refusal.reason,
            refusal.cost,
            refusal.saved_gpu_hours,
            refusal.budget,
        )
