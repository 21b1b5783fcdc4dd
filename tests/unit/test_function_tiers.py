"""The function tier arithmetic bench/cold_start.py uses to choose each function's memory (and so its CPU)."""

from bench.function_tiers import VCPU_OF_MEMORY, estimated_seconds, smallest_tier


def test_a_sixth_of_a_vcpu_stretches_only_the_cpu_part_of_a_run():
    """Guards issue 12 point 14: 256 MiB is 0.167 vCPU, so one CPU second becomes about six."""
    assert VCPU_OF_MEMORY["256Mi"] == 0.167
    assert round(estimated_seconds(wall_s=1.5, cpu_s=1.0, vcpu=0.167), 2) == round(0.5 + 1 / 0.167, 2)
    assert estimated_seconds(wall_s=1.5, cpu_s=1.0, vcpu=2.0) == 1.5  # one thread uses one core at most


def test_the_smallest_tier_that_keeps_a_run_within_its_limit():
    assert smallest_tier(wall_s=1.0, cpu_s=0.1, limit_s=1.5) == "256Mi"
    assert smallest_tier(wall_s=1.0, cpu_s=0.9, limit_s=1.2) == "2Gi"
    assert smallest_tier(wall_s=3.0, cpu_s=1.0, limit_s=1.0) is None
