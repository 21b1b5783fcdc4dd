"""Hostile documents through both intake paths, in process (issue 40, point 3): a Pub/Sub message's data and a
marker's content holding huge numbers, deep nesting or odd encodings are each answered with one `rejected` event,
publishable as Pub/Sub carries it, and the handler returns — never an exception, which the function would answer
with a 500 and the trigger would redeliver for a day. tests/integration/test_hostile_soak.py sends the same kinds
through the live functions."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml
from cloudevents.http import CloudEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from functions import handlers
from local.memory_gcs import MemoryGcs
from schemas.events import JobEvent, to_pubsub_message
from tests.unit.controller_harness import Harness, harness

RULE = "gs://data/churn/"
TEMPLATE = {
    "dataset": {"target": "y"},
    "trainer": {"builtin": "tabular"},
    "resources": {"machine_type": "a2-highgpu-2g"},
}
# What a marker may set (functions/intake/marker_policy.py DEFAULT_MAY_SET): the documents below are such overrides,
# so the marker path reads them as far as a good marker's; the Pub/Sub path rejects them anyway (no request id).
OVERRIDES: dict[str, Any] = {
    "display_name": "nightly churn",
    "labels": {"team": "red"},
    "trainer": {"hyperparameters": {"epochs": 3}},
    "dataset": {"target": "y"},
}
PLACES = [("display_name",), ("labels", "team"), ("trainer", "hyperparameters", "epochs"), ("dataset", "target")]
HOLE = "holeb7f3a"  # a plain scalar in YAML too: replaced by the hostile text


def overrides_with(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    document = json.loads(json.dumps(OVERRIDES))
    inner = document
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return document


def as_text(document: dict[str, Any], syntax: str) -> str:
    if syntax == "json":
        return json.dumps(document, ensure_ascii=False)
    return yaml.safe_dump(document, width=10**9, allow_unicode=True)


@st.composite
def huge_numbers(draw: st.DrawFn) -> bytes:
    """An integer of more digits than Python converts (4,300), as JSON and YAML write one, anywhere."""
    form = draw(st.sampled_from(["json", "yaml", "yaml-negative", "yaml-hex", "yaml-sexagesimal"]))
    digits = draw(st.integers(4301, 9000))
    number = {
        "json": "9" * digits,
        "yaml": "9" * digits,
        "yaml-negative": "-" + "1" * digits,
        "yaml-hex": "0x" + "f" * (digits * 5 // 6),  # 16^n has n·1.2 decimal digits
        "yaml-sexagesimal": "1" + ":59" * (digits * 4 // 7),  # each :59 adds 1.78 decimal digits
    }[form]
    text = as_text(overrides_with(draw(st.sampled_from(PLACES)), HOLE), "json" if form == "json" else "yaml")
    return text.replace(f'"{HOLE}"' if form == "json" else HOLE, number).encode()


@st.composite
def deep_nesting(draw: st.DrawFn) -> bytes:
    """Lists or mappings nested deeper than documents.MAX_DEPTH (32), up to where the parsers' own recursion ends."""
    syntax = draw(st.sampled_from(["json", "yaml-flow", "yaml-block"]))
    depth = draw(st.integers(33, 200 if syntax == "yaml-block" else 20_000))
    if syntax == "yaml-block":
        nested = "".join(f"{'  ' * level}a:\n" for level in range(depth)) + "  " * depth + "b: 1\n"
        return ("labels:\n" + "".join("  " + line + "\n" for line in nested.splitlines())).encode()
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a": ', "}")]))
    inner = opener * depth + "1" + closer * depth
    text = as_text(overrides_with(("labels", "team"), HOLE), "json" if syntax == "json" else "yaml")
    return text.replace(f'"{HOLE}"' if syntax == "json" else HOLE, inner).encode()


@st.composite
def odd_encodings(draw: st.DrawFn) -> bytes:
    """The overrides in UTF-16 or UTF-32 (with or without a byte order mark), Latin-1, UTF-8 with a byte that ends
    no character, a NUL, or JSON escapes of a NUL or half a UTF-16 pair."""
    kind = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "bad-byte", "nul",
                                 "nul-escape", "surrogate-escape", "surrogate-key"]))  # fmt: skip
    document = overrides_with(("display_name",), "crème brûlée")
    text = as_text(document, draw(st.sampled_from(["json", "yaml"])))
    if kind in ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1"):
        return text.encode(kind)
    data = text.encode()
    at = draw(st.integers(0, len(data)))
    if kind == "bad-byte":
        return data[:at] + draw(st.sampled_from([b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\x80"])) + data[at:]
    if kind == "nul":
        return data[:at] + b"\x00" + data[at:]
    escape = "\\u0000" if kind == "nul-escape" else "\\ud800"
    if kind == "surrogate-key":
        return json.dumps(overrides_with(("labels",), {HOLE: "x"})).replace(HOLE, escape).encode()
    return json.dumps(overrides_with(("display_name",), HOLE)).replace(HOLE, f"a{escape}b").encode()


hostile_documents = huge_numbers() | deep_nesting() | odd_encodings()


def wire_checked(h: Harness) -> Harness:
    """Every event is also turned into the Pub/Sub message the real publisher sends (functions/cloud/publisher.py):
    a document that decodes into something no UTF-8 encoder writes must be refused before a `rejected` event
    carries it, or publishing that event fails and the delivery with it."""
    publish = h.publisher.publish

    def wire(event: JobEvent) -> str:
        message = to_pubsub_message(event, "test")
        json.dumps({"data": base64.b64encode(message.data).decode(), "attributes": message.attributes})
        return publish(event)

    h.publisher.publish = wire  # type: ignore[method-assign]
    return h


@pytest.fixture(scope="module")
def intake() -> Harness:
    return wire_checked(harness(MemoryGcs(), trigger_rules={RULE: TEMPLATE}))


def now() -> str:
    return datetime.now(UTC).isoformat()


def push(h: Harness, data: bytes) -> tuple[str, list[JobEvent]]:
    """Deliver `data` as a Pub/Sub push message; (what the handler returned, the events about that message)."""
    message_id = uuid.uuid4().hex
    attributes = {"id": message_id, "source": "//pubsub.googleapis.com/projects/p/topics/requests",
                  "type": "google.cloud.pubsub.topic.v1.messagePublished", "time": now()}  # fmt: skip
    body = {"message": {"data": base64.b64encode(data).decode(), "messageId": message_id}}
    returned = handlers.job_request(CloudEvent(attributes, body), h.ctl)
    return returned, [e for e in h.publisher.events if e.trigger and e.trigger.message_id == message_id]


def upload_marker(h: Harness, content: bytes) -> tuple[str, list[JobEvent]]:
    """Write `content` as a marker under the rule and deliver its finalize event; (returned, the marker's events)."""
    name = f"churn/{uuid.uuid4().hex}/_SUCCESS"
    h.gcs.write("data", f"{name.removesuffix('_SUCCESS')}part-0.csv", b"a,y\n1,0\n", 0)
    generation = h.gcs.write("data", name, content, 0)
    attributes = {"id": uuid.uuid4().hex, "source": "//storage.googleapis.com/projects/_/buckets/data",
                  "type": "google.cloud.storage.object.v1.finalized", "time": now()}  # fmt: skip
    data = {"bucket": "data", "name": name, "generation": str(generation), "size": str(len(content))}
    returned = handlers.dataset_upload(CloudEvent(attributes, data), h.ctl)
    return returned, [e for e in h.publisher.events if e.trigger and e.trigger.object == name]


def rejected_once(delivered: tuple[str, list[JobEvent]]) -> list[str]:
    returned, events = delivered
    assert returned == "rejected" and [e.state for e in events] == ["rejected"], (returned, events)
    return events[0].errors


@settings(max_examples=80, deadline=None)
@given(data=hostile_documents)
def test_a_hostile_message_is_rejected_once_never_raised(intake, data):
    """Issue 40, point 3: before, an integer of 4,301 digits or a YAML date that is no day escaped load_document
    as a ValueError (a 500: ten redeliveries, then dead-letter), and a `\\ud800` escape made the `rejected` event
    itself unpublishable."""
    rejected_once(push(intake, data))


@settings(max_examples=80, deadline=None)
@given(content=hostile_documents)
def test_a_hostile_marker_is_rejected_once_never_raised(intake, content):
    """Issue 40, point 3: the same documents as a marker's content (Eventarc retries a 500 for 24 hours: 1,081
    failed deliveries in 18 minutes)."""
    rejected_once(upload_marker(intake, content))


@pytest.mark.parametrize(
    ("label", "data", "says"),
    [
        ("an integer of 4,301 digits", b'{"labels": {"a": ' + b"7" * 4301 + b"}}", "at most 4,300 digits"),
        ("a YAML hexadecimal of 5,000 digits", b"labels: {a: 0x" + b"f" * 5000 + b"}", "at most 4,300 digits"),
        ("a YAML date that is no day", b"display_name: 2026-02-30\n", "day is out of range"),
        ("UTF-16 with its byte order mark", json.dumps(OVERRIDES).encode("utf-16"), "UTF-16 or UTF-32 byte order"),
        ("a JSON escape of half a UTF-16 pair", b'{"display_name": "\\udfff"}', "at display_name: half a UTF-16"),
        ("a JSON escape of a NUL", b'{"display_name": "a\\u0000"}', "display_name: must not contain control"),
    ],
)
def test_each_path_names_what_is_wrong_with_the_document(intake, label, data, says):
    for errors in (rejected_once(push(intake, data)), rejected_once(upload_marker(intake, data))):
        assert any(says in error for error in errors), (label, errors)


@pytest.mark.parametrize("field", ["timeout", "max_pending"])
def test_an_infinite_duration_is_a_field_error(intake, field):
    """A validator's OverflowError (int(inf)) escaped pydantic, which turns only ValueErrors into field errors."""
    request = {"api_version": "trainctl/v1", "request_id": "inf-duration", **TEMPLATE,
               "dataset": {"uri": "gs://data/churn/x/", "target": "y"}}  # fmt: skip
    data = json.dumps(request | {"scheduling": {field: float("inf")}}).encode()
    assert rejected_once(push(intake, data)) == [
        f"scheduling.{field}: a duration may be at most 10,000,000,000 seconds, got inf"
    ]


def test_a_c1_control_in_a_display_name_is_refused_like_a_c0_one(intake):
    """U+009B is CSI to a terminal, as ESC [ is (issue 40, point 6): no longer let through into a name."""
    errors = rejected_once(upload_marker(intake, json.dumps({"display_name": "a\u009b2Jb"}).encode()))
    assert errors == ["display_name: must not contain control characters (newline, tab, NUL, …), got 'a\\x9b2Jb'"]


@pytest.mark.parametrize("size", ["²", "٣", "9" * 5000])
def test_a_marker_event_whose_numbers_are_not_ascii_digits_is_read_as_no_number(intake, size):
    """str.isdigit() takes '²' (which int() refuses) and thousands of digits (which int() refuses past 4,300)."""
    name = f"churn/{uuid.uuid4().hex}/_SUCCESS"
    intake.gcs.write("data", name, b"", 0)
    attributes = {"id": uuid.uuid4().hex, "source": "//storage.googleapis.com/projects/_/buckets/data",
                  "type": "google.cloud.storage.object.v1.finalized", "time": now()}  # fmt: skip
    event = CloudEvent(attributes, {"bucket": "data", "name": name, "generation": size, "size": size})
    assert handlers.dataset_upload(event, intake.ctl) in ("rejected", "ignored", "submitted")


def test_an_event_body_nested_past_the_recursion_limit_is_no_event_of_ours(intake):
    deep = "[" * 100_000 + "]" * 100_000
    attributes = {"id": "deep", "source": "//storage.googleapis.com/projects/_/buckets/data",
                  "type": "google.cloud.storage.object.v1.finalized", "time": now()}  # fmt: skip
    assert handlers.dataset_upload(CloudEvent(attributes, deep), intake.ctl) == "ignored"
    log_line = {"message": {"data": base64.b64encode(deep.encode()).decode(), "messageId": "deep"}}
    assert handlers.job_state(CloudEvent(attributes, log_line), intake.ctl) == "ignored"


def test_a_validator_that_raises_what_pydantic_does_not_wrap_is_still_a_rejection(intake, monkeypatch):
    """pydantic turns a validator's ValueError into a field error and lets a TypeError or OverflowError through:
    such a bug of the schema's must not crash-loop the document that meets it."""

    def broken(value):
        raise TypeError("a bug")

    monkeypatch.setattr("schemas.rules.parse_duration", broken)
    request = {"api_version": "trainctl/v1", "request_id": "bug", **TEMPLATE,
               "dataset": {"uri": "gs://data/churn/x/", "target": "y"}, "scheduling": {"timeout": "1h"}}  # fmt: skip
    [error] = rejected_once(push(intake, json.dumps(request).encode()))
    assert error.startswith("the request cannot be validated (TypeError: a bug); this is a bug of trainctl's schema")
