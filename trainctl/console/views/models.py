"""The models page's data: trainctl/models.py describe()'s models as its tables."""

from __future__ import annotations

from typing import Any

from trainctl.console.identity import Viewer
from trainctl.eventstream import headline_metrics


def model_visible(described: dict[str, Any], viewer: Viewer) -> bool:
    """A model is its owner team's (its charter's); one without a charter only the viewers of every team see."""
    charter = described.get("charter")
    return viewer.sees(charter["owner"] if charter else None)


def models_view(described: list[dict[str, Any]]) -> dict[str, Any]:
    """trainctl/models.py describe()'s models as the models page's three tables, every model's rows in each: versions
    (the newest first), decisions (the latest first) and endpoints."""
    versions, decisions, endpoints, champions = [], [], [], []
    for model in described:
        name = model["model"].rsplit("/", 1)[-1]
        for alias, held in model["aliases"].items():
            champions.append({"model": name, "alias": alias, **held})
        for v in reversed(model["versions"]):
            versions.append({"model": name, "headline": headline_metrics(v["metrics"], limit=4) or "-", **v})
        for d in model["decisions"]:
            decisions.append({"model": name, **d})
        if model.get("serving"):
            endpoints.append({"model": name, **model["serving"]})
    decisions.sort(key=lambda d: d["time"], reverse=True)
    return {
        "models": [{"name": m["model"].rsplit("/", 1)[-1], "charter": m.get("charter")} for m in described],
        "champions": champions,
        "versions": versions,
        "decisions": decisions,
        "endpoints": endpoints,
    }
