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

from spyrec import __version__
from spyrec.build_record import build_id, file_record, sha256_of, stamp
from spyrec.codegen.bundle import RunCounts, bundle_file
from spyrec.codegen.opspec import op_spec, spec_tree
from spyrec.codegen.fused import file_groups, fused_document, op_file_keys
from spyrec.codegen.superdsc import superdsc_document
from spyrec.codegen.symbols import SymbolTable
from spyrec.errors import InputFileError
from spyrec.ir import Graph
from spyrec.ir.lx import lx_bytes_per_core
from spyrec.ir.symbols import SymLength
from spyrec.codegen.weights_file import (
    WEIGHTS_FILE, WeightsBlob, background_priority, entry_identity,
)
from spyrec.outdir import PROGRAM_COPY, check_output_dir, replace_directory

MANIFEST_FORMAT = "spyrec-manifest/4"
BUNDLE_FILE = "bundle.mlir"
MANIFEST_FILE = "manifest.json"
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
    `WeightsBlob` the writer streams; manifest.json a `ManifestFile`, written last, its
    document without what only the end of the build knows (the source's and the constants'
    SHA-256, the build record) until then; opspecs.json and each
    sdsc file a `JsonDoc`, printed when first written or measured), and the documents
    some of them print: manifest.json's, every sdsc_<n>.json's by file name, and each
    bundle's executions as data
    (`bundle.bundle_file`). The documents are for whatever reads the output without the files
    (the cost estimate of report.json, spyrec/driver.py); they are plain JSON values, what
    parsing the texts gives. The executions are those at every symbolic length's maximum;
    `run_counts` says how often each bundle runs each file at other lengths (the cost curve),
    and `symbols` are the graph's symbolic lengths (none for a static program)."""

    files: dict[str, bytes | str | JsonDoc | ManifestFile | WeightsBlob]
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
    """A built file's content as written: text for a document (`JsonDoc`, `ManifestFile`:
    as far as it is known), anything else (bytes, str, a `WeightsBlob`, which streams
    itself) as it is."""
    return content.text() if isinstance(content, (JsonDoc, ManifestFile)) else content


class ManifestFile:
    """manifest.json, the last file of a build written (`write_atomically`): its document is
    complete but for what only the end of the build knows. The source's SHA-256 comes from a
    thread hashing it while compile works (`Sha256Job`: Granite-8B width at 16 layers waited
    4.3 s for it before the cost estimate; the hash shares a core with weights.bin's
    conversion while the passes run); each stored constant's SHA-256 from the weights writer;
    and the build record (`spyrec/build_record.py`) from every other file once written."""

    def __init__(self, doc: dict, source_sha256: Sha256Job | None):
        self.doc = doc
        self._source_sha256 = source_sha256

    def text(self) -> str:
        """The document as far as it is known: with the source's hash (waited for)."""
        if self._source_sha256 is not None:
            self.doc["source"]["sha256"] = self._source_sha256.result()
        return dump_json(self.doc)

    def finish(self, files: dict[str, dict], weight_digests: dict[str, str]) -> str:
        """The file's text, with each stored constant's SHA-256 (`weight_digests`, by name),
        the record of every other file (`files`: name -> its `build.files` entry) and the id
        over all of it; the id is `build_id` afterwards."""
        for entry in self.doc["weights"]["tensors"]:
            if "offset" in entry:
                entry["crc32"] = weight_digests[entry["name"]]
        self.doc["build"] = {"id": "", "files": dict(sorted(files.items()))}
        self.text()                         # the source's hash, which the id covers
        self.doc["build"]["id"] = build_id(self.doc)
        return dump_json(self.doc)

    @property
    def build_id(self) -> str:
        return self.doc["build"]["id"]


def build_outputs(graph: Graph, source: Path, pipeline: list[dict], configs: dict,
                  report: dict, check: bool = True, self_contained: bool = False,
                  source_sha256: Sha256Job | None = None,
                  cost_params: dict | None = None) -> BuiltOutput:
    """Every file of the output directory (pure: no disk writes). `check`: the emitter
    re-derives each core's start address from our coordinates (codegen/superdsc.py)."""
    specs = [op_spec(graph, op) for op in graph.ops]
    files: dict[str, bytes | str | JsonDoc | WeightsBlob | ManifestFile] = {}
    sdsc: dict[str, dict] = {}
    symbols = SymbolTable()
    groups = file_groups(graph.ops)     # one file per op, or per fused group of ops
    for k, members in enumerate(groups):
        name = f"sdsc_{k}.json"
        docs = []
        for i in members:
            accesses = list(graph.ops[i].accesses())
            bufs = [graph.buffers[a.buffer] for _, a in accesses]
            docs.append(superdsc_document(k, specs[i], bufs, [r for r, _ in accesses],
                                          symbols, check))
        sdsc[name] = docs[0] if len(docs) == 1 else fused_document(k, docs)
        files[name] = JsonDoc(sdsc[name])
    sdsc_names = list(sdsc)
    op_keys = op_file_keys(groups, sdsc_names)
    tree = spec_tree(graph.ops, specs)
    files["opspecs.json"] = JsonDoc({"format": OPSPECS_FORMAT,
                                     "kernels": [{"name": "main", "specs": tree}]})
    lengths = tuple(graph.symbols.values())
    files[BUNDLE_FILE], executions, run_counts = bundle_file(
        sdsc_names, [graph.ops[members[0]].loops for members in groups],
        [symbols.of(k) for k in range(len(groups))], lengths)
    blob = WeightsBlob.plan(graph)
    manifest_doc = manifest(graph, source, pipeline, configs, sdsc_names,
                            report.get("hbm_bytes", 0), blob, self_contained, source_sha256,
                            op_keys)
    if cost_params:     # --set cost.NAME=VALUE: run --report and inspect price with them too
        manifest_doc["cost_params"] = dict(cost_params)
    files[MANIFEST_FILE] = ManifestFile(manifest_doc, source_sha256)
    if blob.entries:
        files[WEIGHTS_FILE] = blob
    auto = (report.get("tiling") or {}).get("auto_config")
    if auto is not None:   # --tiling auto: its choice, a config the user can pass back
        files["tiling.yaml"] = auto
    return BuiltOutput(files, manifest_doc, sdsc, {BUNDLE_FILE: executions},
                       {BUNDLE_FILE: run_counts}, lengths)


def manifest(graph: Graph, source: Path, pipeline: list[dict], configs: dict,
             sdsc_names: list[str], hbm_bytes: int, blob: WeightsBlob | None = None,
             self_contained: bool = False, source_sha256: Sha256Job | None = None,
             op_keys: list[str] | None = None) -> dict:
    """manifest.json's document; `op_keys`: per op, the name its args are listed under
    (`codegen/fused.py op_file_keys`; default: op i is file i)."""
    op_keys = sdsc_names if op_keys is None else op_keys
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
                   # a hash still running is filled in when the file is written
                   # (`ManifestFile`)
                   "sha256": None if source_sha256 is not None else sha256_of(source),
                   "copy": PROGRAM_COPY if self_contained else None},
        "build": None,      # the record of every file, written last (`ManifestFile.finish`)
        "pipeline": pipeline, "configs": configs,
        "inputs": list(graph.inputs), "outputs": list(graph.outputs),
        **({"mutated_buffers": dict(graph.mutated_buffers)} if graph.mutated_buffers else {}),
        **_symbols(graph),
        **_lx_args(graph, op_keys),
        **_hbm_args(graph, op_keys),
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
                     files: dict[str, bytes | str | JsonDoc | WeightsBlob | ManifestFile],
                     source: Path,
                     finalize=None, self_contained: bool = False,
                     weights_job=None) -> list[str]:
    """Write `files` (and, if `self_contained`, a copy of `source` as program.pt2) as `out_dir`,
    all or nothing, bound into one build (`spyrec/build_record.py`); the temporaries that
    could not be removed afterwards (`outdir.replace_directory`: the caller names them).

    `spyrec.outdir` decides whether `out_dir` may be replaced and swaps the finished directory
    in. `finalize(tmp_dir) -> {name: text_of}` runs once the files the others are computed
    from are written, for the report and its cost estimate: `text_of(build_id)` is the text
    of a file that carries the build's id. `weights_job` (a `codegen.weights_job.WeightsJob`
    started during the passes) supplies weights.bin when it holds the same blob. The order:
    the deterministic files (their digests recorded as written), the source's copy, the
    finalize step (while the weights may still be writing), weights.bin (its constants'
    digests), manifest.json (the record and the id), the stamped files, weights.bin's stamp.
    """
    def build(tmp: Path) -> None:
        manifest_file = files[MANIFEST_FILE]
        record: dict[str, dict] = {}
        for name, content in files.items():
            if name != MANIFEST_FILE and not isinstance(content, WeightsBlob):
                record[name] = _write_file(tmp / name, content)
        if self_contained:
            record[PROGRAM_COPY] = _copy_source(source, tmp / PROGRAM_COPY, manifest_file)
        stamped = finalize(tmp) if finalize else {}
        blobs = [(name, blob) for name, blob in files.items() if isinstance(blob, WeightsBlob)]
        digests: dict[str, str] = {}
        for name, blob in blobs:        # after finalize: the job was still writing meanwhile
            digests |= _weights(blob, tmp / name, weights_job)
            record[name] = {"stamp": True}
        record |= {name: {"stamp": True} for name in stamped}
        _write_file(tmp / MANIFEST_FILE, manifest_file.finish(record, digests))
        for name, text_of in stamped.items():
            _write_file(tmp / name, text_of(manifest_file.build_id))
        for name, blob in blobs:
            _append(tmp / name, stamp(manifest_file.build_id))

    left = replace_directory(check_output_dir(out_dir), build)
    return left + (weights_job.left if weights_job is not None else [])


def _weights(blob: WeightsBlob, path: Path, weights_job) -> dict[str, str]:
    """Write `blob` at `path` (the early job's file when it holds the same blob); each stored
    constant's SHA-256 by name."""
    if weights_job is not None:
        digests = weights_job.take(blob, path)
        if digests is not None:
            return digests
    written: dict[tuple, str] = {}
    blob.write(path, done=written.__setitem__)
    return {entry[0].name: written[entry_identity(*entry)] for entry in blob.entries}


def _copy_source(source: Path, copy: Path, manifest_file: ManifestFile) -> dict:
    """`source` copied to `copy` (--self-contained), its record; the copy must hash to what
    the manifest records for the source (a source replaced while compiling is caught here,
    not by a later `run --check`)."""
    shutil.copyfile(source, copy)
    digest = sha256_of(copy)
    expected = json.loads(manifest_file.text())["source"]["sha256"]
    if digest != expected:
        raise InputFileError(f"{source}: changed while spyrec compiled it (SHA-256 "
                             f"{expected[:12]}... when read, {digest[:12]}... when copied for "
                             f"--self-contained); nothing was written. Compile it again once "
                             f"it stays in place.")
    return {"bytes": copy.stat().st_size, "sha256": digest}


def _write_file(path: Path, content: bytes | str | JsonDoc | WeightsBlob) -> dict:
    """Write one file of a new build; its `build.files` record."""
    content = printed(content)
    if isinstance(content, str):
        content = content.encode("utf-8")
    with open(path, "xb") as f:  # a fresh directory: never follow or reuse an existing entry
        f.write(content)
    return file_record(content)


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)
