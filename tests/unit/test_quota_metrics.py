"""The Vertex quota metric of a GPU type and strategy, and the value a QuotaInfo gives a region."""

from __future__ import annotations

from functions.cloud.quotas import limit_of, region_value
from functions.settings import Settings
from local.jobservice.cloud_quotas import quota_id as stand_in_quota_id
from schemas.catalog import ACCELERATORS, GPU_QUOTA_NAMES, quota_id, quota_metric

L4_INFO = {
    "quotaId": "CustomModelTrainingL4GPUsPerProjectPerRegion",
    "metric": "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus",
    "dimensionsInfos": [
        {"dimensions": {"region": "us-central1"}, "details": {"value": "8"}, "applicableLocations": ["us-central1"]},
        {"dimensions": {"region": "europe-west4"}, "details": {}, "applicableLocations": ["europe-west4"]},
        {"details": {"value": "2"}},
    ],
}


def test_each_strategy_names_its_metric():
    """Guards issue 14 item 3: Spot and FLEX_START draw on the preemptible metric, in the JobService's enum names
    and in a request's lower-case strategy alike."""
    on_demand = "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus"
    preemptible = "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_l4_gpus"
    assert quota_metric("NVIDIA_L4") == on_demand
    assert quota_metric("NVIDIA_L4", "standard") == on_demand
    assert quota_metric("NVIDIA_L4", "SPOT") == quota_metric("NVIDIA_L4", "spot") == preemptible
    assert quota_metric("NVIDIA_L4", "FLEX_START") == quota_metric("NVIDIA_L4", "flex_start") == preemptible
    assert quota_metric("NVIDIA_TESLA_A100") == "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
    assert quota_metric("NVIDIA_H100_80GB", "spot") == (
        "aiplatform.googleapis.com/custom_model_training_preemptible_nvidia_h100_gpus"
    )
    assert quota_metric(None) == "aiplatform.googleapis.com/custom_model_training_cpus"


def test_each_gpu_names_the_metric_googles_own_code_uses():
    """Guards issue 25, point 7: the metric words are Google's (Model Garden's quota check), not the AcceleratorType
    names: H200 is nvidia_h200 (not nvidia_h200_141gb), H100 is nvidia_h100, the A3 Mega H100 nvidia_h100_mega."""
    training = "aiplatform.googleapis.com/custom_model_training_"
    assert quota_metric("NVIDIA_H200_141GB") == f"{training}nvidia_h200_gpus"
    assert quota_metric("NVIDIA_H200_141GB", "flex_start") == f"{training}preemptible_nvidia_h200_gpus"
    assert quota_metric("NVIDIA_H100_80GB") == f"{training}nvidia_h100_gpus"
    assert quota_metric("NVIDIA_H100_MEGA_80GB", "spot") == f"{training}preemptible_nvidia_h100_mega_gpus"
    assert quota_metric("NVIDIA_A100_80GB") == f"{training}nvidia_a100_80gb_gpus"
    assert quota_metric("NVIDIA_B200") == f"{training}nvidia_b200_gpus"
    assert quota_metric("NVIDIA_GB200") == f"{training}nvidia_gb200_gpus"
    assert quota_metric("NVIDIA_RTX_PRO_6000") == f"{training}nvidia_rtx_pro_6000_gpus"
    assert set(ACCELERATORS) <= set(GPU_QUOTA_NAMES), "every GPU of the catalog has its quota names"


def test_each_gpu_metric_has_its_cloud_quotas_id():
    """Guards issue 25, point 7: the controller reads a quota by id (quotaInfos/{id}), formed as Google's Model
    Garden forms them: CustomModelTraining[Preemptible]<GPU>PerProjectPerRegion; no id for a metric not in the
    table (the limit is then unknown, not guessed)."""
    assert quota_id(quota_metric("NVIDIA_L4")) == "CustomModelTrainingL4GPUsPerProjectPerRegion"
    assert quota_id(quota_metric("NVIDIA_L4", "spot")) == "CustomModelTrainingPreemptibleL4GPUsPerProjectPerRegion"
    assert quota_id(quota_metric("NVIDIA_A100_80GB")) == "CustomModelTrainingA10080GBGPUsPerProjectPerRegion"
    assert quota_id(quota_metric("NVIDIA_H100_MEGA_80GB")) == "CustomModelTrainingH100MEGAGPUsPerProjectPerRegion"
    assert quota_id(quota_metric("NVIDIA_H200_141GB")) == "CustomModelTrainingH200GPUsPerProjectPerRegion"
    assert quota_id(quota_metric("NVIDIA_RTX_PRO_6000", "flex_start")) == (
        "CustomModelTrainingPreemptibleRTXPRO6000GPUsPerProjectPerRegion"
    )
    assert quota_id("aiplatform.googleapis.com/custom_model_training_nvidia_h200_141gb_gpus") is None
    assert quota_id(quota_metric(None)) is None


def test_the_stand_in_serves_each_gpu_under_the_id_the_controller_asks_for():
    """Guards issue 25, point 7: the local Cloud Quotas derives ids from metrics by its own rule; for every GPU and
    strategy it must land on the catalog's id, or local runs would read nothing the cloud would."""
    for accelerator in GPU_QUOTA_NAMES:
        for strategy in ("standard", "spot"):
            metric = quota_metric(accelerator, strategy)
            assert stand_in_quota_id(metric) == quota_id(metric), metric


def test_a_region_reads_its_own_entry_else_the_default():
    """Guards issue 14 item 3: the region's dimensionsInfos entry wins, the entry without dimensions is the
    default, and `details: {}` is 0 (proto3 JSON leaves zeros out)."""
    assert region_value(L4_INFO, "us-central1") == 8
    assert region_value(L4_INFO, "europe-west4") == 0
    assert region_value(L4_INFO, "asia-east1") == 2
    without_default = {**L4_INFO, "dimensionsInfos": L4_INFO["dimensionsInfos"][:1]}
    assert region_value(without_default, "asia-east1") is None


def test_the_settings_read_the_quotas_endpoint_and_the_allowed_regions():
    """Guards issue 14 item 3: TRAINCTL_ALLOWED_REGIONS (a comma-separated list, as Terraform joins it) and the
    local stack's TRAINCTL_QUOTAS_ENDPOINT reach the settings; unset, only `region` and the real API."""
    required = {"TRAINCTL_PROJECT": "p", "TRAINCTL_CONTROL_BUCKET": "b", "TRAINCTL_EVENTS_TOPIC": "t"}
    required["TRAINCTL_TRAINER_IMAGE"] = "i"
    settings = Settings.from_env(
        {
            **required,
            "TRAINCTL_ALLOWED_REGIONS": "europe-west4, us-east1",
            "TRAINCTL_QUOTAS_ENDPOINT": "http://127.0.0.1:1234",
        }
    )
    assert settings.allowed_regions == ("europe-west4", "us-east1")
    assert settings.quotas_endpoint == "http://127.0.0.1:1234"
    assert (Settings.from_env(required).allowed_regions, Settings.from_env(required).quotas_endpoint) == ((), "")


def test_a_negative_limit_reads_as_no_limit():
    """Guards issue 14 item 3: -1 (Service Usage's unlimited) must not gate every request as if the limit were
    below any job; a region without a value and without a default is unknown, with the reason."""
    unlimited = {"metric": L4_INFO["metric"], "dimensionsInfos": [{"details": {"value": "-1"}}]}
    assert limit_of(unlimited, "us-central1") == (None, "")
    assert limit_of(L4_INFO, "us-central1") == (8, "")
    only_one_region = {**L4_INFO, "dimensionsInfos": L4_INFO["dimensionsInfos"][:1]}
    value, why = limit_of(only_one_region, "asia-east1")
    assert (
        value is None
        and why == "CustomModelTrainingL4GPUsPerProjectPerRegion has no value for asia-east1 and no default"
    )
