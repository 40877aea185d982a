"""Where each arg of a SuperDSC op starts on each core (issue 8 contract §2): in HBM or in LX,
at a concrete address or at a symbolic one (an arg that advances with an enclosing loop, or
whose cores start at a share of a symbolic length), with its back gaps.

Start addresses are computed twice, independently: from the SuperDSC fields (F §4.2 step 6)
here, and from our device coordinates at each core's slice origin (`opspec._cores`, carried
in the op spec); they must agree, or the emitter stops with an internal error.

`Placement` is the placement half of `codegen/superdsc.py`'s emitter, which derives from it:
it reads the emitter's fields (annotated on the class) and writes nothing.
"""

from __future__ import annotations

from functools import cached_property

from spyrec.codegen.symbols import SymbolTable
from spyrec.errors import InternalError
from spyrec.plan.sdsc_dims import Digit, NotExpressible, OpDims, TensorDims


class Placement:
    """Per-arg placement for the emitter; `_Emitter.__init__` sets every field below."""

    index: int                            # the op's index: sdsc_<index>.json
    spec: dict                            # the op's spec (`opspec.op_spec`)
    bufs: list                            # the args' buffers, in arg order
    dims: OpDims
    symbols: SymbolTable | None           # issues the ids of symbolic start addresses
    check: bool                           # compare every start with our coordinates' start
    digits: list[Digit]                   # the op's SuperDSC dims (labels), in order
    splits: dict[Digit, int]              # cores per label
    sizes: dict[Digit, int]               # N_ per label (a masked stick dim padded)
    nc: int                               # cores used
    core_slices: list[dict[Digit, int]]   # core -> its slice of each label
    lengths: dict[Digit, str]             # label running a symbolic length -> the symbol

    def _in_lx(self, i: int) -> bool:
        return self.bufs[i].lx_address is not None

    def _symbolic(self, i: int) -> bool:
        """An HBM arg that advances with an enclosing loop (F §3.G rule 1), or whose cores
        start at a share of a symbolic length (`_length_steps`)."""
        return self.symbols is not None and not self._in_lx(i) and (
            any(self.spec["args"][i]["_advance_bytes"]) or bool(self._length_steps(i)))

    def _length_steps(self, i: int) -> list[tuple[Digit, int, int]]:
        """(label, values per stick or 1, bytes per slice and per such unit of the share)
        of each split label running a symbolic length that arg i walks: core c's slice s of
        it starts s * share values in (`SymLength.share`), i.e. `bytes * s * (share //
        unit)` bytes (whole sticks on the stick dim)."""
        if not self.lengths or self._in_lx(i):
            return []
        t = self.dims.tensors[i]
        strides = {lv.digit: lv.stride for lv in t.levels}
        wl = self.bufs[i].layout.dtype.itemsize
        return [(d, t.elems_per_stick if d == t.stick else 1, wl * strides[d])
                for d in self.lengths if self.splits[d] > 1 and d in strides]

    def _start_data(self, i: int, info: dict) -> dict[str, str]:
        """`startAddressCoreCorelet_.data_`: per core a decimal address (the tile's first
        element at iteration 0), the same LX offset on every core, or a symbol id (the start
        at the maximum less its length terms, which the bundle adds at the run's length)."""
        starts = self._starts(i, info)
        if self._symbolic(i):
            advance = tuple(self.spec["args"][i]["_advance_bytes"])
            steps = self._length_steps(i)
            ids = []
            for c, a in enumerate(starts):
                moved = [(d, unit, b * self.core_slices[c][d]) for d, unit, b in steps
                         if self.core_slices[c][d]]
                # the start at the maximum, whose share is the maximum over the split
                at_zero = a - sum(b * (self.sizes[d] // self.splits[d] // unit)
                                  for d, unit, b in moved)
                terms = tuple((self.lengths[d], self.splits[d], unit, b) for d, unit, b in moved)
                ids.append(self.symbols.symbol(self.index, at_zero, advance, terms))
            starts = ids
        return {f"[{c}, 0, 0]": str(a) for c, a in enumerate(starts)}

    def _back_gaps(self, i: int, gaps: dict[Digit, int]) -> dict:
        """HBM: one gap for the tensor (`"-1"`); LX: one per core, since each core's LX holds
        only its own slice (F §2.4, §4.2 step 8): with every level's extent `P_d + gap`."""
        keys = [str(c) for c in range(self.nc)] if self._in_lx(i) else ["-1"]
        return {self.names[d]: {k: str(g) for k in keys} for d, g in gaps.items()}

    def _starts(self, i: int, info: dict) -> list[int]:
        """Per-core start addresses, checked against our own coordinates. An LX arg starts
        at its offset on every core (F §2.11 step 4): each core's LX holds its own slice."""
        buf, t = self.bufs[i], info["dims"]
        if self._in_lx(i):
            offset = self._lx_offset(i, t) if t.offset else 0
            return [buf.lx_address + buf.layout.dtype.itemsize * offset] * self.nc
        wl = buf.layout.dtype.itemsize
        strides = {lv.digit: lv.stride for lv in t.levels}
        base = buf.hbm_address + wl * t.offset
        steps = []          # (digit, bytes per slice) of the split digits the arg walks
        for d in self.digits:
            if self.splits[d] > 1 and d in strides:
                p = self.sizes[d] // self.splits[d]
                if d == t.stick and p % t.elems_per_stick:
                    raise NotExpressible(f"a core would start arg {i} inside a stick ({p} "
                                         f"elements per core)")
                steps.append((d, wl * (p // t.elems_per_stick if d == t.stick else p)
                              * strides[d]))
        starts = [base + sum(slices[d] * step for d, step in steps)
                  for slices in self.core_slices]
        ours = self._our_starts(i) if self.check else None
        if t.lane_shift and ours is not None:
            # our starts address the first element, which the shift moves past the stick
            shift, e = t.lane_shift, t.elems_per_stick
            ours = [a - wl * (shift // e * strides[t.stick] + shift % e) for a in ours]
        if ours is not None and ours != starts:
            raise InternalError(f"sdsc {self.index} ({self.spec['name']}): arg {i} start "
                                f"addresses from the SuperDSC fields {starts[:4]}… differ from "
                                f"the coordinates' {ours[:4]}…")
        return starts

    def _lx_offset(self, i: int, t: TensorDims) -> int:
        """Elements from each core's LX slice origin to arg i's first element: its origin
        in the whole tensor (`t.offset`), taken apart level by level, put back together in
        the per-core layout, whose level extents are each core's (`P + gap`, the layout the
        simulator reads from N_, the split and the back gaps). scratchpad_planning lets an
        op start inside the slice only along a dim no core split divides (one matmul_padding
        writer fills the padding rows past the copy's): along a split dim the origin must
        be core 0's slice origin, 0."""
        offset, rest, stride = 0, t.offset, None
        per_core = []
        for lv in t.levels:                      # innermost first: the per-core strides
            stride = lv.stride if stride is None else stride
            per_core.append(stride)
            n = self.sizes[lv.digit]
            p = n // self.splits[lv.digit]
            if lv.digit == t.stick:
                e, shift = t.elems_per_stick, t.lane_shift
                stride *= -(-(p + shift) // e) + lv.extent - -(-(n + shift) // e)
            else:
                stride *= p + lv.extent - n
        for lv, core_stride in reversed(list(zip(t.levels, per_core))):
            coord, rest = divmod(rest, lv.stride)
            if coord and self.splits[lv.digit] > 1:
                raise InternalError(f"sdsc {self.index} ({self.spec['name']}): arg {i} starts "
                                    f"at {coord} of a dim split over cores inside LX buffer "
                                    f"{self.bufs[i].name}")
            offset += coord * core_stride
        if rest:
            raise InternalError(f"sdsc {self.index} ({self.spec['name']}): arg {i}'s origin "
                                f"{t.offset} in LX buffer {self.bufs[i].name} is not on its "
                                f"levels")
        return offset

    def _our_starts(self, i: int) -> list[int] | None:
        """Arg i's start per SuperDSC core, from our coordinates (opspec._cores)."""
        cores = self.spec["cores"]
        out = [cores[k]["arg_start_bytes"][i] for k in self._our_core_of]
        return None if any(v is None for v in out) else out

    @cached_property
    def _our_core_of(self) -> list[int]:
        """For each SuperDSC core, the index of the opspec core with the same slice origin
        (the same for every arg of the op, so computed once)."""
        by_origin = {tuple(lo for lo, _ in c["ranges"].values()): k
                     for k, c in enumerate(self.spec["cores"])}
        units = [[(d, (d.size // self.splits[d]) * d.weight)
                  for d in self.dims.var_digits[v] if self.splits[d] > 1]
                 for v in self.spec["iteration_space"]]
        return [by_origin[tuple(sum(slices[d] * u for d, u in var_units) for var_units in units)]
                for slices in self.core_slices]
