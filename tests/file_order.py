"""Longest test files first, so that two workers finish together. Under `--dist loadfile` a file runs on
one worker; pytest-xdist hands out files in order (by default, the files with the most tests first), so a
long file with one test — the demo, the soak — used to start last and keep one worker busy alone at the end.

The order comes from tests/file_seconds.json, each file's seconds (setup + call + teardown) in a whole run;
a file it does not list yet goes first, as it may be long. After a change of weight, update the figures of
the files a run reaches with `.venv/bin/pytest -n 2 --dist loadfile --record-file-seconds [files]`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

SECONDS_FILE = Path(__file__).with_name("file_seconds.json")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-file-seconds",
        action="store_true",
        help=f"record the seconds of each test file this run reaches in {SECONDS_FILE.name}",
    )


# Seconds per test file in this run, summed from the reports every worker sends to the controller.
_spent: defaultdict[str, float] = defaultdict(float)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep the order set below instead of "most tests first"


def file_seconds() -> dict[str, float]:
    return json.loads(SECONDS_FILE.read_text()) if SECONDS_FILE.exists() else {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds = file_seconds()

    def longest_first(item: pytest.Item) -> tuple[bool, float]:
        path = item.nodeid.split("::", 1)[0]
        return (path in seconds, -seconds.get(path, 0.0))

    items.sort(key=longest_first)  # a stable sort: the tests of a file keep their order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _spent[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if not config.getoption("record_file_seconds") or hasattr(config, "workerinput"):
        return
    # Files this run did not reach keep their figures: a partial run updates only what it ran.
    spent = file_seconds() | {path: round(seconds, 1) for path, seconds in _spent.items()}
    SECONDS_FILE.write_text(json.dumps(dict(sorted(spent.items())), indent=1) + "\n")
