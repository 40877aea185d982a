"""Two compile bugs that made valid programs fault in the simulator, found by hand and by a
sweep; each test here failed before the fix.

1. `--tiling auto` over a wrapped view (`wrapped_rows(x, 71, 3)` of an fp32 [4, 300]): each
   tile's coordinates are simplified over the tile's ranges (`c1 + 71`), which is the untiled
   access (`Mod(c1 + 71, 300)` with a floor in the row) only where nothing wraps inside a
   tile; trip 2 of 3 read past the end of x. coarse_tiling now proves every trip's tile exact
   (ir/verify.py `tiled_access_problem`, also run by --verify-each): auto skips such a
   candidate, a user's config is an exit-2 error naming the group, the op and the dim.
2. A roll written as a cat (`cat([x[..., k:], x[..., :k]], -1)`) with x also read plainly:
   stage_inputs copied x into LX and the shifted half read that copy from inside a stick
   (fp16 [3, 5, 100], k=40: 60 lanes over 2 sticks, the op's tile numbers 1), and a roll over
   rows read the last rows of a row-split copy on fewer cores (its per-core tile spans 5 rows
   where each core holds 1). ir/lx.py `tile_problem` keeps both in device memory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyrec.errors import ConfigError
from spyrec.ir.parser import parse
from spyrec.ir.verify import verify
from tests.differential.harness import run_and_compare
from tests.programs import Lambda, compile_pt2, export, load_json


def wrapped_rows(x: torch.Tensor, off: int, rows: int) -> torch.Tensor:
    width = x.shape[-1]
    return x.reshape(-1)[off:off + rows * width].reshape(rows, width)


def tanh_wrapped_sum(_, x):
    return torch.tanh(wrapped_rows(x, 71, 3)).sum(-1)


def roll_cat(k: int, dim: int):
    """`torch.roll(x, -k, dim)` spelled as a cat of two slices, beside a plain read of x."""
    def program(_, x):
        n = x.shape[dim]
        rolled = torch.cat([x.narrow(dim, k, n - k), x.narrow(dim, 0, k)], dim)
        return torch.tanh(rolled) + x
    return program


def _randn(shape, dtype, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# --- 1. tiling a wrapped view ----------------------------------------------------------------


def test_auto_tiling_of_a_wrapped_view_equals_eager(tmp_path):
    """Every count of the 300 dim puts a wrap (c1 = 229) inside a tile: auto tiles nothing."""
    out = run_and_compare(tmp_path, Lambda(tanh_wrapped_sum), (_randn((4, 300), torch.float32),),
                          tiling=Path("auto"))
    assert not load_json(out / "report.json")["tiling"]["groups"]


def test_a_config_tiling_a_wrapped_view_is_refused(tmp_path):
    pt2 = export(tmp_path, Lambda(tanh_wrapped_sum).eval(), (_randn((4, 300), torch.float32),))
    config = tmp_path / "tiling.yaml"
    config.write_text("dims: {args_0: [_, W]}\ngroups:\n  - ops: [tanh, sum_1]\n"
                      "    loops: [{W: 3}]\n")
    with pytest.raises(ConfigError, match=r"group 1: tiling W .* op tanh .*wraps inside a "
                                          r"tile .*trip g0\.0=2"):
        compile_pt2(pt2, tmp_path / "out", tiling=config)


# coarse_tiling's output for the program above before the fix: the verifier must refuse it
WRONG_TILES = """\
buffer x: input float32[4, 300] device [300, 1, 4, 32] / [1, -1, 300, -1] fp32
buffer tanh: intermediate float32[3, 100] device [100, 1, 3, 32] / [1, -1, 100, -1] fp32 per_tile
buffer sum_1: output float32[3] device [1, 3, 32] / [-1, 1, -1] fp32
buffer sum_1__acc: intermediate float32[3] device [1, 3, 32] / [-1, 1, -1] fp32
buffer sum_1__part: intermediate float32[3] device [1, 3, 32] / [-1, 1, -1] fp32 per_tile
op sum_1__acc: sum_1__acc[c0] = fill() over [c0<3] attrs {"value": 0.0}
op tanh: tanh[100*c0 + c1] = tanh(x[300*c0 + c1 + 71]) over [c0<3, c1<100] loops [3(c1)@g0.0]
op sum_1__part: sum_1__part[c0] = sum(tanh[100*c0 + r0]) over [c0<3, r0<100] reduce [r0] loops [3(r0)@g0.0]
op sum_1__acc.1: sum_1__acc[c0] = add(sum_1__acc[c0], sum_1__part[c0]) over [c0<3] loops [3()@g0.0]
op sum_1: sum_1[c0] = identity(sum_1__acc[c0]) over [c0<3]
inputs [x]
outputs [sum_1]
"""


def test_the_verifier_refuses_a_tile_that_wraps_on_a_later_trip():
    assert verify(parse(WRONG_TILES), ("layouts",)) == [
        "op 'tanh': x[300*c0 + c1 + 71]: on trip g0.0=2 the tile's device address is not the "
        "untiled access's at c0=0, c1=29 (the index wraps inside the tile: floor/mod of a "
        "tiled var crosses a boundary the first tile does not); coarse_tiling must refuse "
        "this tiling"]
    exact = WRONG_TILES.replace("c1 + 71]", "c1]")       # no wrap: every trip is exact
    assert verify(parse(exact), ("layouts",)) == []


# --- 2. a roll as a cat, with the input staged in LX ----------------------------------------


@pytest.mark.parametrize("shape, k, dim, dtype", [
    ((3, 5, 100), 40, -1, torch.float16),     # the report: a shifted read of a staged x
    ((6, 100), 1, 0, torch.float32),          # the last row on one core, x split by rows
    ((6, 100), 2, 0, torch.float16),          # the last 2 rows on 2 cores
])
def test_roll_as_cat_equals_eager(tmp_path, shape, k, dim, dtype):
    run_and_compare(tmp_path, Lambda(roll_cat(k, dim)), (_randn(shape, dtype),))


@st.composite
def lane_rolls(draw):
    """Rolls along the lanes whose shifted half starts inside a stick and straddles one
    stick more than its length needs (the reads that faulted): fp16 rows of 100 (k in
    36..63) or 130 (k in 2..63), fp32 rows of 100 (k in 4..31), under 1-2 leading dims."""
    dtype = draw(st.sampled_from([torch.float16, torch.float32]))
    width, low, high = draw(st.sampled_from(
        [(100, 36, 63), (130, 2, 63)] if dtype == torch.float16 else [(100, 4, 31)]))
    lead = tuple(draw(st.lists(st.integers(2, 5), min_size=1, max_size=2)))
    return lead + (width,), draw(st.integers(low, high)), dtype


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(lane_rolls())
def test_lane_rolls_equal_eager(tmp_path, case):
    shape, k, dtype = case
    run_and_compare(tmp_path, Lambda(roll_cat(k, -1)), (_randn(shape, dtype),))
