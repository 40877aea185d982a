"""Pass tests as text in, text out (xDSL's filecheck habit): parse an IR text, verify it, run one
pass, verify the result with the facts the pass establishes, and return the printed graph.
No torch: these tests build the IR from text, not from an exported program."""

from __future__ import annotations

from textwrap import dedent

from spyrec.ir.parser import parse
from spyrec.ir.printer import format_graph
from spyrec.ir.verify import verify
from spyrec.passes.registry import CompileContext, Pass


def run_pass(p: Pass, text: str, ctx: CompileContext | None = None,
             facts: tuple[str, ...] = (), constants: dict | None = None) -> str:
    """`text` after `p`; `facts` are those that hold before it (e.g. "layouts"); `constants`
    the values of constant buffers a pass reads (the text form does not print values)."""
    graph = parse(ir(text), constants)
    assert verify(graph, facts) == [], verify(graph, facts)
    p.run(graph, ctx if ctx is not None else CompileContext())
    after = (set(facts) - set(p.contract.invalidates)) | set(p.contract.provides)
    assert verify(graph, after) == [], verify(graph, after)
    return format_graph(graph)


def ir(text: str) -> str:
    """An indented triple-quoted IR text as the printer writes it."""
    return dedent(text).lstrip("\n")
