"""Load a `.pt2` file and bring it to the aten form the lowering understands.

Every failure a user can cause (missing file, not an archive, an AOTInductor package, a custom op
that is not registered, a pickled member, an op this torch does not have, dynamic shapes) becomes
one `InputFileError` or `UnsupportedProgram` that says what the file is and what spyrec expected.
torch only ever sees the sanitized copy `spyrec.pt2archive` makes, so nothing in the file is unpickled.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from spyrec.errors import InputFileError, UnsupportedProgram
from spyrec.pt2archive import Archive, open_archive, sanitized_copy

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
    path = Path(path)
    archive = open_archive(path)  # torch-free; refuses every member torch would unpickle
    import torch

    _check_ops_exist(archive)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecations, not the user's
        try:
            ep = torch.export.load(sanitized_copy(archive))
        except Exception as e:  # torch raises many types here; all mean "not loadable"
            raise InputFileError(f"{path}: torch.export.load failed: {_first_line(e)}. "
                                 f"Expected a file written by torch.export.save.") from None
        _check_static_shapes(ep, path)
        return ep.run_decompositions(_decomposition_table())


def _check_ops_exist(archive: Archive) -> None:
    """An op name this torch does not know means a damaged file or a newer exporter; say which
    node, instead of torch's deserializer failing deep inside."""
    import torch

    for node in archive.nodes:
        target = node.get("target")
        if isinstance(target, str) and target.startswith("torch.ops.") and \
                not _resolves(torch, target):
            raise InputFileError(
                f"{archive.path}: node {node.get('name', '?')!r} calls {target}, which torch "
                f"{torch.__version__} does not have. The file is damaged or was exported by "
                f"another torch version: export it again with torch {torch.__version__}.")


def _resolves(torch, target: str) -> bool:
    parts = target.split(".")[2:]  # torch.ops.<namespace>.<op>[.<overload>]
    obj = torch.ops
    try:
        for part in parts:
            obj = getattr(obj, part)
    except (AttributeError, RuntimeError):
        return False
    return True


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
