"""One arrival of a request (what triggered it, its id and time, the team it arrived as), and the hash that tells
another delivery of the same request from a different request under the same id (DESIGN.md §4)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from functions.teams import NO_TEAMS, Teams
from schemas.events import Trigger
from schemas.request import TrainingJobRequest
from schemas.secrets import redacted_request

# Fields added after requests were first hashed, left out while at their defaults: a request redelivered across
# the deploy that added them keeps its hash (a new hash under an explicit request_id would read as a conflict).
_LATER_DEFAULTS: dict[tuple[str, ...], Any] = {
    ("fallbacks",): [],
    ("scheduling", "max_preemptions"): 1,
    ("model",): None,
    ("model", "max_drift"): None,
    ("model", "moves_default"): True,
    ("model", "confidence"): 0.95,
    ("model", "min_champion_skill"): -0.1,
    ("model", "max_target_drift"): 1.0,
    ("model", "reference"): None,
    ("model", "serving"): None,
    ("model", "deploy"): None,
    ("model", "concurrency"): "allow",
    ("model", "skip_unchanged"): False,
    ("trainer", "python_package"): None,
    ("trainer", "secret_env"): None,
    ("resources", "reservation"): None,
    ("resources", "persistent_resource"): None,
}


def spec_hash(request: TrainingJobRequest) -> str:
    """The request's hash, over its redacted form (issue 40, point 7): the record keeps it, and a hash of a short
    secret-looking value could be guessed back. Two requests differing only in such a value hash alike."""
    spec = redacted_request(request.model_dump(mode="json"))
    for path, default in _LATER_DEFAULTS.items():
        *parents, name = path
        holder: Any = spec
        for key in parents:
            holder = holder.get(key) if holder else None  # a parent left out at its default holds nothing
        if holder and name in holder and holder[name] == default:
            del holder[name]
    for step in spec.get("fallbacks") or []:  # a fallback's resources, as the request's own (issue 43)
        resources = step.get("resources") if isinstance(step, dict) else None
        for name in ("reservation", "persistent_resource"):
            if isinstance(resources, dict) and resources.get(name, 0) is None:
                del resources[name]
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class Folded:
    """The markers a rule's quiet window folded into one request (issue 42, functions/intake/windows.py): its rule,
    each marker as gs://bucket/object#generation oldest first, and the folder the request trains on."""

    rule: str
    markers: tuple[str, ...]
    dataset_uri: str


@dataclass(frozen=True)
class Delivery:
    """One arrival of a request: what triggered it, the arrival's id and time (for per-delivery events)."""

    trigger: Trigger
    event_id: str
    time: datetime
    # Where it arrived decides its team (its topic, its marker template's `team`): None, the default team.
    team: str | None = None
    # A window's close: the markers this request stands for (its record's `coalesced` event names them).
    folded: Folded | None = None


def team_of(delivery: Delivery, teams: Teams | None) -> str:
    """The team a delivery arrived as: its topic's or its template's; the default team (or the only one)."""
    return delivery.team or (teams.default_team if teams else NO_TEAMS)
