"""`spyrec verify OUT`: every file of an output directory checked against its build record.

A run checks what it can afford on every run (docs/formats.md, "One build"): each file it reads
is the one the manifest records (the sdsc files and the bundle by SHA-256; weights.bin by its
size and the build stamp after its tensors). It does not hash weights.bin, which is most of a
directory (16 GB at Granite-8B width): that is this command's job. Here every file the record
lists is hashed, each stored constant's bytes are compared with its checksum in
`weights.tensors[].crc32`, the reports must carry the build's id, the manifest must hash to
its own id (an edit anywhere in it shows), and the program is loaded and verified as a run
would (schemas, bundle, op table, core splits, start addresses). Files the record does not list
are the user's: named, left alone, not a failure.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from spyrec.build_record import STAMP_BYTES, build_id, crc32_range, read_stamp, sha256_range
from spyrec.errors import SpyrecError
from spyrec.outdir import RUN_OUTPUTS
from spyrec.sim.files import OutputFiles, parse_json
from spyrec.sim.loader import check_format

# not in the record, by design: the record's own file, and what `spyrec run` writes
NOT_RECORDED = ("manifest.json", RUN_OUTPUTS)


@dataclass
class Verdict:
    """What `verify` found: the build, every problem (empty: all is as compile wrote it),
    the files it checked and the bytes it hashed, the files that are not the build's."""

    out: Path
    build: str | None
    problems: list[str] = field(default_factory=list)
    files: int = 0
    hashed_bytes: int = 0
    tensors: int = 0
    unlisted: list[str] = field(default_factory=list)
    foreign: bool = False

    def summary(self) -> str:
        if self.problems:
            return (f"{self.out}: {len(self.problems)} problem(s): " +
                    "; ".join(self.problems) + ". Compile it again.")
        if self.foreign:
            return (f"{self.out}: a reference bundle (hand-written manifest, no build record): "
                    f"its files read and the program verified statically")
        extra = f"; not the build's, left alone: {', '.join(self.unlisted)}" \
            if self.unlisted else ""
        return (f"{self.out}: build {self.build}: {self.files} files as compile wrote them "
                f"({self.hashed_bytes} bytes hashed, {self.tensors} weight tensors), the "
                f"program verified{extra}")

    def document(self) -> dict:
        return {"directory": str(self.out), "build": self.build, "ok": not self.problems,
                "problems": self.problems, "files": self.files,
                "hashed_bytes": self.hashed_bytes, "tensors": self.tensors,
                "unlisted": self.unlisted, "foreign": self.foreign}


def verify_directory(out: str | Path, step: Callable[[str], None] = lambda _: None) -> Verdict:
    """Check every file of output directory `out` (module docstring); `step` hears what is
    being hashed. Problems with a file are collected, one line each; a directory that
    cannot be read at all raises, as `spyrec run` would."""
    from spyrec.sim.directory import is_foreign, load_output_dir

    files = OutputFiles(out)
    verdict = Verdict(files.path, None)
    if is_foreign(files):
        load_output_dir(files)
        verdict.foreign = True
        return verdict
    text = files.read_text("manifest.json")
    check_format(files.label("manifest.json"), text)    # an older spyrec's: say so first
    manifest = parse_json(text, files.label("manifest.json"))
    record = manifest.get("build") if isinstance(manifest, dict) else None
    if isinstance(record, dict) and isinstance(record.get("id"), str):
        verdict.build = record["id"]
        if build_id(manifest) != record["id"]:
            verdict.problems.append("manifest.json: changed since compile wrote it (its "
                                    "content does not hash to its build id)")
        _check_files(files, manifest, verdict, step)
    if not verdict.problems:        # else the load meets the same problem again
        try:
            load_output_dir(OutputFiles(files.path))
        except SpyrecError as e:
            verdict.problems.append(str(e))
    return verdict


def _check_files(files: OutputFiles, manifest: dict, verdict: Verdict,
                 step: Callable[[str], None]) -> None:
    listed = manifest["build"].get("files") or {}
    for name, entry in sorted(listed.items()):
        step(f"checking {name}")
        try:
            problem = _check_file(files, manifest, name, entry, verdict)
        except SpyrecError as e:
            problem = str(e)
        if problem:
            verdict.problems.append(problem)
        else:
            verdict.files += 1
    present = sorted(os.listdir(files.fd))
    verdict.unlisted = [n for n in present if n not in listed and n not in NOT_RECORDED]


def _check_file(files: OutputFiles, manifest: dict, name: str, entry: dict,
                verdict: Verdict) -> str | None:
    """The problem with file `name` of the record, if any."""
    if "sha256" in entry:
        fd = files.open(name)
        try:
            size = os.fstat(fd).st_size
            digest = sha256_range(fd, 0, size)
        finally:
            os.close(fd)
        verdict.hashed_bytes += size
        if (size, digest) != (entry["bytes"], entry["sha256"]):
            return (f"{name}: not as compile wrote it ({size} bytes, SHA-256 {digest[:12]}...; "
                    f"the record says {entry['bytes']} bytes, {entry['sha256'][:12]}...)")
        return None
    if name == manifest.get("weights", {}).get("file"):
        return _check_weights(files, manifest, verdict)
    text = files.read_text(name)
    build = manifest["build"]["id"]
    if name.endswith(".json"):
        doc = json.loads(text) if text.strip() else None
        stamped = isinstance(doc, dict) and doc.get("build") == build
    else:
        stamped = f"build {build}" in text.splitlines()[:3]
    return None if stamped else f"{name}: does not carry build {build[:12]} (another compile's)"


def _check_weights(files: OutputFiles, manifest: dict, verdict: Verdict) -> str | None:
    weights = manifest["weights"]
    fd = files.open(weights["file"])
    try:
        size = os.fstat(fd).st_size
        if size != weights["bytes"] + STAMP_BYTES:
            return (f"{weights['file']}: {size} bytes, the manifest says {weights['bytes']} "
                    f"plus the {STAMP_BYTES}-byte stamp (truncated or damaged)")
        if read_stamp(fd, weights["bytes"]) != manifest["build"]["id"]:
            return f"{weights['file']}: its stamp names another build (or none)"
        bad = []
        for entry in weights["tensors"]:
            if "offset" not in entry:
                continue
            verdict.tensors += 1
            verdict.hashed_bytes += entry["bytes"]
            if crc32_range(fd, entry["offset"], entry["bytes"]) != entry.get("crc32"):
                bad.append(entry["name"])
        if bad:
            return (f"{weights['file']}: {len(bad)} tensor(s) differ from what compile wrote: "
                    f"{', '.join(bad[:5])}{', ...' if len(bad) > 5 else ''}")
        return None
    finally:
        os.close(fd)
