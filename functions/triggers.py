"""Trigger rules: which uploaded objects start a job, and the request document they start (DESIGN.md §4).

Pure and cheap: `is_marker` decides for every upload in a watched bucket, so it must not import anything heavy.
A marker's folder is the dataset; the job comes from the template of the longest matching `gs://` prefix;
a non-empty marker holds overrides merged onto that template.
"""

from __future__ import annotations

import re
from typing import Any

from functions.settings import Settings


def is_marker(settings: Settings, name: str) -> bool:
    return name.rsplit("/", 1)[-1] in settings.marker_names


def matching_rule(settings: Settings, bucket: str, name: str) -> str | None:
    """The longest trigger-rule prefix covering gs://bucket/name, or None."""
    uri = f"gs://{bucket}/{name}"
    prefixes = [p for p in settings.trigger_rules if uri.startswith(p)]
    return max(prefixes, key=len) if prefixes else None


def derive_request_id(name: str, generation: str) -> str:
    """A readable, deterministic id for a marker-triggered request: its folder plus the marker's generation."""
    folder = name.rsplit("/", 1)[0] if "/" in name else "root"
    slug = re.sub(r"[^a-z0-9._-]+", "-", folder.lower()).strip("-._") or "data"
    return f"{slug[-(127 - len(generation) - 1) :].lstrip('-._')}-{generation}"


def deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def marker_request(
    template: dict[str, Any], overrides: dict[str, Any], bucket: str, name: str, generation: str
) -> tuple[dict[str, Any], bool]:
    """(request document, whether the request names its own request_id)."""
    document = deep_merge(template, overrides)
    folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
    dataset = document.get("dataset")
    document["dataset"] = {**(dataset if isinstance(dataset, dict) else {}), "uri": f"gs://{bucket}/{folder}"}
    document.setdefault("api_version", "trainctl/v1")
    explicit = "request_id" in overrides
    if not explicit:
        document["request_id"] = derive_request_id(name, generation)
    return document, explicit
