"""Shapes at the edge of what PyTorch allows (issue 14 §4): empty tensors, 0-d tensors, norms
over one element, int8 results. Each compiles, simulates and equals eager, exact shape included."""

import json

import numpy as np
import pytest
import torch

from tests.differential.harness import run_and_compare
from tests.programs import Lambda


def r(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


PROGRAMS = {
    "empty_broadcast_add": (lambda m, x, y: x + y, (r(0, 1, 3), r(0, 10, 3, seed=1))),
    "empty_unary": (lambda m, x: torch.exp(x), (r(1, 0, 3),)),
    "empty_mm": (lambda m, a, b: a @ b, (r(0, 5), r(5, 10, seed=1))),
    "mm_over_empty_k_is_zeros": (lambda m, a, b: a @ b + 1, (r(5, 0), r(0, 10))),
    "sum_over_empty_dim_is_zeros": (lambda m, x: x.sum(1), (r(4, 0),)),
    "mean_over_empty_dim_is_nan": (lambda m, x: x.mean(0), (r(0, 3),)),
    "empty_softmax": (lambda m, x: torch.softmax(x, -1), (r(5, 0, 0),)),
    "cat_with_empty": (lambda m, x, y: torch.cat([x, y], 0), (r(0, 5), r(5, 5, seed=1))),
    "scalar_cast_stays_0d": (lambda m, x: x.half(), (torch.tensor(1.5),)),
    "scalar_times_two": (lambda m, x: x * 2, (torch.tensor(-0.75),)),
    "scalar_reduction": (lambda m, x: x.sum(0), (torch.tensor(3.25),)),
    "scalar_squeeze": (lambda m, x: x.squeeze(0) + 1, (torch.tensor(3.25),)),
    "layer_norm_over_one": (lambda m, x: torch.nn.functional.layer_norm(x, (1,)), (r(1),)),
    "rms_norm_over_one": (lambda m, x: torch.nn.functional.rms_norm(x, (1,)), (r(3, 1),)),
    "native_layer_norm": (lambda m, x: torch.native_layer_norm(x, (8,), None, None, 1e-5),
                          (r(3, 8, dtype=torch.float16),)),
    "int8_result": (lambda m, x: (x * 10).to(torch.int8), (r(4, 130),)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_edge_shape_program(tmp_path, name):
    fn, inputs = PROGRAMS[name]
    run_and_compare(tmp_path, Lambda(fn), inputs)


def test_an_empty_program_runs_no_device_op(tmp_path):
    out = run_and_compare(tmp_path, Lambda(lambda m, x: torch.exp(x) * 2), (r(3, 0),))
    assert json.loads((out / "manifest.json").read_text())["kernels"][0]["ops"] == []


def test_int8_is_stored_128_per_stick(tmp_path):
    out = run_and_compare(tmp_path, Lambda(lambda m, x: x.to(torch.int8)), (r(2, 200) * 5,))
    tensors = json.loads((out / "manifest.json").read_text())["tensors"]
    (result,) = [t for t in tensors if t["host_dtype"] == "int8"]
    assert result["device_dtype"] == "int8"
    assert result["device_size"][-1] == 128
    assert result["device_bytes"] == 128 * np.prod(result["device_size"][:-1])


def test_check_keeps_0d_inputs_and_outputs_0d(tmp_path):
    """`--check` feeds eager the npz arrays: a 0-d input must stay 0-d there too."""
    from spyrec.sim.check import check_outputs
    from spyrec.sim.directory import load_output_dir
    from spyrec.sim.runner import simulate
    from tests.programs import compile_pt2, export

    module = Lambda(lambda m, x, y: (x * 2, x.to(torch.bfloat16), y + x))
    x, y = torch.tensor(1.25), r(0, 4)
    out = compile_pt2(export(tmp_path, module, (x, y)), tmp_path / "out")
    inputs = {"args_0": x.numpy(), "args_1": y.numpy()}
    result = simulate(out, inputs)
    assert [a.shape for a in result.outputs] == [(), (), (0, 4)]
    checks = check_outputs(out, load_output_dir(out).manifest, inputs, result.outputs)
    assert [(c.ok, c.problem) for c in checks] == [(True, None)] * 3
