"""torch's vectorized kernels for the simulator's big programs: converting copies and
half-precision matmuls, used when a program is big enough to pay for importing torch.

Copies. Every op reads its operands into float32 (DESIGN §8); for a weight-bound program
most of a run is converting fp16 weights. numpy converts half floats one element at a time
(2 ns per element here), torch with vector instructions (0.8 ns): for a Granite-8B-width
decode step, 3.6 G elements, that is 7 s against under 3 s. The conversion is exact either
way (every fp16 value is a float32 value; a NaN stays NaN, torch only quiets a signaling
NaN's payload, which no op observes), so the choice changes no number, only time.

Matmuls. A batchmatmul of fp16 operands into an fp16 output is the device's product: exact
products, float32 accumulation, one rounding to fp16 at the end (DESIGN §8). numpy can only
do that by converting both operands to float32 and calling sgemm; torch's CPU fp16 matmul
does it on the half values directly (oneDNN, float32 accumulation: a sum of 16,384 ones is
16,384, where fp16 accumulation stops at 2,048): 128 x 4096 @ 4096 x 12800, a Granite-8B
MLP projection, takes 0.081 s on one thread against 0.21 s converted to float32. Only the
order of the float32 additions differs from numpy's sgemm, which DESIGN §8 leaves open
(BLAS picks it either way): 0.4% of the outputs of such a product round to the neighbouring
fp16 value, with the same largest error against the exact product. The results do not
depend on torch's thread count (tests/sim/test_torch_kernels.py), as the simulator's chunks
do not (sim/executor.py).

Threads. The simulator's chunks already run on every core (sim/threads.py), and each thread
that calls torch would start an OpenMP team of its own whose workers spin between calls: a
Granite-8B-width prefill spent 15 of its 52 CPU-seconds spinning while the ops waited for
weights from disk. The runner therefore keeps torch on one thread for the run
(`torch_run`), giving the caller's setting back afterwards.

Importing torch costs ~1.5 s, which the faster kernels repay from about 1.25 G elements
(2.5 GB of fp16 weights), so the runner turns them on only for programs with at least
`TORCH_FROM_BYTES` of weights (`use_torch`), and smaller runs stay torch-free.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

TORCH_FROM_BYTES = 3 << 30           # weights in weights.bin: the import pays off from ~2.5 GB
_MIN_ELEMENTS = 1 << 18              # below this numpy's fixed cost is lower

_torch = None
_half_on = False      # inside `torch_run`


def use_torch() -> bool:
    """Import torch for the big copies and half matmuls; False where it is not installed."""
    global _torch
    if _torch is None:
        try:
            import torch
        except ImportError:
            return False
        _torch = torch
    return True


@contextlib.contextmanager
def torch_run(enabled: bool):
    """Run with torch's half matmuls on and its intra-op thread count at 1 (module
    docstring) when `enabled` (a program with GBs of weights) and torch can be imported;
    the caller's thread count and the previous state come back afterwards. Half matmuls
    are on only inside, so a small program run after a big one in the same process
    (`spyrec.run` twice) still multiplies as it does alone."""
    global _half_on
    if not enabled or not use_torch():
        yield
        return
    saved = _torch.get_num_threads(), _half_on
    _torch.set_num_threads(1)
    _half_on = True
    try:
        yield
    finally:
        _torch.set_num_threads(saved[0])
        _half_on = saved[1]


def half_matmuls() -> bool:
    """Whether fp16 matmuls go to `half_matmul` now (inside `torch_run`), so their operands
    may be read as they are stored instead of converted."""
    return _half_on


def cast_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src converted to dst's dtype (same shape; src may be any strided view).
    fp16 into fp16 too: a half matmul's weight is rearranged into (K, N) this way, and
    torch's copy of a strided fp16 view is faster than numpy's (105 MB of Granite's MLP
    weight: 0.022 s against 0.036 s)."""
    if (_torch is not None and dst.size >= _MIN_ELEMENTS and src.dtype == np.float16
            and dst.dtype in (np.float32, np.float16) and dst.flags.c_contiguous):
        # axes of one element (a strided read's unused vars: stride 0) are dropped first
        squeezed = src[tuple(0 if n == 1 else slice(None) for n in src.shape)]
        if all(s > 0 for s in squeezed.strides):
            _torch.from_numpy(dst.reshape(squeezed.shape)).copy_(_tensor(squeezed))
            return
    np.copyto(dst, src, casting="unsafe")


def half_matmul(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """(B, M, K) @ (B, K, N) of fp16 arrays as fp16: float32 accumulation, one rounding
    (module docstring). Only after `use_torch`."""
    return _torch.bmm(_tensor(xs), _tensor(ys)).numpy()


def _tensor(values: np.ndarray):
    """A tensor over `values`' memory (read-only arrays too: torch only reads them here)."""
    if any(s < 0 for s in values.strides):
        values = np.ascontiguousarray(values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return _torch.from_numpy(values)
