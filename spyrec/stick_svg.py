"""`spyrec inspect OUT TENSOR --svg FILE`: a tensor's stick layout as a picture.

The host grid is a 2-D view of the tensor (the last host dim across, the others flattened down),
extended by the padding the device layout adds, one cell per element. Each 128-byte stick gets
its own colour; padded lanes (device elements that hold no host element) are hatched. Everything
comes from the manifest's `device_size`, `stride_map` and `device_dtype` (DESIGN §3), nothing
from the compiler: device dim k with host stride s belongs to the host dim j with the largest
row-major host stride h_j that divides s (size-1 dims skipped), contributing s / h_j to its
index; dims with stride 0 (broadcast) or -1 (none) contribute nothing. Big tensors are cut to
the first MAX_ROWS x MAX_COLS cells, with a note.

`tiles` outlines host boxes (one per loop iteration of a tiled op): coarse tiling does not
exist yet, so the CLI passes none; the parameter is the place a tiled op's iterations go.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from xml.sax.saxutils import escape

import numpy as np

from spyrec.layout.dtypes import DEVICE_DTYPES, STICK_BYTES

MAX_ROWS = 64
MAX_COLS = 256
CELL = 10        # pixels per element
MARGIN = 40


@dataclass(frozen=True)
class HostTile:
    """A box of host indices [start, stop) per host dim, drawn as an outline with a label."""

    label: str
    start: tuple[int, ...]
    stop: tuple[int, ...]


@dataclass(frozen=True)
class StickGrid:
    """The drawn window: per cell, its stick number and whether it is padding."""

    stick: np.ndarray        # int64 [rows, cols]
    padded: np.ndarray       # bool  [rows, cols]
    index: list[np.ndarray]  # host index per host dim, each [rows, cols]
    full_rows: int           # rows and columns of the whole (padded) view
    full_cols: int


def _host_dim_of(stride: int, host_shape: list[int]) -> int | None:
    strides = [math.prod(host_shape[j + 1:]) for j in range(len(host_shape))]
    fits = [j for j, n in enumerate(host_shape) if n > 1 and stride % strides[j] == 0
            and strides[j] <= stride]
    return max(fits, key=lambda j: strides[j]) if fits else None


def stick_grid(t: dict, max_rows: int = MAX_ROWS, max_cols: int = MAX_COLS) -> StickGrid:
    """Stick number and padding of every cell of tensor `t`'s (cut) 2-D host view."""
    host = list(t["host_shape"]) or [1]
    size, smap = t["device_size"], t["stride_map"]
    itemsize = DEVICE_DTYPES[t["device_dtype"]].itemsize
    strides = [math.prod(host[j + 1:]) for j in range(len(host))]
    owners: dict[int, list[tuple[int, int]]] = {}   # host dim -> [(factor, device dim)]
    for k, (n, s) in enumerate(zip(size, smap)):
        j = _host_dim_of(s, host) if s > 0 and n > 1 else None
        if j is not None:
            owners.setdefault(j, []).append((s // strides[j], k))
    padded_shape = [max(host[j], 1 + sum((size[k] - 1) * f for f, k in owners.get(j, [])))
                    for j in range(len(host))]
    full_cols = padded_shape[-1]
    full_rows = math.prod(padded_shape[:-1])
    rows, cols = min(full_rows, max_rows), min(full_cols, max_cols)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    index = list(np.unravel_index(r, padded_shape[:-1])) if len(host) > 1 else []
    index.append(c)
    device_strides = [math.prod(size[k + 1:]) for k in range(len(size))]
    linear = np.zeros((rows, cols), np.int64)
    for j, owned in owners.items():
        rest = index[j].astype(np.int64)
        for factor, k in sorted(owned, reverse=True):
            linear += (rest // factor) * device_strides[k]
            rest = rest % factor
    padded = np.zeros((rows, cols), bool)
    for j, n in enumerate(host):
        padded |= index[j] >= n
    return StickGrid(linear * itemsize // STICK_BYTES, padded, index, full_rows, full_cols)


def _colour(stick: int) -> str:
    return f"hsl({stick * 137.508 % 360:.1f},70%,{62 + 12 * (stick % 2)}%)"


def stick_layout_svg(t: dict, tiles: tuple[HostTile, ...] = (), max_rows: int = MAX_ROWS,
                     max_cols: int = MAX_COLS) -> str:
    """The SVG document for manifest tensor `t` (and optional tile outlines)."""
    g = stick_grid(t, max_rows, max_cols)
    rows, cols = g.stick.shape
    width, height = 2 * MARGIN + cols * CELL, 2 * MARGIN + rows * CELL + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="12">',
           '<defs><pattern id="pad" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="#333" '
           'stroke-width="2"/></pattern></defs>',
           f'<text x="{MARGIN}" y="16">{escape(_title(t))}</text>',
           f'<text x="{MARGIN}" y="32">{escape(_subtitle(t, g))}</text>']
    for y in range(rows):
        x = 0
        while x < cols:
            end = x
            while end < cols and g.stick[y, end] == g.stick[y, x] and \
                    g.padded[y, end] == g.padded[y, x]:
                end += 1
            stick = int(g.stick[y, x])
            box = (f'x="{MARGIN + x * CELL}" y="{MARGIN + y * CELL}" width="{(end - x) * CELL}" '
                   f'height="{CELL}"')
            kind = "padding" if g.padded[y, x] else "data"
            out.append(f'<rect class="{kind}" data-stick="{stick}" {box} '
                       f'fill="{_colour(stick)}" stroke="#fff" stroke-width="0.5"/>')
            if g.padded[y, x]:
                out.append(f'<rect class="hatch" {box} fill="url(#pad)"/>')
            x = end
    for tile in tiles:
        out += _tile_outline(g, tile)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _title(t: dict) -> str:
    return (f"{t['name']}: {t['host_dtype']}{list(t['host_shape'])} -> device "
            f"{t['device_size']} stride_map {t['stride_map']} {t['device_dtype']}")


def _subtitle(t: dict, g: StickGrid) -> str:
    rows, cols = g.stick.shape
    lanes = STICK_BYTES // DEVICE_DTYPES[t["device_dtype"]].itemsize
    note = f"one colour per {STICK_BYTES}-byte stick ({lanes} lanes); hatched: padding"
    if (rows, cols) != (g.full_rows, g.full_cols):
        note += (f"; showing rows 0-{rows - 1} of {g.full_rows}, columns 0-{cols - 1} of "
                 f"{g.full_cols}")
    return note


def _tile_outline(g: StickGrid, tile: HostTile) -> list[str]:
    """One outline per row run of the tile's cells in the drawn window, plus its label."""
    inside = np.ones(g.stick.shape, bool)
    for j, (lo, hi) in enumerate(zip(tile.start, tile.stop)):
        inside &= (g.index[j] >= lo) & (g.index[j] < hi)
    out = []
    for y, x in zip(*np.nonzero(inside & ~np.roll(inside, 1, axis=1) | inside &
                                (np.arange(inside.shape[1]) == 0))):
        end = x
        while end < inside.shape[1] and inside[y, end]:
            end += 1
        out.append(f'<rect class="tile" data-tile="{escape(tile.label)}" '
                   f'x="{MARGIN + x * CELL}" y="{MARGIN + y * CELL}" '
                   f'width="{(end - x) * CELL}" height="{CELL}" fill="none" stroke="#000" '
                   f'stroke-width="2"/>')
    if out:
        y, x = np.argwhere(inside)[0]
        out.append(f'<text x="{MARGIN + x * CELL + 2}" y="{MARGIN + (y + 1) * CELL - 2}" '
                   f'font-size="9">{escape(tile.label)}</text>')
    return out
