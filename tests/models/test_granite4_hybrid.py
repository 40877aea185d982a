"""Granite 4 hybrid (GraniteMoeHybrid: a Mamba-2 layer, an attention layer, MoE with
transformers' default experts) end to end on the fast front end: prefill and one static-cache
decode step, fp32 and bf16, equal to eager by `--check`'s rule (spyrec/sim/check.py), the
decode step's conv, SSM and K/V states included (they come back under their FQNs)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from spyrec.sim.check import check_outputs  # noqa: E402
from spyrec.sim.directory import load_output_dir  # noqa: E402
from spyrec.sim.runner import simulate  # noqa: E402
from tests.differential.harness import host_array  # noqa: E402
from tests.models.new_families import FAMILIES, export_kwargs  # noqa: E402
from tests.programs import compile_pt2, export, load_json  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:While compiling, we found certain side effects")

NAMES = ("granite4_hybrid", "granite4_hybrid_bf16", "granite4_hybrid_decode",
         "granite4_hybrid_decode_bf16")


@pytest.mark.parametrize("name", NAMES)
def test_granite4_hybrid_equals_eager_ref_issue61(tmp_path, name):
    module, inputs = FAMILIES[name]()
    pt2 = export(tmp_path, module, inputs, **export_kwargs(name))
    out = compile_pt2(pt2, tmp_path / "out", frontend="fast")
    assert load_json(out / "report.json")["frontend"]["used"] == "fast"
    manifest = load_output_dir(out).manifest
    arrays = dict(zip(manifest.inputs, [host_array(t) for t in inputs]))
    checks = check_outputs(out, manifest, arrays, simulate(out, arrays).outputs)
    bad = [c for c in checks if not c.ok]
    assert not bad, bad
    states = {c.key for c in checks} - {c.key for c in checks[:1]}
    if "decode" in name:  # conv and SSM states of layer 0, K/V slots of layer 1
        assert {"conv_states_0_0", "recurrent_states_0_0", "key_cache_1",
                "value_cache_1"} <= states, states
