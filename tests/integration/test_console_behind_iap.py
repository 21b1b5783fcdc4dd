"""The console as it runs in the cloud (issue 45 point 3, issue 35): the real app with the IAP viewer, its ledger on
fake-gcs-server. A request without IAP's signed header gets a 403 page; a viewer of team a, proved by a token signed
with a key the viewer takes for IAP's, sees team a's request page and events and not team b's."""

from __future__ import annotations

import os
import queue
import uuid

import httpx
import pytest
from starlette.testclient import TestClient

from functions.cloud.gcs import Gcs
from functions.ledger.requests import Ledger
from functions.settings import Settings
from functions.teams import parse_teams
from local.fake_gcs import create_bucket
from local.names import LOCAL_PROJECT, LOCAL_REGION, LOCAL_TRAINER_IMAGE
from schemas.events import JobEvent
from tests.integration.test_console import read_events, rejected, served, wait_until
from tests.unit.conftest import make_record
from tests.unit.test_console_identity import AUDIENCE, KEY_ID, PUBLIC, _token
from trainctl.console.app import create_app
from trainctl.console.identity import ConsoleAccess, IapKeys, iap_viewer_of
from trainctl.console.live import LiveFeed

pytestmark = pytest.mark.integration

TEAMS = {
    "default_team": "a",
    "teams": {
        "a": {"watchers": {"ana": "user:ana@example.com"}},
        "b": {"watchers": {"bo": "user:bo@example.com"}},
    },
}


@pytest.fixture
def settings(fake_gcs) -> Settings:
    bucket = f"iap-control-{uuid.uuid4().hex[:8]}"
    create_bucket(os.environ["STORAGE_EMULATOR_HOST"], LOCAL_PROJECT, bucket)
    ledger = Ledger(Gcs(LOCAL_PROJECT), bucket)
    for team in ("a", "b"):
        ledger.create(
            make_record(key=f"request:{team}-run", key_hash=f"hash-{team}", request_id=f"{team}-run", team=team)
        )
    return Settings(
        project=LOCAL_PROJECT,
        region=LOCAL_REGION,
        control_bucket=bucket,
        events_topic="unused",
        trainer_image=LOCAL_TRAINER_IMAGE,
        teams=parse_teams(TEAMS),
    )


def iap_viewer(settings: Settings):
    return iap_viewer_of(AUDIENCE, ConsoleAccess.of(settings.teams), IapKeys(fetch=lambda: {KEY_ID: PUBLIC}))


def signed(email: str) -> dict[str, str]:
    return {"x-goog-iap-jwt-assertion": _token(email)}


def test_without_the_signed_header_every_page_is_refused(settings):
    with TestClient(create_app(settings, iap_viewer(settings), follow=False)) as client:
        for path in ("/", "/requests/a-run", "/models", "/history", "/live"):
            page = client.get(path, headers={"x-goog-authenticated-user-email": "accounts.google.com:ana@example.com"})
            assert page.status_code == 403, path
            assert "came through IAP" in page.text


def test_a_viewer_of_team_a_sees_its_request_page_and_not_team_bs(settings):
    with TestClient(create_app(settings, iap_viewer(settings), follow=False)) as client:
        own = client.get("/requests/a-run", headers=signed("ana@example.com"))
        other = client.get("/requests/b-run", headers=signed("ana@example.com"))
        bs_own = client.get("/requests/b-run", headers=signed("bo@example.com"))
        stranger = client.get("/requests/a-run", headers=signed("mallory@example.com"))
    assert own.status_code == 200 and "a-run" in own.text
    assert other.status_code == 404 and "b-run" in other.text and "hash-b" not in other.text
    assert bs_own.status_code == 200
    assert stranger.status_code == 403 and "may watch no team" in stranger.text


class Published:
    """A stand-in for the events subscription: what `publish` adds, delivered at the next poll."""

    def __init__(self) -> None:
        self.waiting: queue.Queue[JobEvent] = queue.Queue()

    def publish(self, *events: JobEvent) -> None:
        for event in events:
            self.waiting.put(event)

    def poll(self, timeout: float = 5.0) -> list[JobEvent]:
        try:
            taken = [self.waiting.get(timeout=0.1)]
        except queue.Empty:
            return []
        while not self.waiting.empty():
            taken.append(self.waiting.get())
        return taken

    def close(self) -> None:
        pass


def test_a_viewer_of_team_a_gets_team_as_events_alone(settings):
    stream = Published()
    app = create_app(settings, iap_viewer(settings), feed=LiveFeed(lambda: stream))
    with served(app) as url, httpx.stream("GET", f"{url}/live", headers=signed("ana@example.com"), timeout=60) as live:
        assert live.status_code == 200
        wait_until(lambda: app.state.fanout.clients == 1)
        stream.publish(rejected("for-b", "b"), rejected("for-a", "a"))
        wait_until(lambda: {"for-a", "for-b"} <= {e.request_id for e in app.state.fanout.latest()})
        stream.publish(rejected("last-for-a", "a"))
        seen = [event["request_id"] for event in read_events(live, until="last-for-a")]
    assert "for-a" in seen and "for-b" not in seen
