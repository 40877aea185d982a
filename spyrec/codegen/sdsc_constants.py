"""A scalar constant of an op as SuperDSC writes it in `constantInfo_` (F §2.8): its
`dataFormat_` and the code of its bits, IEEE-754 for fp32, DLFloat16 for the 16-bit formats,
two's complement for an integer op. A value DLFloat16 would round keeps fp32, so eager's
numbers stay reachable. Used by `codegen/superdsc.py`.
"""

from __future__ import annotations

import math
import struct

from spyrec.plan.sdsc_dims import NotExpressible


def encode_constant(value: int | float, op_format: str) -> tuple[str, int]:
    """(dataFormat_, code) of a scalar constant (F §2.8): IEEE-754 bits for fp32, DLFloat16 bits
    for the 16-bit formats, two's complement for an integer constant of an integer op. A float
    constant of an integer op is IEEE_FP32 (torch promotes the op to float), and so is one
    that DLFloat16 would round."""
    integer_op = op_format in ("IEEE_INT32", "SENUINT32", "SENINT8")
    if integer_op and isinstance(value, int):
        if not -2**31 <= value < 2**31:
            raise NotExpressible(f"constant {value} does not fit int32")
        return "IEEE_INT32", value & 0xFFFFFFFF
    fp32 = "IEEE_FP32", struct.unpack("<I", struct.pack("<f", float(value)))[0]
    if op_format == "IEEE_FP32" or integer_op:
        return fp32
    code = dlfloat16_bits(float(value))
    # a value DLFloat16 cannot hold exactly (0.7, 0.1) keeps fp32 precision: its own
    # dataFormat_ says so, and eager's numbers (which use the exact scalar) stay reachable
    return (op_format, code) if _dlfloat16_exact(float(value), code) else fp32


def _dlfloat16_exact(x: float, code: int) -> bool:
    if math.isnan(x) or math.isinf(x):
        return True
    sign = -1.0 if code & 0x8000 else 1.0
    body = code & 0x7FFF
    if body == 0:
        return x == 0
    return sign * (1 + (body & 0x1FF) / 512) * 2.0 ** ((body >> 9) - 31) == x


def dlfloat16_bits(x: float) -> int:
    """DLFloat16 (SEN169): sign, 6-bit exponent biased by 31, 9-bit mantissa, no subnormals,
    0x7FFF the one NaN/infinity code (we write -inf as 0xFFFF), round to nearest even,
    saturating at the largest finite value (1+510/512)·2^32."""
    if math.isnan(x):
        return 0x7FFF
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if math.isinf(a):
        return sign | 0x7FFF
    if a == 0:
        return sign
    m, e = math.frexp(a)            # a = m·2^e, m in [0.5, 1)
    exp = e - 1                     # a = (2m)·2^exp, 2m in [1, 2)
    mant = (2 * m - 1) * 512
    q = math.floor(mant)
    rest = mant - q
    if rest > 0.5 or (rest == 0.5 and q % 2):
        q += 1
    if q == 512:
        q, exp = 0, exp + 1
    biased = exp + 31
    if biased < 0:
        return sign                 # below the smallest normal: flushed to zero
    if biased > 63 or (biased == 63 and q > 510):
        return sign | 0x7FFE        # saturate at the largest finite value
    return sign | (biased << 9) | q
