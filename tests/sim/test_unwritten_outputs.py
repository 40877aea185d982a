"""An output no executed op writes is an error, not NaN passed off as a result."""

import re
import shutil

import numpy as np
import pytest
import torch

from spyrec.errors import InputFileError
from spyrec.sim import simulate
from tests.programs import Lambda, compile_pt2, export
from tests.sealing import seal


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("unwritten")
    pt2 = export(tmp, Lambda(lambda m, x: (x * 2).exp()), (torch.randn(4, 64),))
    return compile_pt2(pt2, tmp / "out", sets=["fusion.enabled=false"])   # one execute per op


def test_a_removed_execute_leaves_the_output_unwritten(out, tmp_path):
    tampered = tmp_path / "tampered"
    shutil.copytree(out, tampered)
    bundle = tampered / "bundle.mlir"
    lines = bundle.read_text().splitlines(keepends=True)
    executes = [i for i, line in enumerate(lines) if "sdsc_execute" in line]
    assert len(executes) == 2
    del lines[executes[-1]]  # the op that writes the output
    bundle.write_text("".join(lines))
    seal(tampered)
    with pytest.raises(InputFileError, match=r"output '\w+' is written by no executed op"):
        simulate(tampered, {"args_0": np.ones((4, 64), np.float32)})


def test_the_untampered_program_runs(out):
    result = simulate(out, {"args_0": np.ones((4, 64), np.float32)})
    assert np.allclose(result.outputs[0], np.exp(2.0))
    assert re.match(r"output_0", result.names[0])
