"""Who is looking at the console, and which teams' requests they may see (issue 35's per-team visibility). The local
operator sees every team; a cloud deployment plugs in its own `viewer_of` (the identity its proxy vouches for)."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request


@dataclass(frozen=True)
class Viewer:
    name: str
    teams: frozenset[str] | None  # None: every team (the local operator)

    def sees(self, team: str | None) -> bool:
        """Whether this viewer may see what belongs to `team` (None: no team, a deployment without teams, or what
        no team owns): everyone sees it only when they see every team."""
        if self.teams is None:
            return True
        return team is not None and team in self.teams


LOCAL_OPERATOR = Viewer("local operator", None)


def local_viewer(request: Request) -> Viewer:
    """The person at this machine: `trainctl console` binds to 127.0.0.1, so whoever reaches it runs it (or shares
    the machine), and sees what their own credentials already read. `--team T` narrows the view to one team."""
    team = getattr(request.app.state, "team", None)
    return LOCAL_OPERATOR if team is None else Viewer(f"local operator (team {team})", frozenset({team}))
