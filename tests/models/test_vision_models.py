"""Tiny vision and audio models (tests/models/vision_models.py) through the fast front end,
equal to eager: a ResNet-style CNN (conv-bn-relu folded, max pool, residual, adaptive average
pool, linear), ViT (patch-embedding conv), Whisper's encoder (conv1d front end) and a
ConvNeXt-style block (depthwise 7x7), fp32 and fp16."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from tests.differential.harness import run_and_compare  # noqa: E402
from tests.models import vision_models  # noqa: E402
from tests.programs import load_json  # noqa: E402


@pytest.mark.parametrize("name", sorted(vision_models.FAMILIES))
def test_vision_model_equals_eager_through_the_fast_front_end(tmp_path, name):
    module, inputs = vision_models.FAMILIES[name]()
    out = run_and_compare(tmp_path, module, inputs, frontend="fast")
    assert load_json(out / "report.json")["frontend"]["used"] == "fast"
