"""bfloat16 <-> float32 on the host: one conversion, one NaN rule, for all of spyrec.

numpy has no bfloat16, so bf16 values are uint16 bit patterns at the edges (a `.pt2`'s
weights, `weights.bin`, a run's inputs and outputs) and float32 arrays holding exact bf16 values
inside constant folding (`frontend/host_dtypes.py`) and the simulator's bf16 arithmetic. The
front end and the simulator both convert here; this module imports nothing of spyrec.

The rounding is eager PyTorch's (c10 `round_to_nearest_even`): to nearest, ties to even, and a
finite value past bf16's largest rounds to ±inf. A NaN becomes 0x7FC0, the quiet NaN that
c10's scalar conversion writes (`torch.tensor(nan, dtype=torch.bfloat16)`). Eager's vectorized
x86 kernels (`x.to(torch.bfloat16)`) write 0xFFFF instead, also a quiet NaN; neither keeps a
NaN's sign or payload, so only the bits of a NaN can differ from eager's, never that it is NaN
(`tests/test_bf16.py` checks both against torch).
"""

from __future__ import annotations

import numpy as np

QUIET_NAN_BITS = 0x7FC0


def float32_to_bf16_bits(values) -> np.ndarray:
    """float32 values -> bfloat16 bit patterns (uint16, same shape; 0-d stays 0-d)."""
    x = np.asarray(values, dtype=np.float32)
    u = x.view(np.uint32)
    with np.errstate(over="ignore"):  # NaN patterns near 0xFFFFFFFF wrap; replaced below
        rounded = ((u + (((u >> 16) & 1) + np.uint32(0x7FFF))) >> 16).astype(np.uint16)
    return np.asarray(np.where(np.isnan(x), np.uint16(QUIET_NAN_BITS), rounded))


def bf16_bits_to_float32(bits) -> np.ndarray:
    """bfloat16 bit patterns (uint16) -> the float32 values they denote (exact)."""
    return np.asarray(np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to_bf16(values) -> np.ndarray:
    """float32 values -> the nearest bf16 values, still as float32 (exact bf16 values)."""
    return bf16_bits_to_float32(float32_to_bf16_bits(values))
