"""Pin numpy's BLAS to one thread for the simulator's matmuls.

The simulator runs many small batched products (attention heads, per-token projections).
OpenBLAS's thread pool makes those 10x slower when the cores are busy (measured: 4 x 127x64x127
fp32 takes 4.2 ms with the default pool against 0.46 ms single-threaded, and PyTorch eager 1.5
ms), and a one-thread GEMM accumulates in a fixed order, so results do not depend on load.
numpy has no API for this; like threadpoolctl, call the setter the bundled OpenBLAS exports.
"""

from __future__ import annotations

import ctypes
import glob
import os
from functools import lru_cache

import numpy as np

# Setter names exported by the OpenBLAS builds numpy wheels bundle (scipy-openblas, 64-bit
# ints), then plain OpenBLAS.
_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads")


@lru_cache(maxsize=1)
def single_threaded_blas() -> bool:
    """Limit numpy's OpenBLAS to one thread (once per process); False where it cannot."""
    setter = _find_setter()
    if setter is None:
        return False
    setter(1)
    return True


def _find_setter():
    libs_dir = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    candidates = sorted(glob.glob(os.path.join(libs_dir, "*openblas*.so*")))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _SETTERS:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                return fn
    return None
