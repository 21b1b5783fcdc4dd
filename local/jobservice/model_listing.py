"""How the local Model Registry lists: the `filter` of ListModels and ListModelVersions as
model_service.proto documents them, and paging by `page_size`/`page_token`.

ListModels: `model` and `display_name` (= and !=), `base_model_name` (=), `labels.key=value`,
`labels.key:*`, `labels:key`; ListModelVersions: the labels alone. Both AIP-160 expressions, read by
filters.parse_query. A bad filter, order_by (not imitated) or page token is INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from google.cloud.aiplatform_v1.types import Model

from local.jobservice.filters import FilterError, label_comparison, parse_query, unquote
from local.jobservice.model_rules import refuse_invalid
from local.jobservice.validation import Problem

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
T = TypeVar("T")


def model_filter(text: str) -> Callable[[Model], bool]:
    return _filter(text, _model_comparison)


def version_filter(text: str) -> Callable[[Model], bool]:
    return _filter(text, _version_comparison)


def endpoint_filter(text: str) -> Callable[[Any], bool]:
    """ListEndpointsRequest.filter (endpoint_service.proto): `endpoint` and `display_name` (= and !=), labels, on
    the same reading as ListModels'."""
    return _filter(text, _endpoint_comparison)


def order_by_problem(order_by: str) -> Problem | None:
    if not order_by:
        return None
    return "order_by", "the local Model Registry lists in creation order only; leave order_by out"


def one_page(listed: list[tuple[int, T]], page_size: int, page_token: str) -> tuple[list[T], str]:
    """One page of (key, item) pairs in key order; the token is the last key returned."""
    if page_token:
        if not page_token.isdigit():
            refuse_invalid([("page_token", "is not a token this service returned")])
        listed = [(key, item) for key, item in listed if key > int(page_token)]
    size = min(page_size, MAX_PAGE_SIZE) if page_size > 0 else DEFAULT_PAGE_SIZE
    page = listed[:size]
    return [item for _, item in page], str(page[-1][0]) if len(listed) > size else ""


def _filter(text: str, comparison: Callable[[str, str, str], Callable[[Model], bool]]) -> Callable[[Model], bool]:
    try:
        return parse_query(text, comparison)
    except FilterError as error:
        refuse_invalid([("filter", str(error))])
        raise AssertionError("refuse_invalid raises") from None


def _model_comparison(field: str, operator: str, value: str) -> Callable[[Model], bool]:
    """ListModelsRequest.filter: `model` and `display_name` (= and !=), `base_model_name` (=), labels."""
    if field == "model":
        return _equality(field, operator, value, lambda model: model.name.rsplit("/", 1)[1])
    if field in ("display_name", "displayName"):
        return _equality(field, operator, value, lambda model: model.display_name)
    if field in ("base_model_name", "baseModelName"):
        if operator != "=":
            raise FilterError(f"{field} supports only =, not {operator!r}")
        return lambda model: value == ""  # the local registry holds no Model Garden models
    labels = _label_comparison(field, operator, value)
    if labels is None:
        raise FilterError(f"unsupported field {field!r}; supported: model, display_name, base_model_name, labels.KEY")
    return labels


def _endpoint_comparison(field: str, operator: str, value: str) -> Callable[[Any], bool]:
    if field == "endpoint":
        return _equality(field, operator, value, lambda endpoint: endpoint.name.rsplit("/", 1)[1])
    if field in ("display_name", "displayName"):
        return _equality(field, operator, value, lambda endpoint: endpoint.display_name)
    labels = _label_comparison(field, operator, value)
    if labels is None:
        raise FilterError(f"unsupported field {field!r}; supported: endpoint, display_name, labels.KEY")
    return labels


def _version_comparison(field: str, operator: str, value: str) -> Callable[[Model], bool]:
    """ListModelVersionsRequest.filter: labels only."""
    labels = _label_comparison(field, operator, value)
    if labels is None:
        raise FilterError(f"unsupported field {field!r} in filter; supported: labels.KEY")
    return labels


def _label_comparison(field: str, operator: str, value: str) -> Callable[[Model], bool] | None:
    """`labels.key=value`, `labels.key!=value`, `labels.key:*` and `labels:key`; None for another field."""
    if field == "labels" and operator == ":":
        return lambda model: value in model.labels
    if field.startswith("labels."):
        key = unquote(field.removeprefix("labels."))
        if "-" in key:
            raise FilterError(
                f"{field}: the local Model Registry refuses a '-' in a label key, as Vertex documents label filters "
                "only as labels.myKey=\"myValue\" and AIP-160 reads '-' as NOT; name labels with underscores"
            )
        return label_comparison(key, operator, value)
    return None


def _equality(field: str, operator: str, value: str, read: Callable[[Model], str]) -> Callable[[Model], bool]:
    if operator == "=":
        return lambda model: read(model) == value
    if operator == "!=":
        return lambda model: read(model) != value
    raise FilterError(f"{field} supports = and !=, not {operator!r}")
