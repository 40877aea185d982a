"""What must live on the device, in a dtype spyrec computes with there: checked after folding.

Constant folding (`fold.py`) removes what depends only on shapes and weights; everything left
runs on the device. A tensor left in a dtype the device cannot store (float64, complex, uint16,
int16, ...) or that spyrec does not compute with yet (float8 of every kind: 8-bit weights are
to stay 8-bit on the device, DESIGN §3, which is not built) is refused here with exit 3, every
one listed by name (input name, FQN or op), dtype and source line, with what to do. So no such
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
    uint16, float8, ...)."""
    return not computed_on_device(dtype)


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
    lines = []
    for node in program.nodes:
        val = next((v for v in _tensor_metas(node) if host_only(v.dtype)), None)
        if val is None:
            continue
        spec = specs.get(node.name)
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
        what = "tensors" if spec is None else "inputs" if spec.kind == "user_input" else \
            "weights"
        return f"8-bit float {what} are not supported yet (8-bit weights are to stay 8-bit " \
               f"on the device, which is not built); until then convert it to bfloat16 or " \
               f"float16 before exporting"
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
