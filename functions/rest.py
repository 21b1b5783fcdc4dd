"""HTTP sessions for the adapters that speak Google's REST APIs (Cloud Storage, Pub/Sub), emulators included.

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
