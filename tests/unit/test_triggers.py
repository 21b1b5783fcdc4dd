"""Trigger rules: markers only, longest prefix wins, overrides merge, the folder is the dataset."""

from __future__ import annotations

import dataclasses

from functions.intake.triggers import (
    DERIVED_ID_PREFIX,
    derive_request_id,
    explicit_id_problem,
    is_marker,
    is_score_marker,
    marker_request,
    matching_rule,
)
from schemas.errors import parse_request
from tests.unit.conftest import BASE_REQUEST


def test_only_marker_basenames_start_work(settings):
    assert is_marker(settings, "churn/2026-11-22/_SUCCESS")
    assert not is_marker(settings, "churn/2026-11-22/part-0001.csv")
    assert not is_marker(settings, "churn/_SUCCESS/part.csv")
    custom = dataclasses.replace(settings, marker_names=("READY", "_DONE"))
    assert is_marker(custom, "a/READY") and not is_marker(custom, "a/_SUCCESS")


def test_a_scoring_marker_is_a_marker_that_scores(settings):
    """`_SCORE` (score_marker_names) starts batch scoring (functions/models/scoring.py), not training; a name in both
    lists scores."""
    assert is_marker(settings, "churn/day/_SCORE") and is_score_marker(settings, "churn/day/_SCORE")
    assert not is_score_marker(settings, "churn/day/_SUCCESS") and not is_score_marker(settings, "churn/_SCORE/x.csv")
    both = dataclasses.replace(settings, score_marker_names=("_SUCCESS",))
    assert is_score_marker(both, "churn/day/_SUCCESS")


def test_longest_matching_prefix_wins(settings):
    s = dataclasses.replace(
        settings, trigger_rules={"gs://data/": {}, "gs://data/churn/": {}, "gs://data/churn/eu/": {}, "gs://other/": {}}
    )
    assert matching_rule(s, "data", "churn/eu/2026/_SUCCESS") == "gs://data/churn/eu/"
    assert matching_rule(s, "data", "churn/us/_SUCCESS") == "gs://data/churn/"
    assert matching_rule(s, "data", "x/_SUCCESS") == "gs://data/"
    assert matching_rule(s, "nobody", "x/_SUCCESS") is None


def test_derived_request_ids_are_valid_deterministic_and_distinct_per_generation():
    first = derive_request_id("churn/2026-11-22/_SUCCESS", "1795305303570685")
    assert first == "gcs.churn-2026-11-22-1795305303570685"
    assert first == derive_request_id("churn/2026-11-22/_SUCCESS", "1795305303570685")
    assert first != derive_request_id("churn/2026-11-22/_SUCCESS", "1795305303570686")
    long = derive_request_id("A/" * 200 + "_SUCCESS", "1795305303570685")
    assert len(long) == 128 and long.startswith("gcs.a-") and long.endswith("-1795305303570685")
    assert derive_request_id("_SUCCESS", "7") == "gcs.root-7"
    assert derive_request_id("-/_SUCCESS", "7") == "gcs.data-7"
    for name in ("churn/2026-11-22/_SUCCESS", "A/" * 200 + "_SUCCESS", "_SUCCESS", "Ünïcode dir/_SUCCESS"):
        assert parse_request(dict(BASE_REQUEST, request_id=derive_request_id(name, "1795305303570685")))


def test_derived_ids_and_explicit_ids_are_disjoint():
    """Guards issue 24, point 7: a marker's derived id starts with `gcs.`, which no explicit id (Pub/Sub, or a
    marker naming its own) may use; before, `churn-d1-42` was both a marker's id and a valid Pub/Sub id."""
    derived = derive_request_id("churn/d1/_SUCCESS", "42")
    assert derived.startswith(DERIVED_ID_PREFIX)
    problem = explicit_id_problem(derived)
    assert problem is not None and "'gcs.'" in problem and "reserved" in problem
    assert explicit_id_problem("churn-d1-42") is None  # the old derived form is an ordinary id, in its own folder
    assert explicit_id_problem("gcs-churn") is None and explicit_id_problem("my.gcs.run") is None


def test_marker_request_merges_overrides_and_sets_the_dataset_folder():
    template = {
        "dataset": {"target": "churned", "uri": "gs://ignored/"},
        "trainer": {"builtin": "tabular", "hyperparameters": {"epochs": 5, "batch_size": 64}},
        "resources": {"machine_type": "a2-highgpu-2g"},
    }
    overrides = {"trainer": {"hyperparameters": {"epochs": 9}}}
    document, explicit = marker_request(template, overrides, "data", "churn/d1/_SUCCESS", "42")
    assert not explicit
    request = parse_request(document)
    assert request.dataset.uri == "gs://data/churn/d1/"
    assert request.trainer.hyperparameters.epochs == 9
    assert request.trainer.hyperparameters.batch_size == 64
    assert request.request_id == "gcs.churn-d1-42"
    assert template["trainer"]["hyperparameters"]["epochs"] == 5  # the template is not modified


def test_a_marker_may_name_its_request_id():
    document, explicit = marker_request({}, {"request_id": "my-run"}, "data", "x/_SUCCESS", "1")
    assert explicit and document["request_id"] == "my-run"
