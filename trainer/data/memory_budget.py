"""Whether a rank's share of the data fits in memory, decided before anything is read (issue 30, point 2).

A rank's peak in memory is estimated from the bytes its files take in storage: the trainer holds about 2.5 × the
float32 rows it loads (bench/trainer_memory.py), and a Parquet float is stored in at most its own size, a CSV one
in two or more bytes of text per byte. The budget is `--memory-budget-mb`, by default MEMORY_BUDGET_FRACTION of
the node's memory (its cgroup limit when it has one) divided by the ranks on the node. Every rank applies the
rule to its own share and all ranks stream when any one must, so they run the same code path.

`trainctl plan --memory` applies the same rule to the dataset's listing (functions/jobs/planning.py keeps the same
figures; a test checks they agree).
"""

from __future__ import annotations

import os
from pathlib import Path

MEMORY_BUDGET_FRACTION = 0.5
PEAK_PER_STORED_BYTE = {"parquet": 3.0, "csv": 1.5}
_CGROUP_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def node_memory_bytes() -> int:
    """The memory this node's processes may use: the container's cgroup limit when there is one, else the RAM."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in _CGROUP_LIMITS:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < physical:
            return int(text)
    return physical


def default_budget_bytes(local_ranks: int, memory: int | None = None) -> int:
    node = node_memory_bytes() if memory is None else memory
    return int(node * MEMORY_BUDGET_FRACTION / max(local_ranks, 1))


def estimated_peak_bytes(files: list[tuple[int, str]]) -> int:
    """A rank's estimated peak in memory from (stored bytes, format) of the files it reads."""
    return round(sum(size * PEAK_PER_STORED_BYTE[file_format] for size, file_format in files))


def must_stream(files: list[tuple[int, str]], budget_bytes: int) -> bool:
    return estimated_peak_bytes(files) > budget_bytes
