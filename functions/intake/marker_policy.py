"""What a marker may override of its rule's template (issue 24, point 7): a template declares it in
`marker_may_set`, a list of dotted request fields; without one, markers may set the dataset's fields, the built-in
trainer's hyperparameters, labels and the display name — never the code that runs, where it writes, the account
it runs as or the request id, unless the operator's template says so.

Pure: the handler gives it the template and the marker's overrides, and gets back the problems to reject with.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from functions.untrusted.documents import DocumentInvalid

MAY_SET_KEY = "marker_may_set"
DEFAULT_MAY_SET = ("dataset", "trainer.hyperparameters", "labels", "display_name")
# The schema version is no power over the job: a marker may always state it.
ALWAYS_ALLOWED = ("api_version",)
# The dataset is the marker's own folder, whatever a template or a marker says (DESIGN.md §4).
FOLDER_FIELD = ("dataset", "uri")

Path = tuple[str, ...]


@dataclass(frozen=True)
class MarkerPolicy:
    rule: str
    may_set: tuple[Path, ...]

    def allows(self, path: Path) -> bool:
        """A field is allowed when it, or a section holding it, is declared: `trainer.hyperparameters` lets a
        marker set `trainer.hyperparameters.epochs`."""
        return any(path[: len(allowed)] == allowed for allowed in (*self.may_set, *map(_path, ALWAYS_ALLOWED)))

    def declared(self) -> str:
        return ", ".join(".".join(path) for path in self.may_set) or "nothing"

    def problems(self, template: dict[str, Any], overrides: dict[str, Any], folder_uri: str) -> list[str]:
        """One `field: …` line for each field the marker changes that it may not; a field set to the value the
        template already holds changes nothing and is let through."""
        problems = []
        for path, value in changed_fields(template, overrides):
            field = ".".join(path)
            if path == FOLDER_FIELD:
                if value != folder_uri:
                    problems.append(
                        f"{field}: a marker's dataset is always its own folder ({folder_uri}); upload the marker "
                        "into the dataset's folder instead of pointing elsewhere"
                    )
            elif not self.allows(path):
                problems.append(
                    f"{field}: may not be set by a marker under rule {self.rule}; this template lets markers set: "
                    f"{self.declared()} (the template's `{MAY_SET_KEY}` decides)"
                )
        return problems


def template_policy(template: dict[str, Any], rule: str) -> tuple[dict[str, Any], MarkerPolicy]:
    """(the template without its declaration, the policy it declares); DocumentInvalid naming the rule for a
    declaration that is not a list of request fields."""
    body = {key: value for key, value in template.items() if key != MAY_SET_KEY}
    declared = template.get(MAY_SET_KEY, list(DEFAULT_MAY_SET))
    where = f"the template of rule {rule}: {MAY_SET_KEY}"
    if not isinstance(declared, list) or not all(isinstance(item, str) for item in declared):
        raise DocumentInvalid(f"{where} must be a list of request fields such as {list(DEFAULT_MAY_SET)}")
    known = request_fields()
    paths = []
    for item in declared:
        path = _path(item)
        if path == FOLDER_FIELD:
            raise DocumentInvalid(f"{where}: dataset.uri is always the marker's folder and cannot be declared")
        if path not in known:
            raise DocumentInvalid(
                f"{where}: {item!r} is not a field of a trainctl/v1 request; use dotted field names such as "
                f"{', '.join(DEFAULT_MAY_SET)}, trainer.image, output_dir, service_account, request_id"
            )
        paths.append(path)
    return body, MarkerPolicy(rule, tuple(paths))


def changed_fields(template: dict[str, Any], overrides: dict[str, Any], parent: Path = ()) -> list[tuple[Path, Any]]:
    """(field, the marker's value) for each field the marker's overrides change of the template when merged
    (functions/intake/triggers.py deep_merge): a mapping merged onto a mapping is looked into, anything else
    replaces."""
    changed: list[tuple[Path, Any]] = []
    for key, value in overrides.items():
        path, current = (*parent, str(key)), template.get(key, _ABSENT)
        if isinstance(value, dict) and isinstance(current, dict):
            changed += changed_fields(current, value, path)
        elif isinstance(value, dict) and value and current is _ABSENT:
            changed += changed_fields({}, value, path)
        elif value != current:
            changed.append((path, value))
    return changed


_ABSENT = object()


def _path(dotted: str) -> Path:
    return tuple(dotted.split("."))


@cache
def request_fields() -> frozenset[Path]:
    """Every field of a request a template may name: the request's fields and, within each section (a model),
    its fields, recursively. Lists and maps (fallbacks, labels, env) are named whole."""
    from schemas.request import TrainingJobRequest

    found: set[Path] = set()

    def walk(model: type[BaseModel], parent: Path) -> None:
        for name, info in model.model_fields.items():
            found.add((*parent, name))
            for section in _models_in(info.annotation):
                walk(section, (*parent, name))

    walk(TrainingJobRequest, ())
    return frozenset(found)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field holds directly (through Optional and Annotated, not through lists or maps)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return [model for arg in typing.get_args(annotation) for model in _models_in(arg)]
    return []
