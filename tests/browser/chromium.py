"""Headless Chromium for the console's browser tests (issue 45): Debian's `chromium` driven by Playwright's Python
package, and `trainctl console` run as a user runs it, against the deployment its environment names."""

from __future__ import annotations

import io
import queue
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from tests.conftest import REPO_ROOT

# The size of the pages the tests look at, and of the screenshot the README shows (docs/images/console.png).
VIEWPORT = {"width": 1200, "height": 800}
SCREENSHOT = REPO_ROOT / "docs" / "images" / "console.png"
SCREENSHOT_LIMIT = 150_000  # bytes: the README's picture is kept small
UPDATE_SCREENSHOTS_VAR = "TRAINCTL_UPDATE_SCREENSHOTS"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless Chromium per test module. Debian's package, never a browser Playwright downloads: `make test`
    installs it where it is missing, so its absence is a failure, not a skip."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail(
            "the browser tests need Debian's chromium on PATH: `make test` installs it (as root), "
            "or run `apt-get install chromium`",
            pytrace=False,
        )
    with sync_playwright() as playwright:
        # Without its sandbox: Chromium refuses to start one as root (as the tests run here and in CI), and a
        # container gives it no user namespaces to build one from. The pages are the console's own, on localhost.
        launched = playwright.chromium.launch(executable_path=executable, chromium_sandbox=False)
        try:
            yield launched
        finally:
            launched.close()


def watched_page(context: BrowserContext) -> Page:
    """A new page of `context` whose script errors are kept in `page.script_errors` (the tests check there are none)."""
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.script_errors = errors  # type: ignore[attr-defined]
    return opened


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A watched page of its own (a fresh context: no cookies or storage from another test), closed after the test."""
    context = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    try:
        yield watched_page(context)
    finally:
        context.close()


class Console:
    """`trainctl console --port 0` in the background for the deployment `env` names: its URL (the first line it
    prints), stopped with SIGTERM as a service manager stops it, which it answers by exiting 0."""

    def __init__(self, env: dict[str, str], *args: str, timeout: float = 60.0):
        self.process = subprocess.Popen(
            ["trainctl", "console", "--port", "0", *args],
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            first = self._lines.get(timeout=timeout)
        except queue.Empty:
            first = None
        if first is None or not re.fullmatch(r"console: http://127\.0\.0\.1:\d+/", first):
            self.stop(check=False)
            raise AssertionError(f"trainctl console did not print its URL first:\n{self.transcript}")
        self.url = first.removeprefix("console: ")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            line = line.rstrip("\n")
            self.output.append(line)
            self._lines.put(line)
        self._lines.put(None)

    @property
    def transcript(self) -> str:
        return "\n".join(self.output)

    def stop(self, check: bool = True) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"SIGTERM did not stop trainctl console within 30 s:\n{self.transcript}") from None
        if check:
            assert self.process.returncode == 0, (
                f"trainctl console exited {self.process.returncode}:\n{self.transcript}"
            )


def screenshot(page: Page, path: Path, full_page: bool = False) -> Path:
    """The page as the viewport shows it (or the whole page), as a PNG at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=full_page)
    return path


def save_small_png(page: Page, path: Path) -> Path:
    """The viewport as a PNG of at most 256 colours (a page's flat colours and text survive it), optimised: the
    README's picture, well under SCREENSHOT_LIMIT."""
    from PIL import Image

    shot = Image.open(io.BytesIO(page.screenshot())).convert("RGB")
    path.parent.mkdir(parents=True, exist_ok=True)
    shot.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, format="PNG", optimize=True)
    return path
