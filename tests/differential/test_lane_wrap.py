"""Views whose coordinates wrap: a slice of a flattened `cat` of odd sizes read back as rows
(`Mod(c1 + 71, 96)` in the lane, `floor((c1 + 71)/96)` in the row). SuperDSC cannot carry a
wrap, so superdsc_legalize cuts the op into runs between the wrap points (one lane shift
each) or, for a reduction over the wrapped dim, copies the view into a plain buffer first.
These programs were refused ("no SuperDSC form found … lane coordinate … is not a whole
stick", or "… not a digit of one iteration variable") or became one op per element; each
must now equal eager in a handful of ops."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential.harness import run_and_compare
from tests.programs import Lambda

DTYPES = [torch.float32, torch.float16]
# few ops: a cut per wrap, not a piece per element (the old search made 99 ops of the 96-wide
# program below)
MAX_SDSC_FILES = 12


def wrapped_rows(t: torch.Tensor, start: int, rows: int) -> torch.Tensor:
    """`rows` rows of t's width read from t's flat storage at `start`: every row but the
    aligned ones wraps across two rows of t."""
    width = t.shape[-1]
    return t.reshape(*t.shape[:-2], -1)[..., start:start + rows * width] \
        .reshape(*t.shape[:-2], rows, width)


def cat_wrap_pointwise(_, x, y):
    return torch.tanh(wrapped_rows(torch.cat([x, y], -1), 71, 3)) * 2


def cat_wrap_sum(_, x, y):
    return wrapped_rows(torch.cat([x, y], -1), 71, 3).sum(-1)


def wrap_softmax(_, x):
    return torch.softmax(wrapped_rows(x, 71, 3), -1)


def wrap_amax_rows(_, x):
    return torch.sigmoid(wrapped_rows(x, 33, 3)).amax(-1)


def wrap_transposed(_, x):
    return (wrapped_rows(x, 71, 3).t() * 2).contiguous()


def wrap_middle_dim(_, x):
    """The wrap is in a non-lane dim: rows of 40 read from a flattened (6·7, 40)."""
    return torch.tanh(x.reshape(-1, 40)[3:3 + 5 * 7].reshape(5, 7, 40)).sum(1)


def _randn(*shapes, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*s, generator=gen).to(dtype) for s in shapes)


CASES = {
    # the 96-wide row of the report: cat of [.., 25] and [.., 71], rows from element 71
    "cat96_pointwise": (cat_wrap_pointwise, [(4, 25), (4, 71)], {}),
    "cat96_pointwise_default_layouts": (cat_wrap_pointwise, [(4, 25), (4, 71)],
                                        {"stick_layout.input_layouts": "default"}),
    "cat300_pointwise": (cat_wrap_pointwise, [(4, 125), (4, 175)], {}),
    # refused before with "lane coordinate Mod(c1 + 71, 300) is not a whole stick"
    "cat300_pointwise_default_layouts": (cat_wrap_pointwise, [(4, 125), (4, 175)],
                                         {"stick_layout.input_layouts": "default"}),
    "cat300_sum": (cat_wrap_sum, [(4, 125), (4, 175)], {}),
    "softmax300": (wrap_softmax, [(4, 300)], {}),
    "amax200_3d": (wrap_amax_rows, [(2, 4, 200)], {}),
    "transposed300": (wrap_transposed, [(4, 300)], {}),
    "middle_dim": (wrap_middle_dim, [(6, 7, 40)], {}),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=["fp32", "fp16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_wrapped_view_matches_eager(tmp_path, case, dtype):
    fn, shapes, sets = CASES[case]
    out = run_and_compare(tmp_path, Lambda(fn), _randn(*shapes, dtype=dtype),
                          sets=[f"{k}={v}" for k, v in sets.items()])
    assert len(list(out.glob("sdsc_*.json"))) <= MAX_SDSC_FILES


@st.composite
def wrapped_programs(draw):
    """A cat of two odd widths, `rows` rows read from a flat offset that is not a multiple
    of the width (nor, mostly, of a stick), then a pointwise op or a reduction."""
    a = draw(st.integers(1, 80))
    b = draw(st.integers(1, 200))
    width = a + b
    lead = draw(st.integers(2, 4))
    rows = draw(st.integers(1, lead - 1))
    start = draw(st.integers(1, width - 1))
    tail = draw(st.sampled_from(["tanh", "sum", "amax", "mul_x"]))
    dtype = draw(st.sampled_from(DTYPES))
    return a, b, lead, rows, start, tail, dtype


def _wrapped_program(rows: int, start: int, tail: str):
    def fn(_, x, y):
        t = wrapped_rows(torch.cat([x, y], -1), start, rows)
        if tail == "tanh":
            return torch.tanh(t)
        if tail == "sum":
            return t.sum(-1)
        if tail == "amax":
            return t.amax(-1)
        return t * x[:rows, :1]
    return fn


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(wrapped_programs())
def test_random_wrapped_view_matches_eager(tmp_path_factory, program):
    a, b, lead, rows, start, tail, dtype = program
    x, y = _randn((lead, a), (lead, b), dtype=dtype, seed=a * 1000 + b)
    run_and_compare(tmp_path_factory.mktemp("wrap"),
                    Lambda(_wrapped_program(rows, start, tail)), (x, y))


def test_wrap_points_are_where_the_row_changes():
    """`Mod(c1 + 71, 96)` over c1 < 96 wraps once, at c1 = 25; a step of 2 over a width of 7
    changes row at c1 = 3 and 7 (2·3 + 1 = 7, 2·7 + 1 = 15 ≥ 14); a decreasing coordinate
    cuts where it drops below a multiple; a stick-sized pattern with too many wraps is no
    wrap."""
    from spyrec.indexing import var
    from spyrec.passes.superdsc_legalize import _wrap_points

    assert _wrap_points(var("c1") + 71, "c1", 96, 96) == (25,)
    assert _wrap_points(var("c1").scale(2) + 1, "c1", 10, 7) == (3, 7)
    assert _wrap_points(var("c1").scale(-1) + 10, "c1", 8, 4) == (3, 7)
    assert _wrap_points(var("c1") + 71, "c0", 96, 96) == ()
    assert _wrap_points(var("c1"), "c1", 64 * 2048, 64) == ()
