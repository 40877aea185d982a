"""The import graph of a Python package, read with `ast` (nothing is imported).

One `Import` per (importing module, imported module, line): every `import B`, `import B as c`,
`from B import x` and relative `from .B import x` / `from . import x` in A, at module level and
inside functions alike (a function-level import is still a dependency, only hidden until the
call). `from P import m` naming a module m is an import of P.m, not of P: importing P.m runs
P's `__init__` too, but counting that would make every package that re-exports in its
`__init__` one big cycle. Imports in the body of `if TYPE_CHECKING:` are annotations only and
not counted (its `else:` runs, so it is).

The architecture tests (`tests/test_architecture.py`) state their rules on this graph;
`ImportGraph.loaded_by` is what Python loads when importing a module, which those tests compare
with a real interpreter so the reader cannot silently miss a form of import.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import spyrec


@dataclass(frozen=True, order=True)
class Import:
    """`importer` imports `imported` (both modules of the package) at `line`."""

    importer: str
    imported: str
    line: int
    at_import_time: bool  # module level (runs when `importer` is imported), not in a function

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported}"


def _is_type_checking(test: ast.expr) -> bool:
    """`TYPE_CHECKING` or `typing.TYPE_CHECKING` (not `not TYPE_CHECKING`)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_statements(stmts, in_function: bool = False):
    """(statement, in a function?) for every import statement among `stmts`, at any depth.

    Only statements are walked (an expression holds no import statement), which keeps reading
    the whole package cheap."""
    for stmt in stmts:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            yield stmt, in_function
        elif isinstance(stmt, ast.If) and _is_type_checking(stmt.test):
            yield from _import_statements(stmt.orelse, in_function)
        else:
            inner = in_function or isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
            children = [c for c in ast.iter_child_nodes(stmt)
                        if isinstance(c, (ast.stmt, ast.excepthandler, ast.match_case))]
            for child in children:
                if isinstance(child, ast.stmt):
                    yield from _import_statements([child], inner)
                else:
                    yield from _import_statements(child.body, inner)


class ImportGraph:
    """Every module under `root` (a package directory) and the imports among them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[str, Path] = {self.module_name(p): p
                                         for p in sorted(root.rglob("*.py"))}
        self.imports: tuple[Import, ...] = tuple(sorted(
            imp for name, path in self.modules.items() for imp in self._read(name, path)))

    def module_name(self, path: Path) -> str:
        parts = path.relative_to(self.root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def is_package(self, name: str) -> bool:
        return self.modules[name].name == "__init__.py"

    def _read(self, name: str, path: Path) -> set[Import]:
        tree = ast.parse(path.read_text(), str(path))
        package = name if self.is_package(name) else name.rpartition(".")[0]
        return {Import(name, target, node.lineno, not in_function)
                for node, in_function in _import_statements(tree.body)
                for target in self._targets(node, package)
                if target in self.modules and target != name}

    def _targets(self, node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
        """The modules one import statement names (`package`: where relative ones start)."""
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in self.modules else base
                for a in node.names]

    @functools.cached_property
    def edges(self) -> dict[str, set[str]]:
        """module -> the modules it imports anywhere (every module is a key)."""
        out: dict[str, set[str]] = {name: set() for name in self.modules}
        for imp in self.imports:
            out[imp.importer].add(imp.imported)
        return out

    def loaded_by(self, module: str) -> set[str]:
        """The modules Python runs when `module` is first imported: the module-level imports,
        followed transitively, and the packages (`__init__`) above each module reached."""
        at_import = {}
        for imp in self.imports:
            if imp.at_import_time:
                at_import.setdefault(imp.importer, set()).add(imp.imported)
        seen: set[str] = set()
        todo = [module]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            parts = name.split(".")
            todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
            todo.extend(at_import.get(name, ()))
        return seen


def within(module: str, package: str) -> bool:
    """Whether `module` is `package` or lies below it."""
    return module == package or module.startswith(package + ".")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


@functools.cache
def spyrec_graph() -> ImportGraph:
    """The import graph of the spyrec package in this tree (read once per test session)."""
    return ImportGraph(Path(spyrec.__file__).parent)
