"""The browser fixtures for tests under tests/browser (tests/browser/chromium.py); tests elsewhere (tests/e2e)
import them from there."""

from tests.browser.chromium import browser, page

__all__ = ["browser", "page"]
