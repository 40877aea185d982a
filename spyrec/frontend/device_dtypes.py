"""What must live on the device, in a dtype spyrec computes with there: checked after folding.

Constant folding (`fold.py`) removes what depends only on shapes and weights; everything left
runs on the device. A tensor left in a dtype the device cannot store (float64, complex, uint16,
int16, the float8 kinds without a device format: e4m3fnuz, e5m2fnuz, e8m0fnu) is refused here
with exit 3, every one listed by name (input name, FQN or op), dtype and source line, with what
to do. float8_e4m3fn and float8_e5m2 live on the device (SEN143_FP8, SEN152_FP8) as weights and
values the program computes, but not at the host edge: a program input or output of either is
refused too, since no input file format holds them (numpy has no 8-bit float). So no such
tensor reaches the lowering or the weights writer, at any size, through either front end.
"""

from __future__ import annotations

import dataclasses

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.host_dtypes import ITEMSIZE
from spyrec.frontend.program import InputSpec, Node, Program, TensorMeta
from spyrec.frontend.sources import source_of
from spyrec.layout.dtypes import computed_on_device

FOLDED_PREFIX = "_folded."  # the FQN prefix of a constant folding made (fold.py)
STATE_KINDS = ("parameter", "buffer", "constant")


def host_only(dtype: str) -> bool:
    """A host dtype no device tensor of spyrec's may have (float64, complex, uint8, int16,
    uint16, float8_e4m3fnuz, ...)."""
    return not computed_on_device(dtype)


def _edge_only(dtype: str, node: Node, spec: InputSpec | None, outputs: set[str]) -> bool:
    """A device dtype that cannot cross the host edge: an 8-bit float user input or program
    output (the input and output files hold numpy arrays; numpy has no 8-bit float)."""
    edge = (spec is not None and spec.kind == "user_input") or node.name in outputs
    return edge and dtype.startswith("float8")


def drop_unused_host_only_state(program: Program) -> Program:
    """A parameter, buffer or constant nobody reads never reaches the device, whatever its
    dtype: one of a host-only dtype is dropped rather than refused."""
    mutated = {s.target for s in program.outputs if s.kind == "buffer_mutation"}
    unused = {s.name for s in program.inputs
              if s.kind in STATE_KINDS and not program.users(s.name)
              and s.target not in mutated and host_only(_state_dtype(program, s))}
    if not unused:
        return program
    return dataclasses.replace(
        program, nodes=[n for n in program.nodes if n.name not in unused],
        inputs=[s for s in program.inputs if s.name not in unused])


def _state_dtype(program: Program, spec: InputSpec) -> str:
    return program.state_dtypes.get(program.aliases.get(spec.target, spec.target), "")


def check_device_dtypes(program: Program, max_fold_bytes: int) -> None:
    """Refuse (exit 3) every tensor that would have to live on the device in a dtype spyrec
    cannot keep there: a user input, a weight or folded constant, a runtime result. Each is
    listed with its name, dtype, source line and what to do, so a float64 `zeros_like` that
    folding could not remove (a program output, or it depends on an input) or a float8 weight
    is a clear refusal. `max_fold_bytes` is the folding limit the program was folded with: a
    weight whose conversion it left unfolded says so."""
    specs = {s.name: s for s in program.inputs}
    outputs = {s.name for s in program.outputs if s.kind == "user_output"}
    lines = []
    for node in program.nodes:
        spec = specs.get(node.name)
        val = next((v for v in _tensor_metas(node) if host_only(v.dtype)
                    or _edge_only(v.dtype, node, spec, outputs)), None)
        if val is None:
            continue
        lines.append(f"  {_what(node, spec)} is {val.dtype} {list(val.shape)} "
                     f"({_where(program, node, spec)}): {_hint(val.dtype, spec)}"
                     f"{_unfolded_note(program, node, spec, max_fold_bytes)}")
    if lines:
        raise UnsupportedProgram("the program keeps tensors in dtypes spyrec cannot keep on the "
                                 "device (it folds only what depends on shapes and weights; "
                                 "everything else lives on the device):\n" + "\n".join(lines))


def _tensor_metas(node: Node) -> list[TensorMeta]:
    if node.op not in ("placeholder", "call_function"):
        return []
    val = node.meta.get("val")
    return [v for v in (val if isinstance(val, (list, tuple)) else [val])
            if isinstance(v, TensorMeta)]


def _what(node: Node, spec: InputSpec | None) -> str:
    """How a user knows the value: its input name, its FQN, or its op (a folded constant
    keeps the name of the node that made it)."""
    if spec is None:
        return f"the result of {node.target} (node {node.name})"
    if spec.kind == "user_input":
        return f"input {node.name}"
    if spec.target and spec.target.startswith(FOLDED_PREFIX):
        op = node.meta.get("folded_from", "a constant expression")
        return f"the result of {op} (node {node.name}; folded at compile time, but still " \
               f"a program output or read at run time)"
    return f"{spec.kind} {spec.target}"


def _where(program: Program, node: Node, spec: InputSpec | None) -> str:
    """The node's source line; for an input or a weight (no line of its own) the line of the
    first node that reads it."""
    own = source_of(node)
    if own:
        return own
    if node.op != "placeholder":
        return "unknown source line"
    head = "a program input" if spec is not None and spec.kind == "user_input" else ""
    reader = next((source_of(u) for u in program.users(node.name) if source_of(u)), None)
    if reader is None:
        return head or "unknown source line"
    return f"{head + ', ' if head else ''}read at {reader}"


def _hint(dtype: str, spec: InputSpec | None) -> str:
    if dtype.startswith("float8"):
        if spec is not None and spec.kind == "user_input" or computed_on_device(dtype):
            return "8-bit float inputs are not supported yet (no input file holds them): " \
                   "pass float16 and convert in the model" if spec is not None else \
                   "8-bit float outputs are not supported (no output file holds them): " \
                   "return it converted to float16 or bfloat16"
        return f"{dtype} has no device format (the device stores float8_e4m3fn as " \
               f"SEN143_FP8 and float8_e5m2 as SEN152_FP8, each with a float16/32 scale " \
               f"per tensor, per output channel or per block): convert it to one of those, " \
               f"or to bfloat16 or float16, before exporting"
    if dtype == "float64":
        return "cast it to float32 in the model (`.float()`, or dtype=torch.float32)"
    return "cast it to a dtype the device stores (float16, bfloat16, float32, int32, int64, " \
           "int8 or bool) in the model"


def _unfolded_note(program: Program, node: Node, spec: InputSpec | None,
                   max_fold_bytes: int) -> str:
    """For a weight whose only obstacle was the folding limit: which conversion was too big
    (folding converts a uint16 or float64 weight exactly, up to the limit)."""
    if spec is None or spec.kind not in STATE_KINDS or node.meta["val"].dtype.startswith(
            "float8"):
        return ""
    big = [u for u in program.users(node.name)
           if isinstance(u.meta.get("val"), TensorMeta) and _nbytes(u.meta["val"]) >
           max_fold_bytes]
    if not big:
        return ""
    return f"; spyrec converts such a weight at compile time only where the result is at most " \
           f"{_size(max_fold_bytes)}, and {big[0].target} (node {big[0].name}) gives " \
           f"{_size(_nbytes(big[0].meta['val']))}"


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes} bytes"


def _nbytes(meta: TensorMeta) -> int:
    n = 1
    for d in meta.shape:
        n *= int(d)
    return n * ITEMSIZE.get(meta.dtype, 8)
