"""What every benchmark records beside its figures — the command, the machine, the load, the date and the
commit — and the append to bench/RESULTS.md, so each run leaves a row per figure with its context."""

from __future__ import annotations

import math
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS = BENCH_DIR / "RESULTS.md"


@dataclass(frozen=True)
class Figure:
    name: str
    value: str
    goal: str = ""
    met: bool | None = None  # None: no goal for this figure

    def row(self) -> str:
        verdict = "" if self.met is None else ("yes" if self.met else "**no**")
        return f"| {self.name} | {self.value} | {self.goal} | {verdict} |"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sample."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def _first(path: str, key: str) -> str:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def machine() -> str:
    mem_kib = _first("/proc/meminfo", "MemTotal").split()[0]
    ram = f"{int(mem_kib) / 1024**2:.1f} GiB RAM" if mem_kib.isdigit() else "RAM unknown"
    cpu = _first("/proc/cpuinfo", "model name")
    return f"{os.cpu_count()} cores, {ram}, {cpu}; Python {platform.python_version()}"


def commit() -> str:
    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        return result.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = [line for line in git("status", "--porcelain").splitlines() if not line.endswith("bench/RESULTS.md")]
    return f"{head}{' + uncommitted changes' if changed else ''} ({git('rev-parse', '--abbrev-ref', 'HEAD')})"


def command_line() -> str:
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(REPO_ROOT) if script.is_relative_to(REPO_ROOT) else script
    return shlex.join(["python", str(shown), *sys.argv[1:]])


def record(
    title: str, figures: Sequence[Figure], load_before: str, notes: Sequence[str] = (), results: Path = RESULTS
) -> None:
    """Print the figures and append them, with their context, to `results` (bench/RESULTS.md)."""
    lines = [
        f"### {title} — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"- command: `{command_line()}`",
        f"- machine: {machine()}",
        f"- commit: {commit()}",
        f"- load average (1/5/15 min) before: {load_before}; after: {load_average()}",
        *(f"- {note}" for note in notes),
        "",
        "| figure | value | goal | met |",
        "|---|---|---|---|",
        *(figure.row() for figure in figures),
        "",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if not results.exists():
        results.write_text("# Benchmark results\n\n")
    with results.open("a") as out:
        out.write(text)
