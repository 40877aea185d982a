"""`torch._scaled_mm`: a matmul of two 8-bit float operands with their scales (issue 60).

It runs and exports on CPU in the pinned torch (activations quantized in forward,
`x.to(torch.float8_e4m3fn)`, times an 8-bit weight). Eager's CPU kernel converts both operands
to float32, multiplies, scales by `scale_a * scale_b` (per tensor) and adds the bias, then
rounds once to `out_dtype`. Here: one `batchmatmul` reading both operands in their 8-bit
device format (decoded exactly on chip, float32 accumulation, a float32 result), then the
scales and the bias as pointwise ops on that product, and the conversion to `out_dtype`. The
scales multiply the product instead of each operand, which differs from eager by float32
roundings only. Row-wise scales (a [M, 1] `scale_a`, a [1, N] `scale_b`) broadcast the same way.
"""

from __future__ import annotations

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.aten_pointwise import binary
from spyrec.frontend.aten_reductions import matmul
from spyrec.frontend.registry import lowering


@lowering("aten._scaled_mm.default")
def _scaled_mm(ctx, node, a, b, scale_a, scale_b, bias=None, scale_result=None,
               out_dtype=None, use_fast_accum=False):
    if scale_result is not None:
        raise UnsupportedProgram(f"{node.name}: torch._scaled_mm with scale_result (an 8-bit "
                                 f"output) is not supported; pass out_dtype=torch.float16, "
                                 f"bfloat16 or float32")
    shape, dtype = ctx.out_meta()
    product = matmul(ctx, a, b, "float32")
    product = binary(ctx, "mul", product, scale_a, out_dtype="float32")
    product = binary(ctx, "mul", product, scale_b, out_dtype="float32")
    if bias is not None:
        product = binary(ctx, "add", product, bias, out_dtype="float32")
    if dtype == "float32":
        return product
    return ctx.pointwise("identity", [product], out_dtype=dtype, shape=shape)
