"""After `promoted`, for a model whose charter has a deploy block: roll the version out to the model's endpoint —
beside the serving version with the canary's share of the traffic, judged over the bake on the endpoint's own Cloud
Monitoring figures, then all the traffic (`deployed`) or none (`rolled_back`, the alias back where it was) — exactly
once and in order (issue 41).

Each visit of the promoted request (reconcile visits it every tick until its steps are done) takes the rollout as far as
it goes now. The endpoint's record (functions/ledger/endpoint_records.py) is the lock and the log: one rollout per
endpoint at a time, each step recorded before it is taken. A newer promotion during a bake WAITS for it to end, then
rolls out only if its version still holds the alias (a later promotion supersedes a waiting one; the bake in progress is
never cut short, so every version that reaches traffic is judged).

Nothing is done twice: the endpoint and the DeployedModel get ids chosen from their names
(functions/cloud/endpoints.py), so a repeated create or deploy is refused with ALREADY_EXISTS and the first is found;
traffic is set whole (UpdateEndpoint with a full split) and undeploying what is gone is NOT_FOUND, so each can be
repeated. The request's events follow the
endpoint record: a crash between the two is caught up at the next visit, from the record's phase or its history.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions import logs
from functions.cloud import deadline
from functions.cloud.endpoint_types import EndpointState, Operation
from functions.cloud.endpoints import ENDPOINT_LABEL, NEW_DEPLOYED_MODEL, numeric_id
from functions.cloud.ports import Endpoints, Metrics, Registry
from functions.cloud.vertex import CallRejected
from functions.ledger.endpoint_records import (
    Ended,
    EndpointLedger,
    EndpointRecord,
    Outcome,
    RollbackReason,
    Rollout,
    Served,
)
from functions.ledger.model_charter import Charter
from functions.ledger.model_records import ModelLedger
from functions.ledger.outbox import Outbox
from functions.ledger.record import Record
from functions.models.alias_moves import MoveRefused, move_by_hand
from functions.settings import Settings
from schemas.events import Canary, Deployed, Deploying, JobEvent, RolledBack, ServingFigures
from schemas.request import DeployBlock

# How long a visit waits on a DeployModel operation before leaving it to the next visit.
WAIT_SECONDS = 5.0
ACTIVE = ("waiting", "deploying", "canary")


@dataclass
class Rollouts:
    settings: Settings
    endpoints: Callable[[], Endpoints]  # built on first use: only served models need them
    metrics: Callable[[], Metrics]
    registry: Callable[[], Registry]
    ledger: EndpointLedger
    models: ModelLedger
    outbox: Outbox
    clock: Callable[[], datetime]

    def endpoint_id(self, name: str) -> str:
        return numeric_id(self.settings.control_bucket, name)

    def advance(self, record: Record, generation: int, charter: Charter) -> tuple[Record, int]:
        """Take the promoted request's rollout as far as it goes now; the record as saved. Raises gcs.Conflict (the
        endpoint record changed: the next visit reads it again) or Transient."""
        steps = record.model_steps
        assert steps is not None and steps.version is not None
        if charter.deploy is None:  # its owner took the model off its endpoint before this rollout began
            return self._skip(record, generation, None, "the model is no longer served (`trainctl models undeploy`)")
        deploy = charter.deploy
        endpoint, endpoint_generation = self.ledger.read(deploy.endpoint, self.endpoint_id(deploy.endpoint))
        ended = endpoint.ended(record.key_hash)
        if ended is not None:
            return self._finished(record, generation, charter, endpoint, ended)
        rollout = endpoint.rollout
        if rollout is None:
            holder = self.registry().get(f"{self.registry().model_name(charter.model_id)}@{charter.rule.alias}")
            if holder is None or holder.version_id != steps.version:
                held = holder.version_id if holder else "none"
                why = f"the alias holds version {held} now (a later promotion supersedes it)"
                return self._skip(record, generation, holder.version_id if holder else None, why)
            rollout = self._claim(record, charter, endpoint)
            endpoint.rollout = rollout
            endpoint_generation = self.ledger.write(endpoint, endpoint_generation)
        elif rollout.owner != record.key_hash:
            if steps.rollout != "waiting":
                steps.rollout = "waiting"
                generation = self.outbox.save(record, generation)
            logs.info(
                f"rollout waits for version {rollout.version} of {rollout.model_id} to finish on {deploy.endpoint}"
            )
            return record, generation
        if steps.rollout in (None, "waiting"):
            record, generation = self._publish(
                record, generation, "deploying", self._deploying(record, charter, endpoint)
            )
        if rollout.phase == "deploying":
            try:
                endpoint, endpoint_generation = self._deploy(endpoint, endpoint_generation, deploy, charter)
            except CallRejected as exc:  # a deployment Vertex will never make (a machine type, a permission)
                why = f"Vertex refused the deployment ({exc.reason}, code {exc.code}): {exc.message}"
                endpoint, endpoint_generation = self._decide(
                    endpoint, endpoint_generation, "rolling_back", why, reason="deploy_failed"
                )
            rollout = endpoint.rollout
            assert rollout is not None  # each step leaves it; only the end clears it
        if rollout.phase == "baking" and steps.rollout != "canary":
            record, generation = self._publish(record, generation, "canary", self._canary(record, charter, endpoint))
        if rollout.phase == "baking":
            endpoint, endpoint_generation = self._judge(endpoint, endpoint_generation, deploy)
            rollout = endpoint.rollout
            assert rollout is not None
        if rollout.phase in ("promoting", "rolling_back"):
            endpoint, endpoint_generation = self._end(endpoint, endpoint_generation, charter)
            ended = endpoint.ended(record.key_hash)
            assert ended is not None
            return self._finished(record, generation, charter, endpoint, ended)
        return record, generation

    # ---- the steps, each recorded on the endpoint record before it is taken -----------------------------------

    def _claim(self, record: Record, charter: Charter, endpoint: EndpointRecord) -> Rollout:
        steps = record.model_steps
        assert steps is not None and steps.version is not None
        return Rollout(
            owner=record.key_hash,
            request_id=record.request_id,
            model_id=charter.model_id,
            alias=charter.rule.alias,
            version=steps.version,
            deployed_model_id=numeric_id(endpoint.endpoint_id, charter.model_id, steps.version, record.key_hash),
            previous=endpoint.serving,
            phase="deploying",
            since=self.clock(),
        )

    def _deploy(
        self, endpoint: EndpointRecord, generation: int, deploy: DeployBlock, charter: Charter
    ) -> tuple[EndpointRecord, int]:
        """Make the endpoint if it is missing, then deploy the version beside the serving one with the canary's share
        (all the traffic when nothing serves). Returns once it serves, or leaves the rest to the next visit."""
        rollout = endpoint.rollout
        assert rollout is not None
        api = self.endpoints()
        name = api.endpoint_name(endpoint.endpoint_id)
        state = api.get(name)
        if state is None:
            operation = api.create(endpoint.endpoint_id, endpoint.name, {ENDPOINT_LABEL: endpoint.name})
            state = self._wait_until(lambda: api.get(name), operation)
            if state is None:
                return endpoint, generation  # still being made
        if state.deployed_model(rollout.deployed_model_id) is None:
            if rollout.operation is None:
                previous = self._previous_on(state, rollout.previous)
                split = {NEW_DEPLOYED_MODEL: 100}
                if previous is not None:
                    split = {NEW_DEPLOYED_MODEL: deploy.canary_percent, previous: 100 - deploy.canary_percent}
                started = api.deploy(name, self._deployed_model(rollout, deploy), split)
                if started is not None:  # None: a deployed model of that id exists already (an earlier try's)
                    rollout.operation = started.name
                    generation = self.ledger.write(endpoint, generation)
            if rollout.operation is not None:
                operation = self._wait(rollout.operation)
                if operation is not None and operation.done and operation.error_code:
                    why = f"the deployment failed (code {operation.error_code}): {operation.error_message}"
                    return self._decide(endpoint, generation, "rolling_back", why, reason="deploy_failed")
                if operation is None or not operation.done:
                    return endpoint, generation
            state = api.get(name)
            if state is None or state.deployed_model(rollout.deployed_model_id) is None:
                return endpoint, generation
        now = self.clock()
        if self._previous_on(state, rollout.previous) is None:
            rollout.previous = None  # nothing else serves: no canary to compare, the version takes all the traffic
            return self._decide(endpoint, generation, "promoting", "the endpoint's first version: all the traffic")
        rollout.phase, rollout.operation = "baking", None
        rollout.bake_since, rollout.bake_until = now, now + timedelta(seconds=deploy.bake)
        return endpoint, self.ledger.write(endpoint, generation)

    def _judge(self, endpoint: EndpointRecord, generation: int, deploy: DeployBlock) -> tuple[EndpointRecord, int]:
        """The bake's verdict on the canary's own figures: a limit broken ends it at once; at its end, promote."""
        rollout = endpoint.rollout
        assert rollout is not None and rollout.bake_since is not None and rollout.bake_until is not None
        now = self.clock()
        until = min(now, rollout.bake_until)
        try:
            figures = self.metrics().figures(endpoint.endpoint_id, rollout.deployed_model_id, rollout.bake_since, until)
        except CallRejected as exc:
            why = f"Cloud Monitoring refused the canary's figures ({exc.reason}, code {exc.code}): {exc.message}"
            return self._decide(endpoint, generation, "rolling_back", why, reason="no_figures")
        rollout.figures = figures
        broken = limits_broken(figures, deploy)
        ended = now >= rollout.bake_until
        # Before the bake ends a broken limit counts once the canary has answered enough to judge (min_requests, at
        # least one): one error in its first two answers is not yet a failing version.
        if broken is not None and (ended or figures.requests >= max(deploy.min_requests, 1)):
            return self._decide(endpoint, generation, "rolling_back", broken[1], reason=broken[0])
        if not ended:
            return endpoint, generation
        if figures.requests < deploy.min_requests:
            why = f"{figures.requests} requests over the bake, fewer than min_requests {deploy.min_requests}"
            return self._decide(endpoint, generation, "rolling_back", why, reason="too_few_requests")
        return self._decide(endpoint, generation, "promoting", f"held the limits over the bake: {describe(figures)}")

    def _decide(
        self,
        endpoint: EndpointRecord,
        generation: int,
        phase: str,
        verdict: str,
        reason: RollbackReason | None = None,
    ) -> tuple[EndpointRecord, int]:
        rollout = endpoint.rollout
        assert rollout is not None
        rollout.phase = "promoting" if phase == "promoting" else "rolling_back"
        rollout.verdict, rollout.reason = verdict, reason
        logs.info(f"rollout of {rollout.model_id} version {rollout.version}: {rollout.phase}", verdict=verdict)
        return endpoint, self.ledger.write(endpoint, generation)

    def _end(self, endpoint: EndpointRecord, generation: int, charter: Charter) -> tuple[EndpointRecord, int]:
        """Promoting: all the traffic to the new version, the old one undeployed. Rolling back: all the traffic back,
        the new version undeployed, the alias back where it was if it still holds the version. Then the record says
        how it ended and frees the endpoint."""
        rollout = endpoint.rollout
        assert rollout is not None and rollout.verdict is not None
        api = self.endpoints()
        name = api.endpoint_name(endpoint.endpoint_id)
        state = api.get(name)
        previous = self._previous_on(state, rollout.previous) if state else None
        alias_version = None
        keep: Served | None
        drop: str | None
        outcome: Outcome
        if rollout.phase == "promoting":
            split = {rollout.deployed_model_id: 100}
            keep, drop = Served(model_id=rollout.model_id, version=rollout.version,
                                deployed_model_id=rollout.deployed_model_id), previous  # fmt: skip
            outcome = "deployed"
        else:
            split = {previous: 100} if previous else {}
            keep, drop = rollout.previous if previous else None, rollout.deployed_model_id
            outcome = "rolled_back"
            alias_version = self._alias_back(rollout, charter)
        if state is not None and split.keys() <= {d.id for d in state.deployed}:
            if state.traffic_split != split:
                api.set_traffic(name, split)
            if drop is not None and state.deployed_model(drop) is not None:
                api.undeploy(name, drop, split)
        endpoint.record(
            Ended(
                time=self.clock(),
                owner=rollout.owner,
                request_id=rollout.request_id,
                model_id=rollout.model_id,
                version=rollout.version,
                deployed_model_id=rollout.deployed_model_id,
                previous_version=rollout.previous.version if rollout.previous else None,
                outcome=outcome,
                reason=rollout.reason,
                verdict=rollout.verdict,
                figures=rollout.figures,
                alias_version=alias_version,
                traffic_split=split,
            )
        )
        endpoint.serving, endpoint.rollout = keep, None
        return endpoint, self.ledger.write(endpoint, generation)

    def _alias_back(self, rollout: Rollout, charter: Charter) -> str | None:
        """The path `trainctl models rollback` takes, when the alias still holds the rolled-back version: the version
        under the alias afterwards."""
        registry = self.registry()
        holder = registry.get(f"{registry.model_name(rollout.model_id)}@{rollout.alias}")
        if holder is None or holder.version_id != rollout.version:
            return holder.version_id if holder else None
        try:
            entry = move_by_hand(
                registry, self.models, rollout.model_id, rollout.alias, "rollback", None, f"rollout:{rollout.owner}",
                self.clock, timedelta(seconds=max(self.settings.lease, self.settings.function_timeout)),
                charter.rule.aliases(), trigger="controller", request_id=rollout.request_id,
            )  # fmt: skip
        except MoveRefused as exc:
            logs.warning(f"rollout of {rollout.model_id}: the alias stays on version {rollout.version}: {exc}")
            return rollout.version
        return entry.version

    # ---- helpers ----------------------------------------------------------------------------------------------

    @staticmethod
    def _previous_on(state: EndpointState, previous: Served | None) -> str | None:
        """The serving version's deployed model id, if it is still on the endpoint."""
        if previous is not None and state.deployed_model(previous.deployed_model_id) is not None:
            return previous.deployed_model_id
        return None

    def _deployed_model(self, rollout: Rollout, deploy: DeployBlock) -> dict[str, Any]:
        machine: dict[str, Any] = {"machineType": deploy.machine_type}
        if deploy.accelerator_type:
            machine |= {"acceleratorType": deploy.accelerator_type, "acceleratorCount": deploy.accelerator_count}
        registry = self.registry()
        return {
            "id": rollout.deployed_model_id,
            "model": f"{registry.model_name(rollout.model_id)}@{rollout.version}",
            "displayName": f"{rollout.model_id}-v{rollout.version}",
            "dedicatedResources": {
                "machineSpec": machine,
                "minReplicaCount": deploy.min_replicas,
                "maxReplicaCount": deploy.max_replicas,
            },
        }

    def _wait(self, operation: str) -> Operation | None:
        api = self.endpoints()
        return deadline.poll(lambda: api.operation(operation), lambda o: o is None or o.done, WAIT_SECONDS)

    def _wait_until(
        self, look: Callable[[], EndpointState | None], operation: Operation | None
    ) -> EndpointState | None:
        if operation is not None:
            self._wait(operation.name)
        return look()

    # ---- the request's side: its events follow the endpoint record --------------------------------------------

    def _skip(self, record: Record, generation: int, holder: str | None, why: str) -> tuple[Record, int]:
        steps = record.model_steps
        assert steps is not None
        steps.rollout = "skipped"
        logs.warning(f"version {steps.version} is not rolled out: {why}", alias_version=holder)
        return record, self.outbox.save(record, generation)

    def _publish(self, record: Record, generation: int, step: str, event: JobEvent) -> tuple[Record, int]:
        steps = record.model_steps
        assert steps is not None
        steps.rollout = step  # type: ignore[assignment]
        mine = record.add_events([event])
        generation = self.outbox.save(record, generation)
        return self.outbox.flush(record, generation, mine)

    def _common(self, record: Record, charter: Charter, endpoint: EndpointRecord) -> dict[str, Any]:
        steps = record.model_steps
        assert steps is not None
        rollout = endpoint.rollout
        registry = self.registry()
        return {
            **record.envelope(self.clock()),
            "model": charter.model_id,
            "model_resource": registry.model_name(charter.model_id),
            "version": steps.version,
            "alias": charter.rule.alias,
            "endpoint": f"{registry.parent}/endpoints/{endpoint.endpoint_id}",
            "endpoint_name": endpoint.name,
            "deployed_model_id": rollout.deployed_model_id if rollout else None,
            "previous_version": rollout.previous.version if rollout and rollout.previous else None,
        }

    def _deploying(self, record: Record, charter: Charter, endpoint: EndpointRecord) -> Deploying:
        common = self._common(record, charter, endpoint)
        where = f"beside version {common['previous_version']}" if common["previous_version"] else "as its first version"
        return Deploying(**common, message=f"deploying version {common['version']} of {charter.model_id} to "
                         f"endpoint {endpoint.name} {where}")  # fmt: skip

    def _canary(self, record: Record, charter: Charter, endpoint: EndpointRecord) -> Canary:
        rollout = endpoint.rollout
        assert rollout is not None and rollout.bake_until is not None and charter.deploy is not None
        common = self._common(record, charter, endpoint)
        share = charter.deploy.canary_percent
        split = {rollout.deployed_model_id: share}
        if rollout.previous:
            split[rollout.previous.deployed_model_id] = 100 - share
        return Canary(
            **common,
            traffic_split=split,
            bake_until=rollout.bake_until,
            message=f"version {rollout.version} of {charter.model_id} serves {share} % of endpoint {endpoint.name}'s "
            f"traffic until {rollout.bake_until:%H:%M:%S} UTC, then is judged",
        )

    def _finished(
        self, record: Record, generation: int, charter: Charter, endpoint: EndpointRecord, ended: Ended
    ) -> tuple[Record, int]:
        steps = record.model_steps
        assert steps is not None
        if steps.rollout in ("deployed", "rolled_back"):
            return record, generation
        common = self._common(record, charter, endpoint) | {
            "deployed_model_id": ended.deployed_model_id,
            "previous_version": ended.previous_version,
            "traffic_split": ended.traffic_split,
        }
        event: JobEvent
        if ended.outcome == "deployed":
            event = Deployed(**common, figures=ended.figures, message=f"version {ended.version} of {charter.model_id} "
                             f"serves all of endpoint {endpoint.name}'s traffic: {ended.verdict}")  # fmt: skip
        else:
            assert ended.reason is not None
            back = f"; `{charter.rule.alias}` is on version {ended.alias_version}" if ended.alias_version else ""
            event = RolledBack(
                **common,
                reason=ended.reason,
                figures=ended.figures,
                alias_version=ended.alias_version,
                message=f"rolled back version {ended.version} of {charter.model_id} on endpoint {endpoint.name}: "
                f"{ended.verdict}{back}",
            )
        return self._publish(record, generation, ended.outcome, event)


def limits_broken(figures: ServingFigures, deploy: DeployBlock) -> tuple[RollbackReason, str] | None:
    """Which limit the canary's figures break, and how, or None."""
    if figures.error_rate is not None and figures.error_rate > deploy.max_error_rate:
        return "errors", (
            f"error rate {figures.error_rate:.2%} ({figures.errors} of {figures.requests} requests) is above "
            f"max_error_rate {deploy.max_error_rate:.2%}"
        )
    if deploy.max_p99_ms is not None and figures.p99_ms is not None and figures.p99_ms > deploy.max_p99_ms:
        return "latency", f"p99 latency {figures.p99_ms:g} ms is above max_p99_ms {deploy.max_p99_ms:g}"
    return None


def describe(figures: ServingFigures) -> str:
    rate = "no requests" if figures.error_rate is None else f"error rate {figures.error_rate:.2%}"
    p99 = f", p99 {figures.p99_ms:g} ms" if figures.p99_ms is not None else ""
    return f"{figures.requests} requests, {figures.errors} errors ({rate}){p99}"
