"""The acceptance soak of issue 40: 200 hostile documents — huge numbers, deep nesting, odd encodings, escape
sequences, values that made the admission data check backtrack, and stale events — through both intake paths of the
live functions (100 Pub/Sub pushes to on_job_request, 100 markers uploaded to fake-gcs-server and delivered to
on_dataset_upload as Eventarc does), each delivered once.

It ends with 0 redelivery loops — every delivery answered 2xx the first time (a 5xx or a timeout is what Pub/Sub and
Eventarc redeliver, for up to a day) — and every document rejected or dropped exactly once: one `rejected` event per
delivery (counted by its message id, or its marker's object and generation), none for a stale one, and nothing in the
ledger. The data-check documents are rejected with reason `data`: the check reached its end in time.
tests/unit/test_hostile_intake.py sends generated documents of the first three kinds through the handlers in process.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

from local.names import LOCAL_PROJECT
from tests.integration.deployment import FAKE_NODE_IMAGE, TRAINER_STAND_IN, Deployment, EventLog
from tests.integration.test_data_admission import GOOD, PARENT, SCHEMA, TARGET, accuracy, csv_bytes, write

REQUESTS_TOPIC = f"projects/{LOCAL_PROJECT}/topics/it-requests"
MODEL = f"soak-{uuid.uuid4().hex[:8]}"
STALE = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3 * 86400))  # past max_event_age (a day)
KINDS = {"huge number": 20, "deep nesting": 15, "odd encoding": 20, "escape": 20, "backtracking": 15, "stale": 10}


@dataclass
class Document:
    kind: str
    label: str
    data: bytes  # a push's message data, or a marker's content
    dataset: bytes | None = None  # the first data file of its dataset folder (the data check reads it)
    stale: bool = False


# ---- the documents ------------------------------------------------------------------------------------------------


def good_request(request_id: str) -> dict[str, Any]:
    return {
        "api_version": "trainctl/v1",
        "request_id": request_id,
        "display_name": "nightly",
        "dataset": {"uri": "gs://it-data/whatever/", "target": "y"},
        "trainer": {"image": f"{FAKE_NODE_IMAGE}:1", "args": ["--sleep", "0.1"]},
        "resources": {"machine_type": "g2-standard-24"},
    }


# Where a hostile value goes: fields a marker may set too (marker_policy.DEFAULT_MAY_SET), so both paths read it.
PLACES = [("display_name",), ("labels", "team"), ("dataset", "target"), ("trainer", "hyperparameters", "epochs")]
HOLE = "holeb7f3a"


def with_value(document: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    document = json.loads(json.dumps(document))
    inner = document
    for key in path[:-1]:
        inner = inner.setdefault(key, {})
    inner[path[-1]] = value
    return document


def written(document: dict[str, Any], syntax: str, hole: str | None = None) -> bytes:
    """The document as JSON or YAML, with HOLE replaced by `hole` as raw text (a number, a nesting)."""
    text = (
        json.dumps(document, ensure_ascii=False)
        if syntax == "json"
        else yaml.safe_dump(document, allow_unicode=True, width=10**9)
    )
    if hole is not None:
        text = text.replace(f'"{HOLE}"' if syntax == "json" else HOLE, hole)
    return text.encode()


def huge_number(rng: random.Random, base: dict[str, Any]) -> tuple[str, bytes]:
    digits = rng.randint(4301, 20_000)
    form = rng.choice(["json", "yaml", "yaml-negative", "yaml-hex", "yaml-sexagesimal", "in a list", "top level"])
    number = {"yaml-hex": "0x" + "f" * (digits * 5 // 6), "yaml-sexagesimal": "1" + ":59" * (digits * 4 // 7),
              "yaml-negative": "-" + "1" * digits}.get(form, "9" * digits)  # fmt: skip
    if form == "top level":
        return form, number.encode()
    value: Any = [1, HOLE] if form == "in a list" else HOLE
    syntax = "json" if form in ("json", "in a list") else "yaml"
    return form, written(with_value(base, rng.choice(PLACES), value), syntax, number)


def deep_nesting(rng: random.Random, base: dict[str, Any]) -> tuple[str, bytes]:
    form = rng.choice(["json lists", "json mappings", "yaml flow", "yaml block"])
    if form == "yaml block":
        depth = rng.randint(33, 150)
        nested = "".join(f"{'  ' * (level + 1)}a{level}:\n" for level in range(depth)) + "  " * (depth + 1) + "b: 1\n"
        return f"{form} {depth}", written(base, "yaml") + b"nested:\n" + nested.encode()
    opener, closer = ("[", "]") if form != "json mappings" else ('{"a": ', "}")
    depth = rng.randint(33, 60_000 // len(opener + closer))  # up to the size a request may have
    inner = opener * depth + "1" + closer * depth
    return f"{form} {depth}", written(with_value(base, ("labels",), HOLE), "yaml" if "yaml" in form else "json", inner)


def odd_encoding(rng: random.Random, base: dict[str, Any]) -> tuple[str, bytes]:
    form = rng.choice(["utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1", "bad byte", "overlong NUL", "NUL",
                       "NUL escape", "surrogate escape", "surrogate key", "BOM then UTF-16"])  # fmt: skip
    document = with_value(base, ("display_name",), "crème brûlée")
    text = written(document, rng.choice(["json", "yaml"]))
    at = rng.randint(0, len(text))
    if form in ("utf-16", "utf-16-le", "utf-16-be", "utf-32", "latin-1"):
        return form, text.decode().encode(form)
    inserted = {"bad byte": b"\xff", "overlong NUL": b"\xc0\x80", "NUL": b"\x00"}
    if form in inserted:
        return form, text[:at] + inserted[form] + text[at:]
    if form == "BOM then UTF-16":
        return form, b"\xef\xbb\xbf" + text.decode().encode("utf-16-le")
    escape = "\\u0000" if form == "NUL escape" else rng.choice(["\\ud800", "\\udfff", "\\udbff"])
    path = ("labels", HOLE) if form == "surrogate key" else ("display_name",)
    return form, json.dumps(with_value(base, path, "x" if form == "surrogate key" else f"a{HOLE}b")).replace(
        HOLE, escape
    ).encode()


ESCAPES = ["\x1b[2J\x1b[H", "\x1b]0;owned\x07", "\x1b[31mred\x1b[0m", "\u009b2J", "\r\x1b[K", "\x1b[8m", "\x07\x08"]


def escape(rng: random.Random, base: dict[str, Any]) -> tuple[str, bytes]:
    sequence = rng.choice(ESCAPES)
    form = rng.choice(["display name", "label value", "label key", "target", "unknown field", "request id"])
    path = {"display name": ("display_name",), "label value": ("labels", "team"), "label key": ("labels", sequence),
            "target": ("dataset", "target"), "unknown field": (f"x{sequence}",),
            "request id": ("request_id",)}[form]  # fmt: skip
    return f"{form} {sequence!r}", written(with_value(base, path, f"a{sequence}b"), rng.choice(["json", "yaml"]))


def backtracking_value(rng: random.Random) -> bytes:
    """A CSV whose champion feature `plan` is gone and whose `age` holds a value the old double pattern took
    minutes over: the data check must read it in one pass and reject the request for the missing column."""
    long = rng.choice(["1" * 60_000 + "x", "1" * 60_000 + "e", "." + "1" * 60_000 + "e+", "9" * 60_000 + "."])
    return f"age,active,{TARGET}\n{long},true,0\n34,false,1\n".encode()


def documents(path: str, rng: random.Random) -> list[Document]:
    """KINDS' counts of hostile documents for one intake path ("push" or "marker")."""
    made: list[Document] = []
    for kind, count in KINDS.items():
        for index in range(count):
            base: dict[str, Any] = (
                good_request(f"soak-{path}-{kind.replace(' ', '-')}-{index}")
                if path == "push"
                else {"display_name": "nightly", "labels": {"team": "red"}}
            )
            if kind == "backtracking":
                request = {"labels": {"soak": str(index)}} if path == "marker" else None
                made.append(Document(kind, "CSV value", json.dumps(request).encode() if request else b"",
                                     dataset=backtracking_value(rng)))  # fmt: skip
                continue
            if kind == "stale":
                label, data = rng.choice([huge_number, deep_nesting, odd_encoding, escape])(rng, base)
                made.append(Document(kind, label, data, stale=True))
                continue
            label, data = {"huge number": huge_number, "deep nesting": deep_nesting, "odd encoding": odd_encoding,
                           "escape": escape}[kind](rng, base)  # fmt: skip
            made.append(Document(kind, label, data))
    assert all(len(d.data) <= 64 * 1024 for d in made)  # within max_request_bytes: each is read, not refused unread
    return made


# ---- the deployment -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def soak_deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    """Markers under hostile/ make fake-node requests; under redos/, built-in requests for MODEL, whose champion
    has a schema: the data check runs on each such marker's folder."""
    deployed = Deployment(uuid.uuid4().hex[:8], jobservice.rest_url)
    fake_node = {"dataset": {"target": "y"}, "trainer": {"image": f"{FAKE_NODE_IMAGE}:1", "args": ["--sleep", "0.1"]},
                 "resources": {"machine_type": "g2-standard-24"}}  # fmt: skip
    builtin = {"dataset": {"target": TARGET}, "trainer": {"builtin": "tabular"},
               "resources": {"machine_type": "g2-standard-24"}, "model": {"name": MODEL}}  # fmt: skip
    rules = {f"gs://{deployed.data_bucket}/hostile/": fake_node, f"gs://{deployed.data_bucket}/redos/": builtin}
    try:
        deployed.create(
            tmp_path_factory.mktemp("functions"),
            TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN,
            TRAINCTL_TRIGGER_RULES=json.dumps(rules),
        )
        yield deployed
    finally:
        deployed.stop()


@pytest.fixture(scope="module")
def champion(soak_deployment: Deployment, registry: ModelServiceClient) -> None:
    """MODEL's champion, trained on GOOD, with its schema.json beside it (as tests/integration/test_data_admission)."""
    deployment = soak_deployment
    events = deployment.events()
    folder = "champion/"
    deployment.upload(f"{folder}part-0.csv", csv_bytes(GOOD))
    deployment.upload(f"{folder}fake-node-args", "\n".join(["--metrics", accuracy(0.8)]))
    request = {"api_version": "trainctl/v1", "request_id": "soak-champion", "trainer": {"builtin": "tabular"},
               "dataset": {"uri": f"gs://{deployment.data_bucket}/{folder}", "target": TARGET},
               "resources": {"machine_type": "g2-standard-24"}, "model": {"name": MODEL}}  # fmt: skip
    assert deployment.request(request) == 200
    events.wait_for("soak-champion", "promoted", act=deployment.reconcile, timeout=90)
    version = registry.get_model(name=f"{PARENT}/models/{MODEL}@champion")
    write(deployment, version.artifact_uri.rstrip("/") + "/schema.json", json.dumps(SCHEMA))


# ---- delivering -----------------------------------------------------------------------------------------------------


@dataclass
class Delivered:
    document: Document
    status: int
    about: Callable[[Any], bool]  # whether an event is about this delivery


def push(deployment: Deployment, document: Document, index: int) -> Delivered:
    message_id = f"soak-{index}-{uuid.uuid4().hex[:8]}"
    data = document.data
    if document.dataset is not None:
        folder = f"redos/push-{index}/"
        deployment.upload(f"{folder}part-0.csv", document.dataset)
        request = {"api_version": "trainctl/v1", "request_id": f"soak-redos-{index}", "trainer": {"builtin": "tabular"},
                   "dataset": {"uri": f"gs://{deployment.data_bucket}/{folder}", "target": TARGET},
                   "resources": {"machine_type": "g2-standard-24"}, "model": {"name": MODEL}}  # fmt: skip
        data = json.dumps(request).encode()
    headers, body = deployment.push_body(data, message_id)
    if document.stale:
        envelope = json.loads(body)
        envelope["message"]["publishTime"] = STALE
        body = json.dumps(envelope).encode()
    status = deployment.post("on_job_request", (headers, body), REQUESTS_TOPIC)
    return Delivered(document, status, lambda e: e.trigger is not None and e.trigger.message_id == message_id)


def upload_marker(deployment: Deployment, document: Document, index: int) -> Delivered:
    folder = f"redos/marker-{index}/" if document.dataset is not None else f"hostile/marker-{index}/"
    deployment.upload(f"{folder}part-0.csv", document.dataset if document.dataset is not None else b"a,y\n1,0\n")
    blob = deployment.upload(f"{folder}_SUCCESS", document.data)
    headers, body = deployment.storage_event(blob)
    if document.stale:
        headers["ce-time"] = STALE
    status = deployment.post("on_dataset_upload", (headers, body))
    name, generation = blob.name, str(blob.generation)
    return Delivered(
        document,
        status,
        lambda e: e.trigger is not None and e.trigger.object == name and e.trigger.generation == generation,
    )


def test_200_hostile_documents_through_both_paths_are_each_rejected_or_dropped_once(soak_deployment, champion):
    """Issue 40, acceptance: 0 redelivery loops; every document rejected or dropped exactly once."""
    deployment = soak_deployment
    rng = random.Random(40)
    log = EventLog(deployment.events_topic)
    held_before = deployment.requests_held()
    delivered = [push(deployment, d, i) for i, d in enumerate(documents("push", rng))]
    delivered += [upload_marker(deployment, d, i) for i, d in enumerate(documents("marker", rng))]
    assert len(delivered) == 200

    loops = [(d.document.kind, d.document.label, d.status) for d in delivered if not 200 <= d.status < 300]
    assert loops == [], "answered other than 2xx: redelivered"

    events = [event for event, _ in log.drain()]
    outcomes = Counter()
    for d in delivered:
        mine = [e for e in events if d.about(e)]
        expected = [] if d.document.stale else ["rejected"]
        assert [e.state for e in mine] == expected, (d.document.kind, d.document.label, mine)
        if d.document.kind == "backtracking":
            assert mine[0].reason == "data", mine[0]
            assert "dataset: column 'plan' is missing (a feature of the champion)" in mine[0].errors
        outcomes["dropped" if d.document.stale else "rejected"] += 1
    assert outcomes == {"rejected": 180, "dropped": 20}
    assert deployment.requests_held() == held_before  # nothing of them claimed
