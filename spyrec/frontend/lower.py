"""Lower a decomposed ExportedProgram to a `Graph` of single device ops.

One pass over the FX nodes: placeholders become input/constant buffers, every call_function is
dispatched through `LOWERINGS` (aten op name -> function), and the outputs become the program's
outputs. Before anything is lowered, every node is checked against the table, so an unsupported
program fails once, listing every unsupported op with its source line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.views import TensorValue, broadcast_index, broadcast_shapes
from spyrec.indexing import Lin, var
from spyrec.ir import DEVICE_OPS, Access, Buffer, Graph, Operation
from spyrec.layout.dtypes import HOST_TO_DEVICE

Lowering = Callable[..., object]
LOWERINGS: dict[str, Lowering] = {}
PASSTHROUGH = {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
               "aten.sym_constrain_range_for_size.default"}


def lowering(*names: str):
    """Register a function `(ctx, node, *args, **kwargs) -> value` for these aten ops."""
    def register(fn: Lowering) -> Lowering:
        for name in names:
            LOWERINGS[name] = fn
        return fn
    return register


def source_of(node) -> str | None:
    """`file.py:LINE in func` of the user's code that produced `node`, from its stack trace."""
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', trace)
    if not frames:
        return None
    file, line, func = frames[-1]
    return f"{file.rsplit('/', 1)[-1]}:{line} in {func}"


def host_dtype(torch_dtype) -> str:
    return str(torch_dtype).removeprefix("torch.")


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

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.node = None

    # --- buffers and ops ------------------------------------------------------------------
    def new_value(self, shape: Sequence[int], dtype: str, base: str | None = None) -> TensorValue:
        name = self.graph.fresh_name(base or self.node.name)
        buf = self.graph.add_buffer(Buffer(name, tuple(int(n) for n in shape), dtype,
                                           "intermediate", source=source_of(self.node)))
        return contiguous_value(buf)

    def emit(self, op: str, out: TensorValue, ranges: Sequence[tuple[str, int]],
             inputs: Sequence[Lin | tuple], out_index: Lin, reduced: Sequence[str] = (),
             constants: dict | None = None, index_inputs: Sequence[Access] = ()) -> None:
        name = out.buffer if not any(o.name == out.buffer for o in self.graph.ops) else \
            f"{out.buffer}.{sum(o.output.buffer == out.buffer for o in self.graph.ops)}"
        assert op in DEVICE_OPS, f"lowering emitted unknown device op {op}"
        if any(int(n) == 0 for _, n in ranges):
            self._emit_empty(op, out, ranges, out_index, reduced)
            return
        ranges, inputs, out_index, reduced, index_inputs, op = _drop_unit_vars(
            op, list(ranges), list(inputs), out_index, list(reduced), list(index_inputs))
        self.graph.ops.append(Operation(
            name=name, op=op, ranges=tuple((v, int(n)) for v, n in ranges),
            inputs=tuple(inputs), output=Access(out.buffer, out_index),
            reduced=tuple(reduced), constants=dict(constants or {}),
            index_inputs=tuple(index_inputs), source=source_of(self.node)))

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
                                     f"({source_of(self.node) or 'unknown source line'})")
        if op != "mean":
            self.emit("fill", out, kept, [], out_index,
                      constants={"value": EMPTY_REDUCTION_VALUE[op]})
            return
        zeros = self.new_value(out.shape, out.dtype, base=f"{out.buffer}_zeros")
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


# --- the driver -----------------------------------------------------------------------------


def lower_program(ep) -> Graph:
    """The Graph of a decomposed ExportedProgram (after `load_program`)."""
    from spyrec.frontend import aten_ops, aten_reductions  # noqa: F401  (register lowerings)

    _check_supported(ep)
    graph = Graph()
    ctx = LoweringContext(graph)
    env: dict[str, object] = {}
    _lower_placeholders(ep, graph, env)
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        if name in PASSTHROUGH:
            continue
        ctx.node = node
        args = [_resolve(a, env) for a in node.args]
        kwargs = {k: _resolve(v, env) for k, v in node.kwargs.items()}
        env[node.name] = LOWERINGS[name](ctx, node, *args, **kwargs)
    _lower_outputs(ep, graph, ctx, env)
    return graph


def _resolve(arg, env):
    import torch

    if isinstance(arg, torch.fx.Node):
        value = env[arg.name]
        if isinstance(value, Unlowered):
            raise UnsupportedProgram(value.reason)
        return value
    if isinstance(arg, (list, tuple)):
        return type(arg)(_resolve(a, env) for a in arg)
    return arg


def _check_supported(ep) -> None:
    problems = []
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        name = str(node.target)
        if name not in LOWERINGS and name not in PASSTHROUGH:
            where = source_of(node) or "unknown source line"
            problems.append(f"  {name} (node {node.name}, {where})")
            continue
        for val in _node_values(node):
            dtype = host_dtype(val.dtype)
            if dtype not in HOST_TO_DEVICE or dtype.startswith("float8"):
                problems.append(f"  dtype {dtype} of node {node.name} "
                                f"({source_of(node) or 'unknown source line'})")
    if problems:
        raise UnsupportedProgram("the program uses operations spyrec does not support:\n"
                                 + "\n".join(problems)
                                 + "\nRewrite these in the model or open an issue with the list.")


def _node_values(node) -> list:
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return [v for v in vals if hasattr(v, "dtype") and hasattr(v, "shape")]


def _lower_placeholders(ep, graph: Graph, env: dict) -> None:
    from torch.export.graph_signature import InputKind

    state = {**ep.state_dict, **ep.constants}
    seen_storage: dict[tuple, str] = {}
    for spec in ep.graph_signature.input_specs:
        node = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == spec.arg.name)
        val = node.meta["val"]
        if spec.kind == InputKind.USER_INPUT:
            if not hasattr(val, "shape"):
                raise UnsupportedProgram(f"input {node.name} is not a tensor ({val!r}); only "
                                         f"tensor inputs are supported")
            buf = graph.add_buffer(Buffer(node.name, tuple(int(n) for n in val.shape),
                                          host_dtype(val.dtype), "input"))
            graph.inputs.append(buf.name)
            env[node.name] = contiguous_value(buf)
            continue
        target = spec.target
        tensor = state[target].detach()
        storage = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)
        if storage in seen_storage:  # tied weights: one buffer
            env[node.name] = env[seen_storage[storage]]
            continue
        seen_storage[storage] = node.name
        tensor = tensor.contiguous()
        buf = graph.add_buffer(Buffer(node.name, tuple(tensor.shape),
                                      host_dtype(tensor.dtype), "constant", source=target))
        graph.constants[buf.name] = _to_numpy(tensor)
        env[node.name] = contiguous_value(buf)


def _to_numpy(tensor) -> np.ndarray:
    """Host form of a constant; bf16 as its uint16 bit patterns (numpy has no bfloat16)."""
    import torch

    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16).copy()
    return tensor.numpy().copy()


def _lower_outputs(ep, graph: Graph, ctx: LoweringContext, env: dict) -> None:
    """User outputs in order, then every buffer the program mutates (DESIGN §1: it comes back
    under its FQN). torch.export lists the mutations first; the user order is what callers see."""
    from torch.export.graph_signature import OutputKind

    out_node = next(n for n in ep.graph.nodes if n.op == "output")
    specs = ep.graph_signature.output_specs
    mutated: list[tuple[str, str]] = []
    for arg, spec in zip(out_node.args[0], specs):
        name = _output_buffer(graph, ctx, env, arg)
        if spec.kind == OutputKind.BUFFER_MUTATION:
            mutated.append((spec.target, name))
        elif spec.kind == OutputKind.USER_OUTPUT:
            graph.outputs.append(name)
        else:
            raise UnsupportedProgram(f"output {arg.name} is a {spec.kind.name.lower()} "
                                     f"output; only user outputs and buffer mutations are "
                                     f"supported")
    graph.mutated_buffers = dict(mutated)


def _output_buffer(graph: Graph, ctx: LoweringContext, env: dict, arg) -> str:
    """The buffer holding output `arg`, materialized when it is a view of another buffer."""
    value = env[arg.name]
    ctx.node = arg
    if isinstance(value, Unlowered):
        raise UnsupportedProgram(value.reason)
    if isinstance(value, Scalar) or not isinstance(value, TensorValue):
        raise UnsupportedProgram(f"output {arg.name} is not a tensor ({value!r})")
    buf = graph.buffers[value.buffer]
    reshaped = Buffer(buf.name, value.shape, buf.host_dtype, buf.role)
    if (value != contiguous_value(buf) and buf.role == "intermediate"
            and buf.numel == value.numel and value == contiguous_value(reshaped)):
        buf.host_size = value.shape  # a pure reshape: same storage, flat indices still hold
    if value != contiguous_value(buf):  # a view of a buffer: materialize it
        value = ctx.pointwise("identity", [value], out_dtype=value.dtype, shape=value.shape)
        buf = graph.buffers[value.buffer]
    if buf.role == "intermediate":
        buf.role = "output"
    return buf.name


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
