"""The web console (issue 45) over a deployment on the emulators, with teams sharing a GPU quota: its pages list the
requests running and waiting (and why each waits), the teams' GPUs, a request's timeline, metrics and curve, the
history; everything a requester or job wrote is escaped; only GET and HEAD are answered; /live streams each published
event, to each viewer only their teams' events."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import uvicorn
from google.api_core.exceptions import NotFound
from google.cloud import pubsub_v1
from starlette.applications import Starlette
from starlette.testclient import TestClient

from functions.cloud.gcs import Gcs
from functions.ledger.history import outcome_of
from functions.ledger.requests import Ledger
from functions.settings import Settings
from local.names import LOCAL_PROJECT
from schemas.events import JobEvent, Rejected, to_pubsub_message
from tests.integration.deployment import (
    TRAINER_STAND_IN,
    Deployment,
    accuracy,
    builtin_request,
    fake_node_request,
    serving,
)
from tests.integration.test_teams import CAPACITY, V100, ask, teams_settings
from trainctl.console.app import create_app
from trainctl.console.identity import Viewer
from trainctl.console.reading import Sources

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MODEL = "console-model"
HOSTILE_ID = '<script>alert("id")</script>'
HOSTILE_METRIC = "<script>alert('metric')</script>"


@pytest.fixture(scope="module")
def stack(jobservice, tmp_path_factory) -> Iterator[Deployment]:
    """Teams a and b on the V100 quota (limit 8; a owns 2 and may borrow 2): a's two requests hold 4 GPUs, its third
    waits on its team's share; b runs one; b's finished run wrote metrics with a hostile name and a curve."""
    with serving(jobservice, tmp_path_factory.mktemp("functions"), CAPACITY, settings_for=teams_settings) as deployed:
        events = deployed.events()
        for index in range(3):
            ask(deployed, "a", f"a-v{index}", V100, sleep="300")
        ask(deployed, "b", "b-run", V100, sleep="300")
        metrics = json.dumps({"val_accuracy": 0.91, HOSTILE_METRIC: 1.5})
        done = fake_node_request("b-done", "--sleep", "0.2", "--metrics", metrics, resources=V100)
        assert deployed.request(done, topic="it-requests-b") == 200
        events.wait_for("a-v2", "queued")
        events.wait_for("b-done", "succeeded", timeout=120, act=deployed.reconcile)
        yield deployed


@pytest.fixture
def settings(stack: Deployment, monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name, value in stack.settings_env(**teams_settings(stack)).items():
        monkeypatch.setenv(name, value)
    return Settings.from_env()


def only(team: str) -> Viewer:
    return Viewer(f"viewer of {team}", frozenset({team}))


def rows(html: str, marker: str) -> str:
    """The part of the page from the element `marker` opens to the end of its table."""
    start = html.index(marker)
    return html[start : html.index("</table>", start)]


def test_the_now_page_lists_active_requests_the_queue_with_why_each_waits_and_the_teams(settings):
    with TestClient(create_app(settings, follow=False)) as client:
        page = client.get("/")
        tables = client.get("/now/tables")  # what htmx re-fetches when an event arrives
    assert page.status_code == tables.status_code == 200
    assert tables.text.lstrip().startswith("<h2>") and '<table id="active">' in tables.text
    assert 'hx-get="/now/tables"' in page.text and '<ol id="live"' in page.text
    active = rows(page.text, '<table id="active">')
    for request_id in ("a-v0", "a-v1", "a-v2", "b-run"):
        assert f'data-request-id="{request_id}"' in active
    assert 'data-request-id="b-done"' not in active  # finished
    assert 'data-request-id="a-v2" data-state="queued"' in active
    queue = rows(page.text, '<table id="queue">')
    assert 'data-request-id="a-v2" data-held-by="team_share"' in queue
    assert queue.count("data-request-id=") == 1
    teams = rows(page.text, '<table id="teams">')
    for team in ("shared", "a", "b", "c"):
        assert f'data-team="{team}"' in teams
    a_row = teams[teams.index('data-team="a"') : teams.index("</tr>", teams.index('data-team="a"'))]
    # a's two jobs of 2 V100s: 4 GPUs in jobs, 4 held in the quota pool against a nominal 2: it borrows 2.
    assert [cell.split(">")[-1] for cell in a_row.split("</td>")[1:5]] == ["4", "4", "2", "2"]


def test_a_viewer_of_one_team_sees_only_that_teams_requests_queue_and_row(settings):
    with TestClient(create_app(settings, lambda request: only("b"), follow=False)) as client:
        page = client.get("/").text
        other = client.get("/requests/a-v0?team=a")
        own = client.get("/requests/b-run?team=b")
        unknown = client.get("/requests/b-run?team=../b")
    assert 'data-request-id="b-run"' in page and "a-v0" not in page and "a-v2" not in page
    assert 'data-team="b"' in page and 'data-team="a"' not in page
    assert other.status_code == 404 and own.status_code == 200 and unknown.status_code == 404


def test_a_request_page_shows_its_timeline_metrics_escaped_and_its_curve(settings, stack):
    record = stack.record("request:b/b-done")
    assert record is not None
    model_dir = record["artifacts"]["model_dir"]
    bucket, _, folder = model_dir.removeprefix("gs://").partition("/")
    history = "".join(
        json.dumps({"epoch": epoch, "train_loss": 1 / epoch, "val_loss": 1.2 / epoch, "val_accuracy": 0.5 + epoch / 10})
        + "\n"
        for epoch in (1, 2, 3)
    )
    stack.storage().bucket(bucket).blob(f"{folder.rstrip('/')}/metrics.jsonl").upload_from_string(history)
    with TestClient(create_app(settings, follow=False)) as client:
        page = client.get("/requests/b-done?team=b")
    assert page.status_code == 200
    timeline = page.text[page.text.index('<ol id="timeline">') :]
    timeline = timeline[: timeline.index("</ol>")]
    states = re.findall(r'<li data-state="(\w+)"', timeline)
    assert states == ["accepted", "running", "succeeded"], states  # the job's start from the history's outcome
    metrics = page.text[page.text.index('<div id="metrics">') :]
    assert "val_accuracy" in metrics and "0.91" in metrics
    assert "&lt;script&gt;alert(&#39;metric&#39;)&lt;/script&gt;" in metrics
    assert "<script>alert" not in page.text
    curve = page.text[page.text.index('<script type="application/json" id="curve-data">') :]
    data = json.loads(curve[curve.index(">") + 1 : curve.index("</script>")])
    assert data["x"] == [1, 2, 3] and set(data["series"]) == {"train_loss", "val_loss", "val_accuracy"}
    assert "console.cloud.google.com/logs/query" in page.text  # not the local stack's process: the cloud's link


def test_on_the_local_stack_a_request_page_lists_its_nodes_log_files(settings, jobservice_control):
    sources = Sources.of_settings(settings, log_paths=jobservice_control.replica_logs)
    with TestClient(create_app(settings, sources=sources, follow=False, logs_local=True)) as client:
        page = client.get("/requests/b-done?team=b").text
    links = page[page.index('<ul id="links">') :]
    links = links[: links.index("</ul>")]
    assert "workerpool0-0" in links and ".log</code>" in links and "trainctl local logs b-done" in links
    assert "console.cloud.google.com" not in links


def test_a_hostile_request_id_is_escaped_on_every_page(settings, stack):
    """A rejection names whatever id a document held: the controller files it in the history index and publishes it."""
    event = rejected(HOSTILE_ID, "b", "<img src=x onerror=alert(1)>")
    Ledger(Gcs(LOCAL_PROJECT), stack.control_bucket).record_outcome(outcome_of(event, None), f"rejected-{event.ce_id}")
    app = create_app(settings)
    with TestClient(app) as client:
        publish(stack, event)
        wait_until(lambda: any(e.request_id == HOSTILE_ID for e in app.state.fanout.latest()))
        pages = {path: client.get(path) for path in ("/", "/history?since=1h", f"/requests/{HOSTILE_ID}")}
    assert pages["/"].status_code == pages["/history?since=1h"].status_code == 200
    assert pages[f"/requests/{HOSTILE_ID}"].status_code == 404
    for path, page in pages.items():
        assert "<script>alert" not in page.text and "<img src=x" not in page.text, path
    assert "&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;" in pages["/"].text  # in the live list
    assert "&lt;script&gt;alert(&#34;id&#34;)&lt;/script&gt;" in pages["/history?since=1h"].text


def test_the_history_page_pages_the_window_and_shows_the_figures(settings):
    with TestClient(create_app(settings, follow=False)) as client:
        page = client.get("/history?since=1h")
        refused = client.get("/history?since=forever")
    assert page.status_code == 200 and refused.status_code == 400
    assert 'id="figures"' in page.text and 'id="charts"' in page.text
    assert 'data-request-id="b-done"' in page.text
    figures = page.text[page.text.index('<section id="figures">') :]
    assert 'data-figure="succeeded">' in figures
    by_team = rows(page.text, '<table id="by-team">')
    assert '<tr data-team="b">' in by_team


def test_only_get_and_head_are_answered(settings):
    with TestClient(create_app(settings, follow=False)) as client:
        for path in ("/", "/requests/b-run", "/models", "/history", "/live", "/healthz", "/static/console.css"):
            for method in ("POST", "PUT", "DELETE", "PATCH"):
                assert client.request(method, path).status_code == 405, (method, path)
        assert client.head("/").status_code == 200
        assert client.head("/live").headers["content-type"].startswith("text/event-stream")  # and it ends
        assert client.get("/healthz").text == "ok"
        policy = client.get("/").headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'self'" in policy


@pytest.fixture(scope="module")
def models_stack(jobservice, tmp_path_factory) -> Iterator[Deployment]:
    """A deployment whose built-in runs are the trainer stand-in: one model, a version promoted, then one held."""
    log_dir = tmp_path_factory.mktemp("functions")
    with serving(jobservice, log_dir, TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN) as deployed:
        events = deployed.events()
        for request_id, metrics, decision in [
            ("m-1", accuracy(0.80), "promoted"),
            ("m-2", accuracy(0.81, champion=0.80) | {HOSTILE_METRIC: 2.0}, "held"),
        ]:
            document = builtin_request(deployed, request_id, "--metrics", json.dumps(metrics), model={"name": MODEL})
            assert deployed.request(document) == 200
            events.wait_for(request_id, decision, act=deployed.reconcile, timeout=120)
        yield deployed


def test_the_models_page_shows_versions_each_decision_with_its_figures_and_the_endpoints(models_stack, monkeypatch):
    for name, value in models_stack.settings_env(TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN).items():
        monkeypatch.setenv(name, value)
    with TestClient(create_app(Settings.from_env(), follow=False)) as client:
        page = client.get("/models")
    assert page.status_code == 200
    versions = rows(page.text, '<table id="versions">')
    assert f'data-model="{MODEL}" data-version="1"' in versions and f'data-model="{MODEL}" data-version="2"' in versions
    decisions = rows(page.text, '<table id="decisions">')
    assert decisions.count('<tr data-decision="promoted"') == 1 and decisions.count('<tr data-decision="held"') == 1
    assert "challenger 0.81, champion 0.8" in decisions  # the held decision's figures
    assert "val_accuracy 0.81" in versions  # the headline metric, as `trainctl models show` prints it
    assert 'id="endpoints"' in page.text and "<script>alert" not in page.text


# ---- /live ----------------------------------------------------------------------------------------------------------


def rejected(request_id: str, team: str, message: str = "refused") -> Rejected:
    return Rejected(
        request_id=request_id,
        request_key=f"request:{team}/{request_id}",
        time=datetime.now(UTC),
        message=message,
        reason="invalid",
        errors=["request_id: bad"],
        team=team,
        delivery=uuid.uuid4().hex,
    )


def publish(stack: Deployment, *events: JobEvent) -> None:
    publisher = pubsub_v1.PublisherClient()
    for event in events:
        message = to_pubsub_message(event, "//tests")
        publisher.publish(publisher.topic_path(LOCAL_PROJECT, stack.events_topic), message.data, **message.attributes)
    publisher.stop()


def wait_until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@contextlib.contextmanager
def served(app: Starlette) -> Iterator[str]:
    """The app on a real server (a stream never ends, so it is read over a socket): its base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    wait_until(lambda: server.started)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        listener.close()


def read_events(response: httpx.Response, until: str) -> list[dict]:
    """The events of an SSE stream up to and including the one whose request id is `until`."""
    found, kind = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            kind = line.removeprefix("event: ")
        elif line.startswith("data: "):
            assert kind == "trainctl"
            found.append(json.loads(line.removeprefix("data: ")))
            if found[-1]["request_id"] == until:
                return found
    raise AssertionError(f"the stream ended before {until}: {found}")


def test_live_streams_a_published_event_and_deletes_its_subscription_at_shutdown(settings, stack):
    app = create_app(settings)
    subscriber = pubsub_v1.SubscriberClient()
    with served(app) as url, httpx.stream("GET", f"{url}/live", timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        subscription = app.state.feed._stream.subscription
        wait_until(lambda: app.state.fanout.clients == 1)
        publish(stack, rejected("live-1", "b"))
        (event,) = read_events(response, until="live-1")
        assert (event["state"], event["team"]) == ("rejected", "b")
    with pytest.raises(NotFound):
        subscriber.get_subscription(subscription=subscription)


def test_live_sends_each_viewer_only_their_teams_events(settings, stack):
    app = create_app(settings, lambda request: only("b"))
    with served(app) as url, httpx.stream("GET", f"{url}/live", timeout=60) as response:
        wait_until(lambda: app.state.fanout.clients == 1)
        publish(stack, rejected("for-a", "a"), rejected("for-b", "b"))
        wait_until(lambda: {"for-a", "for-b"} <= {e.request_id for e in app.state.fanout.latest()})
        publish(stack, rejected("last-for-b", "b"))
        seen = [e["request_id"] for e in read_events(response, until="last-for-b")]
    assert "for-b" in seen and "for-a" not in seen


# ---- the command ----------------------------------------------------------------------------------------------------


def start_console(stack: Deployment, *args: str, **extra_env: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCTL_")}
    env |= stack.settings_env(**teams_settings(stack)) | {"PYTHONPATH": str(REPO)} | extra_env
    return subprocess.Popen(
        [sys.executable, "-m", "trainctl", "console", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_command_prints_its_url_first_answers_and_stops_cleanly_on_sigterm(stack):
    console = start_console(stack, "--port", "0")
    try:
        assert console.stdout is not None
        first = console.stdout.readline()
        assert re.fullmatch(r"console: http://127\.0\.0\.1:\d+/\n", first), first
        url = first.removeprefix("console: ").strip()
        answer = None
        deadline = time.monotonic() + 60
        while answer is None:
            with contextlib.suppress(httpx.TransportError):
                answer = httpx.get(f"{url}healthz", timeout=5)
            assert time.monotonic() < deadline and console.poll() is None, console.stderr and console.stderr.read()
            time.sleep(0.2) if answer is None else None
        assert answer.status_code == 200 and answer.text == "ok"
        assert httpx.post(f"{url}", timeout=5).status_code == 405
        with httpx.stream("GET", f"{url}live", timeout=30) as live:  # a browser tab left open
            assert next(live.iter_lines()).startswith(":")
            console.send_signal(signal.SIGTERM)
            assert console.wait(timeout=30) == 0
    finally:
        if console.poll() is None:
            console.kill()
            console.wait()
    assert "Traceback" not in (console.stderr.read() if console.stderr else "")


def test_the_command_warns_when_told_to_listen_beyond_this_machine(stack):
    console = start_console(stack, "--port", "0", "--host", "0.0.0.0")
    try:
        assert console.stdout is not None and console.stderr is not None
        assert console.stdout.readline().startswith("console: http://0.0.0.0:")
        warning = console.stderr.readline()
        assert "unauthenticated" in warning and "0.0.0.0" in warning
    finally:
        console.send_signal(signal.SIGTERM)
        assert console.wait(timeout=30) == 0


def test_the_command_behind_iap_lets_no_one_in_without_iaps_signed_header(stack):
    """The Cloud Run service's command (trainctl/console/Dockerfile): the environment names IAP's audience, so the
    console uses the IAP viewer, not the local operator, and does not call itself unauthenticated."""
    audience = "/projects/123/locations/us-central1/services/trainctl-console"
    console = start_console(stack, "--port", "0", "--host", "0.0.0.0", TRAINCTL_CONSOLE_IAP_AUDIENCE=audience)
    try:
        assert console.stdout is not None
        url = console.stdout.readline().removeprefix("console: ").strip()
        assert "Identity-Aware Proxy" in console.stdout.readline()
        answer = None
        deadline = time.monotonic() + 60
        while answer is None:
            with contextlib.suppress(httpx.TransportError):
                answer = httpx.get(url, timeout=5)
            assert time.monotonic() < deadline and console.poll() is None
            time.sleep(0.2) if answer is None else None
        assert answer.status_code == 403
        forged = httpx.get(url, headers={"x-goog-authenticated-user-email": "accounts.google.com:a@x.test"}, timeout=5)
        assert forged.status_code == 403
    finally:
        console.send_signal(signal.SIGTERM)
        assert console.wait(timeout=30) == 0
    assert "unauthenticated" not in (console.stderr.read() if console.stderr else "")


def test_a_long_running_stream_remembers_a_bounded_number_of_event_ids(settings, stack, monkeypatch):
    """The console follows the events for days: the ids it drops copies by are the latest MAX_SEEN, not every one."""
    from trainctl import eventstream

    monkeypatch.setattr(eventstream, "MAX_SEEN", 2)
    with eventstream.EventStream(settings.project, settings.events_topic) as stream:
        publish(stack, *(rejected(f"bounded-{i}", "b") for i in range(3)))
        seen: list[str] = []

        def all_three() -> bool:
            seen.extend(event.request_id for event in stream.poll(timeout=2))
            return len(seen) >= 3

        wait_until(all_three)
        assert sorted(seen) == ["bounded-0", "bounded-1", "bounded-2"]
        assert len(stream._seen) == 2
