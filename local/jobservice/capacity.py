"""The local JobService's capacity model: per region, GPU quota limits per Vertex quota metric, and per
machine type and strategy, stockouts and preemptions. Pure: the executor (execution.py, quota_queue.py)
and the Cloud Quotas stand-in (cloud_quotas.py) read it.

The file (YAML or JSON; `trainctl local up --capacity FILE`, or `JobServiceControl.set_capacity(dict)`):

    provisioning: 60s                 # optional: how long a job's cold nodes take to start, spent in PENDING
                                      # (a duration or seconds; default 0); a job on a persistent resource skips it
    default_quotas:                   # optional: the limits of every region that does not set its own
      custom_model_training_nvidia_t4_gpus: 4
    regions:
      us-central1:
        quotas:                       # GPU limit per quota metric, short or full name
          custom_model_training_nvidia_l4_gpus: 8
          aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_l4_gpus: 4
        machines:                     # optional; the first matching entry wins; a field left out matches anything
          - machine_type: g2-standard-24
            strategy: spot            # standard | spot | flex_start
            stockouts: 4              # each new job meets N stockouts while provisioned; "always": every attempt
            preempt_after: 20s        # a RUNNING job is preempted this long after each start (or seconds: 0.5)
            provisioning: 2m          # this machine's cold-node delay, overriding the top-level one

    reservations:                     # Compute Engine reservations (issue 43), served by reservations.get
      a2-res:
        project: my-project
        zone: us-central1-a
        machine_type: a2-highgpu-2g
        accelerator_type: NVIDIA_TESLA_A100   # Vertex's name; default: the machine's built-in GPU
        accelerator_count: 2
        count: 2                      # VMs reserved

A metric without a limit (in its region or in default_quotas), and a machine not listed, is unlimited and
always available. A job whose worker pools name a reservation (SPECIFIC_RESERVATION) of exactly their machine shape
runs on it and never meets the machine rule's stockouts; past the reservation's count it waits in QUEUED, as a job
waiting for quota does, until reserved VMs are free (local/FIDELITY.md "Reservations").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas import catalog
from schemas.catalog import QUOTA_SERVICE
from schemas.rules import parse_duration

STRATEGIES = ("standard", "spot", "flex_start")
# "always": more stockouts than any restart budget of Vertex's (vertex_retries.py), so every attempt meets one.
ALWAYS = 1_000_000
_STRATEGY_OF_ENUM = {"STRATEGY_UNSPECIFIED": "standard", "ON_DEMAND": "standard", "STANDARD": "standard"}
_REGION_KEYS = frozenset({"quotas", "machines"})
_MACHINE_KEYS = frozenset({"machine_type", "strategy", "stockouts", "preempt_after", "provisioning"})
_RESERVATION_KEYS = frozenset({"project", "zone", "machine_type", "accelerator_type", "accelerator_count", "count"})
# What a job's demand calls the VMs it takes of a reservation: RESERVATION_DEMAND + the reservation's full name.
RESERVATION_DEMAND = "reservation:"


class CapacityError(ValueError):
    """The capacity file is malformed; the message names the key and what is accepted."""


@dataclass(frozen=True)
class MachineRule:
    machine_type: str | None = None
    strategy: str | None = None
    stockouts: int = 0
    preempt_after: float = 0.0  # seconds; 0: never
    provisioning: float | None = None  # seconds a cold node takes to start; None: the model's default

    def matches(self, machine_type: str, strategy: str) -> bool:
        return self.machine_type in (None, machine_type) and self.strategy in (None, strategy)


@dataclass(frozen=True)
class RegionCapacity:
    quotas: Mapping[str, int] = field(default_factory=dict)  # full metric name → GPU limit
    machines: tuple[MachineRule, ...] = ()


@dataclass(frozen=True)
class LocalReservation:
    """A reservation of `count` VMs, each a machine_type with accelerator_count × accelerator_type."""

    name: str  # projects/P/zones/Z/reservations/N
    machine_type: str
    accelerator_type: str
    accelerator_count: int
    count: int

    def shape(self) -> tuple[str, str, int]:
        return self.machine_type, self.accelerator_type, self.accelerator_count


@dataclass(frozen=True)
class CapacityModel:
    regions: Mapping[str, RegionCapacity] = field(default_factory=dict)
    default_quotas: Mapping[str, int] = field(default_factory=dict)  # full metric name → GPU limit
    reservations: Mapping[str, LocalReservation] = field(default_factory=dict)  # by full name
    provisioning: float = 0.0  # seconds a cold node takes to start, unless its machine rule says otherwise

    def limit(self, region: str, metric: str) -> int | None:
        if metric.startswith(RESERVATION_DEMAND):  # VMs of a reservation: its count
            found = self.reservations.get(metric.removeprefix(RESERVATION_DEMAND))
            return found.count if found is not None else None
        capacity = self.regions.get(region)
        if capacity is not None and metric in capacity.quotas:
            return capacity.quotas[metric]
        return self.default_quotas.get(metric)

    def machine_rule(self, region: str, machine_type: str, strategy: str) -> MachineRule:
        """The first rule for this machine type and strategy (a strategy name of either form), else none."""
        capacity = self.regions.get(region)
        wanted = strategy_name(strategy)
        for rule in capacity.machines if capacity else ():
            if rule.matches(machine_type, wanted):
                return rule
        return MachineRule()

    def provisioning_delay(self, region: str, machine_type: str, strategy: str) -> float:
        """How long a job's cold nodes of this machine type and strategy spend being provisioned (PENDING)."""
        rule = self.machine_rule(region, machine_type, strategy)
        return self.provisioning if rule.provisioning is None else rule.provisioning

    def admits(
        self,
        region: str,
        demand: Mapping[str, int],
        held: Mapping[str, int],
        waiting_before: Iterable[Mapping[str, int]],
        limits: Mapping[str, int] | None = None,
    ) -> bool:
        """Whether a job needing `demand` GPUs per metric may leave the quota queue now, with `held` GPUs per
        metric taken by admitted jobs in the region and `waiting_before` the demands of jobs created earlier and
        still waiting there: it must fit every limit, and no earlier job may be waiting on a limited metric it
        needs (the queue is first come, first served per metric). `limits` adds limits the model does not hold
        (the replicas of a persistent resource's pools, persistent_resources.py)."""
        extra = limits or {}

        def limit(metric: str) -> int | None:
            return extra[metric] if metric in extra else self.limit(region, metric)

        limited = {metric for metric in demand if limit(metric) is not None}
        if any(limited & set(earlier) for earlier in waiting_before):
            return False
        return all(held.get(metric, 0) + demand[metric] <= (limit(metric) or 0) for metric in limited)

    def never_fits(self, region: str, demand: Mapping[str, int]) -> list[str]:
        """The metrics whose limit is below what the job alone needs (a reservation's count is reservations.py's)."""
        return sorted(
            m
            for m, gpus in demand.items()
            if not m.startswith(RESERVATION_DEMAND) and (limit := self.limit(region, m)) is not None and gpus > limit
        )


def strategy_name(strategy: str) -> str:
    """standard | spot | flex_start, from a Scheduling.Strategy name or a request's strategy."""
    return _STRATEGY_OF_ENUM.get(strategy.upper(), strategy.lower())


def full_metric(name: str) -> str:
    return name if "/" in name else f"{QUOTA_SERVICE}/{name}"


def parse_capacity(document: Any) -> CapacityModel:
    """The model described by a loaded YAML/JSON document; CapacityError names the first wrong key."""
    if document is None:
        return CapacityModel()
    _only(document, {"regions", "default_quotas", "reservations", "provisioning"}, "the capacity model")
    regions = document.get("regions") or {}
    if not isinstance(regions, dict):
        raise CapacityError("regions: must be a mapping of region name to its capacity")
    return CapacityModel(
        {str(name): _region(str(name), spec or {}) for name, spec in regions.items()},
        _quotas("default_quotas", document.get("default_quotas") or {}),
        _reservations(document.get("reservations") or {}),
        _provisioning("provisioning", document.get("provisioning")) or 0.0,
    )


def _reservations(spec: Any) -> dict[str, LocalReservation]:
    if not isinstance(spec, dict):
        raise CapacityError("reservations: must be a mapping of reservation name to its machines and count")
    found: dict[str, LocalReservation] = {}
    for name, entry in spec.items():
        where = f"reservations.{name}"
        _only(entry, _RESERVATION_KEYS, where)
        missing = [key for key in ("project", "zone", "machine_type", "count") if key not in entry]
        if missing:
            raise CapacityError(f"{where}.{missing[0]}: required")
        machine = catalog.machine(str(entry["machine_type"]))
        if machine is None:
            raise CapacityError(f"{where}.machine_type: {catalog.unknown_machine(str(entry['machine_type']))}")
        accelerator = entry.get("accelerator_type", machine.builtin_accelerator)
        gpus = entry.get("accelerator_count", machine.builtin_count)
        if accelerator is None or not gpus:
            raise CapacityError(f"{where}.accelerator_type: {entry['machine_type']} has no built-in GPUs; set both")
        problem = catalog.accelerator_problem(str(entry["machine_type"]), str(accelerator), int(gpus))
        if problem:
            raise CapacityError(f"{where}: {problem}")
        count = entry["count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise CapacityError(f"{where}.count: must be a whole number of VMs ≥ 1, got {count!r}")
        full = f"projects/{entry['project']}/zones/{entry['zone']}/reservations/{name}"
        found[full] = LocalReservation(full, str(entry["machine_type"]), str(accelerator), int(gpus), count)
    return found


def load_capacity(path: Path) -> CapacityModel:
    """A capacity file: JSON when it parses as JSON, else YAML."""
    text = Path(path).read_text()
    try:
        document = json.loads(text)
    except ValueError:
        import yaml

        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise CapacityError(f"{path}: neither JSON nor YAML: {error}") from None
    try:
        return parse_capacity(document)
    except CapacityError as error:
        raise CapacityError(f"{path}: {error}") from None


def _only(value: Any, allowed: frozenset[str] | set[str], where: str) -> None:
    if not isinstance(value, dict):
        raise CapacityError(f"{where}: must be a mapping")
    unknown = sorted(set(map(str, value)) - set(allowed))
    if unknown:
        raise CapacityError(f"{where}: unknown key {unknown[0]!r}; expected {sorted(allowed)}")


def _region(name: str, spec: Any) -> RegionCapacity:
    where = f"regions.{name}"
    _only(spec, _REGION_KEYS, where)
    limits = _quotas(f"{where}.quotas", spec.get("quotas") or {})
    machines = spec.get("machines") or []
    if not isinstance(machines, list):
        raise CapacityError(f"{where}.machines: must be a list of machine entries")
    return RegionCapacity(limits, tuple(_machine(f"{where}.machines[{i}]", m) for i, m in enumerate(machines)))


def _quotas(where: str, quotas: Any) -> dict[str, int]:
    if not isinstance(quotas, dict):
        raise CapacityError(f"{where}: must be a mapping of quota metric to GPU limit")
    limits: dict[str, int] = {}
    for metric, value in quotas.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CapacityError(f"{where}.{metric}: must be a whole number of GPUs ≥ 0, got {value!r}")
        limits[full_metric(str(metric))] = value
    return limits


def _machine(where: str, spec: Any) -> MachineRule:
    _only(spec, _MACHINE_KEYS, where)
    strategy = spec.get("strategy")
    if strategy is not None and strategy not in STRATEGIES:
        raise CapacityError(f"{where}.strategy: must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    stockouts = spec.get("stockouts", 0)
    if stockouts == "always":
        stockouts = ALWAYS
    elif isinstance(stockouts, bool) or not isinstance(stockouts, int) or stockouts < 0:
        raise CapacityError(f'{where}.stockouts: must be a whole number ≥ 0 or "always", got {stockouts!r}')
    preempt_after = spec.get("preempt_after")
    seconds = 0.0 if preempt_after is None else _seconds(f"{where}.preempt_after", preempt_after)
    if preempt_after is not None and seconds <= 0:
        raise CapacityError(f"{where}.preempt_after: must be longer than 0, got {preempt_after!r}")
    provisioning = _provisioning(f"{where}.provisioning", spec.get("provisioning"))
    return MachineRule(spec.get("machine_type"), strategy, stockouts, seconds, provisioning)


def _seconds(where: str, value: Any) -> float:
    """Seconds (a number, which may have a fraction: tests run fast) or a duration like 20s or 5m."""
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return float(parse_duration(value))
    except (TypeError, ValueError) as error:
        raise CapacityError(f"{where}: must be seconds or a duration like 20s or 5m ({error})") from None


def _provisioning(where: str, value: Any) -> float | None:
    """A cold-node provisioning delay: None when not given, else seconds ≥ 0."""
    if value is None:
        return None
    seconds = _seconds(where, value)
    if seconds < 0:
        raise CapacityError(f"{where}: must be 0 or longer, got {value!r}")
    return seconds
