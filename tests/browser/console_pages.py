"""The console's pages as the browser tests read them: only through the DOM hooks of issue 45's contract (ids and
data attributes, never text positions), and the live view (`ol#live`) followed without a reload."""

from __future__ import annotations

from playwright.sync_api import Page

LIVE_ITEMS = "[...document.querySelectorAll('ol#live > li[data-request-id]')]"


def open_live(page: Page, url: str) -> None:
    """The now page, once its /live stream has answered, with a marker on window that a reload or a navigation
    would lose (same_page)."""
    with page.expect_response(lambda response: response.url.endswith("/live")):
        page.goto(url)
    page.evaluate("window.stillTheSamePage = true")


def same_page(page: Page) -> bool:
    """Whether the page open_live opened is still the one shown: no reload, no navigation since."""
    return bool(page.evaluate("window.stillTheSamePage === true"))


def live_items(page: Page) -> list[tuple[str, str]]:
    """(request id, state) of each item of the live view, in the page's order."""
    items = page.evaluate(f"{LIVE_ITEMS}.map(li => [li.dataset.requestId, li.dataset.state])")
    return [(request_id, state) for request_id, state in items]


def live_states(page: Page, request_id: str) -> list[str]:
    return [state for shown, state in live_items(page) if shown == request_id]


def wait_for_live(page: Page, request_id: str, state: str, timeout_ms: float = 120_000) -> None:
    """Until the live view shows `state` for `request_id`."""
    page.wait_for_function(
        f"([id, state]) => {LIVE_ITEMS}.some(li => li.dataset.requestId === id && li.dataset.state === state)",
        arg=[request_id, state],
        timeout=timeout_ms,
    )
