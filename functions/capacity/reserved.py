"""Reservation rungs at admission (issue 43, point 1): a rung that names a specific Compute Engine reservation is read
(functions/cloud/reservations.py) before the request is claimed.

- Vertex consumes a reservation only when the job's machine shape matches it exactly (local/FIDELITY.md
  "Reservations"): a mismatch would never run on it, so the request is refused, naming the rule.
- A reservation that cannot be read (missing, or the controller lacks compute.reservations.get) is a refusal naming
  why, never a retry loop: asking again changes nothing until someone acts.
- The reservation gates like the quota pool: a rung needing more VMs than the reservation holds can never fit and is
  skipped; one needing more than it has free now is skipped down the ladder when a rung below it can be tried, and
  otherwise submitted to wait for the reservation in Vertex's own queue (max_pending ends the wait).
"""

from __future__ import annotations

from functions.cloud.ports import Reservations
from functions.cloud.reservations import ReservationState, ReservationUnreadable
from functions.ledger.record import LadderRung
from schemas.request import Resources, TrainingJobRequest, rung_prefix

RULE = "Vertex uses a reservation only for the exact machine shape"


class ReservationRefused(Exception):
    """The request names a reservation it can never run on: `errors`, each naming its rung's field."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def shape_problem(resources: Resources, state: ReservationState) -> str | None:
    """Why a rung's machines cannot consume the reservation (None: the shapes match exactly)."""
    wanted = (resources.machine_type, resources.accelerator_type, resources.accelerator_count)
    if wanted == (state.machine_type, state.accelerator_type, state.accelerator_count):
        return None
    return (
        f"reservation {state.name} holds {state.shape()}; this rung asks for {resources.machine_type} with "
        f"{resources.accelerator_count} × {resources.accelerator_type}; {RULE}"
    )


def mark_reserved(
    request: TrainingJobRequest, rungs: list[LadderRung], reader: Reservations | None, project: str
) -> list[LadderRung]:
    """The ladder with each reserved rung that cannot use its reservation now marked skipped; ReservationRefused when
    a reservation can never serve its rung (unreadable, or another shape). Without a reader, nothing is gated."""
    if reader is None:
        return rungs
    errors: list[str] = []
    marked = list(rungs)
    for rung in request.rungs():
        reservation = rung.resources.reservation
        name = reservation.resource_name(project) if reservation is not None else None
        if name is None:
            continue
        field = f"{rung_prefix(rung.index)}resources.reservation"
        try:
            state = reader.get(name)
        except ReservationUnreadable as exc:
            errors.append(f"{field}: {exc}")
            continue
        if (problem := shape_problem(rung.resources, state)) is not None:
            errors.append(f"{field}: {problem}")
            continue
        nodes = rung.resources.replica_count
        if marked[rung.index].skipped is not None:
            continue
        if nodes > state.count:
            why = f"needs {nodes} VMs of reservation {state.name}, which holds {state.count}"
        elif nodes > state.free and _lower_rung(marked, rung.index):
            why = (
                f"reservation {state.name} is full: {state.in_use} of its {state.count} VMs in use, this rung needs "
                f"{nodes}"
            )
        else:
            continue
        marked[rung.index] = marked[rung.index].model_copy(update={"skipped": why})
    if errors:
        raise ReservationRefused(errors)
    return marked


def _lower_rung(rungs: list[LadderRung], index: int) -> bool:
    return any(rung.skipped is None for rung in rungs[index + 1 :])
