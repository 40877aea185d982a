"""Coarse tiling: HBM bytes moved and estimated time, tiled vs untiled, for every shipped
tiling config (configs/tiling/<name>.yaml with its program samples/tiling.py <name>).

Compulsory bytes: every input and constant read once, every output written once (the floor
no plan can go below). The seed example must move exactly its compulsory 33,554,432 bytes
tiled (issue 8 §4). Numbers are the cost model's (spyrec/sim/cost.py), from report.json.

    python bench/tiling.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from samples.tiling import TILING_SAMPLES  # noqa: E402
from spyrec.compiler import CompileOptions  # noqa: E402
from spyrec.driver import compile_and_estimate  # noqa: E402


def compulsory_bytes(out: Path) -> int:
    manifest = json.loads((out / "manifest.json").read_text())
    return sum(t["device_bytes"] for t in manifest["tensors"]
               if t["role"] in ("input", "constant") or t["name"] in manifest["outputs"])


def measure(pt2: Path, out: Path, tiling: Path | None) -> dict:
    report = compile_and_estimate(pt2, out, CompileOptions(verbose=-1, tiling=tiling))
    totals = report["cost"]["totals"]
    lx = report.get("scratchpad") or {}
    return {"hbm": totals["hbm_read_bytes"] + totals["hbm_write_bytes"],
            "time_us": totals["time_us"], "executions": totals["executions"],
            "lx_peak": lx.get("peak_bytes_per_core", 0), "compulsory": compulsory_bytes(out)}


def main() -> None:
    print("| config | compulsory B | untiled HBM B | tiled HBM B | tiled / compulsory "
          "| untiled us | tiled us | executions (tiled) | LX peak B/core |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(TILING_SAMPLES):
            module, inputs = TILING_SAMPLES[name]()
            pt2 = Path(tmp) / f"{name}.pt2"
            torch.export.save(torch.export.export(module.eval(), inputs), str(pt2))
            flat = measure(pt2, Path(tmp) / f"{name}-flat", None)
            tiled = measure(pt2, Path(tmp) / f"{name}-tiled",
                            ROOT / "configs" / "tiling" / f"{name}.yaml")
            print(f"| {name} | {tiled['compulsory']:,} | {flat['hbm']:,} | {tiled['hbm']:,} "
                  f"| {tiled['hbm'] / tiled['compulsory']:.2f} | {flat['time_us']:.1f} "
                  f"| {tiled['time_us']:.1f} | {tiled['executions']} | {tiled['lx_peak']:,} |")


if __name__ == "__main__":
    main()
