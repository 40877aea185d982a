"""Integer index expressions: the value type every pass reasons with.

An expression is a `Lin`: an integer constant plus integer multiples of *atoms*. Atoms are
`Var` (an iteration variable or any integer symbol), `Indirect` (the value read from an index
tensor at the current iteration point), `FloorDiv` and `Mod` (floor semantics, constant
divisor), `Min`, `Max` and `Prod` (a product of two or more atoms).

Why not plain sympy: sympy pushes rationals into `floor` (`floor((64*a+b)/64)` becomes
`a + floor(b/64)`), cannot use variable ranges, and its `Add`/`Mul` canonicalisation is
slow. These classes are immutable, hash-consed by value (hash computed once), and keep their
terms in one canonical order, so equal expressions compare equal and dictionary look-ups stay
cheap. `sympy_bridge` converts to and from sympy at the edges.

Construction goes through the smart constructors (`var`, `const`, `floordiv`, `mod`,
`minimum`, `maximum`, `mul`) which fold numbers and trivial divisors, and nothing else: every
rewrite that needs ranges lives in `simplify`.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Callable, Iterable, Mapping, Union


@lru_cache(maxsize=1 << 14)
def _natural_key(name: str) -> tuple:
    """Sort `c2` before `c10`: split the name into text and number runs."""
    return tuple(int(tok) if tok.isdigit() else tok for tok in re.findall(r"\d+|\D+", name))


class Atom:
    """Base class of the non-linear building blocks. Subclasses set `_args` and `_rank`."""

    __slots__ = ("_args", "_hash", "_key")
    _rank = 0

    def __init__(self, *args) -> None:
        self._args = args
        self._hash = hash((type(self).__name__, args))
        self._key = (self._rank, self._sort_args())

    def _sort_args(self) -> tuple:
        return tuple(a.key if isinstance(a, (Lin, Atom)) else a for a in self._args)

    @property
    def key(self) -> tuple:
        """Total order used to sort the terms of a `Lin` (deterministic output)."""
        return self._key

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and other._hash == self._hash  # type: ignore[attr-defined]
            and other._args == self._args  # type: ignore[attr-defined]
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._args!r}"

    def __str__(self) -> str:
        from spyrec.indexing.printer import format_atom

        return format_atom(self)


class Var(Atom):
    """An integer variable (loop variable `c0`, tile counter, any integer symbol)."""

    __slots__ = ()
    _rank = 0

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def _sort_args(self) -> tuple:
        return _natural_key(self.name)

    @property
    def name(self) -> str:
        return self._args[0]


class Indirect(Atom):
    """The value read from index tensor `tensor` at the current iteration point (a gather)."""

    __slots__ = ()
    _rank = 1

    def __init__(self, tensor: str) -> None:
        super().__init__(tensor)

    @property
    def tensor(self) -> str:
        return self._args[0]


class _IntegerDivision(Atom):
    """An atom over a numerator and a constant integer other than 0 and +-1."""

    __slots__ = ()

    def __init__(self, num: "Lin", divisor: int) -> None:
        assert divisor not in (0, 1, -1), divisor
        super().__init__(num, divisor)

    @property
    def num(self) -> "Lin":
        return self._args[0]


class FloorDiv(_IntegerDivision):
    """floor(num / divisor)."""

    __slots__ = ()
    _rank = 2

    @property
    def divisor(self) -> int:
        return self._args[1]


class Mod(_IntegerDivision):
    """num mod modulus with floor semantics (Python `%`: the result has the modulus' sign)."""

    __slots__ = ()
    _rank = 3

    @property
    def modulus(self) -> int:
        return self._args[1]


class _Variadic(Atom):
    """An atom over a sorted, duplicate-free tuple of operands."""

    __slots__ = ()

    def __init__(self, operands: Iterable) -> None:
        super().__init__(*sorted(set(operands), key=lambda a: a.key))

    @property
    def operands(self) -> tuple:
        return self._args


class Min(_Variadic):
    __slots__ = ()
    _rank = 4


class Max(_Variadic):
    __slots__ = ()
    _rank = 5


class Prod(Atom):
    """A product of two or more atoms (repeats allowed: x*x). Rare in index expressions."""

    __slots__ = ()
    _rank = 6

    def __init__(self, factors: Iterable[Atom]) -> None:
        super().__init__(*sorted(factors, key=lambda a: a.key))

    @property
    def factors(self) -> tuple:
        return self._args


_SEQUENCES = (list, tuple, type(x for x in ()))


def _atom_key(term: tuple) -> tuple:
    return term[0].key


class Lin:
    """const + sum(coeff * atom): the one expression type. Immutable; terms sorted by atom key."""

    __slots__ = ("terms", "const", "_hash", "_key", "_leaves")

    def __init__(self, terms: Mapping[Atom, int] | Iterable[tuple[Atom, int]] = (), const: int = 0):
        # a dict is the common case: checked by type first (an ABC isinstance is slow, and
        # Lin is built tens of thousands of times per compile)
        kind = type(terms)
        if kind is dict:
            items = terms.items()
        elif kind in _SEQUENCES:
            items = terms
        else:
            items = terms.items() if isinstance(terms, Mapping) else terms
        merged: dict[Atom, int] = {}
        for atom, coeff in items:
            merged[atom] = merged.get(atom, 0) + coeff
        live = [(a, c) for a, c in merged.items() if c != 0]
        if len(live) > 1:
            live.sort(key=_atom_key)
        self.terms: tuple[tuple[Atom, int], ...] = tuple(live)
        self.const: int = int(const)
        self._hash = hash((self.terms, self.const))
        self._key = (tuple((a.key, c) for a, c in self.terms), self.const)
        self._leaves: frozenset | None = None     # `free_atoms`

    # --- identity -------------------------------------------------------------------------
    @property
    def key(self) -> tuple:
        return self._key

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return not self.terms and self.const == other
        return (
            isinstance(other, Lin)
            and other._hash == self._hash
            and other.const == self.const
            and other.terms == self.terms
        )

    def __repr__(self) -> str:
        return f"Lin({str(self)!r})"

    def __str__(self) -> str:
        from spyrec.indexing.printer import format_expr

        return format_expr(self)

    # --- queries --------------------------------------------------------------------------
    @property
    def is_const(self) -> bool:
        return not self.terms

    def as_atom(self) -> Atom | None:
        """The atom if this expression is exactly `1*atom + 0`, else None."""
        if self.const == 0 and len(self.terms) == 1 and self.terms[0][1] == 1:
            return self.terms[0][0]
        return None

    def coeff(self, atom: Atom) -> int:
        for a, c in self.terms:
            if a == atom:
                return c
        return 0

    def atoms(self) -> tuple[Atom, ...]:
        return tuple(a for a, _ in self.terms)

    def free_atoms(self) -> set[Atom]:
        """Every Var and Indirect anywhere inside the expression (a fresh set: callers may
        change it; the leaves are found once per expression, which is immutable, since the
        passes and the simulator ask for them ~100,000 times per compile)."""
        leaves = self._leaves
        if leaves is None:
            out: set[Atom] = set()
            _collect_leaves(self, out)
            leaves = self._leaves = frozenset(out)
        return set(leaves)

    # --- arithmetic -----------------------------------------------------------------------
    def __add__(self, other: "Lin | int") -> "Lin":
        other = as_lin(other)
        return Lin(self.terms + other.terms, self.const + other.const)

    __radd__ = __add__

    def __neg__(self) -> "Lin":
        return self.scale(-1)

    def __sub__(self, other: "Lin | int") -> "Lin":
        return self + (-as_lin(other))

    def __rsub__(self, other: "Lin | int") -> "Lin":
        return as_lin(other) - self

    def __mul__(self, other: "Lin | int") -> "Lin":
        return mul(self, other)

    __rmul__ = __mul__

    def scale(self, k: int) -> "Lin":
        if k == 0:
            return ZERO
        if k == 1:
            return self
        return Lin(((a, c * k) for a, c in self.terms), self.const * k)


ZERO = Lin()
ONE = Lin((), 1)
Expr = Union[Lin, Atom, int]


def _collect_leaves(e: Lin | Atom, out: set[Atom]) -> None:
    if isinstance(e, Lin):
        for a, _ in e.terms:
            _collect_leaves(a, out)
    elif isinstance(e, (Var, Indirect)):
        out.add(e)
    else:
        for arg in e._args:
            if isinstance(arg, (Lin, Atom)):
                _collect_leaves(arg, out)


# --- smart constructors: numeric folding only ---------------------------------------------


def as_lin(e: Expr) -> Lin:
    if isinstance(e, Lin):
        return e
    if isinstance(e, Atom):
        return Lin(((e, 1),))
    if isinstance(e, int) and not isinstance(e, bool):
        return Lin((), e)
    raise TypeError(f"not an index expression: {e!r}")


@lru_cache(maxsize=4096)
def const(value: int) -> Lin:
    return Lin((), value)       # immutable, so one object per value serves every caller


@lru_cache(maxsize=4096)
def var(name: str) -> Lin:
    return as_lin(Var(name))


def indirect(tensor: str) -> Lin:
    return as_lin(Indirect(tensor))


def floordiv(num: Expr, divisor: int) -> Lin:
    """floor(num / divisor) for a non-zero integer divisor."""
    num = as_lin(num)
    if divisor == 0:
        raise ZeroDivisionError(f"floor division of {num} by zero")
    if num.is_const:
        return const(num.const // divisor)
    if divisor == 1:
        return num
    if divisor == -1:
        return -num
    return as_lin(FloorDiv(num, divisor))


def mod(num: Expr, modulus: int) -> Lin:
    """num mod modulus (floor semantics) for a non-zero integer modulus."""
    num = as_lin(num)
    if modulus == 0:
        raise ZeroDivisionError(f"modulo of {num} by zero")
    if num.is_const:
        return const(num.const % modulus)
    if modulus in (1, -1):
        return ZERO
    return as_lin(Mod(num, modulus))


def _variadic(cls, pick, operands: Iterable[Expr]) -> Lin:
    ops = {as_lin(o) for o in operands}
    if not ops:
        raise ValueError(f"{cls.__name__} needs at least one operand")
    consts = [o.const for o in ops if o.is_const]
    rest = {o for o in ops if not o.is_const}
    if consts:
        rest.add(const(pick(consts)))
    if len(rest) == 1:
        return next(iter(rest))
    return as_lin(cls(rest))


def minimum(*operands: Expr) -> Lin:
    return _variadic(Min, min, operands)


def maximum(*operands: Expr) -> Lin:
    return _variadic(Max, max, operands)


def mul(a: Expr, b: Expr) -> Lin:
    """Product of two expressions; a product of two non-constant terms becomes a `Prod`."""
    a, b = as_lin(a), as_lin(b)
    if a.is_const:
        return b.scale(a.const)
    if b.is_const:
        return a.scale(b.const)
    total: dict[Atom, int] = {}
    const_part = a.const * b.const
    for atom, c in a.terms:
        total[atom] = total.get(atom, 0) + c * b.const
    for atom, c in b.terms:
        total[atom] = total.get(atom, 0) + c * a.const
    for atom_a, ca in a.terms:
        for atom_b, cb in b.terms:
            fa = atom_a.factors if isinstance(atom_a, Prod) else (atom_a,)
            fb = atom_b.factors if isinstance(atom_b, Prod) else (atom_b,)
            p = Prod(fa + fb)
            total[p] = total.get(p, 0) + ca * cb
    return Lin(total, const_part)


# --- evaluation -----------------------------------------------------------------------------


def evaluate(e: Expr, env: Mapping) -> object:
    """Value of `e` with every leaf looked up in `env` (keys: Var/Indirect atoms or names).

    Works on Python ints and on numpy integer arrays alike (floor `//` and `%` in both), so
    the simulator evaluates a coordinate over a whole iteration space in one call.
    """
    if isinstance(e, int):
        return e
    if isinstance(e, Lin):
        total = e.const
        for atom, c in e.terms:
            total = total + c * evaluate(atom, env)
        return total
    if isinstance(e, (Var, Indirect)):
        if e in env:
            return env[e]
        name = e.name if isinstance(e, Var) else e.tensor
        if name in env:
            return env[name]
        raise KeyError(f"no value for {e} in the environment")
    if isinstance(e, FloorDiv):
        return evaluate(e.num, env) // e.divisor
    if isinstance(e, Mod):
        return evaluate(e.num, env) % e.modulus
    if isinstance(e, Prod):
        return math.prod((evaluate(f, env) for f in e.factors), start=1)
    if isinstance(e, (Min, Max)):
        values = [evaluate(o, env) for o in e.operands]
        return _fold_minmax(values, isinstance(e, Min))
    raise TypeError(f"cannot evaluate {e!r}")


def _fold_minmax(values: list, is_min: bool) -> object:
    if all(isinstance(v, int) for v in values):
        return min(values) if is_min else max(values)
    import numpy as np

    fold = np.minimum if is_min else np.maximum
    out = values[0]
    for v in values[1:]:
        out = fold(out, v)
    return out


def substitute(e: Expr, mapping: Mapping[Atom, "Lin"]) -> Lin:
    """`e` with every leaf in `mapping` replaced by its expression (rebuilt through the smart
    constructors, so numbers fold on the way)."""
    return _substitute(as_lin(e), tuple(mapping.items()))


@lru_cache(maxsize=1 << 14)
def _substitute(e: Lin, items: tuple) -> Lin:
    """`substitute` memoized on the expression and the mapping's items: the layers of a
    stack (and the files of their ops) substitute the same coordinates again and again."""
    return _substitute_lin(e, dict(items))


def _substitute_lin(e: Lin, mapping: Mapping[Atom, "Lin"]) -> Lin:
    total = const(e.const)
    for atom, coeff in e.terms:
        total = total + _substitute_atom(atom, mapping).scale(coeff)
    return total


def _substitute_atom(a: Atom, mapping: Mapping[Atom, "Lin"]) -> Lin:
    if isinstance(a, (Var, Indirect)):
        return as_lin(mapping.get(a, a))
    return rebuild_atom(a, lambda e: substitute(e, mapping),
                        lambda f: _substitute_atom(f, mapping))


def rebuild_atom(a: Atom, on_expr: Callable[["Lin"], "Lin"],
                 on_factor: Callable[[Atom], "Lin"]) -> Lin:
    """`a` (not a Var or Indirect: those have no children) rebuilt from its children mapped:
    a division's numerator and a Min's or Max's operands through `on_expr`, a product's
    factors (atoms) through `on_factor`. The one walk substitution and simplification share."""
    if isinstance(a, FloorDiv):
        return floordiv(on_expr(a.num), a.divisor)
    if isinstance(a, Mod):
        return mod(on_expr(a.num), a.modulus)
    if isinstance(a, Min):
        return minimum(*(on_expr(o) for o in a.operands))
    if isinstance(a, Max):
        return maximum(*(on_expr(o) for o in a.operands))
    if isinstance(a, Prod):
        out = const(1)
        for f in a.factors:
            out = mul(out, on_factor(f))
        return out
    raise TypeError(f"cannot rebuild {a!r}: not an atom with children")
