"""Randomized differential testing: hypothesis builds small programs of elementwise ops,
reductions and views over padded and aligned shapes; each must compile, simulate and equal eager.
The falsifying program is printed as its step list, so a failure replays exactly."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential.harness import run_and_compare

UNARY = ["tanh", "sigmoid", "relu", "abs", "neg", "silu"]


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
    st.tuples(st.just("scalar"), st.sampled_from(["add", "mul", "sub"]),
              st.sampled_from([0.5, 2.0, -1.5])),
    st.tuples(st.just("binary"), st.sampled_from(["add", "mul", "max"])),
    st.tuples(st.just("reduce"), st.sampled_from(["sum", "amax", "mean"]), st.integers(0, 2),
              st.booleans()),
    st.tuples(st.just("transpose"), st.integers(0, 2), st.integers(0, 2)),
    st.tuples(st.just("slice"), st.integers(0, 2), st.sampled_from([1, 32, 40])),
)


@st.composite
def programs(draw):
    rank = draw(st.integers(2, 3))
    shape = tuple(draw(st.sampled_from([1, 3, 64, 100])) for _ in range(rank))
    dtype = draw(st.sampled_from([torch.float32, torch.float16]))
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
