"""Request keys: the idempotency key of each request (DESIGN.md §4), written here and nowhere else.

- `request:<request_id>` when the requester names the id (Pub/Sub requests always do, markers may);
- `gcs:<bucket>/<object>#<generation>` for a marker that does not;
- `pubsub:<message id>` for a message that could not be read far enough to find an id (it is only rejected).
"""

from __future__ import annotations

import hashlib


def request_key(request_id: str) -> str:
    return f"request:{request_id}"


def marker_key(bucket: str, name: str, generation: str | int) -> str:
    return f"gcs:{bucket}/{name}#{generation}"


def message_key(message_id: str) -> str:
    return f"pubsub:{message_id}"


def key_hash(request_key: str) -> str:
    """The label value that ties a CustomJob to its ledger record (labels allow ≤ 63 of [a-z0-9_-])."""
    return hashlib.sha256(request_key.encode()).hexdigest()[:40]
