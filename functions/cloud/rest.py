"""HTTP sessions for the adapters that speak Google's REST APIs (Cloud Storage, Pub/Sub, Vertex, Cloud Quotas),
emulators included, and the reading of Google's REST error shape.

The environment's proxy and CA-bundle settings are read once, when the session is made, as the controller's
settings are: with `trust_env` requests re-reads all of os.environ on every call, which cost more CPU than the
rest of a warm duplicate delivery (bench/RESULTS.md).
"""

from __future__ import annotations

import os
from typing import Any


def rest_session(emulator_url: str | None, api_url: str, scopes: list[str]) -> tuple[Any, str]:
    """(session, base URL): a plain session to the emulator when there is one, else an authorized one to the API."""
    import requests

    if emulator_url:
        session, base = requests.Session(), emulator_url.rstrip("/")
    else:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials, _ = google.auth.default(scopes=scopes)
        session, base = AuthorizedSession(credentials), api_url
    # What requests would work out from the environment on each call (every call goes to `base`).
    session.proxies = requests.utils.get_environ_proxies(base)
    session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    session.trust_env = False
    return session, base


def request_json(session: Any, method: str, url: str, timeout: float, service: str, **kwargs: Any) -> tuple[int, Any]:
    """(HTTP status, JSON body or None) of a call; an unreachable service (requests' ConnectionError and Timeout:
    the call may or may not have run) is worth another attempt (Retryable)."""
    from functions.cloud.retry import Retryable

    try:
        response = session.request(method, url, timeout=timeout, **kwargs)
    except OSError as exc:
        raise Retryable(f"cannot reach {service}: {exc}") from None
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, None


# google/rpc/code.proto: the names Google's REST errors carry in `status`, and their numbers.
RPC_CODES = {
    "OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3, "DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7, "RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9, "ABORTED": 10,
    "OUT_OF_RANGE": 11, "UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}  # fmt: skip
# For an answer without Google's error body (a proxy's page): code.proto's HTTP mapping read backwards.
_CODE_OF_HTTP_STATUS = {400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 429: 8, 499: 1, 501: 12, 503: 14, 504: 4}


def google_error(status: int, body: Any) -> tuple[int, str]:
    """(google.rpc.Code number, message) of a call refused with HTTP `status` and JSON `body`
    (`{"error": {"code", "message", "status"}}`)."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("status") in RPC_CODES:
        return RPC_CODES[error["status"]], str(error.get("message", ""))
    return _CODE_OF_HTTP_STATUS.get(status, 13 if status >= 500 else 2), f"HTTP {status}"
