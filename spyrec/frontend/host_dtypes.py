"""Host dtype rules as eager applies them, in numpy: the numpy dtype of each torch dtype, casts,
type promotion, and how eager's kernels take a Python scalar next to a tensor.

Constant folding (`folders.py`) computes with these, and the lowering uses `cast` for the few
values it converts at compile time (a Python float rounded to fp16/bf16, a folded conv
weight), so a value is rounded the same way wherever spyrec rounds it on the host. bf16 values
travel as float32 arrays holding exact bf16 values, rounded by `spyrec/bf16.py` (torch's
rule, the one the simulator uses too).
"""

from __future__ import annotations

import numpy as np

from spyrec.bf16 import round_to_bf16


class NotFoldable(Exception):
    """This call (an argument form the numpy folder does not handle) stays for the lowering."""


NP_DTYPES = {"bool": np.bool_, "uint8": np.uint8, "int8": np.int8, "int16": np.int16,
             "int32": np.int32, "int64": np.int64, "uint16": np.uint16, "uint32": np.uint32,
             "uint64": np.uint64, "float16": np.float16, "bfloat16": np.float32,
             "float32": np.float32, "float64": np.float64}
"""The dtypes folding computes in: numpy holds their values and eager's rules for them are
these. A dtype outside it is never a folding result, and a value of one is never read as
numbers, except the CONVERTED_ONLY ones by a conversion: float8 (every kind) arrives as raw
bytes, whose integer reading is not its value."""
CONVERTED_ONLY = ("complex64", "complex128")
"""Dtypes numpy holds exactly but whose arithmetic folding does not reproduce (eager's
complex kernels): a constant of one is folded only where it is converted to a dtype of
NP_DTYPES, as eager converts it (its real part; `!= 0` of both parts for bool)."""
ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
            "uint16": 2, "uint32": 4, "uint64": 8, "float16": 2, "bfloat16": 2, "float32": 4,
            "float64": 8, "complex32": 4, "complex64": 8, "complex128": 16,
            "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
            "float8_e8m0fnu": 1}
FLOATS = ("float16", "bfloat16", "float32", "float64")
WIDE_UNSIGNED = {"uint16": 2 ** 16, "uint32": 2 ** 32, "uint64": 2 ** 64}


def cast(x, dtype: str) -> np.ndarray:
    """`x` converted to torch dtype `dtype` as eager converts (float -> int truncates, anything
    -> bool is `!= 0`, complex -> real takes the real part, double -> fp16/bf16 goes through
    float32). NaN, ±inf and out-of-range floats go to signed ints and uint8 through numpy's
    astype, the same machine conversion eager's kernels use (x86: INT_MIN for int32/int64, its
    low bits for narrower ints; measured on torch 2.13); to uint16/32/64 only values in range
    fold (the conversion of others is undefined in C, so eager's result is the machine's)."""
    if dtype not in NP_DTYPES:
        raise NotFoldable(f"dtype {dtype}")
    x = np.asarray(x)
    if dtype == "bool":
        return x if x.dtype == np.bool_ else x != 0
    if x.dtype.kind == "c":
        x = x.real
    if dtype in WIDE_UNSIGNED and x.dtype.kind == "f" and x.size and \
            not (np.all(x > -1) and np.all(x < WIDE_UNSIGNED[dtype])):
        raise NotFoldable(f"float values outside {dtype}'s range")
    with np.errstate(invalid="ignore", over="ignore"):  # out of range -> inf, as eager
        if dtype in ("float16", "bfloat16") and x.dtype not in (np.float16, np.float32):
            x = x.astype(np.float32)
        if dtype == "bfloat16":
            return round_to_bf16(x.astype(np.float32, copy=False))
        return x.astype(NP_DTYPES[dtype], copy=False)


def category(dtype: str) -> int:
    """0 bool, 1 integer, 2 float: eager's promotion categories."""
    return 0 if dtype == "bool" else 2 if dtype in FLOATS else 1


def _promote_pair(a: str, b: str) -> str:
    if a == b:
        return a
    if category(a) != category(b):
        return a if category(a) > category(b) else b
    if category(a) == 2:
        if {a, b} == {"float16", "bfloat16"}:
            return "float32"
        return max(a, b, key=FLOATS.index)
    return str(np.promote_types(NP_DTYPES[a], NP_DTYPES[b]))


def promote(dtypes: list[str]) -> str | None:
    """Eager's result dtype of operands of these dtypes (None for none)."""
    out = None
    for d in dtypes:
        out = d if out is None else _promote_pair(out, d)
    return out


def scalar_dtype(value) -> str:
    """The dtype eager gives a Python number in type promotion."""
    return "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else "float32"


def opmath(value, dtype: str):
    """A Python scalar as eager's kernels use it next to a `dtype` tensor (fp16/bf16 kernels
    compute in float32)."""
    if category(dtype) == 2:
        return np.float64(np.float32(value)) if dtype != "float64" else np.float64(value)
    return np.asarray(value).astype(NP_DTYPES[dtype])
