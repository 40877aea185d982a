"""The simulator's `sign`/`ceil` kernels against eager, and its one rule for storing a float as
an integer: truncation with saturation, never a fault (docs/formats.md, "Storing a float result
as an integer"). T5 casts `log(0)` = -inf to int64 and then discards it with a `where`: the
store must not stop the run."""

import numpy as np
import pytest
import torch

from spyrec.sim.numerics import to_storage
from tests.sim.builder import elementwise

SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 2.5, -2.5, 1e30, -1e30]


def run(out, **inputs):
    return out.run(inputs).outputs[0]


def _special(dtype, rng, shape=(4, 100)):
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    with np.errstate(over="ignore"):  # 1e30 is inf in fp16
        x.flat[:len(SPECIAL)] = np.array(SPECIAL, dtype=np.float32).astype(dtype)
    return x


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("op", ["sign", "ceil"])
def test_sign_and_ceil_equal_eager_bit_for_bit(out, rng, op, dtype):
    """NaN, ±0 and ±inf included: torch.sign(NaN) = 0 and sign(-0.0) = +0 (np.sign differs),
    ceil(-0.5) = -0.0."""
    host = np.dtype(dtype).name
    x = _special(dtype, rng)
    got = run(elementwise(out, op, {"x": host}, host), x=x)
    want = getattr(torch, op)(torch.from_numpy(x)).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.view(np.uint16 if dtype == np.float16 else np.uint32),
                                  want.view(np.uint16 if dtype == np.float16 else np.uint32))


@pytest.mark.parametrize("op", ["sign", "ceil", "floor"])
def test_sign_ceil_floor_of_integers_stay_integers(out, rng, op):
    x = rng.integers(-2**30, 2**30, (4, 100), dtype=np.int32)
    got = run(elementwise(out, op, {"x": "int32"}, "int32"), x=x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, getattr(torch, op)(torch.from_numpy(x)).numpy())


def test_a_float_stored_as_int_saturates_instead_of_faulting(out):
    """NaN -> 0, ±inf and out-of-range values -> the int32 ends, the rest truncates."""
    values = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, 0.0], dtype=np.float32)
    x = np.resize(values, (4, 100)).astype(np.float32)
    got = run(elementwise(out, "identity", {"x": "float32"}, "int32"), x=x)
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    np.testing.assert_array_equal(got.flat[:8], [0, hi, lo, hi, lo, 2, -2, 0])


def test_the_saturation_rule_holds_for_every_int_storage():
    lo, hi = np.iinfo(np.int8).min, np.iinfo(np.int8).max
    got = to_storage(np.array([np.nan, np.inf, -np.inf, 300.0, -300.0, -1.9]), "int8", "t")
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, [0, hi, lo, hi, lo, -1])


def test_an_integer_that_does_not_fit_is_still_a_fault():
    """Saturation is for floats only: int64 values are stored as int32 or refused (DESIGN §3)."""
    from spyrec.errors import SimulatorFault

    with pytest.raises(SimulatorFault, match="does not fit int32"):
        to_storage(np.array([2**31], dtype=np.int64), "int32", "t")


def test_argmax_without_a_dim_counts_real_points_not_padding_lanes(tmp_path):
    """argmax of an fp32 [3, 5] without a dim: the inner reduced var is padded to a whole stick
    (32 lanes) on the device; the flat index is over the 15 real points (it was 1*32 + c)."""
    import torch

    from tests.differential.harness import run_and_compare

    class ArgMax(torch.nn.Module):
        def forward(self, x):
            return torch.argmax(x), torch.argmin(x.transpose(0, 1))

    x = torch.randn(3, 5)
    x[2, 3] = 10.0
    x[1, 4] = -10.0
    run_and_compare(tmp_path, ArgMax(), (x,), frontend="fast")


@pytest.mark.parametrize("device", ["fp16", "fp32"])
@pytest.mark.parametrize("source", [np.float16, np.float32, np.float64])
def test_assigning_floats_rounds_as_to_storage_bit_for_bit(rng, device, source):
    """`assignable` hands float values to a float output unconverted (the executor stores
    them in the one assignment that writes them): that assignment rounds exactly as
    `to_storage` does, NaN payloads, overflow to inf, subnormals and ties included."""
    from spyrec.sim.numerics import assignable, storage_dtype

    bits = rng.integers(0, 1 << 32, 4096, dtype=np.uint64).astype(np.uint32)
    with np.errstate(all="ignore"):
        values = np.concatenate([
            bits.view(np.float32).astype(source),                # every kind of float32
            (rng.standard_normal(4096) * 1e-6).astype(source),   # fp16 subnormals
            np.array(SPECIAL + [65520.0, 65519.99, 2.0 ** -25, 2.0 ** -24 * 1.5],
                     dtype=source)])
        want = to_storage(values, device, "test")
        given = assignable(values, device, "test")
        got = np.empty(values.shape, dtype=storage_dtype(device))
        got[...] = given
    assert given is values or given.base is values
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_assigning_to_an_integer_output_still_goes_through_to_storage():
    """Float into int saturates and int out of range faults: `assignable` keeps that path."""
    from spyrec.errors import SimulatorFault
    from spyrec.sim.numerics import assignable

    assert assignable(np.array([np.nan, -np.inf, 3.7]), "int32", "x").tolist() == [
        0, np.iinfo(np.int32).min, 3]
    with pytest.raises(SimulatorFault):
        assignable(np.array([1 << 40]), "int32", "x")
