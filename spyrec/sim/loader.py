"""Read a spyrec output directory from disk: manifest.json, every sdsc_<n>.json, the bundles.

This module only reads files: each JSON file is parsed and checked against its schema
(`files.py`), each bundle parsed and verified by a real MLIR parser and interpreted
(`bundle.py`), and the weights file checked against the manifest's size. The documents then go
to the builder every program goes through (`program.py`), which the compiler's cost estimate
calls with its in-memory documents instead: a check that is not about files lives there, so
both paths make it. Whether a directory is spyrec's or a reference bundle is decided above
this reader and `foreign.py`, in `directory.py`.
"""

from __future__ import annotations

import re
from pathlib import Path

from spyrec.errors import InputFileError
from spyrec.sim.files import read_json, read_text
from spyrec.sim.program import OutputProgram, Weights, build_output_program, read_manifest

MANIFEST_FORMAT = "spyrec-manifest/3"


def read_spyrec_dir(out_dir: Path) -> OutputProgram:
    """The program of spyrec output directory `out_dir`: manifest, every op listed by a kernel
    and the flattened bundles, every file checked; a program with symbolic lengths at their
    maxima (a run rebinds them: runner.py `at_lengths`)."""
    from spyrec.sim.bundle import read_bundle   # xDSL: imported once a directory is read

    path = out_dir / "manifest.json"
    _check_format(path, read_text(path))
    manifest, weights = read_manifest(path, read_json(path, "manifest"))
    check_weights_file(out_dir, weights)
    return build_output_program(out_dir, manifest, weights,
                                lambda name: read_json(out_dir / name, "sdsc"),
                                lambda name: read_bundle(out_dir / name, manifest.maxima()))


def _check_format(path: Path, text: str) -> None:
    """A directory an older spyrec wrote (manifest format 1: constants.npz, program.pt2) is
    named as such rather than failing the schema on its first difference."""
    match = re.search(r'"format"\s*:\s*"(spyrec-manifest/[^"]*)"', text[:4096])
    if match and match.group(1) != MANIFEST_FORMAT:
        raise InputFileError(f"{path}: format {match.group(1)}, written by another spyrec "
                             f"version; this one reads {MANIFEST_FORMAT} (weights.bin in device "
                             f"form): re-run spyrec compile")


def check_weights_file(out_dir: Path, weights: Weights | None) -> None:
    """weights.bin is there and as long as the manifest says (a truncated copy is caught here,
    before anything runs, not as a short read in the middle)."""
    if weights is None or not weights.entries:
        return
    path = out_dir / weights.file
    try:
        size = path.stat().st_size
    except OSError:
        raise InputFileError(f"{path}: missing; it holds the program's weights "
                             f"(manifest.json $.weights): re-run spyrec compile") from None
    if not path.is_file() or size != weights.nbytes:
        raise InputFileError(f"{path}: {size} bytes, manifest.json says {weights.nbytes} "
                             f"($.weights.bytes); the file is truncated or damaged: re-run "
                             f"spyrec compile")
