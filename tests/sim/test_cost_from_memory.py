"""`spyrec compile` estimates the cost from the files it built in memory (issue 11 §2): no
re-read, no schema pass, no xDSL for its own flat bundle. The numbers must be those of the
written directory read back the untrusted way (schema, verify, xDSL)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from samples.models import SAMPLES
from spyrec.sim.loader import _flat_bundle, load_directory, load_files
from spyrec.sim.runner import cost_for_directory, cost_for_files
from tests.programs import compile_samples
from tests.sim.test_loops import tiled_add


def _texts(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_samples(tmp_path_factory.mktemp("cost"), SAMPLES)


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_compile_cost_is_the_cost_of_the_written_directory(compiled, sample):
    out = compiled[sample]
    written = json.loads((out / "report.json").read_text())["cost"]
    from_disk = json.loads(json.dumps(cost_for_directory(out)))
    assert written["totals"]["time_us"] > 0 and written["ops"]
    assert written == from_disk


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_in_memory_program_equals_the_loaded_directory(compiled, sample):
    out = compiled[sample]
    assert load_files(_texts(out), out) == load_directory(out)


def test_a_bundle_with_loops_goes_through_xdsl_and_counts_every_execution(out):
    path = tiled_add(out)
    texts = _texts(path)
    assert _flat_bundle(texts["bundle.mlir"].decode(), "bundle.mlir") is None
    cost = cost_for_files(texts, path)
    assert cost["ops"][0]["executions"] == 4
    assert cost == cost_for_directory(path)


def test_only_the_exact_flat_form_takes_the_fast_path():
    good = ('module {\n  func.func @sdsc_bundle() {\n'
            '    sdscbundle.sdsc_execute () {sdsc_filename = "sdsc_0.json"}\n'
            '    func.return\n  }\n}\n')
    (ex,) = _flat_bundle(good, "b.mlir")
    assert (ex.file, ex.operands, ex.location) == ("sdsc_0.json", (), "b.mlir:3:5")
    for bad in (good.replace("    sdscbundle", "    // sdscbundle"),
                good.replace("() {sdsc", "(%a) {sdsc"),
                good.replace("@sdsc_bundle", "@other"),
                good.replace("func.return\n", "func.return\n    func.return\n")):
        assert _flat_bundle(bad, "b.mlir") is None, bad


def test_the_trusted_load_imports_neither_jsonschema_nor_xdsl(compiled):
    out = compiled["mlp_fp32"]
    code = ("import sys; from pathlib import Path; from spyrec.sim.runner import cost_for_files\n"
            f"out = Path({str(out)!r})\n"
            "cost_for_files({p.name: p.read_bytes() for p in out.iterdir()}, out)\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('jsonschema', 'xdsl', 'torch'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    assert loaded == []
