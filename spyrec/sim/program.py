"""The program the simulator runs, built from an output directory's documents.

One builder for both ways a program arrives: `loader.py` reads a spyrec output directory from
disk (each file parsed and schema-checked, `files.py`) and calls `read_manifest` and
`build_output_program`; `spyrec compile` hands the documents it has just built, still in memory,
to `program_from_documents` (through `spyrec/driver.py`, which composes the compiler and the
simulator: the compiler imports nothing of the simulator), so the cost estimate in report.json
is the estimate of exactly what `spyrec run` will read, without re-reading or schema-checking
files (that cost more than codegen, issue 11). What the schema cannot say (lengths that must
agree, a stick dim of 128 bytes, names that must exist, symbol ids an execution binds, each
core's slice and start address in a SuperDSC file: `superdsc.py`) is checked here, on every
path, while building the `specs` dataclasses. A reference bundle (`foreign.py`) builds the same
`OutputProgram` from its own manifest form, with `address_resolver` from here. A caller that
has its ops as OpSpecs already (the simulator's tests state device coordinates directly, wrong
ones included, which no SuperDSC file can) builds the program from them with
`program_from_op_specs`, the same checks after op reading.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Sequence

from spyrec.costmodel import DEFAULT_PARAMS, CostParams
from spyrec.device import DEVICE_MEMORY_BYTES, format_bytes
from spyrec.errors import InputFileError
from spyrec.layout.dtypes import device_dtype_for
from spyrec.sim.lengths import read_symbols
from spyrec.sim.specs import (
    Execute, KernelSpec, Manifest, OpSpec, TensorSpec, device_layout, fits_shares, share_floor,
    slice_share)
from spyrec.sim.fused import expand_executes, is_fused, read_fused
from spyrec.sim.superdsc import Resolver, SuperDscReader, lx_starts_of

if TYPE_CHECKING:
    from spyrec.sim.files import OutputFiles
    from spyrec.sim.weights import WeightsFile

_SDSC_NAME = re.compile(r"^sdsc_(\d+)\.json$")

@dataclass(frozen=True)
class WeightEntry:
    """Where one constant's device form lies in `weights.bin` (manifest `weights.tensors[]`):
    exactly its tensor's `device_bytes`, in its layout."""

    name: str
    offset: int
    nbytes: int
    # the stored constant whose value this one holds in its own layout, zero-padded at the
    # end of each dim by `pad` (not in the file: the loader lays it out,
    # `sim/weights.constant_bytes`); offset is then -1
    relayout_of: str | None = None
    pad: tuple[int, ...] = ()


@dataclass(frozen=True)
class Weights:
    """The manifest's `weights` section, checked against the tensors it describes."""

    file: str
    nbytes: int
    entries: tuple[WeightEntry, ...]    # manifest order


@dataclass(frozen=True)
class OutputProgram:
    """Everything the simulator needs from an output directory (or the compiler's documents of
    one), checked: what it executes and what the cost model reads."""

    out_dir: Path
    manifest: Manifest
    ops: dict[str, OpSpec]                  # by file name
    trace: tuple[tuple[str, Execute], ...]  # (kernel name, execute) in execution order
    weights: Weights | None = None          # None: a foreign bundle (no constants file)
    # a fused file -> the keys of its members in `ops`, in order: its executes run as theirs
    # (sim/fused.py; the trace holds the members' executes)
    fused: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # read from disk: the directory's handle (what else a run reads, it reads through it:
    # the same build) and weights.bin opened through it; None for in-memory documents. Handles,
    # not the program: two programs of the same documents are equal whatever they were read by
    files: OutputFiles | None = field(default=None, compare=False, repr=False)
    weights_file: WeightsFile | None = field(default=None, compare=False, repr=False)


# --- manifest ---------------------------------------------------------------------------------


def _tensor(path: Path, i: int, t: dict) -> TensorSpec:
    label = f"{path}: at $.tensors[{i}] ('{t['name']}')"
    layout = device_layout(label, t["device_size"], t["stride_map"], t["device_dtype"])
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
    symbolic = tuple(sorted((int(d), name) for d, name in t.get("symbolic_dims", {}).items()))
    return TensorSpec(t["name"], t["role"], tuple(t["host_shape"]), t["host_dtype"], layout,
                      t["hbm_address"], t["device_bytes"], t["source"], lx, lx_bytes, symbolic)


def read_manifest(path: Path, data: dict) -> tuple[Manifest, Weights]:
    """manifest.json's document (`path` for messages) as the Manifest and its weights section,
    every name it uses checked against its tensors."""
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
    symbols, read_from = read_symbols(path, data.get("symbols", []), tensors, data["inputs"])
    shares = {s["name"]: tuple((upto, m) for upto, m in s["min_shares"])
              for s in data.get("symbols", []) if "min_shares" in s}
    return (Manifest(tuple(data["inputs"]), tuple(data["outputs"]), tensors, kernels,
                     data["hbm_bytes"], mutated, lx_args, hbm_args, symbols, read_from,
                     shares, _cost_params(path, data.get("cost_params") or {})),
            _weights(path, data["weights"], tensors))


def _cost_params(path: Path, overrides: dict) -> CostParams:
    """The cost model's parameters the directory was compiled with (`cost_params`: the ones
    `--set cost.NAME=VALUE` changed), so `run --report` and `inspect` price as compile did."""
    from dataclasses import fields, replace

    known = {f.name for f in fields(CostParams)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise InputFileError(f"{path}: at $.cost_params: {', '.join(unknown)} is not a "
                             f"parameter of this spyrec's cost model; re-run spyrec compile")
    return replace(DEFAULT_PARAMS, **overrides)


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
        if "relayout_of" in w:
            pad = tuple(w.get("pad", (0,) * len(t.host_shape)))
            entries.append(WeightEntry(w["name"], -1, nbytes, w["relayout_of"], pad))
            continue
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
    stored = {e.name for e in entries if e.relayout_of is None}
    for e in entries:
        if e.relayout_of is None:
            continue
        src, t = tensors.get(e.relayout_of), tensors[e.name]
        if e.relayout_of not in stored or len(e.pad) != len(src.host_shape) or \
                tuple(n + p for n, p in zip(src.host_shape, e.pad)) != t.host_shape or \
                src.host_dtype != t.host_dtype or \
                src.layout.device_dtype != t.layout.device_dtype:
            raise InputFileError(
                f"{path}: at $.weights.tensors ('{e.name}'): relayout_of '{e.relayout_of}' is "
                f"not a stored constant of the same shape (plus `pad`) and dtype; re-run "
                f"spyrec compile")
    missing = [n for n, t in tensors.items() if t.role == "constant" and n not in listed]
    if missing:
        raise InputFileError(f"{path}: at $.weights.tensors: no values for the constant(s) "
                             f"{', '.join(missing)}; re-run spyrec compile")
    return Weights(section["file"], section["bytes"], tuple(entries))


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


def read_op(out_dir: Path, filename: str, doc: dict, manifest: Manifest,
            first: Execute | None = None, lookup: tuple | None = None
            ) -> OpSpec | tuple[OpSpec, ...]:
    """The OpSpec of `doc`, the SuperDSC document (sim/superdsc.py) of `out_dir / filename` (an
    `sdsc_<n>.json`), or of each compute op of a fused one (sim/fused.py). `first`: the op's
    first execution, whose operands name the tensors of symbolic start addresses; `lookup`:
    `manifest_index(manifest)`, built once per program."""
    path = out_dir / filename
    (key, wrapper), = doc.items()
    m = _SDSC_NAME.match(filename)
    index = int(key.split("_", 1)[0])
    if m and int(m.group(1)) != index:
        raise InputFileError(f"{path}: the top key {key!r} is op {index}, but the file is "
                             f"named {filename}")
    resolve, lx_names, lx_starts = lookup or manifest_index(manifest)

    def member(key: str, wrapper: dict, name: str) -> OpSpec:
        return SuperDscReader(path, key, wrapper, resolve, first, lx_names,
                              manifest.lx_args.get(name, {}),
                              _held_resolver(manifest, name), lx_starts).op(name, index)
    if is_fused(key):
        return read_fused(path, filename, key, wrapper, member)
    return member(key, wrapper, filename)


def manifest_index(manifest: Manifest) -> tuple:
    """What the SuperDSC reader looks tensors up in (HBM by address, LX by offset, LX offsets
    by name): built once per program, not once per op."""
    lx_names = _lx_names(manifest)
    return address_resolver(manifest.tensors.values()), lx_names, lx_starts_of(lx_names)


def address_resolver(tensors: Iterable[TensorSpec]) -> Resolver:
    """address -> (tensor name, first byte, bytes) of the HBM tensor holding it, or None.
    Where tensors overlap (memory_planning reuses bytes over time) the latest start wins;
    `hbm_args` names the tensor of such args (`_held_resolver`)."""
    spans = sorted((t.hbm_address, t.device_bytes, t.name) for t in tensors
                   if t.hbm_address is not None)
    starts = [a for a, _, _ in spans]

    def resolve(address: int):
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


# --- the program ------------------------------------------------------------------------------


def build_output_program(out_dir: Path, manifest: Manifest, weights: Weights | None,
                         op_document: Callable[[str], dict],
                         bundle_executions: Callable[[str], Sequence[Execute]]) -> OutputProgram:
    """The program of `manifest` (from `read_manifest`) whose ops are SuperDSC documents
    (`op_document(file name)`), read with the manifest's index built once; otherwise
    `program_from_op_specs`. `out_dir` names the files in messages."""
    lookup = manifest_index(manifest)

    def op_spec(filename: str, first: Execute | None) -> OpSpec:
        return read_op(out_dir, filename, op_document(filename), manifest, first, lookup)
    return program_from_op_specs(out_dir, manifest, weights, op_spec, bundle_executions)


def program_from_op_specs(out_dir: Path, manifest: Manifest, weights: Weights | None,
                          op_spec: Callable[[str, Execute | None], OpSpec],
                          bundle_executions: Callable[[str], Sequence[Execute]]
                          ) -> OutputProgram:
    """The program of `manifest` (from `read_manifest`): every kernel's executions
    (`bundle_executions(bundle file name)`) and every op a kernel lists
    (`op_spec(file name, its first execution or None)`), asked for in that order, each
    execution checked against its kernel's ops and its op's symbol ids. An op's first
    execution names the tensors of its symbolic start addresses (SuperDSC); a caller with
    OpSpecs in hand ignores it. `out_dir` names the files in messages."""
    ops: dict[str, OpSpec] = {}
    fused: dict[str, tuple[OpSpec, ...]] = {}     # a fused file -> its members (sim/fused.py)
    trace: list[tuple[str, Execute]] = []
    for kernel in manifest.kernels:
        listed = set(kernel.ops)
        executes = bundle_executions(kernel.bundle)   # first: symbols name their tensors
        first: dict[str, Execute] = {}
        for ex in executes:
            if ex.file not in listed:
                raise InputFileError(f"{ex.location}: executes {ex.file}, which kernel "
                                     f"'{kernel.name}' of manifest.json does not list in ops")
            first.setdefault(ex.file, ex)
        for filename in kernel.ops:
            if filename not in ops and filename not in fused:
                got = op_spec(filename, first.get(filename))
                members = got if isinstance(got, tuple) else (got,)
                if isinstance(got, tuple):
                    fused[filename] = got
                for spec in members:
                    ops[spec.file] = spec
                    _check_lengths(out_dir / filename, spec, manifest)
        runs = expand_executes(executes, fused)
        trace += [(kernel.name, ex) for ex in runs]
        checked: set[tuple] = set()      # a loop's executions of one op bind alike
        for ex in runs:
            key = (ex.file, ex.symbol_ids, len(ex.operands))
            if key not in checked:
                check_symbols(ops[ex.file], ex)
                checked.add(key)
    return OutputProgram(out_dir, manifest, ops, tuple(trace), weights,
                         fused={f: tuple(m.file for m in members) for f, members in fused.items()})


def _check_lengths(path: Path, spec: OpSpec, manifest: Manifest) -> None:
    """An op sized by a symbolic length (`dimToSymbolMapping_`) names a symbol of the
    manifest read from a shape, holds its maximum, and splits it so that every admissible
    length gives each core a whole share (`OpSpec.at`)."""
    for v, name in spec.lengths.items():
        values = manifest.symbols.get(name)
        where = f"{path}: dimToSymbolMapping_.{v}"
        if values is None or name in manifest.read_from:
            raise InputFileError(f"{where}: {name!r} is not a symbolic length of an input's "
                                 f"shape in manifest.json (its symbols: "
                                 f"{', '.join(manifest.symbols) or 'none'}); re-run spyrec "
                                 f"compile")
        n, k = spec.iteration_space[v]
        steps = manifest.min_shares.get(name, ())
        floor = [share_floor(steps, length) for length in values]
        if n != values[-1] or not all(fits_shares(length, n, k, slice_share(length, k, m))
                                      for length, m in zip(values, floor)):
            floors = ", ".join(f"{m} to {upto}" for upto, m in steps) or "none"
            raise InputFileError(f"{where}: N_ {n} split {k} ways (each busy core at least "
                                 f"[{floors}] values), but {name} runs {values[0]}..{values[-1]} by "
                                 f"{values.step}: N_ must be its maximum and every share fit "
                                 f"the slice a core holds there; re-run spyrec compile")


# One execution as `program_from_documents` takes it: (sdsc file, operand values, line and
# column of its sdsc_execute in the bundle's text, symbol ids, ((loop var, value), ...)).
ExecutionRow = tuple[str, tuple[int, ...], int, int, tuple[int, ...], tuple[tuple[str, int], ...]]


def program_from_documents(out_dir: Path, manifest: dict, sdsc: Mapping[str, dict],
                           executions: Mapping[str, Sequence[ExecutionRow]]) -> OutputProgram:
    """The OutputProgram of an output directory given as documents rather than files: the
    manifest's document, every sdsc file's document by file name, and every bundle's
    executions in order, as data (`ExecutionRow`). This is how `spyrec compile` estimates the
    cost of what it has just built (spyrec/driver.py): the same builder as a directory read
    from disk, without the text, the schema pass or the bundle's MLIR parser, which only
    files need; messages name the files as `out_dir / name`. The documents must be plain
    JSON values (lists, str keys), as parsing their text would give."""
    manifest_spec, weights = read_manifest(out_dir / "manifest.json", manifest)

    def member(table: Mapping, name: str):
        if name not in table:
            raise InputFileError(f"{out_dir / name}: no such file in the output")
        return table[name]

    def bundle(name: str) -> list[Execute]:
        rows, label = member(executions, name), out_dir / name
        return [Execute(file, operands, f"{label}:{line}:{column}", ids, loop)
                for file, operands, line, column, ids, loop in rows]
    return build_output_program(out_dir, manifest_spec, weights,
                                lambda name: member(sdsc, name), bundle)


def check_symbols(spec: OpSpec, ex: Execute) -> None:
    """The execute binds exactly the op's symbol ids, in order of first appearance (HBM args
    in tensor order, then cores; tiling contract §2), and concrete args take no operand."""
    ids: list[int] = []
    for arg in spec.args:
        for i in arg.symbols or ():
            if i not in ids:
                ids.append(i)
    if any(a.operand is not None for a in spec.args):
        return                            # args name the operand of their base themselves
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
