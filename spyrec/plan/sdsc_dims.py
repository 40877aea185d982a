"""Each tensor of an op in SuperDSC terms: dim labels, nesting, strides, gaps and offsets.

SuperDSC (reference/F-superdsc.md §2, §4) cannot carry index expressions. It describes a
tensor as a dense array of 128-byte sticks: lane j of a stick holds coordinate `stick·E + j`
of the tensor's stick dim, and above the stick the tensor's dims are *nested*, innermost first,
each level's element stride the product of the extents below it (`N_` plus a back gap). The
start address absorbs view offsets and each core's slice origin.

Our accesses are device coordinates in the op's iteration variables (floor/mod of affine
terms). This module finds, for one op, SuperDSC dims ("labels") that express every access
exactly, or says why none exist:

1. Refinement. A view can use one iteration variable through several device dims
   (`floor(c0/S)` and `Mod(c0, S)` after a reshape that merged two dims). Every divisor such
   a variable is cut at becomes a digit boundary; the variable becomes mixed-radix digits, one
   label each (`c0 = 64·c0_hi + c0_lo`). The boundaries must form a divisibility chain.
2. Linearization. Every device coordinate is rewritten as a constant plus integer multiples of
   digits; the lane coordinate must be `digit mod E` of one digit (the tensor's stick label)
   or the constant 0 (no stick: scale −2), or another constant lane (a size-1 stick label
   whose coordinate starts at that lane, `beta_`). The element offset of a point is then
   `offset + Σ digit·stride + (stick digit // E)·stick stride + stick digit % E`.
3. Nesting. Sorted by stride, the levels must nest: the innermost starts at one stick (E
   elements) and each next stride is a multiple of the previous level's stride times its
   extent; the excess becomes that level's back gap. A tensor whose innermost level starts
   above one stick gets a size-1 synthetic label below it (so its gap can carry the pitch).

What cannot be expressed (a lane that is not one variable, a strided view `2·c0`, two
digits at one stride, a split that cuts a digit) raises `NotExpressible` with the reason;
the codegen then refuses the op, naming it.

Why in plan/: the same analysis is the emitter's (codegen/superdsc.py builds the fields from
`op_dims`) and a planning question — superdsc_legalize rewrites the ops it refuses, and the
LX placement keeps LX args to ops with a SuperDSC form — so the passes ask
`why_not_expressible` here, the emitter's own test, without importing codegen (and the
pipeline check at startup without loading jinja2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

from spyrec.indexing import FloorDiv, Indirect, Lin, Mod, Var
from spyrec.indexing.sticks import access_coordinates
from spyrec.ir import Graph, Operation


class NotExpressible(Exception):
    """The access cannot be written in SuperDSC fields; the message says why."""


class Digit(NamedTuple):
    """One SuperDSC dim: a mixed-radix digit of an iteration variable (or a synthetic dim).
    A named tuple, not a dataclass: digits key every per-core table of an op (32 cores x
    every arg), and a tuple hashes and compares in C."""

    var: str              # the iteration variable ("" for a synthetic size-1 dim)
    weight: int           # var = Σ digit·weight over the var's digits
    size: int             # the digit's range (N_ of the label)
    split: bool = False   # the var has more than one digit

    @property
    def key(self) -> str:
        if not self.var:
            return f"synthetic{self.weight}"
        return self.var if not self.split else f"{self.var}/{self.weight}"


@dataclass(frozen=True)
class Level:
    """One nesting level of a tensor: a digit, its element stride and its allocated extent."""

    digit: Digit
    stride: int       # elements between consecutive values (per stick for the stick level)
    extent: int       # allocated values at this level (sticks for the stick level)


@dataclass
class TensorDims:
    """How one arg is addressed: its levels innermost first and its element offset."""

    stick: Digit | None           # the digit in the lanes; None: lanes are constant 0
    elems_per_stick: int
    levels: list[Level] = field(default_factory=list)
    offset: int = 0               # element offset of the origin from the buffer's element 0
    lane_shift: int = 0           # the stick dim's coordinate starts here (coordInfo beta_)
    # index tensor -> (synthetic digit of its level, extent of the gathered dim)
    indirect: dict[str, tuple[Digit, int]] = field(default_factory=dict)

    def digits(self) -> list[Digit]:
        return [lv.digit for lv in self.levels]


@dataclass
class OpDims:
    """The labels of one op (digits in label order) and every arg's addressing."""

    digits: list[Digit]
    tensors: list[TensorDims]
    var_digits: dict[str, list[Digit]]     # most significant first


def op_dims(var_ranges: list[tuple[str, int]], coords: list[tuple[Lin, ...]],
            device_sizes: list[tuple[int, ...]], strides: list[tuple[int, ...]],
            elems_per_stick: list[int]) -> OpDims:
    """SuperDSC dims for an op with iteration `var_ranges` and, per arg, its device coordinates,
    device sizes, device element strides and elements per stick. Memoized, NotExpressible
    included: superdsc_legalize, scratchpad_planning and codegen ask about the same op, and a
    decoder stack's layers differ only in names. The result is shared: read it, never
    change it."""
    key = (tuple(var_ranges), tuple(map(tuple, coords)), tuple(map(tuple, device_sizes)),
           tuple(map(tuple, strides)), tuple(elems_per_stick))
    found = _OP_DIMS.get(key)
    if found is None:
        try:
            found = _op_dims(*key)
        except NotExpressible as e:
            found = e
        if len(_OP_DIMS) > 4096:
            _OP_DIMS.clear()
        _OP_DIMS[key] = found
    if isinstance(found, NotExpressible):
        raise NotExpressible(str(found))
    return found


_OP_DIMS: dict[tuple, OpDims | NotExpressible] = {}


def _op_dims(var_ranges: tuple[tuple[str, int], ...], coords: tuple[tuple[Lin, ...], ...],
             device_sizes: tuple[tuple[int, ...], ...], strides: tuple[tuple[int, ...], ...],
             elems_per_stick: tuple[int, ...]) -> OpDims:
    ranges = dict(var_ranges)
    lanes = [_stick_var(c, e) for c, e in zip(coords, elems_per_stick)]
    sticks = [stick for stick, _ in lanes]
    bounds: dict[str, set[int]] = {v: {1, n} for v, n in var_ranges}
    for c, (stick, shift), e in zip(coords, lanes, elems_per_stick):
        for coord in c[:-1]:
            _boundaries(coord, stick, shift, e, bounds)
    var_digits = {v: _digits(v, ranges[v], bounds[v]) for v, _ in var_ranges}
    for stick, e in zip(sticks, elems_per_stick):
        if isinstance(stick, str):
            low = var_digits[stick][-1]
            if low.size != ranges[stick] and low.size % e:
                raise NotExpressible(
                    f"variable {stick} is the stick dim of one tensor but another cuts it "
                    f"every {low.size} elements, inside a {e}-element stick")
    tensors = [_tensor_dims(c, lane, e, sz, st, var_digits)
               for c, lane, e, sz, st in zip(coords, lanes, elems_per_stick, device_sizes,
                                             strides)]
    digits = [d for v, _ in var_ranges for d in var_digits[v]]
    synthetic = _nest_all(tensors)
    return OpDims(synthetic + digits, tensors, var_digits)


def digit_splits(var_digits: dict[str, list[Digit]],
                 iteration_space: dict[str, tuple[int, int]]) -> dict[Digit, int]:
    """Each var's core split in SuperDSC dims (F §2.9): k contiguous slices of a var with
    digits (most significant first) of sizes s1, s2, … are the product of splitting s1
    by k when s1 divides by k, or else s1 whole and the rest, k/s1, over the next digits
    (a var cut in two by a view, split over more cores than its top digit has values).
    `iteration_space` is {var: (range, cores)}; digits not split are absent."""
    splits: dict[Digit, int] = {}
    for v, (n, k) in iteration_space.items():
        rest = k
        for d in var_digits[v]:
            if rest == 1:
                break
            if d.size % rest == 0:
                splits[d], rest = rest, 1
            elif rest % d.size == 0:
                splits[d], rest = d.size, rest // d.size
            else:
                break
        if rest != 1:
            raise NotExpressible(f"the split of {v} (range {n}) over {k} cores cuts its "
                                 f"digits {[d.size for d in var_digits[v]]} unevenly")
    return splits


def check_core_split(dims: OpDims, iteration_space: dict[str, tuple[int, int]]) -> None:
    """Raise NotExpressible unless the op's core split is SuperDSC: it cuts no var's digits
    unevenly (`digit_splits`) and gives every core whole sticks of each tensor's stick dim (a
    start address has no lane offset). The emitter checks the same per core."""
    splits = digit_splits(dims.var_digits, iteration_space)
    for i, t in enumerate(dims.tensors):
        k = splits.get(t.stick, 1) if t.stick is not None else 1
        if k > 1 and (t.stick.size // k) % t.elems_per_stick:
            raise NotExpressible(f"a split of {t.stick.var} over {k} cores would start arg {i} "
                                 f"inside a stick ({t.stick.size // k} elements per core)")


def why_not_expressible(graph: Graph, op: Operation,
                        splits: dict[str, int] | None = None) -> str | None:
    """Why codegen could not write `op` as SuperDSC with core `splits` (default: the op's own;
    none: one core), or None when it can: `op_dims` on the op's device coordinates, then
    `check_core_split`: the emitter's own tests."""
    splits = splits if splits is not None else op.core_splits or {}
    args = []
    for _, access in op.accesses():
        buf = graph.buffers[access.buffer]
        args.append((tuple(buf.host_size), buf.host_strides, buf.layout, access.index))
    return _why_not(op.core_ranges, op.var_ranges,
                    tuple(splits.get(v, 1) for v, _ in op.core_ranges),
                    tuple(args))


@lru_cache(maxsize=1 << 14)
def _why_not(ranges: tuple, var_ranges, split: tuple, args: tuple) -> str | None:
    """`why_not_expressible` on what it reads (per arg: host size and strides, layout,
    index): the LX placement asks it of every op once per stage_inputs check, and the
    layers of a stack ask the same."""
    coords = [access_coordinates(size, strides, layout, var_ranges, index)
              for size, strides, layout, index in args]
    try:
        dims = op_dims(list(ranges), coords, [a[2].device_size for a in args],
                       [a[2].device_strides_elems for a in args],
                       [a[2].elems_per_stick for a in args])
        check_core_split(dims, {v: (n, k) for (v, n), k in zip(ranges, split)})
    except NotExpressible as e:
        return str(e)
    return None


class _ConstantLane:
    """The lanes of an access that reads one lane of every stick (`x[..., 2]`)."""

    def __repr__(self) -> str:
        return "constant lane"


CONSTANT_LANE = _ConstantLane()


def _stick_var(coords: tuple[Lin, ...], e: int
               ) -> tuple[str | Indirect | _ConstantLane | None, int]:
    """The variable in the lanes and its lane shift: `Mod(v + k, E)` or a bare `v + k` (a view
    that starts k elements into the stick dim: `x[..., 16:]`); an index tensor's value for an
    element gather or scatter along the stick dim (`Mod(IndirectAccess(i), E)`); None for a
    constant 0 lane (scale -2, as the reference writes a tensor without a stick dim); and
    CONSTANT_LANE with the lane for any other constant: a size-1 stick dim whose coordinate
    starts there (`beta_`), since scale -2 can only say lane 0."""
    lane = coords[-1]
    if lane.is_const:
        if lane.const == 0:
            return None, 0
        if 0 < lane.const < e:
            return CONSTANT_LANE, lane.const
    atom = lane.as_atom()
    if isinstance(atom, Mod) and atom.modulus == e:
        lane = atom.num
    atom, shift = _shifted(lane)
    if isinstance(atom, Var) and shift >= 0:
        return atom.name, shift
    if isinstance(atom, Indirect) and shift == 0:
        return atom, 0
    raise NotExpressible(f"lane coordinate {lane} is not a whole stick of one variable "
                         f"(an offset inside the stick needs a relayout first)")


def _shifted(num: Lin) -> tuple[object, int]:
    """(atom, k) for `atom + k`, else (None, 0)."""
    if len(num.terms) == 1:
        ((atom, coeff),) = num.terms
        if coeff == 1:
            return atom, num.const
    return None, 0


def _stick_index(atom, stick: str | Indirect | None, shift: int, e: int) -> bool:
    """Whether `atom` is `floor((v + shift)/E)` of the stick variable v."""
    return isinstance(atom, FloorDiv) and atom.divisor == e and \
        isinstance(stick, str) and _shifted(atom.num) == (Var(stick), shift)


def _gathered_stick_index(atom, e: int) -> Indirect | None:
    """The index of `floor(IndirectAccess(i)/E)`: the stick of a gathered stick dim."""
    if isinstance(atom, FloorDiv) and atom.divisor == e:
        inner = atom.num.as_atom()
        if isinstance(inner, Indirect):
            return inner
    return None


def _single_var(num: Lin) -> str | None:
    atom = num.as_atom()
    return atom.name if isinstance(atom, Var) else None


def _boundaries(coord: Lin, stick: str | Indirect | None, shift: int, e: int,
                bounds: dict[str, set[int]]) -> None:
    """Record the divisors at which `coord` cuts each variable."""
    for atom in coord.atoms():
        if isinstance(atom, Indirect) or _gathered_stick_index(atom, e) is not None \
                or _stick_index(atom, stick, shift, e):
            continue          # the stick pattern itself: floor((v+k)/E) next to Mod(v+k, E)
        v, lo, hi, _ = _digit_span(atom, coord)
        bounds[v].update(b for b in (lo, hi) if b != math.inf)


def _digit_span(atom, coord: Lin) -> tuple[str, int, float, int]:
    """(v, lo, hi, div) such that atom = Σ digit·weight/div over v's digits with
    lo <= weight < hi: v, floor(v/m), Mod(v, m), Mod(floor(v/a), b) and floor(Mod(v, a)/b)."""
    if isinstance(atom, Var):
        return atom.name, 1, math.inf, 1
    inner = atom.num.as_atom() if isinstance(atom, (FloorDiv, Mod)) else None
    v = _single_var(atom.num) if inner is not None else None
    if isinstance(atom, FloorDiv):
        if v is not None:
            return v, atom.divisor, math.inf, atom.divisor
        if isinstance(inner, Mod) and _single_var(inner.num):
            return _single_var(inner.num), atom.divisor, inner.modulus, atom.divisor
    if isinstance(atom, Mod):
        if v is not None:
            return v, 1, atom.modulus, 1
        if isinstance(inner, FloorDiv) and _single_var(inner.num):
            a = inner.divisor
            return _single_var(inner.num), a, a * atom.modulus, a
    raise NotExpressible(f"coordinate {coord} uses {atom}, which is not a digit of one "
                         f"iteration variable")


def _digits(v: str, n: int, bounds: set[int]) -> list[Digit]:
    """The digits of `v` (most significant first) for boundaries that divide one another."""
    chain = sorted(b for b in bounds if 1 <= b <= n) if n > 1 else [1, 1]
    if chain[-1] != n:
        chain.append(n)
    for lo, hi in zip(chain, chain[1:]):
        if hi % lo:
            raise NotExpressible(f"variable {v} (range {n}) is cut at {lo} and {hi}, which do "
                                 f"not divide one another")
    split = len(chain) > 2
    digits = [Digit(v, lo, hi // lo, split) for lo, hi in zip(chain, chain[1:])]
    return digits[::-1]


def _expand(atom, coeff: int, var_digits: dict[str, list[Digit]],
            coord: Lin) -> dict[Digit, int]:
    """`coeff·atom` as digit multiples."""
    v, lo, hi, div = _digit_span(atom, coord)
    return {d: coeff * d.weight // div for d in var_digits[v] if lo <= d.weight < hi}


def _tensor_dims(coords: tuple[Lin, ...], lane: tuple[str | Indirect | None, int], e: int,
                 sizes: tuple[int, ...], strides: tuple[int, ...],
                 var_digits: dict[str, list[Digit]]) -> TensorDims:
    stick, shift = lane
    gathered = stick if isinstance(stick, Indirect) else None
    stick_digit = var_digits[stick][-1] if isinstance(stick, str) else \
        Digit("", -1, 1) if gathered or stick is CONSTANT_LANE else None
    t = TensorDims(stick_digit, e, lane_shift=shift)
    per_digit: dict[Digit, int] = {}
    stick_level: int | None = None
    sticks = 1                      # of a gathered stick dim
    for coord, stride, size in zip(coords[:-1], strides[:-1], sizes[:-1]):
        t.offset += coord.const * stride
        for atom, coeff in coord.terms:
            if gathered is not None and _gathered_stick_index(atom, e) == gathered:
                # the stick of an element gather / scatter along the stick dim
                if coeff != 1 or stick_level is not None or not 0 <= coord.const < size:
                    raise NotExpressible(f"the gathered stick index {coord} is not one "
                                         f"index value at one device dim")
                stick_level, sticks = stride, size - coord.const
                continue
            if isinstance(atom, Indirect):
                if coeff != 1 or atom.tensor in t.indirect:
                    raise NotExpressible(f"the gathered coordinate {coord} is not one index "
                                         f"value at one device dim")
                if not 0 <= coord.const < size:
                    raise NotExpressible(f"the gathered coordinate {coord} starts outside "
                                         f"its device dim of {size}")
                # the constant (x[1:][i]) is in t.offset, so in the start address, like any
                # view offset (F §3.F); the index then counts rows from there
                d = Digit("", -2 - len(t.indirect), 1)
                t.indirect[atom.tensor] = (d, size - coord.const)
                per_digit[d] = stride
                continue
            if _stick_index(atom, stick, shift, e):
                # floor((v+k)/E) = floor((low+k)/E) + Σ higher digits · weight/E
                if coeff != 1 or stick_level is not None:
                    raise NotExpressible(f"the stick index of {stick} appears as {coeff}·{atom}")
                stick_level = stride
                for d in var_digits[stick][:-1]:
                    per_digit[d] = per_digit.get(d, 0) + d.weight // e * stride
                continue
            for d, k in _expand(atom, coeff, var_digits, coord).items():
                if stick_digit is not None and d == stick_digit:
                    raise NotExpressible(f"the stick variable {stick} also appears outside its "
                                         f"stick in {coord}")
                per_digit[d] = per_digit.get(d, 0) + k * stride
    if gathered is not None:
        # the value's stick is `value // E`, its lane `value % E` (F §4.2's stick model)
        if gathered.tensor in t.indirect:
            raise NotExpressible(f"index tensor {gathered.tensor} is read twice by one access")
        t.indirect[gathered.tensor] = (stick_digit, sticks * e)
        per_digit[stick_digit] = stick_level or 0
    elif stick_digit is not None:
        if stick_level is None:
            if stick_digit.size + shift > e:
                raise NotExpressible(f"the stick variable {stick} spans several sticks but no "
                                     f"coordinate holds its stick index")
            stick_level = 0
        per_digit[stick_digit] = stick_level
    for d, s in per_digit.items():
        if s < 0:
            raise NotExpressible(f"dim {d.key} runs backwards (stride {s})")
    t.levels = [Level(d, s, 0) for d, s in per_digit.items() if s or d == stick_digit]
    return t


def _nest_all(tensors: list[TensorDims]) -> list[Digit]:
    """Order every tensor's levels and set their extents (gaps). Returns the op's synthetic
    digits (size-1 dims that carry a pitch or a gathered dim), renumbered op-wide."""
    synthetic: list[Digit] = []
    for t in tensors:
        extra = _nest(t)
        if extra is not None:
            t.levels.insert(0, Level(Digit("", -100, 1), t.elems_per_stick, extra))
        renamed = {}
        for lv in t.levels:
            if not lv.digit.var:
                renamed[lv.digit] = Digit("", len(synthetic), 1)
                synthetic.append(renamed[lv.digit])
        t.levels = [Level(renamed.get(lv.digit, lv.digit), lv.stride, lv.extent)
                    for lv in t.levels]
        if t.stick in renamed:
            t.stick = renamed[t.stick]
        t.indirect = {name: (renamed[d], n) for name, (d, n) in t.indirect.items()}
    return synthetic


def _nest(t: TensorDims) -> int | None:
    """Sort `t`'s levels by stride and set extents; returns the extent a synthetic innermost
    level must have when the first level starts above one stick (else None)."""
    e = t.elems_per_stick
    units = {lv.digit: _units(t, lv.digit) for lv in t.levels}
    sized = [lv for lv in t.levels if units[lv.digit] > 1 or lv.digit == t.stick]
    ones = [lv for lv in t.levels if lv not in sized]
    head = []
    if t.stick is not None and units[t.stick] == 1:
        # a stick var within one stick: its stride never matters, so it goes innermost
        head = [Level(t.stick, e, 1)]
        sized = [lv for lv in sized if lv.digit != t.stick]
    sized = head + sorted(sized, key=lambda lv: lv.stride)
    out: list[Level] = []
    below = e          # where the next level starts if packed densely
    extra = None
    for lv in sized:
        stride = lv.stride
        if stride < below or stride % (out[-1].stride if out else e):
            raise NotExpressible(f"dim {lv.digit.key} (stride {stride}) overlaps or is not "
                                 f"nested in the dims below it")
        if out:
            prev = out[-1]
            out[-1] = Level(prev.digit, prev.stride, stride // prev.stride)
        elif stride > e:
            extra = stride // e
        out.append(Level(lv.digit, stride, units[lv.digit]))
        below = stride * units[lv.digit]
    top = out[-1].stride * out[-1].extent if out else e
    out += [Level(lv.digit, top, 1) for lv in ones]
    t.levels = out
    return extra


def _units(t: TensorDims, d: Digit) -> int:
    """A level's count in its own units: sticks for the stick level, the gathered dim's extent
    for a gather, values otherwise."""
    e = t.elems_per_stick
    for gd, n in t.indirect.values():
        if gd == d:
            return -(-n // e) if d == t.stick else n
    if d == t.stick:
        return -(-(d.size + t.lane_shift) // e)
    return d.size
