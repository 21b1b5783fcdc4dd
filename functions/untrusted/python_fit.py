"""Whether a package's code and wheels run on the executor's Python (issue 40, point 10): the executors run Python
3.10, the local executor the JobService's own (3.11 or later), so code written for a later Python would run here and
fail on Vertex. A .py file is parsed in the executor's grammar (ast's feature_version), its imports checked for
standard-library names added later, a wheel's file name for tags the executor's pip takes. Pure, stdlib only.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator


def syntax_problem(path: str, data: bytes, python: tuple[int, int]) -> str | None:
    """The file's first syntax error in `python`'s grammar (ast's feature_version: best effort, as the docs say),
    naming the file and the line."""
    try:
        ast.parse(data, filename=path, feature_version=python)
    except SyntaxError as exc:
        return f"{path}, line {exc.lineno}: {exc.msg} (the executor runs Python {python[0]}.{python[1]})"
    except ValueError as exc:  # source with a NUL byte, say
        return f"{path}: {exc} (the executor runs Python {python[0]}.{python[1]})"
    return None


# Standard-library modules and names newer than 3.10 (Python's "What's New In Python 3.11/3.12"): module → the
# version that added it, and (module, name) → the version that added the name.
NEWER_MODULES = {"tomllib": (3, 11)}
NEWER_NAMES = {
    ("datetime", "UTC"): (3, 11),
    ("enum", "StrEnum"): (3, 11),
    ("typing", "Self"): (3, 11),
    ("typing", "LiteralString"): (3, 11),
    ("typing", "Never"): (3, 11),
    ("typing", "assert_never"): (3, 11),
    ("typing", "reveal_type"): (3, 11),
    ("typing", "Required"): (3, 11),
    ("typing", "NotRequired"): (3, 11),
    ("typing", "TypeVarTuple"): (3, 11),
    ("typing", "Unpack"): (3, 11),
    ("typing", "dataclass_transform"): (3, 11),
    ("asyncio", "TaskGroup"): (3, 11),
    ("asyncio", "timeout"): (3, 11),
    ("contextlib", "chdir"): (3, 11),
    ("typing", "override"): (3, 12),
    ("itertools", "batched"): (3, 12),
}


def newer_stdlib_uses(path: str, data: bytes, python: tuple[int, int]) -> list[str]:
    try:
        tree = ast.parse(data, filename=path)
    except (SyntaxError, ValueError):
        return []  # syntax_problem says why
    found = []
    for node, guarded in _imports(tree):
        if guarded:
            continue
        for module, name in _imported(node):
            added = NEWER_NAMES.get((module, name or "")) or NEWER_MODULES.get(module.split(".")[0])
            if added is not None and added > python:
                what = f"{module}.{name}" if name and (module, name) in NEWER_NAMES else module
                found.append(
                    f"{path}, line {node.lineno}: {what} is new in Python {added[0]}.{added[1]}; the executor runs "
                    f"Python {python[0]}.{python[1]}, where this import fails"
                )
    return found


def _imports(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import, and whether it is guarded: in a try whose handlers catch ImportError (or anything), or under an
    `if` that tests sys.version_info."""

    def walk(node: ast.AST, guarded: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, guarded
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            for child in node.body:
                yield from walk(child, True)
            for rest in (*node.handlers, *node.orelse, *node.finalbody):
                yield from walk(rest, guarded)
            return
        if isinstance(node, ast.If) and "version_info" in ast.dump(node.test):
            for child in (*node.body, *node.orelse):
                yield from walk(child, True)
            return
        for inner in ast.iter_child_nodes(node):
            yield from walk(inner, guarded)

    yield from walk(tree, False)


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    caught = {n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else "" for n in names}
    return bool(caught & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _imported(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str | None]]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, None
    elif node.module and node.level == 0:
        yield node.module, None
        for alias in node.names:
            yield node.module, alias.name


def wheel_problem(filename: str, python: tuple[int, int]) -> str | None:
    """Why a wheel does not install on CPython `python` on Linux x86-64 (the executors), from its file name's tags
    (PEP 427: name-version[-build]-python-abi-platform.whl; tags may be compressed sets, PEP 425); None when some
    combination does."""
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) not in (5, 6):
        return f"{filename}: not a wheel's file name (name-version[-build]-python-abi-platform.whl)"
    pythons, abis, platforms = (set(parts[-3].split(".")), set(parts[-2].split(".")), set(parts[-1].split(".")))
    version = f"{python[0]}.{python[1]}"
    if not any(_python_fits(tag, abi, python) for tag in pythons for abi in abis):
        return (
            f"{filename}: built for {', '.join(sorted(pythons))} ({', '.join(sorted(abis))}); the executor runs "
            f"Python {version}: build it for cp{python[0]}{python[1]}, or as a pure-Python py3 wheel"
        )
    if not any(_platform_fits(platform) for platform in platforms):
        return f"{filename}: built for {', '.join(sorted(platforms))}; the executor is Linux on x86-64"
    return None


def _python_fits(tag: str, abi: str, python: tuple[int, int]) -> bool:
    found = re.fullmatch(r"(py|cp)(\d)(\d*)", tag)
    if found is None:
        return False
    kind, major, minor = found.group(1), int(found.group(2)), found.group(3)
    if major != python[0]:
        return False
    if kind == "py":
        return not minor or int(minor) <= python[1]
    if abi == "abi3":
        return not minor or int(minor) <= python[1]
    return minor != "" and int(minor) == python[1] and abi in ("none", f"cp{python[0]}{python[1]}")


def _platform_fits(platform: str) -> bool:
    return platform == "any" or (platform.endswith("_x86_64") and platform.startswith(("manylinux", "linux_")))
