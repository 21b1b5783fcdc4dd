"""The capacity ladder's pure parts: the schema's fallbacks, admission of every rung, and when an observation
moves a request down the ladder. Guards issue 14 items 1 and 2."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from functions.capacity.ladder import ladder_of
from functions.cloud.job_snapshot import JobSnapshot, job_ref
from functions.intake.delivery import spec_hash
from functions.jobs.admission import admission_problems
from functions.jobs.planning import plan_custom_job
from functions.ledger.record import Record
from functions.lifecycle.transitions import observe
from schemas.errors import RequestInvalid, parse_request
from schemas.events import Failed, Retrying
from tests.unit.conftest import BASE_REQUEST, make_request
from tests.unit.test_lifecycle import record

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
JOB = "projects/p/locations/us-central1/customJobs/123"
REF = job_ref(JOB, "us-central1", "p")
SPOT_L4 = {"machine_type": "g2-standard-24"}
A100 = {"machine_type": "a2-highgpu-2g"}
LADDER = [
    {"strategy": "standard", "resources": SPOT_L4},
    {"region": "europe-west4", "resources": A100, "strategy": "standard"},
]


def ladder_request(**sections):
    return make_request(
        **{"resources": SPOT_L4, "scheduling": {"strategy": "spot", "max_attempts": 4}, "fallbacks": LADDER} | sections
    )


def problems_of(raw: dict) -> list[str]:
    with pytest.raises(RequestInvalid) as caught:
        parse_request(raw)
    return [str(e) for e in caught.value.errors]


def test_each_fallback_is_validated_like_resources_and_named_by_its_path():
    raw = BASE_REQUEST | {
        "fallbacks": [{"resources": {"machine_type": "a2-highgpu-2g", "accelerator_count": 3}}],
        "scheduling": {"max_attempts": 2},
    }
    [problem] = problems_of(raw)
    assert problem.startswith("fallbacks[0].resources.accelerator_count")


def test_a_flex_start_fallback_on_gpus_it_cannot_queue_for_names_its_strategy():
    raw = BASE_REQUEST | {
        "fallbacks": [{"strategy": "flex_start", "resources": {"machine_type": "n1-standard-8",
                                                                "accelerator_type": "NVIDIA_TESLA_T4",
                                                                "accelerator_count": 2}}],
        "scheduling": {"max_attempts": 2},
    }  # fmt: skip
    [problem] = problems_of(raw)
    assert problem.startswith("fallbacks[0].strategy: flex_start needs")


def test_a_ladder_longer_than_max_attempts_is_refused():
    raw = BASE_REQUEST | {"fallbacks": LADDER, "scheduling": {"max_attempts": 2}}
    [problem] = problems_of(raw)
    assert "scheduling.max_attempts" in problem and "ladder of 3 rungs" in problem


def test_fallbacks_change_the_hash():
    assert spec_hash(ladder_request()) != spec_hash(make_request(resources=SPOT_L4))


def test_a_rung_over_the_cost_ceiling_is_refused_at_admission(settings):
    s = dataclasses.replace(settings, max_cost_usd=300.0, allowed_regions=("europe-west4",))
    request = make_request(
        resources=SPOT_L4,
        scheduling={"max_attempts": 2, "timeout": "24h"},
        fallbacks=[{"resources": {"machine_type": "a2-highgpu-8g"}}],
    )
    found = [str(p) for p in admission_problems(request, s, plan_custom_job(request, s, "k").output_dir)]
    assert len(found) == 1
    assert found[0].startswith("fallbacks[0].resources: guardrail max_cost_usd: this job can cost about $")
    assert found[0].endswith("the limit is $300.00. Shorten scheduling.timeout or use fewer GPUs")


def test_what_all_attempts_may_spend_is_limited_by_max_request_cost_usd(settings):
    s = dataclasses.replace(settings, max_request_cost_usd=100.0, allowed_regions=("europe-west4",))
    request = ladder_request(scheduling={"strategy": "spot", "max_attempts": 4, "timeout": "10h"})
    found = [str(p) for p in admission_problems(request, s, plan_custom_job(request, s, "k").output_dir)]
    assert len(found) == 1
    assert found[0].startswith("scheduling.max_attempts: guardrail max_request_cost_usd: 4 attempts of up to $")


def test_a_rung_in_a_region_off_the_allow_list_is_refused(settings):
    request = ladder_request()
    found = [str(p) for p in admission_problems(request, settings, plan_custom_job(request, settings, "k").output_dir)]
    assert found == [
        "fallbacks[1].region: guardrail allowed_regions: europe-west4 is not allowed here; allowed: us-central1"
    ]


def test_a_rung_in_another_region_is_planned_there_with_its_own_strategy(settings):
    s = dataclasses.replace(settings, allowed_regions=("europe-west4",))
    plan = plan_custom_job(ladder_request(), s, "k", attempt=3, rung=2)
    assert plan.region == "europe-west4"
    spec = plan.custom_job["job_spec"]
    assert spec["worker_pool_specs"][0]["machine_spec"]["machine_type"] == "a2-highgpu-2g"
    assert spec["scheduling"]["strategy"] == "STANDARD"
    assert plan_custom_job(ladder_request(), s, "k").custom_job["job_spec"]["scheduling"]["strategy"] == "SPOT"


def ladder_record(**fields) -> Record:
    """A submitted record of `ladder_request()`, on rung 0 with one attempt made there."""
    request = ladder_request()
    base = dict(
        request=request.model_dump(mode="json"),
        max_attempts=4,
        ladder=ladder_of(request, "us-central1"),
        rung_attempts=1,
    )
    return record(**(base | fields))


def failed(message: str, code: int = 8, started: bool = False) -> JobSnapshot:
    """A failed job; one that `started` and then lost its capacity counts as preempted (failures.py)."""
    return JobSnapshot(
        JOB,
        "JOB_STATE_FAILED",
        code,
        message,
        create_time=NOW - timedelta(hours=1),
        start_time=NOW - timedelta(minutes=50) if started else None,
    )


STOCKOUT = "Resources are insufficient in region: us-central1. Try a different region or use a different accelerator."


def test_a_stockout_after_vertex_retries_moves_down_one_rung_with_why():
    rec = ladder_record()
    transition = observe(rec, failed(STOCKOUT), REF, NOW, 3600, None)
    assert transition.action == "resubmit"
    retrying = transition.events[-1]
    assert isinstance(retrying, Retrying)
    assert (retrying.rung, rec.rung, rec.attempt) == (1, 1, 2)
    assert retrying.rung_resources == "1 × g2-standard-24 with 2 × NVIDIA_L4, standard, us-central1"
    assert retrying.left_rung is not None and retrying.left_rung.outcome == "stocked out after Vertex's own retries"


def test_preemptions_move_down_only_beyond_the_rungs_limit():
    rec = ladder_record()
    preempted = "The job was preempted: Spot VMs were preempted"
    first = observe(rec, failed(preempted, code=14, started=True), REF, NOW, 3600, None)
    assert first.action == "resubmit" and rec.rung == 0, "max_preemptions 1: one more attempt on the same rung"
    rec.state, rec.job_name = "submitted", JOB
    second = observe(rec, failed(preempted, code=14, started=True), REF, NOW, 3600, None)
    assert second.action == "resubmit" and rec.rung == 1
    assert second.events[-1].left_rung.outcome == "preempted in 2 attempts (max_preemptions 1)"


def test_an_exhausted_ladder_fails_listing_every_rung():
    rec = ladder_record(rung=2, attempt=3, rung_history=[])
    transition = observe(rec, failed(STOCKOUT), REF, NOW, 3600, None)
    event = transition.events[-1]
    assert isinstance(event, Failed) and event.reason == "capacity"
    assert [o.rung for o in event.rungs] == [0, 1, 2]
    assert event.rungs[2].outcome.startswith("failed (capacity)")


def test_a_stuck_job_on_a_ladder_moves_down_once_it_is_cancelled():
    rec = ladder_record(stuck=True, failure_reason="capacity")
    cancelled = JobSnapshot(JOB, "JOB_STATE_CANCELLED", create_time=NOW - timedelta(hours=2))
    transition = observe(rec, cancelled, REF, NOW, 3600, None)
    assert transition.action == "resubmit" and rec.rung == 1
    assert transition.events[-1].left_rung.outcome == "waited longer than max_pending (capacity)"


def test_without_fallbacks_a_stockout_resubmits_the_same_shape_as_before():
    rec = record(failure_reason=None)
    transition = observe(rec, failed(STOCKOUT), REF, NOW, 3600, None)
    assert transition.action == "resubmit"
    assert transition.events[-1].rung is None and rec.rung == 0


def test_a_job_that_ran_and_then_stocked_out_moves_down_whatever_its_preemption_budget():
    """Vertex fails a job whose capacity it lost and could not get back with the stockout text; it had run, so
    it counts as preempted (failures.py), yet the rung is out of machines: the ladder moves on at once."""
    rec = ladder_record(ladder=[r.model_copy(update={"max_preemptions": 5}) for r in ladder_record().ladder])
    transition = observe(rec, failed(STOCKOUT, started=True), REF, NOW, 3600, None)
    assert transition.action == "resubmit" and rec.rung == 1
    assert transition.events[-1].left_rung.outcome == "stocked out after Vertex's own retries"


def test_the_reducers_image_comes_from_the_multi_region_nearest_the_rungs_region(settings):
    """reference/vertex.md §3.3: the image exists in the us, europe and asia multi-regions."""
    from functions.jobs.planning import reduction_server_image

    assert reduction_server_image(settings, "us-central1") == settings.reduction_server_image
    assert reduction_server_image(settings, "europe-west4").startswith("europe-docker.pkg.dev/vertex-ai-restricted/")
    assert reduction_server_image(settings, "asia-southeast1").startswith("asia-docker.pkg.dev/")
    own = dataclasses.replace(settings, reduction_server_image="registry.example/reducers:1")
    assert reduction_server_image(own, "europe-west4") == "registry.example/reducers:1"


def test_each_call_goes_to_the_endpoint_of_its_region(monkeypatch):
    """https://cloud.google.com/vertex-ai/docs/general/locations: a request about a resource in a region is
    made at that region's endpoint, https://{region}-aiplatform.googleapis.com."""
    import functions.cloud.vertex as vertex

    urls: list[str] = []

    class Answer:
        status_code = 200

        @staticmethod
        def json() -> dict:
            return {"name": "projects/p/locations/europe-west4/customJobs/1", "state": "JOB_STATE_QUEUED"}

    class Session:
        def request(self, method, url, **kwargs):
            urls.append(url)
            return Answer()

    monkeypatch.setattr(vertex, "rest_session", lambda endpoint, api, scopes: (Session(), api))
    jobs = vertex.VertexJobs("p", "us-central1")
    jobs.get("projects/p/locations/europe-west4/customJobs/1")
    jobs.cancel("projects/p/locations/us-central1/customJobs/2")
    assert urls == [
        "https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4/customJobs/1",
        "https://us-central1-aiplatform.googleapis.com/v1/projects/p/locations/us-central1/customJobs/2:cancel",
    ]


def test_status_shows_the_rung_and_what_became_of_the_rungs_left():
    """Guards issue 14 item 5: `trainctl status` names the current rung and the history of rungs."""
    from functions.capacity import ladder
    from trainctl.jobs import summary

    rec = ladder_record()
    ladder.move_down(rec, "stocked out after Vertex's own retries")
    info = summary(rec)
    assert info["rung"] == "1: 1 × g2-standard-24 with 2 × NVIDIA_L4, standard, us-central1 (attempts here: 0)"
    assert info["rungs"] == [
        "0: 1 × g2-standard-24 with 2 × NVIDIA_L4, spot, us-central1: stocked out after Vertex's own retries"
    ]
    assert "rung" not in summary(ladder_record(ladder=[]))


def test_the_console_link_of_a_job_in_another_region_points_to_that_region():
    ref = job_ref("projects/p/locations/europe-west4/customJobs/7", "us-central1", "p")
    assert ref.console_url == "https://console.cloud.google.com/vertex-ai/locations/europe-west4/training/7?project=p"
