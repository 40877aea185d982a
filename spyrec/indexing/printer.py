"""Text form of index expressions: deterministic, readable, and read back by `sympy.sympify`.

`floor((c1 + 32)/64)`, `Mod(c1, 64)`, `IndirectAccess('idx')`: the spellings of the reference's
OpSpec JSON, so a plain `sympify` (with `IndirectAccess` known) reads every string we write.
`sympy_bridge.parse_expr` is the inverse used by our own readers.
"""

from __future__ import annotations

from spyrec.indexing.expr import Atom, FloorDiv, Indirect, Lin, Max, Min, Mod, Prod, Var


def format_expr(e: Lin) -> str:
    parts: list[str] = []
    for atom, coeff in e.terms:
        body = format_atom(atom)
        if coeff == 1:
            text = body
        elif coeff == -1:
            text = f"-{body}"
        else:
            text = f"{coeff}*{body}"
        parts.append(text)
    if e.const or not parts:
        parts.append(str(e.const))
    out = parts[0]
    for p in parts[1:]:
        out += f" - {p[1:]}" if p.startswith("-") else f" + {p}"
    return out


def _operand(e: Lin) -> str:
    """An expression used as a numerator: parenthesised unless it is a single leaf."""
    atom = e.as_atom()
    if atom is not None and isinstance(atom, (Var, Indirect, FloorDiv, Mod, Min, Max)):
        return format_atom(atom)
    if e.is_const and e.const >= 0:
        return str(e.const)
    return f"({format_expr(e)})"


def format_atom(a: Atom) -> str:
    if isinstance(a, Var):
        return a.name
    if isinstance(a, Indirect):
        return f"IndirectAccess('{a.tensor}')"
    if isinstance(a, FloorDiv):
        d = a.divisor
        return f"floor({_operand(a.num)}/{d if d > 0 else f'({d})'})"
    if isinstance(a, Mod):
        return f"Mod({format_expr(a.num)}, {a.modulus})"
    if isinstance(a, (Min, Max)):
        inner = ", ".join(format_expr(o) for o in a.operands)
        return f"{type(a).__name__}({inner})"
    if isinstance(a, Prod):
        return "*".join(format_atom(f) if isinstance(f, (Var, Indirect)) else
                        f"({format_atom(f)})" for f in a.factors)
    raise TypeError(f"cannot print {a!r}")
