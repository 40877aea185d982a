"""The on-chip conversion of a matmul's 8-bit operand (passes/dequant_matmul.py).

A `batchmatmul` with `dequantize: scale` reads three operands: x, an 8-bit weight (int8,
fp8_e4m3, fp8_e5m2; decoded exactly as it is read) and its scale, read at the same points. The
weight tile is multiplied by its scale and rounded once to x's device dtype, the dtype eager's
`w.to(dtype) * scale` produced, and the product is then the matmul's second operand: the
numbers of the three ops it replaces, without their 16-bit copy in device memory.
"""

from __future__ import annotations

import numpy as np

from spyrec.sim.numerics import storage_dtype
from spyrec.sim.specs import OpSpec


def arity(constants: dict) -> int:
    """Value operands of a batchmatmul: 3 with a scale."""
    return 3 if constants.get("dequantize") == "scale" else 2


def dequantized(spec: OpSpec, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """`inputs` with the scaled weight in place of the weight and its scale (module
    docstring); unchanged for any other op."""
    if spec.op != "batchmatmul" or spec.constants.get("dequantize") != "scale":
        return inputs
    x, w, scale = inputs
    rounding = storage_dtype(spec.value_inputs[0].device_dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        product = np.multiply(w, scale, dtype=np.float32)
        return [x, product.astype(rounding).astype(np.float32, copy=False)]
