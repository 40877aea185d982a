"""Lower a `Program` (either front end's, see `program.py`) to a `Graph` of single device ops.

No torch here: the lowering reads plain data, so the torch-free front end never imports it.
One pass over the nodes: placeholders become input/constant buffers, every call_function is
dispatched through `LOWERINGS` (aten op name -> function), and the outputs become the program's
outputs. Before anything is lowered, every node is checked against the table, so an unsupported
program fails once, listing every unsupported op with its source line.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from spyrec.errors import InputFileError, InternalError, SpyrecError, UnsupportedProgram
from spyrec.frontend.program import Program, Ref, tensor_values
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
    trace = node.meta.get("stack_trace")
    if not isinstance(trace, str):
        return None
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', trace)
    if not frames:
        return None
    file, line, func = frames[-1]
    return f"{file.rsplit('/', 1)[-1]}:{line} in {func}"


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

    # --- buffers and ops ------------------------------------------------------------------
    def new_value(self, shape: Sequence[int], dtype: str, base: str | None = None) -> TensorValue:
        name = self.graph.fresh_name(base or self.node.name)
        buf = self.graph.add_buffer(Buffer(name, tuple(int(n) for n in shape), dtype,
                                           "intermediate", source=source_of(self.node)))
        return contiguous_value(buf)

    def emit(self, op: str, out: TensorValue, ranges: Sequence[tuple[str, int]],
             inputs: Sequence[Lin | tuple], out_index: Lin, reduced: Sequence[str] = (),
             constants: dict | None = None, index_inputs: Sequence[Access] = (),
             index_bounds: Sequence[tuple[int, int]] = ()) -> None:
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
            index_inputs=tuple(index_inputs), index_bounds=tuple(index_bounds),
            source=source_of(self.node)))

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


def lower_program(program: Program) -> Graph:
    """The Graph of a Program (from `load_program`)."""
    _register_lowerings()

    _check_supported(program)
    graph = Graph()
    ctx = LoweringContext(graph, program)
    env: dict[str, object] = {}
    _lower_placeholders(program, graph, env)
    for node in program.nodes:
        if node.op != "call_function" or node.target in PASSTHROUGH:
            continue
        ctx.node = node
        args = [_resolve(a, env) for a in node.args]
        kwargs = {k: _resolve(v, env) for k, v in node.kwargs.items()}
        env[node.name] = _call_lowering(ctx, node, args, kwargs)
    _lower_outputs(program, graph, ctx, env)
    return graph


def _call_lowering(ctx: LoweringContext, node, args: list, kwargs: dict):
    """One lowering; arguments that do not fit its signature are a damaged file, any other
    failure inside it names the node (exit 70: spyrec's bug, or a hand-edited graph)."""
    fn = LOWERINGS[node.target]
    try:
        inspect.signature(fn).bind(ctx, node, *args, **kwargs)
    except TypeError as e:
        raise InputFileError(f"node {node.name!r}: {node.target} with arguments that do not "
                             f"match its schema ({e}); the exported program is damaged: "
                             f"export and save it again") from None
    try:
        return fn(ctx, node, *args, **kwargs)
    except SpyrecError:
        raise
    except Exception as e:  # noqa: BLE001 - named, with the node, rather than a bare crash
        where = source_of(node) or "unknown source line"
        raise InternalError(f"internal error lowering node {node.name!r} ({node.target}, "
                            f"{where}): {type(e).__name__}: {e}; unless the .pt2 was edited "
                            f"by hand, please report this") from e


def lowerable(target: str) -> bool:
    """Whether the lowering knows `target` (an aten op name as `Program` spells it)."""
    _register_lowerings()

    return target in LOWERINGS or target in PASSTHROUGH


def _register_lowerings() -> None:
    """Import every module that registers lowerings (they import this one, so not at the top)."""
    from spyrec.frontend import aten_ops, aten_reductions, aten_training  # noqa: F401
    from spyrec.frontend import aten_mutation  # noqa: F401


def _resolve(arg, env):
    if isinstance(arg, Ref):
        value = env[arg.name]
        if isinstance(value, Unlowered):
            raise UnsupportedProgram(value.reason)
        return value
    if isinstance(arg, (list, tuple)):
        return type(arg)(_resolve(a, env) for a in arg)
    return arg


def _check_supported(program: Program) -> None:
    """Every op and dtype the lowering cannot take, once each: grouped by op, with how many
    nodes use it and the first one's source line (a real model repeats an op dozens of times)."""
    found: dict[str, list] = {}
    for node in program.nodes:
        if node.op != "call_function":
            continue
        if not lowerable(node.target):
            found.setdefault(node.target, []).append(node)
            continue
        for val in tensor_values(node):
            dtype = host_dtype(val.dtype)
            if dtype not in HOST_TO_DEVICE or dtype.startswith("float8"):
                found.setdefault(f"dtype {dtype}", []).append(node)
    if found:
        lines = [f"  {what}{f' x{len(nodes)}' if len(nodes) > 1 else ''} (node {nodes[0].name}, "
                 f"{source_of(nodes[0]) or 'unknown source line'})"
                 for what, nodes in found.items()]
        raise UnsupportedProgram("the program uses operations spyrec does not support:\n"
                                 + "\n".join(lines)
                                 + "\nRewrite these in the model or open an issue with the list.")


def _lower_placeholders(program: Program, graph: Graph, env: dict) -> None:
    first_of: dict[str, str] = {}  # canonical FQN -> the placeholder that holds it
    for spec in program.inputs:
        node = program.node(spec.name)
        val = node.meta.get("val")
        if spec.kind == "user_input":
            if not hasattr(val, "shape"):
                raise UnsupportedProgram(f"input {node.name} is not a tensor ({val!r}); only "
                                         f"tensor inputs are supported")
            buf = graph.add_buffer(Buffer(node.name, tuple(int(n) for n in val.shape),
                                          host_dtype(val.dtype), "input"))
            graph.inputs.append(buf.name)
            env[node.name] = contiguous_value(buf)
            continue
        fqn = program.aliases.get(spec.target, spec.target)
        if fqn in first_of:  # tied weights: one buffer
            env[node.name] = env[first_of[fqn]]
            continue
        first_of[fqn] = node.name
        array = np.require(program.state[fqn], requirements="C")  # 0-d stays 0-d
        buf = graph.add_buffer(Buffer(node.name, tuple(array.shape), program.state_dtypes[fqn],
                                      "constant", source=spec.target))
        graph.constants[buf.name] = array
        env[node.name] = contiguous_value(buf)


def _lower_outputs(program: Program, graph: Graph, ctx: LoweringContext, env: dict) -> None:
    """User outputs in order, then every buffer the program mutates (DESIGN §1: it comes back
    under its FQN). torch.export lists the mutations first; the user order is what callers see."""
    out_node = next(n for n in program.nodes if n.op == "output")
    ctx.node = out_node
    mutated: list[tuple[str, str]] = []
    for arg, spec in zip(out_node.args[0], program.outputs):
        if not isinstance(arg, Ref):
            raise UnsupportedProgram(f"an output of the program is the constant {arg!r}; "
                                     f"only tensor outputs are supported")
        name = _output_buffer(program, graph, ctx, env, arg)
        if spec.kind == "buffer_mutation":
            mutated.append((spec.target, name))
        elif spec.kind == "user_output":
            graph.outputs.append(name)
        else:
            raise UnsupportedProgram(f"output {arg.name} is a {spec.kind.replace('_', ' ')} "
                                     f"output; only user outputs and buffer mutations are "
                                     f"supported")
    graph.mutated_buffers = dict(mutated)


def _output_buffer(program: Program, graph: Graph, ctx: LoweringContext, env: dict,
                   arg: Ref) -> str:
    """The buffer holding output `arg`, materialized when it is a view of another buffer."""
    value = env[arg.name]
    ctx.node = program.node(arg.name)
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
