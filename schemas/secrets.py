"""Secrets in a request (issue 40, point 7): the references `trainer.secret_env` takes, and the rule for which
`trainer.env` names look secret, whose values trainctl redacts wherever it records or shows a request.

A reference names one Secret Manager secret version: `projects/{project}/secrets/{secret}/versions/{version}`
(AccessSecretVersion's `name`, cloud.google.com/secret-manager/docs/reference/rest/v1/projects.secrets.versions/
access). The project is its id (6-30 lowercase letters, digits and hyphens, starting with a letter, not ending with a
hyphen) or its number; the secret id is at most 255 letters, digits, `-` and `_` (CreateSecretRequest.secret_id). The
version must be a number: Secret Manager also takes `latest` (and version aliases), which would give two nodes, or two
attempts, of one job different values when someone adds a version meanwhile, and change what a request means after
it was accepted. Regional secrets (`projects/*/locations/*/secrets/*`) are not taken.

Which names look secret: the name in upper case, cut into words at `_`, has a word that contains SECRET, PASSWORD,
PASSWD, PASSPHRASE, CREDENTIAL, APIKEY or PRIVATEKEY, or that ends with KEY, KEYS, TOKEN, TOKENS, PASS, PWD, AUTH,
CREDS or COOKIE, or that is DSN or PRIVATE. WANDB_API_KEY, HF_TOKEN, DB_PASSWORD, dbPassword, OAUTH,
AWS_SECRET_ACCESS_KEY and SENTRY_DSN look secret; TOKENIZERS_PARALLELISM, KEYBOARD_LAYOUT and MODEL_PATH do not. A
name that looks secret by mistake (MONKEY, BYPASS) costs only its value in the records: the job still gets it. A
secret under any other name (a DATABASE_URL with a password in it, GITHUB_PAT) is recorded as written: give secrets
in secret_env, whose values trainctl never holds.
"""

from __future__ import annotations

import copy
import re
from typing import Any

SECRET_VERSION_RE = re.compile(
    r"projects/(?P<project>[a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20})/secrets/(?P<secret>[A-Za-z0-9_-]{1,255})"
    r"/versions/(?P<version>[1-9][0-9]{0,18})"
)
SECRET_RE = re.compile(r"projects/([a-z][a-z0-9-]{4,28}[a-z0-9]|[0-9]{1,20})/secrets/[A-Za-z0-9_-]{1,255}")
# What a redacted value reads in every record, event and listing.
REDACTED = "<redacted>"

_CONTAINS = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY", "PRIVATEKEY")
_ENDS = ("KEY", "KEYS", "TOKEN", "TOKENS", "PASS", "PWD", "AUTH", "CREDS", "COOKIE")
_WORDS = ("DSN", "PRIVATE")


def secret_version_problem(value: str) -> str | None:
    """Why `value` is not a reference trainer.secret_env takes, or None."""
    if SECRET_VERSION_RE.fullmatch(value):
        return None
    pinned = re.fullmatch(r"(projects/[^/]+/secrets/[^/]+)/versions/([^/]+)", value)
    if pinned and not pinned.group(2).isdigit():
        return (
            f"{value!r} names version {pinned.group(2)!r}: name a version number, so that every node and every attempt "
            f"reads the same value ({pinned.group(1)}/versions/N)"
        )
    if "/locations/" in value:
        return f"{value!r} is a regional secret: only global secrets are taken (projects/P/secrets/S/versions/N)"
    return (
        f"{value!r} is not a Secret Manager secret version: write projects/PROJECT/secrets/SECRET/versions/N (a "
        "project id or number; a secret id of at most 255 letters, digits, '-' and '_'; a version number)"
    )


def secret_of(version: str) -> str:
    """The secret a version belongs to: projects/P/secrets/S (what IAM grants access on)."""
    return version.rsplit("/versions/", 1)[0]


def looks_secret(name: str) -> bool:
    """Whether a trainer.env name looks like it holds a secret (the module's rule)."""
    for word in filter(None, name.upper().split("_")):
        if word in _WORDS or word.endswith(_ENDS) or any(part in word for part in _CONTAINS):
            return True
    return False


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {name: REDACTED if looks_secret(name) else value for name, value in env.items()}


def sealed_env(request: dict[str, Any]) -> dict[str, str]:
    """The values of a request's (JSON) trainer.env that redaction takes out: the ones the job still needs."""
    env = (request.get("trainer") or {}).get("env") or {}
    return {name: value for name, value in env.items() if looks_secret(name)}


def redacted_request(request: dict[str, Any]) -> dict[str, Any]:
    """A copy of a request (its JSON form) with the values of secret-looking trainer.env names redacted."""
    env = (request.get("trainer") or {}).get("env")
    if not env or not any(looks_secret(name) for name in env):
        return request
    redacted = copy.deepcopy(request)
    redacted["trainer"]["env"] = redact_env(env)
    return redacted


def unsealed_request(request: dict[str, Any], sealed: dict[str, str] | None) -> dict[str, Any]:
    """A redacted request (JSON) with the sealed values put back: what the job is planned from."""
    env = (request.get("trainer") or {}).get("env")
    if not env or not sealed:
        return request
    unsealed = copy.deepcopy(request)
    unsealed["trainer"]["env"] = {name: sealed.get(name, value) for name, value in env.items()}
    return unsealed
