"""Which adapter methods each Cloud Function can reach: a static call graph over functions/*.py.

Calls are resolved the way a reader would: module functions by name and import, methods through the
receiver's annotated type (parameters, dataclass fields, `self.x = <typed value>` in __init__ or __post_init__, return
annotations, `a or b`). A nested function's body counts as part of the function it is nested in. Adapter
classes are leaves: a call into them is recorded as a site (caller, method) and not followed further.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

FUNCTIONS_DIR = Path(__file__).resolve().parents[2] / "functions"
PACKAGE = "functions"


@dataclass
class ClassInfo:
    name: str
    methods: dict[str, ast.FunctionDef] = field(default_factory=dict)
    attributes: dict[str, set[str]] = field(default_factory=dict)
    annotations: dict[str, ast.expr] = field(default_factory=dict)
    properties: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Site:
    """One call into an adapter: where it is made from (a function's qualified name) and what it calls."""

    caller: str
    adapter: str
    method: str


class CallGraph:
    def __init__(
        self, adapters: set[str], ports: dict[str, str] | None = None, directory: Path = FUNCTIONS_DIR
    ) -> None:
        """`ports`: Protocol class → the adapter implementing it in the deployed functions
        (functions/cloud/ports.py)."""
        self.adapters = adapters
        self.ports = ports or {}
        self.imports: dict[str, dict[str, str]] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.owner: dict[str, str] = {}  # function qualname -> its class qualname
        self.module_of: dict[str, str] = {}
        self.classes: dict[str, ClassInfo] = {}
        # A method handed to a part's constructor as a field's value (`Markers(…, self.handle_request)`): calling the
        # field (`self.handle_request(…)` in Markers) calls that method. (class, field) -> the methods.
        self.bound: dict[tuple[str, str], set[str]] = {}
        for path in sorted(directory.rglob("*.py")):
            parts = path.relative_to(directory).with_suffix("").parts
            module = ".".join((PACKAGE, *parts[:-1])) if parts[-1] == "__init__" else ".".join((PACKAGE, *parts))
            self._index(module, ast.parse(path.read_text(), str(path)))
        for qualname, info in self.classes.items():
            self._attribute_types(qualname, info)

    # ---- indexing -------------------------------------------------------------------------------------

    def _index(self, module: str, tree: ast.Module) -> None:
        names: dict[str, str] = {}
        for node in ast.walk(tree):  # imports anywhere: TYPE_CHECKING blocks and lazy imports in functions
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names[alias.asname or alias.name] = alias.name
        self.imports[module] = names
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self._add_function(f"{module}.{node.name}", node, module)
            elif isinstance(node, ast.ClassDef):
                qualname = f"{module}.{node.name}"
                info = ClassInfo(qualname)
                self.classes[qualname] = info
                self.module_of[qualname] = module
                for item in node.body:
                    if isinstance(item, ast.FunctionDef):
                        info.methods[item.name] = item
                        self._add_function(f"{qualname}.{item.name}", item, module, owner=qualname)
                        if any(_decorator_name(d) in {"property", "cached_property"} for d in item.decorator_list):
                            info.properties.add(item.name)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        info.annotations[item.target.id] = item.annotation  # resolved once every class is known

    def _add_function(self, qualname: str, node: ast.FunctionDef, module: str, owner: str | None = None) -> None:
        self.functions[qualname] = node
        self.module_of[qualname] = module
        if owner:
            self.owner[qualname] = owner

    def _attribute_types(self, qualname: str, info: ClassInfo) -> None:
        for name, annotation in info.annotations.items():
            info.attributes[name] = self.annotation_types(annotation, self.module_of[qualname])
        for method in ("__init__", "__post_init__"):  # a dataclass sets its derived attributes in the latter
            init = info.methods.get(method)
            if init is None:
                continue
            env = self._environment(f"{qualname}.{method}")
            for node in ast.walk(init):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if _is_self_attribute(target):
                            types = self.expression_types(node.value, env, f"{qualname}.{method}")
                            info.attributes.setdefault(target.attr, set()).update(types)
                elif isinstance(node, ast.Call):
                    self._bind_methods(qualname, info, node, env, f"{qualname}.{method}")

    def _bind_methods(
        self, qualname: str, info: ClassInfo, call: ast.Call, env: dict[str, set[str]], caller: str
    ) -> None:
        """Record each of this class's methods passed to a constructor of ours as one of its fields' values."""
        for target in self.callees(call, env, caller):
            if target not in self.classes:
                continue
            fields = list(self.classes[target].annotations)
            passed = [(fields[i] if i < len(fields) else None, arg) for i, arg in enumerate(call.args)]
            passed += [(keyword.arg, keyword.value) for keyword in call.keywords]
            for name, value in passed:
                method = value.attr if _is_self_attribute(value) else None  # type: ignore[attr-defined]
                if name and method in info.methods:
                    self.bound.setdefault((target, name), set()).add(f"{qualname}.{method}")

    # ---- types ----------------------------------------------------------------------------------------

    def resolve_name(self, name: str, module: str) -> str | None:
        """The qualified name a bare name stands for in `module`: one of ours, or None."""
        local = f"{module}.{name}"
        if local in self.functions or local in self.classes:
            return local
        return self.imports[module].get(name)

    def annotation_types(self, annotation: ast.expr | None, module: str) -> set[str]:
        """The classes of ours an annotation names (`Controller | None` -> {Controller})."""
        if annotation is None:
            return set()
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            annotation = ast.parse(annotation.value, mode="eval").body
        found = set()
        for node in ast.walk(annotation):
            if isinstance(node, ast.Name):
                target = self.resolve_name(node.id, module)
                if target in self.ports:
                    found.add(self.ports[target])
                elif target in self.classes:
                    found.add(target)
        return found

    def _environment(self, qualname: str) -> dict[str, set[str]]:
        """Types of a function's parameters and of the local names assigned from typed expressions."""
        node, module = self.functions[qualname], self.module_of[qualname]
        env: dict[str, set[str]] = {}
        arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
        for index, arg in enumerate(arguments):
            if index == 0 and qualname in self.owner and arg.arg == "self":
                env["self"] = {self.owner[qualname]}
            else:
                env[arg.arg] = self.annotation_types(arg.annotation, module)
        for _ in range(2):  # a second pass sees names assigned from names assigned later in the text
            for inner in ast.walk(node):
                if isinstance(inner, ast.Assign):
                    types = self.expression_types(inner.value, env, qualname)
                    for target in inner.targets:
                        for name in _assigned_names(target):
                            env.setdefault(name, set()).update(types)
                elif isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                    env.setdefault(inner.target.id, set()).update(self.annotation_types(inner.annotation, module))
        return env

    def expression_types(self, expr: ast.expr, env: dict[str, set[str]], qualname: str) -> set[str]:
        module = self.module_of[qualname]
        if isinstance(expr, ast.Name):
            return set(env.get(expr.id, set()))
        if isinstance(expr, ast.BoolOp):
            return set().union(*(self.expression_types(v, env, qualname) for v in expr.values))
        if isinstance(expr, ast.IfExp):
            return self.expression_types(expr.body, env, qualname) | self.expression_types(expr.orelse, env, qualname)
        if isinstance(expr, ast.Attribute):
            types: set[str] = set()
            for cls in self.expression_types(expr.value, env, qualname):
                info = self.classes[cls]
                types |= info.attributes.get(expr.attr, set())
                if expr.attr in info.properties:
                    types |= self.annotation_types(info.methods[expr.attr].returns, self.module_of[cls])
            return types
        if isinstance(expr, ast.Call):
            types = set()
            callees = self.callees(expr, env, qualname)
            for target in callees:
                if target in self.classes:
                    types.add(target)
                elif target in self.functions:
                    types |= self.annotation_types(self.functions[target].returns, self.module_of[target])
            if not callees and isinstance(expr.func, ast.Attribute | ast.Name):
                # A factory held as a value (`registry: Callable[[], Registry]`): calling it gives what it names.
                types |= self.expression_types(expr.func, env, qualname)
            return types
        del module
        return set()

    # ---- calls ----------------------------------------------------------------------------------------

    def callees(self, call: ast.Call, env: dict[str, set[str]], qualname: str) -> set[str]:
        """Qualified names of the functions, methods or classes a call may invoke."""
        func, module = call.func, self.module_of[qualname]
        if isinstance(func, ast.Name):
            target = self.resolve_name(func.id, module)
            return {target} if target and (target in self.functions or target in self.classes) else set()
        if not isinstance(func, ast.Attribute):
            return set()
        if isinstance(func.value, ast.Name) and func.value.id not in env:
            target_module = self.resolve_name(func.value.id, module)
            candidate = f"{target_module}.{func.attr}"
            if candidate in self.functions or candidate in self.classes:
                return {candidate}
        found = set()
        for cls in self.expression_types(func.value, env, qualname):
            if func.attr in self.classes[cls].methods:
                found.add(f"{cls}.{func.attr}")
            found |= self.bound.get((cls, func.attr), set())
        return found

    def edges(self, qualname: str) -> Iterator[str]:
        """Every function this one calls, properties it reads and methods it passes on included; constructors as
        Class.__init__."""
        env = self._environment(qualname)
        for node in ast.walk(self.functions[qualname]):
            if isinstance(node, ast.Call):
                for target in self.callees(node, env, qualname):
                    if target in self.classes:
                        if "__init__" in self.classes[target].methods:
                            yield f"{target}.__init__"
                    else:
                        yield target
            elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
                # A property read is a call; so, conservatively, is a method passed on as a value (to a thread
                # pool, say): whoever receives it may call it.
                for cls in self.expression_types(node.value, env, qualname):
                    if node.attr in self.classes[cls].properties or node.attr in self.classes[cls].methods:
                        yield f"{cls}.{node.attr}"

    def adapter_of(self, qualname: str) -> str | None:
        owner = self.owner.get(qualname)
        return owner if owner in self.adapters else None

    def reachable_sites(self, entry: str) -> set[Site]:
        """The adapter calls reachable from an entry point, each with the function that makes it."""
        sites: set[Site] = set()
        seen, todo = {entry}, [entry]
        while todo:
            caller = todo.pop()
            for target in self.edges(caller):
                adapter = self.adapter_of(target)
                if adapter:
                    sites.add(Site(caller, adapter, target.rsplit(".", 1)[1]))
                elif target not in seen:
                    seen.add(target)
                    todo.append(target)
        return sites

    def unresolved_adapter_looking_calls(self, words: tuple[str, ...]) -> list[str]:
        """Calls on a receiver whose text names an adapter (`self.gcs.x`, `publisher.x`) that did not resolve
        to an adapter method: a sign that the type inference missed a path, so the test would miss its grant."""
        missed = []
        for qualname in self.functions:
            if self.adapter_of(qualname):
                continue
            env = self._environment(qualname)
            for node in ast.walk(self.functions[qualname]):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    receiver = ast.unparse(node.func.value).lower()
                    if any(word in receiver for word in words):
                        targets = self.callees(node, env, qualname)
                        if not any(self.adapter_of(t) for t in targets):
                            missed.append(f"{qualname}: {ast.unparse(node.func)}")
        return missed


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _is_self_attribute(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _assigned_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _assigned_names(element)
