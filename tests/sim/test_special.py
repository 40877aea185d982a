"""The torch-free erf: double-precision accurate, so float32 results are correctly rounded."""

import math

import numpy as np
import torch

from spyrec.sim.kernels.special import erf


def test_erf_matches_math_erf_to_double_precision():
    grid = np.concatenate([np.linspace(-8, 8, 160_001), np.logspace(-30, 0.8, 5000),
                           -np.logspace(-30, 0.8, 5000), [1.0, -1.0, 6.0, -6.0]])
    want = np.array([math.erf(v) for v in grid])
    got = erf(grid)
    assert got.dtype == np.float64
    rel = np.abs(got - want) / np.maximum(np.abs(want), np.finfo(np.float64).tiny)
    assert rel.max() < 1e-14


def test_float32_erf_is_correctly_rounded_and_within_one_ulp_of_torch():
    x = (np.random.default_rng(0).standard_normal(100_000) * 2.5).astype(np.float32)
    got = erf(x)
    assert got.dtype == np.float32
    exact = np.array([math.erf(float(v)) for v in x]).astype(np.float32)
    np.testing.assert_array_equal(got, exact)
    eager = torch.special.erf(torch.from_numpy(x)).numpy()
    assert np.abs(got.view(np.int32) - eager.view(np.int32)).max() <= 1


def test_erf_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 3.0e38], dtype=np.float32)
    got = erf(x)
    assert np.isnan(got[0]) and list(got[1:3]) == [1.0, -1.0]
    assert got[3] == 0 and np.signbit(got[4]) and got[5] > 0 and got[6] == 1.0
