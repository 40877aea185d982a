"""The simulator only reads files: nothing under spyrec/sim may import the compiler."""

import ast
import subprocess
import sys
from pathlib import Path

import spyrec.sim

FORBIDDEN = ("spyrec.ir", "spyrec.passes", "spyrec.codegen", "spyrec.frontend",
             "spyrec.compiler")
SIM = Path(spyrec.sim.__file__).parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_module_under_sim_imports_the_compiler():
    files = sorted(SIM.rglob("*.py"))
    assert len(files) > 10
    offenders = {f"{p.relative_to(SIM)}: {m}" for p in files for m in imported_modules(p)
                 if m.startswith(FORBIDDEN)}
    assert not offenders, offenders


def test_importing_the_simulator_loads_no_compiler_module():
    modules = [f"spyrec.sim.{p.stem}" for p in SIM.glob("*.py") if p.stem != "__init__"]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules)
            + "print('\\n'.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    assert not [m for m in loaded if m.startswith(FORBIDDEN)]
