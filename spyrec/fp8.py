"""8-bit floats <-> float32 on the host: the two formats the device stores, torch's rounding.

numpy has no 8-bit float, so fp8 values are uint8 bit patterns wherever they are stored (a
`.pt2`'s weights, `weights.bin`, the simulator's device memory) and float32 where anything
computes with them. The device formats are `SEN143_FP8` (e4m3: torch.float8_e4m3fn) and
`SEN152_FP8` (e5m2: torch.float8_e5m2), 128 elements per stick (reference/A-layout.md §1,
C-simulator.md "Data formats"). Decoding is exact (every fp8 value is a float32).

Encoding follows eager PyTorch's CPU conversion, which `tests/test_fp8.py` checks on every bit
pattern and on random and edge float32 values: round to nearest, ties to even, and
- e4m3fn (no infinities; S.1111.111 is its only NaN) **saturates**: every finite value past
  448 and ±inf become ±448;
- e5m2 (IEEE-like) rounds past its largest finite value (57,344) to ±inf from the midpoint
  61,440 on, as a wider exponent would;
- NaN stays NaN (0x7F; e5m2 0x7F as well), -0.0 keeps its sign.
The reference documents no rounding or saturation rule for the device's own conversions
(`qfp8ch`, `fp8todl16`: reference/A §3.8, F; the host converter it describes saturates
DLFloat16 constants, F §3.7), so torch's is the rule here. A-layout.md §1 calls SEN152 "e5m2fnuz"
in one row; torch's e5m2fnuz (no -0, NaN at 0x80, bias 16) is a different format and is
refused by name (frontend/quant_check.py), as torch.float8_e5m2 is what the formats table and
the reference's `torch_spyre.rst` map SEN152 to.

A leaf: imports nothing of spyrec.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class Fp8Format:
    """One 8-bit float format: its field widths and what its top codes mean."""

    name: str            # our device dtype name
    exponent_bits: int
    mantissa_bits: int
    has_inf: bool        # e5m2: overflow rounds to inf; e4m3fn (none): it saturates
    nan_bits: int        # the NaN pattern written for a NaN (positive)

    @property
    def bias(self) -> int:
        return (1 << (self.exponent_bits - 1)) - 1

    @cached_property
    def table(self) -> np.ndarray:
        """float32 value of each of the 256 bit patterns."""
        codes = np.arange(256, dtype=np.int64)
        sign = np.where(codes & 0x80, -1.0, 1.0)
        exp = (codes >> self.mantissa_bits) & ((1 << self.exponent_bits) - 1)
        man = codes & ((1 << self.mantissa_bits) - 1)
        scale = float(1 << self.mantissa_bits)
        normal = (1.0 + man / scale) * np.exp2(exp - self.bias)
        sub = (man / scale) * np.exp2(1 - self.bias)
        values = sign * np.where(exp == 0, sub, normal)
        top = exp == (1 << self.exponent_bits) - 1
        if self.has_inf:        # IEEE-like: all-ones exponent is inf (man 0) or NaN
            values = np.where(top & (man == 0), sign * np.inf, values)
            values = np.where(top & (man != 0), np.nan, values)
        else:                   # fn: only all-ones exponent and mantissa is NaN
            values = np.where(top & (man == (1 << self.mantissa_bits) - 1), np.nan, values)
        return values.astype(np.float32)

    @cached_property
    def _magnitudes(self) -> tuple[np.ndarray, np.ndarray]:
        """The non-negative values a magnitude may round to, ascending, and their codes (for
        e5m2 inf is the step after the largest finite value, so the midpoint rounds to it)."""
        positive = self.table[:128]
        finite = np.flatnonzero(np.isfinite(positive))
        values = positive[finite].astype(np.float64)
        codes = finite.astype(np.uint8)
        if self.has_inf:
            step = values[-1] - values[-2]
            values = np.append(values, values[-1] + step)
            codes = np.append(codes, np.uint8(1 << 7) - np.uint8(1 << self.mantissa_bits))
        return values, codes

    @property
    def max_finite(self) -> float:
        return float(np.nanmax(np.where(np.isfinite(self.table), self.table, np.nan)))

    def decode(self, bits) -> np.ndarray:
        """uint8 bit patterns -> the float32 values they denote (exact)."""
        return self.table[np.asarray(bits, dtype=np.uint8)]

    def encode(self, values) -> np.ndarray:
        """float values -> bit patterns (uint8), rounded as torch rounds (module docstring)."""
        x = np.asarray(values, dtype=np.float32).astype(np.float64)
        mag = np.abs(x)
        grid, codes = self._magnitudes
        # past the grid: e4m3fn's largest finite value (saturation), e5m2's inf
        mag = np.minimum(mag, grid[-1])
        hi = np.clip(np.searchsorted(grid, np.nan_to_num(mag)), 1, len(grid) - 1)
        lo = hi - 1
        below, above = mag - grid[lo], grid[hi] - mag
        pick_hi = (above < below) | ((above == below) & (codes[hi] % 2 == 0))
        out = np.where(pick_hi, codes[hi], codes[lo]).astype(np.uint8)
        out = np.where(np.signbit(x), out | np.uint8(0x80), out).astype(np.uint8)
        return np.where(np.isnan(x), np.uint8(self.nan_bits), out).astype(np.uint8)

    def round(self, values) -> np.ndarray:
        """float values -> the nearest values of this format, as float32."""
        return self.decode(self.encode(values))


E4M3 = Fp8Format("fp8_e4m3", 4, 3, has_inf=False, nan_bits=0x7F)
E5M2 = Fp8Format("fp8_e5m2", 5, 2, has_inf=True, nan_bits=0x7F)
FORMATS = {f.name: f for f in (E4M3, E5M2)}
