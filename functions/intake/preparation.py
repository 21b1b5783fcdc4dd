"""What a new request needs before its claim (DESIGN.md §4, step 0, after the guardrails), each answered by the module
that owns it: its dataset holds data (admission), its packages are what their names say (package_check), a rung of
its ladder can ever fit the quota (quota_queue), its team's budget has room (budgets), its model may take it and what
its run is judged by (model_intake), the new data matches the champion's (data_admission), and its dataset's
fingerprint (for model.skip_unchanged). Submission gets one
Prepared request, or the Refusal that rejects it; nothing is written here but a new model's charter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from functions.capacity.budgets import Budgets, budget_error
from functions.capacity.persistent import persistent_problems
from functions.capacity.quota_queue import QuotaQueue
from functions.capacity.reserved import ReservationRefused
from functions.cloud.gcs import StorageError
from functions.cloud.ports import PersistentResources, Storage
from functions.data.admission import DataCheck, check_columns, check_dataset
from functions.data.fingerprint import dataset_fingerprint
from functions.intake.package_check import check_packages
from functions.jobs.admission import dataset_problem
from functions.jobs.planning import Plan, plan_custom_job, runs_builtin_trainer
from functions.ledger.keys import key_hash
from functions.ledger.record import LadderRung, Record
from functions.ledger.requests import Ledger
from functions.models.intake import ModelAdmission, ModelIntake, ModelRefused
from functions.settings import Settings
from schemas.errors import FieldError
from schemas.events import Budget, CodeObject, CostEstimate, cost_summary
from schemas.request import TrainingJobRequest, rung_prefix
from schemas.rules import split_gs_uri


@dataclass(frozen=True)
class Refusal:
    """Why a new request is rejected before its claim: the `rejected` event's errors, message and figures."""

    errors: list[str]
    message: str
    reason: str = "invalid"
    cost: CostEstimate | None = None
    saved_gpu_hours: float | None = None
    budget: Budget | None = None


@dataclass(frozen=True)
class Prepared:
    """A new request ready to be claimed: its plan (on its first rung that can fit, with its model's evidence), its
    ladder, its model, its data check and the package objects read; the month its team's budget holds its worst case
    in (None: no budget), to let go of if its claim is refused."""

    plan: Plan
    rungs: list[LadderRung]
    start: int
    model: ModelAdmission | None
    data: DataCheck
    code_objects: list[CodeObject] = field(default_factory=list)
    budget_month: str | None = None
    fingerprint: str | None = None  # with a model block: its dataset's (functions/data/fingerprint.py)


@dataclass
class Preparation:
    settings: Settings
    gcs: Storage
    budgets: Budgets  # each team's month record, where a new request's worst case is reserved before its claim
    ledger: Ledger  # whether a request refused after its reservation was claimed meanwhile by another delivery
    queue: QuotaQueue  # which rungs can ever fit the quota, or the team's share of it
    models: ModelIntake
    clock: Callable[[], datetime]
    # Vertex's persistent resources, read for a rung that names one (issue 43; built on first use).
    persistent_resources: Callable[[], PersistentResources] | None = None

    def prepare(self, request: TrainingJobRequest, key: str, team: str) -> Prepared | Refusal:
        if (problem := self._dataset_problem(request)) is not None:
            return Refusal([str(problem)], "the dataset holds no data")
        packages = check_packages(self.gcs, request)
        if packages.errors:
            return Refusal(packages.errors, "a package is not what its name says")
        try:
            rungs = self.queue.ladder(request, team)
        except ReservationRefused as refused:
            return Refusal(refused.errors, "a reservation the request names cannot serve it")
        if errors := self._persistent_problems(request):
            return Refusal(errors, "a persistent resource the request names cannot run its job")
        start = next((index for index, rung in enumerate(rungs) if rung.skipped is None), None)
        if start is None:
            share = f" or team {team}'s share of it" if self.settings.teams else ""
            return Refusal(
                [f"{rung_prefix(index)}resources: {rung.skipped}" for index, rung in enumerate(rungs)],
                f"no rung of the request can ever fit the project's GPU quota{share}",
                reason="quota",
            )
        reservation = self.budgets.reserve(request, team, key_hash(key))
        if (budget := reservation.over) is not None:
            message = f"team {budget.team}'s monthly budget would be exceeded"
            return Refusal([budget_error(budget)], message, reason="budget", budget=budget)
        try:
            model = self.models.admit(request, team)
        except ModelRefused as refused:
            self.let_go(key, team, reservation.month)
            return Refusal(refused.errors, refused.message)
        evidence = model.evidence() if model else None
        plan = plan_custom_job(request, self.settings, key, 1, start, evidence, team)
        data = self._data_check(request, model)
        champion = model.champion if model else None
        if data.errors and (champion is None or not champion.artifact_uri):  # no schema: the columns were checked
            self.let_go(key, team, reservation.month)
            return Refusal(data.errors, f"the dataset lacks a column the request names ({data.summary})")
        if data.errors:
            self.let_go(key, team, reservation.month)
            return self._data_refusal(request, data, plan.cost, start)
        fingerprint = dataset_fingerprint(self.gcs, request) if request.model else None
        return Prepared(plan, rungs, start, model, data, packages.objects, reservation.month, fingerprint)

    def _persistent_problems(self, request: TrainingJobRequest) -> list[str]:
        """Why a rung naming a persistent resource cannot run on it (issue 43); nothing is read when none names one."""
        if self.persistent_resources is None or not any(r.resources.persistent_resource for r in request.rungs()):
            return []
        return persistent_problems(request, self.persistent_resources(), self.settings)

    def let_go(self, key: str, team: str, month: str | None) -> None:
        """A request refused after its budget was reserved holds nothing of it (unless another delivery of it has
        claimed it meanwhile: the reservation is that one's). A crash before this leaves it to reconcile."""
        if month is not None:
            khash = key_hash(key)
            self.budgets.release(team, month, khash, lambda: self.ledger.read(khash) is not None)

    def recheck_budget(self, record: Record) -> Budget | None:
        """Before a resubmission's job: its team's budget still has room for its worst case from here on (the
        figures when it does not)."""
        return self.budgets.recheck(record)

    def _dataset_problem(self, request: TrainingJobRequest) -> FieldError | None:
        """Preflight of a new request's dataset (issue 12 point 17): it exists, holds data and can be read."""
        uri = request.dataset.uri
        if not uri.startswith("gs://"):
            return None  # file:// in local mode: the nodes read it where the controller runs
        bucket, prefix = split_gs_uri(uri)
        try:
            return dataset_problem(uri, self.gcs.objects_under(bucket, prefix), self.settings.marker_names)
        except StorageError as exc:
            return FieldError(
                "dataset.uri",
                f"{uri} cannot be read by trainctl's controller (Cloud Storage answered {exc.status}); "
                f"its service account needs storage.objects.list on gs://{bucket}",
            )

    def _data_check(self, request: TrainingJobRequest, model: ModelAdmission | None) -> DataCheck:
        """The new dataset's header against the champion's recorded schema (issue 27, point 2); an empty check
        without a champion."""
        champion = model.champion if model else None
        if champion is None or not champion.artifact_uri:
            # No schema to keep: the built-in trainer's target and features must at least be in the data.
            return check_columns(self.gcs, request) if runs_builtin_trainer(request) else DataCheck()
        bucket = self.settings.control_bucket
        return check_dataset(self.gcs, bucket, request, champion.artifact_uri, champion.version_id)

    @staticmethod
    def _data_refusal(request: TrainingJobRequest, data: DataCheck, cost: CostEstimate, rung: int) -> Refusal:
        """Reason `data`, carrying the run's own estimate: the GPU time the check saved at most (its GPUs for its
        whole timeout), for `trainctl report`."""
        assert request.model is not None
        hours = cost.gpus * request.at_rung(rung).scheduling.timeout / 3600
        return Refusal(
            data.errors,
            f"the dataset does not match the schema of model {request.model.name}'s champion "
            f"({data.summary}); nothing was claimed and no GPU started, saving up to {hours:,.1f} GPU-hours "
            f"({cost_summary(cost)})",
            reason="data",
            cost=cost,
            saved_gpu_hours=round(hours, 4),
        )
