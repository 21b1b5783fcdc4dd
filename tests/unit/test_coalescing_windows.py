"""Coalescing windows' decisions (functions/intake/windows.py, issue 42 point 2), pure: when a window closes, what a
marker folds into, what a closed window trains on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from functions.cloud import deadline
from functions.intake.markers import Arrival
from functions.intake.windows import (
    Windows,
    dataset_of,
    fold_in,
    folded_already,
    forget_started,
    union_folder,
    window_arrival,
)
from functions.ledger.window_records import (
    MAX_MARKERS,
    FoldedMarker,
    StartedMarker,
    WindowRecord,
    WindowRecords,
    record_name,
)
from functions.settings import Settings
from local.memory_gcs import MemoryGcs
from schemas.triggers import TriggerPolicy

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
RULE = "gs://data/churn/"
QUIET = TriggerPolicy(quiet_window=20)


def marker(folder: str, second: float, generation: int | None = None, bucket: str = "data") -> FoldedMarker:
    gen = str(generation if generation is not None else 1000 + int(second * 10))
    return FoldedMarker(bucket=bucket, name=f"{folder}_SUCCESS", generation=gen, size=0,
                        time=T0 + timedelta(seconds=second))  # fmt: skip


def test_ten_markers_three_seconds_apart_stay_in_one_window_that_closes_a_quiet_window_after_the_last():
    record = WindowRecord(rule=RULE)
    for i in range(10):
        fold_in(record, marker(f"churn/p{i}/", 3 * i), QUIET, T0 + timedelta(seconds=3 * i))
    (window,) = record.windows
    assert len(window.markers) == 10
    assert window.closes_at() == T0 + timedelta(seconds=27 + 20)
    assert record.due() == T0 + timedelta(seconds=47)


def test_a_busy_window_closes_at_its_limit_after_its_first_marker():
    policy = TriggerPolicy(quiet_window=20, max_wait=60)
    assert policy.window_limit == 60
    record = WindowRecord(rule=RULE)
    for i in range(30):  # one every 10 s: never quiet for 20 s
        fold_in(record, marker(f"churn/p{i}/", 10 * i), policy, T0 + timedelta(seconds=10 * i))
    assert [len(w.markers) for w in record.windows] == [6, 6, 6, 6, 6]
    assert record.windows[0].closes_at() == T0 + timedelta(seconds=60)
    assert [w.closed is not None for w in record.windows] == [True, True, True, True, False]


def test_the_default_limit_is_ten_quiet_windows():
    assert TriggerPolicy(quiet_window=20).window_limit == 200


def test_a_marker_after_the_window_went_quiet_opens_a_new_one_and_closes_the_old():
    record = WindowRecord(rule=RULE)
    fold_in(record, marker("churn/a/", 0), QUIET, T0)
    fold_in(record, marker("churn/b/", 20), QUIET, T0 + timedelta(seconds=25))  # exactly quiet_window later
    first, second = record.windows
    assert first.closed == T0 + timedelta(seconds=20) and [m.name for m in first.markers] == ["churn/a/_SUCCESS"]
    assert second.closed is None and second.id == marker("churn/b/", 20).uri


def test_a_full_window_takes_no_more_markers():
    record = WindowRecord(rule=RULE)
    for i in range(MAX_MARKERS + 1):
        fold_in(record, marker("churn/x/", i / 1000, generation=i), QUIET, T0)
    full, spill = record.windows
    assert len(full.markers) == MAX_MARKERS and full.closed == T0
    assert len(spill.markers) == 1


def test_a_marker_in_a_window_or_started_lately_is_already_folded():
    record = WindowRecord(rule=RULE)
    fold_in(record, marker("churn/a/", 0), QUIET, T0)
    assert folded_already(record, marker("churn/a/", 0).uri)
    assert not folded_already(record, marker("churn/b/", 1).uri)
    record.started.append(StartedMarker(uri=marker("churn/b/", 1).uri, time=T0))
    assert folded_already(record, marker("churn/b/", 1).uri)


def test_started_markers_are_forgotten_after_max_event_age():
    record = WindowRecord(rule=RULE, started=[StartedMarker(uri=f"gs://data/{i}#1", time=T0 + timedelta(hours=i))
                                             for i in range(5)])  # fmt: skip
    forget_started(record, timedelta(hours=2), T0 + timedelta(hours=4))
    assert [s.uri for s in record.started] == ["gs://data/2#1", "gs://data/3#1", "gs://data/4#1"]


def test_union_is_the_deepest_folder_holding_every_marker_within_the_rule():
    markers = [marker("churn/2026/11/27/h10/", 0), marker("churn/2026/11/27/h11/", 1), marker("churn/2026/11/27/", 2)]
    assert union_folder(RULE, markers) == "gs://data/churn/2026/11/27/"
    assert union_folder(RULE, markers[:1]) == "gs://data/churn/2026/11/27/h10/"
    assert union_folder(RULE, [marker("churn/a/", 0), marker("churn/b/", 1)]) == "gs://data/churn/"
    # A rule's prefix need not end at a folder: a union above it would train on what the rule does not cover.
    assert union_folder("gs://data/churn-", [marker("churn-a/", 0), marker("churn-b/", 1)]) is None
    assert union_folder(RULE, [marker("churn/a/", 0), marker("churn/a/", 1, bucket="other")]) is None
    # Folder names that share a beginning are not one folder.
    assert union_folder(RULE, [marker("churn/day1/", 0), marker("churn/day10/", 1)]) == "gs://data/churn/"


def test_a_closed_window_starts_its_newest_markers_request_over_newest_or_union():
    record = WindowRecord(rule=RULE)
    policy = TriggerPolicy(quiet_window=20, coalesce="union")
    late, early = marker("churn/p2/", 5, generation=7), marker("churn/p1/", 1, generation=9)
    fold_in(record, late, policy, T0)
    fold_in(record, early, policy, T0)  # delivered after, uploaded before: still the older one
    (window,) = record.windows
    arrival = window_arrival(window, RULE, T0 + timedelta(minutes=1))
    assert (arrival.name, arrival.generation) == ("churn/p2/_SUCCESS", "7")
    assert arrival.request_id == "gcs.churn-p2-7" and arrival.key == "gcs:data/churn/p2/_SUCCESS#7"
    assert arrival.dataset_uri == "gs://data/churn/"
    folded = arrival.delivery.folded
    assert folded is not None and folded.markers == (early.uri, late.uri) and folded.dataset_uri == "gs://data/churn/"
    window.coalesce = "newest"
    assert dataset_of(window, RULE) == ("gs://data/churn/p2/", None)


def test_a_window_whose_start_keeps_raising_is_dropped_after_three_tries_and_other_rules_go_on():
    """A start that raises something other than a transient error (a bug, say) is counted on the window; the third
    drops it, logged, instead of trying it every tick forever. Another rule's due window still starts each tick."""
    gcs = MemoryGcs()
    records = WindowRecords(gcs, "control")
    rules = {RULE: {}, "gs://data/other/": {}}
    settings = Settings(project="p", region="r", control_bucket="control", events_topic="t", trainer_image="i",
                        trigger_rules=rules)  # fmt: skip
    windows = Windows(settings, records, lambda: T0 + timedelta(minutes=5))
    for rule in (RULE, "gs://data/other/"):
        record = WindowRecord(rule=rule)
        fold_in(record, marker(rule.removeprefix("gs://data/") + "a/", 0), QUIET, T0)
        records.write(record, 0)
    started: list[str] = []

    def arrive(arrival: Arrival) -> str:
        if arrival.rule == RULE:
            raise RuntimeError("a bug")
        started.append(arrival.rule)
        return "submitted"

    summaries = [windows.close_due(arrive) for _ in range(4)]
    assert [s["errors"] for s in summaries] == [1, 1, 1, 0]
    assert started == ["gs://data/other/"]
    assert records.read(record_name(RULE))[0].windows == []  # type: ignore[index]


def test_a_window_of_a_rule_gone_from_the_settings_is_dropped_without_a_start():
    gcs = MemoryGcs()
    records = WindowRecords(gcs, "control")
    settings = Settings(project="p", region="r", control_bucket="control", events_topic="t", trainer_image="i")
    windows = Windows(settings, records, lambda: T0 + timedelta(minutes=5))
    record = WindowRecord(rule=RULE)
    fold_in(record, marker("churn/a/", 0), QUIET, T0)
    records.write(record, 0)
    assert windows.close_due(lambda arrival: "submitted") == {"windows_started": 0, "errors": 0}
    kept = records.read(record_name(RULE))
    assert kept is not None and kept[0].windows == []
    assert [s.uri for s in kept[0].started] == [marker("churn/a/", 0).uri]


def test_among_markers_of_one_second_the_latest_generation_is_the_newest():
    record = WindowRecord(rule=RULE)
    for generation in (30, 10, 20):  # delivered out of order, their events' times alike
        fold_in(record, marker(f"churn/g{generation}/", 0, generation=generation), QUIET, T0)
    assert [m.generation for m in record.windows[0].oldest_first()] == ["10", "20", "30"]


def test_a_tick_short_of_time_leaves_due_windows_to_the_next():
    records = WindowRecords(MemoryGcs(), "control")
    settings = Settings(project="p", region="r", control_bucket="control", events_topic="t", trainer_image="i",
                        trigger_rules={RULE: {}})  # fmt: skip
    windows = Windows(settings, records, lambda: T0 + timedelta(minutes=5))
    record = WindowRecord(rule=RULE)
    fold_in(record, marker("churn/a/", 0), QUIET, T0)
    records.write(record, 0)
    with deadline.handler_deadline(12):  # 9 s left: less than a start may take
        assert windows.close_due(lambda arrival: "submitted") == {
            "windows_started": 0,
            "errors": 0,
            "windows_deferred": 1,
        }
    assert windows.close_due(lambda arrival: "submitted") == {"windows_started": 1, "errors": 0}
