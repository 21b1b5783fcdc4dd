"""The rule for Vertex's own restarts (local/jobservice/vertex_retries.py), as plain logic."""

from __future__ import annotations

from google.cloud.aiplatform_v1.types import CustomJob, Scheduling

from local.jobservice.vertex_retries import RetryCounts, after_exit, after_preemption, after_stockout


def job(**scheduling) -> CustomJob:
    return CustomJob(job_spec={"scheduling": scheduling})


def restarts(decide, count: int = 10) -> int:
    counts = RetryCounts()
    return sum(decide(counts).restart for _ in range(count))


def test_spot_preemptions_are_restarted_six_times():
    """Guards issue 12 point 4."""
    assert restarts(lambda c: after_preemption(job(strategy=Scheduling.Strategy.SPOT), c)) == 6


def test_stockouts_and_crashes_are_restarted_three_times_each_on_their_own_budget():
    """Guards issue 12 point 4."""
    counts = RetryCounts()
    assert sum(after_stockout(job(), counts).restart for _ in range(5)) == 3
    assert sum(after_exit(job(), counts, 139).restart for _ in range(5)) == 3
    assert [after_exit(job(), RetryCounts(), status).restart for status in (6, 134, 11, 139, 1, 137)] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]


def test_restart_job_on_worker_restart_keeps_restarting_a_preempted_job():
    assert restarts(lambda c: after_preemption(job(restart_job_on_worker_restart=True), c)) == 10


def test_disable_retries_turns_every_vertex_restart_off():
    """Guards issue 12 point 4: disable_retries also overrides restart_job_on_worker_restart."""
    off = job(disable_retries=True, restart_job_on_worker_restart=True, strategy=Scheduling.Strategy.SPOT)
    assert restarts(lambda c: after_preemption(off, c)) == 0
    assert restarts(lambda c: after_stockout(off, c)) == 0
    assert restarts(lambda c: after_exit(off, c, 134)) == 0
