"""Time to first step and goodput (issue 43) end to end: a built-in run on the local JobService (its trainer stood
in for by fake_node.py, which writes the trainer's heartbeat) publishes `succeeded` with accepted → first step split
into phases, each at least 0 and summing to the whole, and its goodput; the history index keeps them for `trainctl
report`. No wall-clock value is asserted: only the split's own arithmetic and the figures the run was told to write."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.deployment import TRAINER_STAND_IN, Deployment, builtin_request, serving


@pytest.fixture(scope="module")
def deployment(pubsub_emulator, fake_gcs, jobservice, tmp_path_factory) -> Iterator[Deployment]:
    with serving(jobservice, tmp_path_factory.mktemp("functions"), TRAINCTL_TRAINER_IMAGE=TRAINER_STAND_IN) as deployed:
        yield deployed


def test_a_builtin_run_reports_a_plausible_split_of_its_time_to_first_step_and_its_goodput(deployment, monkeypatch):
    events = deployment.events()
    # The first step two seconds into the node's run: after Vertex's start time, which the JobService sets as the
    # node starts.
    document = builtin_request(deployment, "first-step-1", "--sleep", "2", "--steps", "40", "--metrics", "{}")
    assert deployment.request(document) == 200
    succeeded = events.wait_for("first-step-1", "succeeded", act=deployment.reconcile)

    split = succeeded.first_step
    assert split is not None, succeeded.message
    phases = [split.queue_seconds, split.provisioning_seconds, split.startup_seconds, split.other_seconds]
    assert min(phases) >= 0
    assert sum(phases) == pytest.approx(split.total_seconds, abs=0.002)
    assert split.startup_seconds > 0  # the stand-in's first step came after its job started
    goodput = succeeded.goodput
    assert goodput is not None
    assert (goodput.steps_run, goodput.steps_kept, goodput.runtime) == (40, 40, 1.0)
    assert goodput.scheduling is not None and 0 < goodput.scheduling <= 1

    # The history index keeps them, and `trainctl report` shows them (only this request of the deployment has one).
    report = json.loads(deployment.cli(monkeypatch, "report", "--since", "1h", "--json"))
    first_step = report["total"]["first_step_seconds"]
    assert first_step["requests"] == 1
    assert first_step["total"]["p50"] == pytest.approx(split.total_seconds)
    assert first_step["startup"]["p90"] == pytest.approx(split.startup_seconds)
    assert report["total"]["goodput"]["runtime"] == 1.0


def test_a_run_whose_first_step_is_not_within_its_job_has_no_split(deployment):
    """A heartbeat with no first step in the job's own times (here: none written at all) gives no split, and the run
    succeeds all the same."""
    events = deployment.events()
    assert deployment.request(builtin_request(deployment, "first-step-2", "--metrics", "{}")) == 200
    succeeded = events.wait_for("first-step-2", "succeeded", act=deployment.reconcile)
    assert succeeded.first_step is None
    assert succeeded.goodput is not None and succeeded.goodput.steps_run is None
