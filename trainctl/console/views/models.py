"""The models page's data: trainctl/models.py describe()'s models as its tables."""

from __future__ import annotations

from typing import Any

from trainctl.console.identity import Viewer
from trainctl.eventstream import headline_metrics, readable

# The most metrics a version's row shows: the model's own (its rule's) first, then the headline's.
METRICS_SHOWN = 4


def model_visible(described: dict[str, Any], viewer: Viewer) -> bool:
    """A model is its owner team's (its charter's); one without a charter only the viewers of every team see."""
    charter = described.get("charter")
    return viewer.sees(charter["owner"] if charter else None)


def model_metric(model: dict[str, Any]) -> str | None:
    """The metric the model's versions are judged on: its rule's, else (a rule that leaves it to the built-in trainer)
    the one its latest decision with figures was made on."""
    charter = model.get("charter")
    named = charter["rule"].get("metric") if charter else None
    if named:
        return str(named)
    judged = [d["figures"]["metric"] for d in model["decisions"] if (d.get("figures") or {}).get("metric")]
    return str(judged[-1]) if judged else None


def version_metrics(metrics: dict[str, Any], metric: str | None) -> str:
    """A version's figures as its row shows them: the model's own metric first, then the headline's others."""
    first = metrics.get(metric) if metric else None
    if not isinstance(first, int | float) or isinstance(first, bool):
        return headline_metrics(metrics, limit=METRICS_SHOWN) or "-"
    rest = headline_metrics({k: v for k, v in metrics.items() if k != metric}, limit=METRICS_SHOWN - 1)
    return ", ".join(part for part in (f"{metric} {readable(first)}", rest) if part)


def traffic_of(serving: dict[str, Any]) -> list[tuple[str, int]] | None:
    """The endpoint's traffic split by model version ("version 3"), as its deployed models name them (describe_serving's
    `deployed`: each deployed model's id and version); a deployed model it cannot place keeps its id. None: no
    endpoint yet."""
    split = serving.get("traffic_split")
    if split is None:
        return None
    versions = {d["id"]: d.get("version") for d in serving.get("deployed") or []}
    return [(f"version {versions[i]}" if versions.get(i) else f"deployed model {i}", int(p)) for i, p in split.items()]


def models_view(described: list[dict[str, Any]]) -> dict[str, Any]:
    """trainctl/models.py describe()'s models as the models page's three tables, every model's rows in each: versions
    (the newest first), decisions (the latest first) and endpoints."""
    versions, decisions, endpoints, champions = [], [], [], []
    for model in described:
        name = model["model"].rsplit("/", 1)[-1]
        metric = model_metric(model)
        for alias, held in model["aliases"].items():
            champions.append({"model": name, "alias": alias, **held})
        for v in reversed(model["versions"]):
            versions.append({"model": name, "headline": version_metrics(v["metrics"], metric), **v})
        for d in model["decisions"]:
            decisions.append({"model": name, **d})
        if model.get("serving"):
            endpoints.append({"model": name, "traffic": traffic_of(model["serving"]), **model["serving"]})
    decisions.sort(key=lambda d: d["time"], reverse=True)
    return {
        "models": [{"name": m["model"].rsplit("/", 1)[-1], "charter": m.get("charter")} for m in described],
        "champions": champions,
        "versions": versions,
        "decisions": decisions,
        "endpoints": endpoints,
    }
