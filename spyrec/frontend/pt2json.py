"""Read a `.pt2` into a `Program` without torch: the graph JSON and the raw weight payloads.

`torch.export.save` stores the graph as JSON (`models/<name>.json`, schema version in the file)
and every ordinary tensor as raw bytes described by a config (`dtype`, `sizes`, `strides`,
`storage_offset`). Reading those takes milliseconds, where `import torch` and
`torch.export.load` take seconds. `spyrec.pt2archive` has already refused anything pickled; this
module never unpickles either.

A dynamic-shape export is read at one binding of its symbols (`symbols.py`): the sizes stored
as expressions are evaluated there. What the JSON cannot express without torch (a graph argument
of a kind this reader does not know, a script object) raises `NeedsTorch`, so `--frontend auto`
can fall back to the torch front end and say why.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import numpy as np

from spyrec.errors import InputFileError, UnsupportedProgram
from spyrec.frontend.functionalize import functionalize
from spyrec.frontend.checks import drop_check_only, static_condition
from spyrec.frontend.sources import source_for_message
from spyrec.frontend.inline import inline_higher_order_ops
from spyrec.frontend.view_writes import functional_view_writes
from spyrec.frontend.program import (
    InputSpec, NeedsTorch, Node, OutputSpec, Program, Ref, StoredTensor, Subgraph, TensorMeta,
    check_program,
)
from spyrec.frontend.symbols import Binding, ShapeFacts, bind_symbols
from spyrec.pt2archive import (
    CONSTANTS_CONFIG, MAX_INT64, SCALAR_TYPES, WEIGHTS_CONFIG, Archive, itemsize, open_archive,
    open_zip, short,
)

# torch/_export/serde/schema.py: the serialized format this reader understands.
SUPPORTED_SCHEMA_MAJOR = 8
MEMORY_FORMATS = {0: "unknown", 1: "contiguous_format", 2: "channels_last",
                  3: "channels_last_3d", 4: "preserve_format"}
LAYOUTS = {0: "unknown", 1: "sparse_coo", 2: "sparse_csr", 3: "sparse_csc", 4: "sparse_bsr",
           5: "sparse_bsc", 6: "_mkldnn", 7: "strided"}
INPUT_KINDS = {"user_input": None, "parameter": "parameter_name", "buffer": "buffer_name",
               "tensor_constant": "tensor_constant_name"}
OUTPUT_KINDS = {"user_output": None, "buffer_mutation": "buffer_name",
                "user_input_mutation": "user_input_name", "loss_output": None,
                "gradient_to_parameter": "parameter_name",
                "gradient_to_user_input": "user_input_name", "token": None,
                "parameter_mutation": "parameter_name"}


def read_program(path: str | Path, archive: Archive | None = None,
                 bind: dict[str, int] | None = None) -> Program:
    """The Program stored in `path`, read without torch, at the binding `bind` of its symbols
    (symbol -> length; None: each at its maximum). A graph JSON of the wrong shape (a damaged
    or hand-edited file) is one InputFileError, never a traceback."""
    archive = archive or open_archive(path)
    try:
        program = _read(archive, bind)
        check_program(program, str(archive.path))
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        raise InputFileError(f"{archive.path}: damaged exported program ({type(e).__name__}: "
                             f"{short(str(e))} in the graph JSON or a weights config). Export "
                             f"and save it again.") from None
    except RecursionError:
        raise InputFileError(f"{archive.path}: damaged exported program (the graph JSON nests "
                             f"deeper than any graph). Export and save it again.") from None
    return program


def _read(archive: Archive, bind: dict[str, int] | None) -> Program:
    with open_zip(archive.path) as zf:
        model = json.loads(zf.read(archive.model_member))
        _check_schema(archive, model)
        graph_module = model["graph_module"]
        inputs = [_input_spec(archive, s) for s in graph_module["signature"]["input_specs"]]
        outputs = [_output_spec(archive, s) for s in graph_module["signature"]["output_specs"]]
        binding = bind_symbols(_shape_facts(archive, model, inputs, outputs), bind)
        nodes = _GraphReader(archive, graph_module["graph"], binding).nodes()
        state, dtypes, aliases = {}, {}, {}
        byteorder = _byteorder(archive, zf)
        for config, folder in ((WEIGHTS_CONFIG, "data/weights/"),
                               (CONSTANTS_CONFIG, "data/constants/")):
            _read_payloads(archive, zf, config, folder, byteorder, state, dtypes, aliases)
    program = Program(nodes, inputs, outputs, state, dtypes, aliases, frontend="fast",
                      symbols=binding.symbols, symbolic_dims=binding.symbolic_dims)
    check_signature(program, str(archive.path))
    return functionalize(functional_view_writes(inline_higher_order_ops(program)))


def check_signature(program: Program, where: str) -> None:
    """The graph's inputs are the signature's, once each, and every parameter, buffer and
    constant is stored with the shape and dtype the graph gives its input: the lowering
    trusts both, so a hand-edited or damaged file stops here, naming the tensor. Both front
    ends call it (torch.export.load checks neither)."""
    placeholders = {n.name: n for n in program.nodes if n.op == "placeholder"}
    listed = [spec.name for spec in program.inputs]
    if sorted(placeholders) != sorted(listed):
        raise InputFileError(f"{where}: the graph's inputs {short(sorted(placeholders))} are "
                             f"not its signature's {short(sorted(listed))}; the graph JSON is "
                             f"damaged. Export and save it again.")
    for spec in program.inputs:
        fqn = program.aliases.get(spec.target, spec.target)
        if spec.kind == "user_input" or fqn not in program.state:
            continue        # a missing value: check_program names it
        meta = placeholders[spec.name].meta.get("val")
        stored = dict.__getitem__(program.state, fqn)     # not loaded: shape and dtype only
        dtype = program.state_dtypes.get(fqn)
        if isinstance(meta, TensorMeta) and (tuple(meta.shape) != tuple(stored.shape) or
                                             meta.dtype != dtype):
            raise InputFileError(
                f"{where}: {spec.kind} {spec.target!r} is stored as {dtype}"
                f"{short(list(stored.shape))} but the graph's input {spec.name!r} is "
                f"{meta.dtype}{short(list(meta.shape))}; the archive is damaged. Export and "
                f"save it again.")


def stored_tensors(archive: Archive) -> dict[str, tuple[StoredTensor, str]]:
    """FQN -> (its `StoredTensor`, host dtype) for every weight and constant in the archive,
    read from the configs alone (the torch front end swaps its in-memory copies for these)."""
    state, dtypes = {}, {}
    with open_zip(archive.path) as zf:
        byteorder = _byteorder(archive, zf)
        for config, folder in ((WEIGHTS_CONFIG, "data/weights/"),
                               (CONSTANTS_CONFIG, "data/constants/")):
            _read_payloads(archive, zf, config, folder, byteorder, state, dtypes, {})
    return {fqn: (state[fqn], dtypes[fqn]) for fqn in state}


def _check_schema(archive: Archive, model: dict) -> None:
    version = model.get("schema_version") or {}
    major = version.get("major") if isinstance(version, dict) else None
    if major != SUPPORTED_SCHEMA_MAJOR:
        raise NeedsTorch(f"{archive.path}: graph schema version {version!r} (this reader knows "
                         f"major {SUPPORTED_SCHEMA_MAJOR}); use --frontend torch")


def _shape_facts(archive: Archive, model: dict, inputs: list[InputSpec],
                 outputs: list[OutputSpec]) -> ShapeFacts:
    """The symbolic sizes, ranges and guards the graph JSON records, as `symbols.py` reads
    them (the torch front end gives the same strings)."""
    tensors = {name: [_size_text(s) for s in tv["sizes"]]
               for name, tv in model["graph_module"]["graph"]["tensor_values"].items()}
    strides = {name: [_size_text(s) for s in tv.get("strides", [])]
               for name, tv in model["graph_module"]["graph"]["tensor_values"].items()}
    return ShapeFacts(
        str(archive.path),
        {k: (v.get("min_val"), v.get("max_val"))
         for k, v in (model.get("range_constraints") or {}).items()},
        {s.name: (tensors[s.name], strides[s.name]) for s in inputs if s.kind == "user_input"},
        {s.name: tensors[s.name] for s in outputs if s.kind == "user_output" and
         s.name in tensors},
        tensors, list(model.get("guards_code") or []))


def _size_text(size: dict) -> int | str:
    """A stored size: an int, or the srepr text of its expression."""
    if "as_int" in size:
        return _int(size["as_int"])
    return str(size["as_expr"]["expr_str"])


def _int(value) -> int:
    """A JSON integer, exactly: torch writes sizes and int arguments as JSON integers, so a
    float (1.5), a bool or a string is a damaged file, not a number to round."""
    if type(value) is not int:
        raise TypeError(f"{short(value)} is not an integer")
    return value


class _GraphReader:
    """Turns the serialized graph into FX-style nodes, adding the `getitem` nodes torch's
    deserializer adds for ops with several outputs."""

    def __init__(self, archive: Archive, graph: dict, binding: Binding) -> None:
        self.archive = archive
        self.graph = graph
        self.binding = binding
        self.metas = {name: self._meta(name, tv) for name, tv in graph["tensor_values"].items()}

    def nodes(self) -> list[Node]:
        names = [_tensor_name(a, self.archive) for a in self.graph["inputs"]]
        out = [Node(n, "placeholder", n, meta={"val": self.metas[n]}) for n in names]
        for raw in drop_check_only(self.graph["nodes"], self.graph["outputs"]):
            out += self._call(raw)
        results = tuple(self._argument(a, "output") for a in self.graph["outputs"])
        vals = [self.metas.get(r.name) if isinstance(r, Ref) else r for r in results]
        out.append(Node("output", "output", "output", (results,), meta={"val": vals}))
        return out

    def _call(self, raw: dict) -> list[Node]:
        target = raw["target"].removeprefix("torch.ops.")
        name = raw.get("name") or self._single_output_name(raw)
        args, kwargs = [], {}
        for inp in raw.get("inputs", []):
            value = self._argument(inp["arg"], name)
            if inp.get("kind") == 2:
                kwargs[inp["name"]] = value
            else:
                args.append(value)
        meta = _metadata(raw.get("metadata") or {})
        outs = raw.get("outputs", [])
        if target == "sym_ite":
            static_condition(raw, name, source_for_message(Node(name, "", "", meta=meta)))
        if outs and all("as_sym_int" in o for o in outs):
            return []  # sym_size and arithmetic on sizes: each use reads the value (`sym_int`)
        single = self._single(outs)
        if single is not None and raw.get("is_hop_single_tensor_return") is False \
                and raw.get("name"):
            single = None  # a region returning a one-tuple: torch reads it through a getitem
        if single is not None:
            node = Node(single, "call_function", target, tuple(args), kwargs,
                        {**meta, "val": self.metas[single]})
            return [node]
        names = self._output_names(outs)
        if not names:  # an assertion or another op run for its effect
            return [Node(name, "call_function", target, tuple(args), kwargs,
                         {**meta, "val": None})]
        node = Node(name, "call_function", target, tuple(args), kwargs,
                    {**meta, "val": [self.metas[n] if n else None for n in names]})
        items = [Node(n, "call_function", "_operator.getitem", (Ref(name), i), {},
                      {**meta, "val": self.metas[n]}) for i, n in enumerate(names) if n]
        return [node, *items]

    @staticmethod
    def _single(outs: list) -> str | None:
        if len(outs) == 1 and "as_tensor" in outs[0]:
            return outs[0]["as_tensor"]["name"]
        return None

    def _single_output_name(self, raw: dict) -> str:
        names = [n for n in self._output_names(raw.get("outputs", [])) if n]
        if not names:
            raise InputFileError(f"{self.archive.path}: a {raw.get('target')} node has neither "
                                 f"a name nor a tensor output; the graph JSON is damaged.")
        return names[0]

    def _output_names(self, outs: list) -> list[str | None]:
        if len(outs) == 1 and "as_tensors" in outs[0]:
            return [t["name"] for t in outs[0]["as_tensors"]]
        names = []
        for o in outs:
            if "as_tensor" in o:
                names.append(o["as_tensor"]["name"])
            elif "as_none" in o:
                names.append(None)
            else:
                raise NeedsTorch(f"an op output of kind {next(iter(o), '?')}")
        return names

    def _argument(self, arg: dict, where: str):
        if not isinstance(arg, dict) or len(arg) != 1:
            raise InputFileError(f"{self.archive.path}: node {where!r}: malformed argument "
                                 f"{arg!r}; the graph JSON is damaged.")
        kind, value = next(iter(arg.items()))
        return _ARGUMENTS.get(kind, _unreadable)(self, kind, value, where)

    def _meta(self, name: str, tv: dict) -> TensorMeta:
        dtype = SCALAR_TYPES.get(tv.get("dtype"), (None,))[0]
        if dtype is None:
            raise InputFileError(f"{self.archive.path}: tensor {name!r} has unknown dtype code "
                                 f"{tv.get('dtype')!r}; the graph JSON is damaged or newer.")
        size = self.binding.size
        meta = TensorMeta(tuple(size(_size_text(s)) for s in tv["sizes"]), dtype,
                          tuple(size(_size_text(s)) for s in tv.get("strides", [])),
                          size(_size_text(tv.get("storage_offset", {"as_int": 0}))))
        problem = _extent_problem(meta)
        if problem:
            raise InputFileError(
                f"{self.archive.path}: tensor {name!r} has sizes {short(list(meta.shape))}, "
                f"strides {short(list(meta.strides))}, storage offset {meta.storage_offset}: "
                f"{problem}; the graph JSON is damaged. Export and save it again.")
        return meta

    def sym_int(self, value: dict) -> int:
        """A SymInt argument at the binding: a constant, an expression, or a named value."""
        if "as_name" in value:
            value = self.graph["sym_int_values"][value["as_name"]]
        return self.binding.size(_size_text(value))


def _extent_problem(meta: TensorMeta) -> str | None:
    """What is wrong with a tensor value's sizes, strides and offset at the binding: a
    negative one, strides that do not match the sizes, or an element count or extent that
    overflows int64 (`TensorMeta` dtypes are torch's names, SCALAR_TYPES's)."""
    numbers = (*meta.shape, *meta.strides, meta.storage_offset)
    if any(n < 0 for n in numbers):
        return "a negative size, stride or offset"
    if meta.strides and len(meta.strides) != len(meta.shape):
        return f"{len(meta.shape)} sizes but {len(meta.strides)} strides"
    size = next(itemsize(code) for name, code in SCALAR_TYPES.values() if name == meta.dtype)
    extent = meta.storage_offset + sum((n - 1) * s for n, s in zip(meta.shape, meta.strides))
    if math.prod(meta.shape) * size > MAX_INT64 or (extent + 1) * size > MAX_INT64:
        return "more elements than a 64-bit size can count"
    return None


def _tensor_name(arg: dict, archive: Archive) -> str:
    if "as_tensor" in arg:
        return arg["as_tensor"]["name"]
    for kind in ("as_int", "as_float", "as_bool", "as_none", "as_string"):
        if kind in arg:
            raise UnsupportedProgram(f"{archive.path}: a graph input is a constant {kind[3:]}; "
                                     f"only tensor inputs are supported")
    raise NeedsTorch(f"a graph input of kind {next(iter(arg), '?')}")


def _float(value) -> float:
    if isinstance(value, str):  # torch writes non-finite floats as strings
        return {"inf": math.inf, "-inf": -math.inf, "infinity": math.inf,
                "-infinity": -math.inf, "nan": math.nan}[value.strip().lower()]
    return float(value)


def _device(value: dict) -> str:
    index = value.get("index")
    return value["type"] if index is None else f"{value['type']}:{index}"


def _unreadable(reader, kind, value, where):
    raise NeedsTorch(f"node {where!r} has an argument of kind {kind}")


def _graph(reader, kind, value, where):
    """A higher-order op's body; its tensor values are described inside it."""
    return Subgraph(value["name"],
                    _GraphReader(reader.archive, value["graph"], reader.binding).nodes())


def _optional_tensor(reader, kind, value, where):
    return Ref(value["as_tensor"]["name"]) if "as_tensor" in value else None


_ARGUMENTS = {
    "as_none": lambda r, k, v, w: None,
    "as_tensor": lambda r, k, v, w: Ref(v["name"]),
    "as_tensors": lambda r, k, v, w: [Ref(t["name"]) for t in v],
    "as_optional_tensor": _optional_tensor,
    "as_optional_tensors": lambda r, k, v, w: [_optional_tensor(r, k, t, w) for t in v],
    "as_int": lambda r, k, v, w: _int(v),
    "as_ints": lambda r, k, v, w: [_int(x) for x in v],
    "as_int_lists": lambda r, k, v, w: [[_int(x) for x in xs] for xs in v],
    "as_float": lambda r, k, v, w: _float(v),
    "as_floats": lambda r, k, v, w: [_float(x) for x in v],
    "as_float_lists": lambda r, k, v, w: [[_float(x) for x in xs] for xs in v],
    "as_bool": lambda r, k, v, w: bool(v),
    "as_bools": lambda r, k, v, w: [bool(x) for x in v],
    "as_string": lambda r, k, v, w: str(v),
    "as_strings": lambda r, k, v, w: [str(x) for x in v],
    "as_scalar_type": lambda r, k, v, w: SCALAR_TYPES[v][0],
    "as_memory_format": lambda r, k, v, w: MEMORY_FORMATS[v],
    "as_layout": lambda r, k, v, w: LAYOUTS[v],
    "as_device": lambda r, k, v, w: _device(v),
    "as_sym_int": lambda r, k, v, w: r.sym_int(v),
    "as_graph": _graph,
    "as_sym_ints": lambda r, k, v, w: [r.sym_int(x) for x in v],
}


def _metadata(raw: dict) -> dict:
    meta = {}
    if isinstance(raw, dict) and isinstance(raw.get("stack_trace"), str) and raw["stack_trace"]:
        meta["stack_trace"] = raw["stack_trace"]
    if isinstance(raw, dict) and isinstance(raw.get("nn_module_stack"), str) and \
            raw["nn_module_stack"]:
        meta["nn_module_stack"] = _module_stack(raw["nn_module_stack"])
    return meta


def _module_stack(text: str) -> dict[str, tuple[str, str]]:
    """`key,path,type;key,path,type` -> {key: (path, type)}, as torch's deserializer does
    (a path may itself contain commas inside brackets, so split from both ends)."""
    stack = {}
    for entry in text.split(";"):
        if not entry:
            continue
        key, _, rest = entry.partition(",")
        path, _, type_name = rest.rpartition(",")
        stack[key] = (path, type_name)
    return stack


def _input_spec(archive: Archive, spec: dict) -> InputSpec:
    kind, body = next(iter(spec.items()))
    if kind not in INPUT_KINDS:
        raise NeedsTorch(f"an input of kind {kind}")
    name = _tensor_name(body["arg"], archive) if kind == "user_input" else body["arg"]["name"]
    target = body.get(INPUT_KINDS[kind]) if INPUT_KINDS[kind] else None
    return InputSpec("constant" if kind == "tensor_constant" else kind, name, target)


def _output_spec(archive: Archive, spec: dict) -> OutputSpec:
    kind, body = next(iter(spec.items()))
    if kind not in OUTPUT_KINDS:
        raise NeedsTorch(f"an output of kind {kind}")
    arg = body["arg"]
    name = arg["as_tensor"]["name"] if "as_tensor" in arg else arg.get("name", "")
    target = body.get(OUTPUT_KINDS[kind]) if OUTPUT_KINDS[kind] else None
    return OutputSpec(kind, name, target)


def _byteorder(archive: Archive, zf: zipfile.ZipFile) -> str:
    member = archive.root + "byteorder"
    order = zf.read(member).decode().strip() if member in zf.namelist() else "little"
    if order not in ("little", "big"):
        raise InputFileError(f"{archive.path}: byteorder {order!r} is neither little nor big")
    return "<" if order == "little" else ">"


def _read_payloads(archive: Archive, zf: zipfile.ZipFile, config_name: str, folder: str,
                   byteorder: str, state: dict, dtypes: dict, aliases: dict) -> None:
    """A `StoredTensor` per FQN: shape, dtype and where its bytes are; nothing is read here
    (weights can be gigabytes: each is read when something needs it, program.py)."""
    config = json.loads(zf.read(archive.root + config_name))["config"]
    views: dict[str, str] = {}
    for fqn, meta in config.items():
        view = json.dumps([folder, meta.get("path_name"), meta.get("tensor_meta")],
                          sort_keys=True)
        if view in views:  # the same bytes seen the same way: a tied weight
            aliases[fqn] = views[view]
        views.setdefault(view, fqn)
        tmeta = meta.get("tensor_meta")
        if tmeta is None:
            raise NeedsTorch(f"{fqn} has no tensor_meta")
        member = archive.root + folder + meta["path_name"]
        state[fqn], dtypes[fqn] = _tensor(archive, fqn, tmeta, member, byteorder)


def _tensor(archive: Archive, fqn: str, tmeta: dict, member: str,
            byteorder: str) -> tuple[StoredTensor, str]:
    """A weight's `StoredTensor`; its sizes, strides and offset were checked against its
    payload when the archive was opened (`pt2archive.tensor_span`)."""
    dtype, code = SCALAR_TYPES.get(tmeta["dtype"], (None, None))
    if code is None:
        raise UnsupportedProgram(f"{archive.path}: weight {fqn!r} has dtype "
                                 f"{dtype or short(tmeta['dtype'])}, which spyrec does not read")
    sizes = [_int(s["as_int"]) for s in tmeta["sizes"]]  # a weight's shape is never symbolic
    strides = [_int(s["as_int"]) for s in tmeta["strides"]]
    offset = _int(tmeta.get("storage_offset", {"as_int": 0})["as_int"])
    np_dtype = np.dtype(code).newbyteorder(byteorder) if code != "?" else np.dtype("?")
    return StoredTensor(Path(archive.path), member, np_dtype, tuple(sizes), tuple(strides),
                        offset), dtype
