"""Load a `.pt2` file and bring it to the aten form the lowering understands.

Every failure a user can cause (missing file, not an archive, an AOTInductor package, a custom op
that is not registered, dynamic shapes) becomes one `InputFileError` or `UnsupportedProgram`
that says what the file is and what spyrec expected.
"""

from __future__ import annotations

import json
import warnings
import zipfile
from pathlib import Path

from spyrec.errors import InputFileError, UnsupportedProgram

# Composite ops we lower ourselves (one device op each, or our own decomposition with fp32
# intermediates): keep them out of torch's default decomposition table.
KEEP_OPS = (
    "aten.linear.default", "aten.gelu.default", "aten.silu.default",
    "aten.layer_norm.default", "aten.rms_norm.default",
    "aten.softmax.int", "aten.log_softmax.int",
    # *_copy views: lowered as index expressions, not torch's view + clone (a copy)
    "aten.transpose_copy.int", "aten.t_copy.default", "aten.expand_copy.default",
    "aten.squeeze_copy.dim", "aten.squeeze_copy.dims", "aten.squeeze_copy.default",
    "aten.unsqueeze_copy.default", "aten.alias_copy.default", "aten.diagonal_copy.default",
    "aten.unfold_copy.default",
)

REEXPORT_STATIC = (
    "re-export with static shapes: call torch.export.export(model, example_inputs) without "
    "dynamic_shapes (and without torch.export.Dim), then save it again")


def load_program(path: str | Path):
    """The decomposed ExportedProgram stored in `path`."""
    import torch

    path = Path(path)
    _check_archive(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecations, not the user's
        try:
            ep = torch.export.load(str(path))
        except Exception as e:  # torch raises many types here; all mean "not loadable"
            raise InputFileError(f"{path}: torch.export.load failed: {_first_line(e)}. "
                                 f"Expected a file written by torch.export.save.") from None
        _check_static_shapes(ep, path)
        return ep.run_decompositions(_decomposition_table())


def _check_archive(path: Path) -> None:
    """Say what the file is when it is not an exported program, without importing torch."""
    if not path.exists():
        raise InputFileError(f"{path}: no such file")
    if path.is_dir():
        raise InputFileError(f"{path}: is a directory, expected a .pt2 file from torch.export.save")
    if not zipfile.is_zipfile(path):
        raise InputFileError(f"{path}: not a .pt2 archive (not a zip file). Expected a file "
                             f"written by torch.export.save(exported_program, path).")
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        if any("/data/aotinductor/" in n for n in names):
            raise InputFileError(f"{path}: is an AOTInductor package (compiled code), not an "
                                 f"exported program. Save the torch.export.export(...) result "
                                 f"with torch.export.save instead of aoti_compile_and_package.")
        models = [n for n in names if n.split("/")[-2:-1] == ["models"] and n.endswith(".json")]
        if not models:
            raise InputFileError(f"{path}: a zip archive without an exported program in it "
                                 f"(no models/*.json). Expected a file written by "
                                 f"torch.export.save.")
        try:
            model = json.loads(zf.read(models[0]))
            nodes = model["graph_module"]["graph"]["nodes"]
        except (ValueError, KeyError, TypeError) as e:
            raise InputFileError(f"{path}: damaged exported program ({models[0]}: "
                                 f"{type(e).__name__}: {e}). Export and save it again.") from None
    custom = sorted({n.get("target", "") for n in nodes} - {""})
    custom = [t for t in custom if not t.startswith(("torch.ops.aten.", "_operator.",
                                                      "torch.ops.prims."))]
    if custom:
        raise InputFileError(f"{path}: uses custom ops spyrec cannot read: {', '.join(custom)}. "
                             f"Export the model with these ops decomposed into aten ops.")


def _decomposition_table():
    import torch

    table = torch.export.default_decompositions()
    for key in list(table.keys()):
        if str(key) in KEEP_OPS:
            del table[key]
    return table


def _check_static_shapes(ep, path: Path) -> None:
    import torch

    dynamic = [f"range constraint {k}: {v}" for k, v in ep.range_constraints.items()]
    for node in ep.graph.nodes:
        val = node.meta.get("val")
        shape = getattr(val, "shape", ())
        if node.op == "placeholder" and any(isinstance(d, torch.SymInt) for d in shape):
            dynamic.append(f"{node.name} {list(shape)}")
    if dynamic:
        raise UnsupportedProgram(f"{path}: dynamic shapes are not supported yet "
                                 f"({'; '.join(dynamic)}); {REEXPORT_STATIC}.")


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
