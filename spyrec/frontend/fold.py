"""Constant folding: evaluate at compile time, with numpy, what depends on no runtime value.

Real models build attention masks, position ids and rotary tables in the graph from shape-only
ops (`arange`, `cumsum`, `new_ones`, `index.Tensor`, `__and__`, `cos`, ...) and from constants
(a `position_ids` buffer, `inv_freq`). With static shapes these have one value for every run, so
`fold_constants` computes them once and hands the lowering a constant instead of ops it would
have to run on the device every time (most of which it cannot lower).

What is folded (works on the flat node list; no higher-order op is looked into):
- a node is *constant* when its op has a numpy implementation in `FOLDERS`, it produces one
  tensor of at most `MAX_FOLD_BYTES`, and every node it reads is a constant placeholder (a
  parameter, a buffer that no `buffer_mutation` output writes, a lifted constant) or another
  constant node. Anything reading a user input or a mutated buffer is data, never folded;
- a constant node that a remaining node (or the program output) reads is *materialized*: it
  becomes a placeholder of kind `constant` with the same name (so its users are untouched), FQN
  `_folded.<name>`, its value in `state` (bf16 as uint16 bits). Every other constant node is
  removed. Exceptions, which stay in the graph as ordinary (lowerable) nodes so that no weight is
  copied needlessly:
  - a pure view of state (view, transpose, slice, expand, a same-dtype copy, ... of a parameter
    with no arithmetic anywhere between them): materializing it would duplicate the weight,
    while the lowering expresses views as index maps for free. `linear`'s `t(weight)` stays;
  - a broadcasting view (`expand`) of a folded value, or one of several views of the same
    folded value (each layer's `unsqueeze` of the rotary `cos`): the value is materialized once
    and the views stay views of it;
  - a result of at least `MAX_GROWN_CONSTANT_BYTES` grown from much smaller inputs (a mask
    comparing position vectors, and what is computed from it at its size): it stays device
    ops over its small folded inputs, so no (queries × keys) table is stored.
- a parameter, buffer or constant read only by folded nodes is dropped from the program.

Dtype rules follow eager (`folders.py` says how; the rules themselves are `host_dtypes.py`).

Folding reads a weight's values only when numpy holds them as the numbers they are
(`host_dtypes.NP_DTYPES`; complex only into a conversion): a float8 weight's payload is raw
bytes, so nothing reading one is folded, whatever its size.

After folding, what is left lives on the device: a tensor of a dtype the device cannot store
(float64, uint16, complex) or spyrec does not compute with yet (float8) that folding did not
remove is refused (exit 3) by `device_dtypes.check_device_dtypes`, each one named with its
source line. So float64 arithmetic on shapes or constants that is cast to float32 before it
meets data costs nothing; a float64 input, output or runtime value is a clear refusal.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from spyrec.frontend.device_dtypes import (
    FOLDED_PREFIX, check_device_dtypes, drop_unused_host_only_state, host_only,
)
from spyrec.frontend.folders import CONVERSIONS, FOLDERS, VIEW_OPS, Call, computes
from spyrec.bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from spyrec.frontend.host_dtypes import CONVERTED_ONLY, ITEMSIZE, NP_DTYPES, NotFoldable, cast
from spyrec.frontend.lowerings import lowerable
from spyrec.frontend.program import InputSpec, Node, Program, Ref, TensorMeta, refs_in
from spyrec.frontend.quantized import kept_int8_weights

MAX_FOLD_BYTES = 16 * 1024 * 1024
MAX_GROWN_CONSTANT_BYTES = 1024 * 1024
"""The largest constant folding makes out of inputs much smaller than itself (GROWTH). Such a
result (a mask from comparing two position vectors, a broadcast, a `full`) stays as device
ops over its small folded inputs instead, so a causal or sliding-window mask never becomes a
(queries × keys) table: 4 GB at 32K tokens, which attention streaming K/V tiles would read
as many bytes as the scores themselves, where the compare reads two position vectors. 1 MiB
is the bool causal mask of 1,024 tokens, so tests at that size (fast enough for `make test`)
take the path 32K tokens take; the tiny models' masks (KiB) stay constants, as do tables
linear in the sequence (see GROWTH)."""
GROWTH = 256
"""How much larger than all its constant inputs together (in elements) a result must be to
be `MAX_GROWN_CONSTANT_BYTES`-capped: comparing positions [n, 1] with [1, n] grows n / 2 times
(so every mask of 512 or more positions), while the tables linear in the sequence (rotary
cos/sin: head_dim / 2 values per position, at most 128 for head dims up to 256) grow less
and stay constants: recomputing them would put cos/sin of large angles on the device."""
ASSERTS = {"aten._assert_tensor_metadata.default", "aten._assert_scalar.default"}
# ops that read only the dtype/device/shape of their first operand, never its values
LIKE_OPS = {"aten.new_ones.default", "aten.new_zeros.default", "aten.new_full.default",
            "aten.new_empty.default", "aten.ones_like.default", "aten.zeros_like.default",
            "aten.full_like.default"}


# --- the pass -------------------------------------------------------------------------------


def _numel(meta: TensorMeta) -> int:
    return int(np.prod(meta.shape, dtype=np.int64))


def _nbytes(meta: TensorMeta) -> int:
    return _numel(meta) * ITEMSIZE.get(meta.dtype, 8)


def _resolve(arg, values):
    if isinstance(arg, Ref):
        return values[arg.name]
    if isinstance(arg, (list, tuple)):
        return type(arg)(_resolve(a, values) for a in arg)
    if isinstance(arg, dict):
        return {k: _resolve(v, values) for k, v in arg.items()}
    return arg


class _StateValues(dict):
    """Placeholder name -> numpy value, read from `state` (bf16 decoded) only when asked."""

    def __init__(self, program: Program, fqns: dict[str, str]) -> None:
        super().__init__()
        self.program, self.fqns = program, fqns

    def __missing__(self, name):
        fqn = self.fqns[name]
        fqn = self.program.aliases.get(fqn, fqn)
        array = self.program.state[fqn]
        if self.program.state_dtypes.get(fqn) == "bfloat16":
            array = bf16_bits_to_float32(array)
        self[name] = array
        return array


def fold_constants(program: Program, max_bytes: int | None = None) -> tuple[Program, int]:
    """`program` with its constant subgraphs evaluated (see the module docstring), and how many
    call nodes were removed (results above `max_bytes`, default `MAX_FOLD_BYTES` as it is when
    called, stay). What is left runs on the device, so a value of a dtype the device cannot
    store (float64) or spyrec does not compute with yet (float8) that folding did not remove
    is refused here (`check_device_dtypes`), naming each one, rather than failing deep in the
    lowering."""
    max_bytes = MAX_FOLD_BYTES if max_bytes is None else max_bytes
    program, count = _fold(program, max_bytes)
    program = drop_unused_host_only_state(program)
    check_device_dtypes(program, max_bytes)
    return program, count


def _fold(program: Program, max_bytes: int) -> tuple[Program, int]:
    """The steps of `fold_constants` before its dtype check: evaluate every constant node,
    decide which of them stay in the graph, then materialize the ones something left reads
    and remove the rest; with how many nodes were removed."""
    roots = _constant_roots(program)
    metas = {n.name: n.meta.get("val") for n in program.nodes}
    values = _StateValues(program, roots)
    const, reads = _evaluate(program, roots, metas, values, max_bytes)
    if not const:
        return program, 0
    users = _users(program)
    grown = _grown(program, const, reads, metas)
    keep = _kept(program, const, grown, roots, users, metas)
    materialize = [n for n in program.nodes if n.name in const and n.name not in keep
                   and n.target not in ASSERTS and _read_by_kept(n.name, users, keep)]
    removed = {n for n in const if n not in keep}
    if not removed:
        return program, 0
    return _rewrite(program, materialize, removed, values, roots, users, keep), len(removed)


def _evaluate(program: Program, roots: dict[str, str], metas: dict, values: _StateValues,
              max_bytes: int) -> tuple[set[str], dict[str, list[str]]]:
    """The constant call nodes, each one's value put in `values` (an assert is checked and has
    no value), and for every call node the nodes whose values it reads. A node is constant
    when everything it reads is constant state (`roots`) or an earlier constant node, it has a
    numpy folder, and its one tensor result is at most `max_bytes` of a dtype numpy holds;
    complex values only feed conversions (eager's kernels, not numpy's, do their arithmetic)."""
    const: set[str] = set()
    reads: dict[str, list[str]] = {}
    for node in program.nodes:
        if node.op != "call_function":
            continue
        args = node.args
        if node.target in LIKE_OPS and args and isinstance(args[0], Ref):
            args = (None,) + tuple(args[1:])  # only its metadata is read
        refs = reads[node.name] = [r.name for r in refs_in((args, node.kwargs))]
        if not all(r in roots or r in const for r in refs):
            continue
        if node.target in ASSERTS:
            if refs:
                const.add(node.name)
            continue
        if node.target not in CONVERSIONS and \
                any(getattr(metas[r], "dtype", None) in CONVERTED_ONLY for r in refs):
            continue  # complex arithmetic: eager's kernels, not numpy's
        out = node.meta.get("val")
        if node.target not in FOLDERS or not isinstance(out, TensorMeta) \
                or out.dtype not in NP_DTYPES or _nbytes(out) > max_bytes:
            continue
        try:
            value = FOLDERS[node.target](Call(node, metas), *_resolve(args, values),
                                         **_resolve(node.kwargs, values))
        except NotFoldable:
            continue
        value = np.asarray(value)
        if value.dtype != NP_DTYPES[out.dtype]:
            value = cast(value, out.dtype)
        if tuple(value.shape) != tuple(out.shape):
            raise AssertionError(f"constant folding {node.name} ({node.target}) gave shape "
                                 f"{value.shape}, the exporter recorded {out.shape}")
        values[node.name] = value
        const.add(node.name)
    return const, reads


def _users(program: Program) -> dict[str, list[Node]]:
    """Node name -> the nodes that read it, in program order, each reader once."""
    users: dict[str, list[Node]] = {}
    for node in program.nodes:
        for r in {r.name for r in refs_in((node.args, node.kwargs))}:
            users.setdefault(r, []).append(node)
    return users


def _read_by_kept(name: str, users: dict[str, list[Node]], keep: set[str]) -> bool:
    """Whether a node that stays in the graph, or the program's output, reads `name`."""
    return any(u.name in keep or u.op == "output" for u in users.get(name, []))


def _kept(program: Program, const: set[str], grown: set[str], roots: dict[str, str],
          users: dict[str, list[Node]], metas: dict) -> set[str]:
    """The nodes that stay in the graph: every call node that is not constant, then, until
    nothing changes, each lowerable constant node something staying reads that is better as a
    device op (grown from small inputs: `_grown`; a pure view of state; a view worth keeping),
    and each assert that checks a node that stays (an assert stays with what it checks)."""
    by_name = {n.name: n for n in program.nodes}
    keep = {n.name for n in program.nodes if n.op == "call_function" and n.name not in const}
    changed = True
    while changed:
        changed = False
        for name in sorted(const - keep):
            node = by_name[name]
            if not _read_by_kept(name, users, keep):
                continue
            if node.target in ASSERTS:
                continue
            if lowerable(node.target) and (
                    name in grown or _pure_view_of_state(name, by_name, roots, const, metas)
                    or _view_worth_keeping(node, const, users, metas)):
                keep.add(name)
                changed = True
        for name in sorted(const - keep):
            if by_name[name].target in ASSERTS and \
                    any(r.name in keep for r in refs_in((by_name[name].args,))):
                keep.add(name)
                changed = True
    return keep


def _pure_view_of_state(name: str, by_name: dict[str, Node], roots: dict[str, str],
                        const: set[str], metas: dict) -> bool:
    """A chain of views (no arithmetic) of a parameter, buffer or constant: materializing it
    would copy the weight, while the lowering expresses views as index maps for free."""
    node = by_name[name]
    if node.op == "placeholder":
        return name in roots
    if name not in const or node.target in ASSERTS or computes(node, metas):
        return False
    src = node.args[0] if node.args else None
    return isinstance(src, Ref) and _pure_view_of_state(src.name, by_name, roots, const, metas)


def _view_worth_keeping(node: Node, const: set[str], users: dict[str, list[Node]],
                        metas: dict) -> bool:
    """A view of a folded value that broadcasts it, or one of several views of it: the
    value is materialized once and the views stay (free index maps in the lowering)."""
    src = node.args[0] if node.args else None
    if not (node.target in VIEW_OPS and not computes(node, metas) and isinstance(src, Ref)
            and src.name in const):
        return False
    readers = [u for u in users.get(src.name, []) if u.target not in ASSERTS]
    return _numel(metas[node.name]) > _numel(metas[src.name]) or len(readers) > 1


def _constant_roots(program: Program) -> dict[str, str]:
    """Placeholder name -> FQN of the state folding may read: parameters, buffers no output
    mutates and lifted constants, of a dtype whose stored values numpy reads as the numbers
    they are (NP_DTYPES, CONVERTED_ONLY). A float8 payload is raw bytes, not its values: what
    reads one is never folded (it stays 8-bit for the device, or is refused there); nor is
    an int8 weight's dequantization (`quantized.kept_int8_weights`)."""
    mutated = {s.target for s in program.outputs if s.kind == "buffer_mutation"}
    readable = set(NP_DTYPES) | set(CONVERTED_ONLY)
    kept = kept_int8_weights(program)       # dequantized on chip, never folded to 16 bits
    return {s.name: s.target for s in program.inputs
            if s.kind in ("parameter", "buffer", "constant") and s.target not in mutated
            and s.name not in kept
            and s.target is not None
            and program.state_dtypes.get(program.aliases.get(s.target, s.target)) in readable}


def _grown(program: Program, const: set[str], reads: dict[str, list[str]],
           metas: dict[str, TensorMeta]) -> set[str]:
    """The constant nodes that stay device ops (when something left in the graph reads them):
    a lowerable result of at least `MAX_GROWN_CONSTANT_BYTES` that is `GROWTH` times larger
    than its constant inputs together, or that reads such a result (the `&` of two masks,
    their broadcast). Their small inputs are materialized instead; a small result computed
    from them (a reduction) keeps its folded value. The result and its inputs must be of
    dtypes the device stores: float64 arithmetic on shapes folds, whatever its size (on the
    device it would be refused)."""
    grown: set[str] = set()
    for node in program.nodes:
        name = node.name
        if name not in const or node.target in ASSERTS or not lowerable(node.target) \
                or _nbytes(metas[name]) < MAX_GROWN_CONSTANT_BYTES:
            continue
        inputs = reads[name]
        if any(host_only(metas[r].dtype) for r in [name, *inputs]):
            continue
        if any(r in grown for r in inputs) or \
                GROWTH * sum(_numel(metas[r]) for r in inputs) <= _numel(metas[name]):
            grown.add(name)
    return grown


def _rewrite(program: Program, materialize: list[Node], removed: set[str], values, roots,
             users, keep) -> Program:
    state, dtypes = dict(program.state), dict(program.state_dtypes)
    new_specs, new_nodes = [], []
    for node in materialize:
        meta: TensorMeta = node.meta["val"]
        fqn = FOLDED_PREFIX + node.name
        while fqn in state:
            fqn += "_"
        value = np.array(values[node.name], order="C")  # keeps 0-dim values 0-dim
        state[fqn] = float32_to_bf16_bits(value) if meta.dtype == "bfloat16" else value
        dtypes[fqn] = meta.dtype
        strides = tuple(int(s) // value.itemsize for s in value.strides)
        placeholder_meta = {k: v for k, v in node.meta.items() if k != "val"}
        placeholder_meta["val"] = TensorMeta(tuple(meta.shape), meta.dtype, strides)
        placeholder_meta["folded_from"] = node.target  # for messages about the constant
        new_nodes.append(Node(node.name, "placeholder", node.name, meta=placeholder_meta))
        new_specs.append(InputSpec("constant", node.name, fqn))
    # state read only by removed nodes is dropped (the folded constants replace it)
    dead = {name for name in roots
            if users.get(name) and all(u.name in removed for u in users[name])}
    nodes = [n for n in program.nodes if n.name not in removed and n.name not in dead]
    last_placeholder = max((i for i, n in enumerate(nodes) if n.op == "placeholder"), default=-1)
    nodes[last_placeholder + 1:last_placeholder + 1] = new_nodes
    inputs = [s for s in program.inputs if s.name not in dead]
    first_user = next((i for i, s in enumerate(inputs) if s.kind == "user_input"), len(inputs))
    inputs[first_user:first_user] = new_specs
    return dataclasses.replace(program, nodes=nodes, inputs=inputs, state=state,
                               state_dtypes=dtypes)
