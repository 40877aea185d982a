"""Device limits a lowered program must respect, checked once after lowering.

Lowering builds buffers of any rank; the device's default layout takes host tensors of rank
at most 6 (reference/A-layout.md, "Max host rank for the default layout": rank > 6 is
"Unsupported tensor rank"; `spyrec.layout.device_layout.MAX_HOST_RANK`). Checking here turns
what would be a ValueError deep in the layout search into one UnsupportedProgram that lists
every offending tensor with its source line.
"""

from __future__ import annotations

from spyrec.errors import UnsupportedProgram
from spyrec.layout.device_layout import MAX_HOST_RANK


def check_limits(graph) -> None:
    """UnsupportedProgram listing every buffer whose host rank exceeds the device's."""
    too_deep = [b for b in graph.buffers.values() if len(b.host_size) > MAX_HOST_RANK]
    if not too_deep:
        return
    rows = "; ".join(f"'{b.name}' {list(b.host_size)} (rank {len(b.host_size)}"
                     f"{', ' + b.source if b.source else ''})" for b in too_deep)
    raise UnsupportedProgram(f"tensors of rank above {MAX_HOST_RANK}, the device's limit "
                             f"(reference/A-layout.md): {rows}; reshape them to at most "
                             f"{MAX_HOST_RANK} dims (merge adjacent dims) before exporting")
