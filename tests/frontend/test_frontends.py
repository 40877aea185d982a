"""Both front ends give byte-identical output directories; the fast one never imports torch.

The documented difference: when the stored graph has an op the lowering does not know, only
the torch front end can compile it (it decomposes that op), and `--frontend auto` falls back to
it with a note in report.json and one stderr line.
"""

import filecmp
import json
import subprocess
import sys

import pytest
import torch

from samples.models import SAMPLES
from spyrec.errors import UnsupportedProgram
from tests.differential.test_programs import PROGRAMS as TEST_PROGRAMS
from tests.frontend.archives import with_model_json
from tests.programs import Lambda, compile_pt2, export

VOLATILE = {"report.json", "report.txt"}  # wall times, and the front end used


def _programs():
    cases = {f"sample_{n}": f for n, f in SAMPLES.items()}
    for name, (fn, inputs, *params) in TEST_PROGRAMS.items():
        cases[name] = (lambda fn=fn, inputs=inputs, params=params:
                       (Lambda(fn, **(params[0] if params else {})), inputs))
    return cases


CASES = _programs()


@pytest.mark.parametrize("name", sorted(CASES))
def test_fast_and_torch_front_ends_write_identical_directories(tmp_path, name):
    module, inputs = CASES[name]()
    pt2 = export(tmp_path, module, inputs)
    fast = compile_pt2(pt2, tmp_path / "fast", frontend="fast")
    slow = compile_pt2(pt2, tmp_path / "torch", frontend="torch")
    names = sorted(p.name for p in fast.iterdir())
    assert names == sorted(p.name for p in slow.iterdir())
    _, mismatch, errors = filecmp.cmpfiles(fast, slow, names, shallow=False)
    assert set(mismatch) <= VOLATILE and not errors, mismatch
    report = json.loads((fast / "report.json").read_text())
    assert report["frontend"] == {"requested": "fast", "used": "fast", "fallback_reason": None}


def test_fast_compile_imports_no_torch(tmp_path):
    pt2 = export(tmp_path, *SAMPLES["mlp_fp16"]())
    code = ("import sys; from spyrec.cli import main\n"
            "try:\n"
            f"    main(['compile', {str(pt2)!r}, '-o', {str(tmp_path / 'out')!r}, '-q'])\n"
            "except SystemExit as e:\n"
            "    assert not e.code, e.code\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'sympy'}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_auto_falls_back_to_torch_for_an_op_it_does_not_lower_and_says_so(tmp_path):
    pt2 = export(tmp_path, Lambda(lambda m, x: torch.lerp(x, x * 2, 0.3)), (torch.randn(4, 8),))
    r = subprocess.run([sys.executable, "-m", "spyrec", "compile", str(pt2), "-o",
                        str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if "note" in line]
    assert notes == ["spyrec: note: using the torch front end: the stored graph uses "
                     "aten.lerp.Scalar, which spyrec does not lower directly (torch decomposes "
                     "them)"]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["frontend"]["used"] == "torch" and "aten.lerp.Scalar" in \
        report["frontend"]["fallback_reason"]
    with pytest.raises(UnsupportedProgram, match=r"aten.lerp.Scalar \(node lerp"):
        compile_pt2(pt2, tmp_path / "fast", frontend="fast")


def test_an_unknown_schema_version_is_named_with_what_to_do(tmp_path):
    pt2 = export(tmp_path, Lambda(lambda m, x: x + 1), (torch.randn(2, 3),))
    newer = with_model_json(pt2, tmp_path / "newer.pt2",
                            lambda model: model | {"schema_version": {"major": 99, "minor": 0}})
    with pytest.raises(UnsupportedProgram, match=r"graph schema version \{'major': 99, "
                                                 r"'minor': 0\} .*use --frontend torch"):
        compile_pt2(newer, tmp_path / "out", frontend="fast")
