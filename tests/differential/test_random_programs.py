"""Randomized differential testing: small programs of elementwise ops, reductions and views
over padded and aligned shapes; each must compile, simulate and equal eager.

Two runs of the same vocabulary: hypothesis, derandomized (the same programs every run, so CI
is reproducible; the falsifying program is printed as its step list), and a seeded generator
with a fresh seed every run, so the suite keeps exploring. A fresh-seed failure prints its
seed; `SPYREC_RANDOM_SEED=<seed> pytest -k fresh_seed` replays exactly that program."""

import os
import random
import secrets

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential.harness import run_and_compare

UNARY = ["tanh", "sigmoid", "relu", "abs", "neg", "silu"]
SCALAR_OPS, SCALARS = ["add", "mul", "sub"], [0.5, 2.0, -1.5]
BINARY_OPS = ["add", "mul", "max"]
REDUCE_OPS = ["sum", "amax", "mean"]
SLICE_STARTS = [1, 32, 40]
SIZES = [1, 3, 64, 100]
DTYPES = [torch.float32, torch.float16]


class StepProgram(torch.nn.Module):
    def __init__(self, steps):
        super().__init__()
        self.steps = steps

    def forward(self, x):
        t = x
        for step in self.steps:
            t = apply(step, t, x)
        return t


def apply(step, t, x):
    kind = step[0]
    if kind == "unary":
        return getattr(torch, step[1])(t) if step[1] != "silu" else torch.nn.functional.silu(t)
    if kind == "scalar":
        _, op, value = step
        return {"add": t + value, "mul": t * value, "sub": value - t}[op]
    if kind == "binary":
        other = x if _broadcastable(t.shape, x.shape) else t
        return {"add": t + other, "mul": t * other, "max": torch.maximum(t, other)}[step[1]]
    if kind == "reduce":
        _, op, dim, keepdim = step
        if t.dim() <= 1 and not keepdim:
            return t
        dim = dim % t.dim()
        return {"sum": t.sum, "amax": t.amax, "mean": t.mean}[op](dim, keepdim=keepdim)
    if kind == "transpose":
        return t.transpose(step[1] % t.dim(), step[2] % t.dim()) if t.dim() >= 2 else t
    if kind == "slice":
        dim = step[1] % t.dim()
        start = min(step[2], t.shape[dim] - 1)
        return t.narrow(dim, start, t.shape[dim] - start)
    raise AssertionError(step)


def _broadcastable(a, b):
    try:
        torch.broadcast_shapes(a, b)
        return len(a) >= len(b) and torch.broadcast_shapes(a, b) == a
    except RuntimeError:
        return False


STEPS = st.one_of(
    st.tuples(st.just("unary"), st.sampled_from(UNARY)),
    st.tuples(st.just("scalar"), st.sampled_from(SCALAR_OPS), st.sampled_from(SCALARS)),
    st.tuples(st.just("binary"), st.sampled_from(BINARY_OPS)),
    st.tuples(st.just("reduce"), st.sampled_from(REDUCE_OPS), st.integers(0, 2),
              st.booleans()),
    st.tuples(st.just("transpose"), st.integers(0, 2), st.integers(0, 2)),
    st.tuples(st.just("slice"), st.integers(0, 2), st.sampled_from(SLICE_STARTS)),
)


@st.composite
def programs(draw):
    rank = draw(st.integers(2, 3))
    shape = tuple(draw(st.sampled_from(SIZES)) for _ in range(rank))
    dtype = draw(st.sampled_from(DTYPES))
    steps = tuple(draw(st.lists(STEPS, min_size=1, max_size=4)))
    seed = draw(st.integers(0, 2**16))
    return shape, dtype, steps, seed


@settings(max_examples=int(__import__("os").environ.get("SPYREC_RANDOM_PROGRAMS", "14")),
          deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(programs())
def test_random_program_matches_eager(tmp_path_factory, program):
    shape, dtype, steps, seed = program
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)
    tmp = tmp_path_factory.mktemp("rand")
    run_and_compare(tmp, StepProgram(steps), (x,))


def random_program(rng: random.Random):
    """The same vocabulary as `programs()`, drawn from a seeded generator."""
    step = {
        "unary": lambda: ("unary", rng.choice(UNARY)),
        "scalar": lambda: ("scalar", rng.choice(SCALAR_OPS), rng.choice(SCALARS)),
        "binary": lambda: ("binary", rng.choice(BINARY_OPS)),
        "reduce": lambda: ("reduce", rng.choice(REDUCE_OPS), rng.randrange(3),
                           rng.random() < 0.5),
        "transpose": lambda: ("transpose", rng.randrange(3), rng.randrange(3)),
        "slice": lambda: ("slice", rng.randrange(3), rng.choice(SLICE_STARTS)),
    }
    shape = tuple(rng.choice(SIZES) for _ in range(rng.randint(2, 3)))
    steps = tuple(step[rng.choice(sorted(step))]() for _ in range(rng.randint(1, 4)))
    return shape, rng.choice(DTYPES), steps, rng.randrange(2**16)


def _fresh_seeds() -> list[int]:
    if os.environ.get("SPYREC_RANDOM_SEED"):
        return [int(os.environ["SPYREC_RANDOM_SEED"])]
    return [secrets.randbits(32) for _ in range(int(os.environ.get("SPYREC_FRESH_PROGRAMS",
                                                                     "3")))]


SEEDS = _fresh_seeds()


@pytest.mark.parametrize("index", range(len(SEEDS)))
def test_fresh_seed_random_program_matches_eager(tmp_path, index):
    seed = SEEDS[index]
    shape, dtype, steps, data_seed = program = random_program(random.Random(seed))
    print(f"random program seed {seed}: {program}")  # shown by pytest when the test fails
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(data_seed)).to(dtype)
    try:
        run_and_compare(tmp_path, StepProgram(steps), (x,))
    except BaseException as e:
        raise AssertionError(f"random program seed {seed} failed ({type(e).__name__}: {e}); "
                             f"replay: SPYREC_RANDOM_SEED={seed} python -m pytest "
                             f"{__file__} -k fresh_seed; program {program}") from e
