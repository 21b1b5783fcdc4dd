"""The soak's short version: 40 random actions — requests, duplicates, bad input, markers, preemptions,
crashed function workers, requests that move down their capacity ladder and requests that register versions of
two models, under a GPU quota that queues bursts — on a local stack (bench/soak.py), then its invariants. A fixed
number of actions from a fixed seed, so what is asserted does not depend on how fast the machine is.

Guards (with two teams publishing on their own topics, issue 32: never more GPUs in jobs than the quota)
exactly-once submission, exactly one terminal event per accepted request, stable ce-ids (never two
payloads under one id), one registered version and one decision per succeeded model request and never two
champions (issue 26), and a clean shutdown — under concurrency and faults, not just one at a time."""

from __future__ import annotations

from bench import soak


def test_a_fixed_mix_of_load_and_faults_keeps_every_invariant():
    result = soak.soak(None, seed=11, settle_seconds=360, actions=40)
    assert sum(result["actions"].values()) == 40 and result["actions"].get("preempt", 0) > 0, result
    # Issue 29: a preemption counts only when it hit a running job (one that found none tested nothing).
    assert result["preemptions of running jobs"] > 0, result
    assert result["ladder moves"] > 0, result
    assert result["model requests that succeeded"] > 0 and result["decisions"], result
    assert result["accepted requests"] > 0, result
    assert {"red", "blue", "shared"} <= set(result["accepted by team"]), result
    # The offending requests' events first: pytest shortens a long message, and the whole result is long.
    unended = result["requests without exactly one terminal event"]
    for invariant in soak.VIOLATIONS:
        assert result[invariant] == 0, (invariant, unended, result)
    assert result["jobs == submitted pairs"], result
