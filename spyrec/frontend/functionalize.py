"""In-place ops of the stored graph made functional (both front ends, so they stay equal).

`torch.export.save` stores the graph before functionalization: a static KV cache's update is
`keys.index_copy_(2, pos, k)` on the buffer's placeholder, and the signature lists no buffer
mutation. torch's `run_decompositions` would functionalize it; the fast front end (and the torch
front end when it decomposes nothing) does it here, for the simple (and common) case:

- an in-place op `aten.<op>_.<overload>` whose first argument is a buffer (or a full alias of
  one: `alias`, `detach`, a `to` that keeps the dtype, an earlier in-place result) or an
  intermediate becomes `aten.<op>.<overload>`; its result is the new value, and every later
  reference to the buffer or any of its full aliases reads that value;
- every mutated buffer comes back as a `buffer_mutation` output under its FQN (before the user
  outputs, as torch lists them).

What it cannot express exactly is `NeedsTorch` (`--frontend auto` falls back to torch): a write
into a view (`cache[:, :, pos].copy_(k)`), a view taken before a write and read after it, a
write to a parameter, a constant or a user input.
"""

from __future__ import annotations

from spyrec.frontend.program import NeedsTorch, Node, OutputSpec, Program, Ref

# Ops whose result is the input itself (same storage, same shape) when the dtype is unchanged.
FULL_ALIASES = {"aten.alias.default", "aten.detach.default", "aten.lift_fresh.default"}
SAME_DTYPE_ALIASES = {"aten.to.dtype_layout", "aten.to.device", "aten.to.dtype",
                      "aten.to.other", "aten.to.prim_dtype", "aten.type_as.default"}
# Ops whose result may share part of the input's storage.
VIEWS = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
         "aten.permute.default", "aten.transpose.int", "aten.t.default", "aten.expand.default",
         "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
         "aten.squeeze.default", "aten.slice.Tensor", "aten.select.int", "aten.split.Tensor",
         "aten.split_with_sizes.default", "aten.narrow.default", "aten.diagonal.default",
         "aten.unfold.default", "aten.as_strided.default", "aten.unbind.int",
         "aten.flatten.using_ints", "aten.unflatten.int", "aten.view_as.default",
         "aten.chunk.default", "aten.tensor_split.sections", "aten.contiguous.default",
         "aten.expand_as.default", "aten.movedim.int", "aten.swapaxes.default",
         "aten.real.default", "_operator.getitem"}


def inplace_target(target: str) -> str | None:
    """`aten.add.Tensor` for `aten.add_.Tensor`; None when `target` is not an in-place op."""
    parts = target.split(".")
    if len(parts) != 3 or parts[0] != "aten":
        return None
    op = parts[1]
    if not op.endswith("_") or op.startswith("_") or op.endswith("__"):
        return None
    return f"aten.{op[:-1]}.{parts[2]}"


def functionalize(program: Program) -> Program:
    """`program` with its in-place ops made functional (in place; returned for chaining)."""
    if not any(n.op == "call_function" and inplace_target(n.target) for n in program.nodes):
        return program
    kinds = {s.name: s for s in program.inputs}
    root: dict[str, str] = {}       # node -> the value it is a full alias of
    current: dict[str, str] = {}    # root -> the node holding its latest value
    version: dict[str, int] = {}    # root -> writes so far
    view_of: dict[str, tuple[str, int]] = {}  # partial view -> (root, version when taken)

    def root_of(name: str) -> str:
        return root.get(name, name)

    def read(arg, node: Node):
        if isinstance(arg, Ref):
            if arg.name in view_of:
                r, v = view_of[arg.name]
                if version.get(r, 0) != v:
                    raise NeedsTorch(f"node {node.name} reads {arg.name}, a view of {r} taken "
                                     f"before an in-place write to {r}")
            r = root_of(arg.name)
            return Ref(current.get(r, arg.name)) if r in current else arg
        if isinstance(arg, (list, tuple)):
            return type(arg)(read(a, node) for a in arg)
        return arg

    for node in program.nodes:
        if node.op not in ("call_function", "output"):
            continue
        original = node.args
        node.args = read(node.args, node)
        node.kwargs = {k: read(v, node) for k, v in node.kwargs.items()}
        if node.op == "output":
            continue
        first = original[0] if original and isinstance(original[0], Ref) else None
        functional = inplace_target(node.target)
        if functional and first is not None:
            if first.name in view_of:
                raise NeedsTorch(f"node {node.name} ({node.target}) writes into "
                                 f"{first.name}, a view of {view_of[first.name][0]}")
            r = root_of(first.name)
            spec = kinds.get(r)
            if spec is not None and spec.kind != "buffer":
                raise NeedsTorch(f"node {node.name} ({node.target}) writes into the "
                                 f"{spec.kind.replace('_', ' ')} {spec.target or r}")
            node.target = functional
            root[node.name] = r
            current[r] = node.name
            version[r] = version.get(r, 0) + 1
        elif first is not None and _is_full_alias(program, node, first):
            root[node.name] = root_of(first.name)
        elif first is not None and node.target in VIEWS and not _fresh_item(program, node):
            base = view_of.get(first.name)
            r = base[0] if base else root_of(first.name)
            view_of[node.name] = base or (r, version.get(r, 0))
    _add_mutation_outputs(program, current, kinds)
    program.__dict__.pop("_users", None)
    return program


def _fresh_item(program: Program, node: Node) -> bool:
    """`getitem` of an op that returns new tensors (topk, max.dim, native_layer_norm), not
    views: its element is a value of its own, so an in-place write into it (Mixtral's
    `router_top_value /= ...` after topk) is a write into an intermediate."""
    if node.target != "_operator.getitem":
        return False
    return program.node(node.args[0].name).target not in VIEWS


def _is_full_alias(program: Program, node: Node, first: Ref) -> bool:
    if node.target in FULL_ALIASES:
        return True
    if node.target in SAME_DTYPE_ALIASES and not node.kwargs.get("copy"):
        val, src = node.meta.get("val"), program.node(first.name).meta.get("val")
        return getattr(val, "dtype", None) is not None and \
            getattr(val, "dtype", None) == getattr(src, "dtype", None)
    return False


def _add_mutation_outputs(program: Program, current: dict[str, str], kinds: dict) -> None:
    out = program.nodes[-1]
    specs, refs = [], []
    for spec in program.inputs:  # buffer order, as torch's functionalization lists them
        if spec.kind == "buffer" and spec.name in current:
            specs.append(OutputSpec("buffer_mutation", current[spec.name], spec.target))
            refs.append(Ref(current[spec.name]))
    values = list(out.args[0])
    program.outputs = specs + [  # user outputs renamed where they read a written value
        OutputSpec(s.kind, v.name if isinstance(v, Ref) else s.name, s.target)
        for s, v in zip(program.outputs, values)]
    out.args = (type(out.args[0])(refs + values),) + tuple(out.args[1:])
