"""The lowering registry: aten op name -> the function that lowers it.

Lowering modules (`aten_*.py`) register with `@lowering(...)` when imported. This module holds
only the table and the decorator and imports nothing of spyrec, so every lowering module can
import it; `lowerings.py` imports the lowering modules (filling the table) and answers "is this
op known?".
"""

from __future__ import annotations

from typing import Callable

Lowering = Callable[..., object]
LOWERINGS: dict[str, Lowering] = {}
# Ops run only for their checks in eager; they lower to nothing.
PASSTHROUGH = {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
               "aten.sym_constrain_range_for_size.default"}


def lowering(*names: str):
    """Register a function `(ctx, node, *args, **kwargs) -> value` for these aten ops."""
    def register(fn: Lowering) -> Lowering:
        for name in names:
            LOWERINGS[name] = fn
        return fn
    return register
