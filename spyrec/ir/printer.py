"""Readable text form of a Graph, for `--dump-after` and for tests to compare against."""

from __future__ import annotations

from spyrec.ir.graph import Graph
from spyrec.ir.ops import format_body


def format_graph(graph: Graph) -> str:
    lines = []
    for buf in graph.buffers.values():
        layout = ""
        if buf.layout is not None:
            layout = (f" device {list(buf.layout.device_size)} / {list(buf.layout.stride_map)} "
                      f"{buf.layout.device_dtype}")
        addr = f" @hbm {buf.hbm_address}" if buf.hbm_address is not None else ""
        lines.append(f"buffer {buf.name}: {buf.role} {buf.host_dtype}{list(buf.host_size)}"
                     f"{layout}{addr}")
    for op in graph.ops:
        space = ", ".join(f"{v}<{n}" for v, n in op.ranges)
        bounds = [f" in {lo}..{n - 1}" for lo, n in op.index_bounds] or [""] * len(
            op.index_inputs)
        gathers = "".join(f" gather {a.buffer}[{a.index}]{b}"
                          for a, b in zip(op.index_inputs, bounds))
        cores = ""
        if op.core_splits:
            cores = " cores(" + ", ".join(f"{v}:{k}" for v, k in op.core_splits.items()
                                          if k > 1) + ")"
        lines.append(f"{format_body(op)} over [{space}]{gathers}{cores}")
    lines.append(f"inputs {graph.inputs} outputs {graph.outputs}")
    return "\n".join(lines) + "\n"
