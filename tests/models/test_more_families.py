"""GPT-J, BLOOM, RoBERTa, DeBERTa-v2, T5's encoder, Falcon, MPT, Cohere and ModernBERT, fp32 and
fp16 (tests/models/more_families.py): each compiles on the fast front end — no torch fallback,
which costs 5-10 s of torch import and decomposition per compile — simulates and equals eager.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from tests.differential.harness import run_and_compare  # noqa: E402
from tests.models.more_families import FAMILIES  # noqa: E402
from tests.programs import load_json  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:While compiling, we found certain side effects")


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_compiles_fast_and_equals_eager(tmp_path, name):
    module, inputs = FAMILIES[name]()
    out = run_and_compare(tmp_path, module, inputs, frontend="fast")
    assert load_json(out / "report.json")["frontend"]["used"] == "fast"
