"""Moving a model's alias (and `default` with it) in the registry, under its record in the control bucket
(functions/ledger/model_records.py): the move is recorded first, made second, cleared third, so that two moves never
overlap and one a crash interrupted is finished by whoever reads the record next. Promotion
(functions/models/promotion.py) moves it for a better run; a person moves it with `trainctl models promote` and
`trainctl models rollback`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Literal

from functions.cloud.gcs import Conflict
from functions.cloud.ports import Registry
from functions.cloud.vertex import CallRejected
from functions.ledger.model_records import Entry, ModelLedger, ModelRecord, Move
from schemas.request import DEFAULT_ALIAS, MODEL_ALIAS_RE


class MoveRefused(ValueError):
    """A person's move that cannot be made; the message names the model, alias and version, and what to do."""


class ModelNotFound(MoveRefused):
    """The registry has no such model (`trainctl models` exits 3 for it)."""


def alias_refusal(model_id: str, alias: str) -> str | None:
    """Why a person may not move `alias`, or None. Vertex's rule for a version alias (the model-alias page and
    model.proto's Model.version_aliases: [a-z][a-z0-9-]{0,126}[a-z0-9], never a number) is checked before anything is
    recorded, so a refused alias leaves no record behind; `default` is Vertex's own (one version carries it at all
    times) and moves with the model's alias, so moving it alone would split the two."""
    if alias == DEFAULT_ALIAS:
        return (
            f"model {model_id}: `default` moves with the model's alias (Vertex keeps it on exactly one version); "
            "name that alias instead (--alias champion, or leave --alias out)"
        )
    if not MODEL_ALIAS_RE.fullmatch(alias):
        return (
            f"model {model_id}: alias {alias!r} is not a Vertex AI version alias: 2-128 lowercase letters, digits or "
            "'-', starting with a letter and ending with a letter or digit"
        )
    return None


def finish_move(
    registry: Registry, models: ModelLedger, record: ModelRecord, generation: int
) -> tuple[ModelRecord, int]:
    """Make the recorded move in the registry (MergeVersionAliases: an alias another version holds leaves it), then
    clear it by compare-and-swap (gcs.Conflict when the record changed meanwhile)."""
    move = record.moving
    assert move is not None
    aliases = move.aliases or [record.alias, DEFAULT_ALIAS]  # a move recorded before rules said whether default follows
    registry.merge_aliases(f"{registry.model_name(record.model_id)}@{move.to_version}", aliases)
    record.moving = None
    return record, models.write(record, generation)


def move_by_hand(
    registry: Registry,
    models: ModelLedger,
    model_id: str,
    alias: str,
    action: Literal["promote", "rollback"],
    version: str | None,
    owner: str,
    clock: Callable[[], datetime],
    stale_after: timedelta,
    aliases: list[str] | None = None,
    trigger: Literal["controller", "cli"] = "cli",
    request_id: str | None = None,
) -> Entry:
    """`trainctl models promote` (to `version`) or `rollback` (to the version the alias held before): the move,
    recorded in the model's history with trigger `cli`; `aliases`: what it sets (the model's rule: the alias, and
    `default` when the rule says so). MoveRefused for a move that cannot be made (ModelNotFound: no such model), said
    at once: a move the registry refuses is taken back from the record before MoveRefused names Vertex's reason.
    `request_id`: the request whose rollout makes the move (the controller's rollback), recorded as the entry's;
    else the request that registered the target version, when the controller decided on it."""
    if refusal := alias_refusal(model_id, alias):
        raise MoveRefused(refusal)
    if registry.get(registry.model_name(model_id)) is None:
        raise ModelNotFound(f"model {model_id} is not in {registry.parent}: `trainctl models list` lists the models")
    for _ in range(10):
        record, generation = models.read(model_id, alias)
        if record.moving is not None:
            if not record.moving.expired(clock(), stale_after):
                raise MoveRefused(
                    f"model {model_id}: a move of `{alias}` to version {record.moving.to_version} is in progress "
                    f"(by {record.moving.owner}); try again in a minute"
                )
            try:
                record, generation = finish_move(registry, models, record, generation)
            except Conflict:
                continue
        before = record.model_copy(deep=True)
        current = registry.get(f"{registry.model_name(model_id)}@{alias}")
        held = current.version_id if current else None
        target = _target(registry, record, model_id, alias, action, version, held)
        entry = Entry(
            time=clock(),
            action=action,
            trigger=trigger,
            version=target,
            previous=held,
            request_id=request_id or _registered_by(record, target),
            message=f"`{alias}` moved from version {held or 'none'} to {target} by "
            + (f"`trainctl models {action}`" if trigger == "cli" else f"the controller ({owner})"),
        )
        record.record(entry)
        record.moving = Move(to_version=target, owner=owner, since=clock(), aliases=aliases)
        try:
            generation = models.write(record, generation)
        except Conflict:
            continue
        try:
            finish_move(registry, models, record, generation)
        except CallRejected as exc:
            _take_back(models, before, generation)
            raise MoveRefused(
                f"model {model_id}: Vertex AI refused to move `{alias}` to version {target} ({exc.message}); "
                "nothing was moved"
            ) from exc
        return entry
    raise MoveRefused(f"model {model_id}: its record kept changing while `{alias}` was moved; try again")


def _take_back(models: ModelLedger, before: ModelRecord, generation: int) -> None:
    """Undo a recorded move the registry refused for good: the record as it was (none at all when the move made it),
    so the alias is not listed and no `moving` is left for later moves to wait on."""
    if not before.champions and not before.history:
        models.forget(before.model_id, before.alias)
        return
    try:
        models.write(before, generation)
    except Conflict:
        pass  # another decision has written it since: its record stands


def _target(
    registry: Registry,
    record: ModelRecord,
    model_id: str,
    alias: str,
    action: Literal["promote", "rollback"],
    version: str | None,
    held: str | None,
) -> str:
    """The version the alias moves to, with the record's champions updated for it; MoveRefused when there is none.
    `held`: the version under the alias in the registry now."""
    if action == "rollback":
        if held is not None and record.champion != held:
            record.push_champion(held, None)  # moved outside trainctl: that is the version to roll back from
        if len(record.champions) < 2:
            raise MoveRefused(
                f"model {model_id}: `{alias}` has no earlier version recorded to roll back to "
                f"(it holds {held or 'no version'}); use `trainctl models promote {model_id} VERSION`"
            )
        record.champions.pop()
        return record.champions[-1]
    assert version is not None
    if registry.get(f"{registry.model_name(model_id)}@{version}") is None:
        raise MoveRefused(f"model {model_id} has no version {version}: `trainctl models show {model_id}` lists them")
    record.push_champion(version, held)
    return version


def _registered_by(record: ModelRecord, version: str) -> str | None:
    """The request whose run the version is, when the controller decided on it (a rollout's rollback names its own
    request, not the version's: it is passed over)."""
    rollout = ("rollback", "controller")
    return next(
        (
            e.request_id
            for e in reversed(record.history)
            if e.version == version and e.request_id and (e.action, e.trigger) != rollout
        ),
        None,
    )
