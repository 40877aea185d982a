"""Iteration domains: variable ranges plus constraints `lo <= expr <= hi`, simplified.

Used where a domain is not a plain box: tiles that cover a range unevenly, composed accesses,
gather bounds. The rules are XLA's (`IndexingMap::Simplify`) with its negative-divisor bug
fixed (`s0 // -3 in [-11, -5]` is `s0 in [13, 33]`, not `[15, 35]`):

- a constraint always satisfied by the ranges is dropped; one never satisfiable makes the
  domain EMPTY (a value, not an error);
- `e + c`, `k*e`, `e // d` and sums with a common factor move their arithmetic into the bounds;
- a constraint on a bare variable becomes that variable's range;
- `g*A + B in [lo, hi]` with B unable to change which multiples of g qualify becomes a
  constraint on A alone; otherwise the constraint only tightens each variable's range;
- `x mod c_i == r` constraints on the same x merge into `x mod lcm(c_i) == r`, and tighten
  x's range to the first and last value congruent to r.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from spyrec.indexing.expr import FloorDiv, Lin, Mod, Var, mod
from spyrec.indexing.ranges import INF, Ranges, bounds, intersect, is_empty
from spyrec.indexing.simplify import simplify_lin

Constraint = tuple  # (Lin, lo, hi)
_CAP = 32


@dataclass(frozen=True)
class Domain:
    ranges: Ranges
    constraints: tuple[Constraint, ...]
    empty: bool = False

    def __str__(self) -> str:
        if self.empty:
            return "KNOWN EMPTY"
        parts = [f"{a} in [{lo}, {hi}]" for a, (lo, hi) in self.ranges.items()]
        parts += [f"{e} in [{lo}, {hi}]" for e, lo, hi in self.constraints]
        return ", ".join(parts)


def simplify_domain(ranges: Ranges, constraints: list[Constraint]) -> Domain:
    variables = dict(ranges.items())
    cons = [(e, lo, hi) for e, lo, hi in constraints]
    for _ in range(_CAP):
        r = Ranges(variables)
        if any(is_empty(iv) for iv in variables.values()):
            return _empty(ranges)
        kept: list[Constraint] = []
        changed = False
        for e, lo, hi in cons:
            e, lo, hi = _normalize(simplify_lin(e, r), lo, hi)
            b = bounds(e, r)
            if is_empty(intersect(b, (lo, hi))):
                return _empty(ranges)
            if lo <= b[0] and b[1] <= hi:
                changed = True
                continue
            atom = e.as_atom()
            if isinstance(atom, Var):
                variables[atom] = intersect(variables.get(atom, (-INF, INF)), (lo, hi))
                changed = True
                continue
            split = _independent_split(e, lo, hi, r)
            if split is not None:
                kept.append(split)
                changed = True
                continue
            changed |= _tighten_vars(e, lo, hi, r, variables)
            kept.append((e, lo, hi))
        merged, merge_changed = _merge_mod_constraints(kept, variables)
        cons = merged
        if not (changed or merge_changed):
            break
    else:
        raise AssertionError("domain simplification did not converge")
    if any(is_empty(iv) for iv in variables.values()):
        return _empty(ranges)
    return Domain(Ranges(variables), tuple(cons))


def _empty(ranges: Ranges) -> Domain:
    return Domain(Ranges({a: (0, -1) for a, _ in ranges.items()}), (), True)


def _ceil_div(x, k: int):
    return x if x in (INF, -INF) else -((-x) // k)


def _floor_div(x, k: int):
    return x if x in (INF, -INF) else x // k


def _normalize(e: Lin, lo, hi) -> Constraint:
    """Move constants, common factors and a lone division from the expression to the bounds."""
    while True:
        if e.const:
            e, lo, hi = e - e.const, lo - e.const, hi - e.const
            continue
        if not e.terms:
            return e, lo, hi
        g = math.gcd(*(c for _, c in e.terms))
        sign = -1 if len(e.terms) == 1 and e.terms[0][1] < 0 else 1
        k = g * sign
        if k != 1:
            lo, hi = (_ceil_div(lo, k), _floor_div(hi, k)) if k > 0 else \
                     (_ceil_div(-hi, -k), _floor_div(-lo, -k))
            e = Lin([(a, c // k) for a, c in e.terms])
            continue
        atom = e.as_atom()
        if isinstance(atom, FloorDiv):
            d = atom.divisor
            if d > 0:
                lo, hi = lo * d, (hi * d + d - 1 if hi != INF else INF)
            else:
                p = -d
                lo, hi = (-(hi * p + p - 1) if hi != INF else -INF), -lo * p
            e = atom.num
            continue
        return e, lo, hi


def _independent_split(e: Lin, lo, hi, r: Ranges) -> Constraint | None:
    """g*A + B in [lo, hi] -> A in [L, H] when B cannot change which multiples of g fit."""
    coeffs = [abs(c) for _, c in e.terms]
    candidates = sorted({math.gcd(a, b) for a in coeffs for b in coeffs} - {1}, reverse=True)
    for g in candidates:
        a_part = Lin([(t, c // g) for t, c in e.terms if c % g == 0])
        b_part = Lin([(t, c) for t, c in e.terms if c % g])
        if not a_part.terms or not b_part.terms:
            continue
        b_lo, b_hi = bounds(b_part, r)
        if INF in (b_hi,) or -INF in (b_lo,):
            continue
        low = {_ceil_div(lo - b, g) for b in (b_lo, b_hi)}
        high = {_floor_div(hi - b, g) for b in (b_lo, b_hi)}
        if len(low) == 1 and len(high) == 1:
            return a_part, low.pop(), high.pop()
    return None


def _tighten_vars(e: Lin, lo, hi, r: Ranges, variables: dict) -> bool:
    """Bound each variable of a linear constraint by what the other terms leave room for."""
    changed = False
    for atom, c in e.terms:
        if not isinstance(atom, Var):
            continue
        rest_lo, rest_hi = bounds(e - Lin([(atom, c)]), r)
        t_lo, t_hi = lo - rest_hi, hi - rest_lo
        iv = (_ceil_div(t_lo, c), _floor_div(t_hi, c)) if c > 0 else \
             (_ceil_div(-t_hi, -c), _floor_div(-t_lo, -c))
        old = variables.get(atom, (-INF, INF))
        new = intersect(old, iv)
        if new != old:
            variables[atom] = new
            changed = True
    return changed


def _merge_mod_constraints(cons: list[Constraint], variables: dict) -> tuple[list, bool]:
    """x mod a == r and x mod b == r -> x mod lcm(a, b) == r; tighten x to congruent ends."""
    groups: dict[tuple[Lin, int], list[int]] = {}
    rest: list[Constraint] = []
    for e, lo, hi in cons:
        atom = e.as_atom()
        if isinstance(atom, Mod) and atom.modulus > 0 and lo == hi:
            groups.setdefault((atom.num, lo), []).append(atom.modulus)
        else:
            rest.append((e, lo, hi))
    changed = False
    merged: list[Constraint] = []
    for (x, residue), moduli in groups.items():
        modulus = math.lcm(*moduli)
        changed |= len(moduli) > 1
        merged.append((mod(x, modulus), residue, residue))
        leaf = x.as_atom()
        if isinstance(leaf, Var) and leaf in variables:
            v_lo, v_hi = variables[leaf]
            new = (v_lo + (residue - v_lo) % modulus, v_hi - (v_hi - residue) % modulus)
            if new != (v_lo, v_hi):
                variables[leaf] = new
                changed = True
    return merged + rest, changed

