"""Convert a `torch.export.ExportedProgram` into spyrec's torch-free `Program`.

Spelled exactly as `pt2json` spells the same program (see `program.py`), so the two front ends
give the lowering identical input whenever torch had nothing to decompose.
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.functionalize import functionalize
from spyrec.frontend.inline import inline_higher_order_ops
from spyrec.frontend.program import (
    InputSpec, Node, OutputSpec, Program, Ref, Subgraph, TensorMeta, check_program,
)

_INPUT_KINDS = {"USER_INPUT": "user_input", "PARAMETER": "parameter", "BUFFER": "buffer",
                "CONSTANT_TENSOR": "constant"}


def program_of(ep) -> Program:
    nodes = _nodes(ep.graph, ep.graph_module)
    sig = ep.graph_signature
    inputs = [_input_spec(s) for s in sig.input_specs]
    outputs = [OutputSpec(s.kind.name.lower(), getattr(s.arg, "name", ""), s.target)
               for s in sig.output_specs]
    state, dtypes, aliases, views = {}, {}, {}, {}
    for fqn, tensor in {**ep.state_dict, **ep.constants}.items():
        if hasattr(tensor, "dtype"):
            state[fqn], dtypes[fqn] = host_array(tensor)
            view = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)
            if view in views:  # tied weights
                aliases[fqn] = views[view]
            views.setdefault(view, fqn)
    program = Program(nodes, inputs, outputs, state, dtypes, aliases, frontend="torch")
    check_program(program, "the loaded program")
    return functionalize(inline_higher_order_ops(program))


def host_array(tensor) -> tuple[np.ndarray, str]:
    """A tensor's values as numpy (bf16 and fp8 as their bit patterns) and torch's dtype name."""
    import torch

    tensor = tensor.detach().contiguous()
    dtype = dtype_name(tensor.dtype)
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16).copy(), dtype
    if dtype.startswith("float8"):
        return tensor.view(torch.uint8).numpy().copy(), dtype
    return tensor.numpy().copy(), dtype


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _input_spec(spec) -> InputSpec:
    kind = _INPUT_KINDS.get(spec.kind.name)
    if kind is None:
        raise UnsupportedProgram(f"input {spec.arg.name} is of kind {spec.kind.name}, which "
                                 f"spyrec does not support")
    return InputSpec(kind, spec.arg.name, spec.target)


def _nodes(graph, module) -> list[Node]:
    """The graph's nodes; a `get_attr` of a submodule becomes a `Subgraph` argument."""
    return [_node(n, module) for n in graph.nodes if n.op != "get_attr"]


def _node(node, module) -> Node:
    target = target_name(node.target) if node.op == "call_function" else str(node.target)
    meta = {"val": _value(node.meta.get("val"), node.name)}
    if node.meta.get("stack_trace"):
        meta["stack_trace"] = node.meta["stack_trace"]
    if node.meta.get("nn_module_stack"):
        meta["nn_module_stack"] = {k: (path, _type_name(t))
                                   for k, (path, t) in node.meta["nn_module_stack"].items()}
    return Node(node.name, node.op, target, tuple(_arg(a, module) for a in node.args),
                {k: _arg(v, module) for k, v in node.kwargs.items()}, meta)


def target_name(target) -> str:
    import torch

    if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        name = str(target)
        return name if "." in name else f"higher_order.{name}"
    return f"{getattr(target, '__module__', '') or ''}.{target.__name__}".lstrip(".")


def _type_name(t) -> str:
    return t if isinstance(t, str) else f"{t.__module__}.{t.__qualname__}"


def _arg(a, module):
    import torch

    if isinstance(a, torch.fx.Node) and a.op == "get_attr":
        sub = module.get_submodule(a.target)
        return Subgraph(a.target, _nodes(sub.graph, sub))
    if isinstance(a, torch.fx.Node):
        return Ref(a.name)
    if isinstance(a, (list, tuple)):
        return type(a)(_arg(x, module) for x in a)
    if isinstance(a, (torch.dtype, torch.layout, torch.memory_format)):
        return str(a).removeprefix("torch.")
    if isinstance(a, torch.device):
        return str(a)
    return a


def _value(val, name: str):
    import torch

    if isinstance(val, (list, tuple)):
        return [_value(v, name) for v in val]
    if isinstance(val, torch.Tensor):
        shape = []
        for d in val.shape:
            if not isinstance(d, int):
                raise UnsupportedProgram(f"node {name} has a dynamic shape {list(val.shape)}; "
                                         f"re-export with static shapes and save again")
            shape.append(d)
        return TensorMeta(tuple(shape), dtype_name(val.dtype),
                          tuple(int(st) for st in val.stride()), int(val.storage_offset()))
    return val
