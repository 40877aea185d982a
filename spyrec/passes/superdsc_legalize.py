"""superdsc_legalize — rewrite every op SuperDSC cannot address into ops it can.

SuperDSC describes a tensor as nested dims over whole sticks with one variable in the lanes
(plan/sdsc_dims.py: the analysis codegen and this pass both ask). Views produce accesses
outside that form: two variables in one stick (two 32-wide heads in a 64-lane fp16 stick: lane
`r0 + 32*Mod(c1, 2)`), a variable cut inside a stick (lane `Mod(r0, 32)` of a 64-lane stick),
coordinates that are not digits of one variable (a diagonal view), or a variable whose digits
a core split would cut unevenly.

Reads: ops, their accesses, loops and core splits, buffer layouts (after work_division, whose
split decides whether a view's digits are cut unevenly). Writes: replaces such an op by
equivalent ops over rewritten iteration variables (names `<op>.<var>_<j>` for the pieces of a
fix, `<op>.<var>_at<start>` for those of a cut; copies add intermediate buffers with layouts),
each keeping the core split of the vars it kept whole, or on one core when that split is not
expressible; the `superdsc_legalize` report row.
Guarantees: codegen's own tests (`sdsc_dims.op_dims`, then `check_core_split` with the op's
split) accept every op; when no rewrite within `max_pieces` ops exists (a large diagonal
view), the compile stops naming every such op, its source line and the reason. SuperDSC is
the only form codegen writes, so there is no fallback to leave an op to.

Three rewrites, composed by a small search that keeps the fewest ops (each candidate is judged
by the emitter's own test, so the pass and codegen never disagree):
- refine `v` at `m`: `v = m·v_hi + v_lo`, two variables where one was (no new op). A variable
  cut inside its stick becomes a clean stick variable; a view's digits become variables a core
  split cannot cut.
- fix `v` modulo `m`: `m` ops, op `j` over `v = m·v' + j` (`v` dropped when `m` is its range).
  Two variables in one stick become one variable plus a constant lane shift (`c3 + 32·j`,
  the stick fold's `beta_`); a diagonal view becomes per-element ops when it is small.
- cut `v` at points: one op per run of `v` between the points where a coordinate wraps
  (`Mod(c1 + 71, 96)` and `floor((c1 + 71)/96)`, a slice of a flattened `cat`): within a run
  the coordinate is affine, so each piece has a plain lane shift (`beta_`) and one row.
Reduced variables are never fixed or cut (that would need partial results combined),
variables of a tiling loop are left alone (the loop divides them), a matmul's K is never
refined. When no rewrite of the op itself exists (a sum over a wrapped view), the inputs it
reads through a view are first copied into fresh buffers in the op's own variable order
(`<input>__<op>_copy`): the copy reduces nothing, so it can be cut, and the op then reads a
plain buffer. The report row lists such copies among the op's pieces.
"""

from __future__ import annotations

from typing import ClassVar

from dataclasses import dataclass, replace

from spyrec.errors import UnsupportedProgram
from spyrec.indexing import FloorDiv, Lin, Mod, Var, substitute, var
from spyrec.indexing.sticks import access_coordinates
from spyrec.ir import Access, Buffer, Graph, Operation
from spyrec.layout import default_layout
from spyrec.passes.registry import CompileContext, Pass, register_pass
from spyrec.plan.sdsc_dims import why_not_expressible

# The most ops one op may become (a fix of a small diagonal view is per element).
_MAX_PIECES = 128
_DEPTH = 3
# Past this many wrap points a coordinate is a variable's digits, not a wrapped view: cutting
# it would exceed any budget, so the points are not even listed.
_MAX_CUTS = 1024


@register_pass("superdsc_legalize")
@dataclass(frozen=True)
class SuperdscLegalize(Pass):
    max_pieces: int = _MAX_PIECES


    report_keys: ClassVar[dict] = {"superdsc_legalize": None}

    def _check_options(self) -> None:
        if self.max_pieces < 1:
            from spyrec.errors import ConfigError
            raise ConfigError(f"superdsc_legalize.max_pieces must be at least 1, got "
                              f"{self.max_pieces}")

    def run(self, graph: Graph, ctx: CompileContext) -> None:
        new_ops: list[Operation] = []
        rows: list[dict] = []
        refused: list[str] = []
        for op in graph.ops:
            reason = why_not_expressible(graph, op)
            if reason is None:
                new_ops.append(op)
                continue
            pieces = _legalize(graph, op, _DEPTH, self.max_pieces)
            if pieces is None:
                pieces = _legalize_through_copy(graph, op, self.max_pieces)
            if pieces is None:
                where = f" ({op.source})" if op.source else ""
                refused.append(f"op {op.name}{where}: {reason}")
                continue
            new_ops += pieces
            rows.append({"op": op.name, "reason": reason, "ops": len(pieces),
                         "rewrite": _describe(op, pieces)})
        if refused:
            raise UnsupportedProgram(
                "no SuperDSC form found for " + "; ".join(refused) +
                f" — the Spyre backend cannot address these views, and no rewrite into at most "
                f"superdsc_legalize.max_pieces = {self.max_pieces} ops exists; raise it "
                f"(--set superdsc_legalize.max_pieces=N) or lay the tensor out with its stick "
                f"on a dim the view keeps whole")
        graph.ops = new_ops
        ctx.report["superdsc_legalize"] = {"count": len(rows),
                                           "ops_added": sum(r["ops"] - 1 for r in rows),
                                           "list": rows}


def _arg_facts(graph: Graph, op: Operation) -> tuple[list, list, list, list]:
    """Per arg, in arg order (as codegen/opspec.py builds them): device coordinates, device
    sizes, device element strides, elements per stick."""
    coords, sizes, strides, elems = [], [], [], []
    for _, access in op.accesses():
        buf = graph.buffers[access.buffer]
        coords.append(access_coordinates(tuple(buf.host_size), buf.host_strides, buf.layout,
                                          op.var_ranges, access.index))
        sizes.append(buf.layout.device_size)
        strides.append(buf.layout.device_strides_elems)
        elems.append(buf.layout.elems_per_stick)
    return coords, sizes, strides, elems


def _legalize(graph: Graph, op: Operation, depth: int, budget: int) -> list[Operation] | None:
    """The fewest expressible ops equal to `op` (at most `budget`), or None. A piece keeps the
    core split of each var it kept whole, or runs on one core when that split is not
    expressible (work_division has run; pieces are small copies)."""
    if why_not_expressible(graph, op) is None:
        return [op]
    if op.core_splits and why_not_expressible(graph, op, {}) is None:
        return [replace(op, core_splits={v: 1 for v, _ in op.core_ranges})]
    if depth == 0:
        return None
    best: list[Operation] | None = None
    for cost, rewrite in _candidates(graph, op):
        limit = budget if best is None else min(budget, len(best) - 1)
        if cost > limit:
            continue
        out: list[Operation] = []
        for piece in rewrite():
            legal = _legalize(graph, piece, depth - 1, limit - len(out))
            if legal is None or len(out) + len(legal) > limit:
                out = []
                break
            out += legal
        if out:
            best = out
            if len(best) == 1:
                break
    return best


def _legalize_through_copy(graph: Graph, op: Operation, budget: int) -> list[Operation] | None:
    """When no rewrite of `op` itself works (a reduction over a wrapped view: its reduced
    variable cannot be cut into pieces), copy the inputs it reads through a view into fresh
    buffers laid out in the op's own variables, and legalize the copies instead: a copy
    reduces nothing, so `cut` and `fix` apply to it. Each input alone first, then all. Ops
    inside a tiling loop are left alone (their reads advance with the loop)."""
    if op.loops:
        return None
    viewed = [k for k, a in enumerate(op.inputs) if _is_view(graph, op, a)]
    for chosen in [[k] for k in viewed] + ([viewed] if len(viewed) > 1 else []):
        found = _copied(graph, op, chosen, budget)
        if found is not None:
            return found
    return None


def _is_view(graph: Graph, op: Operation, access: Access) -> bool:
    """Whether `access` reads other than plain row-major order of the op's variables: the
    only reads a copy can help (an index tensor's value cannot be copied ahead)."""
    atoms = access.index.free_atoms()
    if not atoms or any(not isinstance(a, Var) for a in atoms):
        return False
    buf = graph.buffers[access.buffer]
    order = _order_in(op, access)
    return access.index != _row_major(order, dict(op.ranges)) or \
        tuple(dict(op.ranges)[v] for v in order) != buf.host_size


def _order_in(op: Operation, access: Access) -> list[str]:
    used = {a.name for a in access.index.free_atoms()}
    return [v for v, _ in op.ranges if v in used]


def _copied(graph: Graph, op: Operation, chosen: list[int],
            budget: int) -> list[Operation] | None:
    """The copies of `op`'s inputs `chosen` and `op` reading them, all legalized within
    `budget` ops; None if no such form exists. The copies' buffers stay in the graph only
    for the form returned."""
    inputs = list(op.inputs)
    copies: list[tuple[Buffer, Operation]] = []
    out = None
    for k in chosen:
        found = _copy_for(graph, replace(op, inputs=tuple(inputs)), k)
        if found is None:
            break
        graph.add_buffer(found[0])
        copies.append(found)
        inputs[k] = found[1].output
    else:
        out = _legalize_all(graph, [c for _, c in copies] +
                            [replace(op, inputs=tuple(inputs))], budget)
    if out is None:
        for buf, _ in copies:
            del graph.buffers[buf.name]
    return out


def _copy_for(graph: Graph, op: Operation, k: int) -> tuple[Buffer, Operation] | None:
    """A fresh buffer holding input `k` in `op`'s variable order (the vars it reads, with
    each in turn as the stick dim, last first) and the copy that fills it, for the first
    order in which `op` reading the buffer is expressible; None if no order is."""
    sizes = dict(op.ranges)
    order = _order_in(op, op.inputs[k])
    src = graph.buffers[op.inputs[k].buffer]
    for stick in reversed(order):
        names = [v for v in order if v != stick] + [stick]
        shape = tuple(sizes[v] for v in names)
        buf = Buffer(graph.fresh_name(f"{src.name}__{op.name}_copy"), shape, src.host_dtype,
                     "intermediate", source=op.source,
                     layout=default_layout(shape, src.host_dtype))
        written = Access(buf.name, _row_major(names, sizes))
        trial = replace(op, inputs=op.inputs[:k] + (written,) + op.inputs[k + 1:])
        graph.add_buffer(buf)
        ok = why_not_expressible(graph, trial, {}) is None
        del graph.buffers[buf.name]
        if ok:
            return buf, Operation(buf.name, "identity", tuple((v, sizes[v]) for v in names),
                                  (op.inputs[k],), written, source=op.source,
                                  core_splits=_kept_splits(op, names), node=op.node,
                                  scope=op.scope,
                                  lengths=tuple((v, s) for v, s in op.lengths if v in names))
    return None


def _kept_splits(op: Operation, names: list[str]) -> dict[str, int] | None:
    """The copy of an input splits its vars as `op` does (`_legalize` drops a split that is
    not expressible), or has no split when work_division has not run."""
    if op.core_splits is None:
        return None
    return {v: op.core_splits.get(v, 1) for v in names}


def _legalize_all(graph: Graph, ops: list[Operation], budget: int) -> list[Operation] | None:
    """Every op of `ops` legalized, in order, within `budget` ops in all; else None."""
    out: list[Operation] = []
    for op in ops:
        legal = _legalize(graph, op, _DEPTH, budget - len(out))
        if legal is None or len(out) + len(legal) > budget:
            return None
        out += legal
    return out


def _row_major(names: list[str], sizes: dict[str, int]) -> Lin:
    """The flat index of a buffer whose dims are the variables `names` in order."""
    index, stride = Lin(), 1
    for v in reversed(names):
        if sizes[v] > 1:
            index = index + var(v).scale(stride)
        stride *= sizes[v]
    return index


def _candidates(graph: Graph, op: Operation) -> list[tuple[int, object]]:
    """(ops it makes, thunk) for every refine, fix and cut the op's coordinates suggest,
    cheapest first."""
    tiled = {v for loop in op.loops for v in loop.tiled}
    ranges = dict(op.ranges)
    coords = _arg_facts(graph, op)[0]
    moduli: dict[str, set[int]] = {v: set() for v in ranges}
    for arg in coords:
        for c in arg:
            _collect_moduli(c, moduli)
    out = []
    for v, n in op.ranges:
        if v in tiled or n < 2:
            continue
        cuts = {m for m in moduli[v] if 1 < m < n and n % m == 0}
        matmul_k = op.op == "batchmatmul" and v in op.reduced
        for m in sorted(cuts):
            if not matmul_k:
                out.append((1, _thunk(refine, op, v, m)))
        if v not in op.reduced:
            for m in sorted(cuts | {n}):
                out.append((m, _thunk(fix, op, v, m)))
            for points in _wrap_cuts(coords, v, n):
                out.append((len(points) + 1, _thunk(cut, op, v, points)))
    return sorted(out, key=lambda c: c[0])


def _wrap_cuts(coords: list, v: str, n: int) -> list[tuple[int, ...]]:
    """The cut points (0 < p < n) at which some coordinate's `Mod(a·v + k, m)` or
    `floor((a·v + k)/m)` wraps, per atom and all together: between two points every such
    atom of `v` is affine, so a view that wraps (a slice of a flattened `cat`, a roll) becomes
    pieces with a plain lane shift. Distinct sets only, fewest points first."""
    per_atom: set[tuple[int, ...]] = set()
    for arg in coords:
        for c in arg:
            _collect_wraps(c, v, n, per_atom)
    sets = per_atom | ({tuple(sorted({p for s in per_atom for p in s}))} if per_atom else set())
    return sorted(sets, key=lambda s: (len(s), s))


def _collect_wraps(e: Lin, v: str, n: int, out: set[tuple[int, ...]]) -> None:
    for atom in e.atoms():
        if isinstance(atom, (Mod, FloorDiv)):
            m = atom.modulus if isinstance(atom, Mod) else atom.divisor
            points = _wrap_points(atom.num, v, n, m)
            if points:
                out.add(points)
            _collect_wraps(atom.num, v, n, out)


def _wrap_points(num: Lin, v: str, n: int, m: int) -> tuple[int, ...]:
    """Where `floor(num/m)` changes as `v` runs over [0, n), for `num = a·v + k` (no other
    variable); empty otherwise."""
    if len(num.terms) != 1 or not isinstance(num.terms[0][0], Var) or \
            num.terms[0][0].name != v:
        return ()
    a, k = num.terms[0][1], num.const
    lo, hi = sorted((k, a * (n - 1) + k))
    # the values crossing q·m for q in (floor(lo/m), floor(hi/m)]
    qs = range(lo // m + 1, hi // m + 1)
    if len(qs) >= _MAX_CUTS:
        return ()      # a digit pattern (refine and fix handle it), not a wrap
    if a > 0:
        points = {-(-(q * m - k) // a) for q in qs}
    else:
        points = {(k - q * m) // -a + 1 for q in qs}
    return tuple(sorted(p for p in points if 0 < p < n))


def cut(op: Operation, v: str, points: tuple[int, ...]) -> list[Operation]:
    """One op per interval of `v` between the cut `points`: op `j` runs over `v = v' + lo_j`,
    v' < hi_j - lo_j. Unlike `fix`, each piece keeps `v` contiguous, so a wrapped coordinate
    becomes one affine run (a lane shift) per piece."""
    n = dict(op.ranges)[v]
    bounds = (0, *points, n)
    pieces = []
    for lo, hi in zip(bounds, bounds[1:]):
        if hi - lo == 1:
            mapping = {Var(v): Lin(const=lo)}
            ranges = tuple(r for r in op.ranges if r[0] != v)
        else:
            mapping = {Var(v): var(v) + lo}
            ranges = tuple((name, hi - lo if name == v else k) for name, k in op.ranges)
        pieces.append(_rewritten(op, mapping, ranges, op.reduced, f"{op.name}.{v}_at{lo}"))
    return pieces


def _thunk(fn, *args):
    return lambda: fn(*args)


def _collect_moduli(e: Lin, moduli: dict[str, set[int]]) -> None:
    """Every `m` at which a coordinate cuts a variable: `Mod(a·v + …, m)` and
    `floor((a·v + …)/m)` cut `v` every m/gcd(a, m) values."""
    from math import gcd

    for atom in e.atoms():
        if isinstance(atom, (Mod, FloorDiv)):
            m = atom.modulus if isinstance(atom, Mod) else atom.divisor
            for inner, a in atom.num.terms:
                if isinstance(inner, Var) and inner.name in moduli:
                    moduli[inner.name].add(m // gcd(abs(a), m))
            _collect_moduli(atom.num, moduli)


def refine(op: Operation, v: str, m: int) -> list[Operation]:
    """`op` with `v` (range n) as two variables: `v = m·hi + lo`, hi < n/m, lo < m."""
    names = {name for name, _ in op.ranges}
    hi, lo = _fresh(v[0], names), None
    lo = _fresh(v[0], names | {hi})
    mapping = {Var(v): var(hi).scale(m) + var(lo)}
    ranges = []
    for name, n in op.ranges:
        ranges += [(hi, n // m), (lo, m)] if name == v else [(name, n)]
    reduced = tuple(x for r in op.reduced for x in ((hi, lo) if r == v else (r,)))
    return [_rewritten(op, mapping, tuple(ranges), reduced, op.name)]


def fix(op: Operation, v: str, m: int) -> list[Operation]:
    """`m` ops; op `j` runs over `v = m·v' + j` (v' < n/m; dropped when m = n)."""
    n = dict(op.ranges)[v]
    pieces = []
    for j in range(m):
        if m == n:
            mapping = {Var(v): Lin(const=j)}
            ranges = tuple(r for r in op.ranges if r[0] != v)
        else:
            mapping = {Var(v): var(v).scale(m) + j}
            ranges = tuple((name, k // m if name == v else k) for name, k in op.ranges)
        pieces.append(_rewritten(op, mapping, ranges, op.reduced, f"{op.name}.{v}_{j}"))
    return pieces


def _rewritten(op: Operation, mapping: dict, ranges: tuple, reduced: tuple,
               name: str) -> Operation:
    cut = [v for v, s in op.lengths if Var(v) in mapping]
    if cut:
        raise UnsupportedProgram(
            f"op {op.name!r}{f' ({op.source})' if op.source else ''} walks the symbolic "
            f"length {dict(op.lengths)[cut[0]]} through a view SuperDSC can express only "
            f"cut into pieces, which a length cannot be: compile it with --set "
            f"symbolic_lengths.mode=tiled, or export that dim static")

    def sub(a: Access) -> Access:
        return Access(a.buffer, substitute(a.index, mapping))
    before = dict(op.core_ranges)
    splits = op.core_splits or {}
    piece = replace(op, name=name, ranges=ranges, reduced=reduced,
                    inputs=tuple(sub(a) for a in op.inputs), output=sub(op.output),
                    index_inputs=tuple(sub(a) for a in op.index_inputs))
    if op.core_splits is not None:       # a replicated op's pieces keep its copies
        piece.core_splits = {v: splits.get(v, 1) if before.get(v) == n else 1
                             for v, n in piece.core_ranges}
    return piece


def _fresh(prefix: str, taken: set[str]) -> str:
    k = 0
    while f"{prefix}{k}" in taken:
        k += 1
    return f"{prefix}{k}"


def _describe(op: Operation, pieces: list[Operation]) -> str:
    before = ", ".join(f"{v}<{n}" for v, n in op.ranges)
    after = ", ".join(f"{v}<{n}" for v, n in pieces[0].ranges)
    return f"{len(pieces)} op(s) over [{after}] for [{before}]"
