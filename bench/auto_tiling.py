"""`--tiling auto` against no tiling: device-memory (HBM) traffic by the cost model
(report.json cost.totals), compulsory traffic, the groups chosen, and how long the choice
took (the coarse_tiling pass's wall time, which is the choice plus the tiling itself) next to
the whole compile, for every sample and decoder stacks of depth 1, 2 and 8.

    python bench/auto_tiling.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.tiling import compulsory_bytes  # noqa: E402
from samples.models import SAMPLES, decoder  # noqa: E402
from samples.tiling import TILING_SAMPLES  # noqa: E402
from spyrec.compiler import CompileOptions  # noqa: E402
from spyrec.driver import compile_and_estimate  # noqa: E402


def measure(pt2: Path, out: Path, tiling: Path | None) -> dict:
    t0 = time.perf_counter()
    report = compile_and_estimate(pt2, out, CompileOptions(verbose=-1, tiling=tiling))
    wall = time.perf_counter() - t0
    totals = report["cost"]["totals"]
    tiling_ms = next(p["wall_ms"] for p in report["passes"] if p["name"] == "coarse_tiling")
    auto = (report.get("tiling") or {}).get("auto") or {}
    return {"hbm": totals["hbm_read_bytes"] + totals["hbm_write_bytes"],
            "compulsory": compulsory_bytes(out), "wall_ms": wall * 1e3,
            "tiling_ms": tiling_ms, "groups": len(auto.get("groups", [])),
            "priced": auto.get("candidates_priced", 0)}


def programs():
    for name in sorted(SAMPLES):
        yield name, SAMPLES[name]
    for name in sorted(TILING_SAMPLES):
        if name != "seed_add_mul":      # the same program as add_mul_fp16
            yield name, TILING_SAMPLES[name]
    for depth in (1, 2, 8):
        yield f"decoder depth {depth}", lambda depth=depth: decoder(depth)


def main() -> None:
    print("| program | compulsory B | untiled HBM B | auto HBM B | auto / untiled "
          "| auto / compulsory | groups | candidates | coarse_tiling ms | compile ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in programs():
            module, inputs = make()
            pt2 = Path(tmp) / "model.pt2"
            torch.export.save(torch.export.export(module.eval(), inputs), str(pt2))
            flat = measure(pt2, Path(tmp) / "flat", None)
            auto = measure(pt2, Path(tmp) / "auto", Path("auto"))
            print(f"| {name} | {auto['compulsory']:,} | {flat['hbm']:,} | {auto['hbm']:,} "
                  f"| {auto['hbm'] / flat['hbm']:.2f} | {auto['hbm'] / auto['compulsory']:.2f} "
                  f"| {auto['groups']} | {auto['priced']} | {auto['tiling_ms']:.0f} "
                  f"| {auto['wall_ms']:.0f} |", flush=True)
            for sub in ("flat", "auto"):
                shutil.rmtree(Path(tmp) / sub)


if __name__ == "__main__":
    main()
