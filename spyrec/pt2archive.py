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
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from spyrec.errors import InputFileError

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
LOWERED_CUSTOM_OPS = ("torch.ops.transformers.grouped_mm_fallback.default",)
INLINED_HIGHER_ORDER_OPS = ("torch.ops.higher_order.wrap_with_set_grad_enabled",
                            "torch.ops.higher_order.wrap_with_autocast")
MAX_JSON_MEMBER_BYTES = 1 << 30  # a graph or config larger than this is a crafted file


@dataclass(frozen=True)
class Archive:
    """What spyrec learned from a `.pt2` without loading it."""

    path: Path
    root: str               # "mlp_fp16/" (the folder every member lives under)
    model_member: str       # "mlp_fp16/models/model.json"
    nodes: tuple[dict, ...]  # the serialized graph's nodes
    safe_members: tuple[str, ...]  # everything torch may read, in archive order


def open_archive(path: str | Path) -> Archive:
    """Check `path` is an exported program spyrec can load without unpickling anything."""
    path = Path(path)
    _check_is_zip(path)
    try:
        with zipfile.ZipFile(path) as zf:
            return _inspect(path, zf)
    except zipfile.BadZipFile as e:
        raise InputFileError(f"{path}: damaged .pt2 archive ({e}). Export and save it "
                             f"again.") from None


def sanitized_copy(archive: Archive) -> io.BytesIO:
    """A new in-memory archive with only `archive.safe_members`, and sample inputs empty.

    torch reads an empty sample-inputs member as "no example inputs", so nothing in the copy
    can reach an unpickler.
    """
    out = io.BytesIO()
    with zipfile.ZipFile(archive.path) as src, \
            zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as dst:
        for name in archive.safe_members:  # streamed: weights can be gigabytes
            with src.open(name) as r, dst.open(src.getinfo(name), "w", force_zip64=True) as w:
                shutil.copyfileobj(r, w, 1 << 20)
        for name in src.namelist():
            if name.startswith(archive.root + SAMPLE_INPUTS_DIR) and not name.endswith("/"):
                dst.writestr(name, b"")
    out.seek(0)
    return out


def _check_is_zip(path: Path) -> None:
    if not path.exists():
        raise InputFileError(f"{path}: no such file")
    if path.is_dir():
        raise InputFileError(f"{path}: is a directory, expected a .pt2 file from torch.export.save")
    if not zipfile.is_zipfile(path):
        raise InputFileError(f"{path}: not a .pt2 archive (not a zip file). Expected a file "
                             f"written by torch.export.save(exported_program, path).")


def _inspect(path: Path, zf: zipfile.ZipFile) -> Archive:
    names = zf.namelist()
    _check_member_names(path, names)
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


def _read_json(path: Path, zf: zipfile.ZipFile, member: str):
    size = zf.getinfo(member).file_size
    if size > MAX_JSON_MEMBER_BYTES:
        raise InputFileError(f"{path}: member {member!r} claims {size} bytes of JSON, more than "
                             f"any exported program needs; refusing the archive.")
    return json.loads(zf.read(member))


def _read_nodes(path: Path, zf: zipfile.ZipFile, member: str) -> list[dict]:
    """Every node of the graph, those of nested subgraphs (higher-order ops) included."""
    try:
        model = _read_json(path, zf, member)
        return _graph_nodes(model["graph_module"]["graph"])
    except (ValueError, KeyError, TypeError) as e:
        raise InputFileError(f"{path}: damaged exported program ({member}: "
                             f"{type(e).__name__}: {e}). Export and save it again.") from None


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
    members = []
    for fqn, meta in config.items():
        member = _payload_member(path, root + folder, fqn, meta, kind)
        if member not in present:
            raise InputFileError(f"{path}: {kind} {fqn!r} is stored in member {member!r}, which "
                                 f"is missing from the archive. Export and save it again.")
        members.append(member)
    return members


def _read_config(path: Path, zf: zipfile.ZipFile, member: str) -> dict:
    try:
        config = _read_json(path, zf, member)["config"]
        if not isinstance(config, dict) or not all(isinstance(v, dict)
                                                   for v in config.values()):
            raise TypeError("'config' is not an object of objects")
    except (ValueError, KeyError, TypeError) as e:
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

    with zipfile.ZipFile(path) as zf:
        graphs = [n for n in zf.namelist()
                  if n.split("/")[-2:-1] == ["models"] and n.endswith(".json")]
        text = b"".join(zf.read(n) for n in graphs)
    for prefix, module in OP_LIBRARIES.items():
        if b'"' + prefix.encode() in text:
            try:
                importlib.import_module(module)
            except ImportError:
                pass    # torch.export.load then names the op it cannot find
