"""log1p and softplus, composed from device ops with eager's results at the edges.

The device has `log` but no `log1p`, and `log(1 + x)` loses every digit of a small x (1 + 1e-8
is 1 in float32). Goldberg's identity keeps them: with u = 1 + x rounded,
`log1p(x) = log(u) * x / (u - 1)` when u != 1, and x itself when u == 1 (where log1p(x) = x to
within the format's precision). The ratio x / (u - 1) corrects the rounding of u, so the
result is within a few ulps of the true value everywhere. The edges as eager gives them:
log1p(-1) = log(0) * 1 = -inf, x < -1 gives log of a negative (NaN), NaN stays NaN, and
+inf is selected as itself (the ratio inf/inf would be NaN). Computed in float32, rounded once
to the output dtype, as eager's CPU kernel does for fp16/bf16.

softplus(x, beta, threshold) is torch's own decomposition: x where x * beta > threshold, else
log1p(exp(x * beta)) / beta (Mamba's and every state-space model's step size).
"""

from __future__ import annotations

from spyrec.frontend.aten_pointwise import FLOAT_MAX, binary
from spyrec.frontend.context import LoweringContext
from spyrec.frontend.registry import lowering
from spyrec.frontend.views import TensorValue

FP32 = "float32"


@lowering("aten.log1p.default")
def _log1p(ctx, node, x):
    return log1p(ctx, x, ctx.out_meta()[1])


def log1p(ctx: LoweringContext, x: TensorValue, out_dtype: str) -> TensorValue:
    u = binary(ctx, "add", x, 1.0, out_dtype=FP32)
    d = binary(ctx, "sub", u, 1.0, out_dtype=FP32)
    ratio = binary(ctx, "realdiv", x, d, out_dtype=FP32)
    logu = ctx.pointwise("log", [u], out_dtype=FP32)
    y = binary(ctx, "mul", logu, ratio, out_dtype=FP32)
    unit = binary(ctx, "equal", d, 0.0, out_dtype="bool")
    y = ctx.pointwise("where3", [unit, x, y], out_dtype=FP32)
    big = binary(ctx, "greaterthan", x, FLOAT_MAX[FP32], out_dtype="bool")
    return ctx.pointwise("where3", [big, x, y], out_dtype=out_dtype)


@lowering("aten.softplus.default")
def _softplus(ctx, node, x, beta=1, threshold=20):
    out_dtype = ctx.out_meta()[1]
    z = x if beta == 1 else binary(ctx, "mul", x, float(beta), out_dtype=FP32)
    e = ctx.pointwise("exp", [z], out_dtype=FP32)
    soft = log1p(ctx, e, FP32)
    if beta != 1:
        soft = binary(ctx, "realdiv", soft, float(beta), out_dtype=FP32)
    linear = binary(ctx, "greaterthan", z, float(threshold), out_dtype="bool")
    return ctx.pointwise("where3", [linear, x, soft], out_dtype=out_dtype)
