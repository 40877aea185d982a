"""Host ↔ device transfers: a host array into its device layout and back.

The layout is read straight from its definition, with numpy: `stride_map[j]` is the host
element stride of one step along device dim j (-1: no host counterpart; 0: a broadcast
replica). Each device dim with a positive entry therefore walks one host dim d: the one whose
host stride divides the entry (the largest such, among dims longer than 1), in steps of
`stride_map[j] / host_stride[d]` elements. A host element's position along device dim j is
`(x_d // step) % device_size[j]`, every host element at once, one array per host dim. The
placement is accepted only if it round-trips: summing the positions times their steps gives
back every host coordinate, so no two host elements share a slot and none is dropped.

This deliberately shares no code with the compiler's coordinate algebra (`spyrec.indexing`):
if the compiler and the simulator both derived the mapping from one function, a layout bug
would be consistent on both sides and every differential test would still pass.

Device slots with no host element (partial sticks, sparse lanes) keep the NaN/sentinel the
arena was filled with: correct programs never read them. Device dims with stride_map 0 hold
replicas; every replica is written. Conversions: bf16 (uint16 bits on the host) and bool are
stored as fp16, int64 as int32 after a range check (never a silent wrap).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from spyrec.errors import InputFileError, SimulatorFault
from spyrec.layout import DeviceLayout
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


def _host_strides(host_shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(host_shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def _walks(host_shape: tuple[int, ...], layout: DeviceLayout) -> list[tuple[int, int, int]]:
    """(device dim, host dim, step in host elements) for every device dim that walks a host
    dim; a device dim of size 1 walks nothing."""
    strides = _host_strides(host_shape)
    walks = []
    for j, (size, m) in enumerate(zip(layout.device_size, layout.stride_map)):
        if m <= 0 or size == 1:
            continue
        dims = [d for d, (n, s) in enumerate(zip(host_shape, strides))
                if n > 1 and s <= m and m % s == 0]
        if not dims:
            raise SimulatorFault(f"stride_map[{j}] = {m} steps along no dim of a "
                                 f"{list(host_shape)} tensor (host strides {list(strides)})")
        d = max(dims, key=lambda d: strides[d])
        walks.append((j, d, m // strides[d]))
    return walks


@lru_cache(maxsize=16)
def _relative_offsets(host_shape: tuple[int, ...], layout: DeviceLayout) -> np.ndarray:
    """Device element offset (from the tensor base) of every host element, host-shaped."""
    if 0 in host_shape:  # an empty tensor has no element to place (and its layout tiles nothing)
        return np.zeros(host_shape, dtype=np.int64)
    rank = len(host_shape)
    coords = [np.arange(n, dtype=np.int64).reshape([n if i == d else 1 for i in range(rank)])
              for d, n in enumerate(host_shape)]
    offsets = np.zeros([1] * rank, dtype=np.int64)
    rebuilt = [np.zeros([1] * rank, dtype=np.int64) for _ in host_shape]
    device_strides = layout.device_strides_elems
    for j, d, step in _walks(host_shape, layout):
        position = (coords[d] // step) % layout.device_size[j]
        offsets = offsets + position * device_strides[j]
        rebuilt[d] = rebuilt[d] + position * step
    lost = [d for d in range(rank) if not np.array_equal(np.broadcast_to(rebuilt[d], coords[d]
                                                                         .shape), coords[d])]
    if lost:
        raise SimulatorFault(f"device layout {list(layout.device_size)} / stride_map "
                             f"{list(layout.stride_map)} does not give each of the "
                             f"{math.prod(host_shape)} elements of a {list(host_shape)} tensor "
                             f"its own slot (host dims {lost} do not round-trip)")
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
