"""How much CPU a 2nd-gen Cloud Function gets for its memory, and which tier keeps a cold path within a time.

A function's memory tier sets its vCPU when no CPU is given (https://cloud.google.com/functions/docs/configuring/memory):
256 MiB runs on a sixth of a vCPU, so a cold start measured on whole cores takes several times longer there.
The estimate stretches only the CPU part of a measured run: the time spent waiting (emulators, the JobService)
does not depend on the tier, the CPU seconds (user + sys) run at the tier's share of a core.
"""

from __future__ import annotations

# memory (Terraform's available_memory) -> vCPU, from the table on the page above.
VCPU_OF_MEMORY: dict[str, float] = {
    "128Mi": 0.083,
    "256Mi": 0.167,
    "512Mi": 0.333,
    "1Gi": 0.583,
    "2Gi": 1.0,
    "4Gi": 2.0,
    "8Gi": 2.0,
    "16Gi": 4.0,
    "32Gi": 8.0,
}


def estimated_seconds(wall_s: float, cpu_s: float, vcpu: float) -> float:
    """A run's time on a tier with `vcpu` of a core, from its wall time and CPU seconds on whole cores."""
    waiting = max(wall_s - cpu_s, 0.0)
    return waiting + cpu_s / min(vcpu, 1.0)  # a single-threaded cold start uses one core at most


def smallest_tier(wall_s: float, cpu_s: float, limit_s: float) -> str | None:
    """The smallest memory tier on which the run is estimated to finish within `limit_s`; None if none does."""
    for memory, vcpu in VCPU_OF_MEMORY.items():
        if estimated_seconds(wall_s, cpu_s, vcpu) <= limit_s:
            return memory
    return None
