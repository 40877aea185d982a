"""ir/parser.py: hand-written texts with every clause, the equality the round trip relies on,
exact syntax errors, and hypothesis-built graphs that must survive print -> parse -> print."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spyrec.indexing import const, floordiv, indirect, mod, var
from spyrec.ir import Access, Buffer, Graph, Loop, Operation
from spyrec.ir.parser import IRSyntaxError, parse
from spyrec.ir.printer import format_graph
from spyrec.layout import DeviceLayout
from tests.passes.textir import ir

FULL = ir("""
    buffer idx: input int64[8] device [1, 32] / [32, 1] int32 @hbm 0
    buffer "emb weight": constant float32[100, 32] device [1, 100, 32] / [32, 32, 1] fp32 @hbm 128 source "model.py:7 in \\"forward\\" — λ"
    buffer out: output float32[8, 32]
    op gather.0: out[32*c0 + c1] = identity("emb weight"[c1 + 32*IndirectAccess('idx')]) over [c0<8, c1<32] gather [idx[c0]] attrs {"value": NaN, "lo": -Infinity, "n": 3, "flag": true, "mode": "rhs"} cores [c0:8, c1:1] loops [2(c0), 1()] source "model.py:9"
    inputs [idx]
    outputs [out, out]
    mutated [layers.0.cache -> out]
""")


def test_every_clause_parses_to_the_graph_it_says():
    g = parse(FULL)
    assert list(g.buffers) == ["idx", "emb weight", "out"]
    assert g.buffers["idx"] == Buffer("idx", (8,), "int64", "input",
                                      layout=DeviceLayout((1, 32), (32, 1), "int32"),
                                      hbm_address=0)
    assert g.buffers["emb weight"].source == 'model.py:7 in "forward" — λ'
    assert g.buffers["out"].layout is None and g.buffers["out"].hbm_address is None
    (op,) = g.ops
    assert op.name == "gather.0" and op.op == "identity"
    assert op.inputs == (Access("emb weight", var("c1") + indirect("idx").scale(32)),)
    assert op.index_inputs == (Access("idx", var("c0")),)
    assert op.output == Access("out", var("c0").scale(32) + var("c1"))
    assert op.ranges == (("c0", 8), ("c1", 32))
    assert math.isnan(op.constants["value"]) and op.constants["lo"] == -math.inf
    assert list(op.constants) == ["value", "lo", "n", "flag", "mode"]
    assert op.core_splits == {"c0": 8, "c1": 1}
    assert op.loops == (Loop(2, ("c0",)), Loop(1, ()))
    assert (g.inputs, g.outputs) == (["idx"], ["out", "out"])
    assert g.mutated_buffers == {"layers.0.cache": "out"}


def test_printing_the_parsed_text_gives_it_back():
    assert format_graph(parse(FULL)) == FULL


def test_a_quoted_plain_name_is_the_same_name():
    assert parse(FULL.replace("[layers.0.cache ->", '["layers.0.cache" ->')) == parse(FULL)


def test_dump_headers_comments_and_blank_lines_are_skipped():
    assert parse("// ----- IR after lower -----\n\n" + FULL + "\n// end\n") == parse(FULL)


def _op(**changes) -> Operation:
    fields = dict(name="y", op="fill", ranges=(("c0", 4),), inputs=(),
                  output=Access("y", var("c0")), constants={"value": 0.0})
    return Operation(**{**fields, **changes})


def test_op_equality_compares_constants_as_the_json_codegen_writes():
    assert _op(constants={"value": float("nan")}) == _op(constants={"value": float("nan")})
    assert _op(constants={"value": 1}) != _op(constants={"value": 1.0})
    assert _op(constants={"value": True}) != _op(constants={"value": 1})
    assert _op(core_splits={"c0": 2}) != _op()
    assert _op(source="a.py:1") != _op()


def test_graph_equality_sees_buffer_order_and_constant_values():
    a, b = Buffer("a", (4,), "float32", "constant"), Buffer("b", (4,), "float32", "constant")
    g1 = Graph(buffers={"a": a, "b": b}, constants={"a": np.zeros(4, np.float32)})
    g2 = Graph(buffers={"b": b, "a": a}, constants={"a": np.zeros(4, np.float32)})
    assert g1 != g2
    g3 = Graph(buffers={"a": a, "b": b}, constants={"a": np.zeros(4, np.float64)})
    assert g1 != g3
    assert g1 == Graph(buffers={"a": a, "b": b}, constants={"a": np.zeros(4, np.float32)})


@pytest.mark.parametrize("text, message", [
    ("bufer x: input float16[4]",
     "line 1, column 1: expected buffer, op, inputs, outputs, mutated or symbol, found "
     "'bufer x: input float': bufer x: input float16[4]"),
    ("buffer x: inptu float16[4]",
     "line 1, column 11: expected a role (input, constant, intermediate, output), found "
     "'inptu float16[4]': buffer x: inptu float16[4]"),
    ("buffer x: input float16[4] device [1, 60] / [64, 1] fp16",
     "line 1, column 57: expected a device layout: sizes and stride map of equal length >= 2, "
     "the last size the elements per stick of a known device dtype, found the end of the line: "
     "buffer x: input float16[4] device [1, 60] / [64, 1] fp16"),
    ("op y: y[c0] = neg(x[c0])",
     "line 1, column 25: expected 'over [VAR<SIZE, ...]', found the end of the line: "
     "op y: y[c0] = neg(x[c0])"),
    ("op y: y[c0 +] = neg(x[c0]) over [c0<4]",
     "line 1, column 9: expected an index expression (expected more at end after 'c0 +' in "
     "index expression 'c0 +'), found 'c0 +] = neg(x[c0]) o': op y: y[c0 +] = neg(x[c0]) over "
     "[c0<4]"),
    ("op y: y[c0] = neg(x[c0]) over [c0<4] attrs {\"a\": }",
     "line 1, column 44: expected a JSON object (Expecting value), found '{\"a\": }': "
     "op y: y[c0] = neg(x[c0]) over [c0<4] attrs {\"a\": }"),
    ("inputs [x] extra", "line 1, column 12: expected the end of the line, found 'extra': "
                         "inputs [x] extra"),
    ("buffer x: input float16[4]\nbuffer x: input float16[4]",
     "line 2, column 27: expected a buffer name not declared before ('x' is), found the end of "
     "the line: buffer x: input float16[4]"),
])
def test_syntax_errors_name_line_column_and_expectation(text, message):
    with pytest.raises(IRSyntaxError) as e:
        parse(text)
    assert str(e.value) == message


# --- random graphs --------------------------------------------------------------------------

NAMES = st.sampled_from(["x", "w_1", "layers.0.k", "fc1·bias", "a b", 'q"t', "[odd]", "é"])
DTYPES = st.sampled_from(["float16", "float32", "bfloat16", "int64", "bool"])
VARS = st.sampled_from(["c0", "c1", "r0"])


@st.composite
def exprs(draw, depth=2):
    e = const(draw(st.integers(-5, 300)))
    for _ in range(draw(st.integers(0, 3))):
        term = var(draw(VARS)).scale(draw(st.integers(-3, 128)))
        if depth and draw(st.booleans()):
            inner = draw(exprs(depth=depth - 1))
            k = draw(st.integers(2, 64))
            term = floordiv(inner, k) if draw(st.booleans()) else mod(inner, k)
        e = e + term
    if draw(st.booleans()):
        e = e + indirect("idx").scale(draw(st.integers(1, 9)))
    return e


@st.composite
def graphs(draw):
    g = Graph()
    for name in draw(st.lists(NAMES, min_size=1, max_size=4, unique=True)):
        layout = DeviceLayout((2, 3, 64), (64, 5, 1), "fp16") if draw(st.booleans()) else None
        g.buffers[name] = Buffer(name, tuple(draw(st.lists(st.integers(0, 9), max_size=3))),
                                 draw(DTYPES), draw(st.sampled_from(["input", "constant",
                                                                     "intermediate", "output"])),
                                 source=draw(st.none() | st.text(max_size=12)), layout=layout,
                                 hbm_address=draw(st.none() | st.integers(0, 2**40)))
    names = list(g.buffers)
    scalars = st.none() | st.booleans() | st.integers(-9, 9) | st.floats(allow_nan=True) | \
        st.text(max_size=5)
    for _ in range(draw(st.integers(0, 3))):
        ranges = (("c0", draw(st.integers(0, 99))), ("c1", 3), ("r0", 7))
        accesses = st.builds(Access, st.sampled_from(names), exprs())
        g.ops.append(Operation(
            draw(NAMES), draw(st.sampled_from(["add", "fill", "batchmatmul", "ReStickifyOpHBM"])),
            ranges, tuple(draw(st.lists(accesses, max_size=3))), draw(accesses),
            draw(st.sampled_from([(), ("r0",)])),
            draw(st.dictionaries(st.text(max_size=4), scalars, max_size=3)),
            tuple(draw(st.lists(st.builds(Access, st.just("idx"), exprs(depth=0)), max_size=2))),
            draw(st.none() | st.text(max_size=12)),
            draw(st.none() | st.fixed_dictionaries({"c0": st.integers(1, 8), "r0": st.just(1)})),
            tuple(draw(st.lists(st.builds(Loop, st.integers(1, 9),
                                          st.lists(VARS, max_size=2).map(tuple)), max_size=2)))))
    g.inputs = draw(st.lists(st.sampled_from(names), max_size=2))
    g.outputs = draw(st.lists(st.sampled_from(names), max_size=2))
    g.mutated_buffers = draw(st.dictionaries(NAMES, st.sampled_from(names), max_size=2))
    return g


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_random_graphs_round_trip(g):
    text = format_graph(g)
    back = parse(text)
    assert back == g
    assert format_graph(back) == text


def test_symbols_and_symbolic_trip_counts_round_trip():
    """A symbolic length, the input and output dims that have it, and a loop whose trips are
    the length over its tile print and parse back to the same graph; the verifier checks
    the bound against the symbol."""
    from spyrec.ir import Loop, LoopBound, SymLength

    text = ("buffer x: input float32[1, 256, 64]\n"
            "buffer y: output float32[1, 256, 64]\n"
            "op relu: y[64*c1 + c2] = relu(x[64*c1 + c2]) "
            "over [c1<64, c2<64] loops [4(c1)@g0.0 bound(s81/64)]\n"
            "inputs [x]\noutputs [y]\nsymbol s81 128..256 by 64 at [x:1, y:1]\n")
    graph = parse(text)
    assert graph.symbols == {"s81": SymLength("s81", 64, 128, 256)}
    assert graph.symbolic_dims == {"x": {1: "s81"}, "y": {1: "s81"}}
    assert graph.ops[0].loops == (Loop(4, ("c1",), "g0.0", None, LoopBound("s81", 64)),)
    assert parse(format_graph(graph)) == graph
    assert format_graph(graph).splitlines()[-1] == "symbol s81 128..256 by 64 at [x:1, y:1]"
    from spyrec.ir.verify_loops import check_loops

    assert list(check_loops(graph, graph.ops[0])) == []
    for bound, problem in [("s9/64", "s9 is not a symbol of the graph"),
                           ("s81/32", "counts 8 trips at the maximum 256, but the loop counts 4"),
                           ("s81/128", "a tile of 128 does not divide every length 128..256 by 64")]:
        bad = parse(text.replace("s81/64", bound))
        assert any(problem in line for line in check_loops(bad, bad.ops[0])), bound


def test_a_loop_whose_last_trip_passes_the_length_round_trips_and_is_checked():
    """`bound(S/T past end)`: ceil(S/T) trips, a tile of whole granules up to the shortest
    length dividing the maximum (a flash query loop); any other tile is a verifier problem."""
    from spyrec.ir import LoopBound
    from spyrec.ir.verify_loops import check_loops

    text = ("buffer x: input float32[1, 512, 64]\n"
            "buffer y: output float32[1, 512, 64]\n"
            "op relu: y[64*c1 + c2] = relu(x[64*c1 + c2]) "
            "over [c1<128, c2<64] loops [4(c1)@g0.0 bound(s81/128 past end)]\n"
            "inputs [x]\noutputs [y]\nsymbol s81 128..512 by 64 at [x:1, y:1]\n")
    graph = parse(text)
    (loop,) = graph.ops[0].loops
    assert loop.bound == LoopBound("s81", 128, past_end=True)
    assert [loop.bound.count(n) for n in (128, 192, 256, 448)] == [1, 2, 2, 4]
    assert format_graph(graph) == text and parse(format_graph(graph)) == graph
    assert list(check_loops(graph, graph.ops[0])) == []
    whole = "needs a tile of whole granules, at most the shortest length, dividing the maximum"
    for tile, count in [(96, 6), (256, 2)]:      # not whole granules; over the shortest
        bad = parse(text.replace("4(c1)@g0.0 bound(s81/128", f"{count}(c1)@g0.0 bound(s81/{tile}")
                    .replace("c1<128", f"c1<{tile}"))
        assert any(whole in line for line in check_loops(bad, bad.ops[0])), tile
