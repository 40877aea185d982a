"""`spyrec/bf16.py` against eager PyTorch: every bf16 pattern, and float32 patterns around
every rounding boundary.

Non-NaN values must give torch's bits exactly (`x.to(torch.bfloat16)`, the vectorized kernel,
and the scalar conversion alike). A NaN must stay a quiet NaN; its bits are c10's scalar
conversion's (0x7FC0), where the vectorized x86 kernel writes 0xFFFF (see the module).
"""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spyrec.bf16 import (
    QUIET_NAN_BITS, bf16_bits_to_float32, float32_to_bf16_bits, round_to_bf16,
)

HIGH = np.arange(1 << 16, dtype=np.uint32) << 16
# low halves: exact, just above, just below / at / just above the tie, the top, and a few more
LOW = np.array([0, 1, 0x3FFF, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF, 0x1234, 0xABCD],
               dtype=np.uint32)


def torch_bits(values: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def torch_scalar_bits(value: float) -> int:
    return torch.tensor(value, dtype=torch.bfloat16).view(torch.int16).item() & 0xFFFF


def is_quiet_nan(bits: np.ndarray) -> np.ndarray:
    return ((bits & 0x7F80) == 0x7F80) & ((bits & 0x0040) != 0)


def check_against_torch(patterns: np.ndarray) -> None:
    values = patterns.view(np.float32)
    ours, eager = float32_to_bf16_bits(values), torch_bits(values)
    nan = np.isnan(values)
    np.testing.assert_array_equal(ours[~nan], eager[~nan])
    assert (ours[nan] == QUIET_NAN_BITS).all()
    assert is_quiet_nan(eager[nan]).all() and is_quiet_nan(ours[nan]).all()


def test_every_high_half_with_boundary_low_halves_rounds_as_eager():
    check_against_torch((HIGH[:, None] | LOW[None, :]).ravel())


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.integers(0, 2 ** 32 - 1), min_size=1, max_size=64))
def test_any_float32_patterns_round_as_eager(patterns):
    check_against_torch(np.array(patterns, dtype=np.uint32))


@pytest.mark.parametrize("pattern", [0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
                                     0x7FFFFFFF, 0xFFFFFFFF, 0x7FA12345, 0xFFA12345])
def test_nan_gets_the_quiet_nan_of_torchs_scalar_conversion(pattern):
    value = np.array(pattern, dtype=np.uint32).view(np.float32)
    assert int(float32_to_bf16_bits(value)) == torch_scalar_bits(float(value)) == QUIET_NAN_BITS


def test_scalar_conversion_agrees_on_finite_values():
    rng = np.random.default_rng(0)
    patterns = rng.integers(0, 2 ** 32, 300, dtype=np.uint32)
    values = patterns.view(np.float32)
    values = values[~np.isnan(values)]
    ours = float32_to_bf16_bits(values)
    assert ours.tolist() == [torch_scalar_bits(float(v)) for v in values]


def test_every_bf16_pattern_decodes_as_eager():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    eager = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).to(torch.float32)
    ours = bf16_bits_to_float32(bits)
    np.testing.assert_array_equal(ours.view(np.uint32), eager.numpy().view(np.uint32))


def test_bf16_values_round_trip_and_round_to_bf16_is_the_composition():
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    values = bf16_bits_to_float32(bits)
    nan = np.isnan(values)
    np.testing.assert_array_equal(float32_to_bf16_bits(values)[~nan], bits[~nan])
    patterns = (HIGH[:, None] | LOW[None, :]).ravel().view(np.float32)
    np.testing.assert_array_equal(
        round_to_bf16(patterns).view(np.uint32),
        bf16_bits_to_float32(float32_to_bf16_bits(patterns)).view(np.uint32))


def test_shapes_and_dtypes():
    assert float32_to_bf16_bits(np.float32(1.5)).shape == ()
    assert float32_to_bf16_bits(np.ones((2, 3), np.float32)).dtype == np.uint16
    assert bf16_bits_to_float32(np.uint16(0x3FC0)).shape == ()
    assert float(round_to_bf16(np.float32(1.0 + 2 ** -9))) == 1.0  # a tie: to even
    assert float(round_to_bf16(np.float32(3.4e38))) == np.inf
    assert float32_to_bf16_bits(np.ones((4, 6), np.float32)[:, ::2]).shape == (4, 3)

