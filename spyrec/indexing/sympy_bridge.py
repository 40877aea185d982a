"""Conversion between sympy expressions and our `Lin` form.

Accepted sympy input: integers, symbols (all treated as integers), `+`, `*` by rationals,
`floor(q)` / `ceiling(q)` of any rational-affine `q` (sympy's `a // b`), `Mod(a, m)` (sympy's
`a % m`) with a constant modulus, `Min`, `Max`, products of symbols, positive integer powers,
`IndirectAccess(name)`, and PyTorch's `FloorDiv`, `ModularIndexing` and `PythonMod` (matched by
class name, so torch is not imported here). Anything else is a `ValueError` naming the node.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import lcm
from typing import Mapping

import sympy

from spyrec.indexing.expr import (
    Atom, FloorDiv, Indirect, Lin, Max, Min, Mod, Prod, Var, as_lin, const, floordiv,
    maximum, minimum, mod, mul,
)


class IndirectAccess(sympy.Function):
    """A coordinate read from an index tensor: `IndirectAccess('idx')` (sympy side)."""

    nargs = 1
    is_integer = True

    def _sympystr(self, printer) -> str:
        return f"IndirectAccess('{self.args[0]}')"


# --- sympy -> Lin --------------------------------------------------------------------------------


class _Rational:
    """A rational-affine value: sum(coeff * atom) + const with Fraction coefficients."""

    def __init__(self, terms: dict[Atom, Fraction] | None = None, const_: Fraction = Fraction(0)):
        self.terms = terms or {}
        self.const = const_

    def add(self, other: "_Rational") -> "_Rational":
        terms = dict(self.terms)
        for a, c in other.terms.items():
            terms[a] = terms.get(a, Fraction(0)) + c
        return _Rational(terms, self.const + other.const)

    def scale(self, k: Fraction) -> "_Rational":
        return _Rational({a: c * k for a, c in self.terms.items()}, self.const * k)

    def denominator(self) -> int:
        return lcm(self.const.denominator, *(c.denominator for c in self.terms.values()))

    def to_lin(self, scale: int = 1) -> Lin:
        def _int(x: Fraction) -> int:
            x = x * scale
            assert x.denominator == 1
            return x.numerator

        return Lin([(a, _int(c)) for a, c in self.terms.items()], _int(self.const))


def _lin_to_rational(e: Lin) -> _Rational:
    return _Rational({a: Fraction(c) for a, c in e.terms}, Fraction(e.const))


def _from_rational_integer(q: _Rational, node) -> Lin:
    if q.denominator() != 1:
        raise ValueError(f"index expression is not integer-valued: {node}")
    return q.to_lin()


@lru_cache(maxsize=1 << 14)
def from_sympy(expr: sympy.Expr) -> Lin:
    """The `Lin` form of an integer-valued sympy index expression."""
    return _from_rational_integer(_convert(sympy.sympify(expr)), expr)


def _convert(e) -> _Rational:
    if e.is_Integer or e.is_Rational:
        return _Rational(const_=Fraction(int(e.p), int(e.q)))
    if e.is_Symbol:
        return _lin_to_rational(as_lin(Var(e.name)))
    if e.is_Add:
        out = _Rational()
        for arg in e.args:
            out = out.add(_convert(arg))
        return out
    if e.is_Mul:
        return _convert_mul(e)
    if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
        return _convert_mul(sympy.Mul(*([e.base] * int(e.exp)), evaluate=False))
    return _lin_to_rational(_convert_function(e))


def _convert_mul(e) -> _Rational:
    """Numbers times at most one rational-affine factor, or a product of integer factors."""
    scale = Fraction(1)
    factors: list[_Rational] = []
    for arg in e.args:
        if arg.is_Rational:
            scale *= Fraction(int(arg.p), int(arg.q))
        else:
            factors.append(_convert(arg))
    if not factors:
        return _Rational(const_=scale)
    if len(factors) == 1:
        return factors[0].scale(scale)
    product = const(1)
    for f in factors:
        product = mul(product, _from_rational_integer(f, e))
    return _lin_to_rational(product).scale(scale)


def _convert_function(e) -> Lin:
    name = type(e).__name__
    if isinstance(e, sympy.floor):
        q = _convert(e.args[0])
        den = q.denominator()
        return floordiv(q.to_lin(den), den)
    if isinstance(e, sympy.ceiling):
        q = _convert(e.args[0])
        den = q.denominator()
        return -floordiv(-q.to_lin(den), den)
    if isinstance(e, sympy.Mod) or name == "PythonMod":
        return mod(_integer(e.args[0]), _constant(e.args[1], e))
    if name == "FloorDiv":
        return floordiv(_integer(e.args[0]), _constant(e.args[1], e))
    if name == "ModularIndexing":
        base, div, modulus = e.args
        return mod(floordiv(_integer(base), _constant(div, e)), _constant(modulus, e))
    if isinstance(e, sympy.Min):
        return minimum(*(_integer(a) for a in e.args))
    if isinstance(e, sympy.Max):
        return maximum(*(_integer(a) for a in e.args))
    if isinstance(e, IndirectAccess) or name == "IndirectAccess":
        return as_lin(Indirect(str(e.args[0])))
    raise ValueError(f"unsupported node {name} in index expression: {e}")


def _integer(e) -> Lin:
    return _from_rational_integer(_convert(e), e)


def _constant(e, whole) -> int:
    if not e.is_Integer:
        raise ValueError(f"divisor must be an integer constant in index expression: {whole}")
    return int(e)


# --- Lin -> sympy --------------------------------------------------------------------------------


def to_sympy(e: Lin | Atom, symbols: Mapping[str, sympy.Symbol] | None = None) -> sympy.Expr:
    """A sympy expression equal to `e`; variables use `symbols[name]` when given."""
    symbols = symbols or {}
    if isinstance(e, Lin):
        return sympy.Add(*(c * _atom_to_sympy(a, symbols) for a, c in e.terms),
                         sympy.Integer(e.const))
    return _atom_to_sympy(e, symbols)


def _atom_to_sympy(a: Atom, symbols: Mapping[str, sympy.Symbol]) -> sympy.Expr:
    if isinstance(a, Var):
        return symbols.get(a.name) or sympy.Symbol(a.name, integer=True)
    if isinstance(a, Indirect):
        return IndirectAccess(sympy.Symbol(a.tensor))
    if isinstance(a, FloorDiv):
        return sympy.floor(to_sympy(a.num, symbols) / a.divisor)
    if isinstance(a, Mod):
        return sympy.Mod(to_sympy(a.num, symbols), a.modulus)
    if isinstance(a, Min):
        return sympy.Min(*(to_sympy(o, symbols) for o in a.operands))
    if isinstance(a, Max):
        return sympy.Max(*(to_sympy(o, symbols) for o in a.operands))
    if isinstance(a, Prod):
        return sympy.Mul(*(_atom_to_sympy(f, symbols) for f in a.factors))
    raise TypeError(f"cannot convert {a!r} to sympy")
