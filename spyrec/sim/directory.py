"""Which reader a directory needs, decided once, above both readers.

A directory given to `spyrec run` or `spyrec inspect` is either a spyrec output directory
(`loader.py`) or a bundle another compiler wrote with a hand-written manifest (`foreign.py`,
docs/formats.md "Reference bundles"). The two readers share the helpers below them (`files.py`,
`program.py`, `superdsc.py`, `bundle.py`) and never import each other; this module is the one
place that looks at a directory and picks one.

    open_output_dir(out_dir) -> OutputFiles     the directory opened once: a run reads every
                                                file through it (files.py)
    read_output_dir(out_dir) -> OutputProgram   every file read and checked
    load_output_dir(out_dir) -> OutputProgram   the same, then verified statically (what a run
                                                and the cost model start from)

`out_dir` may be a path or an `OutputFiles` a command opened first.
"""

from __future__ import annotations

import json
from pathlib import Path

from spyrec.errors import InputFileError
from spyrec.hostmem import no_automatic_collections
from spyrec.sim.files import OutputFiles
from spyrec.sim.foreign import DOCS, FORMAT, read_reference_dir
from spyrec.sim.loader import read_spyrec_dir
from spyrec.sim.program import OutputProgram
from spyrec.sim.verify import verify_program


def open_output_dir(out_dir: str | Path | OutputFiles) -> OutputFiles:
    """The directory opened once (`files.OutputFiles`), every later read through it."""
    return out_dir if isinstance(out_dir, OutputFiles) else OutputFiles(out_dir)


def load_output_dir(out_dir: str | Path | OutputFiles) -> OutputProgram:
    """Read and statically verify an output directory (sim/verify.py), with the cyclic
    collector paused (`no_automatic_collections`: the specs it builds make no cycles)."""
    with no_automatic_collections():
        program = read_output_dir(out_dir)
        verify_program(program)
    return program


def read_output_dir(out_dir: str | Path | OutputFiles) -> OutputProgram:
    """The program of a spyrec output directory or of a reference bundle, every file checked
    (not yet verified: `load_output_dir`)."""
    files = open_output_dir(out_dir)
    check_manifest_present(files)
    if is_foreign(files):
        return read_reference_dir(files.path)
    return read_spyrec_dir(files)


def check_output_directory(out_dir: Path) -> None:
    """`out_dir` is a directory that can be opened (`inspect` starts here)."""
    OutputFiles(out_dir).close()


def check_manifest_present(files: OutputFiles) -> None:
    """A directory with a bundle but no manifest is most likely the reference's own dump."""
    if not files.exists("manifest.json") and files.exists("bundle.mlir"):
        raise InputFileError(f"{files.label('manifest.json')}: missing; if spyrec compile wrote "
                             f"this directory, re-run it; if another compiler wrote the bundle, "
                             f"write a manifest.json by hand (format {FORMAT}: tensors, "
                             f"addresses, inputs, outputs; {DOCS})")


def is_foreign(out_dir: str | Path | OutputFiles) -> bool:
    """Whether OUT/manifest.json is a hand-written foreign manifest (anything else, even an
    unreadable file, goes to spyrec's reader, which reports it)."""
    try:
        text = open_output_dir(out_dir).read_text("manifest.json")
    except InputFileError:
        return False
    if FORMAT not in text:
        return False
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(data, dict) and data.get("format") == FORMAT
