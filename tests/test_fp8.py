"""spyrec/fp8.py against eager PyTorch: every bit pattern decodes to torch's value, and float32
values (random over the whole range, ties, subnormals, overflow, inf, NaN) encode to torch's
bit pattern, for both device formats."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from spyrec.fp8 import E4M3, E5M2

TORCH = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
FORMATS = [E4M3, E5M2]


def torch_bits(fmt, values: np.ndarray) -> np.ndarray:
    return torch.from_numpy(values.astype(np.float32)).to(TORCH[fmt.name]).view(
        torch.uint8).numpy()


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_bit_pattern_decodes_as_torch(fmt):
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    want = bits.view(TORCH[fmt.name]).float().numpy()
    got = fmt.decode(bits.numpy())
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])
    assert np.array_equal(np.signbit(got[~np.isnan(got)]), np.signbit(want[~np.isnan(want)]))


def edge_values(fmt) -> np.ndarray:
    """Every value, every midpoint between neighbours (ties) and a hair either side of it,
    past the largest value, infinities, zeros of both signs."""
    grid = np.unique(fmt.table[np.isfinite(fmt.table)].astype(np.float64))
    mids = (grid[1:] + grid[:-1]) / 2
    top = fmt.max_finite
    extra = [top * 1.01, top * 1.5, top * 2, 1e30, np.inf, -np.inf, 0.0, -0.0]
    vals = np.concatenate([grid, mids, np.nextafter(mids.astype(np.float32), np.inf),
                           np.nextafter(mids.astype(np.float32), -np.inf), extra])
    return vals.astype(np.float32)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_ties_overflow_and_zeros_encode_as_torch(fmt):
    values = edge_values(fmt)
    np.testing.assert_array_equal(fmt.encode(values), torch_bits(fmt, values))


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_nan_encodes_to_a_nan(fmt):
    assert np.isnan(fmt.round(np.array([np.nan, -np.nan], np.float32))).all()


def test_e4m3_saturates_and_e5m2_overflows_to_inf():
    """The two overflow rules, with numbers: torch's e4m3fn conversion is saturating."""
    big = np.array([464.0, 1e6, np.inf, -np.inf], np.float32)
    assert E4M3.round(big).tolist() == [448.0, 448.0, 448.0, -448.0]
    assert E5M2.round(np.array([61439.0, 61440.0, np.inf], np.float32)).tolist() == \
        [57344.0, np.inf, np.inf]


@settings(deadline=None, max_examples=15)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from(FORMATS))
def test_random_float32_values_encode_as_torch(seed, fmt):
    """4,096 random float32 bit patterns (any exponent) and 4,096 values in the format's own
    range per example."""
    rng = np.random.default_rng(seed)
    wide = rng.integers(0, 2 ** 32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32)
    near = (rng.standard_normal(4096) * np.exp2(rng.uniform(-20, 17, 4096))).astype(np.float32)
    for values in (wide[~np.isnan(wide)], near):
        np.testing.assert_array_equal(fmt.encode(values), torch_bits(fmt, values))
