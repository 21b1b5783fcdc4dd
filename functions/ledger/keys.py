"""Request keys: the idempotency key of each request (DESIGN.md §4), written here and nowhere else.

- `request:<request_id>` when the requester names the id (Pub/Sub requests always do, markers may), for the
  default team and deployments without teams: the key every request had before ids had namespaces (issue 38);
- `request:<team>/<request_id>` when a team other than the default team names it: request ids are one namespace
  per team, so one team can neither squat nor collide with another's ids (neither a team name nor a request id
  holds a `/`);
- `gcs:<bucket>/<object>#<generation>` for a marker that does not;
- `schedule:<rule>#<scheduled time>` for a rule's schedule tick and `alert:<model>#<incident id>` for an alert that
  starts a rule's run (issue 42: functions/intake/rule_triggers.py);
- `pubsub:<message id>` for a message that could not be read far enough to find an id (it is only rejected).

The id's claim in the ledger (`ids/…`) and the request's own folder in the control bucket follow the key's
namespace, so that the same id in two teams is two requests with two folders.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

REQUEST_KEY_PREFIX = "request:"


def id_namespace(team: str | None, default_team: str | None) -> str | None:
    """The namespace of the request ids `team` names: None (the keys of before issue 38) for the default team and
    without teams (`team` None); else the team's name."""
    return None if team is None or team == default_team else team


def request_key(request_id: str, namespace: str | None = None) -> str:
    return f"{REQUEST_KEY_PREFIX}{namespace}/{request_id}" if namespace else f"{REQUEST_KEY_PREFIX}{request_id}"


def namespace_of(key: str) -> str | None:
    """The team namespace of a request key (None: the default team's, a marker's or a message's key)."""
    if not key.startswith(REQUEST_KEY_PREFIX):
        return None
    namespace, slash, _ = key.removeprefix(REQUEST_KEY_PREFIX).partition("/")
    return namespace if slash else None


def id_claim(request_id: str, key: str) -> str:
    """The name of the id's claim under the ledger's `ids/`: `<team>/<id>` in a team's namespace, else `<id>`."""
    namespace = namespace_of(key)
    return f"{namespace}/{request_id}" if namespace else request_id


def marker_key(bucket: str, name: str, generation: str | int) -> str:
    return f"gcs:{bucket}/{name}#{generation}"


def schedule_key(rule: str, scheduled: datetime) -> str:
    """A tick's key: its rule and its fire time, ISO 8601 in UTC to the minute (cron's resolution)."""
    return f"schedule:{rule}#{scheduled.astimezone(UTC).strftime('%Y-%m-%dT%H:%MZ')}"


def alert_key(model: str, incident_id: str) -> str:
    return f"alert:{model}#{incident_id}"


def message_key(message_id: str) -> str:
    return f"pubsub:{message_id}"


def key_hash(request_key: str) -> str:
    """The label value that ties a CustomJob to its ledger record (labels allow ≤ 63 of [a-z0-9_-])."""
    return hashlib.sha256(request_key.encode()).hexdigest()[:40]
