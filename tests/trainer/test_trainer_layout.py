"""The trainer's folders say what it is made of (issue 39): the entry points on top, each subpackage a capability
named in one line, and imports that point one way between modules and between folders, type-only ones included."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "trainer"
ENTRY_POINTS = {"launch", "train", "serve", "predict"}  # `python -m trainer.X`: the image, the local stack, README
MAX_TOP_LEVEL_MODULES = 8


def modules(root: Path = REPO) -> dict[str, Path]:
    """Every module of the trainer by its dotted name (a package by its own name, from its __init__.py)."""
    found = {}
    for path in sorted((root / "trainer").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(path: Path, known: dict[str, Path]) -> set[str]:
    """The trainer modules that a module imports anywhere in it: at its top, under `if TYPE_CHECKING:`, in a
    function. `from trainer.data import streaming` names the module trainer.data.streaming."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "trainer"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "trainer":
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & known.keys()
            found |= submodules or {str(node.module)}
    return found


def folder_of(module: str) -> str:
    """trainer.data.streaming lies in trainer.data; a top-level module (trainer.train) stands for itself."""
    return ".".join(module.split(".")[:2])


def circle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as e:
        return list(e.args[1])
    return None


def module_graph(root: Path = REPO) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imported(path, known) - {name} for name, path in known.items()}


def folder_graph(root: Path = REPO) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, targets in module_graph(root).items():
        folder = folder_of(module)
        graph.setdefault(folder, set()).update(folder_of(t) for t in targets if folder_of(t) != folder)
    graph.pop("trainer", None)  # trainer/__init__.py imports nothing
    return graph


def test_a_type_only_import_closes_a_circle_between_folders(tmp_path):
    """The checks below are not vacuous: an import under TYPE_CHECKING counts, between folders too."""
    for folder in ("a", "b"):
        (tmp_path / "trainer" / folder).mkdir(parents=True)
        (tmp_path / "trainer" / folder / "__init__.py").write_text('"""A folder."""\n')
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "a" / "one.py").write_text("from trainer.b import two\n")
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainer.a.one import X\n"
    (tmp_path / "trainer" / "b" / "two.py").write_text(type_only)
    assert circle(module_graph(tmp_path)) is not None
    assert circle(folder_graph(tmp_path)) is not None


def test_the_top_level_holds_the_entry_points_and_little_else():
    top = {path.stem for path in TRAINER.glob("*.py")} - {"__init__"}
    assert top >= ENTRY_POINTS
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"trainer/ holds {sorted(top)}: give the newcomer a folder"


@pytest.mark.parametrize("folder", sorted({p.parent.name for p in TRAINER.glob("*/*.py")}))
def test_every_folder_is_a_package_that_says_its_purpose_in_one_line(folder):
    init = TRAINER / folder / "__init__.py"
    assert init.exists(), f"trainer/{folder}/ has no __init__.py"
    purpose = ast.get_docstring(ast.parse(init.read_text()))
    assert purpose and "\n" not in purpose, f"trainer/{folder}/__init__.py: say in one line what this folder does"


def test_the_trainers_modules_import_each_other_without_circles():
    assert circle(module_graph()) is None


def test_imports_between_the_trainers_folders_point_one_way():
    assert circle(folder_graph()) is None


def test_the_trainer_stands_alone():
    """DESIGN.md §2: configured only by its command line and environment, it imports no other package of ours."""
    ours = {"functions", "schemas", "local", "trainctl", "bench", "tests"}
    offenders = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if taken := {n for n in names if n.split(".")[0] in ours}:
                offenders[name] = taken
    assert offenders == {}
