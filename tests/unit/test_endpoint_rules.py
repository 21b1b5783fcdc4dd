"""The local EndpointService's traffic-split rules (endpoint_rules.py), without processes: DeployModel's split
overwrites the endpoint's when given ("0" naming the model being deployed), leaves it when not (the first model of an
endpoint takes all traffic), UndeployModel refuses to leave traffic on the model it removes, and a request goes to
the deployed models in the split's proportions."""

from __future__ import annotations

import random
from collections import Counter

import grpc
import pytest

from local.jobservice.endpoint_rules import (
    choose_deployed_model,
    endpoint_id_problem,
    split_after_deploy,
    split_after_undeploy,
    split_problems,
    update_mask_problems,
)
from local.jobservice.model_rules import RegistryError


def test_a_deploy_split_overwrites_the_endpoints_and_zero_names_the_model_being_deployed():
    assert split_after_deploy({"111": 100}, {"111": 90, "0": 10}, ["111"], "222") == {"111": 90, "222": 10}
    assert split_after_deploy({"111": 100}, {"0": 100}, ["111"], "222") == {"222": 100}


def test_a_deploy_without_a_split_leaves_it_unless_the_endpoint_had_no_model():
    assert split_after_deploy({"111": 100}, {}, ["111"], "222") == {"111": 100}
    assert split_after_deploy({}, {}, [], "222") == {"222": 100}


@pytest.mark.parametrize(
    "requested, field",
    [
        ({"111": 50, "0": 40}, "traffic_split"),  # adds up to 90
        ({"999": 50, "0": 50}, "traffic_split[999]"),  # no such deployed model
        ({"111": 120, "0": -20}, "traffic_split[0]"),  # not a percentage
    ],
)
def test_a_deploy_split_that_does_not_add_up_or_names_an_unknown_model_is_refused(requested, field):
    with pytest.raises(RegistryError) as refused:
        split_after_deploy({"111": 100}, requested, ["111"], "222")
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in [violation[0] for violation in refused.value.violations]


def test_undeploying_a_model_that_still_has_traffic_needs_a_split_that_takes_it_away():
    with pytest.raises(RegistryError) as refused:
        split_after_undeploy({"111": 90, "222": 10}, {}, ["111", "222"], "222")
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert split_after_undeploy({"111": 90, "222": 10}, {"111": 100}, ["111", "222"], "222") == {"111": 100}
    with pytest.raises(RegistryError):  # the new split may not name the model being removed
        split_after_undeploy({"111": 90, "222": 10}, {"111": 90, "222": 10}, ["111", "222"], "222")


def test_undeploying_a_model_without_traffic_keeps_the_split_and_the_last_model_empties_it():
    assert split_after_undeploy({"111": 100, "222": 0}, {}, ["111", "222"], "222") == {"111": 100}
    assert split_after_undeploy({"111": 100}, {}, ["111"], "111") == {}


def test_requests_go_to_the_deployed_models_in_the_splits_proportions_and_nowhere_without_one():
    draw = random.Random(7)
    counts = Counter(choose_deployed_model({"111": 80, "222": 20, "333": 0}, draw) for _ in range(2000))
    assert set(counts) == {"111", "222"}
    assert 0.75 < counts["111"] / 2000 < 0.85
    assert choose_deployed_model({}, draw) is None


def test_an_endpoint_split_must_add_up_to_100_or_be_empty_and_ids_and_masks_are_checked():
    assert split_problems("endpoint.traffic_split", {}, []) == []
    assert split_problems("endpoint.traffic_split", {"1": 50, "2": 50}, ["1", "2"]) == []
    assert split_problems("endpoint.traffic_split", {"1": 50}, ["1"])[0][0] == "endpoint.traffic_split"
    assert endpoint_id_problem("canary-1") is None and endpoint_id_problem("123") is None
    assert endpoint_id_problem("-bad")[0] == "endpoint_id"  # type: ignore[index]
    assert update_mask_problems([])[0][0] == "update_mask"
    assert update_mask_problems(["traffic_split", "display_name"]) == []
    assert update_mask_problems(["deployed_models"])[0][0] == "update_mask"


def test_a_callers_deployed_model_id_is_1_to_10_digits():
    from local.jobservice.endpoint_rules import deployed_model_id_problem

    assert deployed_model_id_problem("") is None, "left out: the service chooses one"
    assert deployed_model_id_problem("1234567890") is None
    assert deployed_model_id_problem("12345678901") == ("deployed_model.id", "must be 1-10 digits, got '12345678901'")
    assert deployed_model_id_problem("abc") is not None
