"""The controller: the adapters (ledger, event publisher, Vertex) and the three parts that use them —
submission (admit → plan → claim → submit exactly once), observation (state changes, diagnosis, reconcile)
and the outbox they publish through. Entry points call `handle_request`, `reject`, `observe_job` and
`reconcile`; anything worth retrying surfaces as `Transient`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from functions.capacity.budgets import Budgets, seed_month
from functions.capacity.quota_pool import QuotaPools
from functions.capacity.quota_queue import QuotaQueue
from functions.capacity.warm_pools import WarmPools, declared_pools
from functions.cloud.ports import (
    BatchPredictions,
    Endpoints,
    Events,
    Jobs,
    Metrics,
    PersistentResources,
    Quotas,
    Registry,
    Reservations,
    Storage,
)
from functions.intake.delivery import Delivery
from functions.intake.markers import Markers
from functions.intake.preparation import Preparation
from functions.intake.refusals import Refusals
from functions.intake.rejections import Rejections
from functions.intake.rule_triggers import RuleTriggers
from functions.intake.run_policy import RunPolicy
from functions.intake.submission import Submission
from functions.intake.windows import Windows
from functions.ledger.budget_records import BudgetRecords
from functions.ledger.endpoint_records import EndpointLedger
from functions.ledger.keys import id_namespace, key_hash
from functions.ledger.model_records import ModelCharters, ModelLedger
from functions.ledger.outbox import Outbox
from functions.ledger.output_claims import OutputClaims
from functions.ledger.requests import Ledger
from functions.ledger.run_slots import RunSlots
from functions.ledger.scoring_records import ScoringLedger
from functions.ledger.window_records import WindowRecords
from functions.lifecycle.observation import Observation
from functions.models.intake import ModelIntake
from functions.models.promotion import Promotion
from functions.models.rollout import Rollouts
from functions.models.scoring import ScoreMarker, Scorings
from functions.settings import Settings
from schemas.request import TrainingJobRequest

__all__ = ["Controller", "Delivery"]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class Controller:
    settings: Settings
    ledger: Ledger
    gcs: Storage
    publisher: Events
    vertex_factory: Callable[[], Jobs]
    # The project's GPU limits (Cloud Quotas); None: admit without quota gating.
    quotas: Quotas | None = None
    # Compute Engine's reservations, read for reserved rungs (issue 43); None: the settings' (built on first use).
    reservations: Reservations | None = None
    # Vertex's persistent resources, for the teams' warm pools (issue 43); None: the settings' when any is declared.
    persistent_resources: PersistentResources | None = None
    # Vertex's Model Registry, built on first use (only requests with a model block need it); None: the settings'.
    registry_factory: Callable[[], Registry] | None = None
    endpoints_factory: Callable[[], Endpoints] | None = None
    metrics_factory: Callable[[], Metrics] | None = None
    batch_factory: Callable[[], BatchPredictions] | None = None
    clock: Callable[[], datetime] = utcnow
    owner: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def __post_init__(self) -> None:
        from functions.cloud.vertex import LazyJobs

        self.jobs = LazyJobs(self.vertex_factory)
        s = self.settings
        self.registry = functools.cache(self.registry_factory or functools.partial(default_registry, s))
        self.charters = ModelCharters(self.gcs, self.ledger.bucket)
        # A handler lives at most the function's timeout; a claim left longer than the lease is taken over anyway.
        claim_window = timedelta(seconds=max(s.lease, s.function_timeout))
        self.outputs = OutputClaims(
            self.gcs, self.ledger, self.clock, claim_window, claim_window + timedelta(seconds=s.max_event_age)
        )
        # Each team's month: what its requests may spend at worst and what they spent (issue 40, point 1).
        self.budget_records = BudgetRecords(
            self.gcs, self.ledger.bucket, functools.partial(seed_month, self.ledger), claim_window
        )
        self.outbox = Outbox(
            self.ledger,
            self.publisher,
            self.clock,
            timedelta(seconds=s.outbox_grace),
            self.outputs,
            self.budget_records,
        )
        if self.reservations is None:
            from functions.cloud.reservations import POLICY as RESERVATION_RETRIES
            from functions.cloud.reservations import ComputeReservations

            self.reservations = ComputeReservations(s.compute_endpoint, RESERVATION_RETRIES.scaled(s.retry_pause_scale))
        self.quota_queue = QuotaQueue(
            s,
            self.outbox,
            self.clock,
            self.owner,
            self.quotas,
            QuotaPools(self.gcs, self.ledger.bucket),
            self.reservations,
        )
        self.rejections = Rejections(s, self.publisher, self.ledger)
        given = self.persistent_resources
        persistent = functools.cache((lambda: given) if given else functools.partial(default_persistent_resources, s))
        pools_reader = persistent() if any(declared_pools(s)) else None
        self.warm_pools = WarmPools(s, self.gcs, pools_reader, self.publisher, self.budget_records, self.clock)
        self.submission = Submission(
            self.settings,
            self.ledger,
            self.publisher,
            self.jobs,
            self.outbox,
            self.clock,
            self.owner,
            self.quota_queue,
            Refusals(s, self.outbox, self.clock, self.quota_queue),
            self.outputs,
            Preparation(
                s,
                self.gcs,
                Budgets(s.teams, self.budget_records, self.clock),
                self.ledger,
                self.quota_queue,
                ModelIntake(s, self.gcs, self.registry, self.charters, self.clock),
                self.clock,
                persistent,
            ),
            self.rejections,
            RunPolicy(
                s,
                self.ledger,
                RunSlots(self.gcs, self.ledger.bucket),
                ModelLedger(self.gcs, self.ledger.bucket),
                self.outbox,
                self.quota_queue,
                self.clock,
            ),
            self.warm_pools,
        )
        self.windows = Windows(s, WindowRecords(self.gcs, self.ledger.bucket), self.clock)
        self.markers = Markers(s, self.gcs, self.rejections, self.request_key, self.handle_request, self.windows.fold)
        model_ledger = ModelLedger(self.gcs, self.ledger.bucket)
        self.rollouts = Rollouts(
            s,
            functools.cache(self.endpoints_factory or functools.partial(default_endpoints, s)),
            functools.cache(self.metrics_factory or functools.partial(default_metrics, s)),
            self.registry,
            EndpointLedger(self.gcs, self.ledger.bucket),
            model_ledger,
            self.outbox,
            self.clock,
        )
        self.promotion = Promotion(
            s, self.gcs, self.registry, model_ledger, self.charters, self.outbox, self.clock, self.owner, self.rollouts
        )
        self.scorings = Scorings(
            s,
            self.gcs,
            self.registry,
            self.charters,
            functools.cache(self.batch_factory or functools.partial(default_batch_predictions, s)),
            ScoringLedger(self.gcs, self.ledger.bucket),
            self.publisher,
            self.clock,
        )
        self.observation = Observation(
            s,
            self.ledger,
            self.gcs,
            self.jobs,
            self.outbox,
            self.submission,
            self.quota_queue,
            self.clock,
            self.owner,
            self.promotion,
            self.budget_records,
        )

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        gcs: Storage | None = None,
        ledger: Ledger | None = None,
        publisher: Events | None = None,
        vertex_factory: Callable[[], Jobs] | None = None,
        quotas: Quotas | None = None,
        registry_factory: Callable[[], Registry] | None = None,
    ) -> Controller:
        """The controller the functions run: adapters for the settings' project, buckets and topic. A part
        given replaces the real one (a test's ledger, trainctl replay's in-memory stand-ins)."""
        from functions.cloud.gcs import POLICY as STORAGE_RETRIES
        from functions.cloud.gcs import Gcs
        from functions.cloud.publisher import POLICY as PUBLISH_RETRIES
        from functions.cloud.publisher import EventPublisher
        from functions.cloud.quotas import POLICY as QUOTA_RETRIES
        from functions.cloud.quotas import GpuQuotas
        from functions.cloud.vertex import POLICY as VERTEX_RETRIES
        from functions.cloud.vertex import VertexJobs

        scale = settings.retry_pause_scale
        gcs = gcs or Gcs(settings.project, STORAGE_RETRIES.scaled(scale))
        source = f"//trainctl/projects/{settings.project}/locations/{settings.region}"
        events = publisher or EventPublisher(
            settings.project, settings.events_topic, source, PUBLISH_RETRIES.scaled(scale), region=settings.region
        )
        vertex_retries = VERTEX_RETRIES.scaled(scale)
        return cls(
            settings=settings,
            ledger=ledger or Ledger(gcs, settings.control_bucket),
            gcs=gcs,
            publisher=events,
            vertex_factory=vertex_factory
            or (lambda: VertexJobs(settings.project, settings.region, settings.vertex_endpoint, vertex_retries)),
            quotas=quotas or GpuQuotas(settings.project, settings.quotas_endpoint, policy=QUOTA_RETRIES.scaled(scale)),
            registry_factory=registry_factory,
        )

    def request_key(self, request_id: str, team: str | None) -> str:
        """The key of a request that names its id, arriving as `team` (None: without teams): request ids are one
        namespace per team (functions/ledger/keys.py), and a request from before that keeps the key it was claimed
        under."""
        teams = self.settings.teams
        return self.ledger.key_for(request_id, id_namespace(team, teams.default_team if teams else None))

    def reject(
        self, request_id: str, key: str, delivery: Delivery, errors: list[str], message: str, reason: str = "invalid"
    ) -> str:
        return self.rejections.reject(request_id, key, delivery, errors, message, reason)

    def handle_request(self, request: TrainingJobRequest, key: str, explicit_id: bool, delivery: Delivery) -> str:
        return self.submission.handle_request(request, key, explicit_id, delivery)

    def observe_job(self, job_id: str) -> str:
        return self.observation.observe_job(job_id)

    def observe_record(self, khash: str) -> str:
        return self.observation.observe_record(khash)

    def score(self, marker: ScoreMarker) -> str:
        return self.scorings.start(marker)

    def reconcile(self) -> dict[str, int]:
        """The coalescing windows that have closed, each started once (first: a few per tick, and a closed window's
        run should not wait behind the sweep), the requests' sweep, each batch scoring not yet finished, then the
        scheduled rules' ticks that never came (catch_up latest: functions/intake/rule_triggers.py)."""
        windows = self.windows.close_due(self.markers.arrive)
        summary = self.observation.reconcile()
        for count, value in windows.items():
            if value:  # a deployment without coalescing rules sums up as before
                summary[count] = summary.get(count, 0) + value
        summary.update(self.scorings.reconcile())
        summary.update(self.warm_pools.reconcile())
        if caught_up := self.rule_triggers().catch_up(lambda key: self.ledger.read(key_hash(key)) is not None):
            summary["ticks_caught_up"] = caught_up
        return summary

    def rule_triggers(self) -> RuleTriggers:
        """A rule's schedule ticks and alerts (issue 42), on this controller's parts and clock."""
        return RuleTriggers(self.settings, self.gcs, self.markers, self.publisher, self.clock, self.ledger)


def default_registry(settings: Settings) -> Registry:
    """The Model Registry of the settings' project and region (the local stack's at `vertex_endpoint`)."""
    from functions.cloud.registry import ModelRegistry
    from functions.cloud.vertex import POLICY

    return ModelRegistry(
        settings.project, settings.region, settings.vertex_endpoint, POLICY.scaled(settings.retry_pause_scale)
    )


def default_persistent_resources(settings: Settings) -> PersistentResources:
    """Vertex's PersistentResourceService of the settings' project and region (the local stack's at
    `vertex_endpoint`)."""
    from functions.cloud.persistent_resources import PersistentResources as VertexPersistentResources
    from functions.cloud.vertex import POLICY

    return VertexPersistentResources(
        settings.project, settings.region, settings.vertex_endpoint, POLICY.scaled(settings.retry_pause_scale)
    )


def default_endpoints(settings: Settings) -> Endpoints:
    """Vertex's EndpointService of the settings' project and region (the local stack's at `vertex_endpoint`)."""
    from functions.cloud.endpoints import Endpoints as VertexEndpoints
    from functions.cloud.vertex import POLICY

    return VertexEndpoints(
        settings.project, settings.region, settings.vertex_endpoint, POLICY.scaled(settings.retry_pause_scale)
    )


def default_metrics(settings: Settings) -> Metrics:
    """Cloud Monitoring's view of the endpoints (the local stack's stand-in at `monitoring_endpoint`)."""
    from functions.cloud.monitoring import POLICY, ServingMetrics

    return ServingMetrics(settings.project, settings.monitoring_endpoint, POLICY.scaled(settings.retry_pause_scale))


def default_batch_predictions(settings: Settings) -> BatchPredictions:
    """Vertex's BatchPredictionJobs in the settings' project and region (the local stack's at `vertex_endpoint`)."""
    from functions.cloud.batch_predictions import VertexBatchPredictions
    from functions.cloud.vertex import POLICY

    return VertexBatchPredictions(
        settings.project, settings.region, settings.vertex_endpoint, POLICY.scaled(settings.retry_pause_scale)
    )
