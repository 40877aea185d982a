"""Load an output directory: manifest.json, every sdsc_<n>.json and the bundles.

Every JSON file on disk goes through its schema in `spyrec/schemas/` first (a compiled check,
jsonschema for the message when it fails), so the format is defined in one place and a bad
file gives one message naming the file and the JSON path (`sdsc_3.json: at
$.args[1].device_size: ...`); the compiler's own files, still in memory, skip the schema.
Then the structural facts the schema cannot say (lengths that must agree, a stick dim of 128
bytes, coordinates that parse) are checked while building the `specs` dataclasses.
Coordinate strings are parsed exactly once, here.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from spyrec.device import DEVICE_MEMORY_BYTES, format_bytes
from spyrec.errors import InputFileError
from spyrec.indexing import ExprSyntaxError, Indirect, Var, parse_expr
from spyrec.layout import DeviceLayout
from spyrec.layout.dtypes import DEVICE_DTYPES, device_dtype_for
from spyrec.sim.schemacheck import Unsupported, compile_schema
from spyrec.sim.specs import (
    ArgSpec, CoreSplit, Execute, KernelSpec, Manifest, OpSpec, TensorSpec)

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schemas"
_SDSC_NAME = re.compile(r"^sdsc_(\d+)\.json$")


@dataclass(frozen=True)
class WeightEntry:
    """Where one constant's device form lies in `weights.bin` (manifest `weights.tensors[]`):
    exactly its tensor's `device_bytes`, in its layout."""

    name: str
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Weights:
    """The manifest's `weights` section, checked against the tensors it describes."""

    file: str
    nbytes: int
    entries: tuple[WeightEntry, ...]    # manifest order


@dataclass(frozen=True)
class Program:
    """Everything the simulator needs from an output directory, loaded and checked."""

    out_dir: Path
    manifest: Manifest
    ops: dict[str, OpSpec]                  # by file name
    trace: tuple[tuple[str, Execute], ...]  # (kernel name, execute) in execution order
    weights: Weights | None = None          # None: a foreign bundle (no constants file)


@lru_cache(maxsize=None)
def _registry():
    """Every schema by its $id, so one schema can refer to another (opspecs -> sdsc args)."""
    from referencing import Registry, Resource

    resources = []
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


@lru_cache(maxsize=None)
def validator(schema_name: str):
    """The jsonschema validator of one schema file (`manifest`, `sdsc`, `opspecs`, `report`),
    built once. jsonschema is imported here, not at the top: the compiler's trusted path never
    validates and should not pay for the import."""
    import jsonschema

    path = SCHEMA_DIR / f"{schema_name}.schema.json"
    schema = json.loads(path.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, registry=_registry())


@lru_cache(maxsize=None)
def fast_check(schema_name: str):
    """The compiled yes/no check of one schema (schemacheck.py), or None where it does not
    cover the schema's keywords."""
    try:
        return compile_schema(SCHEMA_DIR, schema_name)
    except Unsupported:
        return None


def validate(data: object, schema_name: str, label: str) -> None:
    """InputFileError naming `label` and the JSON path of the most relevant violation.

    The compiled check answers for valid files (~10x faster than jsonschema, which is
    imported only when it says no); jsonschema stays the judge and writes the message."""
    check = fast_check(schema_name)
    if check is not None and check(data):
        return
    import jsonschema

    error = jsonschema.exceptions.best_match(validator(schema_name).iter_errors(data))
    if error is not None:
        raise InputFileError(f"{label}: at {error.json_path}: {_shorten(error.message)} "
                             f"(schema {schema_name}.schema.json); the file is not as spyrec "
                             f"compile wrote it: re-run spyrec compile")


def _shorten(message: str, limit: int = 200) -> str:
    """jsonschema quotes the whole offending value (a list of 3,200 core splits): keep the
    message one readable line by cutting the middle."""
    message = " ".join(message.split())
    if len(message) <= limit:
        return message
    return f"{message[:limit // 2]} … {message[-limit // 2:]}"


# Digests of texts that already passed their schema: even the compiled check costs ~0.5 ms per
# sdsc file, and tests and benchmarks load the same directory many times in one process.
_VALID: set[tuple[str, bytes]] = set()


def read_json(path: Path, schema_name: str) -> dict:
    """A JSON file of an output directory, parsed and checked against its schema."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputFileError(f"cannot read {path}: {e.strerror}") from None
    return parse_json(text, path, schema_name, trusted=False)


def parse_json(text: str, path: Path, schema_name: str, trusted: bool) -> dict:
    """Parse `text`; check it against its schema unless it is `trusted` (the compiler's own
    output, still in memory: nothing can have changed it since codegen built it)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    if trusted:
        return data
    key = (schema_name, hashlib.blake2b(text.encode("utf-8"), digest_size=20).digest())
    if key not in _VALID:
        validate(data, schema_name, str(path))
        _VALID.add(key)
    return data


class _Files:
    """Where a program's files come from: a directory on disk (untrusted: every JSON file is
    schema-checked), or the compiler's in-memory {name: text} (trusted: no schema pass, which
    is most of the load time; the structural checks still run)."""

    def __init__(self, out_dir: Path, texts: Mapping[str, str | bytes] | None = None):
        self.out_dir = out_dir
        self.texts = texts
        self.trusted = texts is not None

    def text(self, name: str) -> str:
        if self.texts is None:
            try:
                return (self.out_dir / name).read_text(encoding="utf-8")
            except OSError as e:
                raise InputFileError(f"cannot read {self.out_dir / name}: {e.strerror}") \
                    from None
        if name not in self.texts:
            raise InputFileError(f"{self.out_dir / name}: no such file in the output")
        text = self.texts[name]
        return text.decode("utf-8") if isinstance(text, bytes) else text

    def json(self, name: str, schema_name: str) -> dict:
        if self.trusted:        # the compiler's printed document (codegen/writer.JsonText)
            doc = getattr(self.texts.get(name), "doc", None)
            if doc is not None:
                return doc
        return parse_json(self.text(name), self.out_dir / name, schema_name, self.trusted)


# --- manifest ---------------------------------------------------------------------------------


def _layout(label: str, size: list, stride_map: list, device_dtype: str) -> DeviceLayout:
    """A DeviceLayout, after the checks that DeviceLayout itself only asserts."""
    if len(size) != len(stride_map):
        raise InputFileError(f"{label}: device_size {size} and stride_map {stride_map} differ "
                             f"in length")
    lanes = DEVICE_DTYPES[device_dtype].elems_per_stick
    if size[-1] != lanes:
        raise InputFileError(f"{label}: the last device dim holds the stick lanes and must be "
                             f"{lanes} for {device_dtype}, got device_size {size}")
    return DeviceLayout(tuple(size), tuple(stride_map), device_dtype)


def _tensor(path: Path, i: int, t: dict) -> TensorSpec:
    label = f"{path}: at $.tensors[{i}] ('{t['name']}')"
    layout = _layout(label, t["device_size"], t["stride_map"], t["device_dtype"])
    expected = device_dtype_for(t["host_dtype"]).name
    if t["device_dtype"] != expected:
        raise InputFileError(f"{label}: host dtype {t['host_dtype']} is stored as {expected} on "
                             f"the device, not {t['device_dtype']}")
    if t["device_bytes"] != layout.device_bytes:
        raise InputFileError(f"{label}: device_bytes {t['device_bytes']} but the layout "
                             f"{list(layout.device_size)} needs {layout.device_bytes}")
    lx, lx_bytes = t.get("lx_address"), t.get("lx_bytes_per_core")
    if (t["hbm_address"] is None) == (lx is None) or (lx is None) != (lx_bytes is None):
        raise InputFileError(f"{label}: a tensor has either an hbm_address, or an lx_address "
                             f"with lx_bytes_per_core (got hbm_address {t['hbm_address']}, "
                             f"lx_address {lx}, lx_bytes_per_core {lx_bytes}); re-run spyrec "
                             f"compile")
    if lx is not None and t["role"] != "intermediate":
        raise InputFileError(f"{label}: a program {t['role']} cannot live in LX (lx_address "
                             f"{lx}): the host reads and writes HBM only; re-run spyrec compile")
    return TensorSpec(t["name"], t["role"], tuple(t["host_shape"]), t["host_dtype"], layout,
                      t["hbm_address"], t["device_bytes"], t["source"], lx, lx_bytes)


MANIFEST_FORMAT = "spyrec-manifest/3"


def load_manifest(files: _Files) -> Manifest:
    return _load_manifest(files)[0]


def _load_manifest(files: _Files) -> tuple[Manifest, Weights]:
    path = files.out_dir / "manifest.json"
    if not files.trusted:
        _check_format(path, files.text("manifest.json"))
    data = files.json("manifest.json", "manifest")
    tensors: dict[str, TensorSpec] = {}
    for i, t in enumerate(data["tensors"]):
        if t["name"] in tensors:
            raise InputFileError(f"{path}: at $.tensors[{i}]: tensor '{t['name']}' is listed "
                                 f"twice")
        tensors[t["name"]] = _tensor(path, i, t)
    for key in ("inputs", "outputs"):
        for i, name in enumerate(data[key]):
            if name not in tensors:
                raise InputFileError(f"{path}: at $.{key}[{i}]: no tensor named '{name}' in "
                                     f"$.tensors")
    for i, name in enumerate(data["inputs"]):
        if tensors[name].role != "input":
            raise InputFileError(f"{path}: at $.inputs[{i}]: tensor '{name}' has role "
                                 f"{tensors[name].role}, not input")
    if data["hbm_bytes"] > DEVICE_MEMORY_BYTES:
        raise InputFileError(f"{path}: at $.hbm_bytes: {format_bytes(data['hbm_bytes'])} is more "
                             f"than the device has ({format_bytes(DEVICE_MEMORY_BYTES)}); the "
                             f"file was changed or is damaged: re-run spyrec compile")
    for i, k in enumerate(data["kernels"]):
        if Path(k["bundle"]).name != k["bundle"] or k["bundle"] in (".", ".."):
            raise InputFileError(f"{path}: at $.kernels[{i}].bundle: {k['bundle']!r} is not a "
                                 f"file name in the output directory; re-run spyrec compile")
    kernels = tuple(KernelSpec(k["name"], k["bundle"], tuple(k["ops"]))
                    for k in data["kernels"])
    mutated = tuple(data.get("mutated_buffers", {}).items())
    for fqn, name in mutated:
        if name not in tensors:
            raise InputFileError(f"{path}: at $.mutated_buffers.{fqn}: no tensor named "
                                 f"'{name}' in $.tensors")
    lx_args = _arg_names(path, data, tensors, "lx_args", "LX", lambda t: t.lx_address)
    hbm_args = _arg_names(path, data, tensors, "hbm_args", "HBM", lambda t: t.hbm_address)
    return (Manifest(tuple(data["inputs"]), tuple(data["outputs"]), tensors, kernels,
                     data["hbm_bytes"], mutated, lx_args, hbm_args),
            _weights(path, data["weights"], tensors))


def _check_format(path: Path, text: str) -> None:
    """A directory an older spyrec wrote (manifest format 1: constants.npz, program.pt2) is
    named as such rather than failing the schema on its first difference."""
    match = re.search(r'"format"\s*:\s*"(spyrec-manifest/[^"]*)"', text[:4096])
    if match and match.group(1) != MANIFEST_FORMAT:
        raise InputFileError(f"{path}: format {match.group(1)}, written by another spyrec "
                             f"version; this one reads {MANIFEST_FORMAT} (weights.bin in device "
                             f"form): re-run spyrec compile")


def _weights(path: Path, section: dict, tensors: dict[str, TensorSpec]) -> Weights:
    """`weights`: every constant listed once, with its tensor's dtype and shape, aligned, and
    inside the file's `bytes`, without overlaps."""
    entries, end = [], 0
    for i, w in enumerate(section["tensors"]):
        label = f"{path}: at $.weights.tensors[{i}] ('{w['name']}')"
        t = tensors.get(w["name"])
        if t is None or t.role != "constant":
            raise InputFileError(f"{label}: not a constant tensor of $.tensors; re-run spyrec "
                                 f"compile")
        if w["device_dtype"] != t.layout.device_dtype or \
                tuple(w["device_size"]) != tuple(t.layout.device_size):
            raise InputFileError(f"{label}: {w['device_dtype']} {w['device_size']}, the tensor's "
                                 f"layout is {t.layout.device_dtype} "
                                 f"{list(t.layout.device_size)}; re-run spyrec compile")
        nbytes = t.device_bytes
        if w["bytes"] != nbytes:
            raise InputFileError(f"{label}: bytes {w['bytes']}, the tensor's device_bytes are "
                                 f"{nbytes}; re-run spyrec compile")
        if w["offset"] % section["alignment"] or w["offset"] < end:
            raise InputFileError(f"{label}: offset {w['offset']} is not a multiple of "
                                 f"{section['alignment']} past the previous tensor's end "
                                 f"({end}); re-run spyrec compile")
        end = w["offset"] + nbytes
        if end > section["bytes"]:
            raise InputFileError(f"{label}: ends at byte {end}, past the end of "
                                 f"{section['file']} ($.weights.bytes {section['bytes']}); "
                                 f"re-run spyrec compile")
        entries.append(WeightEntry(w["name"], w["offset"], nbytes))
    listed = {e.name for e in entries}
    if len(listed) != len(entries):
        raise InputFileError(f"{path}: at $.weights.tensors: a tensor is listed twice; re-run "
                             f"spyrec compile")
    missing = [n for n, t in tensors.items() if t.role == "constant" and n not in listed]
    if missing:
        raise InputFileError(f"{path}: at $.weights.tensors: no values for the constant(s) "
                             f"{', '.join(missing)}; re-run spyrec compile")
    return Weights(section["file"], section["bytes"], tuple(entries))


def check_weights_file(out_dir: Path, weights: Weights | None) -> None:
    """weights.bin is there and as long as the manifest says (a truncated copy is caught here,
    before anything runs, not as a short read in the middle)."""
    if weights is None or not weights.entries:
        return
    path = out_dir / weights.file
    try:
        size = path.stat().st_size
    except OSError:
        raise InputFileError(f"{path}: missing; it holds the program's weights "
                             f"(manifest.json $.weights): re-run spyrec compile") from None
    if not path.is_file() or size != weights.nbytes:
        raise InputFileError(f"{path}: {size} bytes, manifest.json says {weights.nbytes} "
                             f"($.weights.bytes); the file is truncated or damaged: re-run "
                             f"spyrec compile")


def _arg_names(path: Path, data: dict, tensors: dict, key: str, memory: str,
               address) -> dict:
    """The manifest's `lx_args` / `hbm_args` table ({file: {arg index: tensor}}), each name a
    tensor of $.tensors that lives in that memory (`address(tensor)` is not None)."""
    table = data.get(key, {})
    for file, held in table.items():
        for i, name in held.items():
            if name not in tensors or address(tensors[name]) is None:
                raise InputFileError(f"{path}: at $.{key}.{file}.{i}: '{name}' is not an "
                                     f"{memory} tensor of $.tensors; re-run spyrec compile")
    return table


# --- sdsc -------------------------------------------------------------------------------------


def _coordinates(label: str, texts: list[str], layout: DeviceLayout) -> tuple:
    if len(texts) != len(layout.device_size):
        raise InputFileError(f"{label}.device_coordinates: {len(texts)} coordinates for "
                             f"{len(layout.device_size)} device dims")
    out = []
    for j, text in enumerate(texts):
        try:
            out.append(parse_expr(text))
        except ExprSyntaxError as e:
            raise InputFileError(f"{label}.device_coordinates[{j}]: {e}") from None
    return tuple(out)


def _arg(label: str, a: dict, index_names: set[str]) -> ArgSpec:
    layout = _layout(label, a["device_size"], a["stride_map"], a["device_dtype"])
    alloc = a["allocation"]
    return ArgSpec(
        name=a["name"], is_input=a["is_input"], arg_index=a["arg_index"], layout=layout,
        coordinates=_coordinates(label, a["device_coordinates"], layout),
        coordinate_text=tuple(a["device_coordinates"]),
        hbm_address=alloc.get("hbm"), lx_offset=alloc.get("lx"), operand=a["operand"],
        per_tile_fixed=a["per_tile_fixed"], is_index=a["name"] in index_names)


def _indirect_names(data: dict) -> set[str]:
    names = set()
    for a in data["args"]:
        for text in a["device_coordinates"]:
            names.update(re.findall(r"IndirectAccess\('([^']*)'\)", text))
    return names


def load_op(files: _Files, filename: str, manifest: Manifest,
            first: Execute | None = None, lookup: tuple | None = None) -> OpSpec:
    """One `sdsc_<n>.json`: SuperDSC (sim/superdsc.py), the only form the compiler writes, or
    the `spyrecAccess_` test-fixture form (docs/formats.md) in which hand-written simulator
    tests state device coordinates, wrong ones included. `first`: the op's first execution,
    whose operands name the tensors of symbolic start addresses."""
    path = files.out_dir / filename
    doc = files.json(filename, "sdsc")
    (key, wrapper), = doc.items()
    m = _SDSC_NAME.match(filename)
    index = int(key.split("_", 1)[0])
    if m and int(m.group(1)) != index:
        raise InputFileError(f"{path}: the top key {key!r} is op {index}, but the file is "
                             f"named {filename}")
    if "spyrecAccess_" not in wrapper:
        from spyrec.sim.superdsc import _Reader

        resolve, lx_names = lookup or manifest_index(manifest)
        return _Reader(path, key, wrapper, resolve, first,
                       lx_names, manifest.lx_args.get(filename, {}),
                       _held_resolver(manifest, filename), files.trusted).op(
                           filename, index)
    return _load_access(path, filename, index, wrapper["spyrecAccess_"])


def manifest_index(manifest: Manifest) -> tuple:
    """What the SuperDSC reader looks tensors up in (HBM by address, LX by offset): built once
    per program, not once per op."""
    return _resolver(manifest), _lx_names(manifest)


def _resolver(manifest: Manifest):
    """address -> (tensor name, first byte, bytes) of the manifest tensor holding it."""
    spans = sorted((t.hbm_address, t.device_bytes, t.name) for t in manifest.tensors.values()
                   if t.hbm_address is not None)
    starts = [a for a, _, _ in spans]

    def resolve(address: int):
        import bisect

        k = bisect.bisect_right(starts, address) - 1
        if k >= 0 and address < spans[k][0] + spans[k][1]:
            return spans[k][2], spans[k][0], spans[k][1]
        return None
    return resolve


def _held_resolver(manifest: Manifest, filename: str):
    """arg index -> (tensor name, first byte, bytes) for the args manifest hbm_args names (their
    bytes are reused over time, so the address alone names two tensors)."""
    held = manifest.hbm_args.get(filename, {})

    def named(i: int):
        t = manifest.tensors.get(held.get(str(i), ""))
        return None if t is None else (t.name, t.hbm_address, t.device_bytes)
    return named


def _lx_names(manifest: Manifest) -> dict[int, list[str]]:
    """LX tensors by offset, manifest order: an LX arg names its tensor by its offset."""
    names: dict[int, list[str]] = {}
    for t in manifest.tensors.values():
        if t.lx_address is not None:
            names.setdefault(t.lx_address, []).append(t.name)
    return names


def _load_access(path: Path, filename: str, index: int, data: dict) -> OpSpec:
    index_names = _indirect_names(data)
    args = tuple(_arg(f"{path}: at $.args[{i}]", a, index_names)
                 for i, a in enumerate(data["args"]))
    space = {v: (n, k) for v, (n, k) in data["iteration_space"].items()}
    cores = tuple(CoreSplit(c["core"], {v: (lo, hi) for v, (lo, hi) in c["ranges"].items()},
                            tuple(c["arg_start_bytes"])) for c in data["cores"])
    spec = OpSpec(file=filename, index=index, op=data["op"], name=data["name"],
                  source=data["source"], is_reduction=data["is_reduction"],
                  iteration_space=space, reduced=tuple(data["reduced"]),
                  constants=dict(data["op_info"].get("constants", {})), args=args, cores=cores)
    _check_structure(path, spec)
    return spec


def _check_structure(path: Path, spec: OpSpec) -> None:
    """Facts about args and vars that every later stage relies on."""
    def fail(where: str, msg: str) -> None:
        raise InputFileError(f"{path}: at $.{where}: {msg}")

    names = [a.name for a in spec.args]
    for i, a in enumerate(spec.args):
        if a.arg_index != i:
            fail(f"args[{i}].arg_index", f"{a.arg_index}, but arg_index is the position {i}")
        if a.is_input != (i < len(spec.args) - 1):
            fail(f"args[{i}].is_input", "args are the inputs followed by exactly one output")
        for j, coord in enumerate(a.coordinates):
            for leaf in coord.free_atoms():
                if isinstance(leaf, Var) and leaf.name not in spec.iteration_space:
                    fail(f"args[{i}].device_coordinates[{j}]",
                         f"'{leaf.name}' is not an iteration variable ({', '.join(spec.vars)})")
                if isinstance(leaf, Indirect) and (
                        leaf.tensor not in names or not spec.args[names.index(leaf.tensor)]
                        .is_input or leaf.tensor == a.name):
                    fail(f"args[{i}].device_coordinates[{j}]",
                         f"IndirectAccess('{leaf.tensor}') must name another input arg")
    seen_value = False
    for i, a in enumerate(spec.args[:-1]):
        if a.is_index and seen_value:
            fail(f"args[{i}]", f"index tensor '{a.name}' must come before the value inputs")
        seen_value = seen_value or not a.is_index
        if a.is_index and any(isinstance(x, Indirect) for c in a.coordinates
                              for x in c.free_atoms()):
            fail(f"args[{i}]", "an index tensor cannot itself be gathered")
    for v in spec.reduced:
        if v not in spec.iteration_space:
            fail("reduced", f"'{v}' is not an iteration variable")
    for k, core in enumerate(spec.cores):
        if set(core.ranges) != set(spec.iteration_space):
            fail(f"cores[{k}].ranges", f"vars {sorted(core.ranges)}, expected "
                                       f"{list(spec.vars)}")
        if len(core.arg_start_bytes) != len(spec.args):
            fail(f"cores[{k}].arg_start_bytes", f"{len(core.arg_start_bytes)} entries for "
                                                f"{len(spec.args)} args")


# --- directory --------------------------------------------------------------------------------


def load_directory(out_dir: str | Path) -> Program:
    """Manifest, every op listed by a kernel, and the flattened bundles, all checked."""
    out_dir = Path(out_dir)
    check_output_directory(out_dir)
    from spyrec.sim import foreign   # a bundle another compiler wrote (docs/formats.md)

    foreign.check_manifest_present(out_dir)
    if foreign.is_foreign(out_dir):
        return foreign.load_foreign(out_dir)
    return _load(_Files(out_dir))


def check_output_directory(out_dir: Path) -> None:
    """`out_dir` exists and is a directory (`run` and `inspect` both start here)."""
    if not out_dir.exists():
        raise InputFileError(f"{out_dir}: no such directory; give the output directory of "
                             f"spyrec compile")
    if not out_dir.is_dir():
        raise InputFileError(f"{out_dir} is not a directory; give the output directory of "
                             f"spyrec compile (the one holding manifest.json)")


def load_files(texts: Mapping[str, str | bytes], out_dir: str | Path) -> Program:
    """The Program of files the compiler has just built in memory ({name: text}), without
    re-reading or schema-checking them: for the cost estimate `spyrec compile` writes into
    report.json. Messages name `out_dir / name`."""
    return _load(_Files(Path(out_dir), texts))


def _load(files: _Files) -> Program:
    manifest, weights = _load_manifest(files)
    if not files.trusted:
        check_weights_file(files.out_dir, weights)
    lookup = manifest_index(manifest)
    ops: dict[str, OpSpec] = {}
    trace: list[tuple[str, Execute]] = []
    for kernel in manifest.kernels:
        listed = set(kernel.ops)
        executes = _read_bundle(files, kernel.bundle)   # first: symbols name their tensors
        first: dict[str, Execute] = {}
        for ex in executes:
            if ex.file not in listed:
                raise InputFileError(f"{ex.location}: executes {ex.file}, which kernel "
                                     f"'{kernel.name}' of manifest.json does not list in ops")
            first.setdefault(ex.file, ex)
            trace.append((kernel.name, ex))
        for filename in kernel.ops:
            if filename not in ops:
                ops[filename] = load_op(files, filename, manifest, first.get(filename), lookup)
        for ex in executes:
            check_symbols(ops[ex.file], ex)
    return Program(files.out_dir, manifest, ops, tuple(trace), weights)


def check_symbols(spec: OpSpec, ex: Execute) -> None:
    """The execute binds exactly the op's symbol ids, in order of first appearance (HBM args
    in tensor order, then cores; tiling contract §2), and concrete args take no operand."""
    ids: list[int] = []
    for arg in spec.args:
        for i in arg.symbols or ():
            if i not in ids:
                ids.append(i)
    if any(a.operand is not None for a in spec.args):
        return                            # the spyrecAccess_ form names operands itself
    if len(ex.operands) != len(ids) and not ex.symbol_ids:
        raise InputFileError(
            f"{ex.location}: sdsc_execute of {spec.describe()} passes {len(ex.operands)} "
            f"operands without symbol_ids, but the file has {len(ids)} symbolic start "
            f"addresses to bind; re-run spyrec compile")
    if tuple(ids) != ex.symbol_ids:
        raise InputFileError(
            f"{ex.location}: sdsc_execute of {spec.describe()} binds symbol_ids "
            f"{list(ex.symbol_ids)}, but the file's symbolic start addresses use "
            f"{ids or 'none'} (in order of first appearance); the bundle and the file "
            f"disagree: re-run spyrec compile")


def _read_bundle(files: _Files, name: str) -> list[Execute]:
    """The executions of one bundle. Files on disk always go through xDSL (the contract: a real
    MLIR parser and verifier). The compiler's own flat bundle is read line by line instead,
    which saves compile the xDSL import; anything but that exact form goes to xDSL too."""
    text, label = files.text(name), str(files.out_dir / name)
    flat = _flat_bundle(text, label) if files.trusted else None
    if flat is not None:
        return flat
    from spyrec.sim.bundle import execute, parse_bundle  # xDSL: imported only when needed

    return execute(parse_bundle(text, label))


_FLAT_FRAME = ("module {", "  func.func @sdsc_bundle() {", "    func.return", "  }", "}")
_FLAT_EXECUTE = re.compile(r'^    sdscbundle\.sdsc_execute \(\) \{sdsc_filename = "([^"\\]+)"\}$')


def _flat_bundle(text: str, label: str) -> list[Execute] | None:
    """Executions of a bundle with no loops, no maps and no operands (what
    templates/bundle.mlir.j2 renders today), in order; None for any other text."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 5 or tuple(lines[:2] + lines[-3:]) != _FLAT_FRAME:
        return None
    out = []
    for number, line in enumerate(lines[2:-3], start=3):
        m = _FLAT_EXECUTE.match(line)
        if m is None:
            return None
        out.append(Execute(m.group(1), (), f"{label}:{number}:5"))
    return out
