"""Parser of the index-expression text form (the inverse of `printer`), plus Python `//`, `%`.

Grammar (Python precedence; unary minus binds tighter than `*`, `//`, `%`):
    expr   := term (('+' | '-') term)*
    term   := unary (('*' | '//' | '%') unary)*
    unary  := '-' unary | atom
    atom   := INT | NAME | '(' expr ')' | 'floor(' expr '/' divisor ')' | 'Mod(' expr ',' INT ')'
            | ('Min' | 'Max') '(' expr (',' expr)* ')' | "IndirectAccess('" NAME "')"
Own parser rather than `sympify`: it is exact (sympy would rewrite `floor(2*x/2)` to `x`
while reading) and about a hundred times faster, which matters when the simulator reads
thousands of coordinates.
"""

from __future__ import annotations

import re
from functools import lru_cache

from spyrec.indexing.expr import (
    Lin, const, floordiv, indirect, maximum, minimum, mod, mul, var,
)

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9.]*)|('[^']*')|(//|[-+*/%(),]))")


class ExprSyntaxError(ValueError):
    """The text is not an index expression; the message shows where it stopped."""


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            if text[pos:].strip() == "":
                break
            raise ExprSyntaxError(f"unexpected character at {pos} in {text!r}")
        kind = ("int", "name", "str", "op")[m.lastindex - 1]
        tokens.append((kind, m.group(m.lastindex)))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0

    def error(self, what: str) -> ExprSyntaxError:
        seen = " ".join(t for _, t in self.tokens[: self.pos])
        return ExprSyntaxError(f"{what} after {seen!r} in index expression {self.text!r}")

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.pos >= len(self.tokens):
            raise self.error(f"expected {expected or 'more'} at end")
        tok = self.tokens[self.pos]
        if expected is not None and tok[1] != expected:
            raise self.error(f"expected {expected!r}, found {tok[1]!r}")
        self.pos += 1
        return tok

    def parse(self) -> Lin:
        e = self.expr()
        if self.pos != len(self.tokens):
            raise self.error(f"unexpected {self.peek()!r}")
        return e

    def expr(self) -> Lin:
        e = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            rhs = self.term()
            e = e + rhs if op == "+" else e - rhs
        return e

    def term(self) -> Lin:
        e = self.unary()
        while self.peek() in ("*", "//", "%"):
            op = self.take()[1]
            rhs = self.unary()
            if op == "*":
                e = mul(e, rhs)
            else:
                e = floordiv(e, self.constant(rhs)) if op == "//" else mod(e, self.constant(rhs))
        return e

    def constant(self, e: Lin) -> int:
        if not e.is_const:
            raise self.error(f"divisor must be an integer constant, not {e}")
        return e.const

    def unary(self) -> Lin:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        return self.atom()

    def atom(self) -> Lin:
        kind, tok = self.take()
        if kind == "int":
            return const(int(tok))
        if tok == "(":
            e = self.expr()
            self.take(")")
            return e
        if kind != "name":
            raise self.error(f"unexpected {tok!r}")
        if self.peek() != "(":
            return var(tok)
        self.take("(")
        return self.call(tok)

    def call(self, name: str) -> Lin:
        if name == "floor":
            num = self.expr()
            self.take("/")
            divisor = self.constant(self.unary())
            self.take(")")
            return floordiv(num, divisor)
        if name == "Mod":
            num = self.expr()
            self.take(",")
            modulus = self.constant(self.unary())
            self.take(")")
            return mod(num, modulus)
        if name in ("Min", "Max"):
            args = [self.expr()]
            while self.peek() == ",":
                self.take()
                args.append(self.expr())
            self.take(")")
            return minimum(*args) if name == "Min" else maximum(*args)
        if name == "IndirectAccess":
            kind, tok = self.take()
            self.take(")")
            return indirect(tok.strip("'") if kind == "str" else tok)
        raise self.error(f"unknown function {name!r}")


@lru_cache(maxsize=1 << 15)
def parse_expr(text: str) -> Lin:
    """The `Lin` for a text index expression (our printed form or Python `//`/`%` syntax)."""
    return _Parser(text).parse()
