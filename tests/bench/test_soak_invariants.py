"""The soak's model invariants read the labels the controller writes (a rename of the key label once made every
version look like one request's, so the soak reported duplicates that did not exist)."""

from __future__ import annotations

from types import SimpleNamespace

from bench.soak import model_invariants
from functions.model_versions import version_labels
from tests.unit.conftest import make_record, make_request

REQUEST = make_request(model={"name": "churn"}).model_dump(mode="json")


def version(key_hash: str) -> SimpleNamespace:
    """A registry version as the controller labels it (ListModelVersions gives its labels)."""
    labels = version_labels(make_record(key_hash=key_hash, request=REQUEST), "img")
    return SimpleNamespace(labels=labels, version_aliases=[])


def test_versions_of_different_requests_are_not_counted_as_one_requests_twice():
    assert (
        model_invariants([], {"churn": [version("a"), version("b")]}, set())["registry versions of one request twice"]
        == 0
    )
    assert (
        model_invariants([], {"churn": [version("a"), version("a"), version("b")]}, set())[
            "registry versions of one request twice"
        ]
        == 1
    )
