"""The device op vocabulary, as data: every op name an `Operation` may carry, and its family.

Decision (issue 12 §2): **the IR is a plain record; there is no ops-handler layer.** An
`Operation` is exactly one device op (one OpSpec): its operands, index tensors, output, ranges
and constants are declared fields. Analyses read those fields directly —
`Operation.reads()`/`writes()` for dependencies, `ir/printer.py` and `ir/parser.py` for the
text form, `ir/verify.py` for invariants, `codegen/` and the cost model for their outputs.

Why not Inductor's define-by-run bodies (seed 002)? Those pay off when one node holds a whole
fused scalar program (loads, several arithmetic ops, masks, a store) that each analysis must
interpret. Ours never did: every body was the same fixed template (index reads, loads, one op,
one store), so a handler re-derived the fields it was built from, and a closure cannot be
compared, printed exactly or parsed back, which the textual IR needs (`parse(print(g)) == g`).
If fusion arrives (several scalar ops per device op), the body should come back as data — a
small expression tree on `Operation`, printed and parsed like index expressions — rather than
as a Python function over a dynamically scoped handler.

The semantics of each op are in docs/formats.md; the simulator's kernels implement them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpKind:
    family: str     # pointwise | compare | reduction | matmul | copy | fill | index
    arity: int      # tensor operands (a scalar in op_info may stand for one)


_POINTWISE_1 = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid",
                "cos", "sin",
                "relufwd", "silu", "floor", "ceil", "sign", "gelufwd", "pow", "clip")
_POINTWISE_2 = ("add", "sub", "mul", "realdiv", "maximum", "minimum",
                "truncdiv", "floordiv", "remainder", "fmod", "powtensor")
_COMPARE = ("equal", "notequal", "greaterthan", "greaterequal", "lesserthan", "lesserequal")

DEVICE_OPS: dict[str, OpKind] = {
    **{name: OpKind("pointwise", 1) for name in _POINTWISE_1},
    **{name: OpKind("pointwise", 2) for name in _POINTWISE_2},
    **{name: OpKind("compare", 2) for name in _COMPARE},
    "where3": OpKind("pointwise", 3),
    "sum": OpKind("reduction", 1), "max": OpKind("reduction", 1),
    "min": OpKind("reduction", 1), "mean": OpKind("reduction", 1),
    "argmax": OpKind("reduction", 1), "argmin": OpKind("reduction", 1),
    # a third operand: the scale of an 8-bit second operand, converted on chip
    # (constants["dequantize"] == "scale", passes/dequant_matmul.py)
    "batchmatmul": OpKind("matmul", 3),
    "identity": OpKind("copy", 1), "ReStickifyOpHBM": OpKind("copy", 1),
    "fill": OpKind("fill", 0),
    # out = v + size if v < 0 else v, for v in -size..size-1; any other v is a fault naming the
    # index tensor and position (constants: size, index_tensor, index_shape, used_by)
    "wrapindex": OpKind("index", 1),
}

# Ops whose reduced var may be split across cores (a K-split): each core reduces its part and
# the partials combine into the result in HBM (sum, mean and matmul by addition — mean's
# scale is 1/N of the whole range on every core — max and min by themselves). argmax/argmin
# do not: a partial index says nothing without its value.
PARTIAL_SUMS = frozenset({"sum", "mean", "max", "min", "batchmatmul"})
