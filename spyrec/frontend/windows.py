"""Sliding windows over an NCHW input, shared by convolution (`aten_conv.py`) and pooling
(`aten_pooling.py`): the window geometry, and the channels-last copy every tap reads from.

A tap (kh, kw) of a window reads input row oh*stride + kh*dilation (and likewise for columns).
Copying the input once channels-last puts the channels in the lanes, so every tap is a view of
whole sticks whatever its stride: a stride in the lanes, or two variables at one stride (the
sliding window `oh*s + kh` read NCHW), has no SuperDSC form.
"""

from __future__ import annotations

from dataclasses import dataclass

from spyrec.frontend.context import LoweringContext, iteration_vars, names_of
from spyrec.frontend.views import TensorValue
from spyrec.indexing import var
from spyrec.ir import Access


def pair(v, n: int) -> list[int]:
    """An int or a list as `n` ints (torch repeats a single value over the spatial dims)."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(x) for x in (v * n if len(v) == 1 else v)]


@dataclass(frozen=True)
class Geometry:
    """A 2-D convolution or pooling window: sizes (H, W in, OH, OW out) and per-dim kernel,
    stride, padding and dilation."""

    h: int
    w: int
    oh: int
    ow: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    dil: tuple[int, int]

    @property
    def taps(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(self.kernel[0]) for j in range(self.kernel[1])]


def channels_last(ctx: LoweringContext, x: TensorValue, g: Geometry, fill: float,
                  size: tuple[int, int] | None = None) -> TensorValue:
    """x [N, C, H, W] copied to a fresh [N, Hp, Wp, C] buffer at offset `pad`, the border
    filled with `fill` (border regions only). Channels last puts the channels in the lanes,
    so every tap below reads whole sticks whatever its stride (a stride in the lanes has no
    SuperDSC form), and the matmul's K (channels) is already the stick dim."""
    n, c, h, w = x.shape
    hp, wp = size or (h + 2 * g.pad[0], w + 2 * g.pad[1])
    out = ctx.new_value([n, hp, wp, c], x.dtype, role="padded")
    cv = iteration_vars(range(4))
    p0, p1 = g.pad
    for (r0, r1), (c0, c1) in (((0, p0), (0, wp)), ((p0 + h, hp), (0, wp)),
                               ((p0, p0 + h), (0, p1)), ((p0, p0 + h), (p1 + w, wp))):
        if r1 > r0 and c1 > c0:
            ctx.emit("fill", out, list(zip(names_of(cv), [n, r1 - r0, c1 - c0, c])), [],
                     out.at([cv[0], cv[1] + r0, cv[2] + c0, cv[3]]), constants={"value": fill})
    ctx.emit("identity", out, list(zip(names_of(cv), [n, h, w, c])),
             [Access(x.buffer, x.at([cv[0], cv[3], cv[1], cv[2]]))],
             out.at([cv[0], cv[1] + p0, cv[2] + p1, cv[3]]))
    return out


def tap_view(xp: TensorValue, g: Geometry, kh: int, kw: int) -> TensorValue:
    """What tap (kh, kw) reads of the channels-last padded input: a view [N, OH, OW, C]."""
    n, _, _, c = xp.shape
    return xp.remap([n, g.oh, g.ow, c],
                    [var("v0"), var("v1").scale(g.stride[0]) + kh * g.dil[0],
                     var("v2").scale(g.stride[1]) + kw * g.dil[1], var("v3")])
