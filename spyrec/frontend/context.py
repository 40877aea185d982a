"""The lowering context: what a lowering function uses to build the graph.

A lowering receives the context, the FX node and its resolved arguments, and returns the node's
value. The context creates buffers (named by `names.Names`), emits device ops, and offers the
common shape of a pointwise op. It holds no table of lowerings (`registry.py`) and no walk over
the program (`driver.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.names import Names
from spyrec.frontend.program import Program, Ref
from spyrec.frontend.sources import module_path, source_for_message, source_of
from spyrec.frontend.views import TensorValue, broadcast_index, broadcast_shapes
from spyrec.indexing import Lin, var
from spyrec.ir import DEVICE_OPS, Access, Buffer, Graph, Operation


def host_dtype(dtype) -> str:
    """torch's dtype name (`float16`); `Program` already spells dtypes this way."""
    return str(dtype).removeprefix("torch.")


@dataclass
class Scalar:
    """A Python number standing where a tensor could be (aten.scalar_tensor, `x + 2`)."""

    value: float | int | bool


@dataclass
class Unlowered:
    """A value spyrec cannot produce (argmax indices); using it is an UnsupportedProgram."""

    reason: str


# What a reduction over an empty dim gives in eager (max/min raise there). mean gives NaN,
# computed on the device as 0/0 so that no NaN has to travel through the (strict) JSON files.
EMPTY_REDUCTION_VALUE = {"sum": 0.0, "batchmatmul": 0.0}


class LoweringContext:
    """What lowering functions use: the graph being built and helpers to emit ops."""

    def __init__(self, graph: Graph, program: Program | None = None) -> None:
        self.graph = graph
        self.program = program
        self.node = None
        reserved = frozenset(n.name for n in program.nodes) if program else frozenset()
        self.names = Names(reserved | frozenset(graph.buffers))
        # Eval batch norms a convolution already applied (folded into its weights), which
        # then lower to nothing (`aten_batch_norm.py`).
        self.folded_batch_norms: set[str] = set()

    # --- buffers and ops ------------------------------------------------------------------
    def new_value(self, shape: Sequence[int], dtype: str, base: str | None = None,
                  role: str | None = None) -> TensorValue:
        """A fresh intermediate buffer of the current node (see `names.py` for its name; a
        `role` such as "zeros" names a helper, `base` is the older spelling of one)."""
        buf = self.graph.add_buffer(Buffer(self._name(role, base), tuple(int(n) for n in shape),
                                           dtype, "intermediate", source=source_of(self.node)))
        return contiguous_value(buf)

    def new_constant(self, values: np.ndarray, dtype: str, role: str) -> TensorValue:
        """A compile-time constant buffer of the current node (values go to weights.bin)."""
        buf = self.graph.add_buffer(Buffer(self._name(role, None), tuple(values.shape), dtype,
                                           "constant", source=source_of(self.node)))
        self.graph.constants[buf.name] = values
        return contiguous_value(buf)

    def _name(self, role: str | None, base: str | None) -> str:
        if base is not None and role is None:
            role = base.removeprefix(f"{self.node.name}_")
        return self.names.helper(self.node.name, role)

    def emit(self, op: str, out: TensorValue, ranges: Sequence[tuple[str, int]],
             inputs: Sequence[Lin | tuple], out_index: Lin, reduced: Sequence[str] = (),
             constants: dict | None = None, index_inputs: Sequence[Access] = (),
             index_bounds: Sequence[tuple[int, int]] = ()) -> None:
        """Append one device op writing `out` (named when lowering ends, `names.py`)."""
        assert op in DEVICE_OPS, f"lowering emitted unknown device op {op}"
        if any(int(n) == 0 for _, n in ranges):
            self._emit_empty(op, out, ranges, out_index, reduced)
            return
        ranges, inputs, out_index, reduced, index_inputs, op = _drop_unit_vars(
            op, list(ranges), list(inputs), out_index, list(reduced), list(index_inputs))
        self.graph.ops.append(Operation(
            name=out.buffer, op=op, ranges=tuple((v, int(n)) for v, n in ranges),
            inputs=tuple(inputs), output=Access(out.buffer, out_index),
            reduced=tuple(reduced), constants=dict(constants or {}),
            index_inputs=tuple(index_inputs), index_bounds=tuple(index_bounds),
            source=source_of(self.node), node=self.node.name, scope=module_path(self.node)))

    def release_parameter(self, node, value: TensorValue) -> None:
        """Drop a parameter that only `node` reads (it was rearranged or folded into a new
        constant), so the output directory stores the weights once."""
        name = value.buffer
        buf = self.graph.buffers.get(name)
        if buf is None or buf.role != "constant" or name not in self.graph.constants:
            return
        program = self.program
        users = program.users(name) if any(nd.name == name for nd in program.nodes) else [None]
        target = next((s.target for s in program.inputs if s.name == name), None)
        tied = [s for s in program.inputs if s.name != name and s.target is not None
                and program.aliases.get(s.target, s.target) ==
                program.aliases.get(target, target)]
        if users != [node] or tied or any(a.buffer == name for op in self.graph.ops
                                          for a in op.reads()):
            return
        del self.graph.constants[name]
        del self.graph.buffers[name]

    def refuse(self, what: str, hint: str):
        """Raise UnsupportedProgram: the current node's op `what` (a mode or an argument), its
        source line, and `hint` (what the user can do instead)."""
        raise UnsupportedProgram(f"{self.node.name}: {self.node.target} {what} "
                                 f"({source_for_message(self.node)}); {hint}")

    def meta_of(self, arg):
        """The TensorMeta of a node argument (a `Ref`), or None."""
        if not isinstance(arg, Ref):
            return None
        val = self.program.node(arg.name).meta.get("val") if self.program else None
        return val if hasattr(val, "shape") else None

    def _emit_empty(self, op: str, out: TensorValue, ranges, out_index: Lin,
                    reduced: Sequence[str]) -> None:
        """An op with an empty iteration space: nothing to compute, so no device op.

        Only a reduction over an empty dim into a non-empty output writes something: the
        reduction's identity, as eager does (sum and matmul give 0, mean 0/0 = NaN). max/min
        over an empty dim is an error in eager, so it is refused.
        """
        kept = [(v, n) for v, n in ranges if v not in reduced]
        if any(int(n) == 0 for _, n in kept) or not reduced:
            return
        if op not in EMPTY_REDUCTION_VALUE and op != "mean":
            raise UnsupportedProgram(f"{self.node.name}: {op} over an empty dim has no value "
                                     f"({source_for_message(self.node)})")
        if op != "mean":
            self.emit("fill", out, kept, [], out_index,
                      constants={"value": EMPTY_REDUCTION_VALUE[op]})
            return
        zeros = self.new_value(out.shape, out.dtype, role="zeros")
        self.emit("fill", zeros, kept, [], out_index, constants={"value": 0.0})
        self.emit("realdiv", out, kept, [Access(zeros.buffer, out_index)], out_index,
                  constants={"scalar": 0.0, "scalar_side": "rhs"})

    def out_meta(self, node=None) -> tuple[tuple[int, ...], str]:
        val = (node or self.node).meta["val"]
        val = val[0] if isinstance(val, (list, tuple)) else val  # several outputs: the first
        return tuple(int(n) for n in val.shape), host_dtype(val.dtype)

    # --- common op shapes -----------------------------------------------------------------
    def pointwise(self, op: str, operands: Sequence[TensorValue | Scalar],
                  out_dtype: str | None = None, constants: dict | None = None,
                  shape: Sequence[int] | None = None) -> TensorValue:
        """out[c] = op(operands broadcast to out at c); scalars go into `constants`."""
        tensors = [o for o in operands if isinstance(o, TensorValue)]
        meta_shape, meta_dtype = self.out_meta()
        out_shape = tuple(shape) if shape is not None else \
            broadcast_shapes(*(t.shape for t in tensors)) if tensors else meta_shape
        out = self.new_value(out_shape, out_dtype or meta_dtype)
        cvars = iteration_vars(out_shape)
        inputs = [Access(t.buffer, broadcast_index(t, cvars)) for t in tensors]
        self.emit(op, out, list(zip(names_of(cvars), out_shape)), inputs, out.at(cvars),
                  constants=constants)
        return out


def contiguous_value(buf: Buffer) -> TensorValue:
    strides = buf.host_strides
    index = sum((var(f"v{i}").scale(s) for i, s in enumerate(strides) if buf.host_size[i] > 1),
                Lin())
    return TensorValue(buf.name, buf.host_size, buf.host_dtype, index)


def iteration_vars(shape: Sequence[int], prefix: str = "c", start: int = 0) -> list[Lin]:
    return [var(f"{prefix}{start + i}") for i in range(len(shape))]


def names_of(vs: Sequence[Lin]) -> list[str]:
    return [v.as_atom().name for v in vs]


def _drop_unit_vars(op, ranges, inputs, out_index, reduced, index_inputs):
    """Remove size-1 iteration variables (the reference omits them): each is the constant 0.

    A reduction left with no reduced variable is a copy; one variable always remains, so an
    op over a single element still has an iteration space.
    """
    from spyrec.indexing import Var, substitute

    unit = [v for v, n in ranges if n == 1]
    if op == "batchmatmul":
        unit = [v for v in unit if v not in reduced]
    if len(unit) == len(ranges):
        unit = unit[1:]
    if not unit:
        return ranges, inputs, out_index, reduced, index_inputs, op
    zero = {Var(v): Lin() for v in unit}
    inputs = [Access(a.buffer, substitute(a.index, zero)) for a in inputs]
    index_inputs = [Access(a.buffer, substitute(a.index, zero)) for a in index_inputs]
    out_index = substitute(out_index, zero)
    kept_reduced = [v for v in reduced if v not in unit]
    if reduced and not kept_reduced and op in ("sum", "max", "min", "mean"):
        op = "identity"
    return ([(v, n) for v, n in ranges if v not in unit], inputs, out_index, kept_reduced,
            index_inputs, op)
