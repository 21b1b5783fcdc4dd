"""`trainctl console` on the session's local stack, looked at in headless Chromium (issue 45, point 4): the pages
load with the stack's data, the live view takes each event as it is published without reloading the page, and
what a requester or a job wrote (a request id, a display name, metric names) shows as text, never as markup."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Page

from tests.browser.chromium import Console, browser, page, screenshot
from tests.browser.console_pages import live_states, open_live, same_page, wait_for_live
from tests.e2e.running_stack import RunningStack
from tests.integration.deployment import fake_node_request

pytestmark = pytest.mark.integration
__all__ = ["browser", "page"]  # the fixtures, used by name

# Long enough for a request's path through the stack (admission, a job, its end) on a busy machine.
EVENT_WAIT_MS = 120_000
# What a requester or a job controls, each a script that would set window.pwned if it ever ran as markup. A request
# id cannot carry one (schemas/request.py REQUEST_ID_RE: lowercase letters, digits, '.', '_', '-'): a document whose
# id breaks the rule comes back as `rejected` with the id "unknown", the hostile id quoted in its errors. A display
# name may be any text without control characters; a job names its metrics as it likes (a name over 128 characters
# is left out and quoted, clipped to 40, in the `succeeded` message the live view shows) and writes short text ones.
HOSTILE_ID = "<img src=x onerror=\"window.pwned='id'\">"
HOSTILE_NAME = "</td></tr><script>window.pwned='name'</script><img src=y onerror=\"window.pwned='name'\">"
LEFT_OUT_METRIC = "<img src=x onerror=window.pwned='note'>"  # 39 characters: whole in the message
HOSTILE_METRICS = {
    "<b onmouseover=\"window.pwned='metric'\">accuracy</b>": 0.5,
    LEFT_OUT_METRIC + "x" * 128: 1,
    "note": "<svg onload=\"window.pwned='value'\"></svg>",
}
# Elements made from a payload: any attribute or script naming window.pwned.
INJECTED = """() => [...document.querySelectorAll('*')]
    .filter(e => [...e.attributes].some(a => a.value.includes('pwned'))
        || (e.tagName === 'SCRIPT' && e.text.includes('pwned')))
    .map(e => e.outerHTML)"""


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def console(stack: RunningStack) -> Iterator[Console]:
    started = Console(stack.env)
    try:
        yield started
    finally:
        started.stop()


def submit(stack: RunningStack, tmp_path: Path, document: dict, *options: str) -> None:
    path = tmp_path / f"{uuid.uuid4().hex}.yaml"
    path.write_text(yaml.safe_dump(document))
    submitted = stack.trainctl("submit", str(path), *options)
    assert submitted.returncode in (0, 2), submitted.stdout + submitted.stderr  # 2: rejected (--no-validate)


def assert_nothing_injected(page: Page) -> None:
    assert page.evaluate("typeof window.pwned") == "undefined"
    assert page.evaluate(INJECTED) == []


def test_the_pages_load_with_the_stacks_data(stack: RunningStack, console: Console, page: Page, tmp_path: Path):
    """An active request in the now page's table with its state, then its timeline, metrics and curve once it
    succeeded; the models and history pages with their tables and figures."""
    request_id = unique("console-pages")
    release = tmp_path / "release"
    document = fake_node_request(request_id, "--until-file", str(release), "--metrics", json.dumps({"accuracy": 0.875}))
    with stack.watch() as watch:
        submit(stack, tmp_path, document)
        watch.wait_for(lambda event: event["request_id"] == request_id and event["state"] == "running")
        page.goto(console.url)
        row = page.locator(f'table#active tr[data-request-id="{request_id}"]')
        assert row.get_attribute("data-state") == "running"
        assert page.locator("table#queue").count() == 1
        assert page.locator("table#teams").count() == 1
        screenshot(page, tmp_path / "screenshots" / "now.png")
        release.touch()
        watch.wait_for(lambda event: event["request_id"] == request_id and event["state"] == "succeeded")

    page.goto(f"{console.url}requests/{request_id}")
    states = page.eval_on_selector_all("ol#timeline > li[data-state]", "items => items.map(li => li.dataset.state)")
    assert states[:4] == ["accepted", "submitted", "running", "succeeded"], states
    assert "0.875" in page.locator("#metrics").inner_text()
    assert page.locator("#curve").count() == 1
    screenshot(page, tmp_path / "screenshots" / "request.png")

    page.goto(f"{console.url}models")
    for hook in ("table#versions", "table#decisions", "#endpoints"):
        assert page.locator(hook).count() == 1, hook

    page.goto(f"{console.url}history?since=1h")
    assert page.locator("#figures").count() == 1
    assert page.locator("#charts").count() == 1
    assert page.script_errors == []  # type: ignore[attr-defined]


def test_the_live_view_shows_each_event_as_it_is_published_without_a_reload(
    stack: RunningStack, console: Console, page: Page, tmp_path: Path
):
    open_live(page, console.url)
    request_id = unique("console-live")

    submit(stack, tmp_path, fake_node_request(request_id, "--sleep", "0.5"))

    wait_for_live(page, request_id, "succeeded", EVENT_WAIT_MS)
    assert {"accepted", "submitted", "running", "succeeded"} <= set(live_states(page, request_id))
    assert same_page(page)
    assert page.script_errors == []  # type: ignore[attr-defined]


def test_the_now_pages_tables_follow_the_events_without_a_reload(
    stack: RunningStack, console: Console, page: Page, tmp_path: Path
):
    open_live(page, console.url)
    request_id = unique("console-tables")
    release = tmp_path / "release"

    submit(stack, tmp_path, fake_node_request(request_id, "--until-file", str(release)))
    wait_for_live(page, request_id, "running", EVENT_WAIT_MS)
    try:
        page.wait_for_selector(f'table#active tr[data-request-id="{request_id}"][data-state="running"]', timeout=30_000)
    finally:
        release.touch()
    wait_for_live(page, request_id, "succeeded", EVENT_WAIT_MS)
    page.wait_for_selector(f'table#active tr[data-request-id="{request_id}"]', state="detached", timeout=30_000)
    assert same_page(page)


def test_what_a_requester_or_a_job_wrote_shows_as_text_never_as_markup(
    stack: RunningStack, console: Console, page: Page, tmp_path: Path
):
    """Issue 45, point 3: every value a requester or a job wrote is escaped, in the live view (JavaScript) and in
    the pages the server renders."""
    open_live(page, console.url)
    named = unique("console-hostile")

    submit(stack, tmp_path, fake_node_request(HOSTILE_ID), "--no-validate")
    document = fake_node_request(named, "--sleep", "0.5", "--metrics", json.dumps(HOSTILE_METRICS))
    submit(stack, tmp_path, document | {"display_name": HOSTILE_NAME})

    wait_for_live(page, "unknown", "rejected", EVENT_WAIT_MS)
    wait_for_live(page, named, "succeeded", EVENT_WAIT_MS)
    assert same_page(page)
    assert_nothing_injected(page)
    assert any(LEFT_OUT_METRIC in text for text in page.locator("ol#live > li").all_inner_texts())  # shown, as text
    for path in ("", "history?since=1h", "models", f"requests/{named}"):
        page.goto(console.url + path)
        assert_nothing_injected(page)
    assert "<b onmouseover=" in page.locator("#metrics").inner_text()  # the request page shows it, as text
    assert page.script_errors == []  # type: ignore[attr-defined]


LIVE_JS = Path(__file__).resolve().parents[2] / "trainctl" / "console" / "static" / "live.js"
# An EventSource the test drives: live.js's listener is called with the event as /live would send it.
FAKE_EVENT_SOURCE = """window.EventSource = function (url) { window.liveSource = this; this.listeners = {}; };
window.EventSource.prototype.addEventListener = function (name, listener) { this.listeners[name] = listener; };"""


def test_a_long_live_message_is_cut_at_a_word_with_an_ellipsis_and_whole_in_its_title(page: Page):
    """live.js on its own (no stack): the line it adds for an event with a long message (it cut at 300 characters,
    mid-word, with no ellipsis)."""
    long = "the job wrote <b>this</b> " + "a rather long sentence here " * 20
    page.set_content("<html><body><ol id='live'></ol></body></html>")
    page.add_script_tag(content=FAKE_EVENT_SOURCE)
    page.add_script_tag(content=LIVE_JS.read_text())
    event = {"state": "running", "request_id": "r1", "team": None, "time": "2026-11-28T05:00:00+00:00", "message": long}
    page.evaluate("event => window.liveSource.listeners.trainctl({data: JSON.stringify(event)})", event)
    message = page.locator("ol#live > li[data-request-id='r1'] span.message")
    shown = message.text_content() or ""
    assert len(shown) <= 300 and shown.endswith("…") and long[len(shown) - 1] == " "  # at a word's end
    assert long.startswith(shown[:-1]) and message.get_attribute("title") == long
    assert page.locator("ol#live b").count() == 0  # text, never markup
