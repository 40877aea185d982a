"""Numeric storage rules of the simulated device: numpy dtypes, fill patterns, one rounding.

Every op computes in float32 (integers in int64) and rounds **once** when it stores to the
output's device dtype (DESIGN §8). That single store is `to_storage`, so the rounding rule lives
in one place: IEEE half for fp16 (what PyTorch eager does on CPU; the hardware's DLFloat16 is
not emulated, reference/C-simulator.md §5.7), truncation toward zero for float → int (torch
`.to(int)`) with **saturation** (NaN → 0, −inf and values below the range → the int minimum,
+inf and values above → the int maximum: the device's conversion, never a fault, because
models compute such values and then discard them with a `where`, T5's `log(0)` position
buckets), and an error instead of a silent wrap when an *integer* does not fit (the device
stores int64 as int32, DESIGN §3).

bf16 never exists on the device (it is stored as fp16); it only appears at the host edge, as
uint16 bit patterns, because numpy has no bfloat16 dtype.
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import SimulatorFault
from spyrec.fp8 import FORMATS as FP8_FORMATS
from spyrec.layout.storage import FILL_VALUE, STORAGE  # noqa: F401

# Device dtypes the simulator can store and what unwritten device memory holds: one
# definition, shared with the compiler's weight writer. fp8 is stored as its bit patterns:
# `decoded` on every read, `to_storage` encodes (spyrec/fp8.py: torch's rounding).

def storage_dtype(device_dtype: str) -> np.dtype:
    """The numpy dtype that holds `device_dtype` elements; a fault for formats not simulated."""
    try:
        return STORAGE[device_dtype]
    except KeyError:
        raise SimulatorFault(
            f"device dtype {device_dtype} is not simulated yet (supported: "
            f"{', '.join(STORAGE)})") from None


def is_integer(device_dtype: str) -> bool:
    return storage_dtype(device_dtype).kind == "i"


def to_storage(values: np.ndarray, device_dtype: str, what: str) -> np.ndarray:
    """`values` rounded once to the device storage dtype.

    `what` names the destination in error messages (for example "output 'add_1' of
    sdsc_3.json"). Floats go to ints by `float_to_int` (truncation, saturating); integers that
    do not fit are faults rather than a silent wrap.
    """
    target = storage_dtype(device_dtype)
    values = np.asarray(values)
    if device_dtype in FP8_FORMATS:
        return FP8_FORMATS[device_dtype].encode(values)
    if target.kind == "f":
        if values.dtype.kind in "iub":
            values = values.astype(np.float64)  # ints > 2**24 round once, not twice
        with np.errstate(over="ignore", invalid="ignore"):
            return values.astype(target)
    if values.dtype.kind == "f":
        return float_to_int(values, target)
    _check_int_range(values, target, device_dtype, what)
    return values.astype(target)


def decoded(stored: np.ndarray, device_dtype: str, dtype: np.dtype | None) -> np.ndarray:
    """Values read from device memory as `dtype`: fp8 bit patterns become their float32
    values (exact) first; anything else is converted as numpy converts."""
    if device_dtype in FP8_FORMATS:
        return FP8_FORMATS[device_dtype].decode(stored).astype(dtype or np.float32,
                                                                copy=False)
    return stored if dtype is None else stored.astype(dtype, copy=False)


def assignable(values: np.ndarray, device_dtype: str, what: str) -> np.ndarray:
    """`values` ready to be assigned into a `device_dtype` array: float values as they are
    when the device dtype is a float too, since numpy's assignment then rounds them exactly
    as `to_storage` does (the same IEEE cast, round to nearest even, NaN kept), in the one
    pass that writes them (a Granite-8B-width layer stored every output twice: converted to
    a new array, then copied into place); anything else through `to_storage`."""
    values = np.asarray(values)
    if values.dtype.kind == "f" and storage_dtype(device_dtype).kind == "f":
        return values
    return to_storage(values, device_dtype, what)


def float_to_int(values: np.ndarray, target: np.dtype) -> np.ndarray:
    """The device's float → int conversion: truncation toward zero, saturating at the ends of
    `target` (NaN → 0, ±inf → max/min). Eager on x86 gives INT_MIN for every value that does
    not fit instead; both only matter for values a model discards, which is why this is a
    rule and not a fault (docs/formats.md, "Storing a float result as an integer")."""
    info = np.iinfo(target)
    with np.errstate(invalid="ignore"):
        clipped = np.clip(np.trunc(values.astype(np.float64)), info.min, info.max)
    return np.where(np.isnan(clipped), 0, clipped).astype(target)


def _check_int_range(values: np.ndarray, target: np.dtype, device_dtype: str,
                     what: str) -> None:
    if not values.size or values.dtype.kind == "b":
        return
    info = np.iinfo(target)
    lo, hi = values.min(), values.max()
    if lo < info.min or hi > info.max:
        bad = lo if lo < info.min else hi
        raise SimulatorFault(f"{what}: value {int(bad)} does not fit {device_dtype} "
                             f"[{info.min}, {info.max}] (the device stores int64 as int32; "
                             f"values are never wrapped)")
