"""Scratchpad (LX) planning: HBM traffic / compulsory traffic for every sample, with LX for
per-tile buffers only (`scratchpad_planning.intermediates=false`, issue 8) and with every
intermediate whose per-core slice fits (issue 10 §1). Tiling samples are compiled with their
shipped config (configs/tiling/<name>.yaml). Numbers are the cost model's, from report.json;
compulsory = every input and constant read once, every output written once.

    python bench/scratchpad.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from samples.models import SAMPLES  # noqa: E402
from samples.tiling import TILING_SAMPLES  # noqa: E402
from spyrec.compiler import CompileOptions  # noqa: E402
from spyrec.driver import compile_and_estimate  # noqa: E402

OFF = ["scratchpad_planning.intermediates=false"]


def compulsory_bytes(out: Path) -> int:
    manifest = json.loads((out / "manifest.json").read_text())
    return sum(t["device_bytes"] for t in manifest["tensors"]
               if t["role"] in ("input", "constant") or t["name"] in manifest["outputs"])


def measure(pt2: Path, out: Path, tiling: Path | None, sets: list[str]) -> dict:
    report = compile_and_estimate(pt2, out, CompileOptions(verbose=-1, tiling=tiling, sets=sets))
    totals = report["cost"]["totals"]
    lx = report.get("scratchpad") or {}
    rows = lx.get("buffers", [])
    return {"hbm": totals["hbm_read_bytes"] + totals["hbm_write_bytes"],
            "time_us": totals["time_us"], "lx_peak": lx.get("peak_bytes_per_core", 0),
            "placed": sum(r["placed"] for r in rows), "rows": len(rows),
            "compulsory": compulsory_bytes(out)}


def programs():
    for name in sorted(SAMPLES):
        yield name, SAMPLES[name], None
    for name in sorted(TILING_SAMPLES):
        yield f"tiled {name}", TILING_SAMPLES[name], ROOT / "configs" / "tiling" / f"{name}.yaml"


def main() -> None:
    print("| program | compulsory B | HBM B before | HBM B after | before / compulsory "
          "| after / compulsory | us before | us after | LX placed | LX peak B/core |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, make, tiling) in enumerate(programs()):
            module, inputs = make()
            pt2 = Path(tmp) / f"p{i}.pt2"
            torch.export.save(torch.export.export(module.eval(), inputs), str(pt2))
            old = measure(pt2, Path(tmp) / f"p{i}-old", tiling, OFF)
            new = measure(pt2, Path(tmp) / f"p{i}-new", tiling, [])
            c = new["compulsory"]
            print(f"| {name} | {c:,} | {old['hbm']:,} | {new['hbm']:,} | {old['hbm'] / c:.2f} "
                  f"| {new['hbm'] / c:.2f} | {old['time_us']:.1f} | {new['time_us']:.1f} "
                  f"| {new['placed']}/{new['rows']} | {new['lx_peak']:,} |", flush=True)


if __name__ == "__main__":
    main()
