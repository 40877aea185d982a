"""DeviceLayout: how a host tensor is tiled into 128-byte sticks in device memory.

`device_size` is row-major on the device and its last dim is the stick lanes (size E);
`stride_map[j]` is the host element stride taken by one step along device dim j (-1: no host
counterpart — a synthetic dim, a size-1 dim or sparse lanes; 0: broadcast). A device position
holds data only if the host index it implies is inside the host extents; everything else is
padding and is never read as data. Rules and vectors: reference/A-layout.md §2–3, §6.1.
"""

from __future__ import annotations

from functools import lru_cache

import math
from dataclasses import dataclass
from typing import Sequence

from spyrec.layout.dtypes import DEVICE_DTYPES, STICK_BYTES, DeviceDtype, device_dtype_for

MAX_HOST_RANK = 6
SPARSE = -1  # trailing dim_order entry that requests a stick-sparse layout


@dataclass(frozen=True)
class DeviceLayout:
    device_size: tuple[int, ...]
    stride_map: tuple[int, ...]
    device_dtype: str

    def __post_init__(self) -> None:
        assert len(self.device_size) == len(self.stride_map) >= 2, self
        assert self.device_size[-1] == self.dtype.elems_per_stick, self

    @property
    def dtype(self) -> DeviceDtype:
        return DEVICE_DTYPES[self.device_dtype]

    @property
    def elems_per_stick(self) -> int:
        return self.dtype.elems_per_stick

    @property
    def device_strides_elems(self) -> tuple[int, ...]:
        """Row-major element strides of `device_size`."""
        strides, acc = [], 1
        for n in reversed(self.device_size):
            strides.append(acc)
            acc *= n
        return tuple(reversed(strides))

    @property
    def num_sticks(self) -> int:
        return math.prod(self.device_size[:-1])

    @property
    def device_elems(self) -> int:
        """Element slots on the device, padding included."""
        return math.prod(self.device_size)

    @property
    def device_bytes(self) -> int:
        return self.num_sticks * STICK_BYTES

    @property
    def is_sparse(self) -> bool:
        """One element per stick: the lanes have no host counterpart."""
        return self.stride_map[-1] == -1

    def to_json(self) -> dict:
        return {"device_size": list(self.device_size), "stride_map": list(self.stride_map),
                "device_dtype": self.device_dtype}


def contiguous_strides(host_size: Sequence[int]) -> tuple[int, ...]:
    return _contiguous_strides(tuple(host_size))


@lru_cache(maxsize=1 << 12)
def _contiguous_strides(host_size: tuple[int, ...]) -> tuple[int, ...]:
    """Memoized: work_division asks for every buffer's strides per candidate split."""
    strides, acc = [], 1
    for n in reversed(host_size):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def default_layout(host_size: Sequence[int], host_dtype: str) -> DeviceLayout:
    """Stick on the last host dim, tiles along the first: `[a,b]` -> `[ceil(b/E), a, E]`."""
    return stick_layout(host_size, contiguous_strides(host_size), host_dtype,
                        tuple(range(len(host_size))))


def stick_layout(host_size: Sequence[int], host_strides: Sequence[int], host_dtype: str,
                 dim_order: Sequence[int]) -> DeviceLayout:
    """The layout for a host dim order whose last entry is the stick dim.

    A trailing `SPARSE` (-1) entry requests a stick-sparse layout (one element per stick, used
    for reductions along the stick dim). Device dims, outermost first: the middle dims
    `o[1..L-2]` in order, then the stick tiles, then `o[0]` (the rows inside a tile), then the
    lanes.
    """
    rank = len(host_size)
    dtype = device_dtype_for(host_dtype)
    e = dtype.elems_per_stick
    order = list(dim_order)
    if rank > MAX_HOST_RANK:
        raise ValueError(f"host rank {rank} exceeds the device maximum of {MAX_HOST_RANK}")
    if rank == 0:
        return DeviceLayout((1, e), (-1, -1), dtype.name)
    dense = order[:-1] if order and order[-1] == SPARSE else order
    if sorted(dense) != list(range(rank)):
        raise ValueError(f"dim_order {list(dim_order)} is not a permutation of {rank} host dims")
    host_dims = [order[0], order[0]] if len(order) == 1 else order[1:] + [order[0], order[-1]]
    tile_pos = len(host_dims) - 3 if len(host_dims) >= 3 else 0
    size: list[int] = []
    stride_map: list[int] = []
    for pos, h in enumerate(host_dims):
        is_lane = pos == len(host_dims) - 1
        if h == SPARSE:
            size.append(e if is_lane else 1)
            stride_map.append(-1)
            continue
        n, s = host_size[h], host_strides[h]
        if is_lane:
            size.append(e)
        elif pos == tile_pos:
            size.append(-(-n // e))
        else:
            size.append(n)
        if n == 1:
            stride_map.append(-1)
        else:
            stride_map.append(e * s if pos == tile_pos and not is_lane else s)
    return DeviceLayout(tuple(size), tuple(stride_map), dtype.name)
