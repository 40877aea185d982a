"""A replicated op's copies are a declared field (`Operation.replicas`), printed and parsed as
`replicas N [fastest]`, checked by the verifier, and the extra dim of its core ranges that
core splits name `rep` (what codegen writes as the iteration space's copies dim)."""

from spyrec.ir.parser import parse
from spyrec.ir.printer import format_graph
from spyrec.ir.verify import verify
from tests.passes.textir import ir

FULL = "float16[64, 256] device [4, 64, 64] / [64, 256, 1] fp16"
TEXT = f"""
    buffer x: input {FULL}
    buffer y: intermediate {FULL}
    buffer z: output {FULL}
    op y: y[256*c0 + c1] = neg(x[256*c0 + c1]) over [c0<64, c1<256] REPLICAS cores CORES
    op z: z[256*c0 + c1] = neg(y[256*c0 + c1]) over [c0<64, c1<256] cores [c0:8, c1:1]
    inputs [x]
    outputs [z]
    """


def graph(replicas: str = "replicas 4 fastest", cores: str = "[rep:4, c0:8, c1:1]"):
    return parse(ir(TEXT.replace("REPLICAS", replicas).replace("CORES", cores)))


def test_replicas_print_and_parse_back_and_give_the_core_ranges():
    for clause, core in (("replicas 4 fastest", "[rep:4, c0:8, c1:1]"),
                         ("replicas 4", "[c0:8, c1:1, rep:4]")):
        g = graph(clause, core)
        op = g.ops[0]
        assert op.ranges == (("c0", 64), ("c1", 256)) and op.replicas == 4
        assert op.core_ranges == ((("rep", 4),) + op.ranges if "fastest" in clause
                                  else op.ranges + (("rep", 4),))
        assert format_graph(g) == ir(TEXT.replace("REPLICAS", clause).replace("CORES", core))
        assert verify(g, ("core_splits",)) == []
    assert graph("", "[c0:8, c1:1]").ops[0].core_ranges == (("c0", 64), ("c1", 256))


def test_the_verifier_checks_the_copies():
    assert verify(graph(cores="[rep:2, c0:8, c1:1]"), ("core_splits",)) == [
        "op 'y': cores [rep:2, c0:8, c1:1]: its 4 copies (rep) are not split 4 ways"]
    assert verify(graph("replicas 0", "[c0:8, c1:1]"), ()) == [
        "op 'y': replicas 0 is not a positive count of copies"]
    reserved = parse(ir(f"""
        buffer x: input {FULL}
        buffer z: output {FULL}
        op z: z[256*c0 + rep] = neg(x[256*c0 + rep]) over [c0<64, rep<256]
        inputs [x]
        outputs [z]
        """))
    assert verify(reserved, ()) == [
        "op 'z': iteration variable rep is reserved for a replicated op's copies (declared as "
        "replicas N)"]
