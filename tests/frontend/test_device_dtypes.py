"""float64 (a dtype the device cannot store): folded when it depends only on shapes and weights
and is cast before it reaches the device, refused with exit 3 otherwise — naming each tensor,
its op and source line and what to do — and never an internal error (exit 70)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from spyrec.errors import UnsupportedProgram
from tests.differential.harness import run_and_compare
from tests.programs import Lambda, compile_pt2, export

X = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))


def refusal(tmp_path, fn, *inputs) -> str:
    pt2 = export(tmp_path, Lambda(fn), inputs)
    with pytest.raises(UnsupportedProgram) as e:
        compile_pt2(pt2, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    return str(e.value)


@pytest.mark.parametrize("make", [
    lambda x: torch.zeros_like(x, dtype=torch.float64),
    lambda x: torch.ones_like(x, dtype=torch.float64),
    lambda x: torch.full_like(x, 4.412055988104102, dtype=torch.float64),
    lambda x: x.new_zeros((3, 5), dtype=torch.float64),
], ids=["zeros_like", "ones_like", "full_like", "new_zeros"])
def test_a_float64_output_is_refused_naming_the_op_and_its_line(tmp_path, make):
    """The OpInfo samples of *_like with dtype=float64: folded, but still a program output."""
    message = refusal(tmp_path, lambda m, x: (make(x), x + 1), X)
    assert "float64" in message and re.search(r"\.py:\d+ in forward", message)  # the line
    assert "cast it to float32" in message


def test_a_runtime_float64_intermediate_is_refused_listing_every_one(tmp_path):
    message = refusal(tmp_path, lambda m, x: (x.double() * 2).float(), X)
    assert "aten.to.dtype" in message and "aten.mul.Tensor" in message
    assert message.count("is float64") == 2


def test_a_float64_input_is_refused_by_name(tmp_path):
    message = refusal(tmp_path, lambda m, x, y: x + y.float(), X, X.double())
    assert "input args_1 is float64 [4, 8] (a program input, read at " in message  # Lambda(*args)


def test_a_float64_constant_cast_before_use_is_folded(tmp_path):
    """Shape-only float64 arithmetic, cast to float32 before it meets data: computed at compile
    time as eager computes it (in float64, then rounded), nothing float64 on the device."""
    def fn(m, x):
        t = torch.arange(8, dtype=torch.float64) * 0.1 + torch.full_like(x, 1 / 3,
                                                                          dtype=torch.float64)
        return x + t.float()
    run_and_compare(tmp_path, Lambda(fn), (X,))


def test_an_unused_float64_buffer_is_dropped(tmp_path):
    module = Lambda(lambda m, x: x * 2)
    module.register_buffer("unused", torch.zeros(3, dtype=torch.float64))
    run_and_compare(tmp_path, module, (X,))


def test_the_cli_exits_3_not_70(tmp_path):
    pt2 = export(tmp_path, Lambda(lambda m, x: torch.zeros_like(x, dtype=torch.float64)), (X,))
    done = subprocess.run([sys.executable, "-m", "spyrec", "compile", str(pt2), "-o",
                           str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert "zeros_like" in done.stderr and "Traceback" not in done.stderr
