"""The console's cloud viewer (issue 45 point 3, issue 35's per-team visibility): who a request comes from is only
what IAP's signed header says once verified, and that identity sees only the teams it may watch.

Tokens are signed here with ES256 keys made for the test, and the viewer is handed them as IAP's keys, so every check
of the real verification runs: signature, key id, algorithm, issuer, audience, issue and expiry times."""

from __future__ import annotations

import time
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from google.auth import crypt, jwt
from starlette.requests import Request

from functions.teams import parse_teams
from trainctl.console import identity
from trainctl.console.identity import (
    ConsoleAccess,
    ConsoleAccessError,
    IapKeys,
    Refused,
    Viewer,
    cloud_run_audience,
    cloud_viewer_from_env,
    iap_viewer_of,
)

AUDIENCE = cloud_run_audience("123456789", "europe-west4", "trainctl-console")
KEY_ID = "iap-key-1"

TEAMS = parse_teams(
    {
        "default_team": "vision",
        "teams": {
            "vision": {"watchers": {"ana": "user:ana@example.com"}},
            "speech": {"watchers": {"bo": "user:Bo@Example.com", "lab": "domain:speech-lab.example"}},
        },
    }
)


def _es256_key() -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private.decode(), public.decode()


PRIVATE, PUBLIC = _es256_key()
OTHER_PRIVATE, _ = _es256_key()


def _token(
    email: str = "ana@example.com",
    *,
    audience: str = AUDIENCE,
    issuer: str = identity.IAP_ISSUER,
    private: str = PRIVATE,
    key_id: str = KEY_ID,
    issued: float | None = None,
    lifetime: int = 600,
    **extra: Any,
) -> str:
    now = int(time.time() if issued is None else issued)
    claims = {"iss": issuer, "aud": audience, "iat": now, "exp": now + lifetime, "sub": "accounts.google.com:1"}
    claims |= {"email": email} if email else {}
    signer = crypt.ES256Signer.from_string(private, key_id)
    return jwt.encode(signer, claims | extra).decode()


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw, "query_string": b""})


def _viewer_of(access: ConsoleAccess | None = None, keys: dict[str, str] | None = None):
    fetched = {KEY_ID: PUBLIC} if keys is None else keys
    return iap_viewer_of(AUDIENCE, access or ConsoleAccess.of(TEAMS), IapKeys(fetch=lambda: fetched))


def _refusal(headers: dict[str, str], access: ConsoleAccess | None = None) -> str:
    with pytest.raises(Refused) as refused:
        _viewer_of(access)(_request(headers))
    assert refused.value.status_code == 403
    return str(refused.value.detail)


def test_a_watcher_of_a_team_sees_that_team_alone():
    viewer = _viewer_of()(_request({"x-goog-iap-jwt-assertion": _token("ana@example.com")}))
    assert viewer == Viewer(name="ana@example.com", teams=frozenset({"vision"}))
    assert viewer.sees("vision") and not viewer.sees("speech")


def test_a_missing_header_is_refused():
    assert "x-goog-iap-jwt-assertion" in _refusal({})


def test_the_plain_email_header_alone_is_never_trusted():
    """Anything that reached the container without IAP could set it: unsigned, it counts for nothing."""
    detail = _refusal({"x-goog-authenticated-user-email": "accounts.google.com:ana@example.com"})
    assert "came through IAP" in detail


def test_the_signed_identity_wins_over_a_plain_email_header():
    viewer = _viewer_of()(
        _request(
            {
                "x-goog-iap-jwt-assertion": _token("ana@example.com"),
                "x-goog-authenticated-user-email": "accounts.google.com:admin@example.com",
            }
        )
    )
    assert viewer.name == "ana@example.com" and viewer.teams == frozenset({"vision"})


def test_a_token_for_another_audience_is_refused():
    other = cloud_run_audience("123456789", "europe-west4", "another-service")
    assert "wrong audience" in _refusal({"x-goog-iap-jwt-assertion": _token(audience=other)})


def test_an_expired_token_is_refused():
    long_ago = time.time() - 3600
    assert "expired" in _refusal({"x-goog-iap-jwt-assertion": _token(issued=long_ago, lifetime=600)}).lower()


def test_a_token_signed_by_another_key_is_refused():
    forged = _token(private=OTHER_PRIVATE)  # the same key id, someone else's key
    assert "does not verify" in _refusal({"x-goog-iap-jwt-assertion": forged})


def test_a_token_naming_an_unknown_key_is_refused():
    assert "does not verify" in _refusal({"x-goog-iap-jwt-assertion": _token(key_id="not-an-iap-key")})


def test_a_token_from_another_issuer_is_refused():
    detail = _refusal({"x-goog-iap-jwt-assertion": _token(issuer="https://accounts.google.com")})
    assert "issuer" in detail


def test_a_token_not_signed_with_es256_is_refused():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    now = int(time.time())
    claims = {"iss": identity.IAP_ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600, "email": "ana@example.com"}
    token = jwt.encode(crypt.RSASigner.from_string(pem.decode(), KEY_ID), claims).decode()
    assert "ES256" in _refusal({"x-goog-iap-jwt-assertion": token})


def test_garbage_is_refused_not_an_error():
    assert "not a JWT" in _refusal({"x-goog-iap-jwt-assertion": "%%%.not.a-token"})


def test_a_token_without_an_email_is_refused():
    assert "no email" in _refusal({"x-goog-iap-jwt-assertion": _token("")})


def test_a_verified_identity_that_watches_no_team_is_refused():
    detail = _refusal({"x-goog-iap-jwt-assertion": _token("mallory@example.com")})
    assert "mallory@example.com may watch no team" in detail


def test_emails_match_members_without_regard_to_case_and_domains_match_whole_domains():
    viewer_of = _viewer_of()
    assert viewer_of(_request({"x-goog-iap-jwt-assertion": _token("bo@example.com")})).teams == {"speech"}
    lab = viewer_of(_request({"x-goog-iap-jwt-assertion": _token("cy@speech-lab.example")}))
    assert lab.teams == {"speech"}
    # A domain is the part after @, whole: a look-alike domain is not it.
    with pytest.raises(Refused):
        viewer_of(_request({"x-goog-iap-jwt-assertion": _token("eve@evil-speech-lab.example")}))


def test_admins_see_every_team_and_viewers_get_what_the_operator_granted():
    access = ConsoleAccess.of(
        TEAMS, admins=["user:oncall@example.com"], viewers={"user:lead@example.com": ["vision", "speech"]}
    )
    viewer_of = _viewer_of(access)
    admin = viewer_of(_request({"x-goog-iap-jwt-assertion": _token("oncall@example.com")}))
    assert admin.teams is None and admin.sees("speech") and admin.sees("vision")
    lead = viewer_of(_request({"x-goog-iap-jwt-assertion": _token("lead@example.com")}))
    assert lead.teams == {"vision", "speech"}
    ana = viewer_of(_request({"x-goog-iap-jwt-assertion": _token("ana@example.com")}))
    assert ana.teams == {"vision"}  # a watcher keeps its own team, no more


def test_group_members_are_refused_in_the_settings_with_the_reason():
    with pytest.raises(ConsoleAccessError, match=r"group:leads@example\.com is a group"):
        ConsoleAccess.of(TEAMS, viewers={"group:leads@example.com": ["vision"]})
    with pytest.raises(ConsoleAccessError, match="TRAINCTL_CONSOLE_ADMINS"):
        ConsoleAccess.of(TEAMS, admins=["group:admins@example.com"])


def test_a_grant_of_an_unknown_team_is_refused_naming_the_teams():
    with pytest.raises(ConsoleAccessError, match=r"given audio, not one of the teams \(speech, vision\)"):
        ConsoleAccess.of(TEAMS, viewers={"user:lead@example.com": ["audio"]})


def test_without_teams_the_one_team_is_default():
    access = ConsoleAccess.of(None, viewers={"user:ana@example.com": ["default"]})
    assert access.teams_of("ana@example.com") == {"default"}
    assert access.teams_of("bo@example.com") == frozenset()


def test_the_environment_builds_the_viewer_and_a_local_console_has_none():
    assert cloud_viewer_from_env(TEAMS, {}) is None
    env = {
        identity.AUDIENCE_ENV: AUDIENCE,
        identity.ADMINS_ENV: "user:oncall@example.com, domain:ops.example",
        identity.VIEWERS_ENV: '{"user:lead@example.com": ["speech"]}',
    }
    assert cloud_viewer_from_env(TEAMS, env) is not None
    access = ConsoleAccess.from_env(TEAMS, env)
    assert access.teams_of("x@ops.example") is None and access.teams_of("lead@example.com") == {"speech"}
    with pytest.raises(ConsoleAccessError, match="TRAINCTL_CONSOLE_VIEWERS: must be a JSON object"):
        ConsoleAccess.from_env(TEAMS, {identity.VIEWERS_ENV: '["user:lead@example.com"]'})
    with pytest.raises(ConsoleAccessError, match="TRAINCTL_CONSOLE_IAP_AUDIENCE"):
        cloud_viewer_from_env(TEAMS, {identity.AUDIENCE_ENV: "https://console.example"})


def test_keys_are_fetched_once_and_again_for_a_new_key_id_at_most_once_a_minute():
    fetches: list[int] = []
    now = [1000.0]

    def fetch() -> dict[str, str]:
        fetches.append(1)
        return {KEY_ID: PUBLIC}

    keys = IapKeys(fetch=fetch, clock=lambda: now[0])
    keys.for_key_id(KEY_ID)
    keys.for_key_id(KEY_ID)
    assert len(fetches) == 1
    keys.for_key_id("rotated")  # unknown, but fetched a moment ago: no second fetch
    assert len(fetches) == 1
    now[0] += identity.KEYS_REFRESH_SECONDS + 1
    keys.for_key_id("rotated")
    assert len(fetches) == 2
    now[0] += identity.KEYS_MAX_AGE_SECONDS + 1
    keys.for_key_id(KEY_ID)  # known, but the hour is up
    assert len(fetches) == 3


def test_the_local_viewer_gives_way_to_iap_where_the_service_runs_behind_it(monkeypatch):
    """Fails closed: on the console's Cloud Run service (its environment names an IAP audience) a console started with
    the local viewer still answers only to IAP's signed header."""
    from types import SimpleNamespace

    request = _request({"x-goog-authenticated-user-email": "accounts.google.com:ana@example.com"})
    request.scope["app"] = SimpleNamespace(state=SimpleNamespace(team=None))
    assert identity.local_viewer(request) == identity.LOCAL_OPERATOR  # on this machine: the operator
    monkeypatch.setenv(identity.AUDIENCE_ENV, AUDIENCE)
    monkeypatch.setenv("TRAINCTL_TEAMS", TEAMS.model_dump_json())
    with pytest.raises(Refused):
        identity.local_viewer(request)
