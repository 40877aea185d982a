"""Integer index algebra: expressions, ranges, the simplifier, device coordinates.

Public entry points accept sympy expressions (built with `floor`, `Mod`, `//`, `%`, `+`, `*`
on integer symbols) or our own `Lin` form, and return the same kind they were given:

- `simplify(expr, ranges)`: an equivalent, simpler expression over the same symbols;
- `value_range(expr, ranges)`: inclusive `(lo, hi)` bounds;
- `device_coordinates(...)`: one simplified coordinate per device dim of a tensor access;
- `simplify_domain(ranges, constraints)`: a constrained iteration domain, simplified.

`ranges` maps each symbol (a sympy Symbol, its name, or a `Var`/`Indirect` atom) to an
inclusive `(lo, hi)`. Everything is memoized on (expression, ranges).
"""

from spyrec.indexing.api import (
    clear_caches, device_coordinates, make_ranges, simplify, simplify_domain, value_range,
)
from spyrec.indexing.constraints import Domain
from spyrec.indexing.expr import (
    Atom, FloorDiv, Indirect, Lin, Max, Min, Mod, Prod, Var, as_lin, const, evaluate,
    floordiv, indirect, maximum, minimum, mod, substitute, var,
)
from spyrec.indexing.ranges import Ranges, bounds, intern
from spyrec.indexing.parser import ExprSyntaxError, parse_expr

_SYMPY_BRIDGE = ("IndirectAccess", "from_sympy", "to_sympy")


def __getattr__(name: str):
    """The sympy bridge loads on first use: importing sympy costs half a second."""
    if name in _SYMPY_BRIDGE:
        from spyrec.indexing import sympy_bridge

        return getattr(sympy_bridge, name)
    raise AttributeError(f"module 'spyrec.indexing' has no attribute {name!r}")


__all__ = [
    "Atom", "Domain", "ExprSyntaxError", "FloorDiv", "Indirect", "IndirectAccess", "Lin", "Max", "Min", "Mod",
    "Prod", "Ranges", "Var", "as_lin", "bounds", "clear_caches", "const", "device_coordinates", "evaluate",
    "floordiv", "from_sympy", "indirect", "intern", "make_ranges", "maximum", "minimum", "mod",
    "parse_expr", "simplify", "simplify_domain", "substitute", "to_sympy", "value_range", "var",
]
