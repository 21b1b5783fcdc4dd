"""The docs/ pages' commands that need no stack, run as typed (issue 44: every command in the documentation is run by
a test): validate (docs/requests.md), plan with a capacity ladder (capacity.md), replay of a day of markers
(operations.md). How a tour is typed: tests/e2e/doc_tours.py."""

from __future__ import annotations

from tests.e2e.doc_tours import run_tour, tour_steps


def test_the_commands_without_a_stack_run_as_typed(tmp_path):
    """Each command as its page types it, in a fresh shell with no stack; a bad file's `validate` exits 2, as the
    page shows."""
    steps = tour_steps("offline")
    assert not any("local up" in step.command for step in steps), "the offline tour needs no stack"
    assert any(step.status == 2 for step in steps), "docs/requests.md shows `validate` refusing a bad file"
    run_tour(steps, "the docs' offline tour", tmp_path)
