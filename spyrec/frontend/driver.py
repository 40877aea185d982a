"""Lower a `Program` (either front end's, see `program.py`) to a `Graph` of single device ops.

No torch here: the lowering reads plain data, so the torch-free front end never imports it.
One pass over the nodes: placeholders become input/constant buffers, every call_function is
dispatched through `registry.LOWERINGS`, and the outputs become the program's outputs. Before
anything is lowered, every node is checked against the table, so an unsupported program fails
once, listing every unsupported op with its source line. Last, every buffer and op gets its
final name (`names.py`).
"""

from __future__ import annotations

import inspect

import numpy as np

from spyrec.errors import InputFileError, InternalError, SpyrecError, UnsupportedProgram
from spyrec.frontend.context import (
    LoweringContext, Scalar, Unlowered, contiguous_value, host_dtype,
)
from spyrec.frontend.lowerings import lowerable, register_lowerings
from spyrec.frontend.names import rename_graph
from spyrec.frontend.program import Program, Ref, StoredTensor, tensor_values
from spyrec.frontend.registry import LOWERINGS, PASSTHROUGH
from spyrec.frontend.sources import source_for_message
from spyrec.frontend.views import TensorValue
from spyrec.ir import Buffer, Graph
from spyrec.layout.dtypes import computed_on_device


def lower_program(program: Program) -> Graph:
    """The Graph of a Program (from `load_program`)."""
    register_lowerings()
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
        value = env[node.name] = _call_lowering(ctx, node, args, kwargs)
        if isinstance(value, TensorValue):
            ctx.names.claim(value.buffer, node.name)
    _lower_outputs(program, graph, ctx, env)
    rename_graph(graph, ctx.names.final())
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
        where = source_for_message(node)
        raise InternalError(f"internal error lowering node {node.name!r} ({node.target}, "
                            f"{where}): {type(e).__name__}: {e}; unless the .pt2 was edited "
                            f"by hand, please report this") from e


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
            if not computed_on_device(dtype):
                found.setdefault(f"dtype {dtype}", []).append(node)
    if found:
        lines = [f"  {what}{f' x{len(nodes)}' if len(nodes) > 1 else ''} (node {nodes[0].name}, "
                 f"{source_for_message(nodes[0])})"
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
        value = program.state.stored(fqn)
        if not isinstance(value, StoredTensor):  # a folded constant, or the torch front end's
            value = np.require(value, requirements="C")  # 0-d stays 0-d
        # else: the archive's reference; read when a pass or the writer needs the values
        buf = graph.add_buffer(Buffer(node.name, tuple(value.shape), program.state_dtypes[fqn],
                                      "constant", source=spec.target))
        graph.constants[buf.name] = value
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
        ctx.names.claim(value.buffer, arg.name)
        buf = graph.buffers[value.buffer]
    if buf.role == "intermediate":
        buf.role = "output"
    return buf.name
