"""Device memory ("HBM" in the formats): byte addresses over sparse segments, typed views.

The formats speak in byte addresses: an op reads `base + itemsize * offset`, tiles start at
addresses computed in `bundle.mlir`, and a wrong address must land in the wrong place (or
outside every tensor) exactly as it would on the device. Only allocated bytes exist, though:
each run of overlapping allocations (tensors that reuse each other's memory) is one segment
with its own buffer, and a constant's segment is its slice of `weights.bin`, memory-mapped
copy-on-write (the file holds it in device form already), so a run neither copies the weights
nor holds the device's empty gigabytes. `region(address, dtype)` is a segment from an address
on, as elements of a dtype: every access is bounds-checked against its tensor first, so a
segment is all an access can reach.

Allocations come from the manifest. Every base is 128-byte aligned and inside `hbm_bytes`; two
tensors may share bytes only if their live ranges (first to last use in execution order) do not
overlap, which lets a compiler reuse memory for intermediates while catching real clashes.
Every allocation starts filled with NaN (ints: the most negative value) so a read of padding or
of never-written memory shows up in the results instead of passing as zeros.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

import numpy as np

from spyrec.device import format_bytes
from spyrec.errors import SimulatorFault
from spyrec.device import STICK_BYTES
from spyrec.sim.numerics import FILL_VALUE, storage_dtype

ALWAYS_LIVE = (-1, 1 << 62)


@dataclass(frozen=True)
class Allocation:
    name: str
    address: int         # bytes
    nbytes: int
    device_dtype: str
    live: tuple[int, int]  # first and last execution index that uses it (inclusive)
    # the values it holds, each from a write to its last read (LX tensors inside loops are
    # rewritten every iteration: between two values their bytes may hold another tensor)
    values: tuple[tuple[int, int], ...] = ()

    @property
    def end(self) -> int:
        return self.address + self.nbytes

    def contains(self, address: int, nbytes: int) -> bool:
        return self.address <= address and address + nbytes <= self.end


class _Table:
    """Allocations in the order they came, with their byte and value extents as arrays: the
    overlap check and the address lookup then test a few candidates instead of every earlier
    allocation (a 3,000-op program has thousands; each test in Python was quadratic)."""

    def __init__(self):
        self.items: list[Allocation] = []
        self._first: dict[Allocation, int] = {}     # `list.index`: the first equal one
        self._named: dict[str, Allocation] = {}     # the first of each name
        self._cols = np.zeros((4, 64), dtype=np.int64)   # address, end, first, last use

    def add(self, alloc: Allocation) -> None:
        n = len(self.items)
        if n == self._cols.shape[1]:
            self._cols = np.concatenate([self._cols, np.zeros_like(self._cols)], axis=1)
        spans = alloc.values or (alloc.live,)
        self._cols[:, n] = (alloc.address, alloc.end, min(x[0] for x in spans),
                            max(x[1] for x in spans))
        self.items.append(alloc)
        self._first.setdefault(alloc, n)
        self._named.setdefault(alloc.name, alloc)

    def position(self, alloc: Allocation) -> int:
        return self._first[alloc]

    def named(self, name: str) -> Allocation | None:
        return self._named.get(name)

    def clashing(self, alloc: Allocation) -> Allocation | None:
        """The first allocation `_overlap` says shares bytes with `alloc` while both hold a
        value: only those whose bytes and value hulls meet `alloc`'s are tested."""
        if not self.items or alloc.nbytes == 0:
            return None
        spans = alloc.values or (alloc.live,)
        address, end, first, last = self._cols[:, :len(self.items)]
        near = np.flatnonzero((address < alloc.end) & (alloc.address < end)
                              & (first <= max(x[1] for x in spans))
                              & (min(x[0] for x in spans) <= last))
        return next((self.items[i] for i in near if _overlap(alloc, self.items[i])), None)

    def holding(self, address: int, nbytes: int) -> list[Allocation]:
        """The allocations holding bytes [address, address + nbytes), in order."""
        starts, ends = self._cols[0, :len(self.items)], self._cols[1, :len(self.items)]
        return [self.items[i] for i in np.flatnonzero((starts <= address)
                                                      & (address + nbytes <= ends))]


@dataclass
class Segment:
    start: int              # bytes
    buffer: np.ndarray      # uint8: the segment's bytes
    backed: bool = False    # a mapped file, not host memory of its own

    @property
    def end(self) -> int:
        return self.start + len(self.buffer)


class Hbm:
    """The table of allocations that may be addressed, and the segments that hold them."""

    def __init__(self, size_bytes: int):
        self.size_bytes = size_bytes
        self._table = _Table()
        self.segments: list[Segment] = []     # sorted by start, disjoint

    @property
    def allocations(self) -> list[Allocation]:
        return self._table.items

    def named(self, name: str) -> Allocation | None:
        """The first allocation of tensor `name`."""
        return self._table.named(name)

    def allocate(self, name: str, address: int, nbytes: int, device_dtype: str,
                 live: tuple[int, int] = ALWAYS_LIVE, fill: bool = True,
                 backing: np.ndarray | None = None) -> Allocation:
        """Register a tensor's bytes and fill them with its dtype's NaN/sentinel (`fill`
        False: the caller writes or refills every byte before anything reads them).
        `backing`: the tensor's bytes already exist (a uint8 map of `weights.bin`)."""
        if address % STICK_BYTES:
            raise SimulatorFault(f"tensor '{name}': HBM address {address} is not "
                                 f"{STICK_BYTES}-byte aligned")
        if address < 0 or address + nbytes > self.size_bytes:
            raise SimulatorFault(f"tensor '{name}': bytes [{address}, {address + nbytes}) are "
                                 f"outside device memory [0, {self.size_bytes}) (manifest "
                                 f"hbm_bytes)")
        alloc = Allocation(name, address, nbytes, device_dtype, live)
        other = self._table.clashing(alloc)
        if other is not None:
            raise SimulatorFault(
                f"tensors '{other.name}' [{other.address}, {other.end}) and '{name}' "
                f"[{address}, {alloc.end}) overlap in HBM while both are live "
                f"(executions {_span(other.live)} and {_span(live)})")
        self._table.add(alloc)
        if nbytes == 0:
            return alloc
        if backing is not None:
            assert len(backing) == nbytes, (name, len(backing), nbytes)
            self._add(Segment(address, backing, backed=True), name)
        else:
            self._cover(name, address, nbytes)
            if fill:
                itemsize = storage_dtype(device_dtype).itemsize
                self.region(address, device_dtype)[:nbytes // itemsize] = \
                    FILL_VALUE[device_dtype]
        return alloc

    def region(self, address: int, device_dtype: str) -> np.ndarray:
        """The bytes from `address` to the end of its segment, as `device_dtype` elements."""
        i = bisect.bisect_right(self._starts(), address) - 1
        if i < 0 or address >= self.segments[i].end:
            raise SimulatorFault(f"HBM address {address} is in no allocated tensor")
        seg = self.segments[i]
        itemsize = storage_dtype(device_dtype).itemsize
        raw = seg.buffer[address - seg.start:]
        return raw[:len(raw) // itemsize * itemsize].view(storage_dtype(device_dtype))

    def find(self, address: int, nbytes: int, name: str | None = None) -> Allocation | None:
        """The allocation holding bytes [address, address+nbytes); `name` breaks ties."""
        hits = self._table.holding(address, nbytes)
        named = [a for a in hits if a.name == name]
        return (named or hits or [None])[0]

    @property
    def host_bytes(self) -> int:
        """Host memory the segments of their own take (mapped files excluded)."""
        return sum(len(s.buffer) for s in self.segments if not s.backed)

    def _starts(self) -> list[int]:
        return [s.start for s in self.segments]

    def _cover(self, name: str, address: int, nbytes: int) -> None:
        """Make [address, address + nbytes) exist: a new zeroed segment, merged with the
        segments it overlaps (their bytes kept)."""
        end = -(-(address + nbytes) // STICK_BYTES) * STICK_BYTES
        touching = [s for s in self.segments if s.start < end and address < s.end]
        if len(touching) == 1 and touching[0].start <= address and end <= touching[0].end:
            return
        if any(s.backed for s in touching):
            raise SimulatorFault(f"tensor '{name}' [{address}, {end}) shares bytes with a "
                                 f"constant (weights.bin); re-run spyrec compile")
        lo = min([address] + [s.start for s in touching])
        hi = max([end] + [s.end for s in touching])
        _check_host_memory(self.host_bytes + (hi - lo) - sum(len(s.buffer) for s in touching))
        buffer = _zeros(hi - lo)
        for s in touching:
            buffer[s.start - lo:s.end - lo] = s.buffer
            self.segments.remove(s)
        self._add(Segment(lo, buffer), name)

    def _add(self, seg: Segment, name: str) -> None:
        if any(s.start < seg.end and seg.start < s.end for s in self.segments):
            raise SimulatorFault(f"tensor '{name}' [{seg.start}, {seg.end}) shares bytes with a "
                                 f"constant (weights.bin); re-run spyrec compile")
        i = bisect.bisect_right(self._starts(), seg.start)
        self.segments.insert(i, seg)


def host_memory_bytes() -> int | None:
    """Physical RAM of this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _check_host_memory(nbytes: int) -> None:
    """Refuse up front a program whose device memory cannot fit in this machine's RAM: numpy
    would otherwise either fail late or push the host into swap."""
    ram = host_memory_bytes()
    if ram is not None and nbytes > ram:
        raise SimulatorFault(f"the program's device memory ({format_bytes(nbytes)} of "
                             f"tensors other than weights) does not fit in this machine's RAM "
                             f"({format_bytes(ram)}); simulate it on a larger host")


def _zeros(nbytes: int) -> np.ndarray:
    try:
        return np.zeros(nbytes, dtype=np.uint8)   # pages cost nothing until written
    except MemoryError:
        raise SimulatorFault(f"cannot allocate {format_bytes(nbytes)} of host memory for "
                             f"device tensors; free memory or simulate it on a larger "
                             f"host") from None


def _overlap(a: Allocation, b: Allocation) -> bool:
    bytes_overlap = a.address < b.end and b.address < a.end
    spans_a, spans_b = a.values or (a.live,), b.values or (b.live,)
    same_slot = a.address == b.address and a.nbytes == b.nbytes
    live_overlap = any(x[0] <= y[1] and y[0] <= x[1] and not (same_slot and _handover(x, y))
                       for x in spans_a for y in spans_b)
    return bytes_overlap and live_overlap and a.nbytes > 0 and b.nbytes > 0


def _handover(x: tuple[int, int], y: tuple[int, int]) -> bool:
    """Two values of one LX slot (same offset and size) that meet at exactly one execution,
    which reads the older for the last time and writes the newer first: an in-place update
    (each core overwrites the sticks it has just read; the stick tags then catch any later
    read of a stick it did not rewrite). Not checked: that each element is written where it
    was read (the planner's rule: identical layouts and coordinates)."""
    return (x[1] == y[0] and x[0] < y[0]) or (y[1] == x[0] and y[0] < x[0])


def _clash(a: Allocation, b: Allocation) -> str:
    """The first pair of value spans of `a` and `b` that intersect, for messages."""
    for x in a.values or (a.live,):
        for y in b.values or (b.live,):
            if x[0] <= y[1] and y[0] <= x[1]:
                return f"{_span(x)} and {_span(y)}"
    return f"{_span(a.live)} and {_span(b.live)}"


def _span(live: tuple[int, int]) -> str:
    lo = "start" if live[0] < 0 else str(live[0])
    hi = "end" if live[1] >= ALWAYS_LIVE[1] else str(live[1])
    return f"{lo}..{hi}"


# --- LX: one scratchpad per core ------------------------------------------------------------

NO_TAG = -1
_TAG_SHIFT = 40   # a stick's tag: allocation number << 40 | the stick's place in the tile


class Lx:
    """Every core's LX scratchpad (spyrec.device: 32 cores, 1,625,344 usable bytes each) as one
    byte arena: core c's byte b is arena byte `c * core_bytes + b`.

    Allocations come from the manifest's LX tensors (`lx_address`, `lx_bytes_per_core`, the
    same offset on every core) with live ranges from the trace; misalignment, a tensor past the
    usable budget and two live tensors sharing bytes are refused before anything runs.

    Each LX stick of each core carries a tag: which allocation wrote it and which stick of the
    tile it holds (`tag`). A reader computes the tag it expects from its own file, so a core
    reading a stick it never wrote, another core's slice (a consumer split differently from its
    producer) or a stale tensor is caught by name — the vectorized executor would otherwise
    read whatever bytes sit there.
    """

    def __init__(self, cores: int, usable_bytes: int):
        self.cores, self.usable_bytes = cores, usable_bytes
        self._table = _Table()
        # (offset, bytes) -> the allocations there: `handed_over` looks for a slot's others
        self._slots: dict[tuple[int, int], list[Allocation]] = {}
        self.core_bytes = 0
        self.arena = np.zeros(0, dtype=np.uint8)
        self.tags = np.zeros(0, dtype=np.int64)
        self._views: dict[str, np.ndarray] = {}

    def allocate(self, name: str, offset: int, nbytes: int, device_dtype: str,
                 live: tuple[int, int] = ALWAYS_LIVE,
                 values: tuple[tuple[int, int], ...] = ()) -> Allocation:
        if offset % STICK_BYTES:
            raise SimulatorFault(f"LX tensor '{name}': lx_address {offset} is not "
                                 f"{STICK_BYTES}-byte aligned; re-run spyrec compile")
        if offset + nbytes > self.usable_bytes:
            raise SimulatorFault(
                f"LX tensor '{name}': bytes [{offset}, {offset + nbytes}) per core overflow the "
                f"{self.usable_bytes} usable bytes of each core's LX (the backend owns the "
                f"rest); re-run spyrec compile")
        alloc = Allocation(name, offset, nbytes, device_dtype, live, values)
        other = self._table.clashing(alloc)
        if other is not None:
            raise SimulatorFault(
                f"LX tensors '{other.name}' [{other.address}, {other.end}) and '{name}' "
                f"[{offset}, {alloc.end}) overlap in every core's LX while both hold a "
                f"value (executions {_clash(other, alloc)}); the LX plan is "
                f"wrong: re-run spyrec compile")
        self._table.add(alloc)
        self._slots.setdefault((offset, nbytes), []).append(alloc)
        return alloc

    @property
    def allocations(self) -> list[Allocation]:
        return self._table.items

    def build(self) -> None:
        """Size the arena to the highest allocated byte (all zeros when nothing is in LX)."""
        top = max((a.end for a in self.allocations), default=0)
        self.core_bytes = -(-top // STICK_BYTES) * STICK_BYTES
        self.arena = np.zeros(self.cores * self.core_bytes, dtype=np.uint8)
        self.tags = np.full(self.cores * self.core_bytes // STICK_BYTES, NO_TAG, dtype=np.int64)
        self._views = {}

    def handed_over(self, alloc: Allocation) -> bool:
        """Whether `alloc` is born in place of a tensor whose last read is that same execution
        (`_handover`): its bytes still hold that tensor's value then, so they are not reset."""
        if not alloc.values:
            return False
        born = alloc.values[0][0]
        return any(other is not alloc and any(v[1] == born and v[0] < born
                                              for v in other.values)
                   for other in self._slots.get((alloc.address, alloc.nbytes), ()))

    def find(self, name: str) -> Allocation | None:
        return self._table.named(name)

    def view(self, device_dtype: str) -> np.ndarray:
        if device_dtype not in self._views:
            self._views[device_dtype] = self.arena.view(storage_dtype(device_dtype))
        return self._views[device_dtype]

    def begin(self, alloc: Allocation) -> None:
        """A tensor's life starts: its bytes on every core hold nothing (NaN, untagged)."""
        itemsize = storage_dtype(alloc.device_dtype).itemsize
        view = self.view(alloc.device_dtype)
        for core in range(self.cores):
            lo = core * self.core_bytes + alloc.address
            view[lo // itemsize:(lo + alloc.nbytes) // itemsize] = FILL_VALUE[alloc.device_dtype]
            self.tags[lo // STICK_BYTES:-(-(lo + alloc.nbytes) // STICK_BYTES)] = NO_TAG

    def tag(self, alloc: Allocation, tile_stick: np.ndarray) -> np.ndarray:
        """The tag of the stick holding stick `tile_stick` of the tile of `alloc`."""
        return np.int64(self._table.position(alloc) + 1 << _TAG_SHIFT) + tile_stick

    def tag_owner(self, tag: int) -> tuple[str | None, int]:
        """(tensor name, tile stick) a tag stands for; (None, -1) for a stick never written."""
        if tag == NO_TAG:
            return None, -1
        return self.allocations[(tag >> _TAG_SHIFT) - 1].name, tag & ((1 << _TAG_SHIFT) - 1)
