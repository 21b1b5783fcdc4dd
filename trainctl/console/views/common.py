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


# The longest text a cell's title (its tooltip) gives in full of a text the cell shows cut.
MAX_TITLE = 2000
# A cut falls back to the last space when one is this near the limit (else a long word is cut inside).
WORD_BACK = 40


def clipped(text: str | None, limit: int = MAX_TEXT) -> str:
    """The text cut to at most `limit` characters, at a word's end where one is near, with an ellipsis; static/
    live.js clips the live list's later lines the same way."""
    if not text:
        return ""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ", limit - 1 - WORD_BACK)
    return (cut[:space] if space > 0 else cut).rstrip() + "…"


def title_of(text: str | None, limit: int = MAX_TEXT) -> str:
    """The full text for the title of a cell that shows it clipped (bounded by MAX_TITLE), "" when it is not cut."""
    return clipped(text, MAX_TITLE) if text and len(text) > limit else ""


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
