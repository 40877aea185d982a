"""The architecture as tests: which part of spyrec may import which, read from the import graph.

The graph (`tests/import_graph.py`) counts module-level and function-level imports alike and
skips the body of `if TYPE_CHECKING:`. The rules:

- **Layers point one way**: each low-level package imports only the packages below it.

      spyrec.device    (device facts)             nothing of spyrec
      spyrec.bf16      (bf16 <-> float32)         nothing of spyrec
      spyrec.costmodel (cost formulas)            device
      spyrec.layout    (DeviceLayout, dtypes)     device, bf16
      spyrec.indexing  (index algebra, sticks)    device, layout, errors
      spyrec.ir        (Buffer, Operation)        device, layout, indexing, errors
      spyrec.plan      (planning knowledge)       device, bf16, layout, indexing, ir, errors,
                                                  costmodel

  So the layout search lives in the stick_layout pass and the stick analysis in indexing: a
  layout that imported either would pull the compiler into everything that reads a layout (the
  simulator included).
- **No pass imports another pass**: what two passes share lives below them (`spyrec.plan`), so
  each pass is a thin driver that can be read, run and replaced alone.
- **Passes are reached through the pipeline**: outside spyrec.passes, code imports only the
  package itself, its registry and its pipeline; a pass module is loaded by the registry when
  a pipeline names it, so the compiler never depends on one pass's internals.
- **Planning is not simulating**: nothing in spyrec.passes or spyrec.plan imports spyrec.sim or
  spyrec.codegen; the compiler's other parts (compiler, codegen, frontend, ir) import nothing
  of spyrec.sim. The cost formulas both sides need live in `spyrec.costmodel`.
- **No import cycle inside a package** (its modules form a DAG), spyrec.passes, spyrec.plan,
  spyrec.frontend and spyrec.sim included; for the top level each subpackage counts as one module.

Each rule lists the violations the tree still has in its `KNOWN_...` set, one line each: a new
violation fails, and so does a listed one that is gone (delete its line), so the lists only
shrink. A rule about a package that does not exist yet holds trivially.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable

import pytest

from tests.import_graph import ImportGraph, cycles, spyrec_graph, within

# --- rules on single imports ------------------------------------------------------------------

LAYERS: dict[str, tuple[str, ...]] = {  # package -> what it may import besides itself
    "spyrec.device": (),
    "spyrec.bf16": (),
    "spyrec.fp8": (),
    "spyrec.costmodel": ("spyrec.device",),
    "spyrec.layout": ("spyrec.device", "spyrec.bf16"),
    "spyrec.indexing": ("spyrec.device", "spyrec.layout", "spyrec.errors"),
    "spyrec.ir": ("spyrec.device", "spyrec.layout", "spyrec.indexing", "spyrec.errors"),
    "spyrec.plan": ("spyrec.device", "spyrec.bf16", "spyrec.layout", "spyrec.indexing",
                    "spyrec.ir", "spyrec.errors", "spyrec.costmodel"),
}
# Layer packages still being written: they may be missing from the tree (any other missing one
# is a typo in LAYERS).
PLANNED = ("spyrec.costmodel", "spyrec.plan")
# Modules directly under spyrec/passes that are the pass machinery, not passes.
PASS_MACHINERY = ("spyrec.passes.registry", "spyrec.passes.pipeline")
PLANNING = ("spyrec.passes", "spyrec.plan")
NOT_THE_SIMULATOR = ("spyrec.compiler", "spyrec.codegen", "spyrec.frontend", "spyrec.ir")

# Today's violations, one "importer -> imported" per line. Fix one, then delete its line.
KNOWN_LAYERS: set[str] = set()
KNOWN_PASS_TO_PASS: set[str] = set()
KNOWN_PLANNING_TO_SIM_OR_CODEGEN: set[str] = set()
KNOWN_COMPILER_TO_SIM: set[str] = set()
KNOWN_PASS_FROM_OUTSIDE: set[str] = set()


def _layer_broken(importer: str, imported: str) -> bool:
    return any(within(importer, package) and
               not any(within(imported, p) for p in (package, *below))
               for package, below in LAYERS.items())


def pass_of(module: str) -> str | None:
    """The pass `module` belongs to: the module or subpackage directly under spyrec/passes
    that holds it (None for the pass machinery and for modules outside spyrec/passes)."""
    parts = module.split(".")
    if len(parts) < 3 or parts[:2] != ["spyrec", "passes"]:
        return None
    top = ".".join(parts[:3])
    return None if top in PASS_MACHINERY else top


def _pass_to_pass(importer: str, imported: str) -> bool:
    source, target = pass_of(importer), pass_of(imported)
    return source is not None and target is not None and source != target


def _pass_from_outside(importer: str, imported: str) -> bool:
    return not within(importer, "spyrec.passes") and pass_of(imported) is not None


def _planning_to_sim_or_codegen(importer: str, imported: str) -> bool:
    return any(within(importer, p) for p in PLANNING) and \
        any(within(imported, p) for p in ("spyrec.sim", "spyrec.codegen"))


def _compiler_to_sim(importer: str, imported: str) -> bool:
    """passes and plan are held by the stricter rule above (one list per violation)."""
    return any(within(importer, p) for p in NOT_THE_SIMULATOR) and within(imported, "spyrec.sim")


@dataclass(frozen=True)
class Rule:
    text: str
    broken_by: Callable[[str, str], bool]
    known: set[str]


RULES = {
    "layers": Rule("each layer imports only the layers below it (LAYERS)",
                   _layer_broken, KNOWN_LAYERS),
    "pass_to_pass": Rule("no pass imports another pass (shared knowledge goes to spyrec.plan)",
                         _pass_to_pass, KNOWN_PASS_TO_PASS),
    "pass_from_outside": Rule(
        "outside spyrec.passes only the registry and the pipeline are imported",
        _pass_from_outside, KNOWN_PASS_FROM_OUTSIDE),
    "planning_to_sim_or_codegen": Rule(
        "nothing in spyrec.passes or spyrec.plan imports spyrec.sim or spyrec.codegen",
        _planning_to_sim_or_codegen, KNOWN_PLANNING_TO_SIM_OR_CODEGEN),
    "compiler_to_sim": Rule(
        "spyrec.compiler, spyrec.codegen, spyrec.frontend and spyrec.ir import nothing of "
        "spyrec.sim", _compiler_to_sim, KNOWN_COMPILER_TO_SIM),
}


def violations(graph: ImportGraph, rule: Rule) -> dict[str, list[int]]:
    """"importer -> imported" -> the lines of `importer` that break `rule`."""
    found: dict[str, list[int]] = {}
    for imp in graph.imports:
        if rule.broken_by(imp.importer, imp.imported):
            found.setdefault(str(imp), []).append(imp.line)
    return found


@pytest.mark.parametrize("name", sorted(RULES))
def test_import_rule(name):
    rule = RULES[name]
    found = violations(spyrec_graph(), rule)
    new = [f"  {edge} (line {', '.join(map(str, sorted(found[edge])))})"
           for edge in sorted(set(found) - rule.known)]
    gone = [f"  {edge}" for edge in sorted(rule.known - set(found))]
    assert not new, f"rule broken: {rule.text}\n" + "\n".join(new)
    assert not gone, f"no longer broken ({rule.text}): delete it from the list " \
                     f"KNOWN_{name.upper()}\n" + "\n".join(gone)


def test_every_layer_package_exists_or_is_planned():
    modules = spyrec_graph().modules
    missing = [p for p in LAYERS if p not in modules and p not in PLANNED]
    assert not missing, f"LAYERS names packages spyrec does not have: {missing}"


@pytest.mark.parametrize(("importer", "imported", "rule"), [
    ("spyrec.layout.dtypes", "spyrec.passes.stick_layout", "layers"),
    ("spyrec.costmodel", "spyrec.sim.cost", "layers"),
    ("spyrec.plan.split", "spyrec.codegen.sdsc_dims", "layers"),
    ("spyrec.passes.work_division", "spyrec.passes.stage_inputs", "pass_to_pass"),
    ("spyrec.passes.stick_layout.search", "spyrec.passes.coarse_tiling.tiles", "pass_to_pass"),
    ("spyrec.passes.coarse_tiling.auto", "spyrec.sim.cost", "planning_to_sim_or_codegen"),
    ("spyrec.compile_plan", "spyrec.passes.coarse_tiling", "pass_from_outside"),
    ("spyrec.symbol_proof", "spyrec.passes.symbolic_lengths", "pass_from_outside"),
    ("spyrec.plan.sdsc", "spyrec.codegen.superdsc", "planning_to_sim_or_codegen"),
    ("spyrec.compiler", "spyrec.sim.runner", "compiler_to_sim"),
])
def test_a_rule_sees_what_it_forbids(importer, imported, rule):
    assert RULES[rule].broken_by(importer, imported)


@pytest.mark.parametrize(("importer", "imported"), [
    ("spyrec.layout.dtypes", "spyrec.bf16"),
    ("spyrec.passes.work_division", "spyrec.passes.registry"),
    ("spyrec.passes.coarse_tiling", "spyrec.passes.coarse_tiling.tiles"),
    ("spyrec.passes.stick_layout.search", "spyrec.passes.stick_layout.cost"),
    ("spyrec.passes.work_division", "spyrec.plan.split"),
    ("spyrec.plan.split", "spyrec.costmodel"),
    ("spyrec.sim.runner", "spyrec.sim.cost"),
    ("spyrec.compiler", "spyrec.passes.pipeline"),
    ("spyrec.compiler", "spyrec.passes.registry"),
    ("spyrec.passes.flash_attention.search", "spyrec.plan.tiling.subgraphs"),
    ("spyrec.symbol_proof", "spyrec.plan.tiling.symbolic"),
])
def test_no_rule_forbids_what_is_allowed(importer, imported):
    assert not [n for n, r in RULES.items() if r.broken_by(importer, imported)]


# --- no import cycle inside a package ---------------------------------------------------------

# package -> its cycles today, each the sorted module names of one strongly connected component
# (modules named relative to the package). Fix a cycle, then delete its line.
KNOWN_CYCLES: dict[str, set[tuple[str, ...]]] = {
    "spyrec.indexing": {("expr", "printer")},
}


def packages() -> list[str]:
    """spyrec itself (its top-level modules) and every package below it."""
    graph = spyrec_graph()
    return sorted(m for m in graph.modules if graph.is_package(m))


def package_cycles(package: str) -> set[tuple[str, ...]]:
    """The cycles among `package`'s own modules (subpackages' modules included), named
    relative to the package."""
    edges = spyrec_graph().edges
    inside = {m for m in edges if within(m, package)}
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
    assert not new, f"rule broken: no import cycle inside {package}; cycles (modules " \
                    f"relative to the package, break them): {new}"
    assert not gone, f"these known cycles of {package} are gone or changed: delete them " \
                     f"from KNOWN_CYCLES (and add what they became, if still a cycle): {gone}"


@pytest.mark.parametrize("package", ["spyrec.frontend", "spyrec.plan"])
def test_package_free_of_cycles_stays_so(package):
    """These packages have no cycle; one must not come back through the known list."""
    assert package not in KNOWN_CYCLES


def test_cycles_are_the_strongly_connected_components():
    assert cycles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


# --- the graph reads imports as Python runs them ----------------------------------------------

def _loaded_by_python(root, modules: list[str]) -> dict[str, list[str]]:
    """module -> the modules of `root`'s package a fresh interpreter has loaded after
    importing it (one interpreter per module, so nothing is loaded before)."""
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); __import__(sys.argv[2]); "
            "p = sys.argv[3]; "
            "print(json.dumps(sorted(m for m in sys.modules if m == p or "
            "m.startswith(p + '.'))))")
    out = {}
    for module in modules:
        done = subprocess.run([sys.executable, "-c", code, str(root.parent), module, root.name],
                              capture_output=True, text=True, check=True)
        out[module] = json.loads(done.stdout)
    return out


def _misread(read: set[str], loaded: list[str]) -> dict[str, list[str]]:
    """What the graph says is loaded and Python did not load, and the other way round."""
    out = {"not loaded by Python": sorted(read - set(loaded)),
           "missed by the graph": sorted(set(loaded) - read)}
    return {k: v for k, v in out.items() if v}


TOY_PACKAGE = {  # every form of import statement, each reaching a module no other form does
    "__init__.py": "from toy import top\n",
    "top.py": "import toy.sub.deep as deep\nfrom toy.sub import plain\nfrom . import sibling\n",
    "sibling.py": "from .sub.named import NAME\n",
    "sub/__init__.py": "from .. import parent_relative\n",
    "sub/deep.py": "from toy.lazy import g\n",
    "sub/plain.py": "import toy.absolute\n",
    "sub/named.py": "NAME = 1\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                    "    from toy import annotations_only\nelse:\n    from toy import runtime\n",
    "parent_relative.py": "",
    "lazy.py": "def g():\n    from toy import in_function\n",
    "absolute.py": "", "annotations_only.py": "", "runtime.py": "", "in_function.py": "",
}


def test_the_graph_loads_what_python_loads_for_every_import_form(tmp_path):
    root = tmp_path / "toy"
    for name, text in TOY_PACKAGE.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = ImportGraph(root)
    actual = _loaded_by_python(root, ["toy"])["toy"]
    assert _misread(graph.loaded_by("toy"), actual) == {}
    assert "toy.in_function" in graph.edges["toy.lazy"]  # counted, though not loaded
    assert "toy.annotations_only" not in actual and "toy.annotations_only" not in {
        imp.imported for imp in graph.imports}


def test_the_graph_loads_what_python_loads_for_spyrec_modules():
    """A few real modules: a leaf layer, the front end's table, the compiler's entry point."""
    graph = spyrec_graph()
    modules = ["spyrec.layout", "spyrec.frontend.lowerings", "spyrec.compiler"]
    actual = _loaded_by_python(graph.root, modules)
    misread = {m: _misread(graph.loaded_by(m), actual[m]) for m in modules}
    assert misread == {m: {} for m in modules}, "the import graph disagrees with Python " \
        "(a form of import tests/import_graph.py does not read, or a module imported by name " \
        f"through importlib at module level): {misread}"
    assert set(actual["spyrec.layout"]) <= {"spyrec", "spyrec.device", "spyrec.layout",
                                            "spyrec.layout.device_layout",
                                            "spyrec.layout.dtypes", "spyrec.bf16"}
