"""Symbolic dims of a dynamic-shape `.pt2`, and the one binding a `Program` is instantiated at.

An export with `torch.export.Dim` leaves some sizes as sympy expressions over symbols (`s81`),
bounded by `range_constraints` and narrowed by `guards_code`. Both front ends hand the same
strings to this module (the graph JSON stores them; the torch front end prints its SymInts the
way the serializer does, `sympy.srepr`), so they agree by construction. A `Program` is then
read at one binding (every symbol at its maximum unless the caller binds it): every size is a
plain int, and `Program.symbols` / `Program.symbolic_dims` say which dims may vary and how.

What spyrec serves: each symbolic dim is `c * symbol` (`c` the symbol's granularity, the same
in every user input), the symbol bounded, and every guard and derived range torch recorded
true at every admissible length (checked here by trying them all). Anything else is one
`UnsupportedProgram` naming the symbol, the tensor and dim, and what to change in the export.

Expressions are read with `ast` and walked by a whitelist; nothing from the file is executed.
`SymLength` itself is the IR's (`spyrec.ir.symbols`): the compiler plans with what is read here.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from spyrec.errors import ConfigError, UnsupportedProgram
from spyrec.ir.symbols import SymLength

# A symbol bounded above this many elements is unbounded in practice (int_oo, sys.maxsize).
UNBOUNDED = 1 << 31
# Most bindings a guard over several symbols is checked at (it is checked at every one).
MAX_GUARD_BINDINGS = 50_000
REEXPORT_STATIC = (
    "re-export with static shapes: call torch.export.export(model, example_inputs) without "
    "dynamic_shapes (and without torch.export.Dim), then save it again")


def refuse_symbols(program, source=None) -> None:
    """The refusal of a program with symbolic dims (read from file `source`), for callers that
    cannot compile them yet."""
    if program.symbols:
        described = "; ".join(f"{s.where}: {s.describe()}" for s in program.symbols.values())
        prefix = f"{source}: " if source else ""
        raise UnsupportedProgram(f"{prefix}dynamic shapes are not supported yet ({described}); "
                                 f"{REEXPORT_STATIC}.")


# --- expressions ------------------------------------------------------------------------------

class UnreadableExpression(ValueError):
    """An expression outside the small grammar below."""


@lru_cache(maxsize=4096)
def parse(text: str) -> ast.expr:
    """`text` (a sympy `srepr`, a printed sympy expression or a Python guard) as a syntax tree,
    only ever walked by `evaluate`."""
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise UnreadableExpression(text) from None


def evaluate(text: str, symbols: dict[str, int], sizes=None):
    """The value of `text` with each symbol at `symbols[name]`. `sizes(path, what, index)`
    gives the size or stride (an int or srepr text) of the input a guard names
    (`L['x'].size()[1]`: path ('x',), what "size", index 1)."""
    return _Evaluator(symbols, sizes).walk(parse(text))


def _power(base, exponent):
    """A stride of a square (`4096*s**2`); a huge exponent is no size, and would not end."""
    if not isinstance(exponent, int) or not 0 <= exponent <= 64:
        raise UnreadableExpression(f"a power {exponent}")
    return base ** exponent


_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
           ast.Mod: lambda a, b: a % b, ast.Div: lambda a, b: Fraction(a) / Fraction(b),
           ast.Pow: _power}
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
            ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
            ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}
# sympy's srepr names and the functions its Python printer uses in guards.
_FUNCTIONS = {
    "Integer": lambda n: int(n), "Add": lambda *xs: sum(xs), "Mul": lambda *xs: math.prod(xs),
    "Pow": _power, "FloorDiv": lambda a, b: a // b, "Mod": lambda a, b: a % b,
    "PythonMod": lambda a, b: a % b, "CleanDiv": lambda a, b: a // b,
    "Max": max, "Min": min, "max": max, "min": min, "Abs": abs, "abs": abs,
    "Eq": lambda a, b: a == b, "Ne": lambda a, b: a != b,
    "math.trunc": math.trunc, "math.floor": math.floor, "math.ceil": math.ceil,
    "math.floor_div": lambda a, b: a // b,
}


class _Evaluator:
    def __init__(self, symbols: dict[str, int], sizes) -> None:
        self.symbols = symbols
        self.sizes = sizes

    def walk(self, node: ast.expr):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.symbols:
            return self.symbols[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not)):
            value = self.walk(node.operand)
            return -value if isinstance(node.op, ast.USub) else not value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](self.walk(node.left), self.walk(node.right))
        if isinstance(node, ast.BoolOp):
            values = [bool(self.walk(v)) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.Compare):
            return self._compare(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return self._size(node)
        raise UnreadableExpression(ast.unparse(node))

    def _compare(self, node: ast.Compare) -> bool:
        """`a < b <= c` as Python reads it: every adjacent pair holds."""
        if any(type(op) not in _COMPARE for op in node.ops):
            raise UnreadableExpression(ast.unparse(node))
        values = [self.walk(n) for n in (node.left, *node.comparators)]
        return all(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, values, values[1:]))

    def _call(self, node: ast.Call):
        name = ast.unparse(node.func)
        if name == "Symbol" and node.args and isinstance(node.args[0], ast.Constant):
            symbol = node.args[0].value
            if symbol in self.symbols:
                return self.symbols[symbol]
        if name in _FUNCTIONS and not node.keywords:
            return _FUNCTIONS[name](*(self.walk(a) for a in node.args))
        raise UnreadableExpression(ast.unparse(node))

    def _size(self, node: ast.Subscript) -> int:
        """`<input path>.size()[d]` or `.stride()[d]` in a guard."""
        call = node.value
        if self.sizes is None or not isinstance(call, ast.Call) or \
                not isinstance(call.func, ast.Attribute) or \
                call.func.attr not in ("size", "stride") or \
                not isinstance(node.slice, ast.Constant):
            raise UnreadableExpression(ast.unparse(node))
        return self.walk_size(call.func.value, call.func.attr, node.slice.value)

    def walk_size(self, path: ast.expr, what: str, index: int) -> int:
        entry = self.sizes(input_path(path), what, index)
        return entry if isinstance(entry, int) else self.walk(parse(entry))


def input_path(node: ast.expr) -> tuple:
    """`L['x']['k'][0]` -> ('x', 'k', 0): the keys a guard uses to reach an input."""
    keys = []
    while isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        keys.append(node.slice.value)
        node = node.value
    if not (isinstance(node, ast.Name) and node.id == "L") or not keys:
        raise UnreadableExpression(ast.unparse(node))
    return tuple(reversed(keys))


@lru_cache(maxsize=4096)
def multiple_of_symbol(text: str) -> tuple[int, str] | None:
    """(c, name) when `text` is `c * name` for a positive integer c (c = 1: the symbol alone)."""
    node = parse(text)
    factors = node.args if isinstance(node, ast.Call) and ast.unparse(node.func) == "Mul" \
        else [node]
    coefficient, names = 1, []
    for f in factors:
        if isinstance(f, ast.Call) and ast.unparse(f.func) == "Integer" and f.args and \
                isinstance(f.args[0], ast.Constant):
            coefficient *= f.args[0].value
        elif isinstance(f, ast.Call) and ast.unparse(f.func) == "Symbol" and f.args and \
                isinstance(f.args[0], ast.Constant):
            names.append(f.args[0].value)
        else:
            return None
    if len(names) != 1 or coefficient <= 0:
        return None
    return coefficient, names[0]


def symbols_in(text: str) -> set[str]:
    """The symbol names an expression mentions (`Symbol('s81', …)` in srepr, bare names in a
    printed constraint)."""
    found, functions = set(), {"L", "math"}
    for node in ast.walk(parse(text)):
        if isinstance(node, ast.Call):
            functions.add(ast.unparse(node.func))
            if ast.unparse(node.func) == "Symbol" and node.args and \
                    isinstance(node.args[0], ast.Constant):
                found.add(node.args[0].value)
        elif isinstance(node, ast.Name):
            found.add(node.id)
    return found - functions


def readable(text: str) -> str:
    """An srepr expression as people write it: `Mul(Integer(64), Symbol('s81', …))` -> 64*s81."""
    try:
        return _readable(parse(text))
    except UnreadableExpression:
        return text


def _readable(node: ast.expr) -> str:
    if isinstance(node, ast.Call) and node.args:
        name = ast.unparse(node.func)
        if name == "Symbol" and isinstance(node.args[0], ast.Constant):
            return str(node.args[0].value)
        if name == "Integer":
            return ast.unparse(node.args[0])
        parts = [_readable(a) for a in node.args]
        if name == "Mul":
            return "*".join(parts)
        if name == "Add":
            return " + ".join(parts).replace("+ -", "- ")
        return f"{name}({', '.join(parts)})"
    return ast.unparse(node)


# --- the binding ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShapeFacts:
    """What an export says about its symbolic sizes, as strings, the same from both front ends.

    Sizes are ints or srepr strings; `constraints` maps a printed sympy expression to its
    (min, max) (None: unbounded); `guards` are torch's guard expressions in Python."""

    where: str                                   # the file, for messages
    constraints: dict[str, tuple[int | None, int | None]]
    inputs: dict[str, tuple[list, list]]         # user input -> (sizes, strides)
    outputs: dict[str, list]                     # user output -> sizes
    tensors: dict[str, list]                     # every tensor value -> sizes
    guards: list[str]


@dataclass(frozen=True)
class Binding:
    """The symbols of a program and the value each has in the instantiated Program."""

    symbols: dict[str, SymLength]
    values: dict[str, int]            # symbol -> its value (length // granularity)
    symbolic_dims: dict[str, dict[int, str]]

    def size(self, entry) -> int:
        """An int or srepr size (or stride, or SymInt argument) at this binding."""
        if isinstance(entry, int):
            return entry
        try:
            return int(evaluate(entry, self.values))
        except (UnreadableExpression, ZeroDivisionError, TypeError) as e:
            raise UnsupportedProgram(
                f"a size of the exported program, {readable(entry)}, is outside what spyrec "
                f"reads ({type(e).__name__}: {e}); {REEXPORT_STATIC}.") from None


STATIC = Binding({}, {}, {})


def bind_symbols(facts: ShapeFacts, bind: dict[str, int] | None) -> Binding:
    """The program's symbols (refusing what spyrec cannot serve) and their values at `bind`
    (symbol -> length; None: every symbol at its maximum)."""
    if not facts.constraints and not _any_symbolic(facts.inputs):
        _check_bind({}, bind)
        return STATIC
    symbols = _symbols(facts)
    _check_tensor_sizes(facts, symbols)
    _check_constraints(facts, symbols)
    _check_guards(facts, symbols)
    lengths = {name: s.maximum for name, s in symbols.items()} | _check_bind(symbols, bind)
    values = {name: lengths[name] // s.granularity for name, s in symbols.items()}
    dims = {name: _symbolic_dims(sizes) for name, (sizes, _) in facts.inputs.items()}
    dims |= {name: _symbolic_dims(sizes) for name, sizes in facts.outputs.items()}
    return Binding(symbols, values, {name: d for name, d in dims.items() if d})


def _any_symbolic(inputs: dict[str, tuple[list, list]]) -> bool:
    return any(isinstance(n, str) for sizes, _ in inputs.values() for n in sizes)


def _symbolic_dims(sizes: list) -> dict[int, str]:
    return {d: multiple_of_symbol(n)[1] for d, n in enumerate(sizes) if isinstance(n, str)}


def _symbols(facts: ShapeFacts) -> dict[str, SymLength]:
    """One SymLength per symbol the user inputs' sizes use, its granularity read from them."""
    seen: dict[str, tuple[int, str]] = {}
    for name, (sizes, _) in facts.inputs.items():
        for d, size in enumerate(sizes):
            if not isinstance(size, str):
                continue
            where = f"input {name} dim {d} ({readable(size)})"
            found = multiple_of_symbol(size)
            if found is None:
                raise UnsupportedProgram(
                    f"{facts.where}: {where}: spyrec serves a dynamic dim whose length is a "
                    f"multiple of one symbol (Dim('s') or c*Dim('s')), not {readable(size)}; "
                    f"export this dim as such a Dim, or {REEXPORT_STATIC}.")
            c, symbol = found
            if symbol in seen and seen[symbol][0] != c:
                raise UnsupportedProgram(
                    f"{facts.where}: symbol {symbol} is {seen[symbol][1]} but {where}: one "
                    f"symbol with two coefficients; give both dims the same "
                    f"torch.export.Dim expression.")
            seen.setdefault(symbol, (c, where))
    return {symbol: _sym_length(facts, symbol, c, where) for symbol, (c, where) in seen.items()}


def _sym_length(facts: ShapeFacts, symbol: str, c: int, where: str) -> SymLength:
    low, high = facts.constraints.get(symbol, (None, None))
    if high is None or c * high >= UNBOUNDED:
        raise UnsupportedProgram(
            f"{facts.where}: {where}: symbol {symbol} has no upper bound; give its Dim a "
            f"maximum in the export's dynamic_shapes: torch.export.Dim('…', max=…).")
    # torch admits 0 (an empty tensor) for a Dim without min; spyrec's smallest length is c.
    return SymLength(symbol, c, c * max(low or 1, 1), c * high, where)


def _check_tensor_sizes(facts: ShapeFacts, symbols: dict[str, SymLength]) -> None:
    """Every symbolic size in the graph is c * one input symbol: what a loop with a fixed tile
    and a symbolic trip count covers."""
    for tensor, sizes in facts.tensors.items():
        for d, size in enumerate(sizes):
            if not isinstance(size, str):
                continue
            found = multiple_of_symbol(size)
            if found is None or found[1] not in symbols:
                unknown = sorted(symbols_in(size) - set(symbols))
                why = (f"{', '.join(unknown)} is defined by no input's size (a size that "
                       f"depends on the data)" if unknown else
                       "spyrec tiles only a multiple of one symbol (c*s)")
                raise UnsupportedProgram(
                    f"{facts.where}: tensor {tensor} dim {d} has size {readable(size)}: {why}; "
                    f"change the model so the size is a multiple of the Dim, or "
                    f"{REEXPORT_STATIC}.")


def _check_constraints(facts: ShapeFacts, symbols: dict[str, SymLength]) -> None:
    """A range torch recorded for a derived expression (`64*s81`) must hold at every admissible
    length: spyrec does not serve a narrower set than each symbol's own range."""
    for key, (low, high) in facts.constraints.items():
        if key in symbols or not symbols_in(key) & set(symbols):
            continue

        def holds(values, low=low, high=high, key=key):
            value = evaluate(key, values)
            return (low is None or value >= low) and (high is None or value <= high)

        _holds_everywhere(facts, symbols, holds, f"the range constraint {key} in [{low}, {high}]")


def _check_guards(facts: ShapeFacts, symbols: dict[str, SymLength]) -> None:
    """Each guard torch recorded (`L['x'].size()[1] % 128 == 0`) must hold at every admissible
    length, or the program would be wrong at some length spyrec accepts."""
    at_maximum = {name: s.maximum // s.granularity for name, s in symbols.items()}
    for guard in facts.guards:
        read: list = []

        def sizes(path: tuple, what: str, index: int, guard=guard, read=read):
            entry = facts.inputs[_input_name(facts, path, guard)][0 if what == "size" else 1]
            read.append(entry[index])
            return entry[index]

        what = f"the guard {guard}"
        _readable_at(facts, what, lambda: evaluate(guard, at_maximum, sizes))
        involved = {s for t in read if isinstance(t, str) for s in symbols_in(t)}
        _holds_everywhere(facts, {s: symbols[s] for s in sorted(involved) if s in symbols},
                          lambda values, g=guard, f=sizes: bool(evaluate(g, values, f)), what)


def _input_name(facts: ShapeFacts, path: tuple, guard: str = "") -> str:
    """The user input a guard's path reaches: torch names an input placeholder by its path's
    keys joined with `_` (`L['x']['k']` -> x_k), or refers to the flat inputs by position."""
    names = list(facts.inputs)
    if path[0] == "flat_args" and len(path) == 2 and isinstance(path[1], int) and \
            path[1] < len(names):
        return names[path[1]]
    name = "_".join(re.sub(r"[^a-zA-Z0-9]", "_", str(k)) for k in path)
    if name not in facts.inputs:
        raise UnsupportedProgram(f"{facts.where}: the guard {guard} reads an input spyrec "
                                 f"cannot identify (L{''.join(f'[{k!r}]' for k in path)}); "
                                 f"{REEXPORT_STATIC}.")
    return name


def _holds_everywhere(facts: ShapeFacts, symbols: dict[str, SymLength], holds,
                      what: str) -> None:
    """`holds(values)` at every admissible binding of `symbols`, or one refusal naming the
    first length where it does not."""
    ladders = [[(s.name, n // s.granularity, n) for n in s.values()] for s in symbols.values()]
    count = math.prod(len(ladder) for ladder in ladders)
    if count > MAX_GUARD_BINDINGS:
        raise UnsupportedProgram(f"{facts.where}: {what} involves {count} combinations of "
                                 f"lengths (spyrec checks up to {MAX_GUARD_BINDINGS}); "
                                 f"{REEXPORT_STATIC}.")
    for combination in itertools.product(*ladders):
        values = {name: value for name, value, _ in combination}
        if not _readable_at(facts, what, lambda: holds(values)):
            at = ", ".join(f"length {length} of {s.where}"
                           for s, (_, _, length) in zip(symbols.values(), combination))
            raise UnsupportedProgram(
                f"{facts.where}: torch recorded {what}, which does not hold at {at}: the "
                f"export admits fewer lengths than the Dim's range. Give the Dim "
                f"the range and multiple the model needs (e.g. c*torch.export.Dim('…', "
                f"min=…, max=…)), so that every length in it is valid.")


def _readable_at(facts: ShapeFacts, what: str, compute):
    """`compute()`, an expression of the file outside what spyrec reads being one refusal."""
    try:
        return compute()
    except (UnreadableExpression, ZeroDivisionError, KeyError, IndexError, TypeError,
            ValueError) as e:
        raise UnsupportedProgram(f"{facts.where}: spyrec cannot read {what} "
                                 f"({type(e).__name__}: {e}); {REEXPORT_STATIC}.") from None


def _check_bind(symbols: dict[str, SymLength], bind: dict[str, int] | None) -> dict[str, int]:
    for name, length in (bind or {}).items():
        if name not in symbols:
            known = ", ".join(symbols) or "none: the program's shapes are static"
            raise ConfigError(f"bind: unknown symbol {name!r} (the program's symbols: {known})")
        if not isinstance(length, int) or not symbols[name].admits(length):
            raise ConfigError(f"bind: {name} = {length!r} is not an admissible length of "
                              f"{symbols[name].where}: give one of {symbols[name].describe()}")
    return dict(bind or {})
