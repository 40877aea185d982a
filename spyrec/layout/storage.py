"""A host array in its device layout's bytes and back, with numpy strided views.

Both sides of the device boundary need this and nothing more: `spyrec compile` writes each
constant into `weights.bin` already in its device form (so a run maps the file instead of
converting the weights), and the simulator moves inputs in and outputs out the same way. It is
the layout's own definition put to work, with no part of the compiler's coordinate algebra
(`spyrec.indexing`): the simulator's ops still address these bytes through coordinates the
compiler derived, so a layout bug cannot hide by being made twice in one place.

The definition (docs/formats.md): `stride_map[j]` is the host element stride of one step
along device dim j (-1: no host counterpart; 0: a broadcast replica). Each device dim with a
positive entry walks one host dim d, the one whose host stride divides the entry (the largest
such among dims longer than 1), in steps of `stride_map[j] / host_stride[d]` elements; a host
element's position along j is `(x_d // step) % device_size[j]`. `Placement` turns that into
digits: host dim d, walked with steps s_1 > ... > s_k = 1, is the mixed-radix number
x = sum(digit_i * s_i), so the whole tensor is one strided view of the device bytes whose axes
are the digits. The digits are checked against the definition on every position of each host
dim, so the two forms agree on every element (the device offset is a sum of per-dim terms).

Device slots no host element reaches (partial sticks, sparse lanes, synthetic dims) hold the
fill pattern: NaN for floats, the most negative value for ints.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from spyrec.bf16 import bf16_bits_to_float32
from spyrec.layout.device_layout import DeviceLayout
from spyrec.layout.transpose import copy_strided

# The numpy dtype that stores each device dtype: fp8 as its bit patterns (spyrec/fp8.py
# converts; the simulator decodes on every read and encodes on every store).
STORAGE: dict[str, np.dtype] = {
    "fp16": np.dtype(np.float16),
    "fp32": np.dtype(np.float32),
    "int32": np.dtype(np.int32),
    "int8": np.dtype(np.int8),
    "fp8_e4m3": np.dtype(np.uint8),
    "fp8_e5m2": np.dtype(np.uint8),
}

# What device memory no value was written to holds: NaN for floats (a read of padding shows up
# in the result), the most negative value for ints (an index read from it is out of range).
FILL_VALUE: dict[str, object] = {
    "fp16": np.float16(np.nan),
    "fp32": np.float32(np.nan),
    "int32": np.int32(np.iinfo(np.int32).min),
    "int8": np.int8(np.iinfo(np.int8).min),
    "fp8_e4m3": np.uint8(0x7F),     # NaN in both formats
    "fp8_e5m2": np.uint8(0x7F),
}


class PlacementError(ValueError):
    """A layout that does not give every host element its own device slot, or a value the
    device dtype cannot hold; callers add which tensor and file."""


def storage_values(host: np.ndarray, host_dtype: str, device_dtype: str) -> np.ndarray:
    """A host array (bf16 as uint16 bits) as the device stores it: bf16 and bool as fp16,
    int64 as int32 after a range check (never a silent wrap), the rest as they are; floats
    are rounded once."""
    target = STORAGE[device_dtype]
    if host_dtype == "bfloat16":
        host = bf16_bits_to_float32(host)
    if target.kind == "i" and host.size and host.dtype.kind in "iu":
        info = np.iinfo(target)
        lo, hi = int(host.min()), int(host.max())
        if lo < info.min or hi > info.max:
            bad = lo if lo < info.min else hi
            raise PlacementError(f"value {bad} does not fit {device_dtype}, the device "
                                 f"storage of {host_dtype} (values are never wrapped)")
    with np.errstate(over="ignore", invalid="ignore"):
        return host.astype(target, copy=False)


def host_strides(host_shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for n in reversed(host_shape):
        strides.append(acc)
        acc *= n
    return tuple(reversed(strides))


def walks(host_shape: tuple[int, ...], layout: DeviceLayout) -> list[tuple[int, int, int]]:
    """(device dim, host dim, step in host elements) for every device dim that walks a host
    dim; a device dim of size 1 walks nothing."""
    strides = host_strides(host_shape)
    out = []
    for j, (size, m) in enumerate(zip(layout.device_size, layout.stride_map)):
        if m <= 0 or size == 1:
            continue
        dims = [d for d, (n, s) in enumerate(zip(host_shape, strides))
                if n > 1 and s <= m and m % s == 0]
        if not dims:
            raise PlacementError(f"stride_map[{j}] = {m} steps along no dim of a "
                                 f"{list(host_shape)} tensor (host strides {list(strides)})")
        d = max(dims, key=lambda d: strides[d])
        out.append((j, d, m // strides[d]))
    return out


def replica_offsets(layout: DeviceLayout) -> np.ndarray:
    """Element offsets of the replicas of one slot along broadcast (stride_map 0) dims."""
    extra = np.zeros(1, dtype=np.int64)
    for size, m, stride in zip(layout.device_size, layout.stride_map,
                               layout.device_strides_elems):
        if m == 0 and size > 1:
            extra = (extra[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    return extra


class Placement:
    """A host shape's elements in a layout, as per-host-dim digits (module docstring)."""

    def __init__(self, host_shape: tuple[int, ...], digits: list[list[tuple[int, int]]],
                 replicas: np.ndarray, covers_layout: bool):
        self.host_shape = host_shape
        self.digits = digits        # per host dim: [(extent, device stride in elements)]
        self.replicas = [int(r) for r in replicas]
        self.covers_layout = covers_layout    # every device slot holds some host element

    @property
    def padded_shape(self) -> tuple[int, ...]:
        return tuple(math.prod(e for e, _ in ds) for ds in self.digits)

    @property
    def box_shape(self) -> tuple[int, ...]:
        return tuple(e for ds in self.digits for e, _ in ds)

    @property
    def padded(self) -> bool:
        return self.padded_shape != self.host_shape

    def device_view(self, device: np.ndarray, base: int, writeable: bool = False
                    ) -> np.ndarray:
        """The digit box in `device` (a 1-D typed array) from element `base`: a view."""
        strides = tuple(s * device.itemsize for ds in self.digits for _, s in ds)
        return np.lib.stride_tricks.as_strided(device[base:], self.box_shape, strides,
                                               writeable=writeable)

    def scatter(self, device: np.ndarray, base: int, values: np.ndarray) -> None:
        """Write host-shaped `values` (already the storage dtype) into every replica; slots
        past the host extents are not touched (fill them first when they must be)."""
        pieces = [valid_boxes([e for e, _ in ds], n)
                  for ds, n in zip(self.digits, self.host_shape)]
        for replica in self.replicas:
            box = self.device_view(device, base + replica, writeable=True)
            for combo in itertools.product(*pieces):
                index = tuple(i for _, ix, _ in combo for i in ix)
                source = tuple(r for r, _, _ in combo)
                shape = tuple(n for _, _, sh in combo for n in sh)
                # the Ellipsis keeps an all-integer index a (0-d) view, not a copied scalar
                copy_strided(box[index + (Ellipsis,)], values[source].reshape(shape))

    def fill(self, device: np.ndarray, base: int, value) -> None:
        """Set every slot some host element has (in every replica) to `value`."""
        pieces = [valid_boxes([e for e, _ in ds], n)
                  for ds, n in zip(self.digits, self.host_shape)]
        for replica in self.replicas:
            box = self.device_view(device, base + replica, writeable=True)
            for combo in itertools.product(*pieces):
                box[tuple(i for _, ix, _ in combo for i in ix) + (Ellipsis,)] = value

    def leading(self, host_shape: tuple[int, ...]) -> "Placement":
        """This placement restricted to the host elements below `host_shape` (per dim, at
        most this one's): the same slots, as a host array of that shape has them here. A host
        dim's digits are its index's mixed-radix digits, whatever the other dims' lengths."""
        if any(n > m for n, m in zip(host_shape, self.host_shape)) or \
                len(host_shape) != len(self.host_shape):
            raise ValueError(f"host shape {list(host_shape)} is not within "
                             f"{list(self.host_shape)}")
        return Placement(tuple(host_shape), self.digits, np.asarray(self.replicas),
                         covers_layout=False)

    def gather(self, device: np.ndarray, base: int) -> np.ndarray:
        """The host-shaped values (a copy) from the first replica."""
        box = self.device_view(device, base)
        whole = np.empty(box.shape, box.dtype)
        copy_strided(whole, box)
        whole = whole.reshape(self.padded_shape)
        if not self.padded:
            return whole
        return whole[tuple(slice(0, n) for n in self.host_shape)].copy()


def valid_boxes(extents: list[int], n: int) -> list[tuple[slice, tuple, tuple]]:
    """[0, n) of a mixed-radix index (digit `extents`, outermost first) as boxes of its digit
    axes: (range of the index, index into the digit axes, the box's shape); one box when n
    fills the digits, one more per digit it stops inside."""
    if n == math.prod(extents):
        return [(slice(0, n), tuple(slice(None) for _ in extents), tuple(extents))]
    boxes, pos, prefix = [], 0, []
    for m, e in enumerate(extents):
        block = math.prod(extents[m + 1:])
        full = (n - pos) // block
        if full:
            boxes.append((slice(pos, pos + full * block),
                          tuple(prefix) + (slice(0, full),) +
                          tuple(slice(None) for _ in extents[m + 1:]),
                          (full,) + tuple(extents[m + 1:])))
            pos += full * block
        if pos == n:
            break
        prefix.append(full)
    return boxes


@lru_cache(maxsize=256)
def placement(host_shape: tuple[int, ...], layout: DeviceLayout) -> Placement:
    """The digits of every host dim (a few ints each; cached by shape and layout)."""
    strides = layout.device_strides_elems
    by_dim: dict[int, list[tuple[int, int]]] = {}
    for j, d, step in walks(host_shape, layout):
        by_dim.setdefault(d, []).append((step, j))
    digits = []
    for d, n in enumerate(host_shape):
        dim_walks = sorted(by_dim.get(d, ()), reverse=True)
        if n <= 1 and not dim_walks:
            digits.append([(max(n, 1), 0)])
        else:
            digits.append(_dim_digits(d, n, dim_walks, layout, strides))
    replicas = replica_offsets(layout)
    box = math.prod(e for ds in digits for e, _ in ds) * len(replicas)
    return Placement(tuple(host_shape), digits, replicas,
                     covers_layout=box == math.prod(layout.device_size))


def _dim_digits(d: int, n: int, dim_walks: list[tuple[int, int]], layout: DeviceLayout,
                strides: tuple[int, ...]) -> list[tuple[int, int]]:
    """Host dim d's digits, checked against the definition on the dim's whole range."""
    lost = PlacementError(f"device layout {list(layout.device_size)} / stride_map "
                          f"{list(layout.stride_map)} does not give each of the {n} "
                          f"positions of host dim {d} its own slot (host dims [{d}] do not "
                          f"round-trip)")
    steps = [s for s, _ in dim_walks]
    if not dim_walks or steps[-1] != 1 or any(a % b for a, b in zip(steps, steps[1:])):
        raise lost
    extents = [-(-n // steps[0])] + [a // b for a, b in zip(steps, steps[1:])]
    if any(e > layout.device_size[j] for e, (_, j) in zip(extents, dim_walks)):
        raise lost
    x = np.arange(n, dtype=np.int64)
    for i, ((step, j), extent) in enumerate(zip(dim_walks, extents)):
        defined = (x // step) % layout.device_size[j]
        digit = x // step if i == 0 else (x // step) % extent
        if not np.array_equal(defined, digit):
            raise lost
    return [(e, strides[j]) for e, (_, j) in zip(extents, dim_walks)]


def device_bytes_of(host: np.ndarray, host_dtype: str, layout: DeviceLayout) -> np.ndarray:
    """A host array's whole device form (padding filled), as a 1-D storage-dtype array of
    `layout.device_elems` elements: what `weights.bin` holds for a constant."""
    device = np.empty(layout.device_elems, dtype=STORAGE[layout.device_dtype])
    write_device(device, 0, host, host_dtype, layout, fill=True)
    return device


def write_device_padded(device: np.ndarray, base: int, host: np.ndarray, pad: tuple[int, ...],
                        host_dtype: str, layout: DeviceLayout, fill: bool) -> None:
    """`write_device` of `host` zero-padded after its end along each dim by `pad[d]`
    elements, without making the padded array: its slots are zeroed, then `host`'s written
    where the padded array has its elements. (A padded copy of Granite-8B's lm_head is
    0.4 GB of new memory: 1.4 s of system time to fault in on the VMs we measure.)"""
    if not any(pad):
        return write_device(device, base, host, host_dtype, layout, fill)
    if host.size == 0:
        return write_device(device, base, np.pad(host, [(0, p) for p in pad]), host_dtype,
                            layout, fill)
    shape = tuple(n + p for n, p in zip(host.shape, pad))
    place = placement(shape, layout)
    if fill and (place.padded or not place.covers_layout):
        device[base:base + layout.device_elems] = FILL_VALUE[layout.device_dtype]
    place.fill(device, base, 0)
    place.leading(tuple(host.shape)).scatter(
        device, base, storage_values(host, host_dtype, layout.device_dtype))


def device_rows(host_shape: tuple[int, ...], layout: DeviceLayout) -> tuple[int, int] | None:
    """(host dim d, host elements per device row) when device dim 0 walks the outermost
    digit of host dim d and no slot is replicated: device rows [a, b) then hold exactly the
    host elements whose index along d is in [a * step, b * step), every other dim whole, so a
    tensor's device form can be made a few rows at a time (`write_device_rows`). None for
    any other layout (one row, a broadcast replica, device dim 0 walking an inner digit)."""
    if layout.device_size[0] <= 1:
        return None
    place = placement(tuple(host_shape), layout)
    if place.replicas != [0]:
        return None
    outer = layout.device_strides_elems[0]
    for d, digits in enumerate(place.digits):
        if digits[0][1] == outer and digits[0][0] <= layout.device_size[0]:
            return d, math.prod(e for e, _ in digits[1:])
    return None


def write_device_rows(device: np.ndarray, host: np.ndarray, pad: tuple[int, ...],
                      host_dtype: str, layout: DeviceLayout, rows: range, fill: bool) -> None:
    """Device rows `rows` (along device dim 0) of `write_device_padded(host, pad)`, into the
    1-D typed `device` that holds just those rows: the same bytes the whole write puts
    there. Only for a layout `device_rows` splits (a caller's bug otherwise)."""
    shape = tuple(n + p for n, p in zip(host.shape, pad))
    split = device_rows(shape, layout)
    if split is None:
        raise ValueError(f"device layout {list(layout.device_size)} cannot be written by rows")
    d, step = split
    place = placement(shape, layout)
    outer = layout.device_strides_elems[0]
    if fill and (place.padded or not place.covers_layout):
        device[:len(rows) * outer] = FILL_VALUE[layout.device_dtype]
    lo, hi = rows.start * step, min(rows.stop * step, shape[d])
    if hi <= lo:
        return
    digits = list(place.digits)
    digits[d] = [(len(rows), outer)] + digits[d][1:]
    piece = Placement(shape[:d] + (hi - lo,) + shape[d + 1:], digits, np.zeros(1, np.int64),
                      covers_layout=False)
    if any(pad):
        piece.fill(device, 0, 0)
    real = host[(slice(None),) * d + (slice(lo, min(hi, host.shape[d])),)]
    if real.size:
        piece.leading(real.shape).scatter(
            device, 0, storage_values(real, host_dtype, layout.device_dtype))


def write_device(device: np.ndarray, base: int, host: np.ndarray, host_dtype: str,
                 layout: DeviceLayout, fill: bool) -> None:
    """Store `host` at element `base` of the 1-D typed `device` array in `layout`; with
    `fill`, the slots no element reaches are set to the fill pattern first."""
    elems = layout.device_elems
    if host.size == 0:
        if fill:
            device[base:base + elems] = FILL_VALUE[layout.device_dtype]
        return
    place = placement(tuple(host.shape), layout)
    if fill and (place.padded or not place.covers_layout):
        device[base:base + elems] = FILL_VALUE[layout.device_dtype]
    place.scatter(device, base, storage_values(host, host_dtype, layout.device_dtype))
