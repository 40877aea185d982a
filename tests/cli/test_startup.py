"""What each command imports, checked in a fresh process (issue 11 §3, §4).

Wall time on a shared machine is noise; the modules a command loads are not. `--help` and
`--version` must load none of the heavy libraries (they answered in 0.6-1.6 s when they did),
`spyrec run` without `--check` must not load torch (seconds of start-up, the reason the
simulator was slower than eager), and `--check` still does (it runs eager).
"""

import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.programs import Lambda, compile_pt2, export

HEAVY = ("torch", "sympy", "xdsl", "jsonschema", "numpy", "yaml", "jinja2")
SIM_MODULES = ("spyrec.sim.runner", "spyrec.sim.loader", "spyrec.sim.executor",
               "spyrec.sim.kernels", "spyrec.sim.bundle", "spyrec.indexing")

PROBE = """
import sys
from spyrec.cli import main
code = 0
try:
    main({args!r})
except SystemExit as e:
    code = e.code
print("EXIT", code, file=sys.stderr)
print("MODULES", " ".join(sorted(sys.modules)), file=sys.stderr)
"""


def imported(*args: str) -> tuple[int, set[str]]:
    """(exit code, top-level and spyrec module names) after `spyrec ARGS` in a new process."""
    r = subprocess.run([sys.executable, "-c", PROBE.format(args=list(args))],
                       capture_output=True, text=True, timeout=600)
    lines = r.stderr.splitlines()
    code = int(next(line for line in lines if line.startswith("EXIT ")).split()[1])
    names = next(line for line in lines if line.startswith("MODULES ")).split()[1:]
    return code, {n for n in names if n.startswith("spyrec")} | {n.split(".")[0] for n in names}


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m in HEAVY or m.startswith(SIM_MODULES)}


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["run", "--help"],
                                  ["compile", "--help"]])
def test_help_and_version_import_nothing_heavy(args):
    code, modules = imported(*args)
    assert code == 0
    assert "click" in modules and "spyrec.cli" in modules    # the probe does see imports
    assert heavy(modules) == set()


def test_compile_rejects_a_bad_path_before_any_heavy_import(tmp_path):
    code, modules = imported("compile", str(tmp_path / "nope.pt2"), "-o", str(tmp_path / "o"))
    assert code == 2
    # the pipeline YAML is read and its passes registered to check the options, and pass
    # modules import numpy (spyrec.ir); the seconds are in torch, sympy and xDSL
    assert not {"torch", "sympy", "xdsl", "jsonschema", "jinja2"} & modules


@pytest.fixture(scope="module")
def gelu_matmul(tmp_path_factory):
    """A program that uses the two kernels that used to borrow torch: matmul and erf-gelu."""
    tmp = tmp_path_factory.mktemp("startup")
    module = Lambda(lambda m, x: torch.nn.functional.gelu(x @ m.w), w=torch.randn(64, 64))
    x = torch.randn(4, 32, 64)
    out = compile_pt2(export(tmp, module, (x,)), tmp / "out")
    np.savez(tmp / "x.npz", args_0=x.numpy())   # Lambda(*args): the input is args_0
    return out, tmp / "x.npz", module(x).detach().numpy()


def test_run_without_check_does_not_import_torch(gelu_matmul, tmp_path):
    out, npz, want = gelu_matmul
    code, modules = imported("run", str(out), "--inputs", str(npz), "-o",
                             str(tmp_path / "y.npz"), "-q")
    assert code == 0
    assert "spyrec.sim.runner" in modules and "numpy" in modules
    assert not {"torch", "sympy", "jsonschema"} & modules
    np.testing.assert_allclose(np.load(tmp_path / "y.npz")["output_0"], want,
                               rtol=1e-5, atol=1e-5)


def test_run_with_check_still_runs_eager(gelu_matmul, tmp_path):
    out, npz, _ = gelu_matmul
    code, modules = imported("run", str(out), "--inputs", str(npz), "-o",
                             str(tmp_path / "y.npz"), "-q", "--check")
    assert code == 0 and "torch" in modules
