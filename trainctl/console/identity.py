"""Who is looking at the console, and which teams' requests they may see (issue 35's per-team visibility). The local
operator sees every team; a cloud deployment plugs in its own `viewer_of` (the identity its proxy vouches for)."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from starlette.exceptions import HTTPException
from starlette.requests import Request

from functions.teams import NO_TEAMS, Teams


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
    the machine), and sees what their own credentials already read. `--team T` narrows the view to one team.
    Where the environment names an IAP audience (the console's Cloud Run service) there is no local operator: the
    signed header decides, whichever viewer function the app was given (fails closed)."""
    if (cloud := _environment_viewer()) is not None:
        return cloud(request)
    team = getattr(request.app.state, "team", None)
    return LOCAL_OPERATOR if team is None else Viewer(f"local operator (team {team})", frozenset({team}))


# ---- the cloud viewer: IAP's signed header → the teams an identity may watch (issue 45 point 3, issue 35) ----------
#
# In the cloud the console is a Cloud Run service with IAP turned on (terraform/console.tf). IAP signs every request
# it lets through with a JWT in the `x-goog-iap-jwt-assertion` header: ES256, issuer https://cloud.google.com/iap,
# audience /projects/PROJECT_NUMBER/locations/REGION/services/SERVICE for IAP on a Cloud Run service, its keys
# published at https://www.gstatic.com/iap/verify/public_key (cloud.google.com/iap/docs/signed-headers-howto;
# local/FIDELITY.md, "The console behind IAP"). Only that verified token names the viewer: the plain
# `x-goog-authenticated-user-email` header is never read, since anything that reached the container some other way
# could set it.

IAP_ASSERTION_HEADER = "x-goog-iap-jwt-assertion"
IAP_ISSUER = "https://cloud.google.com/iap"
# The PEM form of IAP's keys ({key id: public key}), which google-auth verifies with `cryptography` alone (the JWK
# form, .../public_key-jwk, needs PyJWT, which trainctl does not install).
IAP_KEYS_URL = "https://www.gstatic.com/iap/verify/public_key"
# Google rotates IAP's keys; a token naming a key id not yet seen refetches them, at most this often.
KEYS_REFRESH_SECONDS = 60.0
KEYS_MAX_AGE_SECONDS = 3600.0
# Clock difference allowed between IAP and this container when checking iat and exp.
CLOCK_SKEW_SECONDS = 30

# The environment of the console's Cloud Run service (terraform/console.tf sets exactly these; a test compares).
AUDIENCE_ENV = "TRAINCTL_CONSOLE_IAP_AUDIENCE"
ADMINS_ENV = "TRAINCTL_CONSOLE_ADMINS"
VIEWERS_ENV = "TRAINCTL_CONSOLE_VIEWERS"
CONSOLE_ENV_NAMES = (AUDIENCE_ENV, ADMINS_ENV, VIEWERS_ENV)


def cloud_run_audience(project_number: str, region: str, service: str) -> str:
    """The `aud` IAP puts in its header for a Cloud Run service it guards directly."""
    return f"/projects/{project_number}/locations/{region}/services/{service}"


class Refused(HTTPException):
    """The console will not show anything to this request: no verifiable identity, or one that may watch no team.
    Starlette answers it as a 403 with the detail as a short plain page."""

    def __init__(self, why: str) -> None:
        super().__init__(status_code=403, detail=f"403 Forbidden: {why}")


@dataclass(frozen=True)
class ConsoleAccess:
    """Who may watch which teams. Members are IAM member strings as the teams setting writes them.

    - `admins`: members who see every team (`user:` or `serviceAccount:` emails, or `domain:` a whole domain);
    - `viewers`: member → teams, the operator's explicit grants for the console;
    - each team's `watchers` (functions/teams.py): a watcher of a team's events may watch it in the console too.
    A `group:` member cannot be matched: the signed header names a person, not their groups, and resolving groups
    needs the Cloud Identity API; list the people (or their domain) in `viewers` instead."""

    admins: frozenset[str] = frozenset()
    viewers: Mapping[str, frozenset[str]] = field(default_factory=dict)
    watchers: Mapping[str, frozenset[str]] = field(default_factory=dict)  # team → members

    @classmethod
    def of(cls, teams: Teams | None, admins: Iterable[str] = (), viewers: Mapping[str, Iterable[str]] | None = None):
        known = set(teams.teams) if teams is not None else {NO_TEAMS}
        grants: dict[str, frozenset[str]] = {}
        for member, named in (viewers or {}).items():
            _check_member(member, VIEWERS_ENV)
            unknown = sorted(set(named) - known)
            if unknown:
                raise ConsoleAccessError(
                    f"{VIEWERS_ENV}: {member} is given {', '.join(unknown)}, not one of the teams "
                    f"({', '.join(sorted(known))})"
                )
            grants[member.lower()] = frozenset(named)
        for member in admins:
            _check_member(member, ADMINS_ENV)
        watchers = {
            name: frozenset(m.lower() for m in team.watchers.values())
            for name, team in (teams.teams if teams else {}).items()
        }
        return cls(frozenset(m.lower() for m in admins), grants, watchers)

    @classmethod
    def from_env(cls, teams: Teams | None, environ: Mapping[str, str] | None = None) -> ConsoleAccess:
        env = os.environ if environ is None else environ
        admins = [m.strip() for m in env.get(ADMINS_ENV, "").split(",") if m.strip()]
        raw = env.get(VIEWERS_ENV, "") or "{}"
        try:
            viewers = json.loads(raw)
        except ValueError as exc:
            raise ConsoleAccessError(f"{VIEWERS_ENV}: not JSON ({exc})") from None
        if not isinstance(viewers, dict) or not all(
            isinstance(v, list) and all(isinstance(t, str) for t in v) for v in viewers.values()
        ):
            raise ConsoleAccessError(
                f"{VIEWERS_ENV}: must be a JSON object, member => list of teams "
                '({"user:ana@example.com": ["vision"]})'
            )
        return cls.of(teams, admins, viewers)

    def teams_of(self, email: str) -> frozenset[str] | None:
        """The teams `email` may watch: None for all (an admin), possibly empty."""
        if _matches(self.admins, email):
            return None
        seen = {team for team, members in self.watchers.items() if _matches(members, email)}
        for member, teams in self.viewers.items():
            if _matches({member}, email):
                seen |= teams
        return frozenset(seen)


class ConsoleAccessError(ValueError):
    """The console's access settings are malformed; the message names the variable and the rule."""


def _check_member(member: str, where: str) -> None:
    kind, _, value = member.partition(":")
    if kind == "group":
        raise ConsoleAccessError(
            f"{where}: {member} is a group, which the console cannot resolve from the signed header (it names a "
            "person): list its people as user: members, or a domain: member"
        )
    if kind not in ("user", "serviceAccount", "domain") or not value:
        raise ConsoleAccessError(f"{where}: {member!r} must be user:EMAIL, serviceAccount:EMAIL or domain:DOMAIN")


def _matches(members: Iterable[str], email: str) -> bool:
    email = email.lower()
    domain = email.rpartition("@")[2]
    for member in members:
        kind, _, value = member.partition(":")
        if kind in ("user", "serviceaccount") and value == email:
            return True
        if kind == "domain" and value == domain:
            return True
    return False


class IapKeys:
    """IAP's public keys, fetched from IAP_KEYS_URL and kept an hour; a key id not among them refetches them (at most
    once a minute), as Google rotates them. `fetch` returns {key id: PEM public key}."""

    def __init__(
        self, fetch: Callable[[], Mapping[str, str]] | None = None, clock: Callable[[], float] = time.monotonic
    ):
        self._fetch = fetch or _fetch_iap_keys
        self._clock = clock
        self._keys: Mapping[str, str] = {}
        self._fetched_at: float | None = None
        self._lock = threading.Lock()

    def for_key_id(self, key_id: str) -> Mapping[str, str]:
        with self._lock:
            now = self._clock()
            stale = self._fetched_at is None or now - self._fetched_at > KEYS_MAX_AGE_SECONDS
            unknown = key_id not in self._keys and (
                self._fetched_at is None or now - self._fetched_at > KEYS_REFRESH_SECONDS
            )
            if stale or unknown:
                self._keys = dict(self._fetch())
                self._fetched_at = now
            return self._keys


def _fetch_iap_keys() -> Mapping[str, str]:
    import google.auth.transport.requests

    response = google.auth.transport.requests.Request()(IAP_KEYS_URL, method="GET", timeout=10)
    if response.status != 200:
        raise Refused(f"IAP's keys could not be fetched (HTTP {response.status}); try again in a moment")
    keys = json.loads(response.data)
    return {str(k): str(v) for k, v in keys.items()}


def verified_email(assertion: str, audience: str, keys: IapKeys) -> str:
    """The email in IAP's signed header, once its signature (ES256, one of IAP's keys), issuer, audience, issue and
    expiry times are checked; Refused, saying which check failed, otherwise."""
    from google.auth import exceptions as auth_errors
    from google.auth import jwt

    try:
        header = json.loads(base64.urlsafe_b64decode(assertion.split(".")[0] + "=="))
    except (ValueError, IndexError):
        raise Refused("the IAP assertion is not a JWT") from None
    if not isinstance(header, dict) or header.get("alg") != "ES256":
        raise Refused("the IAP assertion is not signed with ES256, as IAP signs")
    key_id = str(header.get("kid", ""))
    try:
        claims = jwt.decode(
            assertion, certs=keys.for_key_id(key_id), audience=audience, clock_skew_in_seconds=CLOCK_SKEW_SECONDS
        )
    except (auth_errors.GoogleAuthError, ValueError) as exc:
        raise Refused(f"the IAP assertion does not verify: {exc}") from None
    if claims.get("iss") != IAP_ISSUER:
        raise Refused(f"the IAP assertion's issuer is {claims.get('iss')!r}, not {IAP_ISSUER}")
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email:
        raise Refused("the IAP assertion names no email")
    return email


def iap_viewer_of(audience: str, access: ConsoleAccess, keys: IapKeys | None = None) -> Callable[[Request], Viewer]:
    """The console's viewer function behind IAP: the verified identity and the teams it may watch, or Refused."""
    if not audience.startswith("/projects/"):
        raise ConsoleAccessError(f"{AUDIENCE_ENV}: {audience!r} is not an IAP audience (/projects/NUMBER/...)")
    iap_keys = keys or IapKeys()

    def viewer_of(request: Request) -> Viewer:
        assertion = request.headers.get(IAP_ASSERTION_HEADER)
        if not assertion:
            raise Refused(f"no {IAP_ASSERTION_HEADER} header: the console answers only requests that came through IAP")
        email = verified_email(assertion, audience, iap_keys)
        teams = access.teams_of(email)
        if teams is not None and not teams:
            raise Refused(
                f"{email} may watch no team: ask the operator to add you to a team's watchers, or to the Terraform "
                "variable console.viewers"
            )
        return Viewer(name=email, teams=teams)

    return viewer_of


def cloud_viewer_from_env(
    teams: Teams | None, environ: Mapping[str, str] | None = None
) -> Callable[[Request], Viewer] | None:
    """The IAP viewer function when the environment names an IAP audience (the console's Cloud Run service), else
    None (the local console: local_viewer)."""
    env = os.environ if environ is None else environ
    audience = env.get(AUDIENCE_ENV, "")
    if not audience:
        return None
    return iap_viewer_of(audience, ConsoleAccess.from_env(teams, env))


_cloud_viewers: dict[tuple[str, ...], Callable[[Request], Viewer] | None] = {}


def _environment_viewer() -> Callable[[Request], Viewer] | None:
    """cloud_viewer_from_env for this process's environment and teams (TRAINCTL_TEAMS), made once per setting."""
    names = (AUDIENCE_ENV, ADMINS_ENV, VIEWERS_ENV, "TRAINCTL_TEAMS")
    setting = tuple(os.environ.get(name, "") for name in names)
    if not setting[0]:
        return None
    if setting not in _cloud_viewers:
        from functions.teams import parse_teams

        teams = parse_teams(setting[3]) if setting[3] else None
        _cloud_viewers[setting] = cloud_viewer_from_env(teams)
    return _cloud_viewers[setting]
