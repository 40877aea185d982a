"""Load a `.pt2` file and bring it to the aten form the lowering understands.

Every failure a user can cause (missing file, not an archive, an AOTInductor package, a custom op
that is not registered, a pickled member, an op this torch does not have, a symbolic size spyrec
cannot serve) becomes one `InputFileError` or `UnsupportedProgram` that says what the file is and
what spyrec expected. A dynamic-shape export is read at one binding of its symbols (`symbols.py`).
torch only ever sees the sanitized copy `spyrec.pt2archive` makes, so nothing in the file is unpickled.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from spyrec.errors import InputFileError, UnsupportedProgram
from spyrec.frontend.fold import fold_constants
from spyrec.frontend.from_torch import is_sym_int, program_of, target_name
from spyrec.frontend.lowerings import lowerable
from spyrec.frontend.program import NeedsTorch, Program
from spyrec.frontend.pt2json import check_signature, read_program, stored_tensors
from spyrec.frontend.symbols import refuse_symbols
from spyrec.pt2archive import Archive, open_archive, sanitized_copy

FRONTENDS = ("auto", "fast", "torch")


def load_program(path: str | Path, frontend: str = "auto", bind: dict[str, int] | None = None,
                 allow_symbols: bool = False) -> Program:
    """The Program stored in `path`, read by the chosen front end at the binding `bind` of its
    symbols (symbol -> length; None: each at its maximum). A program with symbolic dims is
    refused (`refuse_symbols`) unless the caller can compile them (`allow_symbols`).

    - `fast` reads the graph JSON and raw weights itself (no torch import, milliseconds);
    - `torch` runs `torch.export.load` on the sanitized copy and decomposes only the ops the
      lowering does not know (every op it knows is kept as stored, so both front ends give the
      same Program whenever nothing needs decomposing);
    - `auto` is `fast`, falling back to `torch` when the fast reader cannot express the program
      or meets an op the lowering does not know; `Program.fallback_reason` says why.
    """
    program = _load(Path(path), frontend, bind)
    if not allow_symbols:
        refuse_symbols(program, path)
    return program


def _load(path: Path, frontend: str, bind: dict[str, int] | None) -> Program:
    archive = open_archive(path)  # torch-free; refuses every member torch would unpickle
    if frontend == "torch":
        return _folded(_torch_program(archive, bind))
    try:
        program = _folded(read_program(path, archive, bind))
    except NeedsTorch as e:
        if frontend == "fast":
            raise UnsupportedProgram(f"{path}: the fast front end cannot read this program "
                                     f"({e}); compile with --frontend torch") from None
        reason = str(e)
    else:
        unknown = sorted({n.target for n in program.nodes
                          if n.op == "call_function" and not lowerable(n.target)})
        if not unknown or frontend == "fast":
            return program  # lowering lists what it cannot lower, with source lines
        reason = f"the stored graph uses {', '.join(unknown)}, which spyrec does not lower " \
                 f"directly (torch decomposes them)"
    program = _folded(_torch_program(archive, bind))
    program.fallback_reason = reason
    return program


def _folded(program: Program) -> Program:
    """Constant subgraphs (masks, positions, rotary tables of static shapes) evaluated now."""
    program, count = fold_constants(program)
    program.constants_folded = count
    return program


def _torch_program(archive: Archive, bind: dict[str, int] | None) -> Program:
    import torch

    _check_ops_exist(archive)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecations, not the user's
        try:
            ep = torch.export.load(sanitized_copy(archive))
        except Exception as e:  # torch raises many types here; all mean "not loadable"
            raise InputFileError(f"{archive.path}: torch.export.load failed: {_first_line(e)}. "
                                 f"Expected a file written by torch.export.save.") from None
        unknown = sorted({target_name(n.target) for n in ep.graph.nodes  # sizes vanish
                          if n.op == "call_function" and not is_sym_int(n) and
                          not lowerable(target_name(n.target))})
        if unknown:
            ep = _decomposed(ep, archive, unknown)
    program = program_of(ep, bind, str(archive.path))
    check_signature(program, str(archive.path))     # weights as the graph says they are
    return _with_stored(program, archive)


def _decomposed(ep, archive: Archive, unknown: list[str]):
    """`ep` with every op the lowering does not know decomposed. torch's tracer fails on some
    loaded programs: dynamic-shape ones with a derived Dim such as 64*Dim (torch 2.13), and
    a non-strict export whose module mutates a tensor that is not a registered buffer
    (transformers' static cache: it is lifted as a constant). Either is one refusal naming
    the ops and torch's reason, not spyrec's internal error."""
    import torch

    try:
        return ep.run_decompositions(decomposition_table())
    except Exception as e:  # torch's tracer raises anything; all mean "cannot decompose"
        head = (f"{archive.path}: the graph uses {', '.join(unknown)}, which spyrec does not "
                f"lower directly, and torch {torch.__version__} cannot decompose this ")
        if ep.range_constraints:
            raise UnsupportedProgram(
                f"{head}dynamic-shape program ({_first_line(e)}); compute what these ops "
                f"build from the input outside the model, or re-export with static "
                f"shapes.") from None
        raise UnsupportedProgram(
            f"{head}program ({_first_line(e)}); a module that changes a tensor in place must "
            f"hold it as a registered buffer, and transformers' static-cache recipes export "
            f"with strict=True: re-export accordingly.") from None


def _with_stored(program: Program, archive: Archive) -> Program:
    """The torch front end's weights as references to the archive (as the fast reader's):
    torch's in-memory copies are freed with the ExportedProgram, and the writer streams each
    weight from the archive. An entry the archive does not hold as such stays an array."""
    try:
        stored = stored_tensors(archive)
    except (NeedsTorch, KeyError, TypeError, ValueError):
        return program
    for fqn in list(program.state):
        ref, dtype = stored.get(fqn, (None, None))
        value = program.state.stored(fqn)
        if ref is not None and dtype == program.state_dtypes.get(fqn) and \
                tuple(ref.shape) == tuple(value.shape) and ref.host_dtype == value.dtype:
            program.state[fqn] = ref
    return program


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


def decomposition_table():
    """torch's default decompositions, minus every op the lowering knows: those stay whole
    (one device op, or our own decomposition with fp32 intermediates). What the torch front
    end runs, and what `tests/models/catalog.py` runs to list the ops left unlowered."""
    import torch

    table = torch.export.default_decompositions()
    for key in list(table.keys()):
        if lowerable(str(key)):
            del table[key]
    return table


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")
