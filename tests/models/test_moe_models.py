"""Tiny MoE models (tests/models/moe_models.py) through the fast front end, equal to eager:
top-k routing, softmax over the top k and the gathered `batched_mm` experts, fp32 and fp16.
The default `grouped_mm` experts (the custom op transformers::grouped_mm_fallback) are refused
with exit 3 and the advice to export with experts_implementation='batched_mm'."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from spyrec.errors import UnsupportedProgram  # noqa: E402
from tests.differential.harness import run_and_compare  # noqa: E402
from tests.models import moe_models  # noqa: E402
from tests.programs import compile_pt2, export, load_json  # noqa: E402

BATCHED = [f"{f}_batched_mm" for f in ("mixtral", "qwen2_moe", "qwen3_moe", "granitemoe")]
FP16 = ["mixtral_batched_mm_fp16", "qwen3_moe_batched_mm_fp16"]


@pytest.mark.parametrize("name", BATCHED + FP16)
def test_moe_model_equals_eager_through_the_fast_front_end(tmp_path, name):
    module, inputs = moe_models.FAMILIES[name]()
    out = run_and_compare(tmp_path, module, inputs, frontend="fast")
    assert load_json(out / "report.json")["frontend"]["used"] == "fast"


def test_default_grouped_experts_are_refused_with_the_advice_that_works(tmp_path):
    module, inputs = moe_models.FAMILIES["mixtral_grouped_mm"]()
    pt2 = export(tmp_path, module, inputs)
    with pytest.raises(UnsupportedProgram, match=r"grouped_mm_fallback.*moe\.py:\d+.*"
                                                 r"experts_implementation='batched_mm'"):
        compile_pt2(pt2, tmp_path / "out", frontend="fast")
