"""The rest of aiplatform.googleapis.com's QuotaInfos: what the Cloud Quotas stand-in lists beside the capacity
model's training-GPU limits, so that a listing is as long as a real project's (request rates, serving and
restricted-image GPUs, TPUs, CPUs per machine family, and generative-AI quotas per base model), many pages of
quotas the controller never needs.

The ids, metrics and display names are shaped as Vertex's are (CamelCase ids ending PerProjectPerRegion, a
`region` dimension whose default entry lists the regions it applies to, `base_model` for per-model quotas) but
are made up here, apart from the GPU words (schemas/catalog.py); the real count is not published (local/
FIDELITY.md). Deterministic: the same listing on every run.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from functools import cache

from schemas.catalog import GPU_QUOTA_NAMES, QUOTA_SERVICE

# Regions Vertex AI serves (https://cloud.google.com/vertex-ai/docs/general/locations), for applicableLocations.
VERTEX_REGIONS = (
    "africa-south1",
    "asia-east1",
    "asia-east2",
    "asia-northeast1",
    "asia-northeast2",
    "asia-northeast3",
    "asia-south1",
    "asia-southeast1",
    "asia-southeast2",
    "australia-southeast1",
    "australia-southeast2",
    "europe-central2",
    "europe-north1",
    "europe-southwest1",
    "europe-west1",
    "europe-west2",
    "europe-west3",
    "europe-west4",
    "europe-west6",
    "europe-west8",
    "europe-west9",
    "europe-west12",
    "me-central1",
    "me-central2",
    "me-west1",
    "northamerica-northeast1",
    "northamerica-northeast2",
    "southamerica-east1",
    "southamerica-west1",
    "us-central1",
    "us-east1",
    "us-east4",
    "us-east5",
    "us-south1",
    "us-west1",
    "us-west2",
    "us-west3",
    "us-west4",
)
REQUEST_QUOTA_URI = "https://console.cloud.google.com/iam-admin/quotas"

# (id stem, metric, display name, default per minute)
_REQUEST_RATES = (
    ("ResourceManagementRequests", "resource_management_requests", "Resource management (CRUD) requests", 600),
    ("JobSubmissionRequests", "job_submission_requests", "Job or LRO submission requests", 60),
    ("OnlinePredictionRequests", "online_prediction_requests", "Online prediction requests", 30000),
    ("OnlinePredictionRequestThroughput", "online_prediction_request_throughput", "Online prediction bytes", 1500),
    ("OnlineExplainRequests", "online_explain_requests", "Online explain requests", 600),
    ("TensorboardTimeSeriesReadRequests", "tensorboard_time_series_read_requests", "TensorBoard reads", 60000),
    ("MetadataRequests", "ml_metadata_requests", "ML Metadata (CRUD) requests", 12000),
    ("VizierRequests", "vizier_requests", "Vertex AI Vizier (CRUD) requests", 6000),
    ("FeaturestoreOnlineServingRequests", "featurestore_online_serving_requests", "Feature Store serving", 300000),
    ("CountTokensRequests", "count_tokens_requests", "Count or compute tokens requests", 3000),
    ("GenerativeAiCacheRequests", "generative_ai_cache_requests", "Generative AI cache (CRUD) requests", 200),
    ("VectorSearchRequests", "vector_search_requests", "Vector Search requests", 6000),
)
_TPUS = ("V2TPUs", "V3TPUs", "V4TPUs", "V5ETPU", "V5PTPUs", "V6ETPU", "7XTPU")
_CPU_FAMILIES = ("N1", "N2", "N2D", "E2", "C2", "C2D", "C3", "C4", "A2", "A3", "A4", "G2", "G4", "M1")
_BASE_MODELS = tuple(
    f"{family}-{version}"
    for family, versions in (
        ("gemini", ("1.0-pro", "1.5-flash", "1.5-pro", "2.0-flash", "2.0-flash-lite", "2.5-flash", "2.5-pro")),
        ("gemini", ("2.5-flash-lite", "2.5-flash-image", "3.0-flash", "3.0-pro", "embedding-001")),
        ("claude", ("3-haiku", "3-5-haiku", "3-5-sonnet", "3-7-sonnet", "sonnet-4", "opus-4", "opus-4-1")),
        ("llama", ("3.1-8b", "3.1-70b", "3.1-405b", "3.2-90b-vision", "3.3-70b", "4-scout", "4-maverick")),
        ("mistral", ("large-2411", "small-2503", "codestral-2501", "ocr-2505")),
        ("imagen", ("3.0-generate", "3.0-fast-generate", "4.0-generate", "4.0-ultra-generate")),
        ("veo", ("2.0-generate", "3.0-generate", "3.0-fast-generate")),
        ("text-embedding", ("004", "005", "multilingual-002")),
        ("deepseek", ("r1", "v3", "v3.1")),
        ("qwen", ("3-235b", "3-coder-480b")),
        ("gpt-oss", ("20b", "120b")),
        ("jamba", ("1.5-large", "1.5-mini")),
    )
    for version in versions
)
# (id stem, metric suffix, display, default): one quota per base model and kind.
_PER_MODEL = (
    ("RequestsPerMinute", "requests_per_minute", "requests per minute", 60),
    ("InputTokensPerMinute", "input_tokens_per_minute", "input tokens per minute", 400000),
    ("OutputTokensPerMinute", "output_tokens_per_minute", "output tokens per minute", 40000),
    ("BatchPredictionConcurrentJobs", "batch_prediction_concurrent_jobs", "concurrent batch prediction jobs", 4),
    ("TuningConcurrentJobs", "tuning_concurrent_jobs", "concurrent tuning jobs", 2),
    ("ProvisionedThroughputUnits", "provisioned_throughput_units", "provisioned throughput units", 0),
)


@cache
def other_quota_infos() -> tuple[dict, ...]:
    """Every QuotaInfo of the listing but the training-GPU ones, each without its resource name."""
    return tuple(_request_rates()) + tuple(_concurrent()) + tuple(_per_model()) + tuple(_shared_per_model())


def _request_rates() -> Iterator[dict]:
    for stem, metric, display, per_minute in _REQUEST_RATES:
        yield _info(f"{stem}PerMinutePerProjectPerRegion", metric, display, per_minute, unit="1/min/{project}/{region}")


def _concurrent() -> Iterator[dict]:
    for names in GPU_QUOTA_NAMES.values():
        word, metric_word = names.id_word, f"{names.metric_word}_gpus"
        yield _info(f"CustomModelServing{word}PerProjectPerRegion", f"custom_model_serving_{metric_word}", word, 8)
        yield _info(
            f"CustomModelServingPreemptible{word}PerProjectPerRegion",
            f"custom_model_serving_preemptible_{metric_word}",
            f"preemptible {word}",
            8,
        )
        yield _info(
            f"RestrictedImageTraining{word}PerProjectPerRegion", f"restricted_image_training_{metric_word}", word, 8
        )
    for word in _TPUS:
        for stem, metric in (
            ("CustomModelTraining", "custom_model_training"),
            ("CustomModelTrainingPreemptible", "custom_model_training_preemptible"),
            ("CustomModelServing", "custom_model_serving"),
            ("CustomModelServingPreemptible", "custom_model_serving_preemptible"),
        ):
            tpu = word.removesuffix("s").removesuffix("TPU").lower()  # V5ETPU → v5e, V2TPUs → v2
            yield _info(f"{stem}{word}PerProjectPerRegion", f"{metric}_tpu_{tpu}", word, 32)
    for family in _CPU_FAMILIES:
        for stem, metric in (
            ("CustomModelTraining", "custom_model_training"),
            ("CustomModelServing", "custom_model_serving"),
            ("RestrictedImageTraining", "restricted_image_training"),
        ):
            yield _info(
                f"{stem}CPUsFor{family}MachineTypePerProjectPerRegion",
                f"{metric}_cpus_for_{family.lower()}_machine_type",
                f"CPUs for {family} machine types",
                575,
            )


def _per_model() -> Iterator[dict]:
    for model in _BASE_MODELS:
        camel = "".join(part.capitalize() for part in model.replace(".", "-").split("-"))
        snake = model.replace(".", "_").replace("-", "_")
        for stem, suffix, display, default in _PER_MODEL:
            yield _info(
                f"{camel}{stem}PerProjectPerRegion",
                f"{snake}_{suffix}",
                f"{model} {display}",
                default,
                unit="1/min/{project}/{region}" if "PerMinute" in stem else "1",
            )


def _shared_per_model() -> Iterator[dict]:
    """Quotas with a `base_model` dimension: one entry per model, so a single QuotaInfo is large."""
    for stem, metric in (
        ("GenerateContentRequestsPerMinutePerProjectPerBaseModel", "generate_content_requests_per_minute"),
        ("GenerateContentInputTokensPerMinutePerBaseModel", "generate_content_input_tokens_per_minute"),
        ("OnlinePredictionRequestsPerBaseModel", "online_prediction_requests_per_base_model"),
    ):
        entries: list[dict] = [
            {"dimensions": {"base_model": model}, "details": {"value": str(_value(stem + model, 3000))}}
            for model in _BASE_MODELS
        ]
        entries.append({"details": {"value": "300"}, "applicableLocations": list(VERTEX_REGIONS)})
        yield {
            **fields(stem, f"{QUOTA_SERVICE}/{metric}", metric.replace("_", " "), "1/min/{project}/{region}"),
            "dimensions": ["region", "base_model"],
            "dimensionsInfos": entries,
        }


def _info(quota_id: str, metric: str, display: str, default: int, unit: str = "1") -> dict:
    """A per-region QuotaInfo: a few regions with their own value (as granted increases leave them), then the
    default for the others, which lists them (DimensionsInfo.applicable_locations)."""
    own = [region for region in VERTEX_REGIONS if _value(quota_id + region, 16) == 0]
    entries = [region_entry(region, _value(quota_id + region, 4 * default + 1)) for region in own]
    entries.append(default_entry(default, [region for region in VERTEX_REGIONS if region not in own]))
    return {
        **fields(quota_id, f"{QUOTA_SERVICE}/{metric}", display, unit),
        "dimensions": ["region"],
        "dimensionsInfos": entries,
    }


def fields(quota_id: str, metric: str, display: str, unit: str) -> dict:
    rate = unit.startswith("1/min")
    fields = {
        "quotaId": quota_id,
        "metric": metric,
        "service": QUOTA_SERVICE,
        "isPrecise": True,
        "containerType": "PROJECT",
        "metricDisplayName": display,
        "quotaDisplayName": f"{display} per region",
        "metricUnit": unit,
        "quotaIncreaseEligibility": {"isEligible": True},
        "serviceRequestQuotaUri": REQUEST_QUOTA_URI,
    }
    # proto3 JSON leaves out a field at its default: a rate quota has no isConcurrent, a concurrent one no interval
    return fields | ({"refreshInterval": "minute"} if rate else {"isConcurrent": True})


def region_entry(region: str, limit: int) -> dict:
    return {"dimensions": {"region": region}, "details": details(limit), "applicableLocations": [region]}


def default_entry(limit: int, regions: list[str]) -> dict:
    return {"details": details(limit), "applicableLocations": regions}


def details(limit: int) -> dict:
    return {"value": str(limit)} if limit else {}  # proto3 JSON leaves a zero out


def _value(seed: str, below: int) -> int:
    return zlib.crc32(seed.encode()) % max(1, below)
