"""samples/decoder_step.py: embedding, rotary tables gathered at a runtime position, KV caches
written with index_copy_, attention over the cache — compiled by the fast front end,
simulated, equal to eager, the updated caches returned under their FQNs."""

import pytest

from samples.decoder_step import make
from tests.differential.harness import run_and_compare
from tests.programs import load_json


@pytest.mark.parametrize("pos", [0, 5, 15])
def test_decoder_step_equals_eager_and_returns_the_caches(tmp_path, pos):
    module, inputs = make(pos=pos)
    out = run_and_compare(tmp_path, module, inputs, frontend="fast")
    assert set(load_json(out / "manifest.json")["mutated_buffers"]) == {"k_cache", "v_cache"}
    report = load_json(out / "report.json")["gather_coordinates"]
    assert (report["gathers"], report["scatters"], report["index_checks"]) == (3, 2, 3)


def test_decoder_step_cache_row_is_the_new_key(tmp_path):
    """The write really lands at `pos` and nowhere else (eager's cache, row by row)."""
    module, inputs = make(pos=3)
    before = module.k_cache.clone()
    run_and_compare(tmp_path, module, inputs, frontend="fast")
    changed = (module.k_cache != before).any(-1).any(1)[0]
    assert changed.nonzero().flatten().tolist() == [3]
