"""Convert a `torch.export.ExportedProgram` into spyrec's torch-free `Program`.

Spelled exactly as `pt2json` spells the same program (see `program.py`), so the two front ends
give the lowering identical input whenever torch had nothing to decompose. A SymInt is printed
as the serializer prints it (`sympy.srepr`), so `symbols.py` reads the same text from both.
"""

from __future__ import annotations

import numpy as np

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.functionalize import functionalize
from spyrec.frontend.inline import inline_higher_order_ops
from spyrec.frontend.view_writes import functional_view_writes
from spyrec.frontend.program import (
    InputSpec, Node, OutputSpec, Program, Ref, Subgraph, TensorMeta, check_program,
)
from spyrec.frontend.symbols import Binding, ShapeFacts, bind_symbols

_INPUT_KINDS = {"USER_INPUT": "user_input", "PARAMETER": "parameter", "BUFFER": "buffer",
                "CONSTANT_TENSOR": "constant"}


def program_of(ep, bind: dict[str, int] | None = None,
               where: str = "the loaded program") -> Program:
    """`ep` as a Program, at the binding `bind` of its symbols (None: each at its maximum)."""
    sig = ep.graph_signature
    inputs = [_input_spec(s) for s in sig.input_specs]
    outputs = [OutputSpec(s.kind.name.lower(), getattr(s.arg, "name", ""), s.target)
               for s in sig.output_specs]
    binding = bind_symbols(_shape_facts(ep, inputs, outputs, where), bind)
    nodes = _nodes(ep.graph, ep.graph_module, binding)
    state, dtypes, aliases, views = {}, {}, {}, {}
    for fqn, tensor in {**ep.state_dict, **ep.constants}.items():
        if hasattr(tensor, "dtype"):
            state[fqn], dtypes[fqn] = _state_array(tensor, fqn, where)
            view = (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype)
            if view in views:  # tied weights
                aliases[fqn] = views[view]
            views.setdefault(view, fqn)
    program = Program(nodes, inputs, outputs, state, dtypes, aliases, frontend="torch",
                      symbols=binding.symbols, symbolic_dims=binding.symbolic_dims)
    check_program(program, where)
    return functionalize(functional_view_writes(inline_higher_order_ops(program)))


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


def _state_array(tensor, fqn: str, where: str) -> tuple[np.ndarray, str]:
    """`host_array` of a weight; one numpy cannot hold (complex32) is refused by name, as the
    fast reader refuses it (pt2json), whether or not the program reads it."""
    try:
        return host_array(tensor)
    except TypeError:  # torch: "Got unsupported ScalarType ComplexHalf"
        raise UnsupportedProgram(f"{where}: weight {fqn!r} has dtype "
                                 f"{dtype_name(tensor.dtype)}, which spyrec does not "
                                 f"read") from None


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _input_spec(spec) -> InputSpec:
    kind = _INPUT_KINDS.get(spec.kind.name)
    if kind is None:
        raise UnsupportedProgram(f"input {spec.arg.name} is of kind {spec.kind.name}, which "
                                 f"spyrec does not support")
    return InputSpec(kind, spec.arg.name, spec.target)


def _shape_facts(ep, inputs: list[InputSpec], outputs: list[OutputSpec],
                 where: str) -> ShapeFacts:
    """The symbolic sizes, ranges and guards of `ep`, spelled as the graph JSON spells them."""
    import torch

    tensors, strides = {}, {}
    for node in ep.graph.nodes:  # a multi-output op's values are its getitem nodes' too
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            tensors[node.name] = [_size_text(d) for d in val.shape]
            strides[node.name] = [_size_text(d) for d in val.stride()]
    return ShapeFacts(
        where, {str(k): (_bound(v.lower), _bound(v.upper))
                for k, v in ep.range_constraints.items()},
        {s.name: (tensors[s.name], strides[s.name]) for s in inputs if s.kind == "user_input"},
        {s.name: tensors[s.name] for s in outputs if s.kind == "user_output" and
         s.name in tensors},
        tensors, list(getattr(ep, "_guards_code", None) or []))


def _size_text(size) -> int | str:
    """An int, or a SymInt's expression as the serializer writes it."""
    if isinstance(size, int):
        return size
    constant = size.node.maybe_as_int()
    if constant is not None:
        return int(constant)
    import sympy

    return sympy.srepr(size.node.expr)


def _bound(value) -> int | None:
    """A range bound as the serializer writes it: None when infinite (torch's `int_oo`)."""
    import sympy

    return int(value) if isinstance(value, (int, sympy.Integer)) else None


def _nodes(graph, module, binding: Binding) -> list[Node]:
    """The graph's nodes; a `get_attr` of a submodule becomes a `Subgraph` argument, a node
    whose value is a SymInt (`sym_size`, arithmetic on sizes) its int value wherever used."""
    return [_node(n, module, binding) for n in graph.nodes
            if n.op != "get_attr" and not is_sym_int(n)]


def is_sym_int(node) -> bool:
    """A node computing a size (`sym_size`, arithmetic on sizes): read as its int value."""
    import torch

    return isinstance(node.meta.get("val"), torch.SymInt)


def _node(node, module, binding: Binding) -> Node:
    target = target_name(node.target) if node.op == "call_function" else str(node.target)
    meta = {"val": _value(node.meta.get("val"), binding)}
    if node.meta.get("stack_trace"):
        meta["stack_trace"] = node.meta["stack_trace"]
    if node.meta.get("nn_module_stack"):
        meta["nn_module_stack"] = {k: (path, _type_name(t))
                                   for k, (path, t) in node.meta["nn_module_stack"].items()}
    return Node(node.name, node.op, target,
                tuple(_arg(a, module, binding) for a in node.args),
                {k: _arg(v, module, binding) for k, v in node.kwargs.items()}, meta)


def target_name(target) -> str:
    import torch

    if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        name = str(target)
        return name if "." in name else f"higher_order.{name}"
    return f"{getattr(target, '__module__', '') or ''}.{target.__name__}".lstrip(".")


def _type_name(t) -> str:
    return t if isinstance(t, str) else f"{t.__module__}.{t.__qualname__}"


def _arg(a, module, binding: Binding):
    import torch

    if isinstance(a, torch.fx.Node) and a.op == "get_attr":
        sub = module.get_submodule(a.target)
        return Subgraph(a.target, _nodes(sub.graph, sub, binding))
    if isinstance(a, torch.fx.Node) and is_sym_int(a):
        return binding.size(_size_text(a.meta["val"]))
    if isinstance(a, torch.fx.Node):
        return Ref(a.name)
    if isinstance(a, (list, tuple)):
        return type(a)(_arg(x, module, binding) for x in a)
    if isinstance(a, (torch.dtype, torch.layout, torch.memory_format)):
        return str(a).removeprefix("torch.")
    if isinstance(a, torch.device):
        return str(a)
    return a


def _value(val, binding: Binding):
    import torch

    if isinstance(val, (list, tuple)):
        return [_value(v, binding) for v in val]
    if isinstance(val, torch.Tensor):
        size = binding.size
        return TensorMeta(tuple(size(_size_text(d)) for d in val.shape), dtype_name(val.dtype),
                          tuple(size(_size_text(st)) for st in val.stride()),
                          size(_size_text(val.storage_offset())))
    return val
