"""The Cloud Scheduler stand-in: POST to `reconcile` every few seconds from a background thread, as the
scheduler job Terraform creates calls it on its cron schedule."""

from __future__ import annotations

import logging
import threading

from local.eventarc import post

log = logging.getLogger("local.stack")


class ReconcileTimer:
    def __init__(self, url: str, every: float, timeout: float = 120.0):
        self.url, self.every, self._timeout = url, every, timeout
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._tick_until_stopped, name="reconcile-timer", daemon=True)
        self._thread.start()

    def _tick_until_stopped(self) -> None:
        # One call at a time, like a scheduler job whose run outlasts its interval.
        while not self._stopped.wait(self.every):
            status = post(self.url, {"content-type": "application/json"}, b"{}", timeout=self._timeout)
            if status >= 300:
                log.warning("reconcile answered %s (see its log)", status)

    def stop(self, timeout: float = 10.0) -> None:
        self._stopped.set()
        self._thread.join(timeout)
