"""Readable text form of a Graph, for `--dump-after` and for tests to compare against."""

from __future__ import annotations

from spyrec.ir.graph import Graph


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
        reads = ", ".join(f"{a.buffer}[{a.index}]" for _, a in op.accesses() if _ != "output")
        extra = f" reduce({', '.join(op.reduced)})" if op.reduced else ""
        consts = f" {op.constants}" if op.constants else ""
        cores = ""
        if op.core_splits:
            cores = " cores(" + ", ".join(f"{v}:{k}" for v, k in op.core_splits.items()
                                          if k > 1) + ")"
        lines.append(f"{op.output.buffer}[{op.output.index}] = {op.op}({reads}) over "
                     f"[{space}]{extra}{consts}{cores}")
    lines.append(f"inputs {graph.inputs} outputs {graph.outputs}")
    return "\n".join(lines) + "\n"
