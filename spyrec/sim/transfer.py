"""Host ↔ device transfers: a host array into its device layout and back.

The layout is the only description of where each host element lives, so the mapping is derived
from it with the same index algebra the compiler uses: the device coordinates of the flat host
index `sum(c_i * host_stride_i)` over iteration vars with the host extents
(`spyrec.indexing.device_coordinates`), evaluated on numpy aranges, one axis per host dim. That
gives every host element's device element offset in one vectorized step, never per element.

Device slots with no host element (partial sticks, sparse lanes) keep the NaN/sentinel the
arena was filled with: correct programs never read them. Device dims with stride_map 0 hold
replicas; every replica is written. Conversions: bf16 (uint16 bits on the host) and bool are
stored as fp16, int64 as int32 after a range check (never a silent wrap).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from spyrec.errors import InputFileError, SimulatorFault
from spyrec.indexing import device_coordinates, evaluate, var
from spyrec.layout import DeviceLayout
from spyrec.layout.device_layout import contiguous_strides
from spyrec.sim.memory import Hbm
from spyrec.sim.numerics import (
    bf16_bits_to_float32, float32_to_bf16_bits, storage_dtype, to_storage,
)
from spyrec.sim.specs import TensorSpec

# The numpy form of each host dtype at the edge (npz files, SimResult). bf16: uint16 bits.
HOST_NUMPY = {
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(np.uint16),
    "float32": np.dtype(np.float32),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "int8": np.dtype(np.int8),
    "bool": np.dtype(np.bool_),
}


@lru_cache(maxsize=16)
def _relative_offsets(host_shape: tuple[int, ...], layout: DeviceLayout) -> np.ndarray:
    """Device element offset (from the tensor base) of every host element, host-shaped."""
    rank = len(host_shape)
    if 0 in host_shape:  # an empty tensor has no element to place (and its layout tiles nothing)
        return np.zeros(host_shape, dtype=np.int64)
    strides = contiguous_strides(host_shape)
    names = [f"c{i}" for i in range(rank)]
    index = sum((var(n) * s for n, s in zip(names, strides)), var("c0") * 0)
    ranges = {n: (0, max(size, 1) - 1) for n, size in zip(names, host_shape)}
    coords = device_coordinates(host_shape, strides, 0, layout.device_size, layout.stride_map,
                                ranges, index)
    env = {}
    for i, (n, size) in enumerate(zip(names, host_shape)):
        shape = [1] * rank
        shape[i] = size
        env[n] = np.arange(size, dtype=np.int64).reshape(shape)
    offsets = np.zeros(host_shape, dtype=np.int64)
    for j, (coord, dev_size, dev_stride) in enumerate(
            zip(coords, layout.device_size, layout.device_strides_elems)):
        value = np.asarray(evaluate(coord, env), dtype=np.int64)
        if value.size and (value.min() < 0 or value.max() >= dev_size):
            raise SimulatorFault(f"layout {layout.to_json()} of a {list(host_shape)} tensor "
                                 f"puts device dim {j} coordinate {coord} outside "
                                 f"0..{dev_size - 1}")
        offsets = offsets + value * dev_stride
    # One-to-one by construction: device_coordinates rejects a layout that does not tile the
    # host dims (each read at granularity 1, extents that fit), so no duplicate check here.
    offsets = np.broadcast_to(offsets, host_shape)
    offsets.setflags(write=False)
    return offsets


def _replicas(layout: DeviceLayout) -> np.ndarray:
    """Offsets of the replicas of one slot along broadcast (stride_map 0) device dims."""
    extra = np.zeros(1, dtype=np.int64)
    for size, m, stride in zip(layout.device_size, layout.stride_map,
                               layout.device_strides_elems):
        if m == 0 and size > 1:
            extra = (extra[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    return extra


def element_offsets(t: TensorSpec) -> np.ndarray:
    """Absolute element offsets (in the typed arena view) of every host element of `t`."""
    itemsize = t.layout.dtype.itemsize
    try:
        relative = _relative_offsets(t.host_shape, t.layout)
    except ValueError as e:          # the index algebra cannot place the host dims at all
        raise SimulatorFault(f"tensor '{t.name}': {e}") from None
    except SimulatorFault as e:
        raise SimulatorFault(f"tensor '{t.name}': {e}") from None
    return relative + t.hbm_address // itemsize


def host_to_storage(t: TensorSpec, host: np.ndarray) -> np.ndarray:
    """Host values (npz form) converted to the device storage dtype, rounded once."""
    what = f"{t.role} '{t.name}'"
    if t.host_dtype == "bfloat16":
        host = bf16_bits_to_float32(host)
    elif t.host_dtype == "int64" and host.size:
        info = np.iinfo(np.int32)
        lo, hi = int(host.min()), int(host.max())
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise InputFileError(f"{what}: value {bad} does not fit int32, the device storage "
                                 f"of int64 (values are never wrapped)")
    return to_storage(host, t.layout.device_dtype, what)


def storage_to_host(t: TensorSpec, stored: np.ndarray) -> np.ndarray:
    """Device values converted back to the host dtype (bf16 as uint16 bits)."""
    if t.host_dtype == "bfloat16":
        return float32_to_bf16_bits(stored.astype(np.float32))
    if t.host_dtype == "bool":
        if np.isnan(stored).any():
            raise SimulatorFault(f"bool tensor '{t.name}' holds NaN on the device: some of "
                                 f"its elements were never written")
        return stored != 0
    return stored.astype(HOST_NUMPY[t.host_dtype])


def write_tensor(hbm: Hbm, t: TensorSpec, host: np.ndarray) -> None:
    """Store a host array (already validated: shape and npz dtype) in its device layout."""
    assert host.shape == t.host_shape and host.dtype == HOST_NUMPY[t.host_dtype], (t, host.dtype)
    values = host_to_storage(t, host)
    offsets = element_offsets(t)
    replicas = _replicas(t.layout)
    view = hbm.view(t.layout.device_dtype)
    if replicas.size == 1:
        view[offsets] = values
    else:
        view[offsets[..., None] + replicas] = values[..., None]


def read_tensor(hbm: Hbm, t: TensorSpec) -> np.ndarray:
    """The host form of a tensor, gathered from its device layout."""
    stored = np.take(hbm.view(t.layout.device_dtype), element_offsets(t))
    assert stored.dtype == storage_dtype(t.layout.device_dtype)
    return storage_to_host(t, stored)
