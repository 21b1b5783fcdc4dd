"""What every page's data shares: whose team a record is, and a text, a duration, a sum of money or a figure as a cell
shows it."""

from __future__ import annotations

import math
from typing import Any

from functions.teams import Teams

# The longest text a cell shows of what a requester or job wrote (the rest is cut, with an ellipsis).
MAX_TEXT = 300


def team_of(team: str | None, teams: Teams | None) -> str | None:
    """The team a record or event belongs to: its own, else the default team's (None without teams)."""
    if teams is None:
        return team
    return team or teams.default_team


def clipped(text: str | None, limit: int = MAX_TEXT) -> str:
    if not text:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def duration(seconds: float | None) -> str:
    """A duration as a person reads it: 42s, 7.5m, 3.2h, 2.1d."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


def money(usd: float | None) -> str:
    return "-" if usd is None else f"${usd:,.2f}"


def figure_text(value: Any) -> str:
    from trainctl.eventstream import readable

    return readable(value) if isinstance(value, int | float) and not isinstance(value, bool) else "-"
