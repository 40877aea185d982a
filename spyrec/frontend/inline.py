"""Inline the higher-order ops that only switch a mode around ordinary ops.

`@torch.no_grad()` on a submodule (the rotary embedding of every Llama-style model) exports as
`higher_order.wrap_with_set_grad_enabled(False, <subgraph>, *operands)`, and an autocast region
as `higher_order.wrap_with_autocast(...)`. For inference the grad mode changes nothing, so the
subgraph's nodes replace the call; an autocast region that is *enabled* would change dtypes at
dispatch, which the stored ops do not show, so it is refused.

Both front ends hand the same `Subgraph`s to `inline_higher_order_ops`, and naming is a pure
function of the node lists: the node producing the i-th result takes the name of the
`getitem(hop, i)` that read it, other inner nodes keep their names unless the outer graph uses
them (then `<name>_<k>`, the first free k), so the two front ends still agree.
"""

from __future__ import annotations

from spyrec.errors import UnsupportedProgram
from spyrec.frontend.program import Node, Program, Ref, Subgraph, numbered_name

GETITEM = "_operator.getitem"
INLINED = ("higher_order.wrap_with_set_grad_enabled", "higher_order.wrap_with_autocast")


def inline_higher_order_ops(program: Program) -> Program:
    """`program` with every grad-mode region inlined (in place; returned for chaining)."""
    if any(n.op == "call_function" and n.target in INLINED for n in program.nodes):
        program.nodes = _inline(program.nodes)
        program.__dict__.pop("_nodes_by_name", None)
        program.__dict__.pop("_users", None)
    return program


def _inline(nodes: list[Node]) -> list[Node]:
    taken = {n.name for n in nodes}
    regions = {n.name: n for n in nodes if n.op == "call_function" and n.target in INLINED}
    results = {(n.args[0].name, n.args[1]): n.name for n in nodes
               if n.target == GETITEM and n.args and isinstance(n.args[0], Ref)
               and n.args[0].name in regions}
    replace: dict[str, object] = {}  # outer name -> what now stands for it
    out: list[Node] = []
    for node in nodes:
        if node.name in regions:
            out += _expand(node, results, taken, replace)
        elif node.target == GETITEM and isinstance(node.args[0], Ref) and \
                node.args[0].name in regions:
            continue  # produced directly by the inlined body
        else:
            out.append(_rewrite(node, replace))
    return out


def _expand(hop: Node, results: dict, taken: set[str], replace: dict) -> list[Node]:
    sub_at = next(i for i, a in enumerate(hop.args) if isinstance(a, Subgraph))
    if hop.target.endswith("wrap_with_autocast") and _autocast_enabled(hop.args[:sub_at]):
        raise UnsupportedProgram(f"node {hop.name}: an enabled autocast region; spyrec compiles "
                                 f"the ops as stored, so export without torch.autocast")
    sub, operands = hop.args[sub_at], [_rewrite_value(a, replace) for a in hop.args[sub_at + 1:]]
    inner = _inline(sub.nodes)
    names: dict[str, object] = {}
    placeholders = [n for n in inner if n.op == "placeholder"]
    for ph, operand in zip(placeholders, operands):
        names[ph.name] = operand
    output = next(n for n in inner if n.op == "output")
    outs = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    wanted = {ref.name: results[(hop.name, i)] for i, ref in enumerate(outs)
              if isinstance(ref, Ref) and (hop.name, i) in results}
    body = []
    for node in inner:
        if node.op != "call_function":
            continue
        name = wanted.get(node.name) or _fresh(node.name, taken)
        taken.add(name)
        names[node.name] = Ref(name)
        meta = {**{k: v for k, v in hop.meta.items() if k != "val"}, **node.meta}
        body.append(Node(name, node.op, node.target, _rewrite_value(node.args, names),
                         _rewrite_value(node.kwargs, names), meta))
    for i, ref in enumerate(outs):  # a result that is an operand passed straight through
        if (hop.name, i) in results and isinstance(ref, Ref) and ref.name not in wanted:
            replace[results[(hop.name, i)]] = names.get(ref.name, ref)
    return body


def _autocast_enabled(args) -> bool:
    """wrap_with_autocast(device_type, dtype, enabled, cache_enabled, ...)."""
    return len(args) > 2 and bool(args[2])


def _fresh(name: str, taken: set[str]) -> str:
    return name if name not in taken else numbered_name(name, taken, "_")


def _rewrite(node: Node, replace: dict) -> Node:
    if not replace:
        return node
    return Node(node.name, node.op, node.target, _rewrite_value(node.args, replace),
                _rewrite_value(node.kwargs, replace), node.meta)


def _rewrite_value(value, mapping: dict):
    if isinstance(value, Ref):
        return mapping.get(value.name, value)
    if isinstance(value, tuple):
        return tuple(_rewrite_value(v, mapping) for v in value)
    if isinstance(value, list):
        return [_rewrite_value(v, mapping) for v in value]
    if isinstance(value, dict):
        return {k: _rewrite_value(v, mapping) for k, v in value.items()}
    return value
