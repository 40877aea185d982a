"""The argmax/argmin, truncdiv/floordiv and powtensor kernels from hand-written sdsc files
(docs/formats.md op table), against PyTorch eager; padded sticks are NaN-filled, so a kernel
that read padding would pick a NaN."""

import numpy as np
import pytest
import torch

from spyrec.errors import SimulatorFault
from tests.sim.builder import elementwise

X_STICK_R0 = ["floor(r0/64)", "c0", "Mod(r0, 64)"]     # x[c0, r0], default layout of [64, 100]
SPARSE_INT = dict(device_size=[1, 64, 32], stride_map=[-1, 1, -1])


def run(out, **inputs):
    return out.run(inputs).outputs


def ties_and_nans(rng, shape, dtype):
    x = rng.integers(-3, 4, shape).astype(dtype)      # many exact ties
    x[5, 99] = np.nan                                   # last real lane of a padded stick
    x[7, [10, 40]] = np.nan                             # two NaNs: the first wins
    return x


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argreduce_the_stick_dim_first_tie_and_nan_win(out, rng, op):
    x = ties_and_nans(rng, (64, 100), np.float16)
    out.input("x", [64, 100])
    out.output("i", [64], "int64", **SPARSE_INT)
    out.op(op, {"c0": 64, "r0": 100}, [("x", X_STICK_R0), ("i", ["0", "c0", "0"])],
           reduced=["r0"], split={"c0": 4})
    (got,) = run(out, x=x)
    want = getattr(torch, op)(torch.from_numpy(x), 1).numpy()
    assert got.dtype == np.int64 and (got[[5, 7]] == [99, 10]).all()
    np.testing.assert_array_equal(got, want)


def test_argmin_over_two_reduced_vars_is_row_major_in_reduced_order(out, rng):
    """out[c0] = argmin over (r0, r1) of x[r0, c0, r1]: flat index r0 * 70 + r1."""
    x = rng.standard_normal((3, 8, 70)).astype(np.float32)
    out.input("x", [3, 8, 70], "float32")
    out.output("i", [8], "int64")
    out.op("argmin", {"c0": 8, "r0": 3, "r1": 70},
           [("x", ["c0", "floor(r1/32)", "r0", "Mod(r1, 32)"]),
            ("i", ["floor(c0/32)", "Mod(c0, 32)"])], reduced=["r0", "r1"])
    (got,) = run(out, x=x)
    want = torch.from_numpy(x).permute(1, 0, 2).reshape(8, -1).argmin(1).numpy()
    np.testing.assert_array_equal(got, want)
    assert (got >= 70).any()          # the r0 part of the index is really exercised


def test_argmax_of_an_input_broadcast_along_the_reduced_var_is_zero(out):
    """x[c0] read at every r0: all values tie, so the first position (0) wins."""
    x = np.arange(8, dtype=np.float32)[::-1].copy()
    out.input("x", [8], "float32")
    out.output("i", [8], "int64")
    out.op("argmax", {"c0": 8, "r0": 5}, [("x", ["floor(c0/32)", "Mod(c0, 32)"]),
                                          ("i", ["floor(c0/32)", "Mod(c0, 32)"])],
           reduced=["r0"])
    (got,) = run(out, x=x)
    np.testing.assert_array_equal(got, np.zeros(8, np.int64))


DIVS = {"truncdiv": "trunc", "floordiv": "floor"}


@pytest.mark.parametrize("op", sorted(DIVS))
def test_float_rounding_division_by_zero_and_python_floor(out, op):
    a = np.zeros((4, 100), np.float32)
    b = np.ones((4, 100), np.float32)
    a[0, :8] = [1, -1, 0, 5.5, -5.5, 7, -7, np.inf]
    b[0, :8] = [0, 0, 0, 0.1, 0.1, -2, 2, 3]
    (got,) = run(elementwise(out, op, {"a": "float32", "b": "float32"}, "float32"), a=a, b=b)
    want = torch.div(torch.from_numpy(a), torch.from_numpy(b), rounding_mode=DIVS[op]).numpy()
    np.testing.assert_array_equal(got, want)          # NaN == NaN here, and -0.0 == 0.0
    assert np.array_equal(np.signbit(got), np.signbit(want))
    if op == "floordiv":
        assert got[0, 3] == 54 and np.floor(a[0, 3] / b[0, 3]) == 55   # not floor(a / b)


@pytest.mark.parametrize("op", sorted(DIVS))
def test_fp16_rounding_division_steps_round_to_fp16(out, rng, op):
    a = (rng.standard_normal((4, 100)) * 30).astype(np.float16)
    b = rng.standard_normal((4, 100)).astype(np.float16)
    want = torch.div(torch.from_numpy(a), torch.from_numpy(b), rounding_mode=DIVS[op]).numpy()
    in_fp32 = torch.div(torch.from_numpy(a).float(), torch.from_numpy(b).float(),
                        rounding_mode=DIVS[op]).half().numpy()
    assert (want != in_fp32).any()    # the fp16 steps matter for these inputs
    elementwise(out, op, {"a": "float16", "b": "float16"}, "float16",
                constants={"intermediate_dtype": "fp16"})
    (got,) = run(out, a=a, b=b)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", sorted(DIVS))
def test_integer_division_is_exact_and_faults_on_zero(tmp_path, op):
    from tests.sim.builder import OutDir

    a = np.arange(-200, 200, dtype=np.int32).reshape(4, 100)
    b = np.tile(np.array([3, -3, 7, -1, 2], np.int32), 80).reshape(4, 100)
    out = elementwise(OutDir(tmp_path / "ok"), op, {"a": "int32", "b": "int32"}, "int32")
    (got,) = run(out, a=a, b=b)
    want = torch.div(torch.from_numpy(a), torch.from_numpy(b), rounding_mode=DIVS[op]).numpy()
    np.testing.assert_array_equal(got, want)
    b[2, 50] = 0
    out = elementwise(OutDir(tmp_path / "zero"), op, {"a": "int32", "b": "int32"}, "int32")
    with pytest.raises(SimulatorFault, match="integer division by zero"):
        run(out, a=a, b=b)


def test_powtensor_float_specials_and_scalar_base(out):
    base = np.full((4, 100), 2.0, np.float32)
    exp = np.full((4, 100), 0.5, np.float32)
    base[0, :6] = [1, -2, 0, np.nan, 2, -8]
    exp[0, :6] = [np.nan, 0.5, -1, 0, 3, 1 / 3]
    (got,) = run(elementwise(out, "powtensor", {"a": "float32", "b": "float32"}, "float32"),
                 a=base, b=exp)
    want = torch.pow(torch.from_numpy(base), torch.from_numpy(exp)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got[0, 0] == 1 and np.isnan(got[0, 1]) and got[0, 2] == np.inf and got[0, 3] == 1


def test_powtensor_integer_negative_exponents(tmp_path):
    from tests.sim.builder import OutDir

    base = np.tile(np.array([2, 1, -1, 0, -3, 5], np.int32), 67)[:400].reshape(4, 100)
    exp = np.tile(np.array([-1, -2, -3, 0, 3, 4, 2], np.int32), 58)[:400].reshape(4, 100)
    out = elementwise(OutDir(tmp_path / "o"), "powtensor", {"a": "int32", "b": "int32"},
                      "int32")
    (got,) = run(out, a=base, b=exp)
    np.testing.assert_array_equal(got, torch.pow(torch.from_numpy(base),
                                                 torch.from_numpy(exp)).numpy())
    scalar = elementwise(OutDir(tmp_path / "s"), "powtensor", {"b": "int32"}, "int32",
                         constants={"scalar": 3, "scalar_side": "lhs"})
    (got,) = run(scalar, b=np.abs(exp))
    np.testing.assert_array_equal(got, 3 ** np.abs(exp).astype(np.int64))
