"""The lowering registry: aten op name -> the function that lowers it.

Lowering modules (`aten_*.py`) register with `@lowering(...)` when imported; `lowerable` and the
driver import them all on first use (they import this module, so not at the top). This module
holds only the table, so the front end's loader can ask "is this op known?" without pulling in
the lowering context or driver.
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


def lowerable(target: str) -> bool:
    """Whether the lowering knows `target` (an aten op name as `Program` spells it)."""
    register_lowerings()
    return target in LOWERINGS or target in PASSTHROUGH


def register_lowerings() -> None:
    """Import every module that registers lowerings."""
    from spyrec.frontend import aten_mutation, aten_ops, aten_reductions  # noqa: F401
    from spyrec.frontend import aten_training  # noqa: F401
    from spyrec.frontend import aten_conv, aten_moe, aten_scan  # noqa: F401
