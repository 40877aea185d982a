"""Elementwise kernels against PyTorch eager, fp16 and fp32, on [4,100] (a padded stick)."""

import numpy as np
import pytest
import torch

from tests.sim.builder import elementwise

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "exp": torch.exp, "log": torch.log,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relufwd": torch.relu,
    "silu": torch.nn.functional.silu, "floor": torch.floor,
}
EXACT = {"neg", "abs", "relufwd", "floor"}
POSITIVE = {"log", "sqrt", "rsqrt"}


def run(out, **inputs):
    return out.run(inputs).outputs[0]


def data(rng, dtype, shape=(4, 100), positive=False, scale=3.0):
    x = rng.standard_normal(shape) * scale
    if positive:
        x = np.abs(x) + 0.01
    return x.astype(dtype)


def assert_matches(got, want, dtype, exact):
    want = want.numpy()
    assert got.dtype == want.dtype and got.shape == want.shape
    if exact:
        np.testing.assert_array_equal(got, want)
    else:   # numpy and torch transcendentals may differ in the last bit
        rtol = 1e-3 if dtype == np.float16 else 2e-6
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(out, rng, op, dtype):
    host = np.dtype(dtype).name
    x = data(rng, dtype, positive=op in POSITIVE)
    got = run(elementwise(out, op, {"x": host}, host), x=x)
    assert_matches(got, UNARY[op](torch.from_numpy(x)), dtype, op in EXACT)


BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "realdiv": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum,
}
COMPARE = {
    "equal": torch.eq, "notequal": torch.ne, "greaterthan": torch.gt,
    "greaterequal": torch.ge, "lesserthan": torch.lt, "lesserequal": torch.le,
}


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_is_bit_exact(out, rng, op, dtype):
    host = np.dtype(dtype).name
    a, b = data(rng, dtype), data(rng, dtype)
    got = run(elementwise(out, op, {"a": host, "b": host}, host), a=a, b=b)
    assert_matches(got, BINARY[op](torch.from_numpy(a), torch.from_numpy(b)), dtype, True)


@pytest.mark.parametrize("op", sorted(COMPARE))
def test_compares_give_bools(out, rng, op):
    a = data(rng, np.float16)
    b = np.where(rng.random(a.shape) < 0.3, a, data(rng, np.float16))   # some equal
    got = run(elementwise(out, op, {"a": "float16", "b": "float16"}, "bool"), a=a, b=b)
    assert_matches(got, COMPARE[op](torch.from_numpy(a), torch.from_numpy(b)), None, True)


@pytest.mark.parametrize("side", ["lhs", "rhs"])
@pytest.mark.parametrize("op", ["sub", "realdiv", "lesserthan"])
def test_scalar_operand(out, rng, op, side):
    """The scalar enters the fp32 computation as given (docs/formats.md). Eager rounds it to
    fp16 first for add/sub but not for mul/div, so eager agrees only to 1 fp16 ulp."""
    x = data(rng, np.float16)
    s = 0.3
    fn = {"sub": np.subtract, "realdiv": np.divide, "lesserthan": np.less}[op]
    xf, sf = x.astype(np.float32), np.float32(s)
    contract = fn(sf, xf) if side == "lhs" else fn(xf, sf)
    out_dtype = "bool" if op == "lesserthan" else "float16"
    got = run(elementwise(out, op, {"x": "float16"}, out_dtype,
                          constants={"scalar": s, "scalar_side": side}), x=x)
    assert np.array_equal(got, contract.astype(got.dtype))
    t = torch.from_numpy(x)
    eager = {"sub": torch.sub, "realdiv": torch.div, "lesserthan": torch.lt}[op]
    want = eager(torch.full_like(t, s, dtype=torch.float32), t.float()) if side == "lhs" \
        else eager(t, s)
    np.testing.assert_allclose(got.astype(np.float32), want.to(torch.float32).numpy(),
                               rtol=1e-3, atol=1e-3)


def test_add_with_alpha(out, rng):
    a, b = data(rng, np.float16), data(rng, np.float16)
    got = run(elementwise(out, "add", {"a": "float16", "b": "float16"}, "float16",
                          constants={"alpha": 0.5}), a=a, b=b)
    assert_matches(got, torch.add(torch.from_numpy(a), torch.from_numpy(b), alpha=0.5),
                   np.float16, True)


def test_maximum_propagates_nan(out):
    a = np.full((4, 100), 1.0, dtype=np.float32)
    b = np.zeros((4, 100), dtype=np.float32)
    a[1, 7] = np.nan
    b[2, 99] = np.nan
    got = run(elementwise(out, "maximum", {"a": "float32", "b": "float32"}, "float32"), a=a, b=b)
    assert np.isnan(got[1, 7]) and np.isnan(got[2, 99]) and np.isnan(got).sum() == 2


def test_where3(out, rng):
    cond = rng.random((4, 100)) < 0.5
    a, b = data(rng, np.float32), data(rng, np.float32)
    got = run(elementwise(out, "where3", {"c": "bool", "a": "float32", "b": "float32"},
                          "float32"), c=cond, a=a, b=b)
    assert np.array_equal(got, np.where(cond, a, b))


def test_where3_with_scalar_branch(out, rng):
    cond = rng.random((4, 100)) < 0.5
    b = data(rng, np.float16)
    got = run(elementwise(out, "where3", {"c": "bool", "b": "float16"}, "float16",
                          constants={"a_scalar": -np.inf}), c=cond, b=b)
    assert np.array_equal(got, np.where(cond, np.float16(-np.inf), b))


@pytest.mark.parametrize("lo, hi", [(-0.5, 0.5), (None, 0.25), (-1.0, None), (1.0, -1.0)])
def test_clip_follows_torch_clamp(out, rng, lo, hi):
    x = data(rng, np.float16)
    x[0, 0] = np.nan
    got = run(elementwise(out, "clip", {"x": "float16"}, "float16",
                          constants={"clipMin": lo, "clipMax": hi}), x=x)
    assert_matches(got, torch.clamp(torch.from_numpy(x), lo, hi), np.float16, True)


@pytest.mark.parametrize("exponent", [2, 0.5, -1.5])
def test_pow(out, rng, exponent):
    x = data(rng, np.float32, positive=True)
    got = run(elementwise(out, "pow", {"x": "float32"}, "float32",
                          constants={"exponent": exponent}), x=x)
    assert_matches(got, torch.pow(torch.from_numpy(x), exponent), np.float32, False)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(out, rng, approximate, dtype):
    host = np.dtype(dtype).name
    x = data(rng, dtype)
    got = run(elementwise(out, "gelufwd", {"x": host}, host,
                          constants={"approximate": approximate}), x=x)
    want = torch.nn.functional.gelu(torch.from_numpy(x), approximate=approximate)
    assert_matches(got, want, dtype, False)


def test_integer_ops_stay_integer(out, rng):
    a = rng.integers(-2**30, 2**30, (4, 100), dtype=np.int32)
    b = rng.integers(-2**30, 2**30, (4, 100), dtype=np.int32)
    got = run(elementwise(out, "maximum", {"a": "int32", "b": "int32"}, "int32"), a=a, b=b)
    assert got.dtype == np.int32 and np.array_equal(got, np.maximum(a, b))


def test_integer_overflow_is_a_fault_not_a_wrap(out):
    a = np.full((4, 100), 2**30, dtype=np.int64)
    from spyrec.errors import SimulatorFault
    with pytest.raises(SimulatorFault, match=r"output 'out' of sdsc_0.json \(add 'add_0'.*"
                                             r"value 2147483648 does not fit int32"):
        run(elementwise(out, "add", {"a": "int64", "b": "int64"}, "int64"), a=a, b=a)


def test_fp16_results_round_once(out):
    # 1 + 2**-11 is exactly between two fp16 values: fp32 compute then one rounding (to even)
    a = np.full((4, 100), 1.0, dtype=np.float16)
    b = np.full((4, 100), 2.0**-11, dtype=np.float16)
    got = run(elementwise(out, "add", {"a": "float16", "b": "float16"}, "float16"), a=a, b=b)
    assert (got == np.float16(1.0)).all()
    assert np.array_equal(got, (torch.from_numpy(a) + torch.from_numpy(b)).numpy())
