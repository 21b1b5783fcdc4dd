"""Validation errors as a user reads them: one `field.path: what is wrong` line per problem."""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from schemas.images import IMAGE_RULE
from schemas.request import TrainingJobRequest

# Pattern errors name a regex nobody wants to read; say the rule in words instead.
_PATTERN_RULES = {
    "request_id": "must be 1-128 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit",
    "service_account": "must be a service account email such as trainer@my-project.iam.gserviceaccount.com",
    "image": IMAGE_RULE,
    "executor": "must name an executor: 1-63 lowercase letters, digits, '.' or '-', such as pytorch-2.4",
}
_MESSAGES = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field (not part of trainctl/v1)",
}


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class RequestInvalid(ValueError):
    """A request broke one or more schema rules; `errors` lists each with its field path."""

    def __init__(self, errors: list[FieldError]):
        self.errors = errors
        super().__init__("; ".join(map(str, errors)))


def _path(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field_errors(exc: ValidationError) -> list[FieldError]:
    errors: list[FieldError] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        if err["type"] == "cross_field":
            for sub, message in err["ctx"]["problems"]:
                errors.append(FieldError(_path(loc + ((sub,) if sub else ())), message))
            continue
        message = _MESSAGES.get(err["type"], err["msg"])
        if err["type"] == "extra_forbidden" and loc and isinstance(loc[-1], str):
            message += _did_you_mean(loc)
        if err["type"] == "string_pattern_mismatch" and loc and loc[-1] in _PATTERN_RULES:
            message = _PATTERN_RULES[loc[-1]]
        message = message.removeprefix("Value error, ")
        value = err.get("input")
        # A trainer.env value is never quoted back: it may be a secret, and a rejection is published (issue 40).
        quotable = not (loc[:2] == ("trainer", "env") and len(loc) > 2)
        if quotable and err["type"] not in _MESSAGES and isinstance(value, str | int | float) and "got" not in message:
            message += f", got {_got(value)}"
        errors.append(FieldError(_path(loc), message[0].lower() + message[1:] if message else message))
    return errors


def _did_you_mean(loc: tuple[Any, ...]) -> str:
    """`; did you mean …` for an unknown field: the closest field names of the object it sits in, if any is close."""
    close = difflib.get_close_matches(loc[-1], sorted(_field_names(loc[:-1])), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's type can hold (through Optional, unions, lists and dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is None or not (args := typing.get_args(annotation)):
        return []
    if origin is typing.Annotated:
        return _models_in(args[0])
    if origin in (typing.Union, types.UnionType, list, tuple, set, frozenset):
        return [model for arg in args for model in _models_in(arg)]
    if origin is dict:
        return _models_in(args[-1])
    return []


def _field_names(path: tuple[Any, ...]) -> set[str]:
    """The field names (and aliases) of the object at `path` of a request, a union's members' together; none where
    the path leaves the models (a dict's own keys)."""
    models: list[type[BaseModel]] = [TrainingJobRequest]
    for part in path:
        if isinstance(part, int):
            continue  # a list's item has the list's item type
        models = [inner for model in models if (field := _field(model, part)) for inner in _models_in(field.annotation)]
    return {name for model in models for key, f in model.model_fields.items() for name in (key, f.alias) if name}


def _field(model: type[BaseModel], name: str) -> Any:
    """The model's field called `name`, by its name or its alias; None when it has none."""
    return model.model_fields.get(name) or next((f for f in model.model_fields.values() if f.alias == name), None)


def _without(data: Any, paths: list[tuple[Any, ...]]) -> Any:
    """A copy of the decoded document without the fields at `paths` (the unknown ones)."""
    if isinstance(data, dict):
        here = {path[0] for path in paths if len(path) == 1}
        return {
            key: _without(value, [path[1:] for path in paths if len(path) > 1 and path[0] == key])
            for key, value in data.items()
            if key not in here
        }
    if isinstance(data, list):
        return [
            _without(item, [path[1:] for path in paths if len(path) > 1 and path[0] == i])
            for i, item in enumerate(data)
        ]
    return data


def parse_request(data: Any) -> TrainingJobRequest:
    """Validate a decoded document; raises RequestInvalid listing every problem that can be known at once."""
    if data is None:
        raise RequestInvalid(
            [FieldError("", "the request is empty: write its fields (api_version, request_id, dataset, trainer, …)")]
        )
    if not isinstance(data, dict):
        raise RequestInvalid([FieldError("", f"a request must be a mapping of fields, got {type(data).__name__}")])
    try:
        return TrainingJobRequest.model_validate(data)
    except ValidationError as exc:
        errors = field_errors(exc)
        unknown = [tuple(err["loc"]) for err in exc.errors() if err["type"] == "extra_forbidden"]
    except Exception as exc:  # see _unforeseen
        raise _unforeseen(exc) from exc
    if unknown:
        # The checks that span an object (a machine's GPUs, the ladder's attempts …) run only once its fields are
        # valid, so an unknown field would hide them until it was fixed: check again without the unknown fields.
        try:
            TrainingJobRequest.model_validate(_without(data, unknown))
        except ValidationError as again:
            errors += [error for error in field_errors(again) if error not in errors]
        except Exception as exc:  # see _unforeseen
            raise _unforeseen(exc) from exc
    raise RequestInvalid(errors)


def _unforeseen(exc: Exception) -> RequestInvalid:
    """A validator that raised something pydantic does not turn into a field error (an OverflowError, a
    TypeError): a bug of the schema's, but the document is what made it, and the same document would make it again
    on every redelivery (issue 40, point 3). Rejected, saying so; the cause stays chained for the log."""
    return RequestInvalid(
        [
            FieldError(
                "",
                f"the request cannot be validated ({type(exc).__name__}: {str(exc)[:120]}); this is a bug of "
                "trainctl's schema: report it with the request",
            )
        ]
    )
