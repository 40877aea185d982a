"""8-bit weights stay 8-bit on the device (issue 60): every form of `tests/quantized.py`
compiles to one matmul per linear that reads the 8-bit weight and its scale (no conversion op,
no 16-bit copy of the weight in device memory), stores the weight in weights.bin in its 8-bit
device format (128 per stick), and simulates to eager's numbers."""

from __future__ import annotations

import re

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from spyrec.errors import UnsupportedProgram
from tests.differential.harness import run_and_compare
from tests.programs import compile_pt2, export, load_json
from tests.quantized import FORMS, Linears, QuantLinear

FORMATS = {"fp8": "fp8_e4m3", "int8": "int8"}


FUSED = [f for f in FORMS if f != "int8_group32"]


@pytest.mark.parametrize("form", FUSED)
@pytest.mark.parametrize("rows", [1, 8])
def test_quantized_linears_equal_eager_with_the_weight_8bit_on_the_device(tmp_path, form, rows):
    module = Linears(form, seed=rows)
    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(rows)).half()
    out = run_and_compare(tmp_path, module, (x,))
    report = load_json(out / "report.json")
    fused = report["dequant_matmul"]
    assert len(fused) == 2 and {r["format"] for r in fused} == {FORMATS[form.split("_")[0]]}
    assert [r["bytes"] for r in fused] == [256 * 256] * 2
    ops = load_json(out / "opspecs.json")
    manifest = load_json(out / "manifest.json")
    tensors = {t["source"]: t for t in manifest["tensors"]}
    for fqn in ("up.qweight", "down.qweight"):
        t = tensors[fqn]
        assert t["device_dtype"] == FORMATS[form.split("_")[0]]
        assert t["device_bytes"] == 256 * 256        # one byte per element, no padding
    # nothing 16-bit of the weight's size is written: no conversion op survives
    assert "identity" not in str(ops), "a conversion op survived"


def test_an_fp8_weight_read_without_a_scale_is_still_converted_on_chip(tmp_path):
    class Bare(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(3)
            self.register_buffer("w", torch.randn(128, 256, generator=g).to(torch.float8_e5m2))

        def forward(self, x):
            return x @ self.w.to(torch.float16).t()

    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(4)).half()
    out = run_and_compare(tmp_path, Bare(), (x,))
    assert load_json(out / "report.json")["dequant_matmul"][0]["scale"] is None


@pytest.mark.parametrize("form, what", [
    ("int8_group32", r"changes every 32 inputs \(K\), inside a stick of 64"),
])
def test_a_scale_that_splits_a_stick_is_refused_naming_both_tensors(tmp_path, form, what):
    """A group of 32 beside fp16 activations changes scale inside a 64-lane stick of x: no
    SuperDSC coordinate reads it, so the program is refused (exit 3), never an internal
    error and never a 16-bit copy of the weight."""
    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(9)).half()
    pt2 = export(tmp_path, Linears(form), (x,))
    with pytest.raises(UnsupportedProgram) as e:
        compile_pt2(pt2, tmp_path / "out")
    assert re.search(rf"linear \(quantized\.py:\d+ in forward \[up\]\): the scale up\.scale "
                     rf"of the 8-bit weight up\.qweight \(int8\) {what}", str(e.value)), \
        str(e.value)


def test_an_e5m2_weight_with_64_row_blocks_is_refused(tmp_path):
    class Blocks(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(5)
            self.register_buffer("w", torch.randn(256, 256, generator=g).to(torch.float8_e5m2))
            self.register_buffer("s", torch.rand(4, 2, generator=g).half())

        def forward(self, x):
            w = self.w.to(torch.float16).view(4, 64, 2, 128) * self.s[:, None, :, None]
            return x @ w.view(256, 256).t()

    x = torch.randn(2, 256, generator=torch.Generator().manual_seed(9)).half()
    with pytest.raises(UnsupportedProgram) as e:
        compile_pt2(export(tmp_path, Blocks(), (x,)), tmp_path / "out")
    assert re.search(r"the scale s of the 8-bit weight w \(float8_e5m2\) changes every 64 "
                     r"outputs \(N\), inside a stick of 128", str(e.value)), str(e.value)


class One(torch.nn.Module):
    def __init__(self, form: str, n: int, k: int, seed: int):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        lin = torch.nn.Linear(k, n, bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(n, k, generator=g) / k ** 0.5)
        self.lin = QuantLinear(lin, form, torch.float16)

    def forward(self, x):
        return self.lin(x)


@pytest.mark.parametrize("n, k", [(128, 128), (256, 128), (128, 256), (64, 128)])
def test_block_scales_with_a_single_block_along_a_dim_equal_eager(tmp_path, n, k):
    """A [1, 1] or [2, 1] block scale: its view has dims of one element, whose strides equal
    the next dim's (the composed access once lost the weight's N there: wrong numbers)."""
    x = torch.randn(4, k, generator=torch.Generator().manual_seed(n + k)).half()
    out = run_and_compare(tmp_path, One("fp8_block", n, k, n * k), (x,))
    assert len(load_json(out / "report.json")["dequant_matmul"]) == 1


@settings(deadline=None, max_examples=12, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(form=st.sampled_from(FUSED), n=st.sampled_from([64, 128, 256, 384]),
       k=st.sampled_from([128, 256, 384]), rows=st.integers(1, 9), seed=st.integers(0, 999))
def test_random_quantized_linears_equal_eager(tmp_path_factory, form, n, k, rows, seed):
    if form == "fp8_block" and (n % min(128, n) or k % 128):
        return
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed)).half()
    out = run_and_compare(tmp_path_factory.mktemp("q"), One(form, n, k, seed), (x,))
    assert len(load_json(out / "report.json")["dequant_matmul"]) == 1
