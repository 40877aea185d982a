"""Read a spyrec output directory from disk: manifest.json, every sdsc_<n>.json, the bundles.

This module only reads files, each through one handle on the directory (`files.OutputFiles`)
and checked against the build record the manifest holds (a file of another compile is refused,
not run): each JSON file is parsed and checked against its schema (`files.py`), each bundle
parsed and verified by a real MLIR parser and interpreted (`bundle.py`), and weights.bin
checked against the manifest's size and build stamp (`weights.py`). The documents then go to
the builder every program goes through (`program.py`), which the compiler's cost estimate
calls with its in-memory documents instead: a check that is not about files lives there, so
both paths make it. Whether a directory is spyrec's or a reference bundle is decided above
this reader and `foreign.py`, in `directory.py`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from spyrec.errors import InputFileError
from spyrec.sim.files import OutputFiles, parse_json, validate
from spyrec.sim.program import OutputProgram, build_output_program, read_manifest
from spyrec.sim.weights import WeightsFile

MANIFEST_FORMAT = "spyrec-manifest/4"


def read_spyrec_dir(files: OutputFiles | Path) -> OutputProgram:
    """The program of a spyrec output directory (opened by `files`, or its path): manifest,
    every op listed by a kernel and the flattened bundles, every file checked and of one
    build; a program with symbolic lengths at their maxima (a run rebinds them: runner.py
    `at_lengths`)."""
    from spyrec.sim.bundle import read_bundle_text   # xDSL: imported once a directory is read

    if not isinstance(files, OutputFiles):
        files = OutputFiles(files)

    path = files.label("manifest.json")
    text = files.read_text("manifest.json")
    check_format(path, text)
    doc = parse_json(text, path)
    validate(doc, "manifest", str(path))
    files.expect(doc["build"])
    manifest, weights = read_manifest(path, doc)
    weights_file = WeightsFile.open(files, weights)
    program = build_output_program(
        files.path, manifest, weights, lambda name: files.read_json(name, "sdsc"),
        lambda name: read_bundle_text(files.read_text(name), files.label(name),
                                      manifest.maxima()))
    return replace(program, files=files, weights_file=weights_file)


def check_format(path, text: str) -> None:
    """A directory an older spyrec wrote (another manifest format) is named as such rather
    than failing the schema on its first difference."""
    match = re.search(r'"format"\s*:\s*"(spyrec-manifest/[^"]*)"', text[:4096])
    if match and match.group(1) != MANIFEST_FORMAT:
        raise InputFileError(f"{path}: format {match.group(1)}, written by another spyrec "
                             f"version; this one reads {MANIFEST_FORMAT} (every file bound "
                             f"into one build): re-run spyrec compile")
