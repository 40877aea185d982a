"""Layers point one way: each low-level package imports only the packages below it.

    spyrec.device   (device facts)            imports nothing of spyrec
    spyrec.bf16     (bf16 <-> float32)        imports nothing of spyrec
    spyrec.layout   (DeviceLayout, dtypes)    device, bf16
    spyrec.indexing (index algebra, sticks)   device, layout, errors
    spyrec.ir       (Buffer, Operation)       device, layout, indexing, errors

So the layout search lives in the stick_layout pass and the stick analysis in indexing: a
layout that imported either would pull the compiler into everything that reads a layout (the
simulator included). Imports under `if TYPE_CHECKING:` are annotations only and not counted.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import spyrec

ROOT = Path(spyrec.__file__).parent
BELOW = {
    "spyrec.device": (),
    "spyrec.bf16": (),
    "spyrec.layout": ("spyrec.device", "spyrec.bf16"),
    "spyrec.indexing": ("spyrec.device", "spyrec.layout", "spyrec.errors"),
    "spyrec.ir": ("spyrec.device", "spyrec.layout", "spyrec.indexing", "spyrec.errors"),
}


def _files(package: str) -> list[Path]:
    path = ROOT / package.removeprefix("spyrec.")
    return sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]


def _runtime_imports(path: Path) -> set[str]:
    """Modules imported anywhere in the file (functions included), TYPE_CHECKING blocks not."""
    tree = ast.parse(path.read_text(), str(path))
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
               and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n == "spyrec" or n.startswith("spyrec.")}


def _allowed(module: str, package: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in (package, *BELOW[package]))


@pytest.mark.parametrize("package", sorted(BELOW))
def test_package_imports_only_the_layers_below_it(package):
    files = _files(package)
    assert files and all(f.exists() for f in files), files
    offenders = sorted(f"{f.relative_to(ROOT)}: {m}" for f in files
                       for m in _runtime_imports(f) if not _allowed(m, package))
    assert not offenders, offenders


def test_the_checker_sees_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from spyrec.ir import Graph\n"
                   "def f():\n    from spyrec.passes.stick_layout import search\n")
    assert _runtime_imports(bad) == {"spyrec.passes.stick_layout"}


def test_importing_layout_loads_nothing_else_of_spyrec():
    code = "import sys, spyrec.layout; print('\\n'.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=ROOT.parent).stdout.split()
    ours = {m for m in loaded if m.startswith("spyrec")}
    assert ours <= {"spyrec", "spyrec.device", "spyrec.layout", "spyrec.layout.device_layout",
                    "spyrec.layout.dtypes", "spyrec.bf16"}, ours
