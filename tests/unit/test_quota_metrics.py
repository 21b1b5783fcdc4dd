"""The Vertex quota metric of a GPU type and strategy, and the value a QuotaInfo gives a region."""

from __future__ import annotations

from functions.quotas import limit_in, region_value
from functions.settings import Settings
from schemas.catalog import quota_metric

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
    below any job; a metric not listed is unknown, with the reason."""
    unlimited = {"metric": L4_INFO["metric"], "dimensionsInfos": [{"details": {"value": "-1"}}]}
    assert limit_in([unlimited], L4_INFO["metric"], "us-central1") == (None, "")
    assert limit_in([L4_INFO], L4_INFO["metric"], "us-central1") == (8, "")
    value, why = limit_in([L4_INFO], "aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus", "us-central1")
    assert value is None and "lists no aiplatform.googleapis.com/custom_model_training_nvidia_t4_gpus" in why
