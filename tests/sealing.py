"""Seal a directory a test wrote or changed by hand into one build, as compile would have.

`spyrec run` reads only files of the build its manifest records (spyrec/build_record.py): a
file edited after compile is refused as another build's. Tests that edit a file on purpose (to
see what the simulator says about a damaged field) call `seal` afterwards, so the run gets as
far as the field; tests of the build check itself do not.
"""

from __future__ import annotations

import json
from pathlib import Path

from spyrec.build_record import STAMP_BYTES, build_id, file_record, stamp

STAMPED = ("weights.bin", "report.json", "report.txt")
NOT_RECORDED = ("manifest.json", "outputs.npz")


def seal(out: Path) -> str:
    """Record every file of `out` in its manifest's build record, stamp the files that carry
    the id, and return the new id. weights.bin keeps its tensors' bytes (an old stamp, if it
    has one, is replaced); its tensors' digests are not recomputed."""
    out = Path(out)
    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    weights_bytes = (manifest.get("weights") or {}).get("bytes", 0)
    files = {}
    for entry in sorted(out.iterdir()):
        if entry.name in NOT_RECORDED or entry.name.startswith(".") or not entry.is_file():
            continue
        files[entry.name] = {"stamp": True} if entry.name in STAMPED else \
            file_record(entry.read_bytes())
    manifest["build"] = {"id": "", "files": files}
    manifest["build"]["id"] = new = build_id(manifest)
    path.write_text(json.dumps(manifest, indent=1))
    weights = out / "weights.bin"
    if weights.is_file():
        data = weights.read_bytes()
        if len(data) == weights_bytes + STAMP_BYTES:
            data = data[:weights_bytes]
        weights.write_bytes(data + stamp(new))
    for name in ("report.json",):
        if (out / name).is_file():
            report = json.loads((out / name).read_text())
            report["build"] = new
            (out / name).write_text(json.dumps(report, indent=1))
    return new


def record(manifest: dict, stamped: tuple[str, ...] = ()) -> dict:
    """A manifest document given a build record of files that carry the id (`stamped`), its
    id computed; the caller writes those files with `stamp(id)`."""
    manifest = dict(manifest, build={"id": "", "files": {n: {"stamp": True} for n in stamped}})
    manifest["build"]["id"] = build_id(manifest)
    return manifest
