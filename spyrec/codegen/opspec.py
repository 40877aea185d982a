"""OpSpec / TensorArg data for every op, and the self-contained per-op (`sdsc_<n>.json`) form.

Pure data building from the finished Graph (layouts, core splits and addresses decided by the
passes); `writer.py` serializes it. Field meanings: DESIGN §4 and docs/formats.md.
"""

from __future__ import annotations

import functools

import numpy as np

from spyrec.codegen.symbols import level_advances_bytes
from spyrec.indexing import Indirect, Lin, evaluate
from spyrec.ir import Access, Graph, Loop, Operation
from spyrec.ir.graph import loop_identity
from spyrec.ir.lx import split_slices
from spyrec.indexing.sticks import access_coordinates


def tensor_arg(graph: Graph, op: Operation, role: str, access: Access, arg_index: int) -> dict:
    buf = graph.buffers[access.buffer]
    coords = access_coordinates(buf.host_size, buf.host_strides, buf.layout, op.var_ranges,
                                access.index)
    return {
        "name": buf.name,
        "is_input": role != "output",
        "arg_index": arg_index,
        "device_dtype": buf.layout.device_dtype,
        "device_size": list(buf.layout.device_size),
        "stride_map": list(buf.layout.stride_map),
        "device_coordinates": [str(c) for c in coords],
        "allocation": allocation(buf),
        "operand": None,
        "per_tile_fixed": buf.per_tile,
        "_coords": coords,  # private keys (`_…`) are stripped before writing
        "_advance_bytes": level_advances_bytes(buf, op, access),
    }


def allocation(buf) -> dict:
    """DESIGN §4 `allocation`: the per-core LX offset of a buffer in LX, else its HBM address."""
    return {"lx": buf.lx_address} if buf.lx_address is not None else {"hbm": buf.hbm_address}


def op_spec(graph: Graph, op: Operation) -> dict:
    """The OpSpec of one op (DESIGN §4), with the per-core split. Its iteration space is the
    op's core ranges: a replicated op's copies are one more dim (docs/formats.md, replicas),
    which no tensor addresses."""
    args = [tensor_arg(graph, op, role, a, i) for i, (role, a) in enumerate(op.accesses())]
    splits = op.core_splits or {v: 1 for v, _ in op.core_ranges}
    spec = {
        "op": op.op,
        "name": op.name,
        "node": op.node,
        "scope": op.scope,
        "source": op.source,
        "is_reduction": op.is_reduction,
        "iteration_space": {v: [n, splits.get(v, 1)] for v, n in op.core_ranges},
        "reduced": list(op.reduced),
        "op_info": {"constants": dict(op.constants)},
        "tiled_symbols": [],
        **({"lengths": dict(op.lengths)} if op.lengths else {}),
        "args": args,
    }
    spec["cores"] = _cores(graph, op, args, splits)
    return spec


def strip_private(spec: dict) -> dict:
    """The spec as opspecs.json shows it (without the parsed coordinates codegen keeps)."""
    if "args" not in spec:
        return spec
    return {**spec, "args": [{k: v for k, v in a.items() if not k.startswith("_")}
                             for a in spec["args"]]}


def _cores(graph: Graph, op: Operation, args: list[dict], splits: dict[str, int]) -> list[dict]:
    """Each core's slice of the iteration space and each arg's byte address at its start, in
    SuperDSC core order (ir/lx.py `core_slices`: the first split var fastest), so that core c
    here is core c of the op's SuperDSC file.

    Start addresses are evaluated for all cores at once (numpy arrays of slice starts)."""
    rows, env = _core_table(op.core_ranges, tuple(sorted((op.core_splits or {}).items())))
    starts = [_start_addresses(graph, a, env, len(rows)) for a in args]
    return [{"core": core, "ranges": ranges, "arg_start_bytes": [s[core] for s in starts]}
            for core, ranges in enumerate(rows)]


@functools.lru_cache(maxsize=1024)
def _core_table(core_ranges: tuple[tuple[str, int], ...], splits: tuple[tuple[str, int], ...]
                ) -> tuple[tuple[dict, ...], dict[str, np.ndarray]]:
    """Each core's ranges as the spec prints them ({var: [lo, hi]}) and each var's first
    value on every core (the environment start addresses are evaluated in), for an op's
    core ranges and split (ir/lx.py `core_slices`): the ops of a stack's layers share them.
    Shared between specs, so read only (the writer only serializes them)."""
    slices = split_slices(core_ranges, dict(splits))
    env = {v: np.array([ranges[v][0] for ranges in slices], dtype=np.int64)
           for v, _ in core_ranges}
    for values in env.values():
        values.flags.writeable = False
    return tuple({v: [lo, hi] for v, (lo, hi) in ranges.items()} for ranges in slices), env


def _start_addresses(graph: Graph, arg: dict, env: dict, n: int) -> list:
    coords: tuple[Lin, ...] = arg["_coords"]
    if any(isinstance(leaf, Indirect) for c in coords for leaf in c.free_atoms()):
        return [None] * n  # data-dependent: known only when the index tensor is read
    buf = graph.buffers[arg["name"]]
    if buf.lx_address is not None:
        return [buf.lx_address] * n  # every core's LX holds its own slice at one offset
    offset = np.zeros(n, dtype=np.int64)
    for c, stride in zip(coords, buf.layout.device_strides_elems):
        offset = offset + np.asarray(evaluate(c, env), dtype=np.int64) * stride
    return [int(x) for x in buf.hbm_address + offset * buf.layout.dtype.itemsize]


def spec_tree(ops: list[Operation], specs: list[dict]) -> list[dict]:
    """Nest op specs in LoopSpecs by their enclosing loops (DESIGN §4).

    Consecutive ops sharing an outer loop share one `{"loop": {count, tiled_symbols, body}}`
    (plus `start` and `stop` for a loop with a trip span: `loop_spec`);
    a LoopSpec's `tiled_symbols` are the vars divided at that level, and each OpSpec's
    `tiled_symbols` lists all levels, outermost first.
    """
    return _nest(list(zip(ops, [strip_private(s) for s in specs])), 0)


def _nest(items: list[tuple[Operation, dict]], depth: int) -> list[dict]:
    out: list[dict] = []
    i = 0
    while i < len(items):
        op, spec = items[i]
        if len(op.loops) <= depth:
            tiled = [v for loop in op.loops for v in loop.tiled]
            out.append({**spec, "tiled_symbols": tiled})
            i += 1
            continue
        loop = op.loops[depth]
        ident = loop_identity(op.loops[:depth + 1])
        j = i
        while j < len(items) and len(items[j][0].loops) > depth and \
                loop_identity(items[j][0].loops[:depth + 1]) == ident:
            j += 1
        out.append({"loop": loop_spec(loop, _nest(items[i:j], depth + 1))})
        i = j
    return out


def loop_spec(loop: Loop, body: list[dict]) -> dict:
    """A LoopSpec's content: count, tiled symbols, and for a loop with a trip span its
    `start` and `stop` [a, b] (a*i + b of the enclosing loop's index, clamped to 0..count),
    then the body. Rectangular loops write no range (their files are unchanged). A loop bound
    by a symbolic length writes `count_symbol` (it runs that length over per_trip trips,
    rounded up for a length read from a value or with `past_end`, a flash query loop whose
    last trip may pass the length; `count` is the count at the maximum)."""
    spec: dict = {"count": loop.count, "tiled_symbols": list(loop.tiled)}
    if loop.span is not None:
        spec["start"], spec["stop"] = list(loop.span.start), list(loop.span.stop)
    if loop.bound is not None:
        spec["count_symbol"] = {"symbol": loop.bound.symbol, "per_trip": loop.bound.per_trip}
        if loop.bound.past_end:
            spec["count_symbol"]["past_end"] = True
    spec["body"] = body
    return spec
