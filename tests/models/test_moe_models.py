"""Tiny MoE models (tests/models/moe_models.py) through the fast front end, equal to eager:
top-k routing, softmax over the top k and the gathered `batched_mm` experts, fp32 and fp16, and
transformers' default experts (the custom op transformers::grouped_mm_fallback after a sort,
histc and cumsum of the routing), which `spyrec run --check` can also run in eager."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

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


GROUPED = [f"{f}_grouped_mm" for f in ("mixtral", "qwen2_moe", "qwen3_moe", "granitemoe")]


@pytest.mark.parametrize("name", GROUPED + ["qwen3_moe_grouped_mm_fp16"])
def test_default_grouped_experts_equal_eager(tmp_path, name):
    module, inputs = moe_models.FAMILIES[name]()
    out = run_and_compare(tmp_path, module, inputs, frontend="fast")
    assert load_json(out / "report.json")["frontend"]["used"] == "fast"


def test_check_runs_a_program_with_the_grouped_mm_custom_op(tmp_path):
    """torch.export.load needs transformers::grouped_mm_fallback registered: --check imports
    the module that registers it (a fixed table, pt2archive.OP_LIBRARIES) and passes."""
    import numpy as np

    from spyrec.api import run

    module, (ids,) = moe_models.FAMILIES["mixtral_grouped_mm"]()
    out = compile_pt2(export(tmp_path, module, (ids,)), tmp_path / "out", frontend="fast")
    run(out, {"input_ids": np.asarray(ids)}, check=True)
