"""The console's live view: one subscription on the events topic (trainctl/eventstream.py's EventStream), pulled by
one background thread and fanned out to every browser connected to /live as server-sent events.

Each client has its own bounded queue; a client that does not read (a stalled tab, a slow link) fills it and is dropped
(its stream ends; the browser's EventSource reconnects), never holding up the others or the pulling thread. The
subscription is deleted when the console stops. The last events seen are kept (bounded) for the now page's first
render and for each request's timeline."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from schemas.events import JobEvent

# Events a client may have waiting before it counts as not reading.
CLIENT_QUEUE = 256
# What the now page shows before the first live event, and how many requests' events the timelines keep.
RECENT_EVENTS = 100
REQUESTS_REMEMBERED = 2000
EVENTS_PER_REQUEST = 60
# A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_SECONDS = 15.0
# The pulling thread's wait between tries after the stream failed.
RETRY_SECONDS = 2.0


class Stream(Protocol):
    def poll(self, timeout: float = 5.0) -> list[JobEvent]: ...
    def close(self) -> None: ...


@dataclass(eq=False)
class Client:
    sees: Callable[[JobEvent], bool]
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[JobEvent | None] = field(default_factory=lambda: asyncio.Queue(CLIENT_QUEUE))
    dropped: bool = False

    def offer(self, event: JobEvent) -> None:
        """Runs on the client's own event loop. A full queue drops the client: its stream is told to end."""
        if self.dropped:
            return
        if self.queue.full():
            self.dropped = True
            self.queue.get_nowait()  # room for the end marker
            self.queue.put_nowait(None)
            return
        self.queue.put_nowait(event)


class Fanout:
    """The connected clients and the recent events; `deliver` is called from the pulling thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: set[Client] = set()
        self.recent: deque[JobEvent] = deque(maxlen=RECENT_EVENTS)
        self._by_request: OrderedDict[str, deque[JobEvent]] = OrderedDict()

    def connect(self, sees: Callable[[JobEvent], bool]) -> Client:
        client = Client(sees, asyncio.get_running_loop())
        with self._lock:
            self._clients.add(client)
        return client

    def disconnect(self, client: Client) -> None:
        with self._lock:
            self._clients.discard(client)

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._clients)

    def deliver(self, events: list[JobEvent]) -> None:
        with self._lock:
            for event in events:
                self.recent.append(event)
                kept = self._by_request.setdefault(event.request_key, deque(maxlen=EVENTS_PER_REQUEST))
                kept.append(event)
                self._by_request.move_to_end(event.request_key)
                while len(self._by_request) > REQUESTS_REMEMBERED:
                    self._by_request.popitem(last=False)
            clients = list(self._clients)
        for client in clients:
            if client.dropped:
                self.disconnect(client)
                continue
            for event in events:
                if client.sees(event):
                    try:
                        client.loop.call_soon_threadsafe(client.offer, event)
                    except RuntimeError:  # its loop has closed
                        self.disconnect(client)
                        break

    def seen(self, request_key: str) -> list[JobEvent]:
        with self._lock:
            return list(self._by_request.get(request_key, ()))

    def latest(self) -> list[JobEvent]:
        with self._lock:
            return list(self.recent)


class LiveFeed:
    """The background subscription: `start` opens the stream (`open_stream`: an EventStream on the events topic) and
    pulls in a thread; `stop` ends the thread and closes the stream, which deletes its subscription."""

    def __init__(self, open_stream: Callable[[], Stream], fanout: Fanout | None = None):
        self._open = open_stream
        self.fanout = fanout or Fanout()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: Stream | None = None
        self.problem: str | None = None  # why the feed cannot follow the topic now, for the pages

    def start(self) -> None:
        """Open the stream now (so that nothing published after start-up is missed), then pull in a thread. A stream
        that cannot be opened (the account may not subscribe, the topic is missing) leaves the pages working without
        live events, saying why, and is tried again in the thread."""
        self._open_stream()
        self._thread = threading.Thread(target=self._pull, name="console-live", daemon=True)
        self._thread.start()

    def _open_stream(self) -> None:
        try:
            self._stream = self._open()
            self.problem = None
        except Exception as exc:
            self.problem = f"{type(exc).__name__}: {exc}"
            print(f"console: cannot follow the events: {self.problem}", file=sys.stderr, flush=True)

    def _pull(self) -> None:
        while not self._stop.is_set():
            if self._stream is None:
                self._stop.wait(RETRY_SECONDS)
                if not self._stop.is_set():
                    self._open_stream()
                continue
            try:
                events = self._stream.poll(timeout=1.0)
                self.problem = None
            except Exception as exc:  # CannotFollow, a stopped emulator: say so on the pages, keep trying
                self.problem = f"{type(exc).__name__}: {exc}"
                print(f"console: the live feed cannot pull events: {self.problem}", file=sys.stderr, flush=True)
                self._stop.wait(RETRY_SECONDS)
                continue
            if events:
                self.fanout.deliver(events)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._stream is not None:
            self._stream.close()
            self._stream = None


def sse_message(event: JobEvent) -> str:
    """One server-sent event: `event: trainctl` and the event's JSON on one data line (JSON escapes newlines)."""
    return f"event: trainctl\ndata: {event.model_dump_json(exclude_none=True)}\n\n"


async def stream_to(fanout: Fanout, sees: Callable[[JobEvent], bool]) -> AsyncIterator[str]:
    """The /live response body of one client, until it disconnects (Starlette cancels this) or is dropped."""
    client = fanout.connect(sees)
    try:
        yield ": following trainctl events\n\n"
        while True:
            try:
                event = await asyncio.wait_for(client.queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            if event is None:
                return  # dropped: too far behind
            yield sse_message(event)
    finally:
        fanout.disconnect(client)
