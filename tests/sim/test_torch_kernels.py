"""torch's kernels in the simulator (used for programs with >= 3 GiB of weights,
sim/torch_kernels.py).

Copies give the same bits through numpy and through torch's vectorized copy: fp16 -> fp32 is
exact, infinities, signed zeros and subnormals included, from strided and read-only views; a
NaN stays a NaN (torch quiets a signaling NaN's payload, which no op can observe); fp16 ->
fp16 (a half matmul's weight rearranged) keeps every bit.

Half matmuls are the device's product: float32 accumulation and one rounding, so they differ
from numpy's float32 sgemm (then rounded to fp16) only by the order of the additions, and
their results do not depend on torch's thread count. Which outputs differ, and by how much,
depends on the CPU's kernels (AVX-512 FP16 or not, Intel or AMD), so no test compares them
with sgemm's bits or counts them: each result is checked against DESIGN §8's bound, computed
in float64 (tests/fp16_rule.py), and a program's outputs by --check's reference rule.
Each test turns torch on for itself only (`torch_on`): a process that imported it for one
test must not run every later test's matmuls through it.
"""

import numpy as np
import pytest

from spyrec.sim import torch_kernels as cast
from tests.fp16_rule import assert_fp16_product


@pytest.fixture
def torch_on(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(cast, "_torch", torch)
    monkeypatch.setattr(cast, "_half_on", True)
    return torch


@pytest.mark.parametrize("writeable", [True, False])
def test_torch_and_numpy_casts_give_the_same_bits(writeable, torch_on):
    bits = np.arange(1 << 16, dtype=np.uint16)               # every fp16 value
    device = np.resize(bits, (8, 1024, 64)).view(np.float16)   # 8 sticks of 64 x 1024 rows
    box = np.lib.stride_tricks.as_strided(device, (1024, 8, 64),
                                          (128, 1024 * 128, 2), writeable=writeable)
    by_numpy = np.empty((1024, 8, 64), np.float32)
    np.copyto(by_numpy, box, casting="unsafe")
    by_torch = np.empty_like(by_numpy)
    cast.cast_copy(by_torch, box)
    assert box.size >= cast._MIN_ELEMENTS
    nan = np.isnan(by_numpy)
    assert np.array_equal(np.isnan(by_torch), nan) and nan.sum() == 2 * 1023 * 8   # every NaN pattern of both signs
    assert np.array_equal(by_torch.view(np.uint32)[~nan], by_numpy.view(np.uint32)[~nan])


def test_unused_axes_take_the_vectorized_copy(torch_on, monkeypatch):
    """A strided read's unused vars are axes of one element with stride 0 (anywhere in the
    shape): they are dropped, so the copy still goes through torch; a negative stride falls
    back to numpy with the axes where they were."""
    device = np.random.default_rng(0).standard_normal(8 * 1024 * 64).astype(np.float16)
    box = np.lib.stride_tricks.as_strided(device, (1024, 1, 8, 64, 1),
                                          (128, 0, 1024 * 128, 2, 0), writeable=False)
    want = box.astype(np.float32)

    def no_numpy(*args, **kwargs):
        raise AssertionError("numpy's scalar cast was used")

    got = np.empty(box.shape, np.float32)
    with monkeypatch.context() as m:
        m.setattr(cast.np, "copyto", no_numpy)
        cast.cast_copy(got, box)
    assert np.array_equal(got, want)
    backwards = box[::-1]
    got = np.empty(backwards.shape, np.float32)
    cast.cast_copy(got, backwards)
    assert np.array_equal(got, want[::-1])


def test_a_half_weight_is_rearranged_by_torch_bit_for_bit(torch_on, monkeypatch):
    """A half matmul reads its weight as stored, rearranged from sticks of N into (K, N): an
    fp16 -> fp16 copy of a strided view, through torch's copy (faster than numpy's), every
    bit pattern kept, NaNs included."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    device = np.resize(bits, (8, 1024, 64)).view(np.float16)   # [N/64, K, 64]
    box = np.lib.stride_tricks.as_strided(device, (1024, 8, 64), (128, 1024 * 128, 2),
                                          writeable=False)     # (K, N/64, 64)
    got = np.empty(box.shape, np.float16)

    def no_numpy(*args, **kwargs):
        raise AssertionError("numpy's copy was used")

    with monkeypatch.context() as m:
        m.setattr(cast.np, "copyto", no_numpy)
        cast.cast_copy(got, box)
    assert np.array_equal(got.view(np.uint16), np.ascontiguousarray(box).view(np.uint16))


@pytest.mark.parametrize("shape", [(1, 1, 4096, 640), (1, 128, 1024, 256), (8, 64, 64, 96),
                                   (2, 3, 4160, 33)])
def test_half_matmul_is_float32_accumulation_rounded_once(shape, torch_on):
    """Within half an fp16 step of the exact product plus float32 accumulation's error bound
    (k * 2**-24 * sum |x y|), as numpy's sgemm rounded once is (tests/fp16_rule.py). Which
    outputs differ from sgemm's, and how many, depends on the CPU's kernels, so only the
    bound is asserted."""
    b, m, k, n = shape
    rng = np.random.default_rng(k)
    xs = rng.standard_normal((b, m, k)).astype(np.float16)
    ys = (rng.standard_normal((b, k, n)) / 16).astype(np.float16)
    got = cast.half_matmul(xs, ys)
    sgemm = np.matmul(xs.astype(np.float32), ys.astype(np.float32)).astype(np.float16)
    assert got.shape == (b, m, n)
    assert_fp16_product(sgemm, xs, ys)
    assert_fp16_product(got, xs, ys)


@pytest.mark.parametrize("m", [1, 64])
def test_half_matmul_accumulates_in_float32(m, torch_on):
    """16,384 ones sum to 16,384: an fp16 accumulator stops at 2,048 (2,048 + 1 rounds back)."""
    ones = np.ones((1, m, 16384), np.float16)
    got = cast.half_matmul(ones, np.ones((1, 16384, 8), np.float16))
    assert (got == 16384).all()


def test_half_matmul_does_not_depend_on_torch_threads(torch_on):
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((4, 96, 2048)).astype(np.float16)
    ys = (rng.standard_normal((4, 2048, 320)) / 16).astype(np.float16)
    saved = torch_on.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch_on.set_num_threads(threads)
            results.append(cast.half_matmul(xs, ys))
    finally:
        torch_on.set_num_threads(saved)
    assert all(np.array_equal(results[0], r) for r in results[1:])


def _attention_mlp(dtype):
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(256, 512, bias=False)
            self.down = torch.nn.Linear(512, 128)

        def forward(self, x):
            h = self.up(x)
            q, k = h[..., :128], h[..., 128:256]
            att = torch.softmax(q @ k.transpose(-1, -2), -1)
            return self.down(torch.relu(h)) + (att @ q)

    torch.manual_seed(0)
    return Block().to(dtype).eval(), torch.randn(2, 64, 256).to(dtype)


@pytest.mark.parametrize("dtype, halves", [("float16", 4), ("float32", 0)])
def test_a_program_runs_its_fp16_matmuls_as_half_matmuls(dtype, halves, tmp_path, torch_on,
                                                         monkeypatch):
    """With torch on, each batchmatmul of fp16 operands into fp16 (two projections, two
    attention products) is one half matmul per chunk; an fp32 program has none, and its
    outputs are the numpy path's bits. The fp16 outputs are as accurate as the float32
    path's: both pass --check's reference rule (spyrec/sim/check.py: against the program run
    in fp32, an error not materially worse than fp16 eager's own). They are not the same
    bits, nor is the count of outputs that differ fixed: a matmul output one step off (the
    order of the float32 additions, which depends on the CPU's kernels) moves through the
    softmax and the sum after it (1.08% of the outputs here, 1.09% on an AMD EPYC)."""
    import copy

    import spyrec
    from spyrec.sim.check import reference_errors
    from spyrec.sim.kernels import reduce

    module, x = _attention_mlp(getattr(torch_on, dtype))
    with torch_on.no_grad():
        out = spyrec.compile(torch_on.export.export(module, (x,)), tmp_path / "out")
        want = module(x).float().numpy()
        in_fp32 = copy.deepcopy(module).float()(x.float()).double().numpy()
    inputs = {"x": x.numpy()}
    monkeypatch.setattr(cast, "_half_on", False)
    by_numpy = spyrec.run(out, inputs)["output_0"].astype(np.float32)
    monkeypatch.setattr(cast, "_half_on", True)
    calls = []
    monkeypatch.setattr(reduce, "half_matmul",
                        lambda xs, ys: calls.append(xs.shape) or cast.half_matmul(xs, ys))
    by_torch = spyrec.run(out, inputs)["output_0"].astype(np.float32)
    assert len(calls) == halves
    tol = 2e-2 if dtype == "float16" else 1e-5
    assert np.allclose(by_torch, want, atol=tol, rtol=tol)
    if dtype == "float32":
        np.testing.assert_array_equal(by_torch, by_numpy)
        return
    for got in (by_numpy, by_torch):
        errors = reference_errors(got.astype(np.float64), want.astype(np.float64), in_fp32,
                                  "float16")
        assert errors.ok, errors


def test_a_big_run_has_torch_on_one_thread_and_half_matmuls_only_inside(torch_on,
                                                                         monkeypatch):
    monkeypatch.setattr(cast, "_half_on", False)
    saved = torch_on.get_num_threads()
    torch_on.set_num_threads(2)
    try:
        with cast.torch_run(True):
            assert torch_on.get_num_threads() == 1 and cast.half_matmuls()
        assert torch_on.get_num_threads() == 2 and not cast.half_matmuls()
        with cast.torch_run(False):           # a small program: nothing changes
            assert torch_on.get_num_threads() == 2 and not cast.half_matmuls()
    finally:
        torch_on.set_num_threads(saved)
