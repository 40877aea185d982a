"""The public face of the index algebra: sympy or `Lin` in, the same kind out.

sympy is imported only when a caller hands in a sympy expression: the compiler and the
simulator work on `Lin` and never pay sympy's half-second import.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Mapping, Sequence

from spyrec.indexing.constraints import Domain
from spyrec.indexing.constraints import simplify_domain as _simplify_domain
from spyrec.indexing.coordinates import device_coordinates_lin
from spyrec.indexing.expr import Atom, Indirect, Lin, Var, as_lin
from spyrec.indexing.ranges import Interval, Ranges, bounds
from spyrec.indexing.simplify import simplify_lin

Native = (Lin, Atom, int)


def make_ranges(ranges: Mapping | Ranges) -> Ranges:
    """A `Ranges` from {symbol | name | atom: (lo, hi)}."""
    if isinstance(ranges, Ranges):
        return ranges
    return Ranges({_leaf(k): (int(lo), int(hi)) for k, (lo, hi) in ranges.items()})


def _leaf(key) -> Atom:
    if isinstance(key, (Var, Indirect)):
        return key
    if isinstance(key, str):
        return Var(key)
    if isinstance(key, Lin) and isinstance(key.as_atom(), (Var, Indirect)):
        return key.as_atom()
    from spyrec.indexing.sympy_bridge import IndirectAccess
    import sympy

    if isinstance(key, IndirectAccess):
        return Indirect(str(key.args[0]))
    if isinstance(key, sympy.Symbol):
        return Var(key.name)
    raise TypeError(f"a range key must be a symbol, a name or an atom, not {key!r}")


def _to_lin(expr) -> tuple[Lin, dict | None]:
    """The `Lin` form, plus the symbol table to convert back (None for native input)."""
    if isinstance(expr, Native) and not isinstance(expr, bool):
        return as_lin(expr), None
    import sympy

    from spyrec.indexing.sympy_bridge import from_sympy

    expr = sympy.sympify(expr)
    return from_sympy(expr), {s.name: s for s in expr.free_symbols}


def simplify(expr, ranges: Mapping | Ranges):
    """An equivalent expression over the same symbols, as simple as the rules allow."""
    lin, symbols = _to_lin(expr)
    out = simplify_lin(lin, make_ranges(ranges))
    return out if symbols is None else _cached_to_sympy(out, tuple(sorted(symbols.items())))


@lru_cache(maxsize=1 << 14)
def _cached_to_sympy(e: Lin, symbols: tuple):
    from spyrec.indexing.sympy_bridge import to_sympy

    return to_sympy(e, dict(symbols))


def value_range(expr, ranges: Mapping | Ranges) -> Interval:
    """Inclusive (lo, hi) of `expr` over the ranges (ints, or +-inf when unbounded).

    Bounds of the simplified form are intersected with those of the original: both are
    sound, and the simplified form loses fewer correlations (`64*(c//64) + c%64` is `c`).
    """
    lin, _ = _to_lin(expr)
    r = make_ranges(ranges)
    lo1, hi1 = bounds(lin, r)
    lo2, hi2 = bounds(simplify_lin(lin, r), r)
    return max(lo1, lo2), min(hi1, hi2)


def device_coordinates(host_size: Sequence[int], host_strides: Sequence[int],
                       storage_offset: int, device_size: Sequence[int],
                       stride_map: Sequence[int], ranges: Mapping | Ranges, index) -> list:
    """Simplified device coordinates (one per device dim) of a flat host-storage access.

    `index` is in base-storage element units, excluding `storage_offset`; it may contain
    floor/mod terms and `IndirectAccess(name)` values (ranges inferred from the host dim they
    index when not given). Returns sympy expressions for sympy input, `Lin`s otherwise.
    """
    assert len(device_size) == len(stride_map), (device_size, stride_map)
    lin, symbols = _to_lin(index)
    coords = device_coordinates_lin(tuple(host_size), tuple(host_strides), storage_offset,
                                    tuple(device_size), tuple(stride_map), make_ranges(ranges),
                                    lin)
    if symbols is None:
        return coords
    return [_cached_to_sympy(c, tuple(sorted(symbols.items()))) for c in coords]


def simplify_domain(ranges: Mapping | Ranges, constraints: Sequence[tuple]) -> Domain:
    """Simplify a domain: variable ranges plus `(expr, lo, hi)` constraints (inclusive)."""
    cons = [(_to_lin(e)[0], lo, hi) for e, lo, hi in constraints]
    return _simplify_domain(make_ranges(ranges), cons)


def clear_caches() -> None:
    """Forget every memoized result (benchmarks measure cold queries with this)."""
    from spyrec.indexing import coordinates, parser, ranges, sympy_bridge
    from spyrec.indexing.simplify import _simplify_atom

    for cached in (simplify_lin, _simplify_atom, ranges.bounds, ranges.atom_bounds,
                   coordinates._device_coordinates, coordinates.device_dim_sources,
                   parser.parse_expr, sympy_bridge.from_sympy, _cached_to_sympy):
        cached.cache_clear()
