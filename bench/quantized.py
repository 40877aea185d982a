"""8-bit weights at Granite-8B geometry (issue 60): bytes stored, bytes read, estimate.

Programs: Granite-8B width (bench/scale.py's `granite`, tied embedding) at `--depth` layers
(4 by default), every linear of the decoder layers quantized by `tests/quantized.py`
(`fp8_channel`: float8_e4m3fn with a per-output-channel scale; `int8_group128`: int8 with a
scale per 128 inputs; `fp16`: unquantized), the embedding / lm_head fp16. Each is exported
and compiled in a fresh process; the table reads manifest.json and report.json:

- held_mib: the bytes the program's tensors hold (every constant's host bytes: 8-bit weights,
  their scales, the 16-bit embedding, norms; a weight's compile-time copy in a second layout
  or padded counts once, as in bench/hardware_plans.py);
- bin/held: weights.bin's size over that (target <= 1.05);
- est_us: the estimate (`cost.totals.time_us`); bound_us: (held bytes + the static cache's
  bytes) / HBM bandwidth, plus one bundle launch; est/bound (decode target <= 1.1);
- est/fp16: the estimate over the fp16 program's of the same phase (prefill target <= 1.0);
- check: `spyrec run --check` exit code (with `--check`; minutes at this size).

Usage: `python bench/quantized.py [--forms fp16,fp8_channel,int8_group128]
[--phases decode,prefill] [--depth 4] [--check] [--work DIR]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import scale  # noqa: E402
from spyrec.costmodel import DEFAULT_PARAMS  # noqa: E402

PY = sys.executable
QUANTIZE = ("model = getattr(tf, cls + head)(config).eval()\n",
            "model = getattr(tf, cls + head)(config).eval()\n"
            "sys.path.insert(0, {root!r})\n"
            "from tests.quantized import quantize\n"
            "if {form!r} != 'fp16':\n"
            "    quantize(model, {form!r})\n")


def export(work: Path, form: str, phase: str, depth: int) -> tuple[Path, Path]:
    name = f"granite_{form}_{phase}_d{depth}"
    pt2, npz = work / f"{name}.pt2", work / f"{name}.npz"
    spec = dict(scale.MODELS["granite"], tie_word_embeddings=True)
    script = scale.EXPORT.replace(QUANTIZE[0], QUANTIZE[1].format(root=str(ROOT), form=form))
    script = script.format(spec=spec, depth=depth, decode=phase == "decode",
                           cache=scale.CACHE_SLOTS, position=scale.DECODE_POSITION,
                           tokens=scale.PREFILL_TOKENS, pt2=str(pt2), npz=str(npz))
    subprocess.run([PY, "-c", script], check=True, cwd=ROOT)
    return pt2, npz


def measure(work: Path, form: str, phase: str, depth: int, check: bool) -> dict:
    pt2, npz = export(work, form, phase, depth)
    out = work / f"{form}_{phase}"
    cli = [PY, "-m", "spyrec"]
    subprocess.run(cli + ["compile", str(pt2), "-o", str(out), "-q"], check=True, cwd=ROOT)
    manifest = json.loads((out / "manifest.json").read_text())
    report = json.loads((out / "report.json").read_text())
    copies = {r["constant"] for r in report.get("restickify", {}).get("constant_layouts", [])}
    copies |= {r["padded"] for r in report.get("split_padding", {}).get("list", [])
               if r.get("constant")}          # compile-time copies of a weight: held once
    held = sum(_host_bytes(t) for t in manifest["tensors"]
               if t["role"] == "constant" and t["name"] not in copies)
    mutated = manifest.get("mutated_buffers") or {}        # the KV caches, read per step
    cache = sum(t["device_bytes"] for t in manifest["tensors"]
                if t["name"] in mutated or (t.get("source") or "") in mutated)
    est = report["cost"]["totals"]["time_us"]
    bound = (held + cache) / DEFAULT_PARAMS.hbm_bytes_per_s * 1e6 + \
        DEFAULT_PARAMS.bundle_overhead_us
    row = {"form": form, "phase": phase, "held_mib": held / 2 ** 20,
           "bin_over_held": (out / "weights.bin").stat().st_size / held,
           "est_us": est, "bound_us": bound, "est_over_bound": est / bound,
           "weights": [(r["weight"], r["format"], r["bytes"])
                       for r in report.get("dequant_matmul") or []]}
    if check:
        row["check"] = subprocess.run(cli + ["run", str(out), "--inputs", str(npz), "--check",
                                             "-q"], cwd=ROOT).returncode
    shutil.rmtree(out)
    pt2.unlink()
    return row


def _host_bytes(t: dict) -> int:
    n = 1
    for d in t["host_shape"]:
        n *= d
    size = {"float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1, "float32": 4, "int32": 4,
            "int64": 8}.get(t["host_dtype"], 2)
    return n * size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--forms", default="fp16,fp8_channel,int8_group128")
    ap.add_argument("--phases", default="decode,prefill")
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--work", type=Path)
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="spyrec-quant-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for phase in args.phases.split(","):
            for form in args.forms.split(","):
                rows.append(measure(work, form, phase, args.depth, args.check))
                _print(rows)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _print(rows: list[dict]) -> None:
    fp16 = {r["phase"]: r["est_us"] for r in rows if r["form"] == "fp16"}
    print(f"{'form':<14} {'phase':<8} {'held_mib':>9} {'bin/held':>8} {'est_us':>10} "
          f"{'bound_us':>10} {'est/bound':>9} {'est/fp16':>8} check")
    for r in rows:
        ratio = r["est_us"] / fp16[r["phase"]] if r["phase"] in fp16 else float("nan")
        print(f"{r['form']:<14} {r['phase']:<8} {r['held_mib']:9.1f} {r['bin_over_held']:8.3f} "
              f"{r['est_us']:10.1f} {r['bound_us']:10.1f} {r['est_over_bound']:9.3f} "
              f"{ratio:8.3f} {r.get('check', '-')}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
