"""The range-aware simplifier: a table of small rewrite rules and a fixpoint driver.

The rule set is XLA's indexing-map simplifier (mod / floordiv with known ranges, gcd
splitting of sums, nested floordiv, constant folding, ranges of whole expressions) plus
Inductor's joins (`x mod a + a*((x//a) mod b) -> x mod (a*b)`, mod of mod). Each rule takes
an atom (or a sum) whose children are already simplified plus the `Ranges`, and returns an
equivalent `Lin` or None. Its docstring is the identity it implements; every rule is sound for
integer-valued leaves, and only uses facts `bounds` proves.

The driver simplifies bottom-up, applies the first matching rule per node, and repeats until
nothing changes (a cap guards against a rule cycle: hitting it is a bug in spyrec).
Results are memoized on (expression, ranges).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Callable, Optional

from spyrec.indexing.expr import (
    ZERO, Atom, FloorDiv, Indirect, Lin, Max, Min, Mod, Var, as_lin, const, floordiv, maximum,
    minimum, mod, rebuild_atom,
)
from spyrec.indexing.ranges import Ranges, bounds

Rule = Callable[..., Optional[Lin]]
FIXPOINT_CAP = 64


# --- helpers ---------------------------------------------------------------------------------


def _split(e: Lin, keep: Callable[[int], bool]) -> tuple[Lin, Lin]:
    """(terms whose coefficient satisfies `keep`, everything else including the constant)."""
    a = Lin([(t, c) for t, c in e.terms if keep(c)])
    b = Lin([(t, c) for t, c in e.terms if not keep(c)], e.const)
    return a, b


def _exact_div(e: Lin, k: int) -> Lin:
    assert all(c % k == 0 for _, c in e.terms) and e.const % k == 0, (e, k)
    return Lin([(t, c // k) for t, c in e.terms], e.const // k)


def _gcd_candidates(e: Lin, n: int) -> list[int]:
    """Factors f > 1 of n shared with some coefficient of e, largest first."""
    return sorted({math.gcd(abs(c), n) for _, c in e.terms} - {1}, reverse=True)


def _within(e: Lin, lo: int, hi: int, r: Ranges) -> bool:
    b_lo, b_hi = bounds(e, r)
    return lo <= b_lo and b_hi <= hi


# --- FloorDiv rules (children already simplified) ---------------------------------------------


def floordiv_by_range(a: FloorDiv, r: Ranges) -> Lin | None:
    """x // d -> q   when every value of x lies in one quotient bucket"""
    lo, hi = bounds(as_lin(a), r)
    return const(lo) if lo == hi else None


def floordiv_pull_multiples(a: FloorDiv, r: Ranges) -> Lin | None:
    """((d*k + c)*y + q*d + rest) // d -> k*y + q + (c*y + rest) // d   (d > 0, |c| < d,
    c of y's sign: a diagonal view's `(41*c0) // 40` keeps only `c0 // 40` inside)"""
    d, num = a.divisor, a.num
    if d < 0:
        return None
    pulled = Lin([(t, c - _toward_zero(c, d)) for t, c in num.terms if abs(c) >= d])
    q = num.const // d
    if pulled == ZERO and q == 0:
        return None
    inside = num - pulled - q * d
    return _exact_div(pulled, d) + q + floordiv(inside, d)


def floordiv_common_factor(a: FloorDiv, r: Ranges) -> Lin | None:
    """(g*x + g*k) // (g*d) -> (x + k) // d"""
    d, num = a.divisor, a.num
    g = math.gcd(d, num.const, *(c for _, c in num.terms))
    if d < 0 or g <= 1:
        return None
    return floordiv(_exact_div(num, g), d // g)


def _small_remainder_split(num: Lin, n: int, r: Ranges) -> tuple[int, Lin, Lin] | None:
    """num = f*x + y with f | n, f > 1, x and y non-zero and 0 <= y < f: (f, x, y), largest f."""
    for f in _gcd_candidates(num, n):
        multiple, rest = _split(num, lambda c, f=f: c % f == 0)
        if rest != ZERO and multiple != ZERO and _within(rest, 0, f - 1, r):
            return f, _exact_div(multiple, f), rest
    return None


def floordiv_gcd_split(a: FloorDiv, r: Ranges) -> Lin | None:
    """(f*x + y) // (f*d) -> x // d   when 0 <= y < f (y cannot reach the next multiple of f)"""
    split = _small_remainder_split(a.num, a.divisor, r) if a.divisor > 0 else None
    if split is None:
        return None
    f, x, _ = split
    return floordiv(x, a.divisor // f)


def floordiv_of_mod(a: FloorDiv, r: Ranges) -> Lin | None:
    """(x mod (d*b)) // d -> (x // d) mod b"""
    inner = a.num.as_atom()
    d = a.divisor
    if not isinstance(inner, Mod) or d < 0 or inner.modulus < 0 or inner.modulus % d:
        return None
    return mod(floordiv(inner.num, d), inner.modulus // d)


def floordiv_absorb_inner(a: FloorDiv, r: Ranges) -> Lin | None:
    """(x // c + y) // d -> (x + c*y) // (c*d)   when x // c is the only division in the sum"""
    d, num = a.divisor, a.num
    divs = [(t, c) for t, c in num.terms if isinstance(t, FloorDiv)]
    if d < 0 or len(divs) != 1 or divs[0][1] != 1 or divs[0][0].divisor < 0:
        return None
    inner = divs[0][0]
    rest = num - as_lin(inner)
    return floordiv(inner.num + rest.scale(inner.divisor), inner.divisor * d)


# --- Mod rules -------------------------------------------------------------------------------


def mod_by_range(a: Mod, r: Ranges) -> Lin | None:
    """x mod m -> x - k*m   when every value of x lies in [k*m, (k+1)*m)"""
    m = a.modulus
    lo, hi = bounds(a.num, r)
    if m < 0 or lo in (-math.inf,) or hi in (math.inf,) or lo // m != hi // m:
        return None
    return a.num - (lo // m) * m


def mod_drop_multiples(a: Mod, r: Ranges) -> Lin | None:
    """((m*k + c)*y + rest + b) mod m -> (c*y + rest + b') mod m   (c, b' reduced towards 0
    modulo m: a diagonal view's `(41*c0) mod 40` is `c0 mod 40`)"""
    m, num = a.modulus, a.num
    if m < 0:
        return None
    kept = Lin([(t, _toward_zero(c, m)) for t, c in num.terms if c % m],
               _toward_zero(num.const, m))
    return mod(kept, m) if kept != num else None


def _toward_zero(c: int, m: int) -> int:
    return c % m if c >= 0 else -((-c) % m)


def mod_of_inner_mod(a: Mod, r: Ranges) -> Lin | None:
    """(k*(x mod n) + y) mod m -> (k*x + y) mod m   when m divides k*n"""
    m, num = a.modulus, a.num
    if m < 0:
        return None
    for t, c in num.terms:
        if isinstance(t, Mod) and t.modulus > 0 and (c * t.modulus) % m == 0:
            return mod(num - as_lin(t).scale(c) + t.num.scale(c), m)
    return None


def mod_gcd_split(a: Mod, r: Ranges) -> Lin | None:
    """(f*x + y) mod (f*n) -> f*(x mod n) + y   when 0 <= y < f and y != 0"""
    split = _small_remainder_split(a.num, a.modulus, r) if a.modulus > 0 else None
    if split is None:
        return None
    f, x, y = split
    return mod(x, a.modulus // f).scale(f) + y


# --- Min / Max -------------------------------------------------------------------------------


def _drop_dominated(a: Min | Max, r: Ranges, is_min: bool) -> Lin | None:
    ops = list(a.operands)
    for i, x in enumerate(ops):
        for j, y in enumerate(ops):
            if i == j:
                continue
            lo, hi = bounds(x - y, r)
            if (is_min and hi <= 0) or (not is_min and lo >= 0):
                rest = ops[:j] + ops[j + 1:]
                return minimum(*rest) if is_min else maximum(*rest)
    return None


def min_drop_dominated(a: Min, r: Ranges) -> Lin | None:
    """Min(x, y) -> x   when x <= y over the ranges"""
    return _drop_dominated(a, r, True)


def max_drop_dominated(a: Max, r: Ranges) -> Lin | None:
    """Max(x, y) -> x   when x >= y over the ranges"""
    return _drop_dominated(a, r, False)


ATOM_RULES: dict[type, tuple[Rule, ...]] = {
    FloorDiv: (floordiv_by_range, floordiv_pull_multiples, floordiv_common_factor,
               floordiv_gcd_split, floordiv_of_mod, floordiv_absorb_inner),
    Mod: (mod_by_range, mod_drop_multiples, mod_of_inner_mod, mod_gcd_split),
    Min: (min_drop_dominated,),
    Max: (max_drop_dominated,),
}


# --- sum rules ---------------------------------------------------------------------------------


def sum_join_mod_and_div(e: Lin, r: Ranges) -> Lin | None:
    """k*(x mod a) + k*a*(x // a) -> k*x"""
    for t, k in e.terms:
        if isinstance(t, Mod) and t.modulus > 0:
            quotient = simplify_lin(floordiv(t.num, t.modulus), r)
            partner = quotient.scale(k * t.modulus)
            if partner.terms and all(e.coeff(a) == c for a, c in partner.terms):
                return e - as_lin(t).scale(k) - partner + t.num.scale(k)
    return None


def sum_join_mod_pair(e: Lin, r: Ranges) -> Lin | None:
    """k*(x mod a) + k*a*((x // a) mod b) -> k*(x mod (a*b))"""
    for t, k in e.terms:
        if not (isinstance(t, Mod) and t.modulus > 0):
            continue
        quotient = simplify_lin(floordiv(t.num, t.modulus), r)
        for u, ku in e.terms:
            if (isinstance(u, Mod) and u.modulus > 0 and u.num == quotient
                    and ku == k * t.modulus):
                joined = mod(t.num, t.modulus * u.modulus).scale(k)
                return e - as_lin(t).scale(k) - as_lin(u).scale(ku) + joined
    return None


def sum_subtraction_is_mod(e: Lin, r: Ranges) -> Lin | None:
    """y - b*d*(x // d) -> y + b*(x mod d) - b*x   when that does not add terms"""
    for t, c in e.terms:
        if isinstance(t, FloorDiv) and t.divisor > 0 and c < 0 and c % t.divisor == 0:
            b = -c // t.divisor
            rewritten = e - as_lin(t).scale(c) + mod(t.num, t.divisor).scale(b) - t.num.scale(b)
            if len(rewritten.terms) <= len(e.terms):
                return rewritten
    return None


SUM_RULES: tuple[Rule, ...] = (sum_join_mod_and_div, sum_join_mod_pair, sum_subtraction_is_mod)


# --- driver ------------------------------------------------------------------------------------


@lru_cache(maxsize=1 << 16)
def simplify_lin(e: Lin, r: Ranges) -> Lin:
    """The simplest equivalent of `e` the rules reach, over the same leaves (memoized)."""
    seen = e
    for _ in range(FIXPOINT_CAP):
        new = _simplify_once(seen, r)
        if new == seen:
            return new
        seen = new
    raise AssertionError(f"index simplifier did not reach a fixpoint on {e} with {r}")


def _simplify_once(e: Lin, r: Ranges) -> Lin:
    total: dict[Atom, int] = {}
    constant = e.const
    for atom, coeff in e.terms:
        part = _simplify_atom(atom, r)
        constant += part.const * coeff
        for a, c in part.terms:
            total[a] = total.get(a, 0) + c * coeff
    out = Lin(total, constant)
    for rule in SUM_RULES:
        rewritten = rule(out, r)
        if rewritten is not None:
            return rewritten
    lo, hi = bounds(out, r)
    return const(lo) if lo == hi else out


@lru_cache(maxsize=1 << 16)
def _simplify_atom(a: Atom, r: Ranges) -> Lin:
    """Simplify the children of `a`, then apply its first matching rule (if any)."""
    if isinstance(a, (Var, Indirect)):
        lo, hi = r.get(a)
        return const(lo) if lo == hi else as_lin(a)
    rebuilt = _rebuild(a, r)
    node = rebuilt.as_atom()
    if node is None or type(node) is not type(a):
        return rebuilt
    for rule in ATOM_RULES.get(type(node), ()):
        out = rule(node, r)
        if out is not None:
            return out
    return rebuilt


def _rebuild(a: Atom, r: Ranges) -> Lin:
    return rebuild_atom(a, lambda e: simplify_lin(e, r), lambda f: _simplify_atom(f, r))
