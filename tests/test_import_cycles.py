"""No import cycles inside a package: the modules of each spyrec package form a DAG.

The graph is read with `ast`, not by importing: an edge A -> B for every `import B` /
`from B import x` in A (a `from P import m` naming a module m gives an edge to P.m), at module
level and inside functions alike (a function-level import that closes a circle is still a
circle, only hidden until the call). Imports under `if TYPE_CHECKING:` are annotations only and
not counted, and importing P.m is not counted as importing P (its `__init__`), or every package
with re-exports in its `__init__` would be one big cycle.

A package's cycles are the strongly connected components of the graph restricted to its own
modules. Packages not yet free of them list theirs in `KNOWN_CYCLES`, exactly: a new cycle fails,
and so does a known one that is gone (delete it from the list), so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import spyrec

ROOT = Path(spyrec.__file__).parent

# package -> its cycles today, each the sorted module names of one strongly connected component
# (modules named relative to the package). Fix a cycle, then delete its line.
KNOWN_CYCLES: dict[str, set[tuple[str, ...]]] = {
    "spyrec.indexing": {("expr", "printer")},
    "spyrec.passes": {("split_chains", "split_cost", "stage_inputs", "work_division")},
    "spyrec.sim": {("foreign", "loader")},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    return {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The spyrec modules `name` (at `path`) imports anywhere in its body."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = _type_checking_nodes(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m != name}


@functools.cache
def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


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


def packages() -> list[str]:
    """spyrec itself (its top-level modules) and every package below it."""
    return sorted({module_name(p.parent / "__init__.py") for p in ROOT.rglob("__init__.py")})


def package_cycles(package: str) -> set[tuple[str, ...]]:
    """The cycles among `package`'s own modules (subpackages' modules included), named
    relative to the package."""
    edges = graph()
    inside = {m for m in edges if m == package or m.startswith(package + ".")}
    if package == "spyrec":  # the top level: its own modules, each subpackage one module
        inside = {m for m in edges if m.count(".") <= 1}
    sub = {m: {w for w in edges[m] if w in inside} for m in sorted(inside)}
    prefix = package + "."
    return {tuple(m.removeprefix(prefix) for m in c) for c in cycles(sub)}


@pytest.mark.parametrize("package", packages())
def test_no_import_cycle_inside_package(package):
    found = package_cycles(package)
    known = KNOWN_CYCLES.get(package, set())
    new = sorted(found - known)
    gone = sorted(known - found)
    assert not new, f"import cycles in {package} (break them; modules relative to the " \
                    f"package): {new}"
    assert not gone, f"these known cycles of {package} are gone or changed: delete them " \
                     f"from KNOWN_CYCLES (and add what they became, if still a cycle): {gone}"


def test_frontend_has_no_known_cycles():
    """The front end is free of cycles; it must not come back through the known list."""
    assert "spyrec.frontend" not in KNOWN_CYCLES


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    pkg = tmp_path / "spyrec" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from spyrec.pkg import c\n"
                              "def f():\n    from spyrec.pkg.b import g\n")
    (pkg / "b.py").write_text("from . import a\n")
    known = {"spyrec.pkg", "spyrec.pkg.a", "spyrec.pkg.b", "spyrec.pkg.c"}
    assert imports_of("spyrec.pkg.a", pkg / "a.py", known) == {"spyrec.pkg.b"}
    assert imports_of("spyrec.pkg.b", pkg / "b.py", known) == {"spyrec.pkg.a"}
    assert cycles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
