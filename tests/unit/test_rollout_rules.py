"""Issue 41: the pure parts of a rollout — the deploy block's rules, the ids that make a repeated step find the first,
the bake's limits, and a request that may not choose the model's rollout."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from functions.cloud.endpoints import numeric_id
from functions.ledger.model_charter import deploy_disagreement
from functions.models.rollout import limits_broken
from schemas.events import ServingFigures
from schemas.request import DeployBlock, ModelBlock

NOW = datetime(2026, 11, 27, 12, tzinfo=UTC)


def figures(requests: int, errors: int, p99: float | None = None) -> ServingFigures:
    rate = errors / requests if requests else None
    return ServingFigures(requests=requests, errors=errors, error_rate=rate, p99_ms=p99, since=NOW, until=NOW)


def test_the_deploy_block_names_each_broken_field():
    block = DeployBlock(endpoint="churn-online", bake="15m")
    assert (block.bake, block.canary_percent, block.max_error_rate) == (900, 10, 0.01)
    with pytest.raises(ValidationError, match=r"max_replicas: must be at least min_replicas \(3\)"):
        DeployBlock(endpoint="e", min_replicas=3, max_replicas=2)
    with pytest.raises(ValidationError, match="accelerator_count: is set with accelerator_type"):
        DeployBlock(endpoint="e", accelerator_count=1)
    with pytest.raises(ValidationError, match="canary_percent"):
        DeployBlock(endpoint="e", canary_percent=100)
    with pytest.raises(ValidationError, match="endpoint"):
        DeployBlock(endpoint="Not A Name")


def test_ids_are_digits_vertex_accepts_and_the_same_parts_give_the_same_id():
    first = numeric_id("bucket", "churn-online")
    assert first == numeric_id("bucket", "churn-online") and first != numeric_id("bucket", "other")
    assert len(first) == 10 and first.isdigit() and first[0] != "0"


def test_the_bake_breaks_on_errors_or_latency_and_holds_otherwise():
    deploy = DeployBlock(endpoint="e", max_error_rate=0.05, max_p99_ms=200)
    assert limits_broken(figures(100, 5, 150.0), deploy) is None, "at the limit is within it"
    reason, why = limits_broken(figures(100, 6, 150.0), deploy) or ("", "")
    assert reason == "errors" and "6 of 100" in why
    assert (limits_broken(figures(100, 0, 250.0), deploy) or ("",))[0] == "latency"
    assert limits_broken(figures(0, 0), deploy) is None, "no requests: nothing broken (min_requests decides)"
    assert limits_broken(figures(100, 0, 10_000.0), DeployBlock(endpoint="e")) is None, "no p99 limit set"


def test_a_request_may_repeat_the_models_rollout_but_not_choose_another():
    mine = DeployBlock(endpoint="churn-online")
    assert deploy_disagreement(ModelBlock(name="churn"), mine) == [], "left out: the model's applies"
    assert deploy_disagreement(ModelBlock(name="churn", deploy=mine), mine) == []
    (error,) = deploy_disagreement(ModelBlock(name="churn", deploy={"endpoint": "other"}), mine)
    assert error.startswith("model.deploy:") and "trainctl models deploy churn" in error
    assert deploy_disagreement(ModelBlock(name="churn", deploy=mine), None), "a model that is not served"
