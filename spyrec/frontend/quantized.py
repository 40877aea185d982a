"""8-bit weights that stay 8-bit on the device (DESIGN §3, issue 60).

A model exports an 8-bit weight-only linear as the weight's conversion and a multiply by its
scale in forward (`w.to(torch.float16) * scale`, per tensor, per output channel, per group or
per block), then the matmul. Folding that at compile time would store the 16-bit product in
`weights.bin` (twice the bytes every decode step reads), so the weight is kept: float8 weights
are never folded (their payload is bit patterns, `fold._constant_roots`), and an int8 weight
that a conversion to a float dtype reads is not folded either (`kept_int8_weights`). The
lowering then sees the conversion and the multiply, and `passes/dequant_matmul.py` makes them
the matmul's own on-chip conversion of each weight tile.
"""

from __future__ import annotations

from spyrec.frontend.program import Program, TensorMeta

EIGHT_BIT_WEIGHTS = ("int8", "float8_e4m3fn", "float8_e5m2")


def kept_int8_weights(program: Program) -> set[str]:
    """Placeholder names of int8 state some node converts to a float dtype (a dequantization:
    the weight stays 8-bit on the device rather than folded into a 16-bit constant)."""
    kept = set()
    for spec in program.inputs:
        if spec.kind not in ("parameter", "buffer", "constant") or spec.target is None:
            continue
        if program.state_dtypes.get(program.aliases.get(spec.target, spec.target)) != "int8":
            continue
        if any(_float_result(u) for u in program.users(spec.name)):
            kept.add(spec.name)
    return kept


def _float_result(node) -> bool:
    val = node.meta.get("val")
    return isinstance(val, TensorMeta) and val.dtype in ("float16", "bfloat16", "float32")
