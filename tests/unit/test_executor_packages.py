"""The local executor names a package's dependency it does not hold before any node starts (issue 31, point 5):
a prebuilt PyTorch container comes with torch and its companions only, and this stack never reaches PyPI."""

from __future__ import annotations

from pathlib import Path

from local.jobservice.packages import missing_requirements


def installed(target: Path, name: str, requires: list[str]) -> None:
    """A distribution as pip leaves it in a --target folder: its dist-info METADATA."""
    info = target / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0", *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_a_dependency_neither_the_package_folder_nor_the_executor_holds_is_named(tmp_path: Path):
    installed(
        tmp_path,
        "my_pkg",
        ["torch>=2", "helper-lib", "no-such-distribution-anywhere>=3", "other-missing; extra == 'docs'"],
    )
    installed(tmp_path, "helper_lib", [])  # shipped beside it in python_package.uris

    assert missing_requirements(tmp_path) == ["no-such-distribution-anywhere>=3"]


def test_a_package_whose_dependencies_the_executor_holds_is_complete(tmp_path: Path):
    installed(tmp_path, "my_pkg", ["torch", "numpy"])
    assert missing_requirements(tmp_path) == []
