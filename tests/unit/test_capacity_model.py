"""The local JobService's capacity model: the file it is loaded from, and its admission rule."""

from __future__ import annotations

import json

import pytest

from local.jobservice.capacity import ALWAYS, CapacityError, CapacityModel, load_capacity, parse_capacity
from local.jobservice.cloud_quotas import quota_id, quota_infos

L4 = "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
SPOT_L4 = "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_l4_gpus"
A100 = "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"

YAML = """
regions:
  us-central1:
    quotas:
      custom_model_training_nvidia_l4_gpus: 8
      aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_l4_gpus: 4
    machines:
      - machine_type: g2-standard-24
        strategy: spot
        stockouts: 4
        preempt_after: 20s
      - machine_type: a2-highgpu-8g
        stockouts: always
  europe-west4:
    quotas:
      custom_model_training_nvidia_l4_gpus: 0
"""


@pytest.fixture
def model(tmp_path) -> CapacityModel:
    path = tmp_path / "capacity.yaml"
    path.write_text(YAML)
    return load_capacity(path)


def test_a_yaml_file_gives_limits_per_region_and_full_metric(model):
    """Guards issue 14 item 4: short and full metric names, per region; unlisted means unlimited."""
    assert model.limit("us-central1", L4) == 8
    assert model.limit("us-central1", SPOT_L4) == 4
    assert model.limit("europe-west4", L4) == 0
    assert model.limit("us-central1", A100) is None
    assert model.limit("asia-east1", L4) is None


def test_a_json_file_reads_the_same(tmp_path, model):
    path = tmp_path / "capacity.json"
    path.write_text(json.dumps({"regions": {"us-central1": {"quotas": {"custom_model_training_nvidia_l4_gpus": 8}}}}))
    assert load_capacity(path).limit("us-central1", L4) == 8


def test_the_first_matching_machine_rule_wins_and_omitted_fields_match_anything(model):
    """Guards issue 14 item 4: rules by machine type and strategy (either spelling), "always" stockouts."""
    spot = model.machine_rule("us-central1", "g2-standard-24", "SPOT")
    assert (spot.stockouts, spot.preempt_after) == (4, 20.0)
    assert model.machine_rule("us-central1", "g2-standard-24", "spot") == spot
    assert model.machine_rule("us-central1", "g2-standard-24", "STRATEGY_UNSPECIFIED").stockouts == 0
    assert model.machine_rule("us-central1", "a2-highgpu-8g", "FLEX_START").stockouts == ALWAYS
    assert model.machine_rule("europe-west4", "g2-standard-24", "SPOT").stockouts == 0


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ({"region": {}}, "'region'"),
        ({"regions": {"us-central1": {"quota": {}}}}, "regions.us-central1: unknown key 'quota'"),
        ({"regions": {"r": {"machines": [{"machine": "x"}]}}}, "regions.r.machines[0]: unknown key 'machine'"),
        ({"regions": {"r": {"machines": [{"strategy": "preemptible"}]}}}, "regions.r.machines[0].strategy"),
        ({"regions": {"r": {"machines": [{"stockouts": "often"}]}}}, "regions.r.machines[0].stockouts"),
        ({"regions": {"r": {"machines": [{"preempt_after": "soon"}]}}}, "regions.r.machines[0].preempt_after"),
        ({"regions": {"r": {"quotas": {"custom_model_training_nvidia_l4_gpus": -1}}}}, "regions.r.quotas.custom"),
    ],
)
def test_a_wrong_key_or_value_is_named(document, named):
    """Guards issue 14 item 4: unknown keys are an error naming the key."""
    with pytest.raises(CapacityError, match=named.replace("[", r"\[").replace("]", r"\]")):
        parse_capacity(document)


def test_a_job_fits_beside_the_held_gpus_and_behind_earlier_waiters(model):
    """Guards issue 14 item 4: held + demand ≤ limit, and the queue is first come, first served per metric."""
    assert model.admits("us-central1", {L4: 8}, {}, [])
    assert not model.admits("us-central1", {L4: 8}, {L4: 2}, [])
    assert model.admits("us-central1", {L4: 6}, {L4: 2}, [])
    assert not model.admits("us-central1", {L4: 2}, {}, [{L4: 8}])  # an earlier job waits on L4
    assert model.admits("us-central1", {L4: 2}, {}, [{A100: 8}])  # other metrics do not hold it back
    assert model.admits("us-central1", {A100: 64}, {A100: 64}, [])  # no limit on A100 here
    assert model.admits("europe-west1", {L4: 64}, {}, [])  # a region without a model


def test_a_job_larger_than_the_limit_never_fits(model):
    assert model.never_fits("us-central1", {L4: 16, SPOT_L4: 2}) == [L4]
    assert model.never_fits("europe-west4", {L4: 1}) == [L4]
    assert model.never_fits("us-central1", {L4: 8}) == []


def test_the_stand_in_serves_one_quota_info_per_metric_with_its_regions(model):
    """Guards issue 14 item 4: the QuotaInfo shape, 0 as details:{}, and quota ids formed as Vertex's are."""
    assert quota_id(L4) == "CustomModelTrainingL4GPUsPerProjectPerRegion"
    assert quota_id(SPOT_L4) == "CustomModelTrainingPreemptibleL4GPUsPerProjectPerRegion"
    assert quota_id("aiplatform.googleapis.com/custom_model_training_nvidia_a100_80gb_gpus") == (
        "CustomModelTrainingA10080GBGPUsPerProjectPerRegion"
    )
    infos = {info["metric"]: info for info in quota_infos(model)}
    assert infos[L4]["dimensions"] == ["region"]
    assert infos[L4]["service"] == "aiplatform.googleapis.com"
    assert infos[L4]["dimensionsInfos"] == [
        {"dimensions": {"region": "europe-west4"}, "details": {}, "applicableLocations": ["europe-west4"]},
        {"dimensions": {"region": "us-central1"}, "details": {"value": "8"}, "applicableLocations": ["us-central1"]},
    ]


def test_default_quotas_apply_where_a_region_sets_none(model):
    """Guards issue 14 item 4: the model's defaults, served as the dimensionsInfos entry without dimensions, which
    lists the regions it applies to (issue 25 point 7: DimensionsInfo.applicable_locations)."""
    with_default = parse_capacity(
        {
            "default_quotas": {"custom_model_training_nvidia_l4_gpus": 2},
            "regions": {"us-central1": {"quotas": {"custom_model_training_nvidia_l4_gpus": 8}}},
        }
    )
    assert with_default.limit("asia-east1", L4) == 2
    (info,) = quota_infos(with_default)
    own, default = info["dimensionsInfos"]
    assert own == {
        "dimensions": {"region": "us-central1"},
        "details": {"value": "8"},
        "applicableLocations": ["us-central1"],
    }
    assert default["details"] == {"value": "2"} and "dimensions" not in default
    assert "asia-east1" in default["applicableLocations"] and "us-central1" not in default["applicableLocations"]
