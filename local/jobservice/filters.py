"""The `filter` of ListCustomJobs, as Vertex documents it (reference/vertex.md §5.2): comparisons on
`state` (=, !=), `display_name` (=, !=, `:` with `*` wildcards), `create_time` (=, !=, <, <=, >, >=
against RFC 3339), `labels.KEY` (=, !=, `:*` for "has the label"), combined with AND (or plain
juxtaposition), OR, NOT and parentheses. OR binds tighter than AND, as in AIP-160.

A label key with a hyphen (`labels.trainctl-key=…`) is refused unless asked for: Vertex documents label filters
only as `labels.keyA=valueA`, and in AIP-160 a `-` is also the negation operator, so whether Vertex reads such a
key is not documented (issue 25 point 3; local/FIDELITY.md). A filter that works here then works there.

`parse_filter(text)` returns a predicate over CustomJob, or raises FilterError (→ INVALID_ARGUMENT).
`parse_query(text, comparison)` is the same syntax over anything, with the caller's field comparisons
(the Cloud Logging stand-in reads gcloud's `entries:list` filters with it).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Callable
from typing import Any, cast

from google.cloud.aiplatform_v1.types import CustomJob, JobState

Predicate = Callable[[CustomJob], bool]
# (field, operator, unquoted value) → predicate; raises FilterError for what it does not support.
Comparison = Callable[[str, str, str], Callable[[Any], bool]]

_TOKEN = re.compile(r'\s*(\(|\)|!=|<=|>=|=|<|>|:|"(?:[^"\\]|\\.)*"|[^\s()=!<>:"]+)')
_KEYWORDS = ("AND", "OR", "NOT")


class FilterError(ValueError):
    pass


def parse_filter(text: str, hyphenated_label_keys: bool = False) -> Predicate:
    """`hyphenated_label_keys`: read `labels.a-b` as the key "a-b" (what Vertex may do) instead of refusing it.
    The comparisons read the job's raw protobuf message: a listing tests every stored job after its page token."""

    def comparison(field: str, operator: str, value: str) -> Predicate:
        if field.startswith("labels.") and "-" in field and not hyphenated_label_keys:
            raise FilterError(
                f"{field}: the local JobService refuses a '-' in a label key, as Vertex documents label filters only "
                "as labels.keyA=valueA and AIP-160 reads '-' as NOT; name labels with underscores"
            )
        return job_comparison(field, operator, value)

    matches = parse_query(text, comparison)
    return lambda job: matches(CustomJob.pb(job))


def parse_query(text: str, comparison: Comparison) -> Callable[[Any], bool]:
    if not text.strip():
        return lambda job: True
    parser = _Parser(_tokenize(text), comparison)
    predicate = parser.expression()
    if parser.peek() is not None:
        raise FilterError(f"unexpected {parser.peek()!r} in filter {text!r}")
    return predicate


def _tokenize(text: str) -> list[str]:
    tokens, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if not match:
            raise FilterError(f"cannot read the filter at {text[position:]!r}")
        tokens.append(match.group(1))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[str], comparison: Comparison):
        self.tokens = tokens
        self.position = 0
        self.make_comparison = comparison

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise FilterError("the filter ends too early")
        self.position += 1
        return token

    def expression(self) -> Predicate:
        terms = [self.disjunction()]
        while self.peek() not in (None, ")"):
            if self.peek() == "AND":
                self.take()
            terms.append(self.disjunction())
        return lambda job: all(term(job) for term in terms)

    def disjunction(self) -> Predicate:
        terms = [self.unary()]
        while self.peek() == "OR":
            self.take()
            terms.append(self.unary())
        return lambda job: any(term(job) for term in terms)

    def unary(self) -> Predicate:
        token = self.peek()
        if token in ("NOT", "-"):
            self.take()
            inner = self.unary()
            return lambda job: not inner(job)
        if token == "(":
            self.take()
            inner = self.expression()
            if self.take() != ")":
                raise FilterError("a '(' in the filter is not closed")
            return inner
        return self.comparison()

    def comparison(self) -> Predicate:
        field, operator, value = self.take(), self.take(), unquote(self.take())
        if field in (*_KEYWORDS, "(", ")"):
            raise FilterError(f"expected a field name, got {field!r}")
        return self.make_comparison(field, operator, value)


def job_comparison(field: str, operator: str, value: str) -> Callable[[Any], bool]:
    if field.startswith("labels."):
        return label_comparison(unquote(field.removeprefix("labels.")), operator, value)
    if field == "state":
        return _state_comparison(operator, value)
    if field in ("display_name", "displayName"):
        return _display_name_comparison(operator, value)
    if field in ("create_time", "createTime"):
        return _create_time_comparison(operator, value)
    raise FilterError(f"unsupported field {field!r} in filter; supported: state, display_name, create_time, labels.KEY")


def unquote(token: str) -> str:
    if len(token) >= 2 and token.startswith('"') and token.endswith('"'):
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


def label_comparison(key: str, operator: str, value: str) -> Callable[[Any], bool]:
    """`labels.KEY` compared (=, != and `:*` for "has the label") on anything with a `labels` map: a CustomJob
    here, a Model in the local Model Registry's listings (model_listing.py)."""
    if operator == ":" and value == "*":
        return lambda job: key in job.labels
    if operator in ("=", ":"):
        return lambda job: job.labels.get(key) == value
    if operator == "!=":
        return lambda job: job.labels.get(key) != value
    raise FilterError(f"labels.{key} supports =, != and :*, not {operator!r}")


def _state_comparison(operator: str, value: str) -> Callable[[Any], bool]:
    try:
        state = int(cast(Any, JobState)[value])  # proto-plus enums are untyped to the type checker
    except KeyError:
        raise FilterError(f"unknown job state {value!r}; use a JobState name such as JOB_STATE_RUNNING") from None
    if operator == "=":
        return lambda job: job.state == state
    if operator == "!=":
        return lambda job: job.state != state
    raise FilterError(f"state supports = and !=, not {operator!r}")


def _display_name_comparison(operator: str, value: str) -> Callable[[Any], bool]:
    if operator == "=":
        return lambda job: job.display_name == value
    if operator == "!=":
        return lambda job: job.display_name != value
    if operator == ":":
        return lambda job: fnmatch.fnmatchcase(job.display_name, value)
    raise FilterError(f"display_name supports =, != and :, not {operator!r}")


# The ordering comparisons of Google's filter syntax (https://google.aip.dev/160), for times and text alike.
COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def rfc3339(field: str, value: str) -> dt.datetime:
    """`value` as an aware datetime (UTC when it names no offset), or FilterError naming `field`."""
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"{field} needs an RFC 3339 time such as 2026-01-31T00:00:00Z, got {value!r}") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def time_operator(field: str, operator: str) -> Callable[[dt.datetime, dt.datetime], bool]:
    compare = COMPARISONS.get(operator)
    if compare is None:
        raise FilterError(f"{field} supports =, !=, <, <=, >, >=, not {operator!r}")
    return compare


def _create_time_comparison(operator: str, value: str) -> Callable[[Any], bool]:
    when = rfc3339("create_time", value)
    time_operator("create_time", operator)  # refuses what times do not support
    compare = COMPARISONS[operator]
    bound = (int(when.timestamp()), when.microsecond * 1000)  # as a Timestamp's (seconds, nanos)
    return lambda job: compare((job.create_time.seconds, job.create_time.nanos), bound)
