"""README's quickstart ("Your own data in five minutes", issue 44), run as typed from this checkout's .venv on the
local stack — a CSV in, a registered champion out, predictions written — then docs/local.md's blocks that build on it
in the same shell: the stack brought back up keeps the model. How a tour is typed: tests/e2e/doc_tours.py."""

from __future__ import annotations

import csv
import re

import pytest

from tests.e2e.doc_tours import TOUR_SECONDS, run_tour, tour_steps


@pytest.mark.timeout(TOUR_SECONDS)
def test_the_quickstart_runs_as_typed(tmp_path):
    """Guards issue 44, point 1 (acceptance): README's "Your own data in five minutes" runs as typed from this
    checkout's .venv on the local stack — a CSV in, a registered champion out, predictions written — and after
    `local down` and `local up` the model is still there, as docs/local.md says."""
    steps = tour_steps("quickstart")
    commands = [step.command for step in steps]
    assert any(c.startswith("gcloud storage cp examples/quickstart/breast-cancer.csv ") for c in commands), commands
    assert {"registered", "promoted"} <= {state for step in steps for state, _ in step.events}, (
        "README shows no champion"
    )
    checkout, printed = run_tour(steps, "the quickstart tour", tmp_path)

    listed = [output for command, output in printed.items() if command.startswith(".venv/bin/trainctl models list")]
    assert len(listed) == 2, "README lists the models, and docs/local.md again after the stack came back up"
    for output in listed:  # the model is still there after `local down` and `local up`
        assert re.search(r"^cancer\s+1\s+champion=1$", output, re.MULTILINE), output
    with (checkout / "predictions.csv").open(newline="") as written:
        rows = list(csv.DictReader(written))
    assert len(rows) == 569  # every row of the CSV
    assert {row["prediction"] for row in rows} <= {"benign", "malignant"}
    assert sum(row["prediction"] == row["diagnosis"] for row in rows) > 0.8 * len(rows)  # a model that learned
