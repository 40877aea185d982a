"""The two ops Granite Speech's conformer encoder adds: the gated linear unit of its
convolution module and `expand_as` where it places audio features.

glu(x, dim) = a * sigmoid(b) with (a, b) the two halves of x along `dim` (views: no copy),
computed in float32 and rounded once, as eager's CPU kernel does for fp16/bf16.
"""

from __future__ import annotations

from spyrec.frontend.registry import lowering

FP32 = "float32"


@lowering("aten.glu.default")
def _glu(ctx, node, x, dim=-1):
    dim %= x.rank
    half = x.shape[dim] // 2
    if x.shape[dim] % 2:
        ctx.refuse(f"over an odd dim ({x.shape[dim]})", "glu halves its dim: make it even")
    a, b = x.slice(dim, 0, half), x.slice(dim, half, 2 * half)
    gate = ctx.pointwise("sigmoid", [b], out_dtype=FP32)
    return ctx.pointwise("mul", [a, gate], out_dtype=ctx.out_meta()[1])


@lowering("aten.expand_as.default")
def _expand_as(ctx, node, x, other):
    return x.expand(other.shape)
