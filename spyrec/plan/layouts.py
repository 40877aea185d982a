"""Layouts a planning step builds for a buffer: dense with the stick on one host dim, or sparse.

Shared by two passes: stick_layout's search offers these as candidates for every buffer, and
matmul_padding lays out the padded copy of a matmul operand the same way. It lives in plan/ so
that neither pass imports the other (matmul_padding used to import the search module).
"""

from __future__ import annotations

from functools import lru_cache

from spyrec.ir import Buffer
from spyrec.layout.device_layout import SPARSE, DeviceLayout, stick_layout


def layout_with_stick(buf: Buffer, stick_dim: int | None) -> DeviceLayout:
    """Dense layout sticked on host dim `stick_dim`, or stick-sparse when it is None."""
    return _layout_with_stick(tuple(buf.host_size), tuple(buf.host_strides), buf.host_dtype,
                              stick_dim)


@lru_cache(maxsize=1 << 12)
def _layout_with_stick(host_size: tuple, host_strides: tuple, host_dtype: str,
                       stick_dim: int | None) -> DeviceLayout:
    """`layout_with_stick` on hashable facts (memoized: every state of the beam and every
    layer of a stack asks for the same few layouts; a DeviceLayout is immutable)."""
    rank = len(host_size)
    order = list(range(rank)) + [SPARSE] if stick_dim is None else \
        [d for d in range(rank) if d != stick_dim] + [stick_dim]
    return stick_layout(host_size, host_strides, host_dtype, order)
