"""The soak's short version: 60 s of random requests, duplicates, bad input, markers, preemptions and
crashed function workers on a local stack (bench/soak.py), then its invariants.

Guards exactly-once submission, exactly one terminal event per accepted request, stable ce-ids (never two
payloads under one id) and a clean shutdown — under concurrency and faults, not just one at a time."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))

import soak


def test_sixty_seconds_of_mixed_load_and_faults_keep_every_invariant():
    result = soak.soak(60, seed=11, settle_seconds=150)
    assert result["accepted requests"] > 20 and result["actions"].get("preempt", 0) > 0, result
    for invariant in soak.VIOLATIONS:
        assert result[invariant] == 0, (invariant, result)
    assert result["jobs == submitted pairs"], result
