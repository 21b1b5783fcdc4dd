"""Teams on the local stack (issue 32, acceptance): two teams, each with its own request topic, sharing the GPU
quota of the JobService's capacity model through trainctl's pool — one over its share waits while the other is
admitted, one borrows what the other leaves idle, both waiting are admitted in fair order, a budget refuses (eight
deliveries at once against it admit one), and a forged team label is refused. And what a team may see and touch (issue
40, point 5): its own data and the operator's grants, markers in its own folders, its own events; the shared topic is
closed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest
from cloudevents.http import CloudEvent

from functions import handlers
from functions.controller import Controller
from functions.ledger import keys
from functions.settings import Settings
from local.names import LOCAL_PROJECT
from tests.integration.deployment import (
    DATA_SHARD,
    FAKE_NODE_IMAGE,
    SHARED_DATASET,
    Deployment,
    EventLog,
    fake_node_request,
    serving,
)
from tests.integration.test_controller_intake import jobs_with_key

V100 = {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_V100", "accelerator_count": 2}
P100 = {"machine_type": "n1-standard-16", "accelerator_type": "NVIDIA_TESLA_P100", "accelerator_count": 2}
V100_METRIC, P100_METRIC = "custom_model_training_nvidia_v100_gpus", "custom_model_training_nvidia_p100_gpus"
CAPACITY: dict[str, Any] = {"regions": {"us-central1": {"quotas": {V100_METRIC: 8, P100_METRIC: 4}}}}
# Every team may read the fake-node requests' dataset, by the operator's grant (issue 40, point 5: a team reads only
# its own folders and what the operator grants it).
SHARED = [SHARED_DATASET]
TEAMS: dict[str, Any] = {
    "default_team": "shared",
    "teams": {
        "shared": {"topic": "it-requests-shared", "reads": SHARED},
        # V100 (limit 8): a owns 2 and may borrow 2 more; b owns 6. P100 (limit 4): each is promised all of it,
        # with equal weights, so that only fair share decides between them.
        "a": {"topic": "it-requests-a", "quota": {V100_METRIC: 2, P100_METRIC: 4}, "borrow_limit": 2, "reads": SHARED,
              "data_prefixes": ["team-a/"]},
        "b": {"topic": "it-requests-b", "quota": {V100_METRIC: 6, P100_METRIC: 4}, "reads": SHARED,
              "data_prefixes": ["team-b/"]},
        "c": {"topic": "it-requests-c", "monthly_budget_usd": 1, "reads": SHARED},
    },
}  # fmt: skip


def teams_settings(deployment: Deployment) -> dict[str, str]:
    """TRAINCTL_TEAMS as Terraform sets it (with the data bucket), and trigger rules whose markers are team b's."""
    template = {"dataset": {"target": "y"}, "trainer": {"image": f"{FAKE_NODE_IMAGE}:1", "args": ["--sleep", "0.2"]},
                "resources": {"machine_type": "g2-standard-24"}, "team": "b"}  # fmt: skip
    rules = {f"gs://{deployment.data_bucket}/{folder}/": template for folder in ("team-a", "team-b", "loose")}
    return {
        "TRAINCTL_TEAMS": json.dumps(TEAMS | {"data_bucket": deployment.data_bucket}),
        "TRAINCTL_TRIGGER_RULES": json.dumps(rules),
    }


@pytest.fixture(scope="module")
def teams(jobservice, tmp_path_factory) -> Iterator[Deployment]:
    log_dir = tmp_path_factory.mktemp("functions")
    with serving(jobservice, log_dir, CAPACITY, settings_for=teams_settings) as deployment:
        yield deployment


def ask(deployment: Deployment, team: str, request_id: str, resources: dict[str, Any], sleep: str = "30") -> None:
    document = fake_node_request(request_id, "--sleep", sleep, resources=resources)
    assert deployment.request(document, topic=f"it-requests-{team}") == 200


def test_a_forged_team_label_is_refused(teams):
    """Issue 32, point 1: a request on team a's topic that says labels.team b is rejected; the same on b's topic
    is accepted as b's."""
    events = teams.events()
    document = fake_node_request("forged", labels={"team": "b"}, resources={"machine_type": "g2-standard-24"})
    assert teams.request(document, topic="it-requests-a") == 200
    rejected = events.wait_for("forged", "rejected")
    assert (rejected.reason, rejected.team) == ("invalid", "a")
    assert "labels.team: 'b' disagrees with where the request arrived, which is team 'a'" in rejected.errors[0]


def test_a_request_that_would_pass_its_teams_monthly_budget_is_rejected_with_the_figures(teams):
    """Issue 32, point 4: team c's budget is $1; a request whose worst case is more is rejected (reason budget)."""
    events = teams.events()
    ask(teams, "c", "over-budget", V100)
    rejected = events.wait_for("over-budget", "rejected")
    assert rejected.reason == "budget" and rejected.budget is not None
    assert (rejected.budget.team, rejected.budget.budget_usd, rejected.budget.spent_usd) == ("c", 1.0, 0.0)
    assert rejected.budget.request_usd > 1.0 and "monthly_budget_usd" in rejected.errors[0]
    assert teams.record("request:c/over-budget") is None, "a budget rejection claimed nothing"


# Team c's budget ($1) holds one of these (2 × L4 for at most 15 minutes, once: $0.58), not two.
FITS_ONCE = {"resources": {"machine_type": "g2-standard-24"}, "scheduling": {"timeout": "15m", "max_attempts": 1}}


def test_eight_deliveries_at_once_against_a_budget_that_fits_one_accept_exactly_one(teams):
    """Issue 40, point 1, the review's scenario: eight requests of team c delivered at once, each fitting its $1
    budget alone, two never together. Before, every delivery read the active records before any was created, and six
    were accepted; now each reserves its worst case in team c's month record by compare-and-swap: exactly one is
    accepted, the seven others are `rejected` (budget) counting the first one's reservation as active."""
    events = teams.events()
    ids = [f"at-once-{index}" for index in range(8)]

    def deliver(request_id: str) -> int:
        document = fake_node_request(request_id, "--sleep", "0.5", **FITS_ONCE)
        return teams.request(document, topic="it-requests-c")

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(deliver, ids)) == [200] * 8

    answers = {request_id: events.states(request_id) for request_id in ids}
    accepted = [request_id for request_id, states in answers.items() if "accepted" in states]
    assert len(accepted) == 1, answers
    refused = [events.of(request_id, "rejected")[0] for request_id in ids if request_id not in accepted]
    assert len(refused) == 7 and all(e.reason == "budget" and e.budget is not None for e in refused), answers
    assert all(e.budget.active_usd == e.budget.request_usd == 0.58 for e in refused if e.budget), refused[0].budget
    month = json.loads(
        teams.storage()
        .bucket(teams.control_bucket)
        .blob(f"budgets/c/{datetime.now(UTC):%Y-%m}.json")
        .download_as_text()
    )
    assert list(month["reserved"]) == [keys.key_hash(f"request:c/{accepted[0]}")]


def test_a_team_borrows_what_the_other_leaves_idle_and_over_its_share_waits_while_the_other_is_admitted(teams):
    """Issue 32, points 2 and 5, on V100 (limit 8): team a owns 2 and may borrow 2. With b idle, a's second request
    borrows; its third waits on its team's share though 4 GPUs are free; b's request is admitted meanwhile."""
    events = teams.events()
    for index in range(3):
        ask(teams, "a", f"a-v{index}", V100)
    assert events.states("a-v0")[-1] == "submitted" and events.states("a-v1")[-1] == "submitted"
    waiting = events.wait_for("a-v2", "queued")
    assert (waiting.held_by, waiting.team, waiting.held) == ("team_share", "a", 4)
    ask(teams, "b", "b-v0", V100)
    assert events.states("b-v0")[-1] == "submitted", "b waited behind a's request over its share"
    teams.reconcile()
    assert teams.record("request:a/a-v2")["state"] == "queued"


def test_when_both_teams_wait_the_one_holding_less_goes_first(teams, job_client):
    """Issue 32, point 3, on P100 (limit 4, equal weights): a holds the whole quota and has two more waiting; b's
    two come after them. When a's short job ends, b (holding nothing) goes before a's older waiting request, which
    first come first served would have let in."""
    events = teams.events()
    ask(teams, "a", "a-p0", P100, sleep="1")
    ask(teams, "a", "a-p1", P100)
    for request_id in ("a-p2", "a-p3"):
        ask(teams, "a", request_id, P100)
    for request_id in ("b-p0", "b-p1"):
        ask(teams, "b", request_id, P100)
    queued = events.of("b-p0", "queued")[0]
    assert (queued.held_by, queued.ahead) == ("project_quota", 0), "b holds less: it is next once there is room"
    deadline = time.monotonic() + 90
    while "submitted" not in events.states("b-p0"):
        assert time.monotonic() < deadline, {r: events.states(r) for r in ("a-p0", "a-p2", "b-p0")}
        teams.reconcile()
        time.sleep(0.5)
    assert teams.record("request:a/a-p2")["state"] == "queued", "a's older request went before b's"
    assert teams.record("request:b/b-p1")["state"] == "queued"


# ---- request ids per team (issue 38, point 6) -------------------------------------------------------------------


def keyed(deployment: Deployment, events: EventLog, key: str, state: str, timeout: float = 60.0) -> Any:
    """Wait for the event `state` of the request with `key` (two teams' requests share an id, never a key)."""
    deadline = time.monotonic() + timeout
    while not (found := [e for e, _ in events.drain() if e.request_key == key and e.state == state]):
        assert time.monotonic() < deadline, f"no {state} for {key}"
        deployment.reconcile()
        time.sleep(0.3)
    return found[0]


def output_dir(job: Any) -> str:
    return job.job_spec.base_output_directory.output_uri_prefix


def test_two_teams_and_the_default_team_each_run_their_own_request_under_one_request_id(teams, job_client):
    """Issue 38, point 6: request ids are one namespace per team. Team a takes `shared-id` first; team b's request
    with that id, of another spec, is not a conflict with a's (before, it was rejected: b could be squatted, or a's
    id taken by b first); the default team's (on its own topic) keeps today's key. Three jobs, three keys, three
    folders."""
    events = teams.events()
    for topic, sleep in (("it-requests-a", "0.2"), ("it-requests-b", "0.3"), ("it-requests-shared", "0.4")):
        assert teams.request(fake_node_request("shared-id", "--sleep", sleep), topic=topic) == 200
    keys_of = {"a": "request:a/shared-id", "b": "request:b/shared-id", None: "request:shared-id"}
    for team, key in keys_of.items():
        (job,) = jobs_with_key(job_client, key)
        folder = f"_teams/{team}/shared-id/" if team else "shared-id/"
        assert output_dir(job) == f"gs://{teams.control_bucket}/custom-runs/{folder}"
        assert teams.record(key)["team"] == (team or "shared")
        keyed(teams, events, key, "succeeded")
    assert not [e for e, _ in events.drain() if e.request_id == "shared-id" and e.state == "rejected"]
    ids = {blob.name for blob in teams.storage().bucket(teams.control_bucket).list_blobs(prefix="ids/")}
    assert {"ids/a/shared-id", "ids/b/shared-id", "ids/shared-id"} <= ids


def test_a_request_a_team_sent_before_ids_had_namespaces_is_found_by_its_redelivery_and_submitted_once(
    teams, job_client
):
    """Issue 38, point 6: an earlier version of trainctl claimed team a's request under `request:<id>` and
    submitted its job; Pub/Sub redelivers the message to this version, which would key it `request:a/<id>`: it finds
    the old record (same team, same spec), answers `duplicate`, and no second job starts."""
    events = teams.events()
    document = fake_node_request("before-namespaces", "--sleep", "0.2")
    topic = f"projects/{LOCAL_PROJECT}/topics/it-requests-a"
    push = teams.push_body(json.dumps(document).encode(), "msg-before-namespaces")
    settings = Settings.from_env(teams.settings_env(**teams_settings(teams)))
    cloud_event = CloudEvent(
        {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": f"//pubsub.googleapis.com/{topic}",
         "id": "msg-before-namespaces"},
        json.loads(push[1]),
    )  # fmt: skip
    assert handlers.job_request(cloud_event, EarlierVersion.from_settings(settings)) == "submitted"
    (job,) = jobs_with_key(job_client, "request:before-namespaces")
    assert teams.record("request:before-namespaces")["team"] == "a"

    assert teams.deliver("on_job_request", push, topic) == 200

    assert jobs_with_key(job_client, "request:a/before-namespaces") == []
    assert [j.name for j in jobs_with_key(job_client, "request:before-namespaces")] == [job.name]
    assert teams.record("request:a/before-namespaces") is None
    duplicate = keyed(teams, events, "request:before-namespaces", "duplicate")
    assert duplicate.delivery == "msg-before-namespaces"


class EarlierVersion(Controller):
    """trainctl before issue 38: every request that names its id is keyed `request:<id>`, whatever its team."""

    def request_key(self, request_id: str, team: str | None) -> str:
        return keys.request_key(request_id)


# ---- what a team may see and touch (issue 40, point 5) -------------------------------------------------------------


def rejected_of(events: EventLog, request_id: str) -> Any:
    return events.wait_for(request_id, "rejected")


def test_a_team_cannot_train_on_another_teams_data_and_its_own_is_fine(teams, job_client):
    """Issue 40, point 5: red trained on blue's data. Team a naming team b's folder is rejected at admission, naming
    the field and the rule, and nothing is claimed; team b's own request on the same data is accepted."""
    teams.upload("team-b/churn/part-0.csv", DATA_SHARD)
    dataset = {"uri": f"gs://{teams.data_bucket}/team-b/churn/", "target": "y"}
    events = teams.events()
    assert (
        teams.request(fake_node_request("a-reads-b", "--sleep", "0.1", dataset=dataset), topic="it-requests-a") == 200
    )
    rejected = rejected_of(events, "a-reads-b")
    assert (rejected.reason, rejected.team) == ("invalid", "a")
    (error,) = rejected.errors
    assert error.startswith(
        f"dataset.uri: guardrail team_data: gs://{teams.data_bucket}/team-b/churn/ is team b's data"
    )
    assert "teams.a.data_prefixes, teams.a.reads" in error
    assert teams.record("request:a/a-reads-b") is None and jobs_with_key(job_client, "request:a/a-reads-b") == []
    assert (
        teams.request(fake_node_request("b-reads-b", "--sleep", "0.1", dataset=dataset), topic="it-requests-b") == 200
    )
    assert "accepted" in events.states("b-reads-b")


def marker_rejection(deployment: Deployment, events: EventLog, folder: str) -> Any:
    marker = deployment.upload_marker(folder)
    assert deployment.post("on_dataset_upload", deployment.storage_event(marker)) == 200
    key = f"gcs:{deployment.data_bucket}/{marker.name}#{marker.generation}"
    found = [e for e, _ in events.drain() if e.request_key == key]
    return marker, key, found


def test_a_marker_starts_jobs_only_for_the_team_whose_folder_it_lies_in(teams, job_client):
    """Issue 40, point 5: a marker team a's uploaders put in their folder, matched by a rule of team b, would spend b's
    quota and budget; one outside every team's folder (where the deployment's other uploaders write) would too. Both
    are refused before their content is read, and nothing is claimed; b's marker in b's own folder starts b's job."""
    events = teams.events()
    for folder, owner in (("team-a/day1/", "a"), ("loose/day1/", "b")):
        marker, key, found = marker_rejection(teams, events, folder)
        (rejected,) = found
        assert (rejected.state, rejected.team) == ("rejected", owner)
        (error,) = rejected.errors
        assert error.startswith(f"marker: gs://{teams.data_bucket}/{marker.name} lies ")
        assert teams.record(key) is None and jobs_with_key(job_client, key) == []
    marker, key, found = marker_rejection(teams, events, "team-b/day1/")
    assert [e.state for e in found] == ["accepted", "submitted"] and found[0].team == "b"
    assert len(jobs_with_key(job_client, key)) == 1


def test_the_shared_topic_spends_no_teams_quota_unless_the_operator_opened_it(teams, job_client):
    """Issue 40, point 5: whoever publishes to the shared topic spent the default team's quota and budget. It is closed
    by default: the request is rejected saying so, and nothing is claimed."""
    events = teams.events()
    assert teams.request(fake_node_request("on-the-shared-topic", "--sleep", "0.1"), topic="it-requests") == 200
    rejected = rejected_of(events, "on-the-shared-topic")
    assert rejected.errors[0].startswith("topic: the shared requests topic is closed in this deployment")
    assert teams.record("request:on-the-shared-topic") is None


def test_every_event_of_a_teams_request_carries_its_team_for_its_teams_subscription(teams):
    """Issue 40, point 5: every watcher saw every team's events. Each event of a team's request carries its team as
    the `team` attribute, which each team watcher's subscription filters on (`attributes.team = "<team>"`,
    terraform/watchers.tf), so that filter keeps every one of team a's events and none of team b's. The Pub/Sub
    emulator keeps a subscription's filter but does not apply it (local/FIDELITY.md), so the filter is applied here as
    Pub/Sub does: an exact match on the attribute (cloud.google.com/pubsub/docs/filtering)."""
    import google.cloud.pubsub_v1 as pubsub_v1

    subscriber = pubsub_v1.SubscriberClient()
    topic = f"projects/{LOCAL_PROJECT}/topics/{teams.events_topic}"
    watch_a = subscriber.subscription_path(LOCAL_PROJECT, f"it-watch-a-{teams.suffix}")
    subscriber.create_subscription(request={"name": watch_a, "topic": topic, "filter": 'attributes.team = "a"'})
    assert subscriber.get_subscription(subscription=watch_a).filter == 'attributes.team = "a"'
    events = teams.events()
    for team in ("a", "b"):
        assert teams.request(fake_node_request(f"watched-{team}", "--sleep", "0.1"), topic=f"it-requests-{team}") == 200
        events.wait_for(f"watched-{team}", "submitted")
    published = [(event, attributes) for event, attributes in events.drain() if event.request_id.startswith("watched-")]
    assert {(event.request_id, attributes.get("team"), event.team) for event, attributes in published} == {
        ("watched-a", "a", "a"),
        ("watched-b", "b", "b"),
    }
    kept = [event for event, attributes in published if attributes.get("team") == "a"]
    assert {event.request_id for event in kept} == {"watched-a"}
    assert {event.state for event in kept} >= {"accepted", "submitted"}
