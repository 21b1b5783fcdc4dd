"""Trigger rules: which uploaded objects start a job, and the request document they start (DESIGN.md §4).

Pure and cheap: `is_marker` decides for every upload in a watched bucket, so it must not import anything heavy.
A marker's folder is the dataset; the job comes from the template of the longest matching `gs://` prefix;
a non-empty marker holds overrides merged onto that template (what it may override: functions/intake/marker_policy.py).
A marker's request id is derived under a prefix that no explicit id may use, so the two never meet.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from functions.settings import Settings

if TYPE_CHECKING:
    from schemas.triggers import TriggerPolicy


def is_marker(settings: Settings, name: str) -> bool:
    basename = name.rsplit("/", 1)[-1]
    return basename in settings.marker_names or basename in settings.score_marker_names


def is_score_marker(settings: Settings, name: str) -> bool:
    """A marker asking for its folder to be scored (functions/models/scoring.py), not for a training run."""
    return name.rsplit("/", 1)[-1] in settings.score_marker_names


def matching_rule(settings: Settings, bucket: str, name: str) -> str | None:
    """The longest trigger-rule prefix covering gs://bucket/name, or None."""
    uri = f"gs://{bucket}/{name}"
    prefixes = [p for p in settings.trigger_rules if uri.startswith(p)]
    return max(prefixes, key=len) if prefixes else None


# Derived ids start with this; explicit ones (Pub/Sub, a marker's own request_id) may not (issue 24, point 7):
# otherwise a requester could name a marker's id and share its ledger id and its default output folder.
DERIVED_ID_PREFIX = "gcs."
# And these, which a rule's schedule tick and alert derive (issue 42: functions/intake/rule_triggers.py).
RESERVED_ID_PREFIXES = {
    DERIVED_ID_PREFIX: "a marker upload",
    "sched.": "a rule's schedule tick",
    "alert.": "an alert",
}


def derive_request_id(name: str, generation: str) -> str:
    """A readable, deterministic id for a marker-triggered request: `gcs.`, its folder, the marker's generation.
    The folder is slugged (case and some characters are lost, a long one keeps its end), so two markers can map to
    one id: the ledger lets the first have it (functions/ledger/requests.py)."""
    folder = name.rsplit("/", 1)[0] if "/" in name else "root"
    slug = re.sub(r"[^a-z0-9._-]+", "-", folder.lower()).strip("-._") or "data"
    room = 128 - len(DERIVED_ID_PREFIX) - len(generation) - 1
    return f"{DERIVED_ID_PREFIX}{slug[-room:].lstrip('-._') or 'data'}-{generation}"


def explicit_id_problem(request_id: str) -> str | None:
    """Why a request id its requester chose (the `request_id` field's rule) may not be used, or None."""
    for prefix, starter in RESERVED_ID_PREFIXES.items():
        if request_id.startswith(prefix):
            return (
                f"ids starting with {prefix!r} are reserved for requests started by {starter}; choose an id that "
                f"does not start with {prefix!r}"
            )
    return None


def dataset_folder(bucket: str, name: str) -> str:
    """The dataset a marker starts: its own folder."""
    folder = name.rsplit("/", 1)[0] + "/" if "/" in name else ""
    return f"gs://{bucket}/{folder}"


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
    dataset = document.get("dataset")
    document["dataset"] = {**(dataset if isinstance(dataset, dict) else {}), "uri": dataset_folder(bucket, name)}
    document.setdefault("api_version", "trainctl/v1")
    explicit = "request_id" in overrides
    if not explicit:
        document["request_id"] = derive_request_id(name, generation)
    return document, explicit


def split_policy(template: dict[str, Any], rule: str) -> tuple[dict[str, Any], TriggerPolicy]:
    """(the template without its `policy`, the rule's policy: schemas/triggers.py, issue 42); DocumentInvalid naming
    the rule and the field for a policy that breaks its schema."""
    from pydantic import ValidationError

    from functions.untrusted.documents import DocumentInvalid
    from schemas.errors import field_errors
    from schemas.triggers import POLICY_KEY, TriggerPolicy

    body = {key: value for key, value in template.items() if key != POLICY_KEY}
    try:
        return body, TriggerPolicy.model_validate(template.get(POLICY_KEY) or {})
    except ValidationError as exc:
        problems = "; ".join(f"{POLICY_KEY}.{error}" for error in field_errors(exc))
        raise DocumentInvalid(f"the template of rule {rule}: {problems}") from None
