"""Tiny Llama / Granite (hidden 128, 2 layers, fp16) with every decoder linear 8-bit
(`tests/quantized.py`): prefill and the static-cache decode step equal eager, every linear
of the layers a matmul reading its 8-bit weight (issue 60)."""

from __future__ import annotations

import pytest

from tests.differential.harness import run_and_compare
from tests.models import hf
from tests.programs import load_json
from tests.quantized import quantize

pytestmark = pytest.mark.filterwarnings("ignore:While compiling, we found certain side effects")
FORMS = ("fp8_tensor", "fp8_channel", "fp8_block", "int8_group64")
LINEARS = 7 * hf.LAYERS           # q, k, v, o, gate, up, down per layer


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", ["llama", "granite"])
def test_quantized_prefill_equals_eager(tmp_path, family, form):
    module, inputs = hf.prefill(family, hf.torch.float16)
    quantize(module.model, form)
    out = run_and_compare(tmp_path, module, inputs, frontend="fast")
    assert len(load_json(out / "report.json")["dequant_matmul"]) == LINEARS


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("family", ["granite"])
def test_quantized_decode_step_equals_eager(tmp_path, family, form):
    module, inputs = hf.decode(family, hf.torch.float16)
    quantize(module.model, form)
    out = run_and_compare(tmp_path, module, inputs, hf.export_kwargs("granite_decode"),
                          frontend="fast")
    assert len(load_json(out / "report.json")["dequant_matmul"]) == LINEARS
