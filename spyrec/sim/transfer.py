"""Host ↔ device transfers: a host array into its device layout and back.

Transfers go through `spyrec.layout.storage`, which puts the layout's definition to work as
strided views (no per-element offsets: at real width those arrays were four times the
weights). `element_offsets` keeps the definition in its plainest form, every host element's
device offset computed from `stride_map` alone; the tests hold the strided transfers to it
element by element. Neither shares code with the compiler's coordinate algebra
(`spyrec.indexing`): if the compiler and the simulator derived accesses from one function, a
layout bug would be consistent on both sides and every differential test would still pass.

Device slots with no host element (partial sticks, sparse lanes) hold the fill pattern:
correct programs never read them. Device dims with stride_map 0 hold replicas; every replica
is written. Conversions: bf16 (uint16 bits on the host) and bool are stored as fp16, int64 as
int32 after a range check (never a silent wrap).
"""

from __future__ import annotations

import math
from typing import Mapping

import numpy as np

from spyrec.errors import InputFileError, SimulatorFault
from spyrec.layout import DeviceLayout
from spyrec.sim.lengths import sliced_to_lengths
from spyrec.sim.memory import Hbm
from spyrec.layout.storage import (
    FILL_VALUE, PlacementError, placement, storage_values, walks,
)
from spyrec.bf16 import float32_to_bf16_bits
from spyrec.sim.numerics import storage_dtype
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
    # an 8-bit float buffer the program mutates (a float8 KV cache) comes back as its bit
    # patterns, as the device holds it (numpy has no 8-bit float; spyrec/fp8.py decodes)
    "float8_e4m3fn": np.dtype(np.uint8),
    "float8_e5m2": np.dtype(np.uint8),
}


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
    for j, d, step in walks(host_shape, layout):
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


def element_offsets(t: TensorSpec) -> np.ndarray:
    """Absolute element offsets (in the typed arena view) of every host element of `t`."""
    itemsize = t.layout.dtype.itemsize
    try:
        relative = _relative_offsets(t.host_shape, t.layout)
    except (SimulatorFault, PlacementError) as e:
        raise SimulatorFault(f"tensor '{t.name}': {e}") from None
    return relative + t.hbm_address // itemsize


def host_to_storage(t: TensorSpec, host: np.ndarray) -> np.ndarray:
    """Host values (npz form) converted to the device storage dtype, rounded once."""
    try:
        return storage_values(host, t.host_dtype, t.layout.device_dtype)
    except PlacementError as e:
        raise InputFileError(f"{t.role} '{t.name}': {e}") from None


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
    """Store a host array (already validated: shape and npz dtype) in its device layout,
    through strided views (`spyrec.layout.storage`); slots no element reaches are filled."""
    assert host.shape == t.host_shape and host.dtype == HOST_NUMPY[t.host_dtype], (t, host.dtype)
    if t.device_bytes == 0:
        return
    device = hbm.region(t.hbm_address, t.layout.device_dtype)
    if host.size == 0:
        device[:t.device_bytes // device.itemsize] = FILL_VALUE[t.layout.device_dtype]
        return
    _store(device, t, host_to_storage(t, host))


def _store(device: np.ndarray, t: TensorSpec, values: np.ndarray) -> None:
    """Scatter storage `values` (host order) into `device`, typed and starting at `t`'s
    first byte; slots no element reaches hold the fill pattern."""
    try:
        place = placement(t.host_shape, t.layout)
    except PlacementError as e:
        raise SimulatorFault(f"tensor '{t.name}': {e}") from None
    if place.padded or not place.covers_layout:
        device[:t.device_bytes // device.itemsize] = FILL_VALUE[t.layout.device_dtype]
    place.scatter(device, 0, values)


def relaid_out(stored: np.ndarray, source: TensorSpec, t: TensorSpec,
               pad: tuple[int, ...] = (), out: np.ndarray | None = None) -> np.ndarray:
    """The device bytes (uint8) of constant `t`, which holds the value `source` holds in
    `stored` (its device bytes) in another layout, zero-padded at the end of each dim by
    `pad` (manifest `weights.tensors[].relayout_of`, `pad`): one strided gather and one
    scatter, the storage values moved as they are (same dtype). Written into `out` (uint8,
    `t`'s device bytes long) when given."""
    dtype = storage_dtype(t.layout.device_dtype)
    if out is None:
        out = np.empty(t.device_bytes, dtype=np.uint8)
    if t.device_bytes == 0:
        return out
    try:
        values = placement(source.host_shape, source.layout).gather(stored.view(dtype), 0)
    except PlacementError as e:
        raise SimulatorFault(f"tensor '{source.name}': {e}") from None
    if any(pad):
        values = np.pad(values, [(0, p) for p in pad])
    _store(out.view(dtype), t, values)
    return out


def read_tensor(hbm: Hbm, t: TensorSpec, lengths: Mapping[str, int] | None = None
                ) -> np.ndarray:
    """The host form of a tensor, gathered from its device layout (one strided copy); cut to
    symbolic `lengths` along its symbolic dims before it is converted (past them a run at a
    shorter length writes nothing: fill values, which a bool output must not see)."""
    dtype = storage_dtype(t.layout.device_dtype)
    if 0 in t.host_shape:
        return storage_to_host(t, np.zeros(t.host_shape, dtype=dtype))
    try:
        place = placement(t.host_shape, t.layout)
    except PlacementError as e:
        raise SimulatorFault(f"tensor '{t.name}': {e}") from None
    stored = place.gather(hbm.region(t.hbm_address, t.layout.device_dtype), 0)
    assert stored.dtype == dtype
    return storage_to_host(t, sliced_to_lengths(t, stored, lengths or {}))
