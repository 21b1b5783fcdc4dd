"""docs/local.md's tour, run as typed, and the other pages' blocks that run on its stack before it ends: the local
stack with a test image and packages allowed, a request submitted and followed, stock `gcloud` starting and
cancelling jobs, the Vertex SDK's examples and the Model Registry (issue 28, point 1: the tour failed as written;
issue 44: it moved from README to docs/local.md), then your own package (own-code.md), a request from `trainctl init`
and its curve (requests.md, models.md), the report's pictures and an alert's message (operations.md). How a tour is
typed: tests/e2e/doc_tours.py."""

from __future__ import annotations

import pytest

from tests.e2e.doc_tours import TOUR_SECONDS, run_tour, tour_steps


@pytest.mark.timeout(TOUR_SECONDS)
def test_the_local_stack_tour_runs_as_typed(tmp_path):
    """Guards issue 28, point 1 (a dataset never uploaded, files used but never shown) and issue 44 (every command in
    the documentation runs as typed): every command of the `local` tour runs, in order, on one local stack, and the
    events it shows come."""
    steps = tour_steps("local")
    assert len(steps) >= 10 and steps[0].command.startswith(".venv/bin/trainctl local up --detach")
    assert steps[-1].command.startswith(".venv/bin/trainctl local down"), "the tour stops its stack"
    checkout, printed = run_tour(steps, "the local tour", tmp_path)

    submitted = [output for command, output in printed.items() if " submit " in command and "--source" in command]
    assert len(submitted) == 1 and "succeeded" in submitted[0], submitted  # own-code.md: the package ran
    pictures = {path.name for path in checkout.iterdir() if path.suffix == ".png"}
    assert {"breast-cancer-1-curve.png", "run.png", "last-hour.png", "week.png"} <= pictures, pictures
    assert all((checkout / name).read_bytes().startswith(b"\x89PNG") for name in pictures)
