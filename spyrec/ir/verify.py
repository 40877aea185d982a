"""The IR verifier: what every graph must satisfy between passes (xDSL's contract: a pass may
assume a valid graph and must leave one).

`verify(graph, facts)` returns every problem as one line of text naming the buffer or the op
and the access (XLA's `Verify(out)`: tests compare exact messages); `check(graph, after,
facts)` raises an `InternalError` (exit 70) naming the pass after which the graph broke, which
is how `--verify-each` and the tests call it. Checks are tables of small generator functions,
so a new invariant is one function and one table entry, each table in its own module; per
buffer and per op, the first check that finds a problem is the one reported (later checks
assume what earlier ones establish):

- `BUFFER_CHECKS` (`ir/verify_buffers.py`, per buffer): a host dtype the device stores, sizes,
  a layout of the right device dtype that tiles the host tensor, an aligned address;
- `OP_CHECKS` (`ir/verify_ops.py`, per op): a device op of the vocabulary, its ranges and
  replicas, accesses inside their buffers, stick-compatible operands, core splits, the 256 MiB
  span per core, loops (`ir/verify_loops.py`: keys, trip spans, bounds, every trip of a tiled
  access equal to the untiled access) and symbolic lengths;
- `GRAPH_CHECKS` (`ir/verify_graph.py`, whole graph): the signature and constants, nothing
  read before it is written, the facts established by earlier passes (registry contracts)
  hold everywhere, buffers that are live at the same time do not share device memory, LX
  buffers keep their slices, the ops of one loop key agree on its count and trip span, and
  the ops of one fused SuperDSC are consecutive, in one loop nest, passing values in LX.
"""

from __future__ import annotations

from typing import Iterable

from spyrec.errors import InternalError
from spyrec.ir.graph import Graph
from spyrec.ir.verify_buffers import BUFFER_CHECKS
from spyrec.ir.verify_graph import GRAPH_CHECKS
from spyrec.ir.verify_ops import OP_CHECKS


def verify(graph: Graph, facts: Iterable[str] = ()) -> list[str]:
    """Every problem in `graph`, one line each; `facts` (registry FACTS) must hold too."""
    problems: list[str] = []
    for buf in graph.buffers.values():
        problems += [f"buffer {buf.name!r}: {p}" for p in _first(BUFFER_CHECKS, buf)]
    for op in graph.ops:
        where = f"op {op.name!r}" + (f" ({op.source})" if op.source else "")
        problems += [f"{where}: {p}" for p in _first(OP_CHECKS, graph, op)]
    for rule in GRAPH_CHECKS:
        problems += list(rule(graph, tuple(facts)))
    return problems


def _first(rules, *args) -> list[str]:
    """The problems of the first rule that finds any: later rules assume what earlier ones
    check (a stick analysis needs accesses inside their buffer), so one root cause gives one
    message."""
    for rule in rules:
        found = list(rule(*args))
        if found:
            return found
    return []


def check(graph: Graph, after: str, facts: Iterable[str] = ()) -> None:
    """Raise InternalError (exit 70) naming the pass `after` which `graph` is not valid."""
    problems = verify(graph, facts)
    if problems:
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        raise InternalError(f"the IR is not valid after {after}: {problems[0]}{more}; this is a "
                            f"spyrec bug, please report it with the command and input")
