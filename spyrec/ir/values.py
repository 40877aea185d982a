"""Constant values a pass derives from another constant without reading it.

A constant's values stay in the `.pt2` archive until the weights writer streams them
(issue 26: never hold every weight); a pass that needs a constant in another shape (the
split_padding pass's zero-padded weight) records how to make it, and the writer makes it when it
writes that tensor, reading the original then.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PaddedConstant:
    """`base` (an array, or an archive reference with `.load()`) zero-padded after its end
    along each dim by `pad[d]` elements."""

    base: object
    pad: tuple[int, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n + p for n, p in zip(self.base.shape, self.pad))

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.base.dtype)

    def load(self) -> np.ndarray:
        base = self.base.load() if hasattr(self.base, "load") else np.asarray(self.base)
        return np.pad(base, [(0, p) for p in self.pad])

    def __array__(self, dtype=None, copy=None):
        out = self.load()
        return out if dtype is None else out.astype(dtype)
