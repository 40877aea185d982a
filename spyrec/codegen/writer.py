"""Write the output directory (DESIGN §2) atomically and deterministically.

Everything is built in a temporary sibling directory and swapped into place at the end
(`spyrec.outdir`, which also decides what may be replaced), so a failed compile leaves no partial
directory and never destroys an earlier good one. JSON is
written with fixed formatting and the weights as one raw blob in a fixed order, so the same
input gives byte-identical files.

Weights are streamed: `build_outputs` lays `weights.bin` out from layouts alone (the
manifest's `weights` section), and `weights_file.py` converts each tensor into its device form
from the `.pt2` archive a few device rows at a time (`StoredTensor.load` maps it;
`WeightsBlob.write`), so compile never holds the weights in memory. The source `.pt2` is not
copied (the manifest names its absolute path and SHA-256 for `run --check`) unless
`self_contained` asks for `program.pt2`.
"""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from spyrec import __version__
from spyrec.build_record import sha256_of
from spyrec.codegen.bundle import RunCounts, bundle_file
from spyrec.codegen.opspec import op_spec, spec_tree
from spyrec.codegen.superdsc import superdsc_document
from spyrec.codegen.symbols import SymbolTable
from spyrec.errors import InputFileError
from spyrec.ir import Graph
from spyrec.ir.lx import lx_bytes_per_core
from spyrec.ir.symbols import SymLength
from spyrec.codegen.weights_file import WEIGHTS_FILE, WeightsBlob, background_priority
from spyrec.outdir import check_output_dir, replace_directory

MANIFEST_FORMAT = "spyrec-manifest/3"
BUNDLE_FILE = "bundle.mlir"
PROGRAM_COPY = "program.pt2"    # the source's copy, with --self-contained
OPSPECS_FORMAT = "spyrec-opspecs/1"


def dump_json(obj) -> str:
    """Readable and fast: the outer two levels one entry per line, anything deeper compact
    (json's C encoder runs only without `indent`; the indented encoder is pure Python)."""
    return _pretty(obj, 0) + "\n"


def _pretty(obj, depth: int) -> str:
    pad = " " * (depth + 1)
    if depth < 2 and isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(k)}: {_pretty(v, depth + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    if depth < 2 and isinstance(obj, list) and obj and isinstance(obj[0], (dict, list)):
        items = [pad + _pretty(v, depth + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"
    return _COMPACT.encode(obj)


# `json.dumps(obj, separators=(", ", ": "))` builds an encoder per call (only the default
# one is cached); one encoder with the same options prints the same text. Without the
# circular-reference check (the documents are trees codegen built), which costs a dict
# insert and delete per container: sdsc files 25% faster to encode (23 MB: 0.57 -> 0.42 s)
_COMPACT = json.JSONEncoder(separators=(", ", ": "), check_circular=False)


class Sha256Job:
    """The source's SHA-256, computed on a daemon thread while compile works: hashing a 16 GB
    `.pt2` takes ~15 s of one core, and hashlib releases the GIL on large blocks. A daemon,
    so a compile that fails early exits at once instead of waiting for the hash."""

    def __init__(self, path: Path):
        self._digest: str | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(path,), daemon=True,
                                        name="spyrec-sha256")
        self._thread.start()

    def _run(self, path: Path) -> None:
        background_priority()
        try:
            self._digest = sha256_of(path)
        except OSError as e:          # raised where the digest is needed, naming the source
            self._error = InputFileError(
                f"{path}: cannot read it to record its SHA-256 in manifest.json "
                f"({e.strerror or e}); nothing was written. Check that the file is readable "
                f"and stays in place while spyrec compiles it.")
        except BaseException as e:     # re-raised where the digest is needed
            self._error = e

    def result(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._digest


@dataclass(frozen=True)
class BuiltOutput:
    """An output directory built in memory: every file by name, as written (`weights.bin` is a
    `WeightsBlob` the writer streams; manifest.json a `LateJson` while the source's hash is
    still running, its document's `source.sha256` None until written; opspecs.json and each
    sdsc file a `JsonDoc`, printed when first written or measured), and the documents
    some of them print: manifest.json's, every sdsc_<n>.json's by file name, and each
    bundle's executions as data
    (`bundle.bundle_file`). The documents are for whatever reads the output without the files
    (the cost estimate of report.json, spyrec/driver.py); they are plain JSON values, what
    parsing the texts gives. The executions are those at every symbolic length's maximum;
    `run_counts` says how often each bundle runs each file at other lengths (the cost curve),
    and `symbols` are the graph's symbolic lengths (none for a static program)."""

    files: dict[str, bytes | str | JsonDoc | LateJson | WeightsBlob]
    manifest: dict
    sdsc: dict[str, dict]
    executions: dict[str, list[tuple]]
    run_counts: dict[str, RunCounts]
    symbols: tuple[SymLength, ...] = ()


class JsonDoc:
    """A JSON file printed when first asked (`text`), then kept: opspecs.json and the sdsc
    documents, so that compile can fork its cost estimate (`spyrec.beside`) before spending
    ~1 ms per op on their text, and print them while the child estimates."""

    __slots__ = ("doc", "_text")

    def __init__(self, doc: dict):
        self.doc = doc
        self._text: str | None = None

    def text(self) -> str:
        if self._text is None:
            self._text = dump_json(self.doc)
        return self._text


def printed(content):
    """A built file's content as written: text for a document (`JsonDoc`, `LateJson`),
    anything else (bytes, str, a `WeightsBlob`, which streams itself) as it is."""
    return content.text() if isinstance(content, (JsonDoc, LateJson)) else content


class LateJson:
    """A JSON file whose document waits on a value another thread computes: the manifest's
    source SHA-256. The document is complete but for it, and is written after the cost
    estimate (`write_atomically`), so compile's main thread does not wait for the hash while
    it still has work: Granite-8B width at 16 layers waited 4.3 s for it before the estimate
    (the hash shares a core with weights.bin's conversion while the passes run)."""

    def __init__(self, doc: dict, fill: Callable[[dict], None]):
        self.doc = doc
        self._fill = fill

    def text(self) -> str:
        """The file's text, once `fill` has put the late value into the document."""
        self._fill(self.doc)
        return dump_json(self.doc)


def build_outputs(graph: Graph, source: Path, pipeline: list[dict], configs: dict,
                  report: dict, check: bool = True, self_contained: bool = False,
                  source_sha256: Sha256Job | None = None) -> BuiltOutput:
    """Every file of the output directory (pure: no disk writes). `check`: the emitter
    re-derives each core's start address from our coordinates (codegen/superdsc.py)."""
    specs = [op_spec(graph, op) for op in graph.ops]
    files: dict[str, bytes | str | WeightsBlob | LateJson] = {}
    sdsc: dict[str, dict] = {}
    symbols = SymbolTable()
    for i, (op, spec) in enumerate(zip(graph.ops, specs)):
        name = f"sdsc_{i}.json"
        accesses = list(op.accesses())
        bufs = [graph.buffers[a.buffer] for _, a in accesses]
        sdsc[name] = superdsc_document(i, spec, bufs, [r for r, _ in accesses], symbols, check)
        files[name] = JsonDoc(sdsc[name])
    sdsc_names = list(sdsc)
    tree = spec_tree(graph.ops, specs)
    files["opspecs.json"] = JsonDoc({"format": OPSPECS_FORMAT,
                                     "kernels": [{"name": "main", "specs": tree}]})
    lengths = tuple(graph.symbols.values())
    files[BUNDLE_FILE], executions, run_counts = bundle_file(
        sdsc_names, [op.loops for op in graph.ops],
        [symbols.of(i) for i in range(len(graph.ops))], lengths)
    blob = WeightsBlob.plan(graph)
    manifest_doc = manifest(graph, source, pipeline, configs, sdsc_names,
                            report.get("hbm_bytes", 0), blob, self_contained, source_sha256)
    files["manifest.json"] = dump_json(manifest_doc) if source_sha256 is None else \
        LateJson(manifest_doc, lambda doc: doc["source"].update(sha256=source_sha256.result()))
    if blob.entries:
        files[WEIGHTS_FILE] = blob
    auto = (report.get("tiling") or {}).get("auto_config")
    if auto is not None:   # --tiling auto: its choice, a config the user can pass back
        files["tiling.yaml"] = auto
    return BuiltOutput(files, manifest_doc, sdsc, {BUNDLE_FILE: executions},
                       {BUNDLE_FILE: run_counts}, lengths)


def manifest(graph: Graph, source: Path, pipeline: list[dict], configs: dict,
             sdsc_names: list[str], hbm_bytes: int, blob: WeightsBlob | None = None,
             self_contained: bool = False, source_sha256: Sha256Job | None = None) -> dict:
    tensors = []
    writers: dict[str, list] = {}       # buffer -> the ops writing it (`_lx_fields`)
    for op in graph.ops:
        writers.setdefault(op.output.buffer, []).append(op)
    for buf in graph.buffers.values():
        tensors.append({
            "name": buf.name, "role": buf.role, "host_shape": list(buf.host_size),
            "host_dtype": buf.host_dtype, **buf.layout.to_json(),
            "hbm_address": buf.hbm_address, "device_bytes": buf.layout.device_bytes,
            "source": buf.source, **_lx_fields(graph, buf, writers.get(buf.name, [])),
            **_symbolic_dims(graph, buf.name)})
    return {
        "format": MANIFEST_FORMAT, "spyrec_version": __version__,
        "source": {"file": source.name, "path": str(Path(source).resolve()),
                   # a hash still running is filled in when the file is written (`LateJson`)
                   "sha256": None if source_sha256 is not None else sha256_of(source),
                   "copy": PROGRAM_COPY if self_contained else None},
        "pipeline": pipeline, "configs": configs,
        "inputs": list(graph.inputs), "outputs": list(graph.outputs),
        **({"mutated_buffers": dict(graph.mutated_buffers)} if graph.mutated_buffers else {}),
        **_symbols(graph),
        **_lx_args(graph, sdsc_names),
        **_hbm_args(graph, sdsc_names),
        "tensors": tensors,
        "kernels": [{"name": "main", "bundle": BUNDLE_FILE, "ops": sdsc_names}],
        "hbm_bytes": hbm_bytes,
        "weights": (blob or WeightsBlob.plan(graph)).section(),
    }


def _symbols(graph: Graph) -> dict:
    """`symbols`: the graph's symbolic lengths (issue 30), which the simulator binds from the
    inputs' shapes or values; absent in a static program (its manifest is unchanged)."""
    if not graph.symbols:
        return {}
    return {"symbols": [{"name": s.name, "granularity": s.granularity, "minimum": s.minimum,
                         "maximum": s.maximum, "where": s.where, **_value_of(s),
                         **({"min_shares": [list(step) for step in s.min_shares]}
                            if s.min_shares else {})}
                        for s in graph.symbols.values()]}


def _value_of(symbol: SymLength) -> dict:
    """A length read from an input's value at run time: `value` {input, flat index, offset}
    (clamped to minimum..maximum); nothing for a dim of an input's shape."""
    v = symbol.value_of
    return {} if v is None else {"value": {"input": v.input, "index": v.index,
                                           "offset": v.offset}}


def _symbolic_dims(graph: Graph, name: str) -> dict:
    """An input's, output's or folded constant's `symbolic_dims` ({host dim: symbol};
    `host_shape` is at the maximum); nothing for a tensor without one."""
    dims = graph.symbolic_dims.get(name)
    return {"symbolic_dims": {str(d): s for d, s in sorted(dims.items())}} if dims else {}


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


def _lx_fields(graph: Graph, buf, writers: list) -> dict:
    """An LX tensor's per-core offset and bytes (issue 8 contract §2); nothing for HBM ones.
    `writers`: the ops writing `buf` (found once for every buffer, not per buffer)."""
    if buf.lx_address is None:
        return {}
    return {"lx_address": buf.lx_address,
            "lx_bytes_per_core": lx_bytes_per_core(graph, buf, writers)}


def write_atomically(out_dir: Path,
                     files: dict[str, bytes | str | JsonDoc | WeightsBlob | LateJson],
                     source: Path,
                     finalize=None, self_contained: bool = False, weights_job=None) -> None:
    """Write `files` (and, if `self_contained`, a copy of `source` as program.pt2) as `out_dir`,
    all or nothing.

    `spyrec.outdir` decides whether `out_dir` may be replaced and swaps the finished directory
    in. `finalize(tmp_dir) -> {name: text}` runs on the complete temporary directory before the
    swap, for files computed from the others (the report's cost estimate). `weights_job` (a
    `codegen.weights_job.WeightsJob` started during the passes) supplies weights.bin when it
    holds the same blob.
    """
    def build(tmp: Path) -> None:
        early = {name: content for name, content in files.items()
                 if isinstance(content, WeightsBlob) and weights_job is not None}
        late = {name: content for name, content in files.items()
                if isinstance(content, LateJson)}
        for name, content in files.items():
            if name not in early and name not in late:
                _write_file(tmp / name, content)
        if self_contained:
            shutil.copyfile(source, tmp / PROGRAM_COPY)
        for name, content in (finalize(tmp) if finalize else {}).items():
            _write_file(tmp / name, content)
        for name, content in late.items():  # after finalize: its value was still coming
            _write_file(tmp / name, content)
        for name, blob in early.items():    # last: finalize ran while it was still writing
            if not weights_job.take(blob, tmp / name):
                _write_file(tmp / name, blob)

    replace_directory(check_output_dir(out_dir), build)


def _write_file(path: Path, content: bytes | str | JsonDoc | LateJson | WeightsBlob) -> None:
    content = printed(content)
    if isinstance(content, str):
        content = content.encode("utf-8")
    if isinstance(content, WeightsBlob):
        content.write(path)
        return
    with open(path, "xb") as f:  # a fresh directory: never follow or reuse an existing entry
        f.write(content)
