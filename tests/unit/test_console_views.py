"""The console's page data (trainctl/console/views.py) and its live fan-out (live.py), pure: what each table shows of
the records, pools and outcomes; who sees what; and a client that does not read is dropped without holding up
the others."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

from functions.capacity.quota_pool import Pool
from functions.ledger.history import Outcome
from functions.ledger.record import LadderRung
from functions.teams import parse_teams
from schemas.events import Rejected, RungOutcome, Running, Timestamps
from tests.unit.conftest import RECORD_TIME, make_record
from trainctl.console import live, views
from trainctl.console.identity import LOCAL_OPERATOR, Viewer, local_viewer

NOW = RECORD_TIME + timedelta(minutes=10)
V100 = "custom_model_training_nvidia_v100_gpus"
POOL = f"us-central1/{V100}"
TEAMS = parse_teams(
    {
        "default_team": "shared",
        "teams": {
            "shared": {},
            "a": {"quota": {V100: 2}, "borrow_limit": 2, "monthly_budget_usd": 100},
            "b": {"quota": {V100: 6}},
        },
    }
)


def rung(gpus: int = 2, hourly: float = 3.6) -> LadderRung:
    return LadderRung(
        resources="1 × n1-standard-16 with 2 × NVIDIA_TESLA_V100",
        region="us-central1",
        quota_metric=f"aiplatform.googleapis.com/{V100}",
        gpus=gpus,
        max_pending=600,
        max_preemptions=3,
        hourly_usd=hourly,
    )


def test_viewer_sees_every_team_or_only_its_own():
    assert LOCAL_OPERATOR.sees("a") and LOCAL_OPERATOR.sees(None)
    only_a = Viewer("x", frozenset({"a"}))
    assert only_a.sees("a") and not only_a.sees("b") and not only_a.sees(None)


def test_the_local_viewer_is_the_operator_or_with_team_only_that_team():
    from starlette.applications import Starlette
    from starlette.requests import Request

    app = Starlette()
    app.state.team = None
    assert local_viewer(Request({"type": "http", "app": app})) == LOCAL_OPERATOR
    app.state.team = "b"
    narrowed = local_viewer(Request({"type": "http", "app": app}))
    assert narrowed.teams == frozenset({"b"}) and narrowed.sees("b") and not narrowed.sees("a")


def test_an_active_row_shows_state_rung_team_gpus_time_in_state_and_cost_so_far():
    running = make_record(
        state="running", team="a", ladder=[rung()], updated=NOW - timedelta(hours=1), earlier_cost_usd=1.0
    )
    (row,) = views.active_rows([running], NOW, LOCAL_OPERATOR, TEAMS)
    assert (row.request_id, row.state, row.team, row.gpus) == ("r1", "running", "a", 2)
    assert row.rung.startswith("0: 1 × n1-standard-16") and row.in_state == "60.0m"
    assert row.cost == "$4.60"  # $1 before, then an hour at $3.60
    event = Running(
        request_id="r1",
        request_key="request:r1",
        time=NOW - timedelta(minutes=30),
        message="running",
        timestamps=Timestamps(started=NOW - timedelta(hours=2)),
    )
    started = views.running_since(running, [event])
    assert started == NOW - timedelta(hours=2)  # Vertex's start time, not the record's last change
    (row,) = views.active_rows([running], NOW, LOCAL_OPERATOR, TEAMS, {running.key_hash: started})
    assert row.cost == "$8.20"
    assert views.running_since(running, [event.model_copy(update={"attempt": 2})]) is None  # another attempt's


def test_a_queued_request_counts_its_time_in_state_from_when_it_began_to_wait():
    queued = make_record(state="queued", queued_since=NOW - timedelta(seconds=90), updated=NOW - timedelta(seconds=5))
    (row,) = views.active_rows([queued], NOW, LOCAL_OPERATOR, None)
    assert row.in_state == "90s" and row.cost == "$0.00"


def test_the_default_team_owns_a_record_without_a_team_and_a_viewer_sees_only_its_teams_rows():
    records = [make_record(team=None), make_record(key_hash="b1", request_id="r2", team="b")]
    assert [r.team for r in views.active_rows(records, NOW, LOCAL_OPERATOR, TEAMS)] == ["shared", "b"]
    assert [r.request_id for r in views.active_rows(records, NOW, Viewer("b", frozenset({"b"})), TEAMS)] == ["r2"]


def test_the_queue_says_what_holds_each_waiter_by_fair_shares_verdict():
    """a holds 4 of 8 (its cap: 2 + 2 borrowed): its next waits on its team's share; b's waits on the quota only
    when the quota is full."""
    pool = Pool(
        holders={"a1": 4, "b1": 4},
        waiting=["a2", "b2"],
        teams={"a1": "a", "a2": "a", "b1": "b", "b2": "b"},
        wants={"a2": 2, "b2": 2},
    )
    records = {
        "a2": make_record(key_hash="a2", request_id="a-2", team="a", state="queued", queued_since=NOW),
        "b2": make_record(key_hash="b2", request_id="b-2", team="b", state="queued", queued_since=NOW),
    }
    found = views.queue_rows({POOL: pool}, records, {POOL: 8}, LOCAL_OPERATOR, TEAMS, NOW)
    assert [(r.request_id, r.held_by) for r in found] == [("b-2", "project_quota"), ("a-2", "team_share")]
    assert [r.place for r in found] == [1, 2]
    unknown = views.queue_rows({POOL: pool}, records, {POOL: None}, LOCAL_OPERATOR, TEAMS, NOW)
    assert {r.held_by for r in unknown} == {"unknown"}
    seen_by_a = views.queue_rows({POOL: pool}, records, {POOL: 8}, Viewer("a", frozenset({"a"})), TEAMS, NOW)
    assert [r.request_id for r in seen_by_a] == ["a-2"]


def test_a_teams_row_shows_gpus_held_against_its_nominal_share_what_it_borrows_and_its_month():
    pool = Pool(holders={"a1": 2, "a2": 2, "b1": 2}, teams={"a1": "a", "a2": "a", "b1": "b"})
    found = {r.team: r for r in views.team_rows(TEAMS, {POOL: pool}, {"a": (12.5, 3.0)}, LOCAL_OPERATOR)}
    assert (found["a"].held, found["a"].nominal, found["a"].borrowed) == (4, 2, 2)
    assert (found["a"].spent, found["a"].reserved, found["a"].budget) == ("$12.50", "$3.00", "$100.00")
    assert (found["b"].held, found["b"].nominal, found["b"].borrowed, found["b"].budget) == (2, 6, 0, "none")
    assert (found["b"].spent, found["b"].reserved) == ("-", "-")  # no budget: its month is not kept, not $0.00
    assert [r.team for r in views.team_rows(None, {POOL: pool}, {}, LOCAL_OPERATOR)] == ["default"]


def test_a_teams_row_counts_the_gpus_of_its_requests_jobs_with_or_without_teams():
    records = [
        make_record(state="running", team="a", cost=make_record().cost.model_copy(update={"gpus": 4})),
        make_record(state="submitted", team=None, key_hash="s"),  # the default team's: "shared"
        make_record(state="queued", team="a", key_hash="q"),  # no job yet
        make_record(state="claimed", team="b", key_hash="c"),
    ]
    found = {r.team: r for r in views.team_rows(TEAMS, {}, {}, LOCAL_OPERATOR, records)}
    assert {name: row.in_jobs for name, row in found.items()} == {"a": 4, "b": 0, "shared": 2}
    # Without teams, one row for everyone: the 4-GPU job and the submitted one, whose months no budget keeps.
    (everyone,) = views.team_rows(None, {}, {}, LOCAL_OPERATOR, [r.model_copy(update={"team": None}) for r in records])
    assert (everyone.team, everyone.in_jobs, everyone.held, everyone.spent, everyone.reserved) == (
        "default",
        6,
        0,
        "-",
        "-",
    )


def test_the_timeline_orders_the_events_seen_and_fills_in_what_the_record_keeps():
    record = make_record(
        state="running",
        rung=1,
        ladder=[rung(), rung()],
        rung_history=[RungOutcome(rung=0, resources="2 × V100 spot", attempts=2, outcome="preempted twice")],
    )
    running = Running(request_id="r1", request_key="request:r1", time=NOW, message="running", attempt=3, sequence=5)
    other = Running(request_id="r9", request_key="request:r9", time=NOW, message="not this one", sequence=1)
    steps = views.timeline(record, [running, running, other])
    assert [s.state for s in steps] == ["accepted", "running", "ladder"]
    assert steps[2].text.endswith("preempted twice")
    retried = make_record(state="running", attempt=3, max_attempts=4, rung_preemptions=1)
    assert [(s.state, s.attempt) for s in views.timeline(retried, [])] == [
        ("accepted", 1),
        ("retrying", 3),
        ("preempted", 3),
        ("running", 3),
    ]
    queued = views.timeline(make_record(state="queued", queued_since=NOW, message="waiting for quota"), [])
    assert [(s.state, s.text) for s in queued] == [
        ("accepted", "accepted (the record's creation)"),
        ("queued", "waiting for quota"),
    ]


def test_a_finished_requests_timeline_takes_its_jobs_start_and_its_end_from_the_history():
    record = make_record(state="succeeded", message="done", updated=NOW + timedelta(minutes=5))
    ended = Outcome(request_id="r1", state="succeeded", time=NOW, started=NOW - timedelta(minutes=3), attempt=2)
    steps = views.timeline(record, [], ended)
    assert [(s.state, s.attempt) for s in steps] == [("accepted", 1), ("running", 2), ("succeeded", 1)]
    assert steps[1].time == (NOW - timedelta(minutes=3)).isoformat(timespec="seconds")
    assert steps[2].time == NOW.isoformat(timespec="seconds")  # the final event's time, not the record's last change


def test_metrics_keep_only_finite_numbers_and_at_most_so_many():
    content = json.dumps({"val_accuracy": 0.9, "note": "<b>", "nan": float("nan"), "flag": True, "x" * 200: 1})
    rows = views.metric_rows(content.encode())
    assert [name for name, _ in rows] == ["val_accuracy", "x" * 79 + "…"]
    many = json.dumps({f"m{i}": i for i in range(500)}).encode()
    assert len(views.metric_rows(many)) == views.MAX_METRICS_SHOWN
    assert views.metric_rows(b"[1, 2]") == views.metric_rows(b"not json") == []


def test_metrics_show_unix_times_as_utc_times_and_durations_as_durations():
    started = datetime(2026, 11, 28, 5, 1, 2, tzinfo=UTC).timestamp()
    content = {"process_started": started, "first_step": started + 90.5, "elapsed_seconds": 450.0, "steps_run": 14000}
    rows = dict(views.metric_rows(json.dumps(content | {"first_step_x": started}).encode()))
    assert rows["process_started"] == "2026-11-28 05:01:02 UTC"
    assert rows["first_step"] == "2026-11-28 05:02:32 UTC"
    assert rows["elapsed_seconds"].startswith("7.5m (")
    assert "UTC" not in rows["first_step_x"]  # only the names it knows
    assert dict(views.metric_rows(b'{"first_step": 12}'))["first_step"] == "12"  # not a Unix time: as it is


def test_the_curve_is_curve_pys_parse_as_chart_series():
    lines = [{"epoch": e, "train_loss": 1 / e, "val_loss": 2 / e, "val_rmse": 3 / e} for e in (2, 1)] + ["junk"]
    history = "\n".join(json.dumps(line) if isinstance(line, dict) else line for line in lines).encode()
    curve = views.curve_of(history, b'{"best_epoch": 1, "stopped_early": true}')
    assert curve is not None
    assert (curve.x_name, curve.x, curve.best_epoch, curve.stopped_early) == ("epoch", [1, 2], 1, True)
    assert curve.series == {"train_loss": [1.0, 0.5], "val_loss": [2.0, 1.0], "val_rmse": [3.0, 1.5]}
    assert views.curve_of(None, None) is None and views.curve_of(b"{}", None) is None


def outcome(index: int, team: str | None = None) -> Outcome:
    return Outcome(request_id=f"r{index}", state="succeeded", time=NOW - timedelta(seconds=index), team=team)


def test_the_history_is_paged_on_the_server_latest_first():
    outcomes = [outcome(i) for i in range(120)]
    first, last = views.history_page(outcomes, 1), views.history_page(outcomes, 99)
    assert (first.page, first.pages, first.total, len(first.rows)) == (1, 3, 120, 50)
    assert first.rows[0].request_id == "r0" and (last.page, len(last.rows)) == (3, 20)
    assert views.history_page([], 1).pages == 1
    mixed = [outcome(1, "a"), outcome(2, "b"), outcome(3)]
    assert [o.request_id for o in views.visible_outcomes(mixed, Viewer("a", frozenset({"a"})), TEAMS)] == ["r1"]


def test_latest_first_orders_as_the_times_do_across_offsets_ties_kept():
    from datetime import timezone

    base = outcome(0)
    east = timezone(timedelta(hours=5))
    times = [NOW, NOW.astimezone(east) + timedelta(seconds=1), NOW - timedelta(days=2), NOW.astimezone(east)]
    found = [base.model_copy(update={"request_id": f"t{i}", "time": t}) for i, t in enumerate(times)]
    assert [o.request_id for o in views.latest_first(found)] == ["t1", "t0", "t3", "t2"]  # t0 and t3: one instant
    assert [o.request_id for o in views.history_page(found, 1).rows] == ["t1", "t0", "t3", "t2"]


def test_the_logs_link_names_the_jobs_ml_job_entries():
    url = views.cloud_logs_url("proj", "projects/1/locations/us-central1/customJobs/42")
    assert url.startswith("https://console.cloud.google.com/logs/query;query=resource.type%3D%22ml_job%22")
    assert "resource.labels.job_id%3D%2242%22" in url and url.endswith("?project=proj")


def rejected(request_id: str, team: str | None = None) -> Rejected:
    return Rejected(request_id=request_id, request_key=f"request:{request_id}", time=datetime.now(UTC),
                    message="no", reason="invalid", errors=[], team=team)  # fmt: skip


def test_a_client_that_does_not_read_is_dropped_and_the_others_get_every_event():
    async def scenario() -> tuple[list[str], bool, int]:
        fanout = live.Fanout()
        reader = fanout.connect(lambda event: True)
        stalled = fanout.connect(lambda event: True)
        got: list[str] = []
        for batch in range(3):
            fanout.deliver([rejected(f"e{batch}-{i}") for i in range(live.CLIENT_QUEUE)])
            await asyncio.sleep(0)  # the loop runs the offers
            while not reader.queue.empty():
                event = reader.queue.get_nowait()
                assert event is not None
                got.append(event.request_id)
        fanout.deliver([rejected("after")])  # the stalled client is let go here
        await asyncio.sleep(0)
        return got, stalled.dropped, fanout.clients

    got, dropped, clients = asyncio.run(scenario())
    assert len(got) == 3 * live.CLIENT_QUEUE and dropped and clients == 1


def test_a_stream_sends_only_what_its_viewer_sees_and_ends_when_dropped():
    async def scenario() -> list[str]:
        fanout = live.Fanout()
        body = live.stream_to(fanout, lambda event: event.team == "b")
        chunks = [await anext(body)]  # the opening comment: connected
        fanout.deliver([rejected("for-a", "a"), rejected("for-b", "b")])
        chunks.append(await anext(body))
        (client,) = fanout._clients
        client.loop.call_soon(client.queue.put_nowait, None)  # as a drop does
        chunks += [chunk async for chunk in body]
        assert fanout.clients == 0
        return chunks

    opening, message = asyncio.run(scenario())
    assert opening.startswith(":")
    kind, data, blank, _ = message.split("\n")
    assert kind == "event: trainctl" and blank == ""
    assert json.loads(data.removeprefix("data: "))["request_id"] == "for-b"


def test_the_feed_remembers_a_bounded_number_of_events_per_request():
    fanout = live.Fanout()
    fanout.deliver([rejected("one") for _ in range(live.EVENTS_PER_REQUEST + 5)])
    fanout.deliver([rejected(f"r{i}") for i in range(live.REQUESTS_REMEMBERED + 1)])
    assert len(fanout.seen("request:one")) == 0  # the oldest request forgotten
    assert len(fanout.seen(f"request:r{live.REQUESTS_REMEMBERED}")) == 1
    assert len(fanout.latest()) == live.RECENT_EVENTS


class Refusing:
    """A stream that cannot be opened the first `refusals` times (the account may not subscribe yet)."""

    def __init__(self, refusals: int):
        self.refusals, self.opened, self.closed = refusals, 0, False

    def __call__(self) -> Refusing:
        self.opened += 1
        if self.opened <= self.refusals:
            raise PermissionError("may not create a subscription")
        return self

    def poll(self, timeout: float = 5.0) -> list:
        time.sleep(0.01)
        return []

    def close(self) -> None:
        self.closed = True


def test_a_feed_that_cannot_subscribe_says_why_and_keeps_trying(monkeypatch):
    monkeypatch.setattr(live, "RETRY_SECONDS", 0.01)
    stream = Refusing(refusals=2)
    feed = live.LiveFeed(stream)
    feed.start()  # does not raise: the pages work without live events
    assert feed.problem is not None and "may not create a subscription" in feed.problem
    deadline = time.monotonic() + 10
    while stream.opened < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    feed.stop()
    assert stream.opened == 3 and stream.closed and feed.problem is None


def test_a_long_message_is_cut_at_a_word_with_an_ellipsis_and_given_whole_in_the_title():
    text = "the job wrote " + "quite a long sentence " * 30
    shown = views.clipped(text)
    assert len(shown) <= views.MAX_TEXT and shown.endswith("…")
    assert text.startswith(shown[:-1]) and text[len(shown) - 1] == " "  # at a word's end, not inside one
    assert views.clipped("x" * 400).endswith("x…") and len(views.clipped("x" * 400)) == views.MAX_TEXT  # one word
    assert views.clipped("short") == "short" and views.title_of("short") == ""
    item = views.live_item(Running(request_id="r1", request_key="request:r1", time=NOW, message=text))
    assert (item["message"], item["title"]) == (shown, text)
    (row,) = views.active_rows([make_record(state="running", message=text)], NOW, LOCAL_OPERATOR, None)
    assert (row.message, row.title) == (shown, text)
    assert len(views.title_of("y" * 5000)) == views.MAX_TITLE  # the title is bounded too


def described_model(rule_metric: str | None) -> dict:
    """trainctl/models.py describe()'s shape, the parts the models page reads."""
    figures = {"metric": "acc", "challenger": 1.0, "champion": 2.0}
    return {
        "model": "projects/p/locations/us-central1/models/churn",
        "charter": {"owner": "a", "rule": {"metric": rule_metric}, "rule_in_words": "…"},
        "aliases": {},
        "versions": [
            {"version": v, "metrics": {"aaa": 1, "abc": 2, "acc": 3, "ada": 4, "val_loss": 0.5, "val_rmse": r}}
            for v, r in (("1", 0.31), ("2", 0.27))
        ],
        "decisions": [{"time": "2026-11-28T00:00:00+00:00", "action": "held", "figures": figures}],
        "serving": {
            "traffic_split": {"3224587611": 90, "77": 10, "5": 0},
            "deployed": [
                {"id": "3224587611", "model": "m", "version": "2"},
                {"id": "77", "model": "m", "version": "3"},
            ],
            "rollouts": [],
        },
    }


def test_the_models_page_shows_the_models_own_metric_first_and_traffic_by_version():
    view = views.models_view([described_model("val_loss")])
    assert [v["headline"].split(",")[0] for v in view["versions"]] == ["val_loss 0.5", "val_loss 0.5"]
    assert "val_rmse 0.27" in view["versions"][0]["headline"]  # the headline's own, next
    # A rule that leaves the metric to the built-in trainer: the one its decisions were made on.
    view = views.models_view([described_model(None)])
    assert [v["headline"].split(",")[0] for v in view["versions"]] == ["acc 3", "acc 3"]
    assert len(view["versions"][0]["headline"].split(", ")) == views.models.METRICS_SHOWN
    (endpoint,) = view["endpoints"]
    assert endpoint["traffic"] == [("version 2", 90), ("version 3", 10), ("deployed model 5", 0)]
    assert views.traffic_of({"traffic_split": None}) is None
