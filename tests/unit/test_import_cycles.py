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


def modules() -> dict[str, set[str]]:
    """Every module of functions/ (its subpackages' too), by dotted name, with the functions.* modules it imports."""
    found = {}
    for path in FUNCTIONS.rglob("*.py"):
        parts = path.relative_to(FUNCTIONS.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = imported(path)
    return found


def folder(module: str) -> str:
    """The subpackage a module is in (`functions.ledger` for functions.ledger.record, and for the package itself);
    the top level is `functions`."""
    parts = module.split(".")
    return f"functions.{parts[1]}" if len(parts) > 1 and (FUNCTIONS / parts[1]).is_dir() else "functions"


def test_the_controller_modules_import_each_other_without_circles():
    """Guards issue 29, 'a state machine one can read', point 3: ladder.py and lifecycle.py imported each other (a
    type-only import); the record they share is in functions/ledger/record.py now. ports.py named registry.py's types,
    and registry.py builds on vertex.py, which implements ports.Jobs; the types are in
    functions/cloud/registry_types.py now. A new circle fails here."""
    assert circles(modules()) == set()


def test_imports_between_the_controllers_folders_point_one_way():
    """Guards issue 39: each folder of functions/ is a capability, and the folders import one another one way only
    (cloud and untrusted at the bottom, the entry points on top), so each can be read without those above it. The
    top level (entry points, handlers, the controller, settings) may import any folder; no folder imports the top
    level but for the settings, the teams setting and the logs."""
    graph: dict[str, set[str]] = {}
    for module, imports in modules().items():
        graph.setdefault(folder(module), set()).update(folder(i) for i in imports if folder(i) != folder(module))
    top_level_used = {
        i for m, imports in modules().items() if folder(m) != "functions" for i in imports if folder(i) == "functions"
    }
    assert top_level_used <= {"functions.settings", "functions.teams", "functions.logs"}, top_level_used
    graph.pop("functions", None)
    for imports in graph.values():
        imports.discard("functions")
    assert circles(graph) == set()
