"""The console's screenshot in the README (docs/images/console.png) is one the suite's browser made
(tests/e2e/test_demo.py with TRAINCTL_UPDATE_SCREENSHOTS=1) and stays small."""

from __future__ import annotations

from tests.browser.chromium import SCREENSHOT, SCREENSHOT_LIMIT, VIEWPORT

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_the_committed_screenshot_is_a_small_png_of_the_viewport():
    content = SCREENSHOT.read_bytes()
    assert content.startswith(PNG_SIGNATURE)
    assert len(content) <= SCREENSHOT_LIMIT, f"{SCREENSHOT} is {len(content)} bytes; keep it under {SCREENSHOT_LIMIT}"
    width, height = int.from_bytes(content[16:20], "big"), int.from_bytes(content[20:24], "big")  # the IHDR chunk
    assert (width, height) == (VIEWPORT["width"], VIEWPORT["height"])
