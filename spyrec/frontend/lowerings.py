"""The complete lowering table: every `aten_*.py` module imported, so `registry.LOWERINGS`
holds them all.

The lowering modules import `registry` (the table and its decorator), never this module, so
the table is filled without an import circle. The imports happen on first use, not when this
module is imported: the front end's loader (`load.py`) and constant folding (`fold.py`) ask
`lowerable` without paying for the lowering modules until they do.
"""

from __future__ import annotations

from spyrec.frontend.registry import LOWERINGS, PASSTHROUGH


def register_lowerings() -> None:
    """Import every module that registers lowerings (`tests/frontend/test_lowerings.py` fails
    when one is missing here)."""
    from spyrec.frontend import aten_copies, aten_pointwise, aten_views  # noqa: F401
    from spyrec.frontend import aten_mutation, aten_reductions, aten_training  # noqa: F401
    from spyrec.frontend import aten_batch_norm, aten_conv, aten_pooling  # noqa: F401
    from spyrec.frontend import aten_moe, aten_scan  # noqa: F401
    from spyrec.frontend import aten_scaled_mm  # noqa: F401
    from spyrec.frontend import aten_einsum, aten_log1p, aten_norms, aten_padding  # noqa: F401
    from spyrec.frontend import aten_conformer, aten_scatter_views  # noqa: F401


def lowerable(target: str) -> bool:
    """Whether the lowering knows `target` (an aten op name as `Program` spells it)."""
    register_lowerings()
    return target in LOWERINGS or target in PASSTHROUGH
