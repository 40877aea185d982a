"""Buffer and op names users can trust: each one says which FX node it comes from.

FX names a graph's nodes with identifiers made unique by `_<k>` suffixes (`linear`, `linear_1`:
fc1's and fc2's linears). Derived names must never look like one of those, or a bias add of fc1
reads as fc2's linear. The scheme:

- `N` — the buffer holding FX node N's value (the first node whose value lives in it: the op's
  result, a `getitem` of a multi-output op, or the copy that materializes a viewed output);
- `N__<k>`, `N__<role>` — a helper buffer lowered from N (`linear__1` is the matmul before
  `linear`'s bias add; `index_put__index`); `__` is the derived-name separator;
- an op is named after the buffer it writes; the k-th further op writing the same buffer
  (slices of a `cat`, a scatter over a copy) is `B.<k>`.

Buffer names stay identifiers because index tensors are named inside `IndirectAccess('...')`,
which `sympy.sympify` reads; op names never appear in an expression, so `.` is safe there and
cannot collide with a buffer. A derived name that happens to equal an FX name in the program
is skipped, so names are unique across the graph.

During lowering, buffers carry provisional names (`N__<k>`); `finish` picks the final ones and
renames the whole graph once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spyrec.frontend.program import numbered_name
from spyrec.indexing import Indirect, as_lin, substitute
from spyrec.ir import Access, Graph

SEPARATOR = "__"


@dataclass
class Names:
    """Provisional buffer names while lowering, and who they belong to."""

    reserved: frozenset[str]                              # every FX node name of the program
    taken: set[str] = field(default_factory=set)
    origin: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # -> (node, role)
    owner: dict[str, str] = field(default_factory=dict)   # buffer -> the node whose value it is
    owned: set[str] = field(default_factory=set)          # nodes that own a buffer

    def __post_init__(self) -> None:
        self.taken |= self.reserved

    def helper(self, node: str, role: str | None = None) -> str:
        """A provisional name for a buffer created while lowering `node`."""
        name = _first_free(node, role, self.taken)
        self.taken.add(name)
        self.origin[name] = (node, role)
        return name

    def claim(self, buffer: str, node: str) -> None:
        """`buffer` holds `node`'s value: it takes the node's name, unless an earlier node's
        value already lives in it or the node already has a buffer."""
        if buffer in self.origin and buffer not in self.owner and node not in self.owned:
            self.owner[buffer] = node
            self.owned.add(node)

    def final(self) -> dict[str, str]:
        """Provisional name -> final name, for every buffer created while lowering."""
        taken = set(self.reserved)
        mapping = {}
        for buffer, (node, role) in self.origin.items():  # creation order
            if buffer in self.owner:
                mapping[buffer] = self.owner[buffer]
                continue
            name = _first_free(node, role, taken)
            taken.add(name)
            mapping[buffer] = name
        return mapping


def _first_free(node: str, role: str | None, taken: set[str]) -> str:
    """`N__1`, `N__2`, … for numbered helpers; `N__role`, `N__role__2`, … for named ones."""
    if role is None:
        return numbered_name(node, taken, SEPARATOR)
    base = f"{node}{SEPARATOR}{role}"
    return base if base not in taken else numbered_name(base, taken, SEPARATOR, first=2)


def rename_graph(graph: Graph, mapping: dict[str, str]) -> None:
    """Rename buffers everywhere they are named (accesses, gathered indices, signature,
    constants), then name every op after the buffer it writes."""
    mapping = {old: new for old, new in mapping.items() if old != new}
    indirect = {Indirect(old): as_lin(Indirect(new)) for old, new in mapping.items()}

    def access(a: Access) -> Access:
        index = a.index
        if indirect and any(isinstance(x, Indirect) for x in index.free_atoms()):
            index = substitute(index, indirect)
        return Access(mapping.get(a.buffer, a.buffer), index)

    buffers = {}
    for name, buf in graph.buffers.items():
        buf.name = mapping.get(name, name)
        buffers[buf.name] = buf
    graph.buffers = buffers
    graph.outputs = [mapping.get(n, n) for n in graph.outputs]
    graph.constants = {mapping.get(n, n): v for n, v in graph.constants.items()}
    graph.mutated_buffers = {fqn: mapping.get(n, n) for fqn, n in graph.mutated_buffers.items()}
    writes: dict[str, int] = {}
    for op in graph.ops:
        op.inputs = tuple(access(a) for a in op.inputs)
        op.index_inputs = tuple(access(a) for a in op.index_inputs)
        op.output = access(op.output)
        k = writes.get(op.output.buffer, 0)
        writes[op.output.buffer] = k + 1
        op.name = op.output.buffer if k == 0 else f"{op.output.buffer}.{k}"
