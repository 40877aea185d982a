"""Load a bundle another compiler wrote (torch-spyre, "the reference"): its `bundle.mlir`, the
`sdsc_*.json` files it names, and a `manifest.json` written by hand in the small
`spyrec-foreign-manifest/1` form (docs/formats.md, "Reference bundles").

Why a manifest of its own: a reference bundle has no program.pt2, no pipeline, no kernel list
and no constants file, so `spyrec-manifest/1` would make its writer invent a hash, a version and
roles. The hand-written form says only what the SuperDSC files cannot: which tensors live at
which HBM addresses, their host shape and dtype, their device layout when it is not the default,
and which are inputs and outputs. Everything else (ops, order, per-core slices) comes from the
bundle and the SuperDSC files, read by the same reader as spyrec's own (sim/superdsc.py).

Why addresses are relocated: the reference places tensors in 16 GiB segments (SEG5 =
85899345920), far beyond any host arena. Each manifest tensor gets a packed address and every
start address in the files is moved with the tensor holding it, so an address in no tensor, or
an access running past its tensor's end, is reported against the reference's own numbers.

What differs between reference files of different dates (reference/F-superdsc.md §5) is either
tolerated here, rewritten to the HEAD form the reader checks, or refused with the reason:
tolerated: `sdsc_<n>_<opfunc>.json` and `sdsc_<i>.json` names (the bundle names the file), a
bare `"<opfunc>"` top key (pre-2026-05-06; the index comes from the file name or the bundle
order), a missing `indirectAllocType_` (pre-2026-06-17; inferred from the gather fields), empty
`dataStageParam_`/`N_` extras of later files, constant codes as strings, either
`maskingConstId_` and either `maxDimSizes_` order (the simulator uses neither). Refused (exit 3):
symbolic start addresses and symbolic bundles, dynamic dims, and the later keys whose meaning
changes the data placement (conv padding, stick replication, experimental-branch keys).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np

from spyrec.errors import InputFileError, UnsupportedProgram
from spyrec.layout import (
    DeviceLayout, contiguous_strides, default_layout, device_dtype_for, stick_layout)
from spyrec.sim.check import OutputCheck, comparable, compare
from spyrec.sim.files import parse_json, read_text, validate
from spyrec.sim.inputs import check_arrays, read_arrays, signature
from spyrec.sim.program import OutputProgram, address_resolver
from spyrec.sim.specs import Execute, KernelSpec, Manifest, OpSpec, TensorSpec, device_layout
from spyrec.sim.superdsc import SuperDscReader

FORMAT = "spyrec-foreign-manifest/1"
KERNEL = "reference"
DOCS = "docs/formats.md, 'Reference bundles'"
_ALIGN = 128

# Keys of later or experimental reference files whose meaning the simulator does not model
# (F §5): a file holding one is refused with the reason rather than simulated wrongly.
REFUSED_KEYS = {
    "isStartAddrSymbolic_": "symbolic start addresses (bound by a symbolic bundle.mlir)",
    "datadscs_": "dynamic dims", "dimToSymbolMapping_": "dynamic dims",
    "inputSymbolsAndTags_": "dynamic dims", "symbolDefinitions_": "dynamic dims",
    "padding_": "padded allocations (conv ops)", "stickRepl_": "stick replication",
    "pdsRelation_": "relations between primary data structures",
    "opFuncsUsed_": "experimental-branch fusion", "onchipMove_": "on-chip moves",
    "streamingPTLXFull_": "streamed LX", "lxRelayoutClassifications_": "LX relayouts",
    "numCoreletsUsed_DSC2_": "a second DSC",
}
# Later files add these, usually empty; empty they say nothing and are dropped (F §5).
_EMPTY_EXTRAS = ("symbolicDimInfo_", "maxSymbolicVolume_", "coreletSplit_", "rowSplit_",
                 "peSfpSplit_", "paddingSizes_")
_FILE = re.compile(r"^sdsc_(\d+)(?:_[A-Za-z][A-Za-z0-9_]*)?\.json$")
_KEY = re.compile(r"^(0|[1-9][0-9]*)_[A-Za-z][A-Za-z0-9_]*$")


class _ReferenceReader(SuperDscReader):
    """The SuperDSC reader, whose messages blame the reference's file, not a stale compile."""

    def fail(self, where: str, msg: str) -> None:
        raise InputFileError(f"{self.path}: at $.{self.key}.{where}: {msg}; the reference's "
                             f"file does not say what spyrec's SuperDSC reader needs")


def read_reference_dir(out_dir: Path) -> OutputProgram:
    """The program of a reference bundle directory, every file checked against the manifest."""
    path = out_dir / "manifest.json"
    data = _read_json(path)
    validate(data, "foreign-manifest", str(path), f"fix it ({DOCS})")
    by_reference = _tensors(path, data)
    placed, relocate = _relocation(path, by_reference)
    bundle = data.get("bundle", "bundle.mlir")
    _plain_name(f"{path}: at $.bundle", bundle)
    executes = _read_bundle(out_dir / bundle)
    resolve = address_resolver(placed.values())
    ops: dict[str, OpSpec] = {}
    for position, ex in enumerate(executes):
        if ex.file not in ops:
            _plain_name(f"{ex.location}: sdsc_filename", ex.file)
            ops[ex.file] = _load_op(out_dir, ex, position, placed, relocate, resolve)
    manifest = Manifest(tuple(data["inputs"]), tuple(data["outputs"]), placed,
                        (KernelSpec(KERNEL, bundle, tuple(ops)),),
                        sum(-(-t.device_bytes // _ALIGN) * _ALIGN for t in placed.values()))
    return OutputProgram(out_dir, manifest, ops, tuple((KERNEL, ex) for ex in executes))


def expected_outputs(out_dir: Path, manifest: Manifest) -> dict[str, np.ndarray]:
    """What `run --check` compares with: there is no program.pt2 to run in eager, so the
    manifest's `expected` names an .npz (or .safetensors) keyed like outputs.npz. Read and
    checked before simulating, so a bad file fails at once."""
    path = out_dir / "manifest.json"
    name = _read_json(path).get("expected")
    if name is None:
        raise InputFileError(f"{out_dir}: --check runs program.pt2 in PyTorch eager, and a "
                             f"reference bundle has none; name a file of expected outputs "
                             f"(keys output_0, ...) in manifest.json's \"expected\", or run "
                             f"without --check and compare outputs.npz yourself")
    _plain_name(f"{path}: at $.expected", name)
    tensors = [replace(manifest.tensors[t], name=f"output_{i}")
               for i, t in enumerate(manifest.outputs)]
    return check_arrays(read_arrays(out_dir / name), tensors, str(out_dir / name),
                        signature(tensors), tags_required=True)


def check_expected(manifest: Manifest, expected: dict[str, np.ndarray],
                   outputs: list[np.ndarray]) -> list[OutputCheck]:
    """`--check` rows for a reference bundle: each output against its expected array, with
    the dtype's tolerance (DESIGN §9)."""
    checks = []
    for i, name in enumerate(manifest.outputs):
        dtype = manifest.tensors[name].host_dtype
        checks.append(compare(i, name, dtype, outputs[i],
                              comparable(expected[f"output_{i}"], dtype)))
    return checks


# --- manifest --------------------------------------------------------------------------------


def _read_json(path: Path) -> object:
    """A JSON file of the bundle directory, parsed but not yet checked: a reference file is
    checked once rewritten to the HEAD form (`_normalize`)."""
    return parse_json(read_text(path), path)


def _tensors(path: Path, data: dict) -> dict[str, TensorSpec]:
    """Manifest tensors at their reference addresses, in manifest order."""
    tensors: dict[str, TensorSpec] = {}
    for i, t in enumerate(data["tensors"]):
        label = f"{path}: at $.tensors[{i}] ('{t['name']}')"
        if t["name"] in tensors:
            raise InputFileError(f"{label}: listed twice; list each tensor once")
        layout = _tensor_layout(label, t)
        if t.get("device_bytes", layout.device_bytes) != layout.device_bytes:
            raise InputFileError(f"{label}: device_bytes {t['device_bytes']}, but host_shape "
                                 f"{t['host_shape']} in layout {list(layout.device_size)} takes "
                                 f"{layout.device_bytes}; fix host_shape or the layout")
        if t["hbm_address"] % _ALIGN:
            raise InputFileError(f"{label}: hbm_address {t['hbm_address']} is not {_ALIGN}-byte "
                                 f"aligned; copy the address from the reference's files")
        role = "input" if t["name"] in data["inputs"] else \
            "output" if t["name"] in data["outputs"] else "intermediate"
        tensors[t["name"]] = TensorSpec(t["name"], role, tuple(t["host_shape"]), t["host_dtype"],
                                        layout, t["hbm_address"], layout.device_bytes, None)
    for key in ("inputs", "outputs"):
        for i, name in enumerate(data[key]):
            if name not in tensors:
                raise InputFileError(f"{path}: at $.{key}[{i}]: no tensor named '{name}' in "
                                     f"$.tensors ({', '.join(tensors)})")
    return tensors


def _tensor_layout(label: str, t: dict) -> DeviceLayout:
    """The default layout, the default with another stick dim, or the layout given."""
    shape, dtype = t["host_shape"], t["host_dtype"]
    device_dtype = device_dtype_for(dtype).name
    if "device_size" in t or "stride_map" in t:
        if "stick_dim" in t or "device_size" not in t or "stride_map" not in t:
            raise InputFileError(f"{label}: give device_size and stride_map together, or "
                                 f"stick_dim alone, or neither (the default layout)")
        return device_layout(label, t["device_size"], t["stride_map"], device_dtype)
    if "stick_dim" not in t:
        return default_layout(shape, dtype)
    k = t["stick_dim"]
    if k >= len(shape):
        raise InputFileError(f"{label}: stick_dim {k} is not a dim of host_shape {shape}")
    order = [d for d in range(len(shape)) if d != k] + [k]
    return stick_layout(shape, contiguous_strides(shape), dtype, order)


def _relocation(path: Path, tensors: dict[str, TensorSpec]):
    """Packed copies of the tensors, and the function moving a reference address with the
    tensor that holds it (None for an address in no tensor)."""
    spans = sorted((t.hbm_address, t.device_bytes, t.name) for t in tensors.values())
    for (a0, n0, name0), (a1, _, name1) in zip(spans, spans[1:]):
        if a1 < a0 + n0:
            raise InputFileError(f"{path}: tensors '{name0}' [{a0}, {a0 + n0}) and '{name1}' "
                                 f"[{a1}, ...) overlap; list each buffer once (a view of a "
                                 f"buffer is not a tensor of its own)")
    packed: dict[str, int] = {}
    cursor = 0
    for _, nbytes, name in spans:
        packed[name] = cursor
        cursor += -(-nbytes // _ALIGN) * _ALIGN
    placed = {name: replace(t, hbm_address=packed[name]) for name, t in tensors.items()}

    def relocate(address: int) -> tuple[int, TensorSpec] | None:
        for start, nbytes, name in spans:
            if start <= address < start + nbytes:
                return packed[name] + address - start, tensors[name]
        return None
    return placed, relocate


def _plain_name(label: str, name: str) -> None:
    if Path(name).name != name or name in (".", ".."):
        raise InputFileError(f"{label}: {name!r} is not a file name in the bundle directory")


# --- bundle and ops --------------------------------------------------------------------------


def _read_bundle(path: Path) -> list[Execute]:
    text = read_text(path, "; the manifest's bundle (default bundle.mlir) must be in the "
                           "directory")
    if "input_arg_extract" in text or '"symbol_ids"' in text:
        raise UnsupportedProgram(f"{path}: a symbolic bundle (addresses bound at run time, "
                                 f"bundle_symbolic_args) is not simulated for reference bundles "
                                 f"yet; dump the bundle with concrete addresses")
    from spyrec.sim.bundle import execute, parse_bundle  # xDSL: imported only when needed

    return execute(parse_bundle(text, str(path)))


def _load_op(out_dir: Path, ex: Execute, position: int, placed: dict[str, TensorSpec],
             relocate, resolve) -> OpSpec:
    path = out_dir / ex.file
    if not path.is_file():
        raise InputFileError(f"{ex.location}: sdsc_execute names {ex.file}, which is not in "
                             f"{out_dir}; copy it from the reference's dump beside bundle.mlir")
    doc = _read_json(path)
    key, wrapper, index = _normalize(path, ex.file, doc, position)
    _refuse_unsupported(path, key, wrapper)
    validate({key: wrapper}, "sdsc", str(path),
              f"spyrec reads HEAD-format SuperDSC and the differences listed in {DOCS}")
    moved = _relocate_starts(path, key, wrapper, relocate)
    spec = _ReferenceReader(path, key, wrapper, resolve).op(ex.file, index)
    _check_against_manifest(path, spec, moved, placed)
    return spec


def _normalize(path: Path, filename: str, doc: object, position: int):
    """(key, wrapper, index) with the older spellings rewritten to HEAD's (module docstring)."""
    if not isinstance(doc, dict) or len(doc) != 1 or not isinstance(next(iter(doc.values())),
                                                                   dict):
        raise InputFileError(f"{path}: a SuperDSC file is one object under one key "
                             f"(\"<n>_<opfunc>\"); is this a reference sdsc file?")
    ((key, wrapper),) = doc.items()
    named = _FILE.match(filename)
    if _KEY.match(key):
        index = int(key.split("_", 1)[0])
        if named and int(named.group(1)) != index:
            raise InputFileError(f"{path}: the top key {key!r} is op {index}, but the file is "
                                 f"named {filename}; the bundle and the file disagree")
    else:   # before 2026-05-06 the key was the bare opfunc
        index = int(named.group(1)) if named else position
        key = f"{index}_{key}"
    for (_, dsc) in (item for d in wrapper.get("dscs_", []) if isinstance(d, dict)
                     for item in d.items()):
        if not isinstance(dsc, dict):
            continue
        for stage in dsc.get("dataStageParam_", {}).values():
            if isinstance(stage, dict):
                _drop_empty(stage)
        if isinstance(dsc.get("N_"), dict):
            _drop_empty(dsc["N_"])
        for node in dsc.get("scheduleTree_", []):
            if isinstance(node, dict) and "indirectAllocType_" not in node:
                node["indirectAllocType_"] = (
                    "index_tensor" if "indexTensorType_" in node else
                    "value_tensor" if "relatedIndirectAccessAlloc_" in node else
                    "no_indirection")
    return key, wrapper, index


def _drop_empty(fields: dict) -> None:
    for name in _EMPTY_EXTRAS:
        if name in fields and fields[name] in ({}, [], 0, "", None):
            del fields[name]


def _refuse_unsupported(path: Path, key: str, wrapper: dict) -> None:
    """UnsupportedProgram naming every refused key with its JSON path and reason."""
    found: list[str] = []

    def walk(value: object, where: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k in REFUSED_KEYS:
                    found.append(f"$.{where}.{k} ({REFUSED_KEYS[k]})")
                walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")
    walk(wrapper, key)
    nodes = [n for d in wrapper.get("dscs_", []) for dsc in d.values()
             for n in dsc.get("scheduleTree_", [])]
    found += [f"$.{key}...scheduleTree_[{i}] (a '{n.get('nodeType_')}' node: only allocate "
              f"nodes are simulated)" for i, n in enumerate(nodes)
              if isinstance(n, dict) and n.get("nodeType_") != "allocate"]
    if found:
        raise UnsupportedProgram(f"{path}: uses what spyrec does not simulate: "
                                 f"{'; '.join(found)}")


def _relocate_starts(path: Path, key: str, wrapper: dict, relocate) -> dict[int, TensorSpec]:
    """Every HBM start address moved with its tensor; {ldsIdx: manifest tensor}."""
    ((opfunc, dsc),) = wrapper["dscs_"][0].items()
    owners: dict[int, TensorSpec] = {}
    for i, node in enumerate(dsc["scheduleTree_"]):
        if node["component_"] != "hbm":
            continue
        data = node["startAddressCoreCorelet_"]["data_"]
        for core, text in data.items():
            where = (f"$.{key}.dscs_[0].{opfunc}.scheduleTree_[{i}].startAddressCoreCorelet_"
                     f".data_.{core}")
            address = int(text)
            if address < 0:
                raise UnsupportedProgram(f"{path}: at {where}: symbol id {address}: symbolic "
                                         f"start addresses are not simulated for reference "
                                         f"bundles yet; dump the bundle with concrete "
                                         f"addresses")
            found = relocate(address)
            if found is None:
                raise InputFileError(f"{path}: at {where}: address {address} (Tensor{i}) is "
                                     f"inside no tensor of manifest.json; add the tensor "
                                     f"stored there (name, host_shape, host_dtype, "
                                     f"hbm_address) to its tensors")
            moved, tensor = found
            if owners.setdefault(i, tensor).name != tensor.name:
                raise InputFileError(f"{path}: at {where}: address {address} is in tensor "
                                     f"'{tensor.name}', but core 0 of Tensor{i} is in "
                                     f"'{owners[i].name}'; one allocate node is one tensor: "
                                     f"fix the tensors' hbm_address or host_shape")
            data[core] = str(moved)
    return owners


def _check_against_manifest(path: Path, spec: OpSpec, owners: dict[int, TensorSpec],
                            placed: dict[str, TensorSpec]) -> None:
    """Each arg inside its manifest tensor, in the manifest tensor's device dtype."""
    for i, arg in enumerate(spec.args):
        if i not in owners:
            continue
        reference = owners[i]
        t = placed[reference.name]
        where = f"{path}: Tensor{i} ('{t.name}' of manifest.json)"
        if arg.device_dtype != t.layout.device_dtype:
            raise InputFileError(f"{where} is {arg.device_dtype} on the device, but the "
                                 f"manifest's {t.host_dtype} is stored as "
                                 f"{t.layout.device_dtype}; fix host_dtype")
        start = arg.hbm_address - t.hbm_address
        end = start + arg.extent_bytes
        if start < 0 or end > t.device_bytes:
            raise InputFileError(
                f"{where} reaches bytes [{reference.hbm_address + start}, "
                f"{reference.hbm_address + end}) of the reference's memory, but the manifest "
                f"tensor ({list(t.host_shape)} {t.host_dtype}, device "
                f"{list(t.layout.device_size)}) holds [{reference.hbm_address}, "
                f"{reference.hbm_address + t.device_bytes}); fix its host_shape, layout or "
                f"hbm_address")
