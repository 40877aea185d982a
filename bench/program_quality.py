"""Program quality (issue 10 §5): how far each compiled program is from the roofline.

For every sample (samples/models.py SAMPLES; samples/tiling.py TILING_SAMPLES without and
with its config in configs/tiling/) and decoder stacks of depth 1, 2 and 8: HBM traffic, the
compulsory traffic (every input and constant read once, every output written once), their
ratio; the estimated time and the roofline bound
    max(compulsory / HBM bandwidth, flops / PT peak) + one bundle launch
(constants from spyrec/sim/cost.py and spyrec/device.py), their ratio; LX peak per core; HBM
footprint (manifest hbm_bytes) with the memory_planning bound; geomeans of both ratios.
Numbers are the cost model's, from report.json (flops: the compiled program's, so work a
plan repeats counts against the bound too; the copies of a replicated op count once, their
work being the op's own). The geomeans print three decimals: the targets are 1.5 and 1.3.

    python bench/program_quality.py
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from samples.models import SAMPLES, decoder  # noqa: E402
from samples.tiling import TILING_SAMPLES  # noqa: E402
from spyrec.compiler import CompileOptions  # noqa: E402
from spyrec.driver import compile_and_estimate  # noqa: E402
from spyrec.device import HBM_BYTES_PER_S  # noqa: E402
from spyrec.costmodel import DEFAULT_PARAMS  # noqa: E402

DEPTHS = (1, 2, 8)


def compulsory_bytes(manifest: dict) -> int:
    return sum(t["device_bytes"] for t in manifest["tensors"]
               if t["role"] in ("input", "constant") or t["name"] in manifest["outputs"])


def roofline_us(compulsory: int, flops: int) -> float:
    return max(compulsory / HBM_BYTES_PER_S, flops / DEFAULT_PARAMS.pt_peak_flops_per_card) * 1e6 \
        + DEFAULT_PARAMS.bundle_overhead_us


def measure(module, inputs, tmp: Path, name: str, tiling: Path | None = None) -> dict:
    pt2 = tmp / f"{name}.pt2"
    torch.export.save(torch.export.export(module.eval(), inputs), str(pt2))
    out = tmp / name
    report = compile_and_estimate(pt2, out, CompileOptions(verbose=-1, tiling=tiling))
    manifest = json.loads((out / "manifest.json").read_text())
    totals = report["cost"]["totals"]
    hbm = totals["hbm_read_bytes"] + totals["hbm_write_bytes"]
    need = compulsory_bytes(manifest)
    bound = roofline_us(need, totals["flops"])
    plan = report.get("memory_planning") or {}
    return {"name": name, "hbm": hbm, "compulsory": need, "traffic_ratio": hbm / need,
            "time_us": totals["time_us"], "bound_us": bound,
            "time_ratio": totals["time_us"] / bound,
            "lx_peak": (report.get("scratchpad") or {}).get("peak_bytes_per_core", 0),
            "footprint": manifest["hbm_bytes"], "footprint_bound": plan.get("bound_bytes"),
            "without_reuse": plan.get("without_reuse_bytes")}


def programs():
    """(name, module, inputs, tiling config or None), the benchmark's programs."""
    for name in sorted(SAMPLES):
        module, inputs = SAMPLES[name]()
        yield name, module, inputs, None
    for name in sorted(TILING_SAMPLES):
        config = ROOT / "configs" / "tiling" / f"{name}.yaml"
        for tiling in (None, config):
            module, inputs = TILING_SAMPLES[name]()
            yield f"{name}{' (tiled)' if tiling else ''}", module, inputs, tiling
    for depth in DEPTHS:
        module, inputs = decoder(depth)
        yield f"decoder depth {depth}", module, inputs, None


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> None:
    print("| program | HBM traffic B | compulsory B | traffic / compulsory | est. us "
          "| bound us | time / bound | LX peak B/core | HBM footprint B | footprint bound B "
          "| without reuse B |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, module, inputs, tiling) in enumerate(programs()):
            r = measure(module, inputs, Path(tmp), f"p{k}", tiling)
            rows.append(r)
            print(f"| {name} | {r['hbm']:,} | {r['compulsory']:,} | {r['traffic_ratio']:.2f} "
                  f"| {r['time_us']:.1f} | {r['bound_us']:.1f} | {r['time_ratio']:.2f} "
                  f"| {r['lx_peak']:,} | {r['footprint']:,} | {r['footprint_bound']:,} "
                  f"| {r['without_reuse']:,} |", flush=True)
    print(f"| **geomean** ({len(rows)}) | | | "
          f"**{geomean([r['traffic_ratio'] for r in rows]):.3f}** | | | "
          f"**{geomean([r['time_ratio'] for r in rows]):.3f}** | | "
          f"footprint / without reuse "
          f"{geomean([r['footprint'] / r['without_reuse'] for r in rows]):.2f} | | |")


if __name__ == "__main__":
    main()
