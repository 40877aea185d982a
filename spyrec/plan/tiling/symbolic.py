"""Symbolic lengths (issue 30): every op that walks a symbolic dim runs in a counted loop over it
whose trip count is the length over a fixed tile, so one compiled program serves every length.

The graph is the program at each symbol's maximum. Names flow from the input and output dims
that have a symbol (`Graph.symbolic_dims`) through the ops exactly as a tiling file's `dims`
do (`dimnames.propagate`). Consecutive ops that carry a symbol form one group, tiled by the
coarse-tiling transform with the symbol's granularity as the tile; its loops then get their
`LoopBound`. What is proven here, for every admissible length L at once:

- every access to a dim that carries a symbol is walked by a variable a bound loop tiles, so
  at L its trips stop at L // tile and it touches coordinates below L only: nothing reads the
  padding between L and the maximum (`padding_problems`), and outputs sliced at L are whole;
- a tile divides every admissible length (the granularity), so no trip is partial;
- the loop counts, allocations, addresses and LX plans are those of the maximum, and each
  shrinks with L (a loop runs a prefix of its trips): the maximum's checks cover every L.

An op that reads a symbolic dim at a place that does not move with the length (`x[:, -1]`, a
view merging the dim with another, a second dim of the same length outside attention) or
that carries two symbols is refused, naming it. A sum over the length is tiled as any
reduction (accumulated over the trips it runs); a mean is refused by `check_instances`, its
1/length being baked in.
"""

from __future__ import annotations

from dataclasses import replace

from spyrec.costmodel import DEFAULT_PARAMS, CostParams
from spyrec.device import MAX_LOOP_TRIPS
from spyrec.errors import ConfigError, UnsupportedProgram
from spyrec.ir import Graph, LoopBound, Operation, SymLength, ValueSource
from spyrec.plan.tiling.checks import check_contiguous, check_whole_sticks
from spyrec.plan.tiling.config import GroupPlan, Level, TilingPlan
from spyrec.ir.walks import var_extents, walked_dims
from spyrec.plan.tiling.dimnames import DimNames, describe_op, propagate

WHERE = "symbolic lengths"


def tile_symbolic(graph: Graph, sized: bool = False,
                  params: CostParams = DEFAULT_PARAMS) -> list[dict]:
    """Put every op carrying a symbolic dim into a bound loop over it, or (`sized`) make it
    run the whole length itself (`Operation.lengths`; a sum over the length then sums the
    length's values) (one report row per group); UnsupportedProgram naming the op when the
    program depends on a length otherwise."""
    from spyrec.plan.tiling.transform import tile_graph

    named = symbol_names(graph)
    groups = _groups(graph, named)
    if sized:
        rows = [_size_group(graph, g) for g in groups]
        groups = []
        _size_looped(graph, named)
        _size_writers(graph)
        _set_min_shares(graph, params)
    else:
        rows = []
    for group in groups:
        check_contiguous(graph, [op for op in graph.ops if op.name in group.vars], group.where)
    rows += tile_graph(graph, TilingPlan(WHERE, tuple(groups), {
        s.name: s.maximum for s in graph.symbols.values()}))
    _bind_loops(graph, groups)
    problems = padding_problems(graph, symbol_names(graph))
    if problems:
        raise UnsupportedProgram("\n".join(problems))
    return rows


def symbol_names(graph: Graph) -> DimNames:
    """Which dim of every buffer and which variable of every op carries which symbol."""
    seeds = {name: tuple(dims.get(d) for d in range(len(graph.buffers[name].host_size)))
             for name, dims in graph.symbolic_dims.items()}
    for name, dims in _bound_outputs(graph).items():
        old = seeds.get(name, (None,) * len(dims))
        seeds[name] = tuple(a or b for a, b in zip(old, dims))
    sizes = {s.name: s.maximum for s in graph.symbols.values()}
    try:
        return propagate(graph, seeds, sizes, WHERE)
    except ConfigError as e:
        raise UnsupportedProgram(f"{e}; a dim of two symbolic lengths is not supported") \
            from None


def _bound_outputs(graph: Graph) -> dict[str, tuple[str | None, ...]]:
    """The output dims that ops already in bound loops walk with the bound variable: flash
    attention's output rows, written from per-tile accumulators that carry no name, still
    have the queries' length (without this, the ops reading them would run at the maximum)."""
    found: dict[str, list[str | None]] = {}
    for op in graph.ops:
        bound = {v: loop.bound.symbol for loop in op.loops if loop.bound for v in loop.tiled}
        out = graph.buffers[op.output.buffer]
        if not bound or out.per_tile:
            continue
        walked = walked_dims(op.output.index, out.host_size, var_extents(op))
        for v, d in walked.items():
            if v in bound and graph.symbols[bound[v]].value_of is None:
                found.setdefault(out.name, [None] * len(out.host_size))[d] = bound[v]
    return {name: tuple(dims) for name, dims in found.items()}


def _groups(graph: Graph, named: DimNames) -> list[GroupPlan]:
    """Maximal runs of consecutive ops carrying one symbol: each a group of one loop."""
    runs: list[tuple[str, int, list[Operation]]] = []    # symbol, last op's position, ops
    for i, op in enumerate(graph.ops):
        carried = sorted(set(named.op_vars[op.name].values()))
        if len(carried) > 1:
            raise UnsupportedProgram(
                f"{describe_op(op)} walks the symbolic lengths {' and '.join(carried)} at "
                f"once; spyrec tiles one symbolic dim per op: export with one of them static")
        if not carried or op.loops:
            continue
        if runs and runs[-1][0] == carried[0] and runs[-1][1] == i - 1:
            runs[-1] = (carried[0], i, runs[-1][2] + [op])
        else:
            runs.append((carried[0], i, [op]))
    return [_group(graph, named, symbol, ops, k)
            for k, (symbol, _, ops) in enumerate(runs)]


def _group(graph: Graph, named: DimNames, symbol: str, ops: list[Operation],
           index: int) -> GroupPlan:
    """One loop over `symbol` around `ops`, tiles of the symbol's granularity."""
    length = graph.symbols[symbol]
    count = length.maximum // length.granularity
    where = f"{WHERE}: {symbol} ({length.where or 'a symbolic length'})"
    variables = {}
    for op in ops:
        var = next(v for v, name in named.op_vars[op.name].items() if name == symbol)
        try:
            check_whole_sticks(graph, op, var, symbol, count, where)
        except ConfigError:
            raise UnsupportedProgram(
                f"{describe_op(op)}: a tile of {length.granularity} along the symbolic length "
                f"{symbol} ({length.describe()}) splits a 128-byte stick of its data; export "
                f"the length as a multiple of a whole stick, such as 64 * torch.export.Dim(...) "
                f"for fp16") from None
        variables[op.name] = (var,)
    return GroupPlan(index, tuple(op.name for op in ops), (Level(symbol, count),), variables,
                     where)


def _size_looped(graph: Graph, named: DimNames) -> None:
    """Ops already in loops (flash attention's) that walk a symbolic length of a shape with
    a variable no loop tiles run that length whole: a flash whose query tile is every query
    (`attention.query_tile_allowed`) has no query loop, its key loop bound by the length."""
    for i, op in enumerate(graph.ops):
        if not op.loops:
            continue
        tiled = {v for loop in op.loops for v in loop.tiled}
        sizes = dict(op.ranges)
        lengths = tuple((v, name) for v, name in sorted(named.op_vars[op.name].items())
                        if v not in tiled and graph.symbols[name].value_of is None
                        and sizes.get(v) == graph.symbols[name].maximum)
        if lengths:
            graph.ops[i] = replace(op, lengths=lengths)


def _set_min_shares(graph: Graph, params: CostParams) -> None:
    """Each symbol that sizes ops gets the minimum share work division plans its splits
    with (`SymLength.min_shares`, one step to the maximum): about its minimum over the
    broadcast cohort (costmodel: 8 cores reading one slice cost one read), a divisor of the
    granularity, so that at the shortest length a var split
    over every core runs on about 8 of them and a weight each reads whole is read once, not
    once per 8 busy cores. The length_shares pass then chooses the share of each length by
    the cost model (`plan/length_shares.py`)."""
    used = {name for op in graph.ops for _, name in op.lengths}
    for name in sorted(used):
        symbol = graph.symbols[name]
        target = symbol.minimum // params.broadcast_cohort
        share = max((d for d in range(1, target + 1) if symbol.granularity % d == 0),
                    default=0)
        graph.symbols[name] = replace(
            symbol, min_shares=((symbol.maximum, share),) if share else ())


def _size_writers(graph: Graph) -> None:
    """An op whose output a sized op reads along its length runs that length too: in LX each
    core holds its share of the rows, which at a length L is L / k rows from j * L / k, so the
    writer must cut the same shares (flash attention's causal mask tile, computed from
    position constants no symbol names, is written for the queries the tile's readers run).
    Repeated until no writer changes (a writer's own intermediate inputs follow)."""
    writers: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        writers.setdefault(op.output.buffer, []).append(i)
    changed = True
    while changed:
        changed = False
        for op in list(graph.ops):
            sized = dict(op.lengths)
            ranges = var_extents(op)
            for access in op.reads() if sized else ():
                buf = graph.buffers[access.buffer]
                if buf.role != "intermediate":
                    continue
                dims = {d: sized[v] for v, d in walked_dims(access.index, buf.host_size,
                                                            ranges).items() if v in sized}
                for i in writers.get(access.buffer, []) if dims else []:
                    changed |= _size_writer(graph, i, buf, dims)


def _size_writer(graph: Graph, i: int, buf, dims: dict[int, str]) -> bool:
    """Size op `i`'s variables that walk the dims `dims` (dim -> symbol) of its output `buf`
    and that no loop tiles; whether it changed."""
    writer = graph.ops[i]
    tiled = {v for loop in writer.loops for v in loop.tiled}
    have = dict(writer.lengths)
    add = tuple((v, dims[d]) for v, d in walked_dims(writer.output.index, buf.host_size,
                                                      dict(writer.ranges)).items()
                if d in dims and v not in tiled and v not in have)
    if add:
        graph.ops[i] = replace(writer, lengths=writer.lengths + add)
    return bool(add)


def _size_group(graph: Graph, group: GroupPlan) -> dict:
    """The ops of `group` run the symbol's whole length (`Operation.lengths`); the report
    row says so (no loop: `loops` empty, `sized` the ops)."""
    symbol = group.levels[0].dim
    for i, op in enumerate(graph.ops):
        if op.name in group.vars:
            graph.ops[i] = replace(op, lengths=tuple((v, symbol) for v in group.vars[op.name]))
    return {"group": group.index, "loops": [], "ops": len(group.vars), "nests": 0,
            "sized": {"symbol": symbol, "ops": list(group.vars)}, "per_tile": [],
            "accumulators": [], "hoisted": []}


def _bind_loops(graph: Graph, groups: list[GroupPlan]) -> None:
    """The loops the groups made run `length // granularity` trips."""
    bounds = {f"g{g.index}.0": LoopBound(g.levels[0].dim,
                                          graph.symbols[g.levels[0].dim].granularity)
              for g in groups}
    for i, op in enumerate(graph.ops):
        if any(loop.key in bounds for loop in op.loops):
            graph.ops[i] = replace(op, loops=tuple(
                replace(loop, bound=bounds[loop.key]) if loop.key in bounds else loop
                for loop in op.loops))


def site_lengths(graph: Graph, site, named: DimNames) -> tuple[str | None, str | None]:
    """The symbols of an attention site's queries and keys (None: a static length), from
    the dims its scores `q @ kᵀ` walk (`named`: `symbol_names(graph)`)."""
    from spyrec.plan.tiling.dimnames import dim_vars

    op = next(o for o in graph.ops if o.name == site.scores)
    walks = dim_vars(graph.buffers[op.output.buffer], op) or (None, None)
    carried = named.op_vars.get(op.name, {})
    return carried.get(walks[-2]), carried.get(walks[-1])


def keys_symbol(graph: Graph, site, filled: ValueSource) -> str:
    """The symbol (added once per value) for the keys a decode step attends to, read at run
    time from `filled`: 0 up to the cache's slots, by 1."""
    for name, symbol in graph.symbols.items():
        if symbol.value_of == filled:
            return name
    name = f"{filled.input}_keys"
    while name in graph.symbols:
        name += "_"
    graph.symbols[name] = SymLength(name, 1, 0, site.keys,
                                    f"keys up to {filled.describe()}", value_of=filled)
    return name


def bind_attention_loops(graph: Graph, key: str, lengths: tuple[str | None, str | None],
                         tiles) -> None:
    """The flash loops of attention `key` over a symbolic number of queries (`<key>.0`) or
    keys (`<key>.1…`, whose causal or window span is then clamped to the length's tiles
    too) run the length over the tile."""
    queries, keys = lengths
    for i, op in enumerate(graph.ops):
        loops = tuple(
            replace(loop, bound=LoopBound(queries, tiles.queries,
                                          graph.symbols[queries].granularity % tiles.queries > 0))
            if queries and loop.key == f"{key}.0" else
            replace(loop, bound=LoopBound(keys, tiles.keys))
            if keys and loop.key.startswith(f"{key}.1") else loop
            for loop in op.loops)
        if loops != op.loops:
            graph.ops[i] = replace(op, loops=loops)


def padding_problems(graph: Graph, named: DimNames) -> list[str]:
    """One line per access that may touch a symbolic dim past the length: the dim is not
    walked by a variable that a loop bound by that symbol tiles."""
    problems = []
    for op in graph.ops:
        bound = {v: loop.bound.symbol for loop in op.loops if loop.bound for v in loop.tiled}
        bound.update(op.lengths)
        ranges = var_extents(op)
        for _, access in op.accesses():
            buf = graph.buffers[access.buffer]
            dims = named.buffers.get(buf.name, ())
            if buf.per_tile or not any(dims):
                continue
            walked = {d: v for v, d in walked_dims(access.index, buf.host_size, ranges).items()}
            verb = "writes" if access is op.output else "reads"
            for d, symbol in enumerate(dims):
                if symbol is not None and bound.get(walked.get(d)) != symbol:
                    problems.append(
                        f"{describe_op(op)} {verb} {buf.name} dim {d}, whose length is the "
                        f"symbolic {symbol}, at places that do not stop at the length (the "
                        f"last token, or a view that merges the dim with another); spyrec "
                        f"cannot run it at every length: export it with that dim static")
    return problems


def check_instances(graph: Graph, alt: Graph) -> None:
    """Prove, from the program lowered at every symbol's maximum (`graph`) and one granule
    shorter (`alt`), that it depends on each length only through the dims that carry it:
    the same ops and buffers, the same op attributes (a `mean`'s 1/length would differ), a
    size that differs only on a dim carrying its symbol and by the granularity, and
    constants (folded position tables) whose shorter instance is a prefix of the longer.
    Every shape is affine in a length, so two instances decide it. UnsupportedProgram
    naming the op, buffer or constant otherwise."""
    named = symbol_names(graph)
    steps = {s.name: s.granularity for s in graph.symbols.values()}
    if [(o.name, o.op) for o in graph.ops] != [(o.name, o.op) for o in alt.ops] or \
            list(graph.buffers) != list(alt.buffers):
        raise UnsupportedProgram(
            f"the program's ops differ between the lengths {_lengths(graph, 0)} and "
            f"{_lengths(graph, 1)}: its structure depends on a symbolic length, which one "
            f"compiled program cannot follow; export it with static shapes")
    for op, other in zip(graph.ops, alt.ops):
        if op.constants != other.constants:
            changed = sorted(k for k in op.constants.keys() | other.constants.keys()
                             if op.constants.get(k) != other.constants.get(k))
            raise UnsupportedProgram(
                f"{describe_op(op)}: its {', '.join(changed)} depends on a symbolic length "
                f"({op.constants.get(changed[0])} at {_lengths(graph, 0)}, "
                f"{other.constants.get(changed[0])} at {_lengths(graph, 1)}), so one compiled "
                f"program cannot serve every length; export it with static shapes")
    for name, buf in graph.buffers.items():
        other = alt.buffers[name].host_size
        dims = named.buffers.get(name, (None,) * len(buf.host_size))
        for d, (a, b) in enumerate(zip(buf.host_size, other)):
            if a != b and (dims[d] is None or a - b != steps[dims[d]]):
                raise UnsupportedProgram(
                    f"{name} dim {d} has {a} elements at {_lengths(graph, 0)} and {b} at "
                    f"{_lengths(graph, 1)}, but it is not a dim of the symbolic length itself "
                    f"(a view merges it with another dim, or a size computed from it); spyrec "
                    f"cannot tile it: export it with static shapes")
        if name in graph.constants and not _prefix(alt.constants[name], graph.constants[name]):
            raise UnsupportedProgram(
                f"constant {name} (folded from the program) changes with a symbolic length "
                f"beyond its length: its values at {_lengths(graph, 1)} are not the first "
                f"ones of those at {_lengths(graph, 0)}; export it with static shapes")


def constant_dims(graph: Graph, alt: Graph) -> dict[str, dict[int, str]]:
    """{constant: {dim: symbol}} for the constants folded from the program whose size
    differs between the two instances (position tables, a causal mask's position vectors):
    the dims a symbol's length has, by its maximum and granularity. Named like an input's,
    they are tiled with it, so a length reads the first rows of the maximum's table (which
    `check_instances` proves are the length's own)."""
    found: dict[str, dict[int, str]] = {}
    for name in graph.constants:
        if name not in alt.buffers:
            continue
        for d, (a, b) in enumerate(zip(graph.buffers[name].host_size,
                                       alt.buffers[name].host_size)):
            fits = [s.name for s in graph.symbols.values()
                    if s.value_of is None and a == s.maximum and a - b == s.granularity]
            if a != b and len(fits) == 1:
                found.setdefault(name, {})[d] = fits[0]
    return found


def _prefix(short, long) -> bool:
    import numpy as np

    short, long = np.asarray(short), np.asarray(long)
    if short.shape == long.shape:
        return bool(np.array_equal(short, long, equal_nan=True))
    if short.ndim != long.ndim or any(s > n for s, n in zip(short.shape, long.shape)):
        return False
    return bool(np.array_equal(short, long[tuple(slice(0, s) for s in short.shape)],
                               equal_nan=True))


def _lengths(graph: Graph, granules_less: int) -> str:
    return ", ".join(f"{s.name}={s.maximum - granules_less * s.granularity}"
                     for s in graph.symbols.values())


def shorter_binding(graph: Graph) -> dict[str, int]:
    """Each symbol one granule below its maximum: the second instance `check_instances`
    compares (every symbol admits at least two lengths, or it is not symbolic)."""
    return {s.name: s.maximum - s.granularity for s in graph.symbols.values()}


def symbols_report(graph: Graph) -> list[dict]:
    """report.json `symbols`: per symbolic length, its admissible lengths, the loops it
    bounds, and why the maximum's plan holds at every length (each claim checked here or
    by the passes: the statement says which)."""
    rows = []
    for symbol in graph.symbols.values():
        loops = {lp.key: lp for op in graph.ops for lp in op.loops
                 if lp.bound is not None and lp.bound.symbol == symbol.name}
        most = max((lp.count for lp in loops.values()), default=0)
        if most > MAX_LOOP_TRIPS:
            raise UnsupportedProgram(
                f"the symbolic length {symbol.name} ({symbol.where}) up to {symbol.maximum} "
                f"makes a loop of {most} trips at its maximum, over the hardware's {MAX_LOOP_TRIPS}; "
                f"export it with a larger granularity or a smaller maximum")
        sized = sum(1 for op in graph.ops if any(s == symbol.name for _, s in op.lengths))
        rows.append({
            "symbol": symbol.name, "where": symbol.where, "minimum": symbol.minimum,
            "maximum": symbol.maximum, "granularity": symbol.granularity,
            "read_from": symbol.value_of.describe() if symbol.value_of else None,
            "loops": [{"loop": key, "count_at_maximum": lp.count,
                       "per_trip": lp.bound.per_trip} for key, lp in sorted(loops.items())],
            **({"sized_ops": sized} if sized else {}),
            "proof": _proof(symbol, most, sorted(key for key, lp in loops.items()
                                                 if lp.bound.past_end), sized)})
    return rows


def _proof(symbol: SymLength, most: int, partial: list[str], sized: int = 0) -> list[str]:
    """Why the plan made at the maximum holds at every admissible length (`partial`: the
    flash query loops whose tile is several granules, `attention.query_tile_allowed`;
    `sized`: how many ops run the length whole)."""
    lines = [f"loop counts: at most {most} trips at the maximum (limit {MAX_LOOP_TRIPS}); every "
             f"other length runs a prefix of each loop's trips",
             "HBM: every buffer is allocated at the maximum, and a prefix of the trips touches "
             "only addresses the maximum's run touches",
             "LX: per-tile buffers have the tile's size, the same at every length"]
    if sized:
        lines += [f"sized ops: {sized} ops run the length whole, split k ways into shares "
                  f"of s = max(L/k, m(L)) values, m(L) the minimum share at L (the "
                  f"length_shares pass chooses it per length; k divides {symbol.granularity} and where m(L) "
                  f"binds, k * m(L) <= {symbol.maximum}, whole sticks of a stick var, no "
                  f"split of a reduced var: checked); at a length L core j runs values "
                  f"[j*s, (j+1)*s) cut at L, so nothing past L is read or written; its LX "
                  f"slice is the first s rows of the maximum's (s <= maximum/k), its HBM "
                  f"window inside the tensor allocated at the maximum"]
    if symbol.value_of is None:
        lines += [f"tiles: the tile of each loop divides {symbol.granularity}, so every "
                  f"admissible length is whole tiles" + (
                      f", but for the flash query loops {', '.join(partial)}: their tile is "
                      f"whole granules up to the shortest length, and their last trip's rows "
                      f"past the length read only the padding of their own query rows (flash "
                      f"computes each row from its query row and the keys, which stop at the "
                      f"length) and write the output's padding, which no op reads"
                      if partial else ""),
                  "padding: every access to a dim of this length is walked by a loop it "
                  "bounds (checked), so nothing reads past the length" + (
                      " into a row that reaches an output" if partial else "")]
    else:
        lines.append(f"mask: every key past {symbol.value_of.describe()} is masked to -inf, "
                     f"so the key tiles past it, which the loop skips, add nothing; the last "
                     f"tile runs masked")
    return lines
