"""sign, ceil, floor, abs and torch.min/max of two tensors on the device, and float -> int casts
of values a `where` then discards (T5's relative-position buckets on runtime positions).

Each program compiles, simulates and equals eager (integers exactly); shapes are drawn by
hypothesis, odd sizes and partial sticks included.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.differential.harness import run_and_compare
from tests.programs import Lambda, load_json

OPS = {
    "sign": torch.sign, "ceil": torch.ceil, "floor": torch.floor, "abs": torch.abs,
}
_shapes = st.lists(st.integers(1, 70), min_size=1, max_size=3)


def _data(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, generator=g, dtype=dtype)
    x = torch.randn(shape, generator=g) * 4
    x.view(-1)[:4] = torch.tensor([0.0, -0.0, 2.5, -0.5])[:x.numel()]  # ties and signed zeros
    return x.to(dtype)


def _ops_on_device(out: Path) -> set[str]:
    def walk(specs):
        for s in specs:
            yield from walk(s["loop"]["body"]) if "loop" in s else [s["op"]]
    kernels = load_json(out / "opspecs.json")["kernels"]
    return {op for k in kernels for op in walk(k["specs"])}


@settings(max_examples=12, deadline=None)
@given(shape=_shapes, op=st.sampled_from(sorted(OPS)),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.int64]),
       seed=st.integers(0, 2**16))
def test_rounding_and_sign_ops_equal_eager(shape, op, dtype, seed):
    x = _data(shape, dtype, seed)
    fn = OPS[op]
    with tempfile.TemporaryDirectory() as tmp:
        out = run_and_compare(Path(tmp), Lambda(lambda m, x: fn(x) * 2), (x,))
        assert op in _ops_on_device(out)  # a device op, not folded away


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_min_and_max_of_two_tensors_are_lowered(tmp_path, dtype):
    """torch.min/max(a, b) (aten.min.other) compile through the fast front end (no torch
    decomposition), NaN propagating."""
    a, b = _data((5, 67), dtype, 1), _data((1, 67), dtype, 2)
    a[0, 0] = float("nan")
    out = run_and_compare(tmp_path, Lambda(lambda m, a, b: (torch.min(a, b), torch.max(a, b))),
                          (a, b), frontend="fast")
    assert {"minimum", "maximum"} <= _ops_on_device(out)


class RuntimeBuckets(torch.nn.Module):
    """T5's `_relative_position_bucket` on positions that arrive at run time, so nothing folds:
    log(0) = -inf and log of small values are cast to int64 on the device, then discarded by the
    `where` (is_small). The device saturates the cast instead of faulting."""

    def forward(self, relative_position):
        num_buckets, max_distance = 16, 128
        buckets = (relative_position > 0).to(torch.long) * (num_buckets // 2)
        n = torch.abs(relative_position)
        max_exact = num_buckets // 4
        is_small = n < max_exact
        large = max_exact + (torch.log(n.float() / max_exact)
                             / math.log(max_distance / max_exact)
                             * (num_buckets // 2 - max_exact)).to(torch.long)
        large = torch.min(large, torch.full_like(large, num_buckets // 2 - 1))
        return buckets + torch.where(is_small, n, large)


def test_non_finite_casts_a_where_discards_run_and_equal_eager(tmp_path):
    rel = torch.arange(-40, 41).view(1, -1) - torch.arange(0, 7).view(-1, 1)  # 0 included
    out = run_and_compare(tmp_path, RuntimeBuckets(), (rel,))
    assert "log" in _ops_on_device(out)  # computed on the device, not folded
