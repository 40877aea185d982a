"""Inspect a `.pt2` archive before anything loads it (torch is imported only by `load_exported`).

`torch.export.load` unpickles several kinds of member: weights and constants saved with
`use_pickle: true`, torchbind and opaque objects among the constants, legacy `<model>.pt` state
files, and `sample_inputs` (torch tries `weights_only=True` first, then falls back to a full
unpickle). A pickle can run arbitrary code, so spyrec reads the archive's JSON itself, refuses
every member it would otherwise have to unpickle (naming it), and hands torch a *sanitized copy*
holding only the members torch needs: the graph JSON, the configs, raw tensor payloads and the
small format markers. `sample_inputs` is never read: the copy carries it empty.

The archive layout (torch.export.save, archive format "pt2"): `<root>/models/<model>.json`,
`<root>/data/weights/model_weights_config.json` (+ raw `weight_<n>` payloads),
`<root>/data/constants/model_constants_config.json` (+ `tensor_<n>` payloads),
`<root>/data/sample_inputs/<model>.pt`, and `archive_format`, `archive_version`, `byteorder`,
`.data/version`, `.data/serialization_id` markers.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from spyrec.errors import InputFileError
from spyrec.userfiles import open_regular, zip_entry_problem

WEIGHTS_CONFIG = "data/weights/model_weights_config.json"
CONSTANTS_CONFIG = "data/constants/model_constants_config.json"
SAMPLE_INPUTS_DIR = "data/sample_inputs/"
# Small members torch reads as text; none of them is ever unpickled.
MARKERS = ("archive_format", "archive_version", "byteorder", ".data/version",
           ".data/serialization_id")
# Constant payload kinds by file-name prefix (torch/export/pt2_archive/constants.py).
TENSOR_CONSTANT_PREFIX = "tensor_"
PICKLED_CONSTANT_PREFIXES = {"custom_obj_": "a torchbind object (pickled)",
                             "opaque_obj_": "an opaque Python object (pickled)"}
FOREIGN_OP_PREFIXES = ("torch.ops.aten.", "_operator.", "torch.ops.prims.")
# Higher-order ops spyrec inlines: regions that only switch grad mode or autocast around
# ordinary ops (the rotary embedding's @torch.no_grad() in every Llama-style model).
# Custom ops spyrec lowers by their semantics (spyrec/frontend/aten_moe.py): transformers'
# default MoE experts call this grouped matmul, which no decomposition can remove.
LOWERED_CUSTOM_OPS = ("torch.ops.transformers.grouped_mm_fallback.default",
                      "torch.sym_ite")  # resolved or refused by the reader (frontend/checks.py)
INLINED_HIGHER_ORDER_OPS = ("torch.ops.higher_order.wrap_with_set_grad_enabled",
                            "torch.ops.higher_order.wrap_with_autocast")
MAX_JSON_MEMBER_BYTES = 1 << 30  # a graph or config larger than this is a crafted file
MAX_MARKER_BYTES = 1 << 10       # archive_format, byteorder, ...: a word or a number
PT2_FILE = "a .pt2 file from torch.export.save"
# Members are inflated whole when read, so what a compressed member claims is checked first.
# torch.export.save stores every member uncompressed; a re-zipped archive may deflate them.
READABLE = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)   # what torch's own reader (miniz) reads
MAX_JSON_RATIO = 100     # JSON text deflates about 5:1; 100:1 is whitespace padding
MAX_INT64 = (1 << 63) - 1
# ScalarType code -> (torch's dtype name, numpy storage dtype). bf16 and fp8 travel as bits.
SCALAR_TYPES = {
    1: ("uint8", "u1"), 2: ("int8", "i1"), 3: ("int16", "i2"), 4: ("int32", "i4"),
    5: ("int64", "i8"), 6: ("float16", "f2"), 7: ("float32", "f4"), 8: ("float64", "f8"),
    9: ("complex32", None), 10: ("complex64", "c8"), 11: ("complex128", "c16"),
    12: ("bool", "?"), 13: ("bfloat16", "u2"), 28: ("uint16", "u2"),
    29: ("float8_e4m3fn", "u1"), 30: ("float8_e5m2", "u1"), 31: ("float8_e4m3fnuz", "u1"),
    32: ("float8_e5m2fnuz", "u1"), 33: ("float8_e8m0fnu", "u1"), 34: ("uint32", "u4"),
    35: ("uint64", "u8"),
}


@dataclass(frozen=True)
class Archive:
    """What spyrec learned from a `.pt2` without loading it."""

    path: Path
    root: str               # "mlp_fp16/" (the folder every member lives under)
    model_member: str       # "mlp_fp16/models/model.json"
    nodes: tuple[dict, ...]  # the serialized graph's nodes
    safe_members: tuple[str, ...]  # everything torch may read, in archive order


def open_archive(path: str | Path) -> Archive:
    """Check `path` is an exported program spyrec can load without unpickling anything, and
    whose members claim no more than they hold and the program can use (`_check_entry`,
    `_check_payload`): nothing is inflated before its size is judged."""
    path = Path(path)
    try:
        with open_zip(path) as zf:
            return _inspect(path, zf, os.fstat(zf.fp.fileno()).st_size)
    except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as e:
        raise InputFileError(f"{path}: damaged .pt2 archive ({type(e).__name__}: {e}). Export "
                             f"and save it again.") from None


def open_zip(path: str | Path) -> zipfile.ZipFile:
    """The archive at `path` opened as a zip, if it is a regular file (a FIFO would block the
    read: `userfiles.open_regular`) holding one."""
    path = Path(path)
    f = open_regular(path, PT2_FILE)
    try:
        if not zipfile.is_zipfile(f):
            raise InputFileError(f"{path}: not a .pt2 archive (not a zip file). Expected a file "
                                 f"written by torch.export.save(exported_program, path).")
        return zipfile.ZipFile(f)
    except BaseException:
        f.close()
        raise


def sanitized_copy(archive: Archive) -> io.BytesIO:
    """A new in-memory archive with only `archive.safe_members`, and sample inputs empty.

    torch reads an empty sample-inputs member as "no example inputs", so nothing in the copy
    can reach an unpickler.
    """
    out = io.BytesIO()
    with open_zip(archive.path) as src, \
            zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as dst:
        for name in archive.safe_members:  # streamed: weights can be gigabytes
            with src.open(name) as r, dst.open(src.getinfo(name), "w", force_zip64=True) as w:
                shutil.copyfileobj(r, w, 1 << 20)
        for name in src.namelist():
            if name.startswith(archive.root + SAMPLE_INPUTS_DIR) and not name.endswith("/"):
                dst.writestr(name, b"")
    out.seek(0)
    return out


def _inspect(path: Path, zf: zipfile.ZipFile, file_bytes: int) -> Archive:
    names = zf.namelist()
    _check_member_names(path, names)
    for info in zf.infolist():
        _check_entry(path, info, file_bytes)
    if any("/data/aotinductor/" in n for n in names):
        raise InputFileError(f"{path}: is an AOTInductor package (compiled code), not an "
                             f"exported program. Save the torch.export.export(...) result "
                             f"with torch.export.save instead of aoti_compile_and_package.")
    model_member = _model_member(path, names)
    root = model_member[: -len(PurePosixPath(model_member).name) - len("models/")]
    nodes = _read_nodes(path, zf, model_member)
    _check_op_namespaces(path, nodes)
    present = set(names)
    payloads = _payload_members(path, zf, root, present, WEIGHTS_CONFIG, "data/weights/",
                                "weight")
    payloads += _payload_members(path, zf, root, present, CONSTANTS_CONFIG, "data/constants/",
                                 "constant")
    configs = [root + WEIGHTS_CONFIG, root + CONSTANTS_CONFIG]
    markers = [root + m for m in MARKERS if root + m in present]
    for marker in markers:
        _check_claim(path, zf.getinfo(marker), MAX_MARKER_BYTES, "bytes for a format marker")
    keep = {model_member, *configs, *payloads, *markers}
    return Archive(path, root, model_member, tuple(nodes),
                   tuple(n for n in names if n in keep))


def _check_member_names(path: Path, names: list[str]) -> None:
    """spyrec never extracts, but a member that would escape its folder marks a crafted file."""
    for name in names:
        parts = PurePosixPath(name.replace("\\", "/")).parts
        if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
            raise InputFileError(f"{path}: member {name!r} has an absolute or '..' path; a .pt2 "
                                 f"from torch.export.save never does. Refusing the archive.")


def _model_member(path: Path, names: list[str]) -> str:
    models = [n for n in names if n.split("/")[-2:-1] == ["models"] and n.endswith(".json")]
    if not models:
        raise InputFileError(f"{path}: a zip archive without an exported program in it "
                             f"(no models/*.json). Expected a file written by "
                             f"torch.export.save.")
    if len(models) > 1:
        raise InputFileError(f"{path}: holds {len(models)} exported programs "
                             f"({', '.join(models)}); spyrec compiles one. Save a single "
                             f"ExportedProgram with torch.export.save.")
    return models[0]


def _check_entry(path: Path, info: zipfile.ZipInfo, file_bytes: int) -> None:
    """A member's zip directory entry, before a byte of it is read: readable, inside the file,
    and no absurd claim (a stored member holds what it claims; nothing inflates beyond
    `userfiles.MAX_ZIP_RATIO`)."""
    problem = zip_entry_problem(info, file_bytes, READABLE, "torch reads 0 and 8")
    if problem:
        raise InputFileError(f"{path}: member {info.filename!r} {problem}; the archive is "
                             f"damaged or crafted. Export and save it again with "
                             f"torch.export.save.")


def _check_claim(path: Path, info: zipfile.ZipInfo, limit: int, what: str) -> None:
    if info.file_size > limit:
        raise InputFileError(f"{path}: member {info.filename!r} claims {info.file_size} {what}, "
                             f"more than any exported program needs ({limit}); refusing the "
                             f"archive.")


def _read_json(path: Path, zf: zipfile.ZipFile, member: str):
    info = zf.getinfo(member)
    _check_claim(path, info, MAX_JSON_MEMBER_BYTES, "bytes of JSON")
    if info.compress_type != zipfile.ZIP_STORED and \
            info.file_size > MAX_JSON_RATIO * max(info.compress_size, 1):
        raise InputFileError(f"{path}: member {member!r} claims {info.file_size} bytes of JSON "
                             f"inflated from {info.compress_size}, more than JSON text "
                             f"compresses ({MAX_JSON_RATIO}:1 at most); refusing the archive.")
    return json.loads(zf.read(member))


def _read_nodes(path: Path, zf: zipfile.ZipFile, member: str) -> list[dict]:
    """Every node of the graph, those of nested subgraphs (higher-order ops) included."""
    try:
        model = _read_json(path, zf, member)
        return _graph_nodes(model["graph_module"]["graph"])
    except (ValueError, KeyError, TypeError) as e:
        raise InputFileError(f"{path}: damaged exported program ({member}: "
                             f"{type(e).__name__}: {e}). Export and save it again.") from None
    except RecursionError:
        raise InputFileError(f"{path}: damaged exported program ({member}: nested deeper than "
                             f"any graph). Export and save it again.") from None


def _graph_nodes(graph: dict) -> list[dict]:
    nodes = graph["nodes"]
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise TypeError("graph nodes are not a list of objects")
    found = []
    for node in nodes:
        found.append(node)
        for inp in node.get("inputs") or []:
            arg = inp.get("arg") if isinstance(inp, dict) else None
            if isinstance(arg, dict) and isinstance(arg.get("as_graph"), dict):
                found += _graph_nodes(arg["as_graph"]["graph"])
    return found


def _check_op_namespaces(path: Path, nodes: list[dict]) -> None:
    targets = sorted({n.get("target", "") for n in nodes if isinstance(n.get("target"), str)})
    custom = [t for t in targets if t and not t.startswith(FOREIGN_OP_PREFIXES)
              and t not in INLINED_HIGHER_ORDER_OPS and t not in LOWERED_CUSTOM_OPS]
    if custom:
        raise InputFileError(f"{path}: uses custom ops spyrec cannot read: {', '.join(custom)}. "
                             f"Export the model with these ops decomposed into aten ops.")


def _payload_members(path: Path, zf: zipfile.ZipFile, root: str, present: set[str],
                     config_name: str, folder: str, kind: str) -> list[str]:
    """The raw payload members a weights/constants config names; refuses every pickled one."""
    config_member = root + config_name
    legacy = [n for n in present if n.startswith(root + folder) and n.endswith(".pt")]
    if legacy:
        raise InputFileError(f"{path}: member {legacy[0]!r} is a legacy pickled {kind} file; "
                             f"spyrec never unpickles (a pickle can run code). Re-save the "
                             f"program with torch.export.save from torch 2.13.")
    if config_member not in present:
        raise InputFileError(f"{path}: missing {config_member!r}; the archive is incomplete. "
                             f"Export and save it again with torch.export.save.")
    config = _read_config(path, zf, config_member)
    spans: dict[str, int | None] = {}     # member -> the bytes its tensors reach (None: unknown)
    for fqn, meta in config.items():
        member = _payload_member(path, root + folder, fqn, meta, kind)
        if member not in present:
            raise InputFileError(f"{path}: {kind} {fqn!r} is stored in member {member!r}, which "
                                 f"is missing from the archive. Export and save it again.")
        span = tensor_span(path, f"{kind} {fqn!r}", meta.get("tensor_meta"),
                           zf.getinfo(member).file_size)
        known = None if span is None or spans.get(member, 0) is None else \
            max(spans.get(member, 0), span)
        spans[member] = known
    for member, span in spans.items():
        info = zf.getinfo(member)
        if span is not None and info.compress_type != zipfile.ZIP_STORED and \
                info.file_size > span:
            raise InputFileError(f"{path}: member {member!r} is compressed and claims "
                                 f"{info.file_size} bytes, but its tensors use {span}; it would "
                                 f"be inflated whole for nothing. Export and save it again with "
                                 f"torch.export.save (which stores members uncompressed).")
    return list(spans)


def tensor_span(path: Path, what: str, tmeta, payload_bytes: int) -> int | None:
    """The bytes of its payload a stored tensor reaches (`tensor_meta`: dtype, sizes, strides,
    storage_offset), refused when a size, stride or offset is negative or not an integer,
    when a product overflows int64, or when the tensor reaches past its `payload_bytes`.
    None for a tensor without `tensor_meta` (the fast reader refuses it; torch reads it)."""
    if not isinstance(tmeta, dict):
        return None
    code = SCALAR_TYPES.get(tmeta.get("dtype"), (None, "?"))[1] if \
        isinstance(tmeta.get("dtype"), int) else "?"
    size = itemsize(code)
    sizes = _ints(path, what, "sizes", tmeta.get("sizes"))
    strides = _ints(path, what, "strides", tmeta.get("strides"))
    offset = _ints(path, what, "storage_offset", [tmeta.get("storage_offset", {"as_int": 0})])[0]
    described = f"{what} ({short(sizes)}, strides {short(strides)}, offset {offset})"
    if len(strides) != len(sizes):
        raise InputFileError(f"{path}: {described} has {len(sizes)} sizes but {len(strides)} "
                             f"strides; the archive is damaged. Export and save it again.")
    if math.prod(sizes) == 0:
        return 0
    last = offset + sum((n - 1) * st for n, st in zip(sizes, strides))
    if math.prod(sizes) * size > MAX_INT64 or (last + 1) * size > MAX_INT64:
        raise InputFileError(f"{path}: {described} overflows a 64-bit size; the archive is "
                             f"damaged or crafted. Export and save it again.")
    if (last + 1) * size > payload_bytes:
        raise InputFileError(f"{path}: {described} does not fit its "
                             f"{payload_bytes // size}-element payload; the archive is "
                             f"damaged. Export and save it again.")
    return (last + 1) * size


def itemsize(code: str | None) -> int:
    """Bytes per element of a SCALAR_TYPES numpy code (`f2` 2, `?` 1, complex32's None 4)."""
    return 4 if code is None else 1 if code == "?" else int(code[1:])


def short(value, limit: int = 80) -> str:
    """A string, or `repr(value)`, cut to `limit` characters: a crafted file's values go into
    messages."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _ints(path: Path, what: str, field: str, values) -> list[int]:
    """`[{"as_int": n}, ...]` as non-negative ints, or one InputFileError naming the field."""
    if not isinstance(values, list) or not all(
            isinstance(v, dict) and type(v.get("as_int")) is int and v["as_int"] >= 0
            for v in values):
        raise InputFileError(f"{path}: {what} has {field} {short(values)}, not a list of "
                             f"non-negative integers; the archive is damaged. Export and save "
                             f"it again.")
    return [v["as_int"] for v in values]


def _read_config(path: Path, zf: zipfile.ZipFile, member: str) -> dict:
    try:
        config = _read_json(path, zf, member)["config"]
        if not isinstance(config, dict) or not all(isinstance(v, dict)
                                                   for v in config.values()):
            raise TypeError("'config' is not an object of objects")
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise InputFileError(f"{path}: damaged {member} ({type(e).__name__}: {e}). Export and "
                             f"save the program again.") from None
    return config


def _payload_member(path: Path, folder: str, fqn: str, meta: dict, kind: str) -> str:
    name = meta.get("path_name")
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise InputFileError(f"{path}: {kind} {fqn!r} has no valid path_name in its config "
                             f"({name!r}). Export and save the program again.")
    member = folder + name
    what = next((d for p, d in PICKLED_CONSTANT_PREFIXES.items() if name.startswith(p)), None)
    if meta.get("use_pickle") is True or what is not None:
        raise InputFileError(
            f"{path}: {kind} {fqn!r} (member {member!r}) is {what or 'a pickled tensor'}; "
            f"spyrec never unpickles archive members (a pickle can run code). Make it a plain "
            f"dense tensor (no tensor subclass, no script or Python object) and export again.")
    if kind == "constant" and not name.startswith(TENSOR_CONSTANT_PREFIX):
        raise InputFileError(f"{path}: constant {fqn!r} is stored as {name!r}, a kind spyrec "
                             f"does not read; only tensor constants are supported.")
    return member


def load_exported(path: str | Path):
    """`torch.export.load` of the sanitized copy: the ExportedProgram, with nothing unpickled.

    Shared by the compiler's front end and `spyrec run --check` (which loads `program.pt2`
    from an output directory a user may have been handed)."""
    import torch

    archive = open_archive(path)
    _register_op_libraries(path)
    return torch.export.load(sanitized_copy(archive))


# Custom-op namespaces that installed packages define, and the module whose import registers
# them with torch (the archive only names the op: torch.export.load needs it registered). A
# fixed table of known modules, never a name taken from the file.
OP_LIBRARIES = {"torch.ops.transformers.": "transformers.integrations.moe"}


def _register_op_libraries(path: str | Path) -> None:
    """Import the module that registers each known custom-op namespace the graph names."""
    import importlib

    with open_zip(path) as zf:
        graphs = [n for n in zf.namelist()
                  if n.split("/")[-2:-1] == ["models"] and n.endswith(".json")]
        text = b"".join(zf.read(n) for n in graphs)
    for prefix, module in OP_LIBRARIES.items():
        if b'"' + prefix.encode() in text:
            try:
                importlib.import_module(module)
            except ImportError:
                pass    # torch.export.load then names the op it cannot find
