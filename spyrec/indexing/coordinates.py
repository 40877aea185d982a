"""Device coordinates of a tensor access: one simplified index expression per device dim.

The access is a flat index into the tensor's *base storage* (host element units, views folded
in), affine in the op's iteration variables, possibly with floor/mod terms and indirect
(gathered) values. We go through **host coordinates first**:

1. flat = storage_offset + index; unravel it over the base's host strides, so a constant
   offset lands in the host dims it really belongs to (offset 100 on fp16 `[4,100]` is row 1,
   column 0). Decomposing the offset per *device* dim instead is the reference's issue #3797:
   a spurious `+36` on the stick lane of a padded base.
2. Map host coordinates to device dims through `stride_map`: device dim j with host stride
   M[j] = k * s[i] reads host dim i at granularity k, so its coordinate is
   `(x_i mod k_next) // k` (k_next: the next coarser granularity of the same host dim) — tile
   `x // E` and lane `x mod E` for a default stick dim. M[j] <= 0 (synthetic, size-1, sparse
   lanes, broadcast) gives coordinate 0.
3. Simplify each coordinate with the iteration ranges (and the indirect values' ranges).
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Sequence

from spyrec.indexing.expr import ZERO, Indirect, Lin, floordiv, mod
from spyrec.indexing.ranges import Ranges
from spyrec.indexing.simplify import simplify_lin


def host_coordinates(host_size: Sequence[int], host_strides: Sequence[int], flat: Lin) -> list[Lin]:
    """Unsimplified host multi-index of a flat storage index (strides must not overlap)."""
    dims = sorted((s, i) for i, (n, s) in enumerate(zip(host_size, host_strides))
                  if n > 1 and s > 0)
    coords = [ZERO] * len(host_size)
    for pos, (stride, i) in enumerate(dims):
        if pos + 1 < len(dims):
            next_stride = dims[pos + 1][0]
            assert next_stride >= stride * host_size[i], (host_size, host_strides)
            coords[i] = floordiv(mod(flat, next_stride), stride)
        else:
            coords[i] = floordiv(flat, stride)
    return coords


@lru_cache(maxsize=1 << 12)
def device_dim_sources(host_size: tuple[int, ...], host_strides: tuple[int, ...],
                       device_size: tuple[int, ...],
                       stride_map: tuple[int, ...]) -> tuple[tuple[int, int] | None, ...]:
    """For each device dim: (host dim, granularity k) with M[j] = k * stride, or None.

    A stride can match several host dims (fp16 `[2,64]`: the tile step 64*1 equals the row
    stride 64), so the choice is the first assignment, largest stride first, in which each
    host dim's device extents fit: every host dim is read at granularity 1, an inner
    granularity spans `ceil(k_next / k)` positions and the outermost at least `ceil(n / k)`.
    """
    options = []
    for m in stride_map:
        if m <= 0:
            options.append([None])
            continue
        found = sorted(((s, i) for i, (n, s) in enumerate(zip(host_size, host_strides))
                        if n > 1 and 0 < s <= m and m % s == 0), reverse=True)
        if not found:
            raise ValueError(f"stride_map entry {m} matches no host dim of size "
                             f"{list(host_size)} and strides {list(host_strides)}")
        options.append([(i, m // s) for s, i in found])
    for choice in itertools.product(*options):
        if _extents_fit(choice, host_size, device_size):
            return choice
    raise ValueError(f"device layout {list(device_size)} / {list(stride_map)} does not tile "
                     f"host {list(host_size)} with strides {list(host_strides)}")


def _extents_fit(choice, host_size, device_size) -> bool:
    per_dim: dict[int, list[tuple[int, int]]] = {}
    for j, src in enumerate(choice):
        if src is not None:
            per_dim.setdefault(src[0], []).append((src[1], device_size[j]))
    for dim, n in enumerate(host_size):
        if n > 1 and dim not in per_dim:
            return False
    for dim, grains in per_dim.items():
        grains.sort()
        if grains[0][0] != 1 or len({k for k, _ in grains}) != len(grains):
            return False
        for (k, extent), (k_next, _) in zip(grains, grains[1:]):
            if extent != -(-k_next // k):
                return False
        k_out, extent_out = grains[-1]
        if extent_out < -(-host_size[dim] // k_out):
            return False
    return True


def device_coordinates_lin(host_size: tuple[int, ...], host_strides: tuple[int, ...],
                           storage_offset: int, device_size: tuple[int, ...],
                           stride_map: tuple[int, ...],
                           ranges: Ranges, index: Lin) -> list[Lin]:
    ranges = _with_indirect_ranges(host_size, host_strides, index, ranges)
    return list(_device_coordinates(tuple(host_size), tuple(host_strides), int(storage_offset),
                                    tuple(device_size), tuple(stride_map), ranges, index))


@lru_cache(maxsize=1 << 14)
def _device_coordinates(host_size, host_strides, storage_offset, device_size, stride_map,
                        ranges, index):
    host = host_coordinates(host_size, host_strides, index + storage_offset)
    sources = device_dim_sources(host_size, host_strides, device_size, stride_map)
    coords: list[Lin] = []
    for src in sources:
        if src is None:
            coords.append(ZERO)
            continue
        dim, k = src
        coarser = sorted(s[1] for s in sources if s is not None and s[0] == dim and s[1] > k)
        within = mod(host[dim], coarser[0]) if coarser else host[dim]
        coords.append(simplify_lin(floordiv(within, k), ranges))
    return tuple(coords)


def _with_indirect_ranges(host_size, host_strides, index: Lin, ranges: Ranges) -> Ranges:
    """Give each gathered value without a range the extent of the host dim it indexes."""
    updates = {}
    for atom, coeff in index.terms:
        if isinstance(atom, Indirect) and ranges.get(atom)[0] == float("-inf"):
            for n, s in zip(host_size, host_strides):
                if s == coeff:
                    updates[atom] = (0, n - 1)
                    break
    return ranges.with_vars(updates) if updates else ranges
