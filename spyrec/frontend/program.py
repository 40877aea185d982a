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
- weights and constants are keyed by FQN (bf16 as uint16 bit patterns, with their host dtype in
  `state_dtypes`); FQNs stored in the same memory (tied weights) are in `aliases`. The fast
  reader stores a `StoredTensor` (shape and dtype, the bytes left in the archive) for each;
  `Program.state[fqn]` gives the numpy value (memory-mapped where the archive member is stored
  uncompressed), `Program.state.stored(fqn)` the reference itself, so compile never holds every
  weight at once (the writer converts each one from the archive into `weights.bin`);
- a dynamic-shape export is read at one binding of its symbols (`symbols.py`): every size,
  stride and size argument is an int, `sym_size` and other SymInt nodes are replaced by their
  value, and `Program.symbols` / `Program.symbolic_dims` record what may vary.
"""

from __future__ import annotations

import functools
import math
import os
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spyrec.ir.symbols import SymLength


class NeedsTorch(Exception):
    """The fast reader cannot express this program; the torch front end can try."""


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


@dataclass(frozen=True, eq=False)
class StoredTensor:
    """A tensor whose bytes stay in a zip member of the `.pt2` until something reads them.

    `dtype` is the numpy storage dtype in the archive's byte order (bf16 as `<u2`); `strides`
    and `offset` count elements of the member, as torch's weights config does. Anything that
    needs the values calls `np.asarray(t)` (or `t.load()`): a read-only array memory-mapped
    from the archive when the member is stored uncompressed and in native byte order, else
    read (the writer converts one such tensor at a time into `weights.bin`)."""

    path: Path
    member: str
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def host_dtype(self) -> np.dtype:
        """The dtype of the loaded array: native (little-endian) byte order."""
        return self.dtype.newbyteorder("=") if self.dtype.byteorder not in "=|" else self.dtype

    def is_contiguous(self) -> bool:
        return TensorMeta(self.shape, "", self.strides).is_contiguous()

    def _check(self, member_bytes: int) -> None:
        from spyrec.errors import InputFileError

        elems = member_bytes // self.itemsize
        last = self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.strides))
        if self.size and (self.offset < 0 or min(self.strides, default=0) < 0
                          or last >= elems):
            raise InputFileError(
                f"{self.path}: member {self.member} ({list(self.shape)}, strides "
                f"{list(self.strides)}, offset {self.offset}) does not fit its {elems}-element "
                f"payload; the archive is damaged. Export and save it again.")

    def load(self) -> np.ndarray:
        """The values (read-only): a memory map of the archive where possible."""
        if self.size == 0:
            return np.zeros(self.shape, dtype=self.host_dtype)
        file_size, data_at = _members(self.path, _identity(self.path))[self.member]
        self._check(file_size)
        start = data_at if self.dtype.isnative or self.itemsize == 1 else None
        if start is not None:
            flat = np.memmap(self.path, dtype=self.dtype, mode="r", offset=start,
                             shape=(file_size // self.itemsize,))
        else:
            with zipfile.ZipFile(self.path) as zf:
                flat = np.frombuffer(zf.read(self.member), dtype=self.dtype)
        view = np.lib.stride_tricks.as_strided(
            flat[self.offset:], shape=self.shape,
            strides=[s * self.itemsize for s in self.strides], writeable=False)
        if start is not None and self.is_contiguous():
            return view
        # .copy(order="C") keeps a 0-d tensor 0-d (np.ascontiguousarray would make it 1-d)
        out = view.copy(order="C").astype(self.host_dtype, copy=False)
        out.flags.writeable = False
        return out

    def __array__(self, dtype=None, copy=None):
        array = self.load()
        if dtype is not None and np.dtype(dtype) != array.dtype:
            return array.astype(dtype)
        return np.array(array) if copy else array


def _identity(path: Path) -> tuple:
    """Which file `path` is now (a replaced or rewritten archive is another)."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


@functools.lru_cache(maxsize=8)
def _members(path: Path, identity: tuple) -> dict[str, tuple[int, int | None]]:
    """Every member of the archive at `path` (whose file is `identity`): its size and the
    offset of its bytes in the file when they are stored plain (uncompressed, unencrypted,
    behind a well-formed local header), else None. Read once per archive: opening the zip for
    each weight parsed its whole directory again (Llama-3.2-1B: 147 weights x 157 entries,
    ~0.5 s of the weights thread, Python that also took the GIL from the passes)."""
    table: dict[str, tuple[int, int | None]] = {}
    with zipfile.ZipFile(path) as zf, open(path, "rb") as f:
        for info in zf.infolist():
            start = None
            if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1:
                f.seek(info.header_offset)
                header = f.read(30)
                if len(header) == 30 and header[:4] == b"PK\x03\x04":
                    name_len, extra_len = struct.unpack("<HH", header[26:30])
                    start = info.header_offset + 30 + name_len + extra_len
            table[info.filename] = (info.file_size, start)
    return table


class State(dict):
    """FQN -> value. Reading an entry (`state[fqn]`, `.get`) gives a numpy array, loading a
    `StoredTensor` on demand (not cached: a large weight is mapped, used and dropped);
    `stored(fqn)` gives what is held (the reference itself). `dict(state)` copies the
    references, not the values."""

    def __getitem__(self, key):
        value = super().__getitem__(key)
        return value.load() if isinstance(value, StoredTensor) else value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def stored(self, key):
        return super().__getitem__(key)


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
    # A dynamic-shape export is read at one binding of its symbols (every size above is an
    # int); these say which lengths may vary: symbol name -> its admissible lengths, and user
    # input or user output name -> {dim: symbol name} for each dim whose size is a symbol's.
    symbols: dict[str, SymLength] = field(default_factory=dict)
    symbolic_dims: dict[str, dict[int, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.state, State):   # dataclasses.replace passes a plain dict
            self.state = State(self.state)

    def node(self, name: str) -> Node:
        return self._by_name()[name]

    def users(self, name: str) -> list[Node]:
        """The nodes that take node `name`'s value as an argument, in graph order."""
        cache = self.__dict__.get("_users")
        if cache is None:
            cache = {}
            for node in self.nodes:
                for ref in refs_in((node.args, node.kwargs)):
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
        for ref in refs_in((node.args, node.kwargs)):
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


def refs_in(value):
    """Every `Ref` in a node argument, lists, tuples and dicts searched at any depth: the
    nodes an argument reads."""
    if isinstance(value, Ref):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from refs_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from refs_in(v)


def tensor_values(node: Node) -> list[TensorMeta]:
    """The tensor values a node produces (one, several, or none)."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return [v for v in vals if isinstance(v, TensorMeta)]


def numbered_name(base: str, taken: set[str], separator: str, first: int = 1) -> str:
    """`base`, `separator` and the first number from `first` that makes a name not in
    `taken`: how both the inliner (graph nodes) and the lowering (buffers) make a name unique."""
    k = first
    while f"{base}{separator}{k}" in taken:
        k += 1
    return f"{base}{separator}{k}"
