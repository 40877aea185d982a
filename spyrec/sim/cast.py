"""Converting copies for the simulator's reads: numpy's, or torch's vectorized ones when a
program is big enough to pay for importing torch.

Every op reads its operands into float32 (DESIGN §8); for a weight-bound program most of a
run is converting fp16 weights. numpy converts half floats one element at a time (2 ns per
element here), torch with vector instructions on all cores (0.8 ns): for a Granite-8B-width
decode step, 3.6 G elements, that is 7 s against under 3 s. The conversion is exact either
way (every fp16 value is a float32 value; a NaN stays NaN, torch only quiets a signaling
NaN's payload, which no op observes), so the choice changes no number, only time.
Importing torch costs ~1.5 s, which the faster copy repays from about 1.25 G elements (2.5 GB
of fp16 weights), so the runner turns it on only for programs with at least
`TORCH_CASTS_FROM_BYTES` of weights (`use_torch_casts`), and smaller runs stay torch-free.
"""

from __future__ import annotations

import warnings

import numpy as np

TORCH_CASTS_FROM_BYTES = 3 << 30     # weights in weights.bin: the import pays off from ~2.5 GB
_MIN_ELEMENTS = 1 << 18              # below this numpy's fixed cost is lower

_torch = None


def use_torch_casts() -> bool:
    """Import torch for the big casting copies; False where torch is not installed."""
    global _torch
    if _torch is None:
        try:
            import torch
        except ImportError:
            return False
        _torch = torch
    return True


def cast_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src converted to dst's dtype (same shape; src may be any strided view)."""
    if (_torch is not None and dst.size >= _MIN_ELEMENTS and src.dtype == np.float16
            and dst.dtype == np.float32 and dst.flags.c_contiguous):
        # axes of one element (a strided read's unused vars: stride 0) are dropped first
        squeezed = src[tuple(0 if n == 1 else slice(None) for n in src.shape)]
        if all(s > 0 for s in squeezed.strides):
            with warnings.catch_warnings():    # a read-only source: torch only reads it
                warnings.simplefilter("ignore", UserWarning)
                source = _torch.from_numpy(squeezed)
            _torch.from_numpy(dst.reshape(squeezed.shape)).copy_(source)
            return
    np.copyto(dst, src, casting="unsafe")
