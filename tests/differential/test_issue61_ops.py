"""The ops of issue 61's families on the fast front end, against eager: pads (zero-width,
negative, positive), roll, nearest upsampling, tril/triu, log1p and softplus (near 0, at -1,
at the infinities), group norm, vector norm, weight norm (folded and lowered), einsum.

Each case compiles with `--frontend fast` (no torch fallback), simulates from the output
directory and compares with eager (`run_and_compare`); log1p's small arguments are compared
by relative error against float64, since the harness's absolute tolerance would pass
log(1 + x) as well.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spyrec.sim.runner import simulate
from tests.differential.harness import host_array, run_and_compare
from tests.programs import compile_pt2, export, load_json

SETTINGS = settings(max_examples=6, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def _run(tmp_path, fn, *inputs):
    return run_and_compare(tmp_path, Fn(fn), inputs, frontend="fast")


def _sub(tmp_path, name):
    d = tmp_path / name
    d.mkdir()
    return d


@pytest.mark.parametrize("pad", [(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 0, 1), (-1, 2),
                                 (2, -3, 0, 0, 1, 0), (0, 0, 0, 0, 0, 0, 0, 0)])
def test_constant_pad_edges(tmp_path, pad):
    x = torch.randn(2, 3, 5, 6)
    _run(tmp_path, lambda t: F.pad(t, pad, value=0.5) * 2.0, x)


@SETTINGS
@given(st.lists(st.integers(-2, 3), min_size=2, max_size=6).filter(lambda p: len(p) % 2 == 0),
       st.sampled_from([torch.float32, torch.float16]))
def test_constant_pad_random(tmp_path_factory, pad, dtype):
    x = torch.randn(3, 4, 7).to(dtype)
    _run(tmp_path_factory.mktemp("pad"), lambda t: F.pad(t, pad, value=-1.0) + 1, x)


def test_pad_refuses_reflect_clearly(tmp_path):
    from spyrec.errors import UnsupportedProgram
    pt2 = export(tmp_path, Fn(lambda t: F.pad(t, (1, 1), mode="reflect")), (torch.randn(2, 5),))
    with pytest.raises(UnsupportedProgram, match="mode 'reflect'"):
        compile_pt2(pt2, tmp_path / "out", frontend="fast")


@SETTINGS
@given(st.integers(-9, 9), st.integers(-9, 9))
def test_roll(tmp_path_factory, a, b):
    x = torch.randn(1, 4, 6, 8)
    _run(tmp_path_factory.mktemp("roll"), lambda t: torch.roll(t, (a, b), (1, 2)) + 0, x)


def test_roll_flat(tmp_path):
    _run(tmp_path, lambda t: torch.roll(t, 5) * 1.5, torch.randn(3, 4))


@pytest.mark.parametrize("size", [(2, 3), (8, 12), (16, 24), (6, 7)])
def test_upsample_nearest_index_rule(tmp_path, size):
    x = torch.randn(1, 2, 4, 6)
    _run(tmp_path, lambda t: F.interpolate(t, size=size) + 0, x)


@pytest.mark.parametrize("factor", [3.0, 1.7, 0.6])
def test_upsample_nearest_scale_factor(tmp_path, factor):
    """1.7: eager's table floor(i / 1.7) is not floor(i * in / out): a static selection."""
    _run(tmp_path, lambda t: F.interpolate(t, scale_factor=factor) + 0, torch.randn(1, 2, 4, 5))


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_triu(tmp_path, diagonal):
    x = torch.randn(2, 5, 7)
    _run(tmp_path, lambda t: torch.tril(t, diagonal) + torch.triu(t * 3, diagonal), x)


def _simulated(tmp_path, fn, x):
    pt2 = export(tmp_path, Fn(fn), (x,))
    out = compile_pt2(pt2, tmp_path / "out", frontend="fast")
    names = load_json(out / "manifest.json")["inputs"]
    return simulate(out, {names[0]: host_array(x)}).outputs[0]


def test_log1p_small_and_edges_ref_issue61(tmp_path):
    """log(1 + x) would give 0 for |x| < 6e-8 and lose digits up to 1e-3: relative error
    against float64 must stay at float32's level; -1 gives -inf, < -1 NaN, inf inf."""
    small = np.array([1e-30, -1e-20, 1e-12, -3e-8, 6e-8, 1e-6, -1e-5, 3e-4, 1e-3, -0.5, 0.7,
                      1.5, 30.0, 1e30, 0.0], dtype=np.float32)
    edges = np.array([-1.0, -2.0, np.inf, -np.inf, np.nan], dtype=np.float32)
    x = torch.from_numpy(np.concatenate([small, edges]))
    got = _simulated(tmp_path, torch.log1p, x)
    want = np.log1p(small.astype(np.float64))
    rel = np.abs(got[:len(small)] - want) / np.maximum(np.abs(want), 1e-45)
    assert rel.max() < 4e-7, (rel.max(), got[:len(small)], want)
    assert got[len(small)] == -np.inf and np.isnan(got[len(small) + 1])
    assert got[len(small) + 2] == np.inf and np.isnan(got[-2]) and np.isnan(got[-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_softplus(tmp_path, dtype):
    x = torch.cat([torch.linspace(-30, 30, 61), torch.tensor([0.0, 1e-4, -1e-4, 19.9, 20.1])])
    _run(tmp_path, lambda t: F.softplus(t) + F.softplus(t, beta=2.0, threshold=5.0),
         x.to(dtype))


@pytest.mark.parametrize("groups,eps", [(1, 1e-5), (2, 1e-3), (4, 0.5)])
def test_group_norm(tmp_path, groups, eps):
    norm = torch.nn.GroupNorm(groups, 8, eps=eps)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(8) + 0.5)
        norm.bias.copy_(torch.rand(8) - 0.5)
    run_and_compare(tmp_path, norm, (torch.randn(2, 8, 5) * 3 + 1,), frontend="fast")


@pytest.mark.parametrize("order,dim", [(2, (1, 2)), (2, None), (1, -1), (float("inf"), 0),
                                       (0, 1), (3.0, None)])
def test_vector_norm_runtime(tmp_path, order, dim):
    _run(tmp_path, lambda t: t / (torch.linalg.vector_norm(t, ord=order, dim=dim,
                                                           keepdim=True) + 1e-6),
         torch.randn(2, 4, 6))


class WeightNormed(torch.nn.Module):
    """wav2vec2's positional convolution: a weight-norm parametrization over dim 2."""

    def __init__(self):
        super().__init__()
        conv = torch.nn.Conv1d(8, 8, 3, padding=1, groups=2)
        self.conv = torch.nn.utils.parametrizations.weight_norm(conv, name="weight", dim=2)

    def forward(self, x):
        return self.conv(x)


def test_weight_norm_folds(tmp_path):
    """The norm runs at compile time: the program the lowering sees has the convolution only."""
    from spyrec.frontend.load import load_program
    run_and_compare(tmp_path, WeightNormed(), (torch.randn(1, 8, 10),), frontend="fast")
    program = load_program(next(tmp_path.glob("*.pt2")), "fast")
    assert [n.target for n in program.nodes if n.op == "call_function"] \
        == ["aten.conv1d.default"]


def test_weight_norm_of_runtime_value(tmp_path):
    g = torch.rand(1, 1, 5) + 0.5
    _run(tmp_path, lambda v: torch._weight_norm(v, g, 2) * 1.0, torch.randn(3, 4, 5))


@pytest.mark.parametrize("eq,shapes", [
    ("bclhn,bchpn->bclhp", [(1, 2, 4, 3, 5), (1, 2, 3, 6, 5)]),
    ("bclhn,bclhp->bchpn", [(1, 2, 4, 3, 5), (1, 2, 4, 3, 6)]),
    ("bclhn,bcshn->bclsh", [(1, 2, 4, 3, 5), (1, 2, 4, 3, 5)]),
    ("bzch,bzhpn->bchpn", [(1, 3, 2, 4), (1, 3, 4, 5, 6)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij->bji", [(2, 3, 4)]),
    ("bij->b", [(2, 3, 4)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ik,j->ijk", [(3, 4), (5,)]),
    ("ij,Ab->ijAb", [(2, 3), (4, 4)]),
])
def test_einsum(tmp_path, eq, shapes):
    xs = [torch.randn(*s) for s in shapes]
    _run(tmp_path, lambda *t: torch.einsum(eq, *t) * 1.0, *xs)


def _fill_steps(x):
    """RecurrentGemma's scan output: a fresh tensor written one step at a time through a
    view, read after all the writes; a nested slice-then-select write; a fill_."""
    out = torch.zeros_like(x)
    for t in range(x.shape[1]):
        out[:, t] = x[:, t] * (t + 1)
    out[:, 1:3][:, 0].fill_(7.0)
    return out + 1


def test_writes_into_views_of_a_fresh_tensor(tmp_path):
    _run(tmp_path, _fill_steps, torch.randn(2, 5, 3))


def test_slice_and_select_scatter(tmp_path):
    src = torch.randn(2, 2, 3)
    _run(tmp_path, lambda x: torch.slice_scatter(x, src, 1, 1, 3)
         + torch.select_scatter(x, src[:, 0], 1, 4), torch.randn(2, 5, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_scatter(tmp_path, dtype):
    """Image features placed at the image tokens (the mask from the runtime ids)."""
    feats = torch.randn(1, 4, 8).to(dtype)
    ids = torch.tensor([[5, 3, 3, 9, 3, 1, 3, 2]])
    emb = torch.randn(1, 8, 8).to(dtype)

    def place(i):
        mask = (i == 3).unsqueeze(-1).expand(1, 8, 8)
        return emb.masked_scatter(mask, feats) * 1

    _run(tmp_path, place, ids)


@pytest.mark.parametrize("dim", [1, -1])
def test_glu_and_expand_as(tmp_path, dim):
    other = torch.zeros(3, 4, 6)
    _run(tmp_path, lambda t: F.glu(t, dim).expand_as(other if dim == -1 else other[:, :2])
         * 1.0, torch.randn(1, 4, 6) if dim == 1 else torch.randn(1, 4, 12))


@pytest.mark.parametrize("form", ["scalar", "accumulate", "values", "row"])
def test_index_put_with_a_boolean_mask(tmp_path, form):
    """Granite Speech's `ids[ids == audio_token] = 0` and its relatives."""
    def put(x):
        y = x.clone()
        mask = x > 0.3
        if form == "scalar":
            y[mask] = 0.0
        elif form == "accumulate":
            y.index_put_((mask,), torch.tensor(2.5), accumulate=True)
        elif form == "values":
            y[x[:, 0] > 0] = torch.arange(12.0).reshape(3, 4)
        else:  # one row broadcast to every selected row
            y[x[:, 0] > 0] = torch.arange(4.0)
        return y

    x = torch.randn(5, 4)
    x[:3, 0] = torch.rand(3) + 0.1
    x[3:, 0] = -torch.rand(2) - 0.1
    _run(tmp_path, put, x)


@pytest.mark.parametrize("groups,padding", [(4, 3), (1, 3), (2, 0)])
def test_bf16_convolution_with_constant_weights_ref_issue61(tmp_path, groups, padding):
    """Granite 4 hybrid's depthwise causal conv in bf16: the constant weights are stored as
    bf16 bits, and were read as integers (every output inf)."""
    conv = torch.nn.Conv1d(4, 4, 4, padding=padding, groups=groups).to(torch.bfloat16)
    run_and_compare(tmp_path, conv, (torch.randn(1, 4, 16).to(torch.bfloat16),),
                    frontend="fast")


def test_a_view_read_after_a_later_write_is_left_to_functionalize(tmp_path):
    """`v = out[:, 0]`, then `out[:, 1] = x`, then v read: eager's v sees the write through
    the shared storage; the rewrite would not, so it declines and the fast reader refuses."""
    from spyrec.errors import UnsupportedProgram

    def stale(x):
        out = torch.zeros_like(x)
        v = out[:, 0:2]
        out[:, 1] = x[:, 1]
        return v * 2

    pt2 = export(tmp_path, Fn(stale), (torch.randn(2, 3),))
    with pytest.raises(UnsupportedProgram, match="fast front end cannot read"):
        compile_pt2(pt2, tmp_path / "out", frontend="fast")
    run_and_compare(tmp_path, Fn(stale), (torch.randn(2, 3),), frontend="auto")
