"""Constant folders for norms and triangular masks (`folders.py` holds the table and the
dtype rules, and adds `NORM_FOLDERS` to it; this module imports nothing of it).

wav2vec2's and HuBERT's positional convolution stores its weight as a weight-norm
parametrization (`_weight_norm(v, g, dim)` over two parameters): folded, the convolution sees
one ordinary weight and the norm never runs on the device. A vector norm of weights folds the
same way. Floats are computed in float64 from operands rounded to the op's dtype and rounded
once, within an ulp of eager's float32 reduction.
"""

from __future__ import annotations

import numpy as np

from typing import Callable

from spyrec.frontend.host_dtypes import NotFoldable, cast, category

NORM_FOLDERS: dict[str, Callable[..., np.ndarray]] = {}


def folder(*names: str):
    def register(fn):
        for name in names:
            NORM_FOLDERS[name] = fn
        return fn
    return register


def _float_operand(c, x) -> np.ndarray:
    if not isinstance(x, np.ndarray) or category(c.out.dtype) != 2:
        raise NotFoldable("a norm of a non-float tensor")
    return cast(x, c.out.dtype).astype(np.float64)


def _norm(x: np.ndarray, order, axis, keepdims: bool) -> np.ndarray:
    order = float(order)
    with np.errstate(all="ignore"):
        if order == 2:
            return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))
        if order == 1:
            return np.sum(np.abs(x), axis=axis, keepdims=keepdims)
        if abs(order) == np.inf and x.size:
            pick = np.max if order > 0 else np.min
            return pick(np.abs(x), axis=axis, keepdims=keepdims)
        if order == 0:
            return np.sum(x != 0, axis=axis, keepdims=keepdims).astype(np.float64)
        if abs(order) != np.inf:
            return np.sum(np.abs(x) ** order, axis=axis, keepdims=keepdims) ** (1 / order)
    raise NotFoldable(f"a vector norm of order {order}")


@folder("aten.linalg_vector_norm.default")
def _vector_norm(c, x, ord=2, dim=None, keepdim=False, dtype=None):
    axis = tuple(dim) if isinstance(dim, (list, tuple)) and dim else \
        (dim if isinstance(dim, int) else None)
    return cast(_norm(_float_operand(c, x), ord, axis, keepdim), c.out.dtype)


@folder("aten._weight_norm.default")
def _weight_norm(c, v, g, dim=0):
    v64, g64 = _float_operand(c, v), _float_operand(c, g)
    axis = None if dim == -1 else tuple(d for d in range(v64.ndim) if d != dim % v64.ndim)
    with np.errstate(all="ignore"):
        return cast(v64 * (g64 / _norm(v64, 2, axis, True)), c.out.dtype)


@folder("aten.tril.default")
def _tril(c, x, diagonal=0):
    return np.tril(cast(x, c.out.dtype), int(diagonal))


@folder("aten.triu.default")
def _triu(c, x, diagonal=0):
    return np.triu(cast(x, c.out.dtype), int(diagonal))
