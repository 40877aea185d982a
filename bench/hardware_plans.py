"""Hardware plans (issue 28): are the plans at real geometry ones the card can run, and how far
from the roofline are they?

Programs: Granite-8B width (hidden 4096, 32/8 heads, MLP 12800, vocab 49155, tied embeddings
as ibm-granite/granite-3.3-8b) at 1 and 4 layers, Llama-3.2-1B (tied) at 16 layers; a prefill
of 128 tokens and a static-cache decode step each (bench/scale.py builds and exports them:
random fp16 weights from the published configs, no download). Each is compiled in a fresh
process; the table then reads report.json and manifest.json:

- est_us: the estimate (`cost.totals.time_us`) under the cost model's default per-core
  bandwidth cap (`CostParams.core_bytes_per_s`), and the same plan re-priced with the cap at
  card/32, card/8 and the card (so the plan's sensitivity to the one parameter without a
  public figure is visible);
- roof_us: the roofline, max(compulsory bytes / card bandwidth, flops / PT peak) + one bundle
  launch; compulsory = every program input, output and constant read or written once (a
  constant's compile-time copy in a second layout, or its padded copy, is the same weights
  and counts once: the bound is the program's, not the plan's);
- ratio: est / roof (issue 28's targets: decode <= 1.1, prefill <= 1.3);
- span_mib: the largest per-core span of any op (report.json `work_division.max_span_bytes`;
  the hardware's limit is 256 MiB);
- const_restick: device restickifies of a constant (target 0);
- below the table: the matmuls reading at least 1 MiB from HBM (lm_head, MLP, attention
  projections) that use fewer than 32 cores, with their core counts.

Usage: `python bench/hardware_plans.py [--programs granite:1,granite:4,llama1b:16]
[--phases prefill,decode] [--work DIR] [--keep] [--reuse]`. Files go to a temporary directory
deleted at the end (gigabytes) unless `--work`/`--keep`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import scale  # noqa: E402
from spyrec.costmodel import DEFAULT_PARAMS  # noqa: E402

PY = sys.executable
CAPS = (("card/32", DEFAULT_PARAMS.hbm_bytes_per_s / 32),
        ("card/8", DEFAULT_PARAMS.hbm_bytes_per_s / 8),
        ("card", DEFAULT_PARAMS.hbm_bytes_per_s))
BIG_WEIGHT = 1 << 20


def export(work: Path, model: str, phase: str, depth: int, reuse: bool) -> tuple[Path, Path]:
    name = f"{model}_{phase}_d{depth}"
    pt2, npz = work / f"{name}.pt2", work / f"{name}.npz"
    if reuse and pt2.exists() and npz.exists():
        return pt2, npz
    spec = dict(scale.MODELS[model])
    spec["tie_word_embeddings"] = True        # both real models tie lm_head to the embedding
    script = scale.EXPORT.format(spec=spec, depth=depth, decode=phase == "decode",
                                 cache=scale.CACHE_SLOTS, position=scale.DECODE_POSITION,
                                 tokens=scale.PREFILL_TOKENS, pt2=str(pt2), npz=str(npz))
    scale.measured([PY, "-c", script], f"export of {name}", 20.0)
    return pt2, npz


def compulsory_bytes(manifest: dict, report: dict) -> int:
    """Bytes every program input, output and constant moves once; a constant that is another
    one's compile-time copy (a second layout, padding) counts once."""
    copies = {row["constant"] for row in report.get("restickify", {}).get("constant_layouts", [])}
    copies |= {row["padded"] for row in report.get("split_padding", {}).get("list", [])
               if row.get("constant")}
    return sum(t["device_bytes"] for t in manifest["tensors"]
               if t["name"] not in copies and (t["role"] in ("input", "constant")
                                               or t["name"] in manifest["outputs"]))


def roofline_us(compulsory: int, flops: int) -> float:
    p = DEFAULT_PARAMS
    return max(compulsory / p.hbm_bytes_per_s, flops / p.pt_peak_flops_per_card) * 1e6 \
        + p.bundle_overhead_us


def repriced_us(out: Path) -> dict[str, float]:
    """The plan in `out` priced again with each per-core cap of CAPS."""
    from spyrec.sim.directory import read_output_dir
    from spyrec.sim.program_cost import program_cost

    program = read_output_dir(out)
    return {label: program_cost(program, replace(DEFAULT_PARAMS, core_bytes_per_s=cap))
            ["totals"]["time_us"] for label, cap in CAPS}


def narrow_matmuls(report: dict) -> list[str]:
    """Matmuls reading at least BIG_WEIGHT bytes from HBM on fewer than 32 cores, with the
    reason work division gives (report.json `work_division.ops[].fewer_cores`)."""
    why = {row["op"]: row.get("fewer_cores", "-") for row in report["work_division"]["ops"]}
    return [f"{row['name']} on {row['cores_used']}: {why.get(row['name'], '-')}"
            for row in report["cost"]["ops"]
            if row["op"] == "batchmatmul" and row["cores_used"] < 32
            and row["hbm_read_bytes"] >= BIG_WEIGHT]


def bench_one(work: Path, model: str, phase: str, depth: int, reuse: bool,
              keep: bool) -> dict:
    pt2, npz = export(work, model, phase, depth, reuse)
    out = work / f"{pt2.stem}_out"
    try:
        compile_s, compile_gb = scale.measured(
            [PY, "-m", "spyrec", "compile", str(pt2), "-o", str(out), "-q"],
            f"spyrec compile of {pt2.stem}", 20.0)
        report = json.loads((out / "report.json").read_text())
        manifest = json.loads((out / "manifest.json").read_text())
        totals = report["cost"]["totals"]
        roof = roofline_us(compulsory_bytes(manifest, report), totals["flops"])
        caps = repriced_us(out)
        restick = report.get("restickify", {}).get("list", [])
        constants = {t["name"] for t in manifest["tensors"] if t["role"] == "constant"}
        row = {"program": pt2.stem, "compile_s": compile_s, "compile_gb": compile_gb,
               "est_us": totals["time_us"], "roof_us": roof, "ratio": totals["time_us"] / roof,
               **{f"est_{label}": caps[label] for label, _ in CAPS},
               "span_mib": report.get("work_division", {}).get("max_span_bytes", float("nan"))
               / (1 << 20),
               "const_restick": sum(1 for r in restick if r["tensor"] in constants),
               "narrow": narrow_matmuls(report)}
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
    return row


COLUMNS = [("program", "{:<22}"), ("compile_s", "{:>9.1f}"), ("compile_gb", "{:>10.2f}"),
           ("est_us", "{:>10.1f}"), ("roof_us", "{:>10.1f}"), ("ratio", "{:>6.3f}"),
           *((f"est_{label}", "{:>12.1f}") for label, _ in CAPS),
           ("span_mib", "{:>8.1f}"), ("const_restick", "{:>13}")]


def table(rows: list[dict]) -> str:
    lines = scale.table(rows, COLUMNS).splitlines()
    for r in rows:
        for line in r["narrow"]:
            lines.append(f"  {r['program']}: {line}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", default="granite:1,granite:4,llama1b:16",
                    help="comma-separated MODEL:DEPTH (models: granite, llama1b)")
    ap.add_argument("--phases", default="decode,prefill")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the output directories")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse .pt2/.npz files already in --work")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="spyrec-hw-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for item in args.programs.split(","):
            model, depth = item.split(":")
            for phase in args.phases.split(","):
                rows.append(bench_one(work, model, phase, int(depth), args.reuse, args.keep))
                print(table(rows[-1:]).splitlines()[1], file=sys.stderr, flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"per-core cap by default {DEFAULT_PARAMS.core_bytes_per_s / 1e9:g} GB/s "
          f"(est_us); est_card/32 etc. re-price the same plan; roof_us = max(compulsory bytes / "
          f"{DEFAULT_PARAMS.hbm_bytes_per_s / 1e9:g} GB/s, flops / PT peak) + bundle launch")
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    main()
