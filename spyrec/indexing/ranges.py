"""Value ranges of index expressions: the only place bounds are computed.

`Ranges` is what a kernel knows: an inclusive integer interval per variable (and per indirect
index value), plus optional *expression facts* — intervals known for whole sub-expressions
(XLA's constraints: `86*d0 + d1 in [0, 1023]`). `bounds(expr, ranges)` is plain interval
arithmetic over the expression tree, tightened by any fact whose expression matches exactly.
Bounds are always sound (never narrower than the true set) and memoized per (expr, ranges).

An interval is a `(lo, hi)` pair of ints, with `-inf`/`inf` for unknown ends. `lo > hi` is
the empty interval; it is a value, not an error.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Mapping

from spyrec.indexing.expr import (
    Atom, FloorDiv, Indirect, Lin, Max, Min, Mod, Prod, Var, as_lin,
)

INF = math.inf
Interval = tuple  # (lo, hi): ints or +-inf
UNBOUNDED: Interval = (-INF, INF)


class Ranges:
    """Immutable map: leaf atom -> inclusive interval, plus exact-expression facts."""

    __slots__ = ("_vars", "_facts", "_hash")

    def __init__(self, variables: Mapping[Atom, Interval] | None = None,
                 facts: Mapping[Lin, Interval] | None = None) -> None:
        self._vars = dict(variables or {})
        self._facts = {as_lin(k): v for k, v in (facts or {}).items()}
        self._hash = hash((frozenset(self._vars.items()), frozenset(self._facts.items())))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Ranges) and other._hash == self._hash
                and other._vars == self._vars and other._facts == self._facts)

    def __repr__(self) -> str:
        inner = ", ".join(f"{a}: [{lo}, {hi}]" for a, (lo, hi) in self.items())
        return f"Ranges({inner})"

    def get(self, leaf: Atom) -> Interval:
        return self._vars.get(leaf, UNBOUNDED)

    def fact(self, e: Lin) -> Interval | None:
        return self._facts.get(e)

    def items(self):
        return sorted(self._vars.items(), key=lambda kv: kv[0].key)

    @property
    def facts(self) -> dict[Lin, Interval]:
        return dict(self._facts)

    def with_vars(self, updates: Mapping[Atom, Interval]) -> "Ranges":
        merged = dict(self._vars)
        merged.update(updates)
        return Ranges(merged, self._facts)


_INTERNED: dict = {}


def intern(value):
    """One object per distinct value of an immutable index value (`Ranges`, `Lin`): memo
    keys holding the same object compare by identity, where equal copies (each layer of a
    stack builds its own) compare field by field in Python on every lookup. Equal values are
    interchangeable (every memo already treats them so); the table is emptied when large."""
    got = _INTERNED.get(value)
    if got is None:
        if len(_INTERNED) >= 1 << 16:
            _INTERNED.clear()
        got = _INTERNED[value] = value
    return got


# --- interval arithmetic on possibly-infinite ends ------------------------------------------


def _scale(iv: Interval, k: int) -> Interval:
    lo, hi = iv[0] * k, iv[1] * k
    return (lo, hi) if k >= 0 else (hi, lo)


def _floordiv_end(x, d: int):
    if x in (INF, -INF):
        return x if d > 0 else -x
    return x // d


def _mul_end(a, b):
    if a == 0 or b == 0:
        return 0
    return a * b


def interval_floordiv(iv: Interval, d: int) -> Interval:
    a, b = _floordiv_end(iv[0], d), _floordiv_end(iv[1], d)
    return (min(a, b), max(a, b))


def interval_mod(iv: Interval, m: int) -> Interval:
    lo, hi = iv
    if m > 0 and lo != -INF and hi != INF and lo // m == hi // m:
        shift = (lo // m) * m
        return (lo - shift, hi - shift)
    return (0, m - 1) if m > 0 else (m + 1, 0)


def intersect(a: Interval, b: Interval) -> Interval:
    return (max(a[0], b[0]), min(a[1], b[1]))


def is_empty(iv: Interval) -> bool:
    return iv[0] > iv[1]


# --- bounds ------------------------------------------------------------------------------------


@lru_cache(maxsize=1 << 16)
def bounds(e: Lin, ranges: Ranges) -> Interval:
    """Sound inclusive bounds of `e` under `ranges` (memoized)."""
    lo = hi = e.const
    for atom, coeff in e.terms:
        a_lo, a_hi = _scale(atom_bounds(atom, ranges), coeff)
        lo, hi = lo + a_lo, hi + a_hi
    fact = ranges.fact(e)
    return intersect((lo, hi), fact) if fact is not None else (lo, hi)


@lru_cache(maxsize=1 << 16)
def atom_bounds(a: Atom, ranges: Ranges) -> Interval:
    if isinstance(a, (Var, Indirect)):
        return ranges.get(a)
    if isinstance(a, FloorDiv):
        iv = interval_floordiv(bounds(a.num, ranges), a.divisor)
    elif isinstance(a, Mod):
        iv = interval_mod(bounds(a.num, ranges), a.modulus)
    elif isinstance(a, Min):
        ivs = [bounds(o, ranges) for o in a.operands]
        iv = (min(i[0] for i in ivs), min(i[1] for i in ivs))
    elif isinstance(a, Max):
        ivs = [bounds(o, ranges) for o in a.operands]
        iv = (max(i[0] for i in ivs), max(i[1] for i in ivs))
    elif isinstance(a, Prod):
        iv = (1, 1)
        for f in a.factors:
            f_lo, f_hi = atom_bounds(f, ranges)
            corners = [_mul_end(x, y) for x in iv for y in (f_lo, f_hi)]
            iv = (min(corners), max(corners))
    else:
        raise TypeError(f"no bounds rule for {a!r}")
    fact = ranges.fact(as_lin(a))
    return intersect(iv, fact) if fact is not None else iv
