"""Write the output directory (DESIGN §2) atomically and deterministically.

Everything is built in a temporary sibling directory and swapped into place at the end
(`spyrec.outdir`, which also decides what may be replaced), so a failed compile leaves no partial
directory and never destroys an earlier good one. JSON is
written with fixed formatting and `constants.npz` with fixed zip timestamps, so the same input
gives byte-identical files.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import zipfile
from pathlib import Path

import numpy as np

from spyrec import __version__
from spyrec.codegen.bundle import bundle_data, render_bundle
from spyrec.codegen.opspec import op_spec, spec_tree
from spyrec.codegen.superdsc import superdsc_document
from spyrec.codegen.symbols import SymbolTable
from spyrec.ir import Graph
from spyrec.ir.lx import lx_bytes_per_core
from spyrec.outdir import check_output_dir, replace_directory

MANIFEST_FORMAT = "spyrec-manifest/1"
OPSPECS_FORMAT = "spyrec-opspecs/1"


class JsonText(str):
    """A JSON file's text that remembers the document it was printed from, so the compiler's
    own cost estimate reads its SuperDSC files without parsing what it has just printed (the
    reader is the same; tests/sim/test_cost_from_memory.py holds the document to exactly
    what parsing the text gives)."""

    doc: object


def dump_json(obj) -> JsonText:
    """Readable and fast: the outer two levels one entry per line, anything deeper compact
    (json's C encoder runs only without `indent`; the indented encoder is pure Python)."""
    text = JsonText(_pretty(obj, 0) + "\n")
    text.doc = obj
    return text


def _pretty(obj, depth: int) -> str:
    pad = " " * (depth + 1)
    if depth < 2 and isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(k)}: {_pretty(v, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    if depth < 2 and isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        items = [pad + _pretty(v, depth + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"
    return json.dumps(obj, separators=(", ", ": "))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_outputs(graph: Graph, source: Path, pipeline: list[dict], configs: dict,
                  report: dict, check: bool = True) -> dict[str, bytes | str]:
    """Every file of the output directory, by name (pure: no disk writes). `check`: the
    emitter re-derives each core's start address from our coordinates (codegen/superdsc.py)."""
    specs = [op_spec(graph, op) for op in graph.ops]
    files: dict[str, bytes | str] = {}
    sdsc_names = []
    symbols = SymbolTable()
    for i, (op, spec) in enumerate(zip(graph.ops, specs)):
        name = f"sdsc_{i}.json"
        sdsc_names.append(name)
        accesses = list(op.accesses())
        bufs = [graph.buffers[a.buffer] for _, a in accesses]
        files[name] = dump_json(superdsc_document(i, spec, bufs, [r for r, _ in accesses],
                                                  symbols, check))
    tree = spec_tree(graph.ops, specs)
    files["opspecs.json"] = dump_json({"format": OPSPECS_FORMAT,
                                       "kernels": [{"name": "main", "specs": tree}]})
    files["bundle.mlir"] = render_bundle(bundle_data(
        sdsc_names, [op.loops for op in graph.ops],
        [symbols.of(i) for i in range(len(graph.ops))]))
    files["manifest.json"] = dump_json(manifest(graph, source, pipeline, configs, sdsc_names,
                                                report.get("hbm_bytes", 0)))
    tags = {f"__dtype__.{n}": np.array("bfloat16") for n in graph.constants
            if graph.buffers[n].host_dtype == "bfloat16"}
    files["constants.npz"] = npz_bytes({**graph.constants, **tags})
    auto = (report.get("tiling") or {}).get("auto_config")
    if auto is not None:   # --tiling auto: its choice, a config the user can pass back
        files["tiling.yaml"] = auto
    return files


def manifest(graph: Graph, source: Path, pipeline: list[dict], configs: dict,
             sdsc_names: list[str], hbm_bytes: int) -> dict:
    tensors = []
    for buf in graph.buffers.values():
        tensors.append({
            "name": buf.name, "role": buf.role, "host_shape": list(buf.host_size),
            "host_dtype": buf.host_dtype, **buf.layout.to_json(),
            "hbm_address": buf.hbm_address, "device_bytes": buf.layout.device_bytes,
            "source": buf.source, **_lx_fields(graph, buf)})
    return {
        "format": MANIFEST_FORMAT, "spyrec_version": __version__,
        "source": {"file": source.name, "sha256": sha256_of(source)},
        "pipeline": pipeline, "configs": configs,
        "inputs": list(graph.inputs), "outputs": list(graph.outputs),
        **({"mutated_buffers": dict(graph.mutated_buffers)} if graph.mutated_buffers else {}),
        **_lx_args(graph, sdsc_names),
        **_hbm_args(graph, sdsc_names),
        "tensors": tensors,
        "kernels": [{"name": "main", "bundle": "bundle.mlir", "ops": sdsc_names}],
        "hbm_bytes": hbm_bytes,
    }


def _lx_args(graph: Graph, sdsc_names: list[str]) -> dict:
    """`lx_args`: which tensor each LX arg of each op holds ({file: {arg index: name}}).

    SuperDSC names no tensors, and LX offsets are reused by tensors whose values never
    overlap in time (a loop body's per-tile buffers), so the offset alone cannot say which
    tensor an arg is; the simulator needs it to check lifetimes. Absent without LX."""
    table = {}
    for name, op in zip(sdsc_names, graph.ops):
        held = {str(i): a.buffer for i, (_, a) in enumerate(op.accesses())
                if graph.buffers[a.buffer].lx_address is not None}
        if held:
            table[name] = held
    return {"lx_args": table} if table else {}


def _hbm_args(graph: Graph, sdsc_names: list[str]) -> dict:
    """`hbm_args`: which tensor each HBM arg of each op holds, for args of tensors whose bytes
    other tensors reuse at other times (memory_planning); absent when nothing is shared.

    SuperDSC names no tensors: the simulator finds an arg's tensor by address, and once a dead
    intermediate's bytes hold another tensor an address inside them names two tensors."""
    spans = sorted((b.hbm_address, b.hbm_address + b.layout.device_bytes, b.name)
                   for b in graph.buffers.values()
                   if b.hbm_address is not None and b.layout.device_bytes)
    shared: set[str] = set()
    end, last = -1, ""
    for start, stop, name in spans:
        if start < end:
            shared |= {name, last}
        if stop > end:
            end, last = stop, name
    table = {}
    for file, op in zip(sdsc_names, graph.ops):
        held = {str(i): a.buffer for i, (_, a) in enumerate(op.accesses())
                if a.buffer in shared and graph.buffers[a.buffer].hbm_address is not None}
        if held:
            table[file] = held
    return {"hbm_args": table} if table else {}


def _lx_fields(graph: Graph, buf) -> dict:
    """An LX tensor's per-core offset and bytes (issue 8 contract §2); nothing for HBM ones."""
    if buf.lx_address is None:
        return {}
    return {"lx_address": buf.lx_address, "lx_bytes_per_core": lx_bytes_per_core(graph, buf)}


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """An .npz with fixed timestamps and sorted members (np.savez stamps the current time)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as zf:
        for name in sorted(arrays):
            payload = io.BytesIO()
            array = np.asarray(arrays[name])  # ascontiguousarray would make 0-d arrays 1-d
            array = array if array.flags.c_contiguous else np.ascontiguousarray(array)
            np.lib.format.write_array(payload, array, allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            zf.writestr(info, payload.getvalue())
    return out.getvalue()


def write_atomically(out_dir: Path, files: dict[str, bytes | str], source: Path,
                     finalize=None) -> None:
    """Write `files` (and a copy of `source` as program.pt2) as `out_dir`, all or nothing.

    `spyrec.outdir` decides whether `out_dir` may be replaced and swaps the finished directory
    in. `finalize(tmp_dir) -> {name: text}` runs on the complete temporary directory before the
    swap, for files computed from the others (the report's cost estimate).
    """
    def build(tmp: Path) -> None:
        for name, content in files.items():
            _write_file(tmp / name, content)
        shutil.copyfile(source, tmp / "program.pt2")
        for name, content in (finalize(tmp) if finalize else {}).items():
            _write_file(tmp / name, content)

    replace_directory(check_output_dir(out_dir), build)


def _write_file(path: Path, content: bytes | str) -> None:
    if isinstance(content, str):
        content = content.encode("utf-8")
    with open(path, "xb") as f:  # a fresh directory: never follow or reuse an existing entry
        f.write(content)
