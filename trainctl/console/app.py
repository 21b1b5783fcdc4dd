"""The console's web app (issue 45): four read-only pages over one deployment — now, a request, models, history — and
/live, the lifecycle events as server-sent events. Pages are rendered on the server by Jinja2 with autoescape on
(everything a requester or job wrote is escaped); a little htmx re-fetches the now page's tables when an event
arrives, and static/live.js adds each event to the live list with textContent. Only GET and HEAD are answered."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio.to_thread
import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from functions.ledger.history import Outcome
from functions.settings import Settings
from schemas.events import JobEvent
from schemas.rules import parse_duration
from trainctl.console import views
from trainctl.console.identity import Viewer, local_viewer
from trainctl.console.live import Fanout, LiveFeed, stream_to
from trainctl.console.reading import History, Sources
from trainctl.report import build_report

HERE = Path(__file__).parent
DEFAULT_WINDOW = "24h"
MAX_WINDOW = timedelta(days=93)
# What the pages allow the browser to run and load: this app's own files only (no inline script, no other origin).
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

ViewerOf = Callable[[Request], Viewer]


@dataclass(frozen=True)
class WindowFigures:
    history: History  # the listing these were made from
    outcomes: list[Outcome]  # what the viewer may see, the latest first
    report: dict[str, Any]
    charts: dict[str, Any]


def create_app(
    settings: Settings,
    viewer_of: ViewerOf = local_viewer,
    *,
    sources: Sources | None = None,
    feed: LiveFeed | None = None,
    follow: bool = True,
    subscription: str | None = None,
    team: str | None = None,
    logs_local: bool = False,
) -> Starlette:
    """The console over the deployment `settings` name. `viewer_of`: who asks (identity.local_viewer on this machine;
    the cloud's own behind its proxy); `feed`: the live events (default: an EventStream on the events topic, through
    `subscription` when given, else one of its own, deleted at shutdown; none when `follow` is False); `team`: the
    local operator's --team; `logs_local`: link the local stack's node logs rather than the Cloud Console's."""
    sources = sources or Sources.of_settings(settings)
    if feed is None and follow:
        from trainctl.eventstream import EventStream

        feed = LiveFeed(lambda: EventStream(settings.project, settings.events_topic, subscription))
    fanout = feed.fanout if feed else Fanout()
    templates = Jinja2Templates(env=_environment())
    computed: dict[tuple[datetime, frozenset[str] | None], WindowFigures] = {}
    computed_lock = threading.Lock()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if feed is not None:
            await anyio.to_thread.run_sync(feed.start)
        try:
            yield
        finally:
            if feed is not None:
                await anyio.to_thread.run_sync(feed.stop)

    def page(request: Request, name: str, status: int = 200, **context: Any) -> Response:
        viewer = viewer_of(request)
        common = {"viewer": viewer, "project": settings.project, "feed_problem": feed.problem if feed else None}
        return templates.TemplateResponse(request, name, common | context, status_code=status)

    def threaded(handler: Callable[[Request], Response]) -> Callable[[Request], Awaitable[Response]]:
        """Reading the ledger and the registry blocks: each page is built in a worker thread."""

        async def endpoint(request: Request) -> Response:
            return await anyio.to_thread.run_sync(handler, request)

        return endpoint

    def now_context(request: Request) -> dict[str, Any]:
        viewer, now, teams = viewer_of(request), datetime.now(UTC), settings.teams
        active = sources.active()
        pools = sources.pool_states()
        records = {r.key_hash: r for r in active.records}
        limits = {name: sources.limit(metric, region) for name, (metric, region) in
                  views.pool_limits_wanted(pools, records).items()}  # fmt: skip
        spends = {}
        if teams is not None:
            for name in teams.teams:
                if viewer.sees(name):
                    month = sources.month_spend(name, now)
                    spends[name] = (month.spent_usd(), month.reserved_usd())
        started = {r.key_hash: found for r in active.records if (found := views.running_since(r, fanout.seen(r.key)))}
        return {
            "active": views.active_rows(active.records, now, viewer, teams, started),
            "active_total": active.total,
            "active_shown": len(active.records),
            "queue": views.queue_rows(pools, records, limits, viewer, teams, now),
            "teams": views.team_rows(teams, pools, spends, viewer, active.records),
            "has_teams": teams is not None,
            "month": now.strftime("%Y-%m"),
        }

    def now_page(request: Request) -> Response:
        viewer = viewer_of(request)
        live = [views.live_item(e) for e in reversed(fanout.latest()) if viewer.sees(_team(e))]
        return page(request, "now.html", live=live, **now_context(request))

    def now_tables(request: Request) -> Response:
        return page(request, "now_tables.html", **now_context(request))

    def request_page(request: Request) -> Response:
        request_id = request.path_params["request_id"]
        team = request.query_params.get("team") or None
        record = sources.record(request_id, team)
        viewer = viewer_of(request)
        if record is None or not viewer.sees(views.team_of(record.team, settings.teams)):
            return page(request, "missing.html", 404, what=f"request {request_id}", team=team)
        history, final, unreadable = sources.run_files(record)
        curve = views.curve_of(history, final)
        logs = sources.node_logs(record.job_name) if logs_local else {}
        job = record.job_name
        return page(
            request,
            "request.html",
            record=record,
            team=views.team_of(record.team, settings.teams),
            info=views.request_view(record),
            timeline=views.timeline(record, fanout.seen(record.key), sources.final_outcome(record)),
            metrics=views.metric_rows(final),
            curve=curve.as_json() if curve else None,
            unreadable=unreadable,
            node_logs=logs,
            logs_url=None if logs_local or not job else views.cloud_logs_url(settings.project, job),
            logs_local=logs_local,
        )

    def models_page(request: Request) -> Response:
        from trainctl.models import describe

        viewer = viewer_of(request)
        models = sources.models()
        described = []
        problem = None
        try:
            for model in models.registry.models():
                found = describe(models, model.model_id)
                if found is not None and views.model_visible(found, viewer):
                    described.append(found)
        except Exception as exc:  # the registry does not answer: say so on the page
            problem = f"the Model Registry cannot be read: {type(exc).__name__}: {exc}"
        return page(request, "models.html", view=views.models_view(described), problem=problem)

    def history_page(request: Request) -> Response:
        since_text = request.query_params.get("since") or DEFAULT_WINDOW
        try:
            window = timedelta(seconds=parse_duration(since_text))
            if window > MAX_WINDOW or window <= timedelta(0):
                raise ValueError(f"at most {MAX_WINDOW.days}d, more than 0")
        except ValueError as exc:
            return page(request, "missing.html", 400, what=f"since={since_text}", problem=f"since: {exc}")
        try:
            page_number = int(request.query_params.get("page") or 1)
        except ValueError:
            page_number = 1
        viewer = viewer_of(request)
        figures = window_figures(sources.history(datetime.now(UTC) - window), viewer)
        return page(
            request,
            "history.html",
            since=since_text,
            report=figures.report,
            charts=figures.charts,
            paged=views.history_page(figures.outcomes, page_number),
        )

    def window_figures(history: History, viewer: Viewer) -> WindowFigures:
        """The report over one listing of the history, as this viewer may see it: made once per listing and viewer,
        so that each further page of the window is a slice."""
        key = (history.since, viewer.teams)
        with computed_lock:
            found = computed.get(key)
            if found is not None and found.history is history:
                return found
        teams = settings.teams
        seen = views.visible_outcomes(history.outcomes, viewer, teams)
        decisions = views.visible_outcomes(history.decisions, viewer, teams)
        coalesced = views.visible_outcomes(history.coalesced, viewer, teams)
        by = "team" if teams is not None else None
        report = build_report(seen, history.since, datetime.now(UTC), by, decisions, coalesced)
        made = WindowFigures(history, views.latest_first(seen), report,
                             views.history_charts(report))  # fmt: skip
        with computed_lock:
            for stale in [k for k, v in computed.items() if v.history is not sources.history_if_kept(k[0])]:
                del computed[stale]
            computed[key] = made
        return made

    def _team(event: JobEvent) -> str | None:
        return views.team_of(event.team, settings.teams)

    async def live(request: Request) -> Response:
        if request.method == "HEAD":  # the headers alone: a stream that never ends has no body to leave out
            return Response(media_type="text/event-stream", headers={"Cache-Control": "no-store"})
        viewer = viewer_of(request)

        def sees(event: JobEvent) -> bool:
            return viewer.sees(_team(event))

        return StreamingResponse(
            stream_to(fanout, sees),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    routes = [
        Route("/", threaded(now_page), methods=["GET"]),
        Route("/now/tables", threaded(now_tables), methods=["GET"]),
        Route("/requests/{request_id}", threaded(request_page), methods=["GET"]),
        Route("/models", threaded(models_page), methods=["GET"]),
        Route("/history", threaded(history_page), methods=["GET"]),
        Route("/live", live, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(ReadOnly)])
    app.state.team = team
    app.state.fanout = fanout
    app.state.feed = feed
    return app


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every page is HTML: whatever a requester or job wrote is escaped
        undefined=jinja2.StrictUndefined,
    )
    env.filters["duration"] = views.duration
    env.filters["money"] = views.money
    env.filters["figure"] = views.figure_text
    return env


class ReadOnly:
    """Answers only GET and HEAD (405 to anything else, before any route runs), and gives every answer the headers of
    a page that runs only its own scripts."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            response = PlainTextResponse("the console is read-only", 405, headers={"Allow": "GET, HEAD"})
            await response(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [
                    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)
