"""cumsum, repeat, repeat_interleave, chunk, masked_fill and isinf/isnan/any/all on runtime
data: hypothesis draws shapes (odd lengths, dims that cross sticks), dims and dtypes, and every
program must compile on the fast front end, simulate and equal eager (integers exactly).

cumsum is a Hillis-Steele scan (aten_scan.py): integer inputs include values above 2^24, where
an fp32 accumulation (a triangular matmul) would round, so exactness is tested, not assumed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential.harness import run_and_compare
from tests.programs import Lambda

SIZES = [1, 2, 3, 5, 17, 33, 64, 65, 100]
FLOATS = [torch.float32, torch.float16]
BIG = 2 ** 24 + 3      # above fp32's exact integers; 100 of them still fit int32
SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

shapes = st.lists(st.sampled_from(SIZES), min_size=1, max_size=3)


def check(fn, *inputs) -> None:
    """`fn(*inputs)` compiled on the fast front end equals eager."""
    with tempfile.TemporaryDirectory() as tmp:
        run_and_compare(Path(tmp), Lambda(lambda m, *a: fn(*a)), inputs, frontend="fast")


def data(shape, dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if not dtype.is_floating_point:
        return torch.randint(-BIG, BIG, shape, generator=g).to(dtype)
    return torch.randn(shape, generator=g).to(dtype)


@settings(max_examples=30, **SETTINGS)
@given(shape=shapes, dim=st.integers(-3, 2),
       dtype=st.sampled_from([torch.int64, torch.int32, torch.bool] + FLOATS),
       cast=st.sampled_from([None, "int64", "float32"]), seed=st.integers(0, 99))
def test_cumsum_equals_eager(shape, dim, dtype, cast, seed):
    dim = dim % len(shape)
    out_dtype = None if cast is None else getattr(torch, cast)
    if out_dtype == torch.float32 and not dtype.is_floating_point and dtype != torch.bool:
        out_dtype = None   # an fp32 cumsum of values above 2^24 rounds in eager's order only
    x = data(shape, dtype, seed)
    check(lambda t: (torch.cumsum(t, dim, dtype=out_dtype),
                     torch.cumsum(t, dim, dtype=out_dtype) * 2), x)


def test_cumsum_of_large_ints_is_exact_along_the_stick_dim():
    """Sums past 2^24 along the lane dim of 100 elements: every bit as eager."""
    x = torch.full((2, 100), BIG, dtype=torch.int64)
    x[1, ::3] = -BIG + 1
    check(lambda t: t.cumsum(-1), x)


def test_roberta_position_ids_from_input_ids():
    """RoBERTa's `cumsum(input_ids != pad) * mask + pad`, an int mask through a cumsum."""
    ids = torch.tensor([[5, 7, 1, 9, 1, 1], [1, 1, 4, 4, 4, 4]])
    check(lambda t: torch.cumsum((t != 1).int(), dim=1).type_as(t) * (t != 1).int() + 1, ids)


@settings(max_examples=10, **SETTINGS)
@given(shape=shapes, reps=st.lists(st.integers(1, 3), min_size=3, max_size=4),
       dtype=st.sampled_from(FLOATS + [torch.int64]), seed=st.integers(0, 99))
def test_repeat_equals_eager(shape, reps, dtype, seed):
    reps = reps[:max(len(shape), len(reps) - 1)] + [1] * max(0, len(shape) - len(reps))
    x = data(shape, dtype, seed)
    check(lambda t: (t.repeat(*reps), t.repeat(*reps) + 1), x)


@settings(max_examples=10, **SETTINGS)
@given(shape=shapes, r=st.integers(0, 3), dim=st.sampled_from([None, 0, -1, 1]),
       seed=st.integers(0, 99))
def test_repeat_interleave_equals_eager(shape, r, dim, seed):
    if dim is not None and dim >= len(shape):
        dim = -1
    x = data(shape, torch.float32, seed)
    check(lambda t: (torch.repeat_interleave(t, r, dim=dim) * 2,), x)


def test_repeat_interleave_with_constant_counts():
    counts = [2, 0, 1, 3]
    check(lambda t: torch.repeat_interleave(t, torch.tensor(counts), dim=1,
                                            output_size=sum(counts)) + 1,
          torch.randn(3, 4))


@settings(max_examples=6, **SETTINGS)
@given(shape=shapes, chunks=st.integers(1, 4), dim=st.integers(-3, 2), seed=st.integers(0, 9))
def test_chunk_equals_eager(shape, chunks, dim, seed):
    dim = dim % len(shape)
    x = data(shape, torch.float32, seed)
    check(lambda t: [c * 2 for c in t.chunk(chunks, dim)], x)


@settings(max_examples=10, **SETTINGS)
@given(shape=st.lists(st.sampled_from(SIZES), min_size=2, max_size=3),
       value=st.sampled_from([float("-inf"), 0.5, "min", "tensor"]),
       dtype=st.sampled_from(FLOATS), seed=st.integers(0, 99))
def test_masked_fill_equals_eager(shape, value, dtype, seed):
    x = data(shape, dtype, seed)
    if value == "min":
        value = torch.finfo(dtype).min
    row = data(shape[-1:], torch.float32, seed + 1) > 0    # a mask broadcast over rows
    if value == "tensor":
        check(lambda t, m: t.masked_fill(m, torch.tensor(-2.5)) * 1, x, row)
    else:
        check(lambda t, m: (t.masked_fill(m, value), t.masked_fill(~m, value) + 1), x, row)


@settings(max_examples=10, **SETTINGS)
@given(shape=shapes, dim=st.sampled_from([None, 0, -1]), dtype=st.sampled_from(FLOATS),
       seed=st.integers(0, 99))
def test_isinf_isnan_any_all_equal_eager(shape, dim, dtype, seed):
    x = data(shape, dtype, seed) * 3e4        # fp16 overflows to inf where |x| > ~2.2
    x.view(-1)[::7] = float("nan")

    def program(t):
        inf, nan = torch.isinf(t), torch.isnan(t)
        if dim is None:
            return inf, nan, inf.any(), nan.all(), torch.isfinite(t).all(), t.any()
        return inf, inf.any(dim), nan.all(dim, keepdim=True), t.any(dim)
    check(program, x)


def test_t5_fp16_clamp():
    """T5's fp16 guard: clamp by finfo.max - 1000 when any value overflowed."""
    x = torch.randn(2, 8, 70).half() * 3e4

    def program(t):
        y = t * 2
        bound = torch.where(torch.isinf(y).any(), torch.finfo(y.dtype).max - 1000,
                            torch.finfo(y.dtype).max)
        return torch.clamp(y, min=-bound, max=bound)
    check(program, x)
