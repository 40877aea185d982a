"""bundle.mlir: the execution order of the per-op specs, rendered from the Jinja template.

This module builds plain data (affine maps, body lines); `templates/bundle.mlir.j2` only loops
and substitutes. Without coarse tiling every op executes once with the concrete addresses in its
spec, so the body is one `sdscbundle.sdsc_execute` per op (and nothing else: untiled bundles stay
byte-identical to those written before loops existed).

Inside loops (issue 8 contract §2) the body nests `scf.for` per loop level, with constant
bounds, except that a loop with a trip span (`ir.graph.TripSpan`) runs from `%lo_<k>` to
`%hi_<k>`: each `affine.min` of its line a*i + b in the enclosing loop's var and the count,
then `arith.maxsi` with 0 (`_span_bounds`). Each symbolic start address of an op
(codegen/symbols.py) is an `affine.apply` of its map (one `#map_<k>` per distinct vector of
byte advances, `d_l` = the loop var of level l, outermost first) to `%sym_<n>`, its address at
iteration 0, and the execute lists the ids its operands bind (`symbol_ids`).

A graph with symbolic lengths (issue 30, `ir/symbols.py`) gives the function one `index`
argument per symbol, named after it and carrying its ladder as attributes
(`%s81: index {spyre.granularity = 64 : i64, spyre.min_value = 128 : i64,
spyre.max_value = 2048 : i64}`), and a loop whose trip count is a length over a fixed tile
(`ir.graph.LoopBound`) computes its bound from it: `%loop_bound_<k> = arith.divui %s81, %c64`
(`arith.ceildivui` for a length read from an input's value, which the tile need not divide).
An op sized by a length (`Operation.lengths`) starts each core at its slice's share: once per
(symbol, cores) `%share_<symbol>_<cores>` is the length over the cores, at least the
symbol's minimum share at that length (`arith.divui`, `arith.maxsi`; the share's steps by
length, `arith.cmpi` / `arith.select`, once per symbol), and each symbolic start is the address
at length 0 plus that share times its bytes per value (`_map_expr`).

Beside the text, `bundle_file` gives the executions the text runs, as data (each trip a loop
runs unrolled, each operand evaluated), for the cost estimate `spyrec compile` writes into
report.json: the compiler hands what it rendered rather than have the simulator parse it back.

The template is package data (`spyrec/templates` is a symlink to the repository's
`templates/`, which the wheel ships as files), read with importlib.resources so an installed
spyrec renders the same bundle as a checkout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Mapping, Sequence

import jinja2

from spyrec.codegen.symbols import Symbol
from spyrec.ir import Loop
from spyrec.ir.graph import loop_identity
from spyrec.ir.symbols import SymLength

TEMPLATE = resources.files("spyrec") / "templates" / "bundle.mlir.j2"
_INDENT = "  "


def bundle_file(sdsc_files: list[str], loops: Sequence[tuple[Loop, ...]] | None = None,
                symbols: Sequence[list[Symbol]] | None = None,
                lengths: Sequence[SymLength] = ()) -> tuple[str, list[tuple], "RunCounts"]:
    """bundle.mlir for ops executed in order (`loops[i]` encloses op i, outermost first;
    `symbols[i]` are its symbolic start addresses; both empty by default; `lengths`: the
    graph's symbolic lengths, the function's arguments), the executions it runs at every
    symbol's maximum, in order, as data: one `(sdsc file, operand values, line, column,
    symbol ids, ((loop var, value), ...))` per `sdsc_execute` run, line and column being the
    statement's in the text, and how often it runs each file at any lengths (`RunCounts`,
    for the cost curve). The cost estimate of `spyrec compile` reads these instead of parsing
    the text back (sim/program.py `program_from_documents`); tests/sim/test_cost_from_memory.py
    holds them to what the simulator's MLIR reader makes of the text."""
    b = _build(sdsc_files, loops, symbols)
    data = b.data({s.name: s for s in lengths})
    data["arguments"] = ", ".join(map(_argument, lengths))
    line, column = _body_start()
    first = line + len(data["maps"]) + len(data["body"]) - len(b.body)   # b.body[0]'s line
    by_name = {s.name: s for s in lengths}
    shares = {(name, k): by_name[name].share(by_name[name].maximum, k) for name, k in b.shares}
    return (render_bundle(data), list(_unroll(b.tree, first, column, (), shares)),
            RunCounts(b.tree))


def _argument(symbol: SymLength) -> str:
    """The function argument of a symbolic length: its value at run time, its ladder as
    attributes (docs/formats.md)."""
    return (f"%{symbol.name}: index {{spyre.granularity = {symbol.granularity} : i64, "
            f"spyre.min_value = {symbol.minimum} : i64, spyre.max_value = {symbol.maximum} "
            f": i64}}")


def _build(sdsc_files: list[str], loops: Sequence[tuple[Loop, ...]] | None,
           symbols: Sequence[list[Symbol]] | None) -> "_Builder":
    loops = list(loops) if loops is not None else [()] * len(sdsc_files)
    symbols = list(symbols) if symbols is not None else [[] for _ in sdsc_files]
    b = _Builder()
    b.tree = b.nest(list(zip(sdsc_files, loops, symbols)), 0)
    return b


def _map_expr(advance: tuple[int, ...], terms: tuple[tuple[int, int], ...] = ()) -> str:
    """`s0 + a*d0 + …` (the address at iteration 0 plus each loop level's advance), then
    `(s<k> floordiv unit) * bytes` per length term, s<k> its share operand
    (`%share_<symbol>_<cores>`; `s<k> * bytes` for a unit of 1)."""
    return " + ".join(["s0"] + [f"{a}*d{j}" for j, a in enumerate(advance) if a]
                      + [f"(s{k} floordiv {unit}) * {b}" if unit > 1 else f"s{k} * {b}"
                         for k, (unit, b) in enumerate(terms, start=1)])


class _Builder:
    """Walks the ops once, collecting loop bounds, maps, symbols and body lines in order, and
    the tree of what runs (`nest`'s nodes: `_Run` and `_For`)."""

    def __init__(self) -> None:
        self.bounds: list[Loop] = []
        self.maps: dict[tuple[int, ...], int] = {}
        self.syms: list[Symbol] = []
        self.shares: dict[tuple[str, int], None] = {}   # (symbol, cores) of length terms
        self.body: list[str] = []
        self.tree: list = []

    def data(self, symbols: Mapping[str, SymLength]) -> dict:
        """The template's data: maps, and the body after its constants (`symbols`: the
        symbolic lengths by name, which bound loops divide)."""
        if not self.bounds and not self.syms:
            return {"maps": [], "body": self.body}
        head = ["%c0 = arith.constant 0 : index", "%c1 = arith.constant 1 : index"]
        tiles = {loop.bound.per_trip for loop in self.bounds if loop.bound}
        floored = dict.fromkeys(s for s, _ in self.shares if symbols[s].floors())
        tiles |= {k for _, k in self.shares}
        tiles |= {n for s in floored for n in _floor_constants(symbols[s])}
        head += [f"%c{n} = arith.constant {n} : index" for n in sorted(tiles - {0, 1})]
        head += [_loop_bound(k, loop, symbols) for k, loop in enumerate(self.bounds)]
        floors = {s: _floor(symbols[s]) for s in floored}
        head += [line for lines, _ in floors.values() for line in lines]
        head += [line for (s, k) in self.shares
                 for line in _share(s, k, floors[s][1] if s in floors else None)]
        head += [f"%sym_{s.n} = arith.constant {s.address} : index" for s in self.syms]
        maps = [{"index": k, "dims": [f"d{j}" for j in range(len(adv))],
                 "symbols": ["s0"] + [f"s{j}" for j in range(1, len(terms) + 1)],
                 "expr": _map_expr(adv, terms)} for (adv, terms), k in self.maps.items()]
        return {"maps": maps, "body": head + self.body}

    def nest(self, items: list, depth: int) -> list:
        nodes: list = []
        i = 0
        while i < len(items):
            name, loops, syms = items[i]
            pad = _INDENT * depth
            if len(loops) <= depth:
                self.execute(name, syms, depth, pad)
                nodes.append(_Run(name, tuple(syms), len(self.body) - 1, len(pad)))
                i += 1
                continue
            ident = loop_identity(loops[:depth + 1])
            j = i
            while j < len(items) and loop_identity(items[j][1][:depth + 1]) == ident:
                j += 1
            loop = loops[depth]
            bound = len(self.bounds)
            self.bounds.append(loop)
            if loop.span is None:
                lo, hi = "%c0", f"%loop_bound_{bound}"
            else:
                lo, hi = f"%lo_{bound}", f"%hi_{bound}"
                self.body += [pad + line for line in _span_bounds(loop, bound, depth)]
            self.body.append(f"{pad}scf.for %i_{depth} = {lo} to {hi} step %c1 {{")
            nodes.append(_For(loop, self.nest(items[i:j], depth + 1)))
            self.body.append(f"{pad}}}")
            i = j
        return nodes

    def execute(self, name: str, syms: list[Symbol], depth: int, pad: str) -> None:
        if not syms:
            self.body.append(f'{pad}sdscbundle.sdsc_execute () {{sdsc_filename = "{name}"}}')
            return
        ivars = ", ".join(f"%i_{j}" for j in range(depth))
        for s in syms:
            assert len(s.advance_bytes) == depth, (name, s)
            terms = tuple((unit, b) for _, _, unit, b in s.length_terms)
            k = self.maps.setdefault((s.advance_bytes, terms), len(self.maps))
            self.syms.append(s)
            self.shares.update({(symbol, cores): None for symbol, cores, _, _ in s.length_terms})
            operands = "".join(f", %share_{symbol}_{cores}"
                               for symbol, cores, _, _ in s.length_terms)
            self.body.append(f"{pad}%addr_{s.n} = affine.apply #map_{k}({ivars})"
                             f"[%sym_{s.n}{operands}]")
        operands = ", ".join(f"%addr_{s.n}" for s in syms)
        ids = ", ".join(str(s.id) for s in syms)
        self.body.append(f'{pad}sdscbundle.sdsc_execute ({operands}) {{sdsc_filename = '
                         f'"{name}", symbol_ids = [{ids}]}}')


def _floor(symbol: SymLength) -> tuple[list[str], str]:
    """The lines computing the symbol's minimum share at its length (`SymLength.min_share`:
    steps chosen per length by the length_shares pass, the first whose length reaches it, 0
    past the last) and the value holding it: a constant for one step to the maximum, else a
    chain of `arith.cmpi ule` and `arith.select` from the last step back."""
    name, steps = symbol.name, symbol.min_shares
    to_end = steps[-1][0] >= symbol.maximum
    value, lines = f"%c{steps[-1][1] if to_end else 0}", []
    chain = steps[:-1] if to_end else steps
    for k in range(len(chain), 0, -1):
        upto, m = chain[k - 1]
        lines += [f"%floor_{name}_le_{k} = arith.cmpi ule, %{name}, %c{upto} : index",
                  f"%floor_{name}_{k} = arith.select %floor_{name}_le_{k}, %c{m}, {value} "
                  f": index"]
        value = f"%floor_{name}_{k}"
    return lines, value


def _floor_constants(symbol: SymLength) -> set[int]:
    """The constants `_floor` names: each step's share, and each compared length (all but
    a last step that reaches the maximum)."""
    steps = symbol.min_shares
    compared = steps[:-1] if steps[-1][0] >= symbol.maximum else steps
    return {m for _, m in steps} | {upto for upto, _ in compared}


def _share(symbol: str, cores: int, floor: str | None) -> list[str]:
    """`%share_<symbol>_<cores>`: the values each busy slice of a length split `cores` ways
    runs (`SymLength.share`): the length over the cores (exact: the cores divide the
    granularity), at least the symbol's minimum share at that length (`floor`: its value,
    `_floor`; None: the symbol has none)."""
    name = f"%share_{symbol}_{cores}"
    if floor is None:
        return [f"{name} = arith.divui %{symbol}, %c{cores} : index"]
    return [f"%len_{symbol}_{cores} = arith.divui %{symbol}, %c{cores} : index",
            f"{name} = arith.maxsi %len_{symbol}_{cores}, {floor} : index"]


def _loop_bound(k: int, loop: Loop, symbols: Mapping[str, SymLength]) -> str:
    """`%loop_bound_<k>`: the loop's trip count, a constant, or for a loop bound by a symbolic
    length that length over the tile: exact (`arith.divui`) for a shape's length, which the
    tile divides, rounded up (`arith.ceildivui`) for a length read from a value, whose last
    tile its mask completes (`SymLength.value_of`), and for a flash query tile of several
    granules, whose last trip passes the length (`attention.query_tile_allowed`)."""
    if loop.bound is None:
        return f"%loop_bound_{k} = arith.constant {loop.count} : index"
    whole = symbols[loop.bound.symbol].value_of is None and not loop.bound.past_end
    divide = "divui" if whole else "ceildivui"
    return (f"%loop_bound_{k} = arith.{divide} %{loop.bound.symbol}, "
            f"%c{loop.bound.per_trip} : index")


@dataclass(frozen=True)
class _Run:
    """One `sdsc_execute` statement: its file, symbols, body line index and indent."""

    name: str
    syms: tuple[Symbol, ...]
    line: int
    indent: int


@dataclass(frozen=True)
class _For:
    """One `scf.for` of `loop`'s trips around `body`."""

    loop: Loop
    body: list


def _span_bounds(loop: Loop, bound: int, depth: int) -> list[str]:
    """The statements computing `%lo_<bound>` and `%hi_<bound>` of a loop with a trip span at
    `depth` (>= 1): each end's line in the enclosing loop's var, clamped to 0..count
    (`TripSpan.trips`). xDSL has no `affine.max`, so the lower clamp is an `arith.maxsi`."""
    lines = []
    for name, (a, b) in (("lo", loop.span.start), ("hi", loop.span.stop)):
        lines += [f"%{name}_raw_{bound} = affine.min affine_map<(d0)[s0] -> "
                  f"({_affine_line(a, b)}, s0)>(%i_{depth - 1})[%loop_bound_{bound}]",
                  f"%{name}_{bound} = arith.maxsi %{name}_raw_{bound}, %c0 : index"]
    return lines


def _affine_line(a: int, b: int) -> str:
    """a*d0 + b as an affine expression (`d0 * -1 + 4`, `d0 + 1`, `3`)."""
    if a == 0:
        return str(b)
    text = "d0" if a == 1 else f"d0 * {a}"
    return text + (f" + {b}" if b > 0 else f" - {-b}" if b < 0 else "")


def trips_at(loop: Loop, outer: int, lengths: Mapping[str, int]) -> range:
    """The iterations `loop` runs at symbolic `lengths` while its enclosing loop is at `outer`
    (`Loop.trips` is at the maximum): a bound loop's count is its length over its tile, and a
    trip span is clamped to that count, as bundle.mlir's `affine.min` does."""
    if loop.bound is None:
        return loop.trips(outer)
    count = loop.bound.count(lengths[loop.bound.symbol])
    return range(count) if loop.span is None else loop.span.trips(outer, count)


@dataclass(frozen=True)
class RunCounts:
    """How often the bundle runs each sdsc file at given symbolic lengths (the cost curve of
    report.json, spyrec/driver.py), from the nest `bundle_file` rendered."""

    tree: list

    def at(self, lengths: Mapping[str, int]) -> dict[str, int]:
        counts: dict[str, int] = {}
        _count(self.tree, lengths, 0, counts)
        return counts


def _count(nodes: list, lengths: Mapping[str, int], outer: int, counts: dict[str, int]) -> None:
    for node in nodes:
        if isinstance(node, _For):
            for i in trips_at(node.loop, outer, lengths):
                _count(node.body, lengths, i, counts)
        else:
            counts[node.name] = counts.get(node.name, 0) + 1


def _unroll(nodes: list, first_line: int, column: int, trips: tuple[int, ...],
            shares: Mapping[tuple[str, int], int]):
    """The executions of `nodes` inside loops at iterations `trips` (outermost first), in
    order (`first_line`: the line of body line 0; `column`: the body's). Each symbol's operand
    is its address plus its advance per trip of each loop and its length terms at the
    maxima's `shares`: the `affine.apply` of its map (`_map_expr`)."""
    loop = tuple((f"i_{depth}", i) for depth, i in enumerate(trips))
    for node in nodes:
        if isinstance(node, _For):
            for i in node.loop.trips(trips[-1] if trips else 0):
                yield from _unroll(node.body, first_line, column, trips + (i,), shares)
            continue
        operands = tuple(s.at(trips, shares) for s in node.syms)
        yield (node.name, operands, first_line + node.line, column + node.indent,
               tuple(s.id for s in node.syms), loop)


@lru_cache(maxsize=1)
def _body_start() -> tuple[int, int]:
    """Line and column (1-based) where the template puts the first character of the first body
    line when there are no maps (each map takes one line above it)."""
    mark = "\x00"
    text = render_bundle({"maps": [], "body": [mark], "arguments": ""})
    before = text[:text.index(mark)]
    return before.count("\n") + 1, len(before) - before.rfind("\n")


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    return env.from_string(TEMPLATE.read_text(encoding="utf-8"))


def render_bundle(data: dict) -> str:
    text = _template().render(**data)
    return text.lstrip("\n") if text.endswith("\n") else text.lstrip("\n") + "\n"
