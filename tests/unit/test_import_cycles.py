"""The controller's modules import one another without circles, type-only imports included: a circle means two
modules that can only be read (and changed) together."""

from __future__ import annotations

import ast
from pathlib import Path

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"


def imported(path: Path) -> set[str]:
    """The functions.* modules a module imports at its top level, under `if TYPE_CHECKING:` too (an import inside a
    function is a deliberate late one, and not counted)."""
    found: set[str] = set()

    def visit(node: ast.stmt) -> None:
        if isinstance(node, ast.If):
            for inner in node.body:
                visit(inner)
        elif isinstance(node, ast.ImportFrom) and node.module == "functions":
            found.update(f"functions.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("functions."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("functions."))

    for node in ast.parse(path.read_text()).body:
        visit(node)
    return found


def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Every elementary circle in the graph, each written from its smallest module name."""
    found: set[tuple[str, ...]] = set()

    def walk(path: list[str]) -> None:
        for module in sorted(graph.get(path[-1], ())):
            if module == path[0]:
                start = path.index(min(path))
                found.add(tuple(path[start:] + path[:start]))
            elif module not in path and module > path[0]:  # each circle found once, from its smallest member
                walk([*path, module])

    for module in graph:
        walk([module])
    return found


def test_the_circle_finder_finds_a_type_only_circle(tmp_path):
    """The check is not vacuous: a module that imports another only under TYPE_CHECKING still closes a circle."""
    (tmp_path / "a.py").write_text("from functions.b import B\n")
    type_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from functions.a import A\n"
    (tmp_path / "b.py").write_text(type_only)
    graph = {f"functions.{path.stem}": imported(path) for path in tmp_path.glob("*.py")}
    assert circles(graph) == {("functions.a", "functions.b")}


def test_the_controller_modules_import_each_other_without_circles():
    """Guards issue 29, 'a state machine one can read', point 3: ladder.py and lifecycle.py imported each other (a
    type-only import); the record they share is in functions/record.py now. ports.py named registry.py's types, and
    registry.py builds on vertex.py, which implements ports.Jobs; the types are in functions/registry_types.py now.
    A new circle fails here."""
    graph = {f"functions.{path.stem}": imported(path) for path in FUNCTIONS.glob("*.py")}
    assert circles(graph) == set()
