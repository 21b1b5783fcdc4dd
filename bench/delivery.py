"""How the load benchmark delivers events and reads its processes: the Eventarc stand-in with a stopwatch, the
push subscription that feeds it, a push subscription's redelivery, and a process group's peak RSS and CPU time.
With bench/stack.py, this is the glue to swap for local/stack.py's when `trainctl local up` lands.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.stack import Stack
from local.eventarc import finalized_event, post
from local.processes import group_members
from tests.integration.deployment import Deployment

TARGET = "on_dataset_upload"
MIB = 1024


@dataclass
class Delivery:
    published: float  # when the Pub/Sub emulator took fake-gcs-server's notification
    arrived: float
    answered: float
    status: int


class RecordingBridge:
    """The Eventarc stand-in for one bucket (the trigger's bucket filter), with a stopwatch. Each push is
    converted and posted as local/eventarc.py does; the first delivery of an object is also handed to
    `on_first` (the bench schedules a redelivery there)."""

    def __init__(self, target_url: str, bucket: str, on_first: Any):
        self.first: dict[str, Delivery] = {}
        self.events: dict[str, tuple[dict[str, str], bytes]] = {}
        self.deliveries = 0
        self._lock = threading.Lock()
        bridge = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                push = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                message = push.get("message") or {}
                converted = finalized_event(message)
                if converted is None or (message.get("attributes") or {}).get("bucketId") != bucket:
                    status = 204  # the trigger watches only the data bucket
                else:
                    published = datetime.fromisoformat(message["publishTime"].replace("Z", "+00:00")).timestamp()
                    status = bridge.forward(json.loads(converted[1])["name"], converted, published)
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._target, self._on_first = target_url, on_first
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="bench-bridge", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/"  # where __init__ bound it

    def forward(self, name: str, event: tuple[dict[str, str], bytes], published: float) -> int:
        arrived = time.time()
        with self._lock:
            first = name not in self.events
            self.events.setdefault(name, event)
            self.deliveries += 1
        if first:
            self._on_first(event)
        status = post(self._target, *event)
        if first:
            self.first[name] = Delivery(published, arrived, time.time(), status)
        return status

    def reset(self) -> None:
        with self._lock:
            self.first.clear()
            self.events.clear()
            self.deliveries = 0

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def subscribe_bridge(stack: Stack, bucket: str, endpoint: str) -> str:
    """A push subscription on fake-gcs-server's notifications for one bucket, as the Eventarc trigger filters;
    returns its name, for `stack.pubsub.delete_subscription` before the bridge stops.

    Filtered in Pub/Sub rather than in the bridge: the emulator keeps only a few pushes in flight, so pushing
    every control-bucket write too (the ledger's, several per marker) would queue the markers behind them.
    """
    assert stack.gcs.notifications_topic is not None
    name = f"bench-uploads-{bucket}"
    stack.pubsub.create_subscription(
        name,
        stack.gcs.notifications_topic.rsplit("/", 1)[-1],
        push_endpoint=endpoint,
        ack_deadline_seconds=60,
        message_filter=f'attributes.bucketId = "{bucket}"',
    )
    return name


def deliver_until_accepted(deployment: Deployment, event: tuple[dict[str, str], bytes], tries: int = 120) -> int:
    """Post like a push subscription: again after a 5xx (a live claim elsewhere asks for redelivery)."""
    status = 0
    for _ in range(tries):
        status = deployment.post(TARGET, event)
        if status < 300:
            return status
        time.sleep(0.5)
    return status


def peak_rss_mib(pgid: int) -> float:
    """The largest VmHWM among a function's processes (functions-framework's gunicorn master and worker)."""
    peaks = []
    for pid in group_members(pgid):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(int(line.split()[1]) / MIB)
    return max(peaks, default=0.0)


def cpu_seconds(pgid: int) -> float:
    """CPU time (user + system) of the live processes of a process group."""
    total = 0
    for pid in group_members(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat
    return total / os.sysconf("SC_CLK_TCK")
