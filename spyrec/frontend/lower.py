"""The lowering API in one import, for the `aten_*.py` lowering modules and older callers.

The pieces live in their own modules: `registry.py` (the aten-name -> lowering table),
`context.py` (what a lowering uses to emit ops), `sources.py` (source lines), `names.py` (buffer
and op names) and `driver.py` (the walk over a program). This module only re-exports them.
"""

from spyrec.frontend.context import (
    EMPTY_REDUCTION_VALUE, LoweringContext, Scalar, Unlowered, contiguous_value, host_dtype,
    iteration_vars, names_of,
)
from spyrec.frontend.driver import lower_program
from spyrec.frontend.registry import LOWERINGS, PASSTHROUGH, Lowering, lowerable, lowering
from spyrec.frontend.sources import source_of

__all__ = ["EMPTY_REDUCTION_VALUE", "LOWERINGS", "PASSTHROUGH", "Lowering", "LoweringContext",
           "Scalar", "Unlowered", "contiguous_value", "host_dtype", "iteration_vars",
           "lower_program", "lowerable", "lowering", "names_of", "source_of"]
