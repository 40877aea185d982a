"""Read the text form of a Graph (`ir/printer.py` documents it) back into a Graph.

`parse(format_graph(g), constants=g.constants) == g` for every graph the compiler builds, and
`format_graph(parse(text)) == text` for every printed text. Comment lines (`// ...`, as in
the `--dump-after` headers) and blank lines are skipped, so a dump parses as it is. Index
expressions go to the index algebra's own parser (`spyrec/indexing/parser.py`); everything
else is read here with a cursor over one line. The parser builds what the text says and
checks only syntax: whether the graph makes sense is `ir/verify.py`'s job.

Errors are `IRSyntaxError`s naming the line, the column and what was expected.
"""

from __future__ import annotations

import json
import re

from spyrec.indexing.parser import ExprSyntaxError, parse_expr
from spyrec.ir.graph import ROLES, Access, Buffer, Graph, Loop, LoopBound, Operation, TripSpan
from spyrec.ir.symbols import SymLength, ValueSource
from spyrec.layout.device_layout import DeviceLayout

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_INT = re.compile(r"-?\d+")
_SIGNED = re.compile(r"[+-]\d+")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class IRSyntaxError(ValueError):
    """The text is not the IR's text form; the message gives line, column and expectation."""


def parse(text: str, constants: dict | None = None) -> Graph:
    """The Graph written in `text`; `constants` supplies the constant buffers' values."""
    graph = Graph(constants=dict(constants or {}))
    # "\n" only: str.splitlines would also split inside a quoted name at U+2028 and kin
    for lineno, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        _Line(line, lineno).statement(graph)
    return graph


class _Line:
    """A cursor over one line of IR text."""

    def __init__(self, text: str, lineno: int) -> None:
        self.text = text
        self.lineno = lineno
        self.pos = 0

    # --- lexical ------------------------------------------------------------------------------

    def error(self, expected: str) -> IRSyntaxError:
        rest = self.text[self.pos:].strip()
        found = repr(rest[:20]) if rest else "the end of the line"
        return IRSyntaxError(f"line {self.lineno}, column {self.pos + 1}: expected {expected}, "
                             f"found {found}: {self.text.strip()}")

    def skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def at(self, literal: str) -> bool:
        self.skip()
        return self.text.startswith(literal, self.pos)

    def accept(self, literal: str) -> bool:
        if self.at(literal):
            self.pos += len(literal)
            return True
        return False

    def expect(self, literal: str) -> None:
        if not self.accept(literal):
            raise self.error(repr(literal))

    def match(self, pattern: re.Pattern, what: str) -> str:
        self.skip()
        m = pattern.match(self.text, self.pos)
        if not m:
            raise self.error(what)
        self.pos = m.end()
        return m.group()

    def keyword(self, word: str) -> bool:
        """`word` as a whole word (so `reduce` does not match a name `reduced`)."""
        self.skip()
        m = _WORD.match(self.text, self.pos)
        if m and m.group() == word:
            self.pos = m.end()
            return True
        return False

    def integer(self) -> int:
        return int(self.match(_INT, "an integer"))

    def json_value(self, opener: str, kind: type, what: str):
        """A JSON value starting with `opener` (`"` a string, `{` an object) of type `kind`."""
        if not self.at(opener):
            raise self.error(what)
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, self.pos)
        except json.JSONDecodeError as e:
            raise self.error(f"{what} ({e.msg})") from None
        if not isinstance(value, kind):
            raise self.error(what)
        self.pos = end
        return value

    def string(self) -> str:
        return self.json_value('"', str, "a quoted string")

    def name(self) -> str:
        return self.string() if self.at('"') else self.match(_NAME, "a name")

    def end(self) -> None:
        self.skip()
        if self.pos != len(self.text):
            raise self.error("the end of the line")

    def bracketed(self, item, opener: str = "[", closer: str = "]") -> list:
        """`[item, item, ...]` (possibly empty; or with other brackets)."""
        self.expect(opener)
        items = []
        if self.accept(closer):
            return items
        while True:
            items.append(item())
            if self.accept(closer):
                return items
            self.expect(",")

    # --- statements ---------------------------------------------------------------------------

    def statement(self, graph: Graph) -> None:
        for word, rule in (("buffer", self.buffer), ("op", self.op), ("inputs", self.inputs),
                           ("outputs", self.outputs), ("mutated", self.mutated),
                           ("symbol", self.symbol)):
            if self.keyword(word):
                rule(graph)
                self.end()
                return
        raise self.error("buffer, op, inputs, outputs, mutated or symbol")

    def buffer(self, graph: Graph) -> None:
        name = self.name()
        self.expect(":")
        self.skip()
        start = self.pos
        role = self.match(_WORD, "a role")
        if role not in ROLES:
            self.pos = start
            raise self.error(f"a role ({', '.join(ROLES)})")
        dtype = self.match(_WORD, "a host dtype")
        size = tuple(self.bracketed(self.integer))
        layout = None
        if self.keyword("device"):
            device_size = tuple(self.bracketed(self.integer))
            self.expect("/")
            stride_map = tuple(self.bracketed(self.integer))
            device_dtype = self.match(_WORD, "a device dtype")
            layout = self.layout(device_size, stride_map, device_dtype)
        per_tile = self.keyword("per_tile")
        address = self.integer() if self.accept("@hbm") else None
        lx = self.integer() if self.accept("@lx") else None
        if name in graph.buffers:
            raise self.error(f"a buffer name not declared before ({name!r} is)")
        graph.buffers[name] = Buffer(name, size, dtype, role, source=self.source(),
                                     layout=layout, hbm_address=address, per_tile=per_tile,
                                     lx_address=lx)

    def layout(self, device_size, stride_map, device_dtype) -> DeviceLayout:
        try:
            return DeviceLayout(device_size, stride_map, device_dtype)
        except (AssertionError, KeyError):
            raise self.error("a device layout: sizes and stride map of equal length >= 2, the "
                             "last size the elements per stick of a known device dtype") from None

    def op(self, graph: Graph) -> None:
        name = self.name()
        self.expect(":")
        output = self.access()
        self.expect("=")
        opcode = self.match(_NAME, "a device op name")
        inputs = self.bracketed(self.access, "(", ")")
        if not self.keyword("over"):
            raise self.error("'over [VAR<SIZE, ...]'")
        ranges = tuple(self.bracketed(self.range))
        replicas = self.integer() if self.keyword("replicas") else 1
        fastest = self.keyword("fastest")
        reduced = tuple(self.bracketed(self.name)) if self.keyword("reduce") else ()
        gathers = tuple(self.bracketed(self.access)) if self.keyword("gather") else ()
        bounds = tuple(self.bracketed(self.bound)) if self.keyword("bounds") else ()
        constants = self.attrs() if self.keyword("attrs") else {}
        cores = dict(self.bracketed(self.split)) if self.keyword("cores") else None
        loops = tuple(self.bracketed(self.loop)) if self.keyword("loops") else ()
        lengths = tuple(self.bracketed(self.length)) if self.keyword("lengths") else ()
        node = self.name() if self.keyword("node") else None
        scope = self.string() if self.keyword("scope") else ""
        fused = self.name() if self.keyword("fused") else ""
        graph.ops.append(Operation(name, opcode, ranges, tuple(inputs), output, reduced,
                                   constants, gathers, self.source(), cores, loops,
                                   index_bounds=bounds, node=node, scope=scope,
                                   replicas=replicas, replicas_fastest=fastest,
                                   lengths=lengths, fused=fused))

    def access(self) -> Access:
        buffer = self.name()
        self.expect("[")
        close = self.text.find("]", self.pos)
        if close < 0:
            raise self.error("an index expression closed by ']'")
        try:
            index = parse_expr(self.text[self.pos:close])
        except ExprSyntaxError as e:
            raise self.error(f"an index expression ({e})") from None
        self.pos = close + 1
        return Access(buffer, index)

    def range(self) -> tuple[str, int]:
        var = self.name()
        self.expect("<")
        return var, self.integer()

    def bound(self) -> tuple[int, int]:
        """`LOW..HIGH` -> (low, size): an index tensor's valid values."""
        low = self.integer()
        self.expect("..")
        return low, self.integer() + 1

    def length(self) -> tuple[str, str]:
        """`VAR=SYMBOL`: a var running a symbolic length's whole extent."""
        var = self.name()
        self.expect("=")
        return var, self.name()

    def split(self) -> tuple[str, int]:
        var = self.name()
        self.expect(":")
        return var, self.integer()

    def loop(self) -> Loop:
        count = self.integer()
        tiled = tuple(self.bracketed(self.name, "(", ")"))
        key = self.name() if self.accept("@") else ""
        span = None
        if self.keyword("span"):
            self.expect("(")
            start = self.trip_line()
            self.expect(",")
            stop = self.trip_line()
            self.expect(")")
            span = TripSpan(start, stop)
        bound = None
        if self.keyword("bound"):
            self.expect("(")
            symbol = self.name()
            self.expect("/")
            per_trip = self.integer()
            past_end = self.keyword("past")
            if past_end:
                self.expect("end")
            bound = LoopBound(symbol, per_trip, past_end)
            self.expect(")")
        return Loop(count, tiled, key, span, bound)

    def trip_line(self) -> tuple[int, int]:
        """`A*i+B` or `A*i-B` -> (a, b): a span end in the enclosing loop's index i."""
        a = self.integer()
        self.expect("*i")
        self.skip()
        return a, int(self.match(_SIGNED, "a signed integer (+B or -B)"))

    def attrs(self) -> dict:
        return self.json_value("{", dict, "a JSON object")

    def source(self) -> str | None:
        return self.string() if self.keyword("source") else None

    def inputs(self, graph: Graph) -> None:
        graph.inputs = self.bracketed(self.name)

    def outputs(self, graph: Graph) -> None:
        graph.outputs = self.bracketed(self.name)

    def symbol(self, graph: Graph) -> None:
        """`symbol NAME MIN..MAX by GRANULARITY [value INPUT[I]+C] [share [M to L, ...]] at
        [BUFFER:DIM, ...]`: a symbolic length and the input and output dims that have it
        (`printer._symbol`)."""
        name = self.name()
        minimum = self.integer()
        self.expect("..")
        maximum = self.integer()
        if not self.keyword("by"):
            raise self.error("by GRANULARITY")
        granularity, value = self.integer(), None
        if self.keyword("value"):
            source = self.name()
            self.expect("[")
            index = self.integer()
            self.expect("]")
            self.skip()
            value = ValueSource(source, index, int(self.match(_SIGNED, "+C or -C")))
        steps = tuple(self.bracketed(self.share_step)) if self.keyword("share") else ()
        graph.symbols[name] = SymLength(name, granularity, minimum, maximum, value_of=value,
                                        min_shares=steps)
        if not self.keyword("at"):
            raise self.error("at [BUFFER:DIM, ...]")
        for buffer, dim in self.bracketed(self.split):
            graph.symbolic_dims.setdefault(buffer, {})[dim] = name

    def share_step(self) -> tuple[int, int]:
        """`M to L` of a symbol's `share [...]`: (L, M)."""
        share = self.integer()
        if not self.keyword("to"):
            raise self.error("to LENGTH")
        return self.integer(), share

    def mutated(self, graph: Graph) -> None:
        def pair() -> tuple[str, str]:
            fqn = self.name()
            self.expect("->")
            return fqn, self.name()

        graph.mutated_buffers = dict(self.bracketed(pair))
