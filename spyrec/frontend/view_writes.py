"""Writes into a view of a fresh tensor, made functional as scatters (both front ends).

RecurrentGemma builds its scan output as `out = torch.zeros_like(x)` then `out[:, t] = h` per
step; the stored graph says `select(zeros_like, 1, t).copy_(h)`. `functionalize.py` handles
writes into buffers and whole intermediates; a write into a *view* of an intermediate needs the
view's inverse, which torch's functionalization spells `select_scatter` / `slice_scatter`:

    v = select(base, 1, t);  v.copy_(h)   ->   v' = copy(v, h);  base' = select_scatter(base, v', 1, t)

and every later reader of `base` reads `base'`. Chains of `select`/`slice` (and full aliases)
are handled, innermost first; the in-place op itself (copy_, fill_, add_, ...) becomes its
functional form on the view. A view of `base` taken before the write and read after it, or a
write through another kind of view (reshape, permute, ...), is left for `functionalize.py`,
which refuses it (`--frontend auto` then falls back to torch). Buffers and inputs are left to
`functionalize.py` too: only values the graph itself creates are rewritten here.
"""

from __future__ import annotations

from spyrec.frontend.program import Node, Program, Ref, numbered_name

SCATTERS = {"aten.select.int": "aten.select_scatter.default",
            "aten.slice.Tensor": "aten.slice_scatter.default"}
ALIASES = {"aten.alias.default", "aten.detach.default"}


def functional_view_writes(program: Program) -> Program:
    """`program` with in-place writes into select/slice views of intermediates rewritten as
    scatters (in place; returned for chaining)."""
    from spyrec.frontend.functionalize import inplace_target

    targets = {n.name for n in program.nodes if n.op == "call_function"
               and inplace_target(n.target) and n.args and isinstance(n.args[0], Ref)}
    if not targets:
        return program
    rewriter = _Rewriter(program)
    if not any(rewriter.chain(program.node(n).args[0].name) for n in targets):
        return program
    nodes = rewriter.run()
    if nodes is None:
        return program
    program.nodes = nodes
    program.__dict__.pop("_nodes_by_name", None)
    program.__dict__.pop("_users", None)
    return program


class _Rewriter:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.by_name = {n.name: n for n in program.nodes}
        self.fresh = {n.name for n in program.nodes if n.op == "call_function"}
        self.taken = set(self.by_name)
        self.latest: dict[str, str] = {}   # root -> node holding its latest value
        self.version: dict[str, int] = {}  # root -> writes so far
        self.taken_at: dict[str, tuple[str, int]] = {}  # view -> (root, version when taken)

    def chain(self, name: str) -> list[Node] | None:
        """The select/slice views from a fresh root down to `name` (root first), or None."""
        views = []
        node = self.by_name.get(name)
        while node is not None and (node.target in SCATTERS or node.target in ALIASES):
            views.append(node)
            node = self.by_name.get(node.args[0].name) if isinstance(node.args[0], Ref) \
                else None
        if not views or node is None or node.name not in self.fresh or \
                all(v.target in ALIASES for v in views):
            return None
        return [node, *reversed(views)]

    def run(self) -> list[Node] | None:
        """The rewritten node list, or None when a view taken before a write is read after
        it (left for `functionalize.py` to refuse)."""
        from spyrec.frontend.functionalize import inplace_target

        out: list[Node] = []
        for node in self.program.nodes:
            functional = inplace_target(node.target) if node.op == "call_function" else None
            views = self.chain(node.args[0].name) if functional and node.args and \
                isinstance(node.args[0], Ref) else None
            if self._reads_stale(node, skip=views is not None):
                return None
            node = self._reread(node)
            if views is None:
                self._note_view(node)
                out.append(node)
                continue
            out += self._scatter(node, functional, views)
        return out

    def _note_view(self, node: Node) -> None:
        views = self.chain(node.name) if node.target in SCATTERS or node.target in ALIASES \
            else None
        if views:
            root = views[0].name
            self.taken_at[node.name] = (root, self.version.get(root, 0))

    def _reads_stale(self, node: Node, skip: bool) -> bool:
        refs = [a for a in _flat(node.args[1:] if skip else node.args) if isinstance(a, Ref)]
        refs += [a for a in _flat(list(node.kwargs.values())) if isinstance(a, Ref)]
        return any(r.name in self.taken_at and self.version.get(self.taken_at[r.name][0], 0)
                   != self.taken_at[r.name][1] for r in refs)

    def _reread(self, node: Node) -> Node:
        """`node` reading each root's latest value."""
        if not self.latest:
            return node
        return Node(node.name, node.op, node.target, _swap(node.args, self.latest),
                    _swap(node.kwargs, self.latest), node.meta)

    def _scatter(self, node: Node, functional: str, views: list[Node]) -> list[Node]:
        """The chain re-taken from the root's latest value, the write as its functional op on
        the innermost view, then one scatter per view back to the root."""
        root = views[0]
        made: list[Node] = []
        bases = [Ref(self.latest.get(root.name, root.name))]
        for view in views[1:]:
            made.append(Node(self._name(view.name), "call_function", view.target,
                             (bases[-1],) + tuple(view.args[1:]), view.kwargs, view.meta))
            bases.append(Ref(made[-1].name))
        made.append(Node(node.name, "call_function", functional,
                         (bases[-1],) + tuple(_swap(node.args[1:], self.latest)),
                         _swap(node.kwargs, self.latest),
                         {**node.meta, "val": views[-1].meta.get("val")}))
        written = Ref(node.name)
        for i in range(len(views) - 1, 0, -1):
            view = views[i]
            if view.target in ALIASES:
                continue
            made.append(Node(self._name(f"{view.name}_scatter"), "call_function",
                             SCATTERS[view.target], (bases[i - 1], written) + tuple(
                                 view.args[1:]), {},
                             {**view.meta, "val": views[i - 1].meta.get("val")}))
            written = Ref(made[-1].name)
        self.latest[root.name] = written.name
        self.version[root.name] = self.version.get(root.name, 0) + 1
        return made

    def _name(self, base: str) -> str:
        name = base if base not in self.taken else numbered_name(base, self.taken, "_")
        self.taken.add(name)
        return name


def _swap(value, latest: dict[str, str]):
    if isinstance(value, Ref):
        return Ref(latest[value.name]) if value.name in latest else value
    if isinstance(value, tuple):
        return tuple(_swap(v, latest) for v in value)
    if isinstance(value, list):
        return [_swap(v, latest) for v in value]
    if isinstance(value, dict):
        return {k: _swap(v, latest) for k, v in value.items()}
    return value


def _flat(value) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    return [value]
