"""The exported program as the lowering sees it: plain data, no torch objects.

Two front ends produce a `Program`: `pt2json.read_program` reads the archive's graph JSON and
raw weights without importing torch (the default), and `from_torch.program_of` converts a
`torch.export.ExportedProgram` (after `torch.export.load` and, where needed, decompositions).
Both spell everything the same way, so the lowering — and therefore the output directory —
cannot tell them apart:

- an op target is its aten name without the `torch.ops.` prefix (`aten.add.Tensor`), a Python
  operator is `_operator.getitem`, a higher-order op `higher_order.<name>`;
- an argument that is another node's value is a `Ref`; dtypes, devices, layouts and memory
  formats are torch's names without the `torch.` prefix (`float16`, `cpu`, `strided`,
  `contiguous_format`);
- `meta["val"]` is a `TensorMeta` (or a list of them for multi-output nodes), `meta` also holds
  `stack_trace` and `nn_module_stack` when the exporter recorded them;
- weights and constants are numpy arrays keyed by FQN (bf16 as uint16 bit patterns, with their
  host dtype in `state_dtypes`); FQNs stored in the same memory (tied weights) are in `aliases`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Ref:
    """The value of node `name`, used as an argument."""

    name: str


@dataclass(frozen=True)
class TensorMeta:
    """Static shape, host dtype (torch's name: `float16`) and eager memory layout of a value."""

    shape: tuple[int, ...]
    dtype: str
    strides: tuple[int, ...] | None = None
    # Not compared: torch.export.load's fake tensors lose the offset of views (a split's second
    # part reads 0), the graph JSON keeps it. Only `as_strided` reads it.
    storage_offset: int = field(default=0, compare=False)

    def is_contiguous(self) -> bool:
        """Row-major in eager (dims of size 1 may have any stride), as torch defines it."""
        if self.strides is None:
            return False
        expected = 1
        for n, st in reversed(list(zip(self.shape, self.strides))):
            if n != 1 and st != expected:
                return False
            expected *= n
        return True


@dataclass
class Node:
    """One node of the exported graph, in the FX vocabulary (`placeholder`, `call_function`,
    `output`)."""

    name: str
    op: str
    target: str = ""
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)


@dataclass
class Subgraph:
    """The body of a higher-order op (placeholders, calls, an output node), as an argument."""

    name: str
    nodes: list[Node]


@dataclass(frozen=True)
class InputSpec:
    """`kind`: user_input, parameter, buffer, constant (a lifted tensor constant).
    `target`: the FQN of a parameter, buffer or constant; None for a user input."""

    kind: str
    name: str
    target: str | None = None


@dataclass(frozen=True)
class OutputSpec:
    """`kind`: user_output, buffer_mutation, user_input_mutation (and others spyrec refuses).
    `target`: the mutated buffer's FQN or user input's name."""

    kind: str
    name: str
    target: str | None = None


@dataclass
class Program:
    nodes: list[Node]
    inputs: list[InputSpec]
    outputs: list[OutputSpec]
    state: dict[str, np.ndarray]
    state_dtypes: dict[str, str]
    # fqn -> the first fqn stored in the same memory (tied weights): lowered as one buffer
    aliases: dict[str, str] = field(default_factory=dict)
    frontend: str = ""
    fallback_reason: str = ""  # why `--frontend auto` used torch, when it did
    constants_folded: int = 0  # call nodes `fold.fold_constants` evaluated away

    def node(self, name: str) -> Node:
        return self._by_name()[name]

    def users(self, name: str) -> list[Node]:
        """The nodes that take node `name`'s value as an argument, in graph order."""
        cache = self.__dict__.get("_users")
        if cache is None:
            cache = {}
            for node in self.nodes:
                for ref in _refs((node.args, node.kwargs)):
                    users = cache.setdefault(ref.name, [])
                    if not users or users[-1] is not node:
                        users.append(node)
            self.__dict__["_users"] = cache
        return cache.get(name, [])

    def _by_name(self) -> dict[str, Node]:
        cache = self.__dict__.get("_nodes_by_name")
        if cache is None or len(cache) != len(self.nodes):
            cache = {n.name: n for n in self.nodes}
            self.__dict__["_nodes_by_name"] = cache
        return cache


def check_program(program: Program, where: str) -> None:
    """The structure the lowering relies on: names unique, every reference to an earlier node,
    every signature entry a placeholder, one output node last, state for every constant."""
    from spyrec.errors import InputFileError

    def bad(what: str):
        return InputFileError(f"{where}: damaged exported program: {what}. Export and save it "
                              f"again.")

    seen: dict[str, Node] = {}
    for node in program.nodes:
        if node.name in seen:
            raise bad(f"two nodes are named {node.name!r}")
        for ref in _refs((node.args, node.kwargs)):
            if ref.name not in seen:
                raise bad(f"node {node.name!r} reads {ref.name!r}, which no earlier node defines")
        seen[node.name] = node
    if not program.nodes or program.nodes[-1].op != "output" or \
            sum(n.op == "output" for n in program.nodes) != 1:
        raise bad("the graph does not end in exactly one output node")
    outputs = program.nodes[-1].args[0] if program.nodes[-1].args else None
    if not isinstance(outputs, (list, tuple)) or len(outputs) != len(program.outputs):
        raise bad("the graph's outputs do not match its signature")
    for spec in program.inputs:
        node = seen.get(spec.name)
        if node is None or node.op != "placeholder":
            raise bad(f"signature input {spec.name!r} is not a graph input")
        if spec.kind != "user_input":
            fqn = program.aliases.get(spec.target, spec.target)
            if fqn not in program.state:
                raise bad(f"{spec.kind} {spec.target!r} has no stored value")


def _refs(value):
    if isinstance(value, Ref):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _refs(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _refs(v)


def tensor_values(node: Node) -> list[TensorMeta]:
    """The tensor values a node produces (one, several, or none)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return [v for v in vals if isinstance(v, TensorMeta)]
